//! The Docker provider's machine-level side ([`Machine`]): the image, Docker's own checks,
//! what a crash left behind on this machine's engine, and the hosts on other machines. Front ends
//! make one with [`machine`] and hand it to the engine, which knows it only as a `dyn Machine`.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use botdesk_core::machine::{BuildProgress, Check, FoundComputer, HostAddr, HostBook, ImageBuild, Known, Machine, Reconciled};
use botdesk_core::{BotUser, ComputerError, ComputerProvider, HostName, Result};

use crate::remote::{HostProblem, RemoteEngine};
use crate::route::HostRouter;
use crate::{DockerConfig, DockerProvider};

/// An image older than this is flagged: its Chromium (run without its sandbox) misses fixes.
const IMAGE_FRESH_DAYS: i64 = 30;

/// Docker as the engine's machine, for the data directory of that label (its containers,
/// volumes and networks carry it; those of other data directories are never touched).
pub fn machine(data_dir_label: &str) -> Arc<dyn Machine> {
    let local = Arc::new(DockerProvider::new(DockerConfig::new(crate::image::image_tag(), data_dir_label)));
    Arc::new(DockerMachine { local, router: OnceLock::new() })
}

struct DockerMachine {
    /// The engine on this machine.
    local: Arc<DockerProvider>,
    /// The computers' provider, made once by [`Machine::computers`].
    router: OnceLock<Arc<HostRouter>>,
}

fn remote(addr: &HostAddr) -> RemoteEngine {
    RemoteEngine { url: addr.url.clone(), tls_dir: addr.tls_dir.clone() }
}

/// A host's problem as the provider's error: an address or certificates that cannot work are
/// the person's to fix (`Invalid`); the rest is the host being unavailable.
fn problem(name: &HostName, url: &str, p: &HostProblem) -> ComputerError {
    let line = p.line(name.as_str(), url);
    match p {
        HostProblem::Address(_) | HostProblem::Certificates(_) => ComputerError::Invalid(line),
        _ => ComputerError::Unavailable(line),
    }
}

#[async_trait]
impl Machine for DockerMachine {
    fn computers(&self, hosts: Arc<dyn HostBook>) -> Arc<dyn ComputerProvider> {
        self.router.get_or_init(|| Arc::new(HostRouter::new(self.local.clone(), hosts))).clone()
    }

    fn forget_host(&self, name: &HostName) {
        if let Some(r) = self.router.get() {
            r.forget(name);
        }
    }

    fn image_tag(&self) -> String {
        self.local.config().image.clone()
    }

    async fn image_present(&self) -> Result<bool> {
        self.local.image_present(&self.image_tag()).await
    }

    async fn build_image(&self, build: &ImageBuild, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String> {
        let opts = crate::image::BuildOptions {
            base: build.base.clone(),
            cache_dir: build.cache_dir.clone(),
            refresh: build.refresh,
            stamp: botdesk_core::civil::stamp_of(build.now_ms),
        };
        self.local.build_image(&opts, progress).await
    }

    async fn checks(&self, now_ms: i64) -> Vec<Check> {
        let tag = self.image_tag();
        let d = &self.local;
        match d.engine_version().await {
            Ok(v) => {
                let mut checks = vec![Check::pass("docker", format!("Docker {v} answers"))];
                let present = d.image_present(&tag).await;
                checks.push(match &present {
                    Ok(true) => Check::pass("image", format!("{tag} is present")),
                    Ok(false) => Check::fail("image", format!("{tag} is missing"), "run `botdesk image build` (or `cargo xtask run`)"),
                    Err(e) => Check::fail("image", e.to_string(), "check the Docker engine"),
                });
                if matches!(present, Ok(true)) {
                    checks.push(image_age_check(d, &tag, now_ms).await);
                }
                checks.push(uids_check(d, &std::fs::read_to_string("/etc/passwd").unwrap_or_default()).await);
                checks
            }
            Err(e) => vec![
                Check::fail("docker", e.to_string(), "start the Docker engine: `sudo systemctl start docker` or `sudo dockerd &`"),
                Check::fail("image", format!("{tag}: unknown while Docker is not reachable"), "start Docker first"),
            ],
        }
    }

    async fn reconcile(&self, known: &Known) -> Result<Reconciled> {
        let d = &self.local;
        let mut done = Reconciled::default();
        for found in d.list_managed().await? {
            if known.spares.contains(&found.computer) {
                continue;
            }
            if known.computers.contains(&found.computer) {
                done.found.push(FoundComputer { computer: found.computer, running: found.running, provider_ref: found.id });
            } else {
                d.remove_container(&found.id).await?;
                done.removed.push(found.computer);
            }
        }
        // A volume in use (a computer starting in another process) is left for the next time.
        done.volumes_removed = d.remove_volumes_except(&known.homes).await?;
        done.networks_removed = d.remove_networks(None, &known.computers).await?;
        Ok(done)
    }

    async fn check_host(&self, name: &HostName, addr: &HostAddr) -> Result<String> {
        remote(addr).check().await.map_err(|p| problem(name, &addr.url, &p))
    }

    async fn send_image(&self, name: &HostName, addr: &HostAddr, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<bool> {
        let there = remote(addr).client().map_err(|p| problem(name, &addr.url, &p))?;
        let tag = self.image_tag();
        if !self.local.image_present(&tag).await? {
            return Err(ComputerError::Invalid(format!("the computer image {tag} is not built here yet: run `botdesk image build` first")));
        }
        let here = self.local.client().await?;
        let report = |sent, total| progress(BuildProgress::Send { host: name.to_string(), sent, total });
        crate::remote::send_image(here, &there, &tag, &report)
            .await
            .map_err(|e| ComputerError::Unavailable(format!("host {name}: sending the computer image {tag} failed: {e}")))
    }
}

/// How old the image's packages are.
async fn image_age_check(d: &DockerProvider, tag: &str, now_ms: i64) -> Check {
    let refresh = "rebuild it with current packages: `botdesk image build --refresh` (works offline from the Debian mirror, as the first build)";
    match d.image_age_days(tag, now_ms).await {
        Ok(Some(days)) if days > IMAGE_FRESH_DAYS => {
            Check::warn("image_age", format!("the computer image's packages are {days} days old: its Chromium may miss security fixes"), refresh)
        }
        Ok(Some(days)) => Check::pass("image_age", format!("built {days} day(s) ago")),
        Ok(None) => Check::warn("image_age", "the computer image's age is unknown", refresh),
        Err(e) => Check::warn("image_age", e.to_string(), "check the Docker engine"),
    }
}

/// Whether an account of this machine shares a uid with the bots or the screen services (without
/// Docker's remapping, the computers' processes run as those host uids: such an account can read
/// the computers through `/proc/PID/root` and signal their processes). `passwd` is
/// `/etc/passwd`'s text.
async fn uids_check(d: &DockerProvider, passwd: &str) -> Check {
    match d.remaps_users().await {
        Ok(true) => return Check::pass("uids", "Docker runs the computers' users as users of their own (user-namespace remapping or rootless)"),
        Ok(false) => {}
        Err(e) => return Check::warn("uids", e.to_string(), "check the Docker engine"),
    }
    let (bots, team) = (BotUser::PRIVATE.uid, BotUser::FIRST_TEAM_UID..=BotUser::LAST_TEAM_UID);
    let ranges = [(bots..=bots, "the bots' uid"), (team.clone(), "a Team bot's uid"), (990..=990, "the screen services' uid")];
    let owners: Vec<String> = passwd
        .lines()
        .filter_map(|l| {
            let uid = l.split(':').nth(2)?.parse::<u32>().ok()?;
            let (_, whose) = ranges.iter().find(|(r, _)| r.contains(&uid))?;
            Some(format!("{} has {whose} {uid}", l.split(':').next().unwrap_or("?")))
        })
        .collect();
    if owners.is_empty() {
        return Check::pass(
            "uids",
            format!("no account of this machine has the bots' uid {bots}, a Team bot's ({}-{}) or the screen services' uid 990", team.start(), team.end()),
        );
    }
    Check::warn(
        "uids",
        format!("{}: that account can read the computers (through /proc/PID/root) and signal their processes", owners.join("; ")),
        "turn on Docker's user-namespace remapping (\"userns-remap\": \"default\" in /etc/docker/daemon.json, then restart Docker and rebuild the image) or use rootless Docker (README, Host users)",
    )
}

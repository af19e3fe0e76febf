//! `doctor`: every check a person needs before the first bot runs, each with how to fix it.

use botdesk_core::BotUser;
use botdesk_docker::DockerProvider;
use serde::Serialize;

use crate::paths::DataDir;

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct Check {
    /// `docker`, `image`, … and `host NAME` for each Docker host on another machine.
    pub name: String,
    pub ok: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub fix: Option<String>,
    /// Works, but should be seen to (an image whose packages are old).
    pub warn: bool,
}

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct DoctorReport {
    pub ok: bool,
    pub checks: Vec<Check>,
}

pub(crate) fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
    Check { name: name.into(), ok: true, detail: detail.into(), fix: None, warn: false }
}
pub(crate) fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { name: name.into(), ok: false, detail: detail.into(), fix: Some(fix.into()), warn: false }
}
pub(crate) fn warn(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { name: name.into(), ok: true, detail: detail.into(), fix: Some(fix.into()), warn: true }
}

/// An image older than this is flagged: its Chromium (run without its sandbox) misses fixes.
pub const IMAGE_FRESH_DAYS: i64 = 30;

/// How old the image's packages are.
async fn image_age_check(d: &DockerProvider, tag: &str, now_ms: i64) -> Check {
    let refresh = "rebuild it with current packages: `botdesk image build --refresh` (works offline from the Debian mirror, as the first build)";
    match d.image_age_days(tag, now_ms).await {
        Ok(Some(days)) if days > IMAGE_FRESH_DAYS => {
            warn("image_age", format!("the computer image's packages are {days} days old: its Chromium may miss security fixes"), refresh)
        }
        Ok(Some(days)) => pass("image_age", format!("built {days} day(s) ago")),
        Ok(None) => warn("image_age", "the computer image's age is unknown", refresh),
        Err(e) => warn("image_age", e.to_string(), "check the Docker engine"),
    }
}

/// Whether an account of this machine shares a uid with the bots or the screen services (without
/// Docker's remapping, the computers' processes run as those host uids: such an account can read
/// the computers through `/proc/PID/root` and signal their processes). `passwd` is
/// `/etc/passwd`'s text.
async fn uids_check(d: &DockerProvider, passwd: &str) -> Check {
    match d.remaps_users().await {
        Ok(true) => return pass("uids", "Docker runs the computers' users as users of their own (user-namespace remapping or rootless)"),
        Ok(false) => {}
        Err(e) => return warn("uids", e.to_string(), "check the Docker engine"),
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
        return pass(
            "uids",
            format!("no account of this machine has the bots' uid {bots}, a Team bot's ({}-{}) or the screen services' uid 990", team.start(), team.end()),
        );
    }
    warn(
        "uids",
        format!("{}: that account can read the computers (through /proc/PID/root) and signal their processes", owners.join("; ")),
        "turn on Docker's user-namespace remapping (\"userns-remap\": \"default\" in /etc/docker/daemon.json, then restart Docker and rebuild the image) or use rootless Docker (README, Host users)",
    )
}

pub async fn run(docker: Option<&DockerProvider>, data: &DataDir, keys: &crate::KeyStore, now_ms: i64) -> DoctorReport {
    let mut checks = vec![];
    let tag = botdesk_docker::image::image_tag();
    match docker {
        Some(d) => match d.engine_version().await {
            Ok(v) => {
                checks.push(pass("docker", format!("Docker {v} answers")));
                let present = d.image_present(&tag).await;
                checks.push(match &present {
                    Ok(true) => pass("image", format!("{tag} is present")),
                    Ok(false) => fail("image", format!("{tag} is missing"), "run `botdesk image build` (or `cargo xtask run`)"),
                    Err(e) => fail("image", e.to_string(), "check the Docker engine"),
                });
                if matches!(present, Ok(true)) {
                    checks.push(image_age_check(d, &tag, now_ms).await);
                }
                checks.push(uids_check(d, &std::fs::read_to_string("/etc/passwd").unwrap_or_default()).await);
            }
            Err(e) => {
                checks.push(fail("docker", e.to_string(), "start the Docker engine: `sudo systemctl start docker` or `sudo dockerd &`"));
                checks.push(fail("image", format!("{tag}: unknown while Docker is not reachable"), "start Docker first"));
            }
        },
        None => checks.push(pass("docker", "not used by this engine")),
    }
    checks.push(data_dir_check(data));
    checks.push(keyring_check(keys));
    checks.push(display_libraries_check());
    DoctorReport { ok: checks.iter().all(|c| c.ok), checks }
}

fn data_dir_check(data: &DataDir) -> Check {
    let probe = data.root().join(format!(".doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"ok").and_then(|_| std::fs::remove_file(&probe)) {
        Ok(()) => pass("data_dir", format!("{} is writable", data.root().display())),
        Err(e) => fail("data_dir", format!("{} is not writable: {e}", data.root().display()), "set BOTDESK_DATA_DIR to a writable folder"),
    }
}

/// Which store keeps the keys: the Secret Service, or (when none answers) the encrypted vault.
fn keyring_check(keys: &crate::KeyStore) -> Check {
    match keys {
        crate::KeyStore::SecretService => pass("keyring", "keys are kept in the Secret Service keyring, which answers"),
        crate::KeyStore::Vault { path, exists, .. } => pass(
            "keyring",
            format!(
                "no Secret Service answers: keys are kept in the encrypted file {path}{} (passphrase asked once per session)",
                if *exists { "" } else { ", made with the first key" }
            ),
        ),
        crate::KeyStore::Memory => pass("keyring", "keys are kept in this process's memory"),
    }
}

/// The app's window needs WebKitGTK 4.1 (Linux).
fn display_libraries_check() -> Check {
    if !cfg!(target_os = "linux") {
        return pass("display_libraries", "provided by the operating system");
    }
    let dirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"];
    let needed = ["libwebkit2gtk-4.1.so.0", "libgtk-3.so.0"];
    let missing: Vec<&str> = needed.iter().copied().filter(|lib| !dirs.iter().any(|d| std::path::Path::new(d).join(lib).exists())).collect();
    if missing.is_empty() {
        pass("display_libraries", "WebKitGTK 4.1 and GTK 3 are installed")
    } else {
        fail("display_libraries", format!("missing {}", missing.join(", ")), "sudo apt-get install libwebkit2gtk-4.1-0 libgtk-3-0 (or run `cargo xtask run`)")
    }
}

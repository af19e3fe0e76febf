//! A computer's home: a Docker volume labelled like its container, and the home stream in and out
//! of it through `botdesk-helper save|load` over the exec API (see `botdesk_core::home_stream`).
//! Nothing here touches the host's file system, so it works the same against a remote engine.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bollard::container::LogOutput;
use bollard::volume::{CreateVolumeOptions, ListVolumesOptions, RemoveVolumeOptions};
use botdesk_core::home_stream::{LoadMode, LoadSummary};
use botdesk_core::*;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_util::io::StreamReader;

use crate::{docker_err, spec, spec::InComputer, DockerProvider};

/// A task that ends when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How much of the helper's stderr is kept for an error message.
const MAX_STDERR: usize = 64 * 1024;
/// Largest load summary (it names the files a merge kept).
const MAX_SUMMARY: usize = 8 << 20;

impl DockerProvider {
    fn volume_filters(&self, computer: Option<&ComputerId>) -> HashMap<String, Vec<String>> {
        let mut label = vec![format!("{}=1", spec::LABEL_MANAGED), format!("{}={}", spec::LABEL_DATA_DIR, self.cfg.data_dir_label)];
        if let Some(c) = computer {
            label.push(format!("{}={c}", spec::LABEL_COMPUTER));
        }
        HashMap::from([("label".to_string(), label)])
    }

    /// Creates the home volume of `spec` unless it exists.
    pub(crate) async fn ensure_volume(&self, s: &ComputerSpec) -> Result<()> {
        let labels = spec::labels(&self.cfg.data_dir_label, s.id.as_str(), self.cfg.test_run.as_deref());
        let opts = CreateVolumeOptions { name: s.home_volume.clone(), driver: "local".into(), labels, ..Default::default() };
        // Creating an existing volume with the same name returns it.
        self.client().await?.create_volume(opts).await.map(drop).map_err(docker_err)
    }

    /// Names of this data directory's home volumes (of one computer, or all).
    pub async fn list_volumes(&self, computer: Option<&ComputerId>) -> Result<Vec<String>> {
        let opts = ListVolumesOptions { filters: self.volume_filters(computer) };
        let list = self.client().await?.list_volumes(Some(opts)).await.map_err(docker_err)?;
        Ok(list.volumes.unwrap_or_default().into_iter().map(|v| v.name).collect())
    }

    /// Removes a volume; a missing one is fine.
    pub async fn remove_volume(&self, name: &str) -> Result<()> {
        match self.client().await?.remove_volume(name, Some(RemoveVolumeOptions { force: true })).await {
            Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Removes every home volume of this data directory not named in `keep` (reconcile). A volume
    /// a container still uses is left for the next time.
    pub async fn remove_volumes_except(&self, keep: &HashSet<String>) -> Result<Vec<String>> {
        let mut removed = vec![];
        for name in self.list_volumes(None).await? {
            if keep.contains(&name) {
                continue;
            }
            match self.client().await?.remove_volume(&name, None).await {
                Ok(()) => removed.push(name),
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. }) => {}
                Err(e) => return Err(docker_err(e)),
            }
        }
        Ok(removed)
    }
}

/// The helper's stdout as a byte stream; its stderr kept (bounded) for the error message.
pub(crate) fn split_output(output: crate::provider::ExecOutputStream, stderr: Arc<Mutex<Vec<u8>>>) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    output.filter_map(move |item| {
        let r = match item {
            Ok(LogOutput::StdOut { message }) => Some(Ok(message)),
            Ok(LogOutput::StdErr { message }) => {
                let mut err = stderr.lock().unwrap();
                let room = MAX_STDERR.saturating_sub(err.len());
                err.extend_from_slice(&message[..message.len().min(room)]);
                None
            }
            Ok(_) => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
        };
        futures::future::ready(r)
    })
}

pub(crate) async fn save_home(p: &DockerProvider, c: &ComputerRef, mut manifest: HomeIn) -> Result<HomeOut> {
    let container = p.running_container(c).await?;
    let argv = vec!["botdesk-helper".to_string(), "save".to_string()];
    // As root: it reads every bot's folder (walking by descriptor, never through a link).
    let (exec_id, output, mut input) = p.start_exec(InComputer::Root, &container, argv, vec![], HOME, true, false).await?;
    // The helper reads the manifest as its walk goes: it goes in while the records come out. The
    // sending ends with the exec (its input closes), and `finished` owns it.
    let sending = tokio::spawn(async move {
        tokio::io::copy(&mut manifest, &mut input).await?;
        input.shutdown().await
    });
    let sending = AbortOnDrop(sending);
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let records = Box::pin(StreamReader::new(split_output(output, stderr.clone())));
    let client = p.client().await?.clone();
    // The helper may still be writing or exiting after its `end` record (or stopped by the bot
    // there): the engine bounds the wait.
    let finished = async move {
        let code = crate::provider::exit_code_when_done(&client, &exec_id).await?;
        drop(sending);
        match code {
            0 => Ok(()),
            _ => Err(crate::files::helper_error(&WorkspacePath::root(), 0, code, &stderr.lock().unwrap())),
        }
    }
    .boxed();
    Ok(HomeOut { records, finished })
}

/// A load for a Private computer's bot runs as that bot (it owns the whole home). One into a Team
/// bot's folder or profile runs as root (which writes there and then gives the files to the bot,
/// `set_owners`), as does one with no bot (the whole home of a computer that is starting).
pub(crate) async fn load_home(p: &DockerProvider, c: &ComputerRef, mode: &LoadMode, records: HomeIn, ctx: &CallCtx) -> Result<LoadSummary> {
    let container = p.running_container(c).await?;
    let argv = vec!["botdesk-helper".to_string(), "load".to_string()];
    let who = match (&ctx.bot, ctx.user) {
        (Some(_), BotUser::PRIVATE) => InComputer::Bot(BotUser::PRIVATE),
        _ => InComputer::Root,
    };
    let (exec_id, output, mut input) = p.start_exec(who, &container, argv, vec![], HOME, true, false).await?;
    let mut first = serde_json::to_vec(mode).expect("a load mode serialises");
    first.push(b'\n');
    let writer = async move {
        input.write_all(&first).await?;
        // Large writes: every write to an exec's input costs a trip through the engine.
        tokio::io::copy_buf(&mut tokio::io::BufReader::with_capacity(256 * 1024, records), &mut input).await?;
        // Always closed: a stream cut short ends without its `end` record and changes nothing.
        input.shutdown().await
    };
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut out = split_output(output, stderr.clone()).boxed();
    let reader = async move {
        let mut answer = Vec::new();
        while let Some(chunk) = out.next().await {
            let chunk = chunk.map_err(|e| ComputerError::Provider(format!("reading the computer's answer: {e}")))?;
            if answer.len() + chunk.len() > MAX_SUMMARY {
                return Err(ComputerError::Provider(format!("the computer's answer to a load is longer than {MAX_SUMMARY} bytes")));
            }
            answer.extend_from_slice(&chunk);
        }
        Ok(answer)
    };
    let (written, answer) = tokio::join!(writer, reader);
    let code = p.exec_exit_code(&exec_id).await?;
    if code != 0 {
        return Err(crate::files::helper_error(&WorkspacePath::root(), 0, code, &stderr.lock().unwrap()));
    }
    written.map_err(|e| ComputerError::Provider(format!("sending the home stream to the computer: {e}")))?;
    serde_json::from_slice(&answer?).map_err(|e| ComputerError::Provider(format!("bad load summary from the computer: {e}")))
}

/// Gives the home its owners by path (see [`ComputerProvider::set_owners`]): `botdesk-helper own`
/// as root, with the owners on its stdin.
pub(crate) async fn set_owners(p: &DockerProvider, c: &ComputerRef, owners: &HomeOwners) -> Result<()> {
    let container = p.running_container(c).await?;
    let bots: Vec<_> = owners
        .bots
        .iter()
        .map(|o| serde_json::json!({"folder": path::bot_folder(&o.bot).as_str(), "profile": format!(".browser-profiles/{}", browser::profile_name(&o.bot)), "uid": o.uid}))
        .collect();
    let spec = serde_json::json!({"team": owners.scope == ComputerScope::Team, "all": owners.all, "bots": bots, "shared_gid": BotUser::SHARED_GID, "private": BotUser::PRIVATE.uid});
    let stdin = Bytes::from(serde_json::to_vec(&spec).expect("owners serialise"));
    // A whole home may take a while; only its top folders when nothing was loaded.
    let bound = std::time::Duration::from_secs(if owners.all { 600 } else { 60 });
    p.run_checked_input(InComputer::Root, &container, &["botdesk-helper", "own"], Some(stdin), bound, "giving the home its owners").await
}

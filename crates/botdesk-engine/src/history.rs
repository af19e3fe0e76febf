//! History: the versions of a bot's folder (its computer's kept checkpoints, see `versions`), and
//! restoring one, whole or one path. A restore first saves the present as a version, so it can be
//! undone too. It goes through the computer when the computer runs or Docker can start it (the
//! bot sees its files back at once); without Docker it is made in the store alone, and the
//! computer's next start begins from it.

use botdesk_core::home_stream::LoadMode;
use botdesk_core::{ComputerState, MachineStatus, SandboxError, WorkspacePath};
use serde::Serialize;

use crate::checkpoint::{Browsers, Sending};
use crate::error::blocking;
use crate::versions::{self, Changed, Changes, Meta, Retention, Why};
use crate::{home_store, Engine, EngineError, ErrorCode, Result};

/// One version of a bot's folder.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct VersionView {
    pub version: u64,
    /// When it was saved (ms since the epoch).
    pub at: i64,
    /// Why, in words ("after run 3f2a…", "computer stopped", "restored v12").
    pub label: String,
    pub why: Why,
    /// Regular files and bytes of the whole home in this version.
    pub files: u64,
    pub bytes: u64,
    /// What changed in the bot's folder since the version before.
    pub changes: Changes,
    /// The latest version (what a new computer would start from).
    pub current: bool,
}

/// The versions of a bot's folder, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct History {
    pub bot: String,
    pub computer: String,
    /// The bot's folder in its computer's home ("" on a Private computer: the whole home).
    pub folder: String,
    pub versions: Vec<VersionView>,
    /// Bytes all the versions of the home take on this machine (shared files counted once).
    pub disk_bytes: u64,
    pub keep: Retention,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct RestoreReport {
    /// The version restored from.
    pub from: u64,
    /// What was restored, relative to the bot's folder ("": all of it).
    pub path: String,
    /// The version holding what was there before (restore it to undo this one).
    pub saved: Option<u64>,
    /// The version that now is the folder.
    pub version: u64,
    /// Regular files put back.
    pub files: u64,
    /// Made through the running computer (else in the store; the computer starts from it).
    pub live: bool,
}

impl Engine {
    /// The versions of a bot's folder, newest first, with what changed in its folder in each.
    pub async fn history(&self, bot: &str) -> Result<History> {
        let (b, c) = self.bot_and_computer(bot).await?;
        let folder = crate::bots::view(b.clone(), &c).folder.clone();
        let key = self.resolve(&b, &c, "")?.as_str().to_string();
        let store = self.inner.data.home(&c.home_key);
        let keep = self.settings()?.retention();
        let (metas, disk_bytes, current) = blocking(move || {
            let current = home_store::current_version(&store).map(|(n, _)| n);
            Ok((versions::list(&store)?, versions::disk_use(&store)?, current))
        })
        .await?;
        let versions = metas
            .into_iter()
            .rev()
            .map(|m| VersionView {
                version: m.version,
                at: m.at,
                label: m.why.describe(&key),
                changes: m.changed.in_folder(&key),
                why: m.why,
                files: m.files,
                bytes: m.bytes,
                current: Some(m.version) == current,
            })
            .collect();
        Ok(History { bot: b.name, computer: c.name, folder, versions, disk_bytes, keep })
    }

    /// Restores the bot's folder (`path` None) or one path in it as it was in `version`. Refused
    /// while the bot works on a task.
    pub async fn restore(&self, bot: &str, version: u64, path: Option<&str>) -> Result<RestoreReport> {
        let (b, c) = self.bot_and_computer(bot).await?;
        if !self.inner.store.active_runs(&b.id).await?.is_empty() {
            return Err(EngineError::new(ErrorCode::BotRunning, format!("Stop the bot first: {} is working on a task", b.name)));
        }
        let shown = path.unwrap_or("").trim_matches('/').to_string();
        let target = self.resolve(&b, &c, &shown)?;
        let store = self.inner.data.home(&c.home_key);
        let from = store.join(format!("v{version}"));
        {
            let (from, target, name) = (from.clone(), target.clone(), b.name.clone());
            blocking(move || {
                if !from.is_dir() {
                    return Err(EngineError::new(ErrorCode::NotFound, format!("{name} has no version {version} (see `botdesk history {name}`)")));
                }
                crate::stored::locate(&from, &target).map_err(|e| match e.code {
                    ErrorCode::NotFound => EngineError::new(
                        ErrorCode::NotFound,
                        format!("{} is not in version {version}", if target.is_root() { "the folder" } else { target.as_str() }),
                    ),
                    _ => e,
                })?;
                Ok(())
            })
            .await?;
        }
        // Through the computer when it runs or Docker can start it; in the store alone when
        // there is no computer to go through (none made yet, destroyed, or Docker not there).
        let live = match &c.home_volume {
            None => false,
            Some(_) => match self.inner.provider.status(&c.cref()).await {
                Ok(_) => true,
                Err(SandboxError::Unavailable(why)) => {
                    // Its volume holds what its last checkpoint holds only when it stopped through us.
                    if !matches!(c.state, ComputerState::Stopped | ComputerState::Suspended) {
                        return Err(EngineError::new(
                            ErrorCode::DockerUnavailable,
                            format!("computer {} stopped without saving its workspace and Docker cannot be reached ({why}): start Docker, so its work is saved before the restore", c.name),
                        ));
                    }
                    false
                }
                Err(e) => return Err(e.into()),
            },
        };
        let report = if live { self.restore_live(&c, version, &target).await? } else { self.restore_stored(&c, version, &target).await? };
        Ok(RestoreReport { path: shown, ..report })
    }

    async fn restore_live(&self, c: &botdesk_store::Computer, version: u64, target: &WorkspacePath) -> Result<RestoreReport> {
        let cref = self.ensure_running(c).await?;
        // The whole home holds the browser profiles: their browsers close first.
        let browsers = if target.is_root() { Browsers::All } else { Browsers::None };
        let saved = self.checkpoint_closing(c.id.as_str(), browsers, Why::BeforeRestore).await?.version;
        let root = self.inner.data.home(&c.home_key).join(format!("v{version}"));
        let sending = match target.parent() {
            None => Sending { root, sub: String::new(), keep: Box::new(crate::checkpoint::everything), mode: LoadMode::Restore },
            Some(parent) => {
                let name = target.as_str().rsplit('/').next().unwrap_or_default().to_string();
                let keep = move |rel: &str| rel == name || rel.strip_prefix(name.as_str()).is_some_and(|r| r.starts_with('/'));
                Sending { root, sub: parent.as_str().to_string(), keep: Box::new(keep), mode: LoadMode::Put { into: parent.as_str().to_string() } }
            }
        };
        let put = self.send_home(&cref, sending).await.map_err(|e| e.context(format!("restoring version {version}")))?;
        let why = Why::Restored { from: version, path: target.as_str().to_string() };
        let after = self.checkpoint_closing(c.id.as_str(), Browsers::None, why).await?;
        Ok(RestoreReport { from: version, path: String::new(), saved: Some(saved), version: after.version, files: put.files, live: true })
    }

    /// A restore made in the store alone: a new version, the current one with `target` as it was
    /// in `version`. A computer volume left from before is not used again (the next start makes
    /// a new one from this version).
    async fn restore_stored(&self, c: &botdesk_store::Computer, version: u64, target: &WorkspacePath) -> Result<RestoreReport> {
        let store = self.inner.data.home(&c.home_key);
        let handle = self.handle(&c.id);
        let _held = handle.home.lock().await;
        let keep = self.settings()?.retention();
        let (s, t, at) = (store.clone(), target.as_str().to_string(), self.now());
        let (saved, meta) = blocking(move || {
            let _lock = home_store::lock_store(&s)?;
            home_store::tidy(&s)?;
            let prev = match home_store::current_version(&s) {
                Some((n, root)) => Some((n, home_store::index_of(&s, n, &root)?, root)),
                None => None,
            };
            let n = prev.as_ref().map_or(1, |(n, ..)| n + 1);
            let partial = s.join(format!("v{n}.partial"));
            let mut changed = Changed::default();
            let from = s.join(format!("v{version}"));
            let made = versions::derive(&partial, prev.as_ref().map(|(_, i, r)| (r.as_path(), i)), &from, &t, &mut changed)
                .and_then(|()| home_store::walk_index(&partial));
            let index = match made {
                Ok(index) => index,
                Err(e) => {
                    let _ = home_store::remove_tree(&partial);
                    return Err(e);
                }
            };
            let (files, bytes) = (index.files.len() as u64, index.files.iter().map(|f| f.1).sum());
            let meta = Meta { version: n, at, why: Why::Restored { from: version, path: t }, files, bytes, changed };
            home_store::commit(&s, &partial, &index, &meta, keep)?;
            Ok((prev.map(|(n, ..)| n), meta))
        })
        .await?;
        if c.home_volume.is_some() {
            self.inner.store.set_home_volume(&c.id, None, self.now()).await?;
            self.forget_ready(&c.id).await;
        }
        self.inner.background.spawn(async move {
            if let Err(e) = blocking(move || home_store::sweep(&store)).await {
                tracing::warn!("removing a version no longer kept: {e}");
            }
        });
        let files = meta.changed.home.written;
        Ok(RestoreReport { from: version, path: String::new(), saved, version: meta.version, files, live: false })
    }

    /// Undoes a run's file changes: its bot's folder goes back to the version the run started
    /// from (the present is saved first, so this too can be undone).
    pub async fn undo_run(&self, run_id: &str) -> Result<RestoreReport> {
        let run = self.inner.store.run(run_id).await?;
        let (b, c) = self.bot_and_computer(run.bot_id.as_str()).await?;
        if c.id != run.computer_id {
            return Err(EngineError::invalid(format!("{} works on another computer since this run; see `botdesk history {}`", b.name, b.name)));
        }
        let Some(version) = self.inner.store.run_home_version(run_id).await? else {
            return Err(EngineError::new(ErrorCode::NotFound, "this run kept no version to go back to (it is from before versions were kept)"));
        };
        self.restore(b.id.as_str(), version as u64, None).await
    }

    /// The version a run starts from, recorded with the run: a checkpoint now when its computer
    /// runs on its home (it may hold work newer than its latest version), else the latest version
    /// (what the computer starts from). Nothing when it fails: the run goes on without one.
    pub(crate) async fn mark_run_start(&self, bot: &botdesk_store::Bot, run_id: &str) {
        let Ok(c) = self.inner.store.computer(bot.computer_id.as_str()).await else { return };
        let running = c.home_volume.is_some() && matches!(self.inner.provider.status(&c.cref()).await, Ok(MachineStatus::Running));
        let version = if running {
            match self.checkpoint_closing(c.id.as_str(), Browsers::None, Why::BeforeRun { run_id: run_id.to_string() }).await {
                Ok(r) => Some(r.version),
                Err(e) => {
                    tracing::warn!(run = run_id, "no version before the run: {e}");
                    None
                }
            }
        } else {
            home_store::current_version(&self.inner.data.home(&c.home_key)).map(|(n, _)| n)
        };
        if let Some(v) = version {
            if let Err(e) = self.inner.store.set_run_home_version(run_id, v as i64).await {
                tracing::warn!(run = run_id, "the run's starting version was not recorded: {e}");
            }
        }
    }
}

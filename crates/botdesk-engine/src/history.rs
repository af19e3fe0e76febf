//! History: the versions of a bot's folder (its computer's kept checkpoints, see `versions`), and
//! restoring one, whole or one path. A restore first saves the present as a version, so it can be
//! undone too. It goes through the computer when the computer runs or Docker can start it (the
//! bot sees its files back at once); without Docker it is made in the store alone, and the
//! computer's next start begins from it.

use botdesk_core::home_stream::LoadMode;
use botdesk_core::{ComputerError, ComputerId, FolderOwner, MachineStatus};
use serde::Serialize;

use crate::checkpoint::{Browsers, Sending};
use crate::error::blocking;
use crate::versions::{self, Changed, Changes, Edits, Meta, Retention, Take, Why};
use crate::{home_store, Engine, EngineError, ErrorCode, Result};
use std::collections::BTreeSet;
use std::fs;

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
    /// The bot's folder in its computer's home (`.` on a Private computer: the whole home).
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
    /// Files of the bot's folder written or removed.
    pub files: u64,
    /// Made through the running computer (else in the store; the computer starts from it).
    pub live: bool,
    /// Undo only: what changed again since the run, left as it is.
    pub kept: Vec<String>,
}

/// What goes into the computer once a version is made: what the edits touched in `folder`, by its
/// top entries (`put`), or the whole home when an edit is the whole of it.
fn put_into(root: std::path::PathBuf, folder: &str, edits: &[(String, Take)]) -> Sending {
    let inside = |t: &str| if folder.is_empty() { t.to_string() } else { t.strip_prefix(folder).unwrap_or(t).trim_start_matches('/').to_string() };
    let whole = edits.iter().any(|(t, _)| inside(t).is_empty());
    match (whole, folder.rsplit_once('/')) {
        (true, _) if folder.is_empty() => {
            Sending { root, sub: String::new(), keep: Box::new(crate::checkpoint::everything), mode: LoadMode::Restore, for_bot: None }
        }
        (true, split) => {
            let (parent, name) = split.map_or((String::new(), folder.to_string()), |(p, n)| (p.to_string(), n.to_string()));
            let n = name.clone();
            let keep = move |rel: &str| rel.split('/').next() == Some(n.as_str());
            Sending { root, sub: parent.clone(), keep: Box::new(keep), mode: LoadMode::Put { into: parent, names: vec![name] }, for_bot: None }
        }
        (false, _) => {
            let names: BTreeSet<String> = edits.iter().filter_map(|(t, _)| inside(t).split('/').next().map(str::to_string)).collect();
            let keep_names = names.clone();
            let keep = move |rel: &str| rel.split('/').next().is_some_and(|n| keep_names.contains(n));
            Sending {
                root,
                sub: folder.to_string(),
                keep: Box::new(keep),
                mode: LoadMode::Put { into: folder.to_string(), names: names.into_iter().collect() },
                for_bot: None,
            }
        }
    }
}

impl Engine {
    /// The versions of a bot's folder, newest first, with what changed in its folder in each.
    pub async fn history(&self, bot: &crate::BotRef) -> Result<History> {
        let (b, c) = self.bot_and_computer(&bot.id).await?;
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
    pub async fn restore(&self, bot: &crate::BotRef, version: u64, path: Option<&str>) -> Result<RestoreReport> {
        let (b, c) = self.bot_and_computer(&bot.id).await?;
        let shown = path.unwrap_or("").trim_matches('/').to_string();
        let target = self.resolve(&b, &c, &shown)?;
        let from = self.inner.data.home(&c.home_key).join(format!("v{version}"));
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
        let t = target.as_str().to_string();
        let why = Why::Restored { from: version, path: t.clone() };
        let r = self.put_back(&b, &c, why, move |_| Ok(Edits { edits: vec![(t, Take::From(from))], kept: vec![] })).await?;
        Ok(RestoreReport { from: version, path: shown, ..r })
    }

    /// Undoes a run's file changes in its bot's folder: each file or folder the run created,
    /// changed or removed goes back to how it was when the run started, unless it changed again
    /// since (then it stays, named in `kept`). The present is saved first, so this too can be undone.
    pub async fn undo_run(&self, run_id: &str) -> Result<RestoreReport> {
        let run = self.inner.store.run(run_id).await?;
        let (b, c) = self.bot_and_computer(&run.bot_id).await?;
        if c.id != run.computer_id {
            return Err(EngineError::invalid(format!("{} works on another computer since this run; see `botdesk history {}`", b.name, b.name)));
        }
        let Some(before) = self.inner.store.run_home_version(run_id).await? else {
            return Err(EngineError::new(ErrorCode::NotFound, "this run kept no version to go back to (it is from before versions were kept)"));
        };
        let before = before as u64;
        let store = self.inner.data.home(&c.home_key);
        let folder = self.resolve(&b, &c, "")?.as_str().to_string();
        let id = run_id.to_string();
        let (s, f) = (store.clone(), folder.clone());
        let edits = move |present: &std::path::Path| {
            let metas = versions::list(&s)?;
            let gone = || EngineError::new(ErrorCode::NotFound, format!("version {before}, from before the run, is no longer kept"));
            metas.iter().find(|m| m.version == before).ok_or_else(gone)?;
            // What the run left: the version saved when it ended (the present if none was).
            let after = metas.iter().find(|m| m.why == Why::Run { run_id: id.clone() }).map_or(present.to_path_buf(), |m| s.join(format!("v{}", m.version)));
            versions::undo_edits(&s.join(format!("v{before}")), &after, present, &f)
        };
        let r = self.put_back(&b, &c, Why::Undone { run_id: run_id.to_string() }, edits).await?;
        Ok(RestoreReport { from: before, path: String::new(), ..r })
    }

    /// Makes a new version of the computer's home: the present (saved first when the computer
    /// runs) with the `edits` computed from it applied, and puts what they touch in the bot's
    /// folder into the computer. Without a computer to go through (none made, destroyed, or
    /// Docker not there) the version alone is made, and the computer's next start begins from it.
    async fn put_back<F>(&self, b: &botdesk_store::Bot, c: &botdesk_store::Computer, why: Why, edits: F) -> Result<RestoreReport>
    where
        F: FnOnce(&std::path::Path) -> Result<Edits> + Send + 'static,
    {
        if !self.inner.store.active_runs(&b.id).await?.is_empty() {
            return Err(EngineError::new(ErrorCode::BotRunning, format!("Stop the bot first: {} is working on a task", b.name)));
        }
        let live = match &c.home_volume {
            None => false,
            Some(_) => match self.inner.provider.status(&c.cref()).await {
                Ok(_) => true,
                Err(ComputerError::Unavailable(why)) => {
                    // Its volume may be replaced only when it holds just what its latest version holds.
                    if !self.inner.store.home_saved(&c.id).await? {
                        return Err(EngineError::new(
                            ErrorCode::DockerUnavailable,
                            format!("computer {} stopped without saving its workspace and Docker cannot be reached ({why}): start Docker, so its work is saved first", c.name),
                        ));
                    }
                    false
                }
                Err(e) => return Err(e.into()),
            },
        };
        let folder = self.resolve(b, c, "")?.as_str().to_string();
        let cref = if live { Some(self.ensure_running(c).await?) } else { None };
        if live {
            // The whole home holds the browser profiles: their browsers close first.
            let browsers = if folder.is_empty() { Browsers::All } else { Browsers::None };
            self.checkpoint_closing(&c.id, browsers, Why::BeforeRestore).await?;
        }
        let store = self.inner.data.home(&c.home_key);
        let handle = self.handle(&c.id);
        let held = handle.home.lock().await;
        let keep = self.settings()?.retention();
        let (s, at) = (store.clone(), self.now());
        let (saved, meta, edits, kept) = blocking(move || {
            let _lock = home_store::lock_store(&s)?;
            home_store::tidy(&s)?;
            let Some((n, root)) = home_store::current_version(&s) else {
                return Err(EngineError::new(ErrorCode::NotFound, "nothing of this workspace was saved yet"));
            };
            let index = home_store::index_file(&s, n, &root)?;
            let Edits { edits, kept } = edits(&root)?;
            let partial = s.join(format!("v{}.partial", n + 1));
            let index_to = home_store::partial_index_path(&s, n + 1);
            let mut changed = Changed::default();
            let made = versions::derive(&partial, Some((&root, &index)), &edits, &mut changed).and_then(|()| home_store::write_walk_index(&partial, &index_to));
            let (files, bytes) = match made {
                Ok(counts) => counts,
                Err(e) => {
                    let _ = fs::remove_file(&index_to);
                    let _ = home_store::remove_tree(&partial);
                    return Err(e);
                }
            };
            let meta = Meta { version: n + 1, at, why, files, bytes, changed };
            home_store::commit(&s, &partial, &index_to, &meta, keep)?;
            Ok((n, meta, edits, kept))
        })
        .await?;
        drop(held);
        let s = store.clone();
        self.inner.background.spawn(async move {
            if let Err(e) = blocking(move || home_store::sweep(&s)).await {
                tracing::warn!("removing a version no longer kept: {e}");
            }
        });
        match cref {
            Some(cref) => {
                let root = store.join(format!("v{}", meta.version));
                let sending = Sending { for_bot: Some(FolderOwner { bot: b.id.clone(), uid: b.uid }), ..put_into(root, &folder, &edits) };
                self.send_home(&cref, sending).await.map_err(|e| e.context(format!("putting version {} into the computer", meta.version)))?;
            }
            None if c.home_volume.is_some() => {
                // Its volume holds the version before: the next start makes a new one from this.
                self.inner.store.set_home_volume(&c.id, None, self.now()).await?;
                self.forget_ready(&c.id).await;
            }
            None => {}
        }
        let files = meta.changed.in_folder(&folder);
        Ok(RestoreReport { from: 0, path: String::new(), saved: Some(saved), version: meta.version, files: files.written + files.removed, live, kept })
    }

    /// The version a run starts from, recorded with the run: a checkpoint now when its computer
    /// runs on its home (it may hold work newer than its latest version); the latest version when
    /// that is exactly what the computer starts from; else (a new computer, or a volume that may
    /// hold unsaved work) a checkpoint when the run first brings the computer up, before any of
    /// its work ([`Engine::version_waiting_runs`]). Nothing when that fails: the run goes on
    /// without one (and cannot be undone).
    pub(crate) async fn mark_run_start(&self, bot: &botdesk_store::Bot, run_id: &str) {
        let Ok(c) = self.inner.store.computer(bot.computer_id.as_str()).await else { return };
        let running = c.home_volume.is_some() && matches!(self.inner.provider.status(&c.cref()).await, Ok(MachineStatus::Running));
        let latest = home_store::current_version(&self.inner.data.home(&c.home_key)).map(|(n, _)| n);
        let starts_from_latest = c.home_volume.is_none() || self.inner.store.home_saved(&c.id).await.unwrap_or(false);
        let version = if running {
            match self.checkpoint_closing(&c.id, Browsers::None, Why::BeforeRun { run_id: run_id.to_string() }).await {
                Ok(r) => Some(r.version),
                Err(e) => {
                    tracing::warn!(run = run_id, "no version before the run: {e}");
                    None
                }
            }
        } else if let (Some(v), true) = (latest, starts_from_latest) {
            Some(v)
        } else {
            self.handle(&c.id).await_start_version(run_id);
            None
        };
        if let Some(v) = version {
            self.record_run_start(run_id, v).await;
        }
    }

    /// Checkpoints the home for the runs that wait for their starting version (see
    /// [`Engine::mark_run_start`]): called when the computer is up, before the call that brought
    /// it up does anything there.
    pub(crate) async fn version_waiting_runs(&self, computer: &ComputerId) {
        let runs = self.handle(computer).take_waiting_runs();
        let Some(first) = runs.first() else { return };
        // Boxed: the checkpoint brings the computer up again (it is up: nothing waits then).
        match Box::pin(self.checkpoint_closing(computer, Browsers::None, Why::BeforeRun { run_id: first.clone() })).await {
            Ok(r) => {
                for run in &runs {
                    self.record_run_start(run, r.version).await;
                }
            }
            Err(e) => tracing::warn!(computer = %computer, "no version before the run: {e}"),
        }
    }

    /// A run that ended without bringing its computer up waits for nothing.
    pub(crate) fn forget_run_start(&self, computer: &ComputerId, run_id: &str) {
        self.handle(computer).forget_waiting_run(run_id);
    }

    async fn record_run_start(&self, run_id: &str, version: u64) {
        if let Err(e) = self.inner.store.set_run_home_version(run_id, version as i64).await {
            tracing::warn!(run = run_id, "the run's starting version was not recorded: {e}");
        }
    }
}

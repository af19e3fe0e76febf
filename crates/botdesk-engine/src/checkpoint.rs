//! Workspace checkpoints (DESIGN §10). A computer works on its machine disk,
//! `DATA_DIR/machines/<computer-id>/home` (bind-mounted as its home); the home store
//! `DATA_DIR/homes/<home-key>/` keeps immutable checkpoint versions `v<N>` and a `current` symlink.
//!
//! A checkpoint closes the computer's browsers gracefully (so cookies and profiles are on disk),
//! copies the machine disk into `v<N+1>.partial` (unchanged files are hard-linked from the previous
//! version: versions are never modified), syncs, renames it to `v<N+1>` and swaps `current` with
//! one rename, so a reader sees the old checkpoint or the new one, never half of one. Checkpoints of
//! one home are serialised, across processes too (a lock file). A machine disk that is missing (a
//! destroyed computer, a new one) is restored from `current` before the computer starts.
//! Skipped: only caches and lock files inside `.browser-profiles/`.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use botdesk_core::{CallCtx, ComputerRef, ExecRequest, MachineStatus, WorkspacePath};
use serde::Serialize;

use crate::error::blocking;
use crate::{Engine, EngineError, ErrorCode, Result};

/// Which browsers a checkpoint closes first, so their cookies and profiles are whole on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Browsers {
    /// Every browser on the computer (stop, destroy, idle suspend, explicit checkpoint).
    All,
    /// Only the one on this display (a run ending on a Team computer leaves the others alone).
    OnDisplay(u32),
    /// None (the bot whose work is saved has no browser there).
    None,
}

/// What one checkpoint or restore did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CheckpointReport {
    pub version: u64,
    pub files: u64,
    pub bytes: u64,
    /// Files copied (the others were unchanged and linked from the previous version).
    pub copied: u64,
    pub millis: u64,
}

/// Browser caches and lock files: not worth keeping, and locks would break the next start.
fn skipped(rel: &Path) -> bool {
    let mut parts = rel.components();
    parts.next().is_some_and(|c| c.as_os_str() == ".browser-profiles") && browser_junk(parts.as_path())
}

/// A cache or lock file inside `.browser-profiles/` (`rel` relative to that folder).
pub(crate) fn browser_junk(rel: &Path) -> bool {
    rel.components().any(|c| {
        matches!(
            c.as_os_str().to_str(),
            Some("Cache" | "Code Cache" | "GPUCache" | "GrShaderCache" | "ShaderCache" | "DawnCache" | "DawnGraphiteCache" | "DawnWebGPUCache" | "component_crx_cache" | "extensions_crx_cache")
        )
    }) || matches!(rel.file_name().and_then(|n| n.to_str()), Some("SingletonLock" | "SingletonSocket" | "SingletonCookie" | "LOCK" | "lockfile"))
}

/// A file error while saving or restoring a workspace, with a full disk said plainly.
pub(crate) fn err(doing: &str, path: &Path, e: io::Error) -> EngineError {
    let why = if e.raw_os_error() == Some(28) { "the disk holding the data directory is full".to_string() } else { e.to_string() };
    EngineError::new(ErrorCode::Internal, format!("{doing} {}: {why}", path.display()))
}

/// The version `current` points at, if any.
pub(crate) fn current_version(store: &Path) -> Option<(u64, PathBuf)> {
    let target = fs::read_link(store.join("current")).ok()?;
    let name = target.file_name()?.to_str()?.to_string();
    let n = name.strip_prefix('v')?.parse().ok()?;
    Some((n, store.join(name)))
}

/// Copies `src` into `dst` (which must not exist). Files equal in size, mtime and mode to the
/// same path under `link_from` are hard-linked instead of copied.
fn copy_tree(src: &Path, dst: &Path, link_from: Option<&Path>, chown: bool) -> Result<(u64, u64, u64)> {
    let (mut files, mut bytes, mut copied) = (0u64, 0u64, 0u64);
    let mut stack = vec![PathBuf::new()];
    fs::create_dir_all(dst).map_err(|e| err("creating", dst, e))?;
    while let Some(rel) = stack.pop() {
        let from_dir = src.join(&rel);
        let entries = match fs::read_dir(&from_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // removed meanwhile
            Err(e) => return Err(err("reading", &from_dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| err("reading", &from_dir, e))?;
            let r = rel.join(entry.file_name());
            if skipped(&r) {
                continue;
            }
            let (from, to) = (src.join(&r), dst.join(&r));
            let meta = match fs::symlink_metadata(&from) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(err("reading", &from, e)),
            };
            let ft = meta.file_type();
            if ft.is_dir() {
                fs::create_dir(&to).map_err(|e| err("creating", &to, e))?;
                fs::set_permissions(&to, meta.permissions()).map_err(|e| err("writing", &to, e))?;
                stack.push(r);
            } else if ft.is_symlink() {
                let target = fs::read_link(&from).map_err(|e| err("reading", &from, e))?;
                std::os::unix::fs::symlink(&target, &to).map_err(|e| err("writing", &to, e))?;
            } else if ft.is_file() {
                files += 1;
                bytes += meta.len();
                let prev = link_from.map(|p| p.join(&r)).and_then(|p| fs::symlink_metadata(&p).ok().map(|m| (p, m)));
                let same = prev.as_ref().is_some_and(|(_, m)| m.is_file() && m.len() == meta.len() && m.mtime() == meta.mtime() && m.mtime_nsec() == meta.mtime_nsec() && m.mode() == meta.mode());
                if same && fs::hard_link(&prev.as_ref().unwrap().0, &to).is_ok() {
                    continue;
                }
                copied += 1;
                match fs::copy(&from, &to) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        files -= 1;
                        continue;
                    }
                    Err(e) => return Err(err("copying", &from, e)),
                }
                let f = fs::File::options().write(true).open(&to).map_err(|e| err("writing", &to, e))?;
                f.set_modified(meta.modified().map_err(|e| err("reading", &from, e))?).map_err(|e| err("writing", &to, e))?;
                fs::set_permissions(&to, fs::Permissions::from_mode(meta.mode() & 0o7777)).map_err(|e| err("writing", &to, e))?;
            }
            // Sockets, fifos and devices are not workspace content.
            if chown {
                let _ = std::os::unix::fs::lchown(&to, Some(1000), Some(1000));
            }
        }
    }
    Ok((files, bytes, copied))
}

/// Flushes the file system holding `dir` to disk.
fn sync_dir(dir: &Path) -> Result<()> {
    let f = fs::File::open(dir).map_err(|e| err("syncing", dir, e))?;
    // SAFETY: syncfs on a valid descriptor we own.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    if rc != 0 {
        return Err(err("syncing", dir, io::Error::last_os_error()));
    }
    Ok(())
}

/// Takes the lock file of a home store for the life of the returned file.
fn lock_store(store: &Path) -> Result<fs::File> {
    fs::create_dir_all(store).map_err(|e| err("creating", store, e))?;
    let path = store.join(".lock");
    let f = fs::File::options().create(true).truncate(false).write(true).open(&path).map_err(|e| err("opening", &path, e))?;
    f.lock().map_err(|e| err("locking", &path, e))?;
    Ok(f)
}

/// The checkpoint itself, on files only (blocking).
pub(crate) fn checkpoint_files(machine: &Path, store: &Path) -> Result<CheckpointReport> {
    let started = Instant::now();
    let _lock = lock_store(store)?;
    let previous = current_version(store);
    let version = previous.as_ref().map_or(1, |(n, _)| n + 1);
    let partial = store.join(format!("v{version}.partial"));
    let _ = fs::remove_dir_all(&partial);
    let result = copy_tree(machine, &partial, previous.as_ref().map(|(_, p)| p.as_path()), false).and_then(|r| sync_dir(&partial).map(|_| r));
    let (files, bytes, copied) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    let done = store.join(format!("v{version}"));
    fs::rename(&partial, &done).map_err(|e| err("finishing", &done, e))?;
    let link = store.join("current.new");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("v{version}"), &link).map_err(|e| err("writing", &link, e))?;
    fs::rename(&link, store.join("current")).map_err(|e| err("switching", store, e))?;
    sync_dir(store)?;
    // Older versions go; a reader still in one keeps its open files.
    for e in fs::read_dir(store).map_err(|e| err("reading", store, e))?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let old = name.strip_prefix('v').and_then(|n| n.trim_end_matches(".partial").parse::<u64>().ok()).is_some_and(|n| n < version);
        if old {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    Ok(CheckpointReport { version, files, bytes, copied, millis: started.elapsed().as_millis() as u64 })
}

/// Restores the latest checkpoint into a missing machine disk (blocking). None without one.
pub(crate) fn restore_files(store: &Path, machine: &Path) -> Result<Option<CheckpointReport>> {
    let started = Instant::now();
    // A data directory from before checkpoints kept the live home in the store's place: it becomes
    // the machine disk as it is.
    if store.is_dir() && current_version(store).is_none() && !store.join(".lock").exists() {
        fs::rename(store, machine).map_err(|e| err("moving the workspace of", store, e))?;
        return Ok(None);
    }
    let _lock = lock_store(store)?;
    let Some((version, from)) = current_version(store) else { return Ok(None) };
    let partial = machine.with_extension("restoring");
    let _ = fs::remove_dir_all(&partial);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (files, bytes, copied) = copy_tree(&from, &partial, None, root).inspect_err(|_| {
        let _ = fs::remove_dir_all(&partial);
    })?;
    fs::rename(&partial, machine).map_err(|e| err("restoring", machine, e))?;
    Ok(Some(CheckpointReport { version, files, bytes, copied, millis: started.elapsed().as_millis() as u64 }))
}

impl Engine {
    /// Checkpoints a computer's workspace: browsers closed gracefully first (when it runs), then
    /// an atomic copy into its home store. Serialised per home, also across processes.
    pub async fn checkpoint(&self, computer: &str) -> Result<CheckpointReport> {
        self.checkpoint_closing(computer, Browsers::All).await
    }

    /// A checkpoint that first closes `browsers`.
    pub(crate) async fn checkpoint_closing(&self, computer: &str, browsers: Browsers) -> Result<CheckpointReport> {
        let c = self.inner.store.computer(computer).await?;
        let machine = self.inner.data.machine(c.id.as_str());
        if !machine.exists() {
            return Err(EngineError::new(ErrorCode::NotFound, format!("computer {} has no workspace on this machine yet", c.name)));
        }
        let store = self.inner.data.home(&c.home_key);
        let lock = self.home_lock(&c.home_key);
        let _held = lock.lock().await;
        let cref = ComputerRef { id: c.id.clone() };
        if browsers != Browsers::None && matches!(self.inner.provider.status(&cref).await, Ok(MachineStatus::Running)) {
            self.close_browsers(&cref, browsers).await;
        }
        let report = blocking(move || checkpoint_files(&machine, &store)).await.map_err(|e| e.context(format!("checkpointing computer {}", c.name)))?;
        tracing::info!(computer = %c.id, version = report.version, files = report.files, copied = report.copied, ms = report.millis, "checkpoint");
        Ok(report)
    }

    /// Restores a computer's missing machine disk from its latest checkpoint now (it happens by
    /// itself before the computer next starts). None when there was nothing to restore.
    pub async fn restore_workspace(&self, computer: &str) -> Result<Option<CheckpointReport>> {
        let c = self.inner.store.computer(computer).await?;
        self.restore_if_missing(&c).await
    }

    /// Before a computer starts: a missing machine disk is restored from the latest checkpoint.
    pub(crate) async fn restore_if_missing(&self, c: &botdesk_store::Computer) -> Result<Option<CheckpointReport>> {
        let machine = self.inner.data.machine(c.id.as_str());
        if machine.exists() {
            return Ok(None);
        }
        let store = self.inner.data.home(&c.home_key);
        let lock = self.home_lock(&c.home_key);
        let _held = lock.lock().await;
        let name = c.name.clone();
        let parent = machine.parent().map(Path::to_path_buf);
        blocking(move || {
            if let Some(p) = parent {
                fs::create_dir_all(&p).map_err(|e| err("creating", &p, e))?;
            }
            restore_files(&store, &machine)
        })
        .await
        .map_err(|e| e.context(format!("restoring the workspace of computer {name}")))
    }

    /// Closes browsers on the computer gracefully (CDP Browser.close, then signals).
    pub(crate) async fn close_browsers(&self, cref: &ComputerRef, browsers: Browsers) {
        let script = match browsers {
            Browsers::None => return,
            Browsers::OnDisplay(n) => format!("botdesk-gateway close-browser {n}; true"),
            Browsers::All => "for s in /tmp/.X11-unix/X*; do [ -e \"$s\" ] && botdesk-gateway close-browser \"${s##*X}\"; done; true".to_string(),
        };
        let req = ExecRequest::new(["sh", "-c", script.as_str()]).cwd(WorkspacePath::root()).timeout(std::time::Duration::from_secs(30));
        if let Err(e) = self.inner.provider.exec(cref, req, None, &CallCtx::default()).await {
            tracing::warn!("closing the browsers before a checkpoint failed: {e}");
        }
        // Their desktops' browsers start again on the next browser call.
    }

    pub(crate) fn home_lock(&self, key: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.home_locks.lock().unwrap();
        locks.entry(key.to_string()).or_default().clone()
    }
}

/// Per-home locks of this process (the lock file serialises processes).
pub(crate) type HomeLocks = std::sync::Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    #[test]
    fn checkpoints_are_versions_linked_when_unchanged_and_skip_only_browser_caches_and_locks() {
        let t = tempfile::tempdir().unwrap();
        let (machine, store) = (t.path().join("machine"), t.path().join("store"));
        write(&machine.join("bots/b1/notes.md"), "one");
        write(&machine.join("shared/big.txt"), &"x".repeat(10_000));
        write(&machine.join(".browser-profiles/p/Default/Cookies"), "cookie");
        write(&machine.join(".browser-profiles/p/Default/Cache/data_0"), "cache");
        write(&machine.join(".browser-profiles/p/SingletonLock"), "lock");
        write(&machine.join("Cache/mine.txt"), "not a browser cache");
        std::os::unix::fs::symlink("notes.md", machine.join("bots/b1/link")).unwrap();
        let r1 = checkpoint_files(&machine, &store).unwrap();
        assert_eq!((r1.version, r1.files, r1.copied), (1, 4, 4));
        let v1 = current_version(&store).unwrap().1;
        assert_eq!(fs::read_to_string(v1.join(".browser-profiles/p/Default/Cookies")).unwrap(), "cookie");
        assert!(!v1.join(".browser-profiles/p/Default/Cache").exists() && !v1.join(".browser-profiles/p/SingletonLock").exists());
        assert_eq!(fs::read_to_string(v1.join("Cache/mine.txt")).unwrap(), "not a browser cache");
        assert_eq!(fs::read_link(v1.join("bots/b1/link")).unwrap(), Path::new("notes.md"));

        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&machine.join("bots/b1/notes.md"), "two");
        let r2 = checkpoint_files(&machine, &store).unwrap();
        assert_eq!((r2.version, r2.files, r2.copied), (2, 4, 1), "one changed file is copied, the rest linked");
        let v2 = current_version(&store).unwrap().1;
        assert_eq!(fs::read_to_string(v2.join("bots/b1/notes.md")).unwrap(), "two");
        assert!(!v1.exists(), "older versions are removed");

        // Restore into a missing machine disk.
        let fresh = t.path().join("fresh");
        let r = restore_files(&store, &fresh).unwrap().unwrap();
        assert_eq!((r.version, r.files), (2, 4));
        assert_eq!(fs::read_to_string(fresh.join("shared/big.txt")).unwrap().len(), 10_000);
        // Editing the restored copy never touches the checkpoint (no links out of the store).
        write(&fresh.join("shared/big.txt"), "changed");
        assert_eq!(fs::read_to_string(v2.join("shared/big.txt")).unwrap().len(), 10_000);
    }
}

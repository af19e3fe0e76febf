//! Browsing a bot's workspace, as the Files pane and `botdesk files ls|cat|get` do: through its
//! computer while it runs (the helper judges every path where the bot sees it), else in its latest
//! checkpoint on this machine, without Docker (the computer stopped, or Docker off).
//!
//! A checkpoint holds the person's own immutable files, and walks in it never follow a symlink:
//! every component is `lstat`ed and must be a real folder, so nothing outside the checkpoint is
//! ever read. Only regular files are read (opened with `O_NOFOLLOW | O_NONBLOCK` and checked on the
//! open descriptor, so a FIFO never hangs anything), and reads stream up to their limit.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use botdesk_core::{BotId, CallCtx, ComputerError, ComputerRef, ExecRequest, FileEntry, FileKind, MachineStatus, WorkspacePath};
use bytes::Bytes;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::error::blocking;
use crate::{home_store, BotRef, Engine, EngineError, ErrorCode, Result};

fn io(path: &str, e: std::io::Error) -> EngineError {
    match e.kind() {
        std::io::ErrorKind::NotFound => EngineError::new(ErrorCode::NotFound, format!("{path} does not exist")),
        _ => EngineError::new(ErrorCode::Internal, format!("{path}: {e}")),
    }
}

/// `rel` inside the checkpoint `root` with every folder on the way a real folder, and the
/// metadata of its last component (not followed).
pub(crate) fn locate(root: &Path, rel: &WorkspacePath) -> Result<(PathBuf, fs::Metadata)> {
    let mut p = root.to_path_buf();
    let parts: Vec<&str> = rel.as_str().split('/').filter(|c| !c.is_empty()).collect();
    let mut meta = fs::symlink_metadata(&p).map_err(|e| io("the stored workspace", e))?;
    for (i, c) in parts.iter().enumerate() {
        if !meta.is_dir() {
            let at = parts[..i].join("/");
            return Err(if meta.file_type().is_symlink() {
                EngineError::new(ErrorCode::PathEscapes, format!("{at} is a symbolic link; it is followed only while the computer runs"))
            } else {
                EngineError::invalid(format!("{at} is not a folder"))
            });
        }
        p.push(c);
        meta = fs::symlink_metadata(&p).map_err(|e| io(rel.as_str(), e))?;
    }
    Ok((p, meta))
}

fn entry(path: WorkspacePath, meta: &fs::Metadata, target: Option<&str>) -> Option<FileEntry> {
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        // Only links that stay inside the workspace are shown.
        path.symlink_destination(target?)?;
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        return None;
    };
    let executable = kind == FileKind::File && meta.permissions().mode() & 0o100 != 0;
    Some(FileEntry { path, kind, size: if kind == FileKind::File { meta.len() } else { 0 }, executable })
}

/// Where a workspace is watched: its running computer, or its latest checkpoint (None: never saved).
enum Source {
    Live(ComputerRef),
    Stored(Option<PathBuf>),
}

impl Engine {
    async fn source(&self, computer: &botdesk_store::Computer) -> Source {
        let cref = computer.cref();
        // Docker being down is no error here: the checkpoint is browsed instead.
        if computer.home_volume.is_some() && matches!(self.inner.provider.status(&cref).await, Ok(MachineStatus::Running)) {
            return Source::Live(cref);
        }
        Source::Stored(self.stored_root(computer))
    }

    /// Runs `live` on the bot's computer. `Ok(None)` when it is not running, or Docker is not
    /// reachable (no error here: the caller browses the latest checkpoint instead). The call's own
    /// lookup of the container is the only one: no status check comes first.
    async fn live<T, F>(&self, computer: &botdesk_store::Computer, live: impl FnOnce(ComputerRef) -> F) -> Result<Option<T>>
    where
        F: std::future::Future<Output = std::result::Result<T, ComputerError>>,
    {
        if computer.home_volume.is_none() {
            return Ok(None);
        }
        match live(computer.cref()).await {
            Ok(v) => Ok(Some(v)),
            Err(ComputerError::NotRunning(_) | ComputerError::Unavailable(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The latest checkpoint of the computer's home (None: never saved).
    fn stored_root(&self, computer: &botdesk_store::Computer) -> Option<PathBuf> {
        home_store::current_version(&self.inner.data.home(&computer.home_key)).map(|(_, p)| p)
    }

    /// A kept version of the computer's home.
    fn version_root(&self, computer: &botdesk_store::Computer, version: u64) -> Result<PathBuf> {
        let root = self.inner.data.home(&computer.home_key).join(format!("v{version}"));
        if !root.is_dir() {
            return Err(EngineError::new(ErrorCode::NotFound, format!("there is no version {version} of this workspace (see its history)")));
        }
        Ok(root)
    }

    /// Lists a folder of the workspace (relative to the bot's folder), sorted by path.
    pub async fn stored_list(&self, bot: &BotRef, path: &str) -> Result<(String, Vec<FileEntry>)> {
        self.stored_list_at(bot, path, None).await
    }

    /// [`Engine::stored_list`] in a kept version of the workspace (`version`), or as it is now.
    pub async fn stored_list_at(&self, bot: &BotRef, path: &str, version: Option<u64>) -> Result<(String, Vec<FileEntry>)> {
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let dir = self.resolve(&b, &computer, path)?;
        let own = dir == self.resolve(&b, &computer, "")?;
        let (ctx, at) = (crate::bot_ctx(&b, &computer), &dir);
        let root = match version {
            Some(v) => Some(self.version_root(&computer, v)?),
            None => {
                if let Some(mut entries) = self.live(&computer, |c| async move { self.inner.provider.list(&c, at, &ctx).await }).await? {
                    entries.sort_by(|a, b| a.path.cmp(&b.path));
                    return Ok((dir.to_string(), entries));
                }
                self.stored_root(&computer)
            }
        };
        blocking(move || {
            let found = root.as_ref().map(|r| locate(r, &dir));
            // A computer that never ran has no workspace yet: the bot's folder is simply empty.
            let (real, meta) = match found {
                Some(Ok(found)) => found,
                None | Some(Err(EngineError { code: ErrorCode::NotFound, .. })) if own => return Ok((dir.to_string(), vec![])),
                None => return Err(EngineError::new(ErrorCode::NotFound, format!("{dir} does not exist"))),
                Some(Err(e)) => return Err(e),
            };
            if meta.file_type().is_symlink() {
                return Err(EngineError::new(ErrorCode::PathEscapes, format!("{dir} is a symbolic link; it is followed only while the computer runs")));
            }
            if !meta.is_dir() {
                return Err(EngineError::invalid(format!("{dir} is not a folder")));
            }
            let mut entries = vec![];
            for e in fs::read_dir(&real).map_err(|e| io(dir.as_str(), e))?.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
                let Ok(child) = dir.child(&name) else { continue };
                let Ok(meta) = fs::symlink_metadata(e.path()) else { continue };
                let target = meta.file_type().is_symlink().then(|| fs::read_link(e.path()).ok()).flatten();
                entries.extend(entry(child, &meta, target.as_ref().and_then(|t| t.to_str())));
            }
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            Ok((dir.to_string(), entries))
        })
        .await
    }

    /// One entry of the workspace.
    pub async fn stored_stat(&self, bot: &BotRef, path: &str) -> Result<FileEntry> {
        self.stored_stat_at(bot, path, None).await
    }

    /// [`Engine::stored_stat`] in a kept version of the workspace, or as it is now.
    pub async fn stored_stat_at(&self, bot: &BotRef, path: &str, version: Option<u64>) -> Result<FileEntry> {
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let file = self.resolve(&b, &computer, path)?;
        let (parent, ctx) = (file.parent().unwrap_or_else(WorkspacePath::root), crate::bot_ctx(&b, &computer));
        let root = match version {
            Some(v) => self.version_root(&computer, v)?,
            None => {
                if let Some(listed) = self.live(&computer, |c| async move { self.inner.provider.list(&c, &parent, &ctx).await }).await? {
                    return listed.into_iter().find(|e| e.path == file).ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("{file} does not exist")));
                }
                self.stored_root(&computer).ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("{file} does not exist")))?
            }
        };
        blocking(move || {
            let (real, meta) = locate(&root, &file)?;
            let target = fs::read_link(&real).ok();
            entry(file.clone(), &meta, target.as_ref().and_then(|t| t.to_str())).ok_or_else(|| EngineError::invalid(format!("{file} is not a file or folder")))
        })
        .await
    }

    /// Reads a regular file of the workspace, all or nothing under `max_bytes`.
    pub async fn stored_read(&self, bot: &BotRef, path: &str, max_bytes: u64) -> Result<Bytes> {
        self.stored_read_at(bot, path, max_bytes, None).await
    }

    /// [`Engine::stored_read`] in a kept version of the workspace, or as it is now.
    pub async fn stored_read_at(&self, bot: &BotRef, path: &str, max_bytes: u64, version: Option<u64>) -> Result<Bytes> {
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let file = self.resolve(&b, &computer, path)?;
        let (ctx, at) = (crate::bot_ctx(&b, &computer), &file);
        let root = match version {
            Some(v) => self.version_root(&computer, v)?,
            None => {
                if let Some(bytes) = self.live(&computer, |c| async move { self.inner.provider.read(&c, at, max_bytes, &ctx).await }).await? {
                    return Ok(bytes);
                }
                self.stored_root(&computer).ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("{file} does not exist")))?
            }
        };
        blocking(move || {
            let (real, _) = locate(&root, &file)?;
            let f = fs::File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&real).map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => EngineError::invalid(format!("{file} is a symbolic link; it is followed only while the computer runs")),
                _ => io(file.as_str(), e),
            })?;
            let meta = f.metadata().map_err(|e| io(file.as_str(), e))?;
            if !meta.is_file() {
                return Err(EngineError::invalid(format!("{file} is not a regular file")));
            }
            if meta.len() > max_bytes {
                return Err(EngineError::new(ErrorCode::TooLarge, format!("{file} is {} bytes, more than the {max_bytes} allowed", meta.len())));
            }
            let mut buf = Vec::new();
            f.take(max_bytes + 1).read_to_end(&mut buf).map_err(|e| io(file.as_str(), e))?;
            if buf.len() as u64 > max_bytes {
                return Err(EngineError::new(ErrorCode::TooLarge, format!("{file} is more than the {max_bytes} bytes allowed")));
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    /// Tells the visible Files pane when a bot's workspace may have changed: while its computer
    /// runs, the helper's inotify watch inside the computer (never through a link; the host walks
    /// nothing); otherwise a new checkpoint. Also when the computer starts or stops. Ends when
    /// `cancel` fires or the receiver is dropped.
    pub fn watch_workspace(&self, bot: &BotId, cancel: CancellationToken) -> tokio::sync::mpsc::Receiver<()> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let (engine, bot) = (self.clone(), bot.clone());
        tokio::spawn(async move {
            let mut was_live = None;
            let mut last_checkpoint = None;
            while !cancel.is_cancelled() && !tx.is_closed() {
                let Ok((b, computer)) = engine.bot_and_computer(&bot).await else { break };
                let source = engine.source(&computer).await;
                let live = matches!(source, Source::Live(_));
                if was_live.is_some_and(|w| w != live) {
                    let _ = tx.try_send(());
                }
                was_live = Some(live);
                match source {
                    Source::Live(cref) => {
                        let (out, mut lines) = tokio::sync::mpsc::unbounded_channel();
                        let stop = cancel.child_token();
                        let req = ExecRequest::new(["botdesk-helper", "watch"]).timeout(Duration::from_secs(60 * 60));
                        let ctx = CallCtx { cancel: stop.clone(), ..crate::bot_ctx(&b, &computer) };
                        let watch = engine.inner.provider.exec(&cref, req, Some(out), &ctx);
                        tokio::pin!(watch);
                        loop {
                            tokio::select! {
                                _ = &mut watch => break,
                                Some(_) = lines.recv() => { let _ = tx.try_send(()); }
                                _ = tx.closed() => stop.cancel(),
                            }
                        }
                    }
                    Source::Stored(root) => {
                        if last_checkpoint.is_some() && last_checkpoint != Some(root.clone()) {
                            let _ = tx.try_send(());
                        }
                        last_checkpoint = Some(root);
                    }
                }
                // Between watches (the computer stopped, or Docker is off): look again each second.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = cancel.cancelled() => break,
                    _ = tx.closed() => break,
                }
            }
        });
        rx
    }

    /// Upload: writes a file into the bot's workspace through its computer, only while the person
    /// holds control of the bot's screen.
    pub async fn upload(&self, bot: &BotRef, path: &str, data: Bytes, max_bytes: u64) -> Result<String> {
        if self.control_of(&bot.id).await?.is_none() {
            return Err(EngineError::new(ErrorCode::Busy, "take control of the bot's screen to upload files"));
        }
        if data.len() as u64 > max_bytes {
            return Err(EngineError::new(ErrorCode::TooLarge, format!("the file is {} bytes; uploads are limited to {max_bytes} bytes", data.len())));
        }
        self.files_write(bot, path, data, false).await
    }
}

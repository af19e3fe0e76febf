//! The stored workspace on this machine (`DATA_DIR/homes/<home-key>`, the computer's home):
//! browse and read it without Docker, even when the computer is stopped or Docker is off. Paths
//! follow the same rules as a bot's tools, and nothing outside the home is ever read (a symlink
//! that leads out is neither listed nor followed).

use std::path::{Path, PathBuf};

use botdesk_core::{FileEntry, FileKind, WorkspacePath};
use bytes::Bytes;

use crate::error::blocking;
use crate::{Engine, EngineError, ErrorCode, Result};

fn io(path: &str, e: std::io::Error) -> EngineError {
    match e.kind() {
        std::io::ErrorKind::NotFound => EngineError::new(ErrorCode::NotFound, format!("{path} does not exist")),
        _ => EngineError::new(ErrorCode::Internal, format!("{path}: {e}")),
    }
}

/// The host path of `rel` under `home`, refusing anything whose real location is outside it.
fn inside(home: &Path, rel: &WorkspacePath) -> Result<PathBuf> {
    let root = home.canonicalize().map_err(|e| io("the stored workspace", e))?;
    let full = root.join(rel.as_str());
    let real = full.canonicalize().map_err(|e| io(&rel.to_string(), e))?;
    if !real.starts_with(&root) {
        return Err(EngineError::new(ErrorCode::PathEscapes, format!("{rel} leads outside the workspace")));
    }
    Ok(real)
}

impl Engine {
    /// The workspace on this machine: the computer's disk while it exists, else its latest
    /// checkpoint (a destroyed computer).
    fn workspace_root(&self, computer: &botdesk_store::Computer) -> PathBuf {
        let machine = self.inner.data.machine(computer.id.as_str());
        if machine.exists() {
            return machine;
        }
        crate::checkpoint::current_version(&self.inner.data.home(&computer.home_key)).map(|(_, p)| p).unwrap_or(machine)
    }

    /// Where a bot's workspace is on this machine (see `workspace_root`).
    pub async fn stored_home(&self, bot: &str) -> Result<PathBuf> {
        let (_, computer) = self.bot_and_computer(bot).await?;
        Ok(self.workspace_root(&computer))
    }

    /// Lists a folder of the stored workspace (relative to the bot's folder), sorted by path.
    pub async fn stored_list(&self, bot: &str, path: &str) -> Result<(String, Vec<FileEntry>)> {
        let (b, computer) = self.bot_and_computer(bot).await?;
        let dir = self.resolve(&b, &computer, path)?;
        let home = self.workspace_root(&computer);
        let own = dir == self.resolve(&b, &computer, "")?;
        blocking(move || {
            // A computer that never ran has no workspace yet: the bot's folder is simply empty.
            if own && !home.join(dir.as_str()).exists() {
                return Ok((dir.to_string(), vec![]));
            }
            let real = inside(&home, &dir)?;
            let root = home.canonicalize().map_err(|e| io("the stored workspace", e))?;
            let mut entries = vec![];
            for e in std::fs::read_dir(&real).map_err(|e| io(&dir.to_string(), e))?.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_string) else { continue };
                let Ok(child) = dir.join(&name) else { continue };
                let Ok(meta) = e.path().symlink_metadata() else { continue };
                let kind = if meta.file_type().is_symlink() {
                    // Only links that stay inside the workspace are shown.
                    match e.path().canonicalize() {
                        Ok(t) if t.starts_with(&root) => FileKind::Symlink,
                        _ => continue,
                    }
                } else if meta.is_dir() {
                    FileKind::Dir
                } else if meta.is_file() {
                    FileKind::File
                } else {
                    continue;
                };
                let executable = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o100 != 0 && kind == FileKind::File;
                entries.push(FileEntry { path: child, kind, size: if kind == FileKind::File { meta.len() } else { 0 }, executable });
            }
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            Ok((dir.to_string(), entries))
        })
        .await
    }

    /// One entry of the stored workspace.
    pub async fn stored_stat(&self, bot: &str, path: &str) -> Result<FileEntry> {
        self.stored_file(bot, path, |_, file, meta| {
            let kind = if meta.is_dir() { FileKind::Dir } else { FileKind::File };
            Ok(FileEntry { path: file, kind, size: meta.len(), executable: std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o100 != 0 })
        })
        .await
    }

    /// Reads a file of the stored workspace, all or nothing under `max_bytes`.
    pub async fn stored_read(&self, bot: &str, path: &str, max_bytes: u64) -> Result<Bytes> {
        self.stored_file(bot, path, move |real, file, meta| {
            if meta.is_dir() {
                return Err(EngineError::invalid(format!("{file} is a folder")));
            }
            if meta.len() > max_bytes {
                return Err(EngineError::new(ErrorCode::TooLarge, format!("{file} is {} bytes, more than the {max_bytes} allowed", meta.len())));
            }
            use std::io::Read;
            let mut buf = Vec::with_capacity(meta.len() as usize);
            std::fs::File::open(&real).and_then(|f| f.take(max_bytes + 1).read_to_end(&mut buf)).map_err(|e| io(&file.to_string(), e))?;
            if buf.len() as u64 > max_bytes {
                return Err(EngineError::new(ErrorCode::TooLarge, format!("{file} grew beyond the {max_bytes} bytes allowed while being read")));
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    /// Runs `f` off the async runtime on one path of the bot's stored workspace: its real location
    /// (never outside the home), its workspace path and its metadata.
    async fn stored_file<T: Send + 'static>(
        &self,
        bot: &str,
        path: &str,
        f: impl FnOnce(PathBuf, WorkspacePath, std::fs::Metadata) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (b, computer) = self.bot_and_computer(bot).await?;
        let file = self.resolve(&b, &computer, path)?;
        let home = self.workspace_root(&computer);
        blocking(move || {
            let real = inside(&home, &file)?;
            let meta = std::fs::metadata(&real).map_err(|e| io(&file.to_string(), e))?;
            f(real, file, meta)
        })
        .await
    }

    /// Upload: writes a file into the bot's workspace through its computer, only while the person
    /// holds control of the bot's screen.
    pub async fn upload(&self, bot: &str, path: &str, data: Bytes, max_bytes: u64) -> Result<String> {
        if self.control_of(bot).await?.is_none() {
            return Err(EngineError::new(ErrorCode::Busy, "take control of the bot's screen to upload files"));
        }
        if data.len() as u64 > max_bytes {
            return Err(EngineError::new(ErrorCode::TooLarge, format!("the file is {} bytes; uploads are limited to {max_bytes} bytes", data.len())));
        }
        self.files_write(bot, path, data, false).await
    }
}

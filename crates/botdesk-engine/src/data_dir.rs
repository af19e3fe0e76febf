//! The data directory: `botdesk.db`, `homes/<home-key>/`, `recordings/<run>/`, `logs/`, `cache/`.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::error::{EngineError, ErrorCode, Result};

#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// `BOTDESK_DATA_DIR`, else the platform data dir (`$XDG_DATA_HOME/botdesk` on Linux).
    pub fn default_location() -> PathBuf {
        if let Some(dir) = std::env::var_os("BOTDESK_DATA_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        if cfg!(target_os = "macos") {
            return home.join("Library/Application Support/botdesk");
        }
        std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()).map(PathBuf::from).unwrap_or_else(|| home.join(".local/share")).join("botdesk")
    }

    /// Creates the folders if needed. The data directory is the person's alone (0700) and so is
    /// the database (0600, before SQLite creates it; its journal files take its mode).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let root: PathBuf = root.into();
        let fail = |what: &Path, e: std::io::Error| EngineError::new(ErrorCode::Invalid, format!("cannot create the data directory {}: {e}", what.display()));
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&root).map_err(|e| fail(&root, e))?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail(&root, e))?;
        for dir in [root.join("homes"), root.join("logs"), root.join("cache")] {
            std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, e))?;
        }
        let db = root.join("botdesk.db");
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&db).map_err(|e| fail(&db, e))?;
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).map_err(|e| fail(&db, e))?;
        let root = root.canonicalize().unwrap_or(root);
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn settings(&self) -> PathBuf {
        self.root.join("settings.json")
    }

    pub fn db(&self) -> PathBuf {
        self.root.join("botdesk.db")
    }
    pub fn home(&self, home_key: &str) -> PathBuf {
        self.root.join("homes").join(home_key)
    }
    /// Screen recordings, a folder per run (`recording.rs`).
    pub fn recordings(&self) -> PathBuf {
        self.root.join("recordings")
    }
    pub fn recording(&self, run_id: &str) -> PathBuf {
        self.recordings().join(run_id)
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    pub fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Label value tying containers to this data directory: the first 16 hex of SHA-256 of its path.
    pub fn label(&self) -> String {
        hex::encode(Sha256::digest(self.root.to_string_lossy().as_bytes()))[..16].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_data_directory_and_the_database_are_the_persons_alone() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("botdesk");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = DataDir::open(&root).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(d.root()), 0o700, "an existing data directory is made private too");
        assert_eq!(mode(&d.db()), 0o600);
    }
}

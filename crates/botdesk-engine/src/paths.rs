//! The data directory (DESIGN §3): `botdesk.db`, `homes/<home-key>/`, `logs/`, `cache/`.

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
        std::env::var_os("XDG_DATA_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".local/share"))
            .join("botdesk")
    }

    /// Creates the folders if needed.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self> {
        let root: PathBuf = root.into();
        for dir in [root.clone(), root.join("homes"), root.join("logs"), root.join("cache")] {
            std::fs::create_dir_all(&dir).map_err(|e| {
                EngineError::new(ErrorCode::Invalid, format!("cannot create the data directory {}: {e}", dir.display()))
            })?;
        }
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
    /// A computer's machine disk (bind-mounted as its home while it exists).
    pub fn machine(&self, computer_id: &str) -> PathBuf {
        self.root.join("machines").join(computer_id).join("home")
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

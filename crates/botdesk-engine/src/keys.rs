//! Where keys are kept: the OS keyring (Secret Service on Linux) when one answers; otherwise
//! `keys.vault` in the data directory, encrypted with a passphrase the person gives once per
//! process (the app asks in a dialog, the CLI on its terminal or from the file descriptor named
//! by `BOTDESK_PASSPHRASE_FD`). The choice is made once per process: a vault that exists is used
//! (the keys are in it), else the Secret Service if it answers, else a new vault.
//!
//! The vault's bytes: [`MAGIC`], a 16-byte salt, a 12-byte nonce, then ChaCha20-Poly1305 of the
//! JSON map entry → secret, under scrypt(passphrase, salt; 2^15, 8, 1). A wrong passphrase fails
//! the tag; nothing in the file is readable without it. Each write takes the file's lock, decrypts
//! what is there now, changes one entry, encrypts with a fresh nonce and renames a new file over
//! the old one, so the app and a CLI writing at once lose nothing.

use std::{
    collections::BTreeMap,
    io::Write,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use chacha20poly1305::{
    aead::{Aead, KeyInit},
    ChaCha20Poly1305, Key, Nonce,
};
use keyring_core::{
    api::{CredentialApi, CredentialStoreApi},
    Credential, CredentialStore, Entry,
};
use serde::Serialize;

use crate::{EngineError, ErrorCode, Result};

const MAGIC: &[u8] = b"BOTDESK-VAULT-1\n";
const SALT: usize = 16;
const NONCE: usize = 12;
/// scrypt's cost: about 32 MiB and a tenth of a second, once per process.
const LOG_N: u8 = 15;

/// Asks the person for the vault's passphrase; `true` when the vault is new (the passphrase is
/// being chosen). None: nobody can answer (the front end then says the keys are locked).
pub type AskPassphrase = Arc<dyn Fn(bool) -> Option<String> + Send + Sync>;

/// Which store holds this process's keys, for `doctor` and the app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum KeyStore {
    /// The OS keyring (Secret Service).
    SecretService,
    /// The encrypted file; `locked` until its passphrase is given in this process, `exists`
    /// false until the first key is saved (the passphrase is then chosen).
    Vault { path: String, exists: bool, locked: bool },
    /// This process's memory (tests).
    Memory,
}

/// The keys' store of one engine.
pub(crate) struct Keys {
    memory: Option<Arc<CredentialStore>>,
    vault: Arc<Vault>,
    ask: Option<AskPassphrase>,
    use_vault: OnceLock<bool>,
}

impl Keys {
    pub(crate) fn new(secrets: crate::Secrets, data_root: &Path, ask: Option<AskPassphrase>) -> Self {
        let memory = match secrets {
            crate::Secrets::Keyring => None,
            crate::Secrets::Memory(store) => Some(store),
        };
        Self { memory, vault: Arc::new(Vault::new(data_root.join("keys.vault"))), ask, use_vault: OnceLock::new() }
    }

    /// Whether keys go to the vault (decided once; blocks while the Secret Service is probed).
    fn use_vault(&self) -> bool {
        *self.use_vault.get_or_init(|| self.vault.path.exists() || secret_service_probe().is_err())
    }

    /// Blocking: the store to open entries in, unlocking the vault (asking) if it is used.
    pub(crate) fn store(&self) -> Result<Arc<CredentialStore>> {
        if let Some(m) = &self.memory {
            return Ok(m.clone());
        }
        if !self.use_vault() {
            let store: Arc<CredentialStore> = zbus_secret_service_keyring_store::Store::new().map_err(|e| keyring_err("the OS keyring", e))?;
            return Ok(store);
        }
        if !self.vault.unlocked() {
            let creating = !self.vault.path.exists();
            let locked = || locked_error(creating);
            let passphrase = self.ask.as_ref().and_then(|ask| ask(creating)).ok_or_else(locked)?;
            self.vault.unlock(&passphrase)?;
        }
        Ok(Arc::new(VaultStore(self.vault.clone())))
    }

    /// Blocking: gives the vault its passphrase (chooses it when the vault is new).
    pub(crate) fn unlock(&self, passphrase: &str) -> Result<()> {
        if self.memory.is_some() || !self.use_vault() {
            return Ok(());
        }
        self.vault.unlock(passphrase)
    }

    /// Blocking: which store holds the keys.
    pub(crate) fn state(&self) -> KeyStore {
        if self.memory.is_some() {
            return KeyStore::Memory;
        }
        if !self.use_vault() {
            return KeyStore::SecretService;
        }
        KeyStore::Vault { path: self.vault.path.display().to_string(), exists: self.vault.path.exists(), locked: !self.vault.unlocked() }
    }
}

fn locked_error(creating: bool) -> EngineError {
    let what = if creating { "choose a passphrase for them" } else { "give their passphrase" };
    EngineError::new(
        ErrorCode::KeysLocked,
        format!(
            "no Secret Service answers, so keys are kept in an encrypted file: {what} (the app asks; the CLI asks on its terminal or reads it from the file descriptor in BOTDESK_PASSPHRASE_FD)"
        ),
    )
}

pub(crate) fn keyring_err(store: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::new(ErrorCode::Internal, format!("{store} failed: {e}. Is a Secret Service (e.g. gnome-keyring) running and unlocked?"))
}

/// Blocking: the Secret Service answers a lookup within 10 s ("no entry" is an answer).
pub(crate) fn secret_service_probe() -> std::result::Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let probe = || -> std::result::Result<(), String> {
            let store: Arc<CredentialStore> = zbus_secret_service_keyring_store::Store::new().map_err(|e| e.to_string())?;
            match Entry::new_in_store(&store, "botdesk", "doctor-probe").map_err(|e| e.to_string())?.get_password() {
                Ok(_) | Err(keyring_core::Error::NoEntry) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        };
        let _ = tx.send(probe());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| Err("the Secret Service did not answer within 10 s".into()))
}

/// The encrypted file and, once given, the key its passphrase derives.
struct Vault {
    path: PathBuf,
    /// (salt, key) of the file as unlocked.
    key: Mutex<Option<([u8; SALT], [u8; 32])>>,
}

type Secrets = BTreeMap<String, Vec<u8>>;

impl Vault {
    fn new(path: PathBuf) -> Self {
        Self { path, key: Mutex::new(None) }
    }

    fn unlocked(&self) -> bool {
        self.key.lock().unwrap().is_some()
    }

    /// Checks the passphrase against the file (or makes an empty file with it).
    fn unlock(&self, passphrase: &str) -> Result<()> {
        if passphrase.is_empty() {
            return Err(EngineError::invalid("the passphrase is empty"));
        }
        let _lock = self.lock()?;
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                let salt = header(&bytes)?.0;
                let key = derive(passphrase, &salt)?;
                open(&bytes, &key)?;
                *self.key.lock().unwrap() = Some((salt, key));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut salt = [0; SALT];
                getrandom::fill(&mut salt).map_err(|e| EngineError::new(ErrorCode::Internal, format!("no randomness: {e}")))?;
                let key = derive(passphrase, &salt)?;
                *self.key.lock().unwrap() = Some((salt, key));
                self.write(&Secrets::new())?;
            }
            Err(e) => return Err(io_err(&self.path, e)),
        }
        Ok(())
    }

    /// The lock every reader and writer of the file holds (a file beside it, never replaced).
    fn lock(&self) -> Result<std::fs::File> {
        let path = self.path.with_extension("vault.lock");
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(|e| io_err(&path, e))?;
        f.lock().map_err(|e| io_err(&path, e))?;
        Ok(f)
    }

    fn key(&self) -> keyring_core::Result<([u8; SALT], [u8; 32])> {
        self.key.lock().unwrap().ok_or_else(|| keyring_core::Error::NoStorageAccess("the key vault is locked".into()))
    }

    fn read(&self) -> Result<Secrets> {
        let (_, key) = self.key().map_err(|e| keyring_err("the key vault", e))?;
        let bytes = std::fs::read(&self.path).map_err(|e| io_err(&self.path, e))?;
        open(&bytes, &key)
    }

    fn write(&self, secrets: &Secrets) -> Result<()> {
        let (salt, key) = self.key().map_err(|e| keyring_err("the key vault", e))?;
        let mut nonce = [0; NONCE];
        getrandom::fill(&mut nonce).map_err(|e| EngineError::new(ErrorCode::Internal, format!("no randomness: {e}")))?;
        let plain = serde_json::to_vec(secrets).map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
        let sealed = ChaCha20Poly1305::new(&Key::from(key))
            .encrypt(&Nonce::from(nonce), plain.as_slice())
            .map_err(|_| EngineError::new(ErrorCode::Internal, "encrypting the key vault failed"))?;
        let tmp = self.path.with_extension(format!("vault.{}.tmp", std::process::id()));
        let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&tmp).map_err(|e| io_err(&tmp, e))?;
        let written = f.write_all(MAGIC).and_then(|_| f.write_all(&salt)).and_then(|_| f.write_all(&nonce)).and_then(|_| f.write_all(&sealed));
        written.and_then(|_| f.sync_all()).and_then(|_| std::fs::rename(&tmp, &self.path)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_err(&self.path, e)
        })
    }

    /// One change under the lock: read, change, write.
    fn change<T>(&self, f: impl FnOnce(&mut Secrets) -> keyring_core::Result<T>) -> keyring_core::Result<T> {
        let _lock = self.lock().map_err(platform)?;
        let mut secrets = self.read().map_err(platform)?;
        let out = f(&mut secrets)?;
        self.write(&secrets).map_err(platform)?;
        Ok(out)
    }
}

fn platform(e: EngineError) -> keyring_core::Error {
    keyring_core::Error::PlatformFailure(e.message.into())
}

fn io_err(path: &Path, e: std::io::Error) -> EngineError {
    EngineError::new(ErrorCode::Internal, format!("the key vault {}: {e}", path.display()))
}

fn damaged(why: &str) -> EngineError {
    EngineError::new(ErrorCode::Internal, format!("the key vault is damaged ({why}): move keys.vault aside and add the keys again"))
}

fn header(bytes: &[u8]) -> Result<([u8; SALT], [u8; NONCE])> {
    let rest = bytes.strip_prefix(MAGIC).ok_or_else(|| damaged("not a Botdesk key vault"))?;
    if rest.len() < SALT + NONCE + 16 {
        return Err(damaged("too short"));
    }
    Ok((rest[..SALT].try_into().unwrap(), rest[SALT..SALT + NONCE].try_into().unwrap()))
}

fn derive(passphrase: &str, salt: &[u8; SALT]) -> Result<[u8; 32]> {
    let params = scrypt::Params::new(LOG_N, 8, 1).map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
    let mut key = [0; 32];
    scrypt::scrypt(passphrase.as_bytes(), salt, &params, &mut key).map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
    Ok(key)
}

fn open(bytes: &[u8], key: &[u8; 32]) -> Result<Secrets> {
    let (_, nonce) = header(bytes)?;
    let sealed = &bytes[MAGIC.len() + SALT + NONCE..];
    let plain = ChaCha20Poly1305::new(&Key::from(*key))
        .decrypt(&Nonce::from(nonce), sealed)
        .map_err(|_| EngineError::new(ErrorCode::KeysLocked, "wrong passphrase for the key vault"))?;
    serde_json::from_slice(&plain).map_err(|_| damaged("its contents do not parse"))
}

/// The vault as a keyring store, so models and logins use it as they use the Secret Service.
#[derive(Debug)]
struct VaultStore(Arc<Vault>);

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vault({})", self.path.display())
    }
}

impl CredentialStoreApi for VaultStore {
    fn vendor(&self) -> String {
        "botdesk key vault".into()
    }
    fn id(&self) -> String {
        self.0.path.display().to_string()
    }
    fn build(&self, service: &str, user: &str, _: Option<&std::collections::HashMap<&str, &str>>) -> keyring_core::Result<Entry> {
        let entry = format!("{service}:{user}");
        Ok(Entry::new_with_credential(Arc::new(VaultEntry { vault: self.0.clone(), service: service.into(), user: user.into(), entry })))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[derive(Debug)]
struct VaultEntry {
    vault: Arc<Vault>,
    service: String,
    user: String,
    entry: String,
}

impl CredentialApi for VaultEntry {
    fn set_secret(&self, secret: &[u8]) -> keyring_core::Result<()> {
        self.vault.change(|s| {
            s.insert(self.entry.clone(), secret.to_vec());
            Ok(())
        })
    }
    fn get_secret(&self) -> keyring_core::Result<Vec<u8>> {
        let _lock = self.vault.lock().map_err(platform)?;
        self.vault.read().map_err(platform)?.remove(&self.entry).ok_or(keyring_core::Error::NoEntry)
    }
    fn delete_credential(&self) -> keyring_core::Result<()> {
        self.vault.change(|s| s.remove(&self.entry).map(|_| ()).ok_or(keyring_core::Error::NoEntry))
    }
    fn get_credential(&self) -> keyring_core::Result<Option<Arc<Credential>>> {
        self.get_secret().map(|_| None)
    }
    fn get_specifiers(&self) -> Option<(String, String)> {
        Some((self.service.clone(), self.user.clone()))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vault_keeps_secrets_only_encrypted_and_refuses_a_wrong_passphrase() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys { memory: None, vault: Arc::new(Vault::new(dir.path().join("keys.vault"))), ask: None, use_vault: OnceLock::from(true) };
        assert_eq!(keys.store().unwrap_err().code, ErrorCode::KeysLocked, "no passphrase, no store");
        keys.unlock("correct horse").unwrap();
        let store = keys.store().unwrap();
        let entry = Entry::new_in_store(&store, "botdesk", "model:m").unwrap();
        assert!(matches!(entry.get_password(), Err(keyring_core::Error::NoEntry)));
        entry.set_password("sk-ant-secret-1234").unwrap();
        Entry::new_in_store(&store, "botdesk", "login:b:https://x").unwrap().set_password("pw").unwrap();
        assert_eq!(entry.get_password().unwrap(), "sk-ant-secret-1234");
        let bytes = std::fs::read(dir.path().join("keys.vault")).unwrap();
        assert!(!bytes.windows(6).any(|w| w == b"secret" || w == b"model:"), "the vault holds plain text");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.path().join("keys.vault")).unwrap().permissions().mode() & 0o777, 0o600);

        // Another process: a wrong passphrase is refused and changes nothing; the right one reads.
        let other = Vault::new(dir.path().join("keys.vault"));
        assert_eq!(other.unlock("wrong").unwrap_err().code, ErrorCode::KeysLocked);
        assert_eq!(std::fs::read(dir.path().join("keys.vault")).unwrap(), bytes);
        other.unlock("correct horse").unwrap();
        assert_eq!(other.read().unwrap().get("botdesk:model:m").map(Vec::as_slice), Some(&b"sk-ant-secret-1234"[..]));
        entry.delete_credential().unwrap();
        assert!(matches!(entry.delete_credential(), Err(keyring_core::Error::NoEntry)));
        assert_eq!(other.read().unwrap().len(), 1, "the login stays");

        // Damage is said, not a panic.
        std::fs::write(dir.path().join("keys.vault"), b"BOTDESK-VAULT-1\nshort").unwrap();
        assert!(Vault::new(dir.path().join("keys.vault")).unlock("correct horse").unwrap_err().message.contains("damaged"));
    }
}

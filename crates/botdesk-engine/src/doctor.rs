//! `doctor`: every check a person needs before the first bot runs, each with how to fix it.

use botdesk_core::machine::{Check, Machine};
use serde::Serialize;

use crate::data_dir::DataDir;

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct DoctorReport {
    pub ok: bool,
    pub checks: Vec<Check>,
}

pub async fn run(machine: Option<&dyn Machine>, data: &DataDir, keys: &crate::KeyStore, now_ms: i64) -> DoctorReport {
    let mut checks = match machine {
        Some(m) => m.checks(now_ms).await,
        None => vec![Check::pass("docker", "not used by this engine")],
    };
    checks.push(data_dir_check(data));
    checks.push(keyring_check(keys));
    checks.push(display_libraries_check());
    DoctorReport { ok: checks.iter().all(|c| c.ok), checks }
}

fn data_dir_check(data: &DataDir) -> Check {
    let probe = data.root().join(format!(".doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"ok").and_then(|_| std::fs::remove_file(&probe)) {
        Ok(()) => Check::pass("data_dir", format!("{} is writable", data.root().display())),
        Err(e) => Check::fail("data_dir", format!("{} is not writable: {e}", data.root().display()), "set BOTDESK_DATA_DIR to a writable folder"),
    }
}

/// Which store keeps the keys: the Secret Service, or (when none answers) the encrypted vault.
fn keyring_check(keys: &crate::KeyStore) -> Check {
    match keys {
        crate::KeyStore::SecretService => Check::pass("keyring", "keys are kept in the Secret Service keyring, which answers"),
        crate::KeyStore::Vault { path, exists, .. } => Check::pass(
            "keyring",
            format!(
                "no Secret Service answers: keys are kept in the encrypted file {path}{} (passphrase asked once per session)",
                if *exists { "" } else { ", made with the first key" }
            ),
        ),
        crate::KeyStore::Memory => Check::pass("keyring", "keys are kept in this process's memory"),
    }
}

/// The app's window needs WebKitGTK 4.1 (Linux).
fn display_libraries_check() -> Check {
    if !cfg!(target_os = "linux") {
        return Check::pass("display_libraries", "provided by the operating system");
    }
    let dirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"];
    let needed = ["libwebkit2gtk-4.1.so.0", "libgtk-3.so.0"];
    let missing: Vec<&str> = needed.iter().copied().filter(|lib| !dirs.iter().any(|d| std::path::Path::new(d).join(lib).exists())).collect();
    if missing.is_empty() {
        Check::pass("display_libraries", "WebKitGTK 4.1 and GTK 3 are installed")
    } else {
        Check::fail(
            "display_libraries",
            format!("missing {}", missing.join(", ")),
            "sudo apt-get install libwebkit2gtk-4.1-0 libgtk-3-0 (or run `cargo xtask run`)",
        )
    }
}

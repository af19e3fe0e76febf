//! Docker hosts: the engine on this machine (`local`) and engines on other machines, reached over
//! TCP with mutual TLS (`botdesk host add NAME tcp://HOST:2376 --tls-dir DIR`). A host is checked
//! when it is added and by `doctor`; every problem is one line naming the host and the fix.

use std::path::Path;

use async_trait::async_trait;
use botdesk_core::machine::{Check, HostAddr, HostBook};
use botdesk_core::HostName;
use botdesk_store::{HostRow, Store};
use serde::Serialize;

use crate::{BuildProgress, Engine, EngineError, ErrorCode, Result};

/// The name of the engine on this machine.
pub const LOCAL: &str = "local";

/// A Docker host as front ends show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct HostView {
    pub name: String,
    /// `tcp://HOST:PORT`; for `local`, the engine's socket.
    pub url: String,
    /// The folder holding `ca.pem`, `cert.pem` and `key.pem` (none for `local`).
    pub tls_dir: Option<String>,
}

/// The hosts the person added, as the provider's router looks them up.
pub(crate) struct StoreHosts(pub Store);

#[async_trait]
impl HostBook for StoreHosts {
    async fn host(&self, name: &HostName) -> Option<HostAddr> {
        let row = self.0.host(name.as_str()).await.ok()?;
        Some(addr(&row))
    }
}

fn addr(h: &HostRow) -> HostAddr {
    HostAddr { url: h.url.clone(), tls_dir: h.tls_dir.clone().into() }
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) && !name.starts_with(['-', '.']);
    if !ok {
        return Err(EngineError::invalid(format!("a host name is 1–64 letters, digits, '-', '_' or '.', not {name:?}")));
    }
    if name == LOCAL {
        return Err(EngineError::new(ErrorCode::Conflict, "`local` is the Docker engine on this machine; give the other host another name"));
    }
    Ok(())
}

fn view(h: &HostRow) -> HostView {
    HostView { name: h.name.clone(), url: h.url.clone(), tls_dir: Some(h.tls_dir.clone()) }
}

impl Engine {
    /// Adds a Docker host on another machine, once it answered with these certificates. Returns
    /// it with what its engine said of itself (`Docker 24.0.7 (linux/amd64)`).
    pub async fn add_host(&self, name: &str, url: &str, tls_dir: &Path) -> Result<(HostView, String)> {
        check_name(name)?;
        let tls_dir = std::path::absolute(tls_dir).map_err(|e| EngineError::invalid(format!("host {name}: the folder {}: {e}", tls_dir.display())))?;
        let said = self.machine()?.check_host(&HostName::new(name), &HostAddr { url: url.to_string(), tls_dir: tls_dir.clone() }).await?;
        let row = HostRow { name: name.into(), url: url.into(), tls_dir: tls_dir.display().to_string(), created_at: self.now() };
        self.inner.store.add_host(&row).await?;
        Ok((view(&row), said))
    }

    /// `local` first, then the others by name.
    pub async fn list_hosts(&self) -> Result<Vec<HostView>> {
        let socket = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
        let mut out = vec![HostView { name: LOCAL.into(), url: socket, tls_dir: None }];
        out.extend(self.inner.store.list_hosts().await?.iter().map(view));
        Ok(out)
    }

    /// Sends the computer image to a host on another machine as one stream, with its progress
    /// (the host never pulls from a registry). False: the host had it already.
    pub async fn send_image(&self, host: &str, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<bool> {
        if host == LOCAL {
            return Err(EngineError::invalid("the image is built on `local` (`botdesk image build`); send it to a host on another machine"));
        }
        let hosts = self.inner.store.list_hosts().await?;
        let h = hosts
            .iter()
            .find(|h| h.name == host)
            .ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("host {host:?} (see `botdesk host ls`) was not found")))?;
        let machine = self.machine()?;
        if !machine.image_present().await? {
            let tag = machine.image_tag();
            return Err(EngineError::new(ErrorCode::NotFound, format!("the computer image {tag} is not built here yet: run `botdesk image build` first")));
        }
        Ok(machine.send_image(&HostName::new(host), &addr(h), progress).await?)
    }

    pub async fn remove_host(&self, name: &str) -> Result<()> {
        if name == LOCAL {
            return Err(EngineError::invalid("`local` is the Docker engine on this machine; it cannot be removed"));
        }
        self.inner.store.remove_host(name).await?;
        if let Some(m) = &self.inner.machine {
            m.forget_host(&HostName::new(name));
        }
        Ok(())
    }

    /// One check per host on another machine, all at once (each within its time bound).
    pub(crate) async fn check_hosts(&self) -> Vec<Check> {
        let hosts = match self.inner.store.list_hosts().await {
            Ok(h) => h,
            Err(e) => return vec![Check::fail("hosts", e.to_string(), "check the data directory")],
        };
        let Some(machine) = self.inner.machine.clone() else { return vec![] };
        let mut checks = tokio::task::JoinSet::new();
        for (i, h) in hosts.into_iter().enumerate() {
            let machine = machine.clone();
            checks.spawn(async move {
                let check = match machine.check_host(&HostName::new(&h.name), &addr(&h)).await {
                    Ok(said) => Check::pass(format!("host {}", h.name), format!("{said} answers at {}", h.url)),
                    Err(e) => {
                        let line = e.to_string();
                        let (detail, fix) =
                            line.split_once("; ").map(|(d, f)| (d.to_string(), f.to_string())).unwrap_or((line, "see `botdesk host ls`".into()));
                        Check::fail(format!("host {}", h.name), detail, fix)
                    }
                };
                (i, check)
            });
        }
        let mut done: Vec<(usize, Check)> = checks.join_all().await;
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_names() {
        super::check_name("build-box").unwrap();
        assert_eq!(super::check_name("local").unwrap_err().code, crate::ErrorCode::Conflict);
        for bad in ["", "a b", "-x", ".x", "a/b", &"x".repeat(65)] {
            assert!(super::check_name(bad).is_err(), "{bad:?}");
        }
    }
}

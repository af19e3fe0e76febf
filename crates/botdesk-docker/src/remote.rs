//! Docker engines on other machines: reached over TCP with mutual TLS, with Docker's own
//! `DOCKER_CERT_PATH` layout (a folder holding `ca.pem`, `cert.pem` and `key.pem`). Nothing goes
//! over the network unencrypted: a `tcp://` engine without certificates is refused, since anyone
//! who can reach it is root on its machine. `ssh://` is refused too: the Docker client library
//! (bollard) has no SSH transport.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;

/// How long a host has to answer a check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a remote engine is and the folder of certificates it is reached with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEngine {
    /// `tcp://HOST:PORT`.
    pub url: String,
    pub tls_dir: PathBuf,
}

/// A named engine on another machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteHost {
    pub name: botdesk_core::HostName,
    pub engine: RemoteEngine,
}

/// Why a host cannot be used, each with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostProblem {
    /// The address is not `tcp://HOST:PORT` (or it is `ssh://`, which the client cannot speak).
    Address(String),
    /// The certificate folder lacks a file or cannot be read.
    Certificates(String),
    /// The host's name does not resolve.
    UnknownHost,
    /// Nothing listens there.
    Refused,
    /// The TLS handshake failed: the host's certificate is not signed by `ca.pem` or does not
    /// name the address, or the host refused our client certificate.
    Tls(String),
    /// No answer within [`CHECK_TIMEOUT`].
    NoAnswer,
    /// Anything else the engine or the network said.
    Other(String),
}

impl HostProblem {
    /// One line naming the host, what is wrong, and the fix.
    pub fn line(&self, host: &str, url: &str) -> String {
        match self {
            HostProblem::Address(why) => format!("host {host}: {why}"),
            HostProblem::Certificates(why) => {
                format!("host {host}: {why}; give --tls-dir a folder holding ca.pem, cert.pem and key.pem (Docker's DOCKER_CERT_PATH layout)")
            }
            HostProblem::UnknownHost => format!("host {host}: the name in {url} does not resolve; check the address"),
            HostProblem::Refused => format!("host {host}: nothing answers at {url}; is dockerd running there with -H tcp://0.0.0.0:PORT --tlsverify?"),
            HostProblem::Tls(why) => format!(
                "host {host}: the TLS handshake with {url} failed ({why}); the host's certificate must be signed by ca.pem and name that address, and the host must trust cert.pem"
            ),
            HostProblem::NoAnswer => {
                format!("host {host}: no answer from {url} within {} s; check the network and that dockerd listens there", CHECK_TIMEOUT.as_secs())
            }
            HostProblem::Other(why) => format!("host {host}: {why}"),
        }
    }
}

/// Checks an address: `tcp://HOST:PORT` only.
pub fn check_address(url: &str) -> Result<(), HostProblem> {
    if url.starts_with("ssh://") {
        return Err(HostProblem::Address("ssh:// is not supported (the Docker client library has no SSH transport); use tcp://HOST:2376 with TLS".into()));
    }
    let Some(rest) = url.strip_prefix("tcp://") else {
        return Err(HostProblem::Address(format!("{url:?} is not an address of the form tcp://HOST:PORT")));
    };
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| HostProblem::Address(format!("{url:?} names no port (Docker with TLS listens on 2376)")))?;
    let host_ok = !host.is_empty() && host.len() <= 253 && host.chars().all(|c| c.is_ascii_alphanumeric() || "-.[]:".contains(c));
    if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(HostProblem::Address(format!("{url:?} is not an address of the form tcp://HOST:PORT")));
    }
    Ok(())
}

/// The three files of a certificate folder, each present and readable.
fn certificates(dir: &Path) -> Result<[PathBuf; 3], HostProblem> {
    let files = ["ca.pem", "cert.pem", "key.pem"].map(|f| dir.join(f));
    for f in &files {
        std::fs::File::open(f).map_err(|e| HostProblem::Certificates(format!("cannot read {}: {e}", f.display())))?;
    }
    // The private key opens the remote engine (root on that machine): like ssh, refused when
    // anyone but its owner may read or change it.
    let key = &files[2];
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(key).map_err(|e| HostProblem::Certificates(format!("cannot read {}: {e}", key.display())))?.permissions(),
    );
    if mode & 0o077 != 0 {
        return Err(HostProblem::Certificates(format!("{} is open to other users (mode {:o}): `chmod 600` it", key.display(), mode & 0o777)));
    }
    Ok(files)
}

impl RemoteEngine {
    /// A client for the engine (nothing is sent yet).
    pub fn client(&self) -> Result<Docker, HostProblem> {
        check_address(&self.url)?;
        let [ca, cert, key] = certificates(&self.tls_dir)?;
        let addr = self.url.replacen("tcp://", "https://", 1);
        Docker::connect_with_ssl(&addr, &key, &cert, &ca, 120, bollard::API_DEFAULT_VERSION).map_err(|e| HostProblem::Certificates(e.to_string()))
    }

    /// Asks the engine for its version, within [`CHECK_TIMEOUT`]: proof that the address, the
    /// certificates and the engine all work.
    pub async fn check(&self) -> Result<String, HostProblem> {
        let docker = self.client()?;
        match tokio::time::timeout(CHECK_TIMEOUT, docker.version()).await {
            Err(_) => Err(HostProblem::NoAnswer),
            Ok(Ok(v)) => Ok(format!("Docker {} ({}/{})", v.version.unwrap_or_default(), v.os.unwrap_or_default(), v.arch.unwrap_or_default())),
            Ok(Err(e)) => Err(classify(&e)),
        }
    }
}

/// How long the image's stream may stand still (nothing read here, or nothing taken there)
/// before the transfer is given up.
pub const SEND_STALL: Duration = Duration::from_secs(60);

/// Sends an image from `local` to `remote` as one stream (`docker save` into `docker load`, never
/// whole in memory: at most a few chunks are in flight), reporting bytes sent of about `total`.
/// Nothing is pulled from a registry. Returns false when the host had the image already.
pub async fn send_image(local: &Docker, remote: &Docker, tag: &str, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<bool, String> {
    use futures::StreamExt;
    let total = local.inspect_image(tag).await.map_err(|e| format!("the image {tag} is not here: {e}"))?.size.unwrap_or(0).max(0) as u64;
    if remote.inspect_image(tag).await.is_ok() {
        return Ok(false);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let mut export = local.export_image(tag);
    let read = async move {
        let mut sent = 0u64;
        loop {
            match tokio::time::timeout(SEND_STALL, export.next()).await {
                Err(_) => return Err(format!("reading the image here stood still for {} s", SEND_STALL.as_secs())),
                Ok(None) => return Ok(sent),
                Ok(Some(Err(e))) => return Err(format!("reading the image here failed: {e}")),
                Ok(Some(Ok(chunk))) => {
                    sent += chunk.len() as u64;
                    match tokio::time::timeout(SEND_STALL, tx.send(chunk)).await {
                        Err(_) => return Err(format!("the host took nothing for {} s", SEND_STALL.as_secs())),
                        Ok(Err(_)) => return Err("the host stopped taking the image".into()),
                        Ok(Ok(())) => progress(sent, total.max(sent)),
                    }
                }
            }
        }
    };
    let body = tokio_stream::wrappers::ReceiverStream::new(rx);
    let load = async {
        let mut answers = remote.import_image_stream(bollard::image::ImportImageOptions { quiet: true }, body, None);
        while let Some(answer) = answers.next().await {
            match answer {
                Ok(info) if info.error.is_some() => return Err(format!("the host could not load the image: {}", info.error.unwrap_or_default())),
                Ok(_) => {}
                Err(e) => return Err(format!("the host could not load the image: {e}")),
            }
        }
        Ok(())
    };
    let (read, load) = tokio::join!(read, load);
    // What went wrong here explains what went wrong there (a cut stream is an unreadable image).
    read?;
    load?;
    remote.inspect_image(tag).await.map_err(|e| format!("the host does not show the image after loading it: {e}"))?;
    Ok(true)
}

/// What a failed request says about the host, from the error and its causes.
fn classify(e: &bollard::errors::Error) -> HostProblem {
    // The innermost cause says it best ("invalid peer certificate: UnknownIssuer"); the whole
    // chain is searched for what kind of failure it was.
    let mut text = e.to_string();
    let mut innermost = text.clone();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        innermost = c.to_string();
        text.push_str(": ");
        text.push_str(&innermost);
        cause = c.source();
    }
    let lower = text.to_ascii_lowercase();
    let text: String = innermost.chars().take(300).collect();
    if lower.contains("connection refused") {
        HostProblem::Refused
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") || lower.contains("name or service not known") {
        HostProblem::UnknownHost
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") || lower.contains("alert") {
        HostProblem::Tls(text)
    } else if lower.contains("connection was not ready") || lower.contains("connection reset") || lower.contains("connection closed before message completed") {
        // TLS 1.3: a host that refuses our certificate may close the connection after its side of
        // the handshake, before the request; the alert saying why does not always arrive first.
        HostProblem::Tls(format!("the host closed the connection at once ({text}); it may not trust cert.pem"))
    } else if lower.contains("timed out") {
        HostProblem::NoAnswer
    } else {
        HostProblem::Other(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        check_address("tcp://10.0.0.2:2376").unwrap();
        check_address("tcp://build-box.lan:2376").unwrap();
        for bad in ["tcp://host", "tcp://:2376", "tcp://host:0", "tcp://host:99999", "http://host:2376", "host:2376", "tcp://a b:2376"] {
            assert!(matches!(check_address(bad), Err(HostProblem::Address(_))), "{bad}");
        }
        let ssh = check_address("ssh://me@box").unwrap_err();
        assert!(ssh.line("box", "ssh://me@box").contains("use tcp://HOST:2376 with TLS"), "{ssh:?}");
    }

    #[test]
    fn a_folder_without_certificates_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = RemoteEngine { url: "tcp://10.0.0.2:2376".into(), tls_dir: dir.path().into() }.client().unwrap_err();
        let line = e.line("far", "tcp://10.0.0.2:2376");
        assert!(line.starts_with("host far: cannot read ") && line.contains("ca.pem") && line.contains("--tls-dir"), "{line}");
    }
}

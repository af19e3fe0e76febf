//! The screen gateway of a computer on another machine, reached without opening a port there: a
//! listener on this machine's loopback whose every connection is carried over a Docker exec (inside
//! the host's mutual-TLS connection, so encrypted end to end) to a small relay in the computer,
//! which connects to the gateway on the computer's own loopback. The viewer, observe and act speak
//! to the relay's port exactly as to a local computer's published port.
//!
//! The relay belongs to the computer's cached [`crate::gateway::Gateway`]: when that is forgotten
//! (the computer stopped, restarted or was destroyed) and its last user is done, the listener and
//! every connection it carries stop.

use bollard::{
    container::LogOutput,
    exec::{CreateExecOptions, StartExecResults},
    Docker,
};
use botdesk_core::ComputerError;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::{docker_err, spec::InComputer};

/// Runs in the computer as the screen services' user (bots cannot stop or read it): connects to
/// the gateway and copies bytes both ways between it and the exec's stdin and stdout, half-closing
/// each way as its source ends. Python is in the image already (the gateway is Python); `-I -S`
/// keeps anything a bot wrote out of it.
const RELAY: &str = r#"
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", 7900))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def up():
    try:
        while True:
            b = os.read(0, 65536)
            if not b:
                break
            s.sendall(b)
    finally:
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
threading.Thread(target=up, daemon=True).start()
out = sys.stdout.buffer
while True:
    b = s.recv(262144)
    if not b:
        break
    out.write(b)
    out.flush()
"#;

/// A loopback port carrying connections to one computer's gateway; dropping it stops them all.
#[derive(Debug)]
pub(crate) struct Relay {
    pub port: u16,
    stop: CancellationToken,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Relay {
    /// Listens on 127.0.0.1 (a port of its own) for `container`'s gateway on `docker`'s host.
    pub(crate) async fn start(docker: Docker, container: String) -> Result<Relay, ComputerError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| ComputerError::Provider(format!("a local port for the screen relay: {e}")))?;
        let port = listener.local_addr().map_err(|e| ComputerError::Provider(e.to_string()))?.port();
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, docker, container, stop.clone()));
        Ok(Relay { port, stop })
    }
}

/// Accepts until stopped; each connection is carried by a task of this one, which ends with it.
async fn serve(listener: TcpListener, docker: Docker, container: String, stop: CancellationToken) {
    let mut carried = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = carried.join_next(), if !carried.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((local, _)) => {
                    let (docker, container) = (docker.clone(), container.clone());
                    carried.spawn(async move {
                        if let Err(e) = carry(&docker, &container, local).await {
                            tracing::info!(container, "a screen relay connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("the screen relay's listener: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Dropping `carried` aborts the connections still open.
}

/// One connection: an exec of [`RELAY`] with its stdin and stdout joined to `local`.
async fn carry(docker: &Docker, container: &str, local: TcpStream) -> Result<(), ComputerError> {
    local.set_nodelay(true).map_err(|e| ComputerError::Provider(e.to_string()))?;
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(vec!["python3".into(), "-I".into(), "-S".into(), "-c".into(), RELAY.into()]),
                env: Some(vec!["BOTDESK_AGENT_TOKEN=".to_string()]),
                user: Some(InComputer::Screen.user().to_string()),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                ..Default::default()
            },
        )
        .await
        .map_err(docker_err)?;
    let StartExecResults::Attached { mut output, mut input } = docker.start_exec(&exec.id, None).await.map_err(docker_err)? else {
        return Err(ComputerError::Provider("Docker detached an attached exec".into()));
    };
    let (mut from_local, mut to_local) = local.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_local.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        // The relay then half-closes towards the gateway, which ends the connection.
        let _ = input.shutdown().await;
        std::future::pending::<()>().await
    };
    let down = async {
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) => {
                    if to_local.write_all(&message).await.is_err() {
                        break;
                    }
                }
                Ok(LogOutput::StdErr { message }) => {
                    // Bounded: only the start of what the relay said goes into the log.
                    let said = String::from_utf8_lossy(&message[..message.len().min(500)]).into_owned();
                    tracing::info!(container, "the screen relay said: {said}");
                }
                Ok(_) => {}
                Err(e) => return Err(docker_err(e)),
            }
        }
        let _ = to_local.shutdown().await;
        Ok(())
    };
    tokio::select! {
        _ = up => Ok(()),
        ended = down => ended,
    }
}

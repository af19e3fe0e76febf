//! Where a computer's screen gateway is: the provider caches one [`Gateway`] per computer;
//! [`crate::desktop`] talks to it.

use tokio::{io::BufReader, net::TcpStream};

/// Where a computer's gateway listens on the host, the engine's agent token, and idle agent
/// connections kept open: a fresh TCP connection pays slow start on every 4 MB screenshot.
#[derive(Debug, Clone)]
pub(crate) struct Gateway {
    pub port: u16,
    /// The gateway at the container's own address on its network, on this machine's engine:
    /// the engine's requests go there, past Docker's userland proxy that serves the published
    /// port (a 4 MB frame costs about 1.4 ms less). Cleared when it does not answer (rootless
    /// Docker: its networks are not the host's), and the published port used from then on.
    pub direct: std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
    pub agent_token: String,
    pub idle: std::sync::Arc<std::sync::Mutex<Vec<AgentConn>>>,
    /// On a host on another machine, `port` is this relay's (see [`crate::relay`]); it stops
    /// once the gateway is forgotten and its last user is done (held, never read).
    #[allow(dead_code)]
    pub relay: Option<std::sync::Arc<crate::relay::Relay>>,
}

pub(crate) type AgentConn = BufReader<TcpStream>;

//! Where a computer's screen gateway is: the provider caches one [`Gateway`] per computer;
//! [`crate::desktop`] talks to it.

use tokio::{io::BufReader, net::TcpStream};

/// Where a computer's gateway listens on the host, the engine's agent token, and idle agent
/// connections kept open: a fresh TCP connection pays slow start on every 4 MB screenshot.
#[derive(Debug, Clone)]
pub(crate) struct Gateway {
    pub port: u16,
    pub agent_token: String,
    pub idle: std::sync::Arc<std::sync::Mutex<Vec<AgentConn>>>,
    /// On a host on another machine, `port` is this relay's (see [`crate::relay`]); it stops
    /// once the gateway is forgotten and its last user is done (held, never read).
    #[allow(dead_code)]
    pub relay: Option<std::sync::Arc<crate::relay::Relay>>,
}

pub(crate) type AgentConn = BufReader<TcpStream>;

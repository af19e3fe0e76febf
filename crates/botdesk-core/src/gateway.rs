//! The screen gateway's protocol, defined once for every client (the Docker provider's agent
//! requests, the viewer, `botdesk screen forward`, the bench). The other end is
//! `infra/sandboxes/computer/botdesk_gateway.py`; both replay the golden fixtures in
//! `infra/sandboxes/computer/protocol.json` in their tests.
//!
//! A client sends one line, its token ([`hello`]); the gateway answers `OK` or `ERR why`
//! ([`present`] reads that answer, bounded). With the engine's agent token, requests
//! ([`AgentRequest`]) and answers ([`AgentAnswer`]) follow as JSON lines; with a view or control
//! token, the display's RFB byte stream.
//!
//! The gateway runs inside a computer, where a bot can replace it: everything read here is
//! bounded and checked, and a bad answer is an error, never a panic or an allocation of the
//! answer's choosing. The caller owns the connection and its time bound.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::action::Settled;
use crate::BrowserCommand;

/// The longest greeting line (`OK`, or `ERR` and a short reason) read from a gateway.
pub const MAX_GREETING: usize = 256;
/// The longest answer line (JSON; a page snapshot is the largest).
pub const MAX_ANSWER_LINE: u64 = 1 << 20;

/// A connection's first line: the token it presents.
pub fn hello(token: &str) -> Vec<u8> {
    format!("{token}\n").into_bytes()
}

/// What the gateway said to a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Greeting {
    Granted,
    /// `ERR why`, or anything else it said.
    Refused(String),
}

impl Greeting {
    /// Reads one greeting line (without its newline).
    pub fn parse(line: &[u8]) -> Greeting {
        match line {
            b"OK" => Greeting::Granted,
            _ => {
                let text = String::from_utf8_lossy(line);
                Greeting::Refused(text.strip_prefix("ERR ").unwrap_or(&text).chars().take(200).collect())
            }
        }
    }
}

/// Presents `token` on a new connection and reads the gateway's answer byte by byte, so nothing
/// that follows it (the RFB handshake) is consumed. Errors say what failed, for one line to the
/// person.
pub async fn present<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, token: &str) -> Result<(), String> {
    stream.write_all(&hello(token)).await.map_err(|e| format!("screen gateway: {e}"))?;
    let mut line = Vec::new();
    loop {
        let b = stream.read_u8().await.map_err(|_| "the screen gateway closed the connection".to_string())?;
        if b == b'\n' {
            break;
        }
        if line.len() == MAX_GREETING {
            return Err(format!("the screen gateway sent no answer line within {MAX_GREETING} bytes"));
        }
        line.push(b);
    }
    match Greeting::parse(&line) {
        Greeting::Granted => Ok(()),
        Greeting::Refused(why) => Err(format!("the screen gateway refused the token: {why}")),
    }
}

/// How long the gateway watches the screen after an input batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Settle {
    /// Until it changed and then stayed the same this long (0: not watched).
    pub still_ms: u64,
    /// At most this long.
    pub cap_ms: u64,
}

/// A request with the engine's agent token. `display` is the display it concerns (0 for
/// requests about the gateway or a token).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum AgentRequest<'a> {
    /// Answered `{"ok": true}`: the gateway is there.
    Ping { display: u32 },
    /// Removes the display's tokens (or only `token`) and drops their connections now.
    Revoke {
        display: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<&'a str>,
    },
    /// `token` now lasts until `expires` (Unix ms).
    Extend { display: u32, token: &'a str, expires: i64 },
    /// The display's framebuffer (XWD), as a body after the answer line; zlib-compressed (fast
    /// level) when asked, for a computer across a network (4 MB raw would take seconds there).
    Shot {
        display: u32,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        zlib: bool,
    },
    /// The pointer's position and the active window's title.
    Info { display: u32 },
    /// A command for the bot's browser on that display.
    Browser { display: u32, command: &'a BrowserCommand },
    /// xdotool runs, then the screen watched as `settle` says.
    Xdotool { display: u32, runs: &'a [Vec<String>], settle: Settle },
}

impl AgentRequest<'_> {
    /// Its name on the wire, for messages and time bounds.
    pub fn op(&self) -> &'static str {
        match self {
            AgentRequest::Ping { .. } => "ping",
            AgentRequest::Revoke { .. } => "revoke",
            AgentRequest::Extend { .. } => "extend",
            AgentRequest::Shot { .. } => "shot",
            AgentRequest::Info { .. } => "info",
            AgentRequest::Browser { .. } => "browser",
            AgentRequest::Xdotool { .. } => "xdotool",
        }
    }

    /// The request's line, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).expect("a request serializes");
        line.push(b'\n');
        line
    }
}

/// Why the gateway refused a request, when it says in a way to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RefusalCode {
    /// The bot's browser is not running (the engine starts it as the bot and asks again).
    #[serde(rename = "NO_BROWSER")]
    NoBrowser,
    /// A code this version does not know.
    #[serde(other)]
    Other,
}

/// The gateway's account of the screen after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SettledWord {
    Still,
    Changing,
    Unchanged,
    Unwatched,
}

/// An answer line. Every field is optional on the wire; the accessors check what a request's
/// answer needs. Unknown fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AgentAnswer {
    #[serde(default)]
    pub ok: bool,
    pub error: Option<String>,
    pub code: Option<RefusalCode>,
    /// The length of the body that follows the line (screenshots).
    pub len: Option<u64>,
    /// The body is zlib-compressed (a shot asked for it so).
    pub zlib: Option<bool>,
    /// How many tokens a revoke removed.
    pub removed: Option<u64>,
    pub x: Option<u32>,
    pub y: Option<u32>,
    pub title: Option<String>,
    pub result: Option<serde_json::Value>,
    pub settled: Option<SettledWord>,
    pub ms: Option<u64>,
}

/// The longest settle the gateway may report (its cap is 10 s).
const MAX_SETTLE_MS: u64 = 60_000;

impl AgentAnswer {
    /// Reads an answer line (without its newline). The line's length is the reader's bound
    /// ([`MAX_ANSWER_LINE`]).
    pub fn parse(line: &[u8]) -> Result<AgentAnswer, String> {
        serde_json::from_slice(line).map_err(|e| format!("{e} in {:?}", String::from_utf8_lossy(&line[..line.len().min(200)])))
    }

    /// The refusal, when `ok` is not true: the gateway's reason, or a plain one.
    pub fn refusal(&self) -> Option<String> {
        (!self.ok).then(|| self.error.clone().unwrap_or_else(|| "the desktop agent failed".into()).chars().take(2000).collect())
    }

    /// What an input batch's answer says about the screen.
    pub fn settled(&self) -> Result<Settled, String> {
        let ms = self.ms.filter(|ms| *ms <= MAX_SETTLE_MS);
        match (self.settled, ms) {
            (Some(SettledWord::Unwatched), _) => Ok(Settled::Unwatched),
            (Some(SettledWord::Still), Some(ms)) => Ok(Settled::Still { ms }),
            (Some(SettledWord::Changing), Some(ms)) => Ok(Settled::Changing { ms }),
            (Some(SettledWord::Unchanged), Some(ms)) => Ok(Settled::Unchanged { ms }),
            _ => Err(format!("an action batch's answer without a settled state and time: {:.200}", format!("{self:?}"))),
        }
    }

    /// The pointer and the active window's title of an `info` answer (a missing pointer is the
    /// top left corner; a title is cut to 500 characters).
    pub fn pointer(&self) -> ((u32, u32), Option<String>) {
        ((self.x.unwrap_or(0), self.y.unwrap_or(0)), self.title.as_ref().map(|t| t.chars().take(500).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_greeting_is_read_to_its_newline_and_no_further() {
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(b"OK\nRFB 003.008\n").await.unwrap();
        present(&mut ours, "ab").await.unwrap();
        let mut rest = [0u8; 12];
        ours.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"RFB 003.008\n");
        let mut sent = [0u8; 3];
        theirs.read_exact(&mut sent).await.unwrap();
        assert_eq!(&sent, b"ab\n");
    }

    #[tokio::test]
    async fn a_refusal_an_endless_line_and_a_closed_connection_are_errors() {
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        theirs.write_all(b"ERR unknown or revoked token\n").await.unwrap();
        assert_eq!(present(&mut ours, "ab").await.unwrap_err(), "the screen gateway refused the token: unknown or revoked token");
        let (mut ours, mut theirs) = tokio::io::duplex(1 << 16);
        theirs.write_all(&[b'x'; 5000]).await.unwrap();
        assert!(present(&mut ours, "ab").await.unwrap_err().contains("no answer line within 256 bytes"));
        // Closed after taking the token, before answering.
        let (mut ours, mut theirs) = tokio::io::duplex(64);
        let gone = tokio::spawn(async move {
            let mut token = [0u8; 3];
            theirs.read_exact(&mut token).await.unwrap();
        });
        assert_eq!(present(&mut ours, "ab").await.unwrap_err(), "the screen gateway closed the connection");
        gone.await.unwrap();
    }

    #[test]
    fn answers_that_break_the_rules_are_errors() {
        assert!(AgentAnswer::parse(b"{\"ok\": true, \"len\": -1}").is_err());
        assert!(AgentAnswer::parse(b"{\"ok\": \"yes\"}").is_err());
        assert!(AgentAnswer::parse(b"[1]").is_err());
        let a = AgentAnswer::parse(b"{\"ok\": true, \"settled\": \"still\", \"ms\": 99999999}").unwrap();
        assert!(a.settled().is_err());
        let a = AgentAnswer::parse(b"{\"ok\": true, \"settled\": \"sideways\", \"ms\": 1}");
        assert!(a.is_err());
        let a = AgentAnswer::parse(b"{\"ok\": false, \"code\": \"SOMETHING_NEW\"}").unwrap();
        assert_eq!((a.code, a.refusal().as_deref()), (Some(RefusalCode::Other), Some("the desktop agent failed")));
    }
}

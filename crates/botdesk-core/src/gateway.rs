//! The screen gateway's protocol, defined once for every client (the Docker provider's agent
//! requests, the viewer, `botdesk screen forward`, the bench). The other end is
//! `infra/sandboxes/computer/botdesk_gateway.py`; both replay the golden fixtures in
//! `infra/sandboxes/computer/protocol.json` in their tests.
//!
//! A viewer sends one line, its view or control token ([`hello`]); the gateway answers `OK` or
//! `ERR why` ([`present`] reads that answer, bounded), then the display's RFB byte stream follows.
//!
//! The engine never sends its agent token: it could be talking to whatever took a port the
//! gateway had before a restart. It proves it knows the token, and the gateway proves it first
//! ([`prove`]): `HELLO E` (E: 32 random hex digits), answered `PROOF G P` (G: the gateway's 32;
//! P: [`proof`] of `botdesk-gateway E G`), then `AGENT Q` (Q: `proof` of `botdesk-engine E G`),
//! answered `OK` or `ERR why`. Agent requests ([`AgentRequest`]) and answers ([`AgentAnswer`])
//! follow as JSON lines.
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

/// HMAC-SHA256 of `message` keyed by `token`, in hex: what each side of the agent's handshake
/// shows to prove it knows the agent token without sending it.
pub fn proof(token: &str, message: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut key = [0u8; 64];
    if token.len() > 64 {
        key[..32].copy_from_slice(&Sha256::digest(token.as_bytes()));
    } else {
        key[..token.len()].copy_from_slice(token.as_bytes());
    }
    let pad = |b: u8| key.map(|k| k ^ b);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message.as_bytes()).finalize();
    hex::encode(Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize())
}

/// Reads one line of at most [`MAX_GREETING`] bytes, byte by byte (nothing after it is consumed).
async fn greeting_line<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    loop {
        let b = stream.read_u8().await.map_err(|_| "the screen gateway closed the connection".to_string())?;
        if b == b'\n' {
            return Ok(line);
        }
        if line.len() == MAX_GREETING {
            return Err(format!("the screen gateway sent no answer line within {MAX_GREETING} bytes"));
        }
        line.push(b);
    }
}

/// The engine's handshake with a gateway (see the module's text): the gateway proves it knows
/// `agent_token` before the engine proves it does; the token itself never crosses. A listener
/// that is not this computer's gateway learns a random number.
pub async fn prove<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, agent_token: &str) -> Result<(), String> {
    let mut nonce = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").map_err(|e| format!("random numbers: {e}"))?, &mut nonce)
        .map_err(|e| format!("random numbers: {e}"))?;
    let ours = hex::encode(nonce);
    stream.write_all(format!("HELLO {ours}\n").as_bytes()).await.map_err(|e| format!("screen gateway: {e}"))?;
    let line = greeting_line(stream).await?;
    let text = String::from_utf8_lossy(&line);
    let mut words = text.strip_prefix("PROOF ").unwrap_or("").split(' ');
    let (theirs, shown) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let hex32 = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    if !hex32(theirs) || shown != proof(agent_token, &format!("botdesk-gateway {ours} {theirs}")) {
        return Err("what answers at this port is not this computer's screen gateway (it could not prove it)".into());
    }
    stream
        .write_all(format!("AGENT {}\n", proof(agent_token, &format!("botdesk-engine {ours} {theirs}"))).as_bytes())
        .await
        .map_err(|e| format!("screen gateway: {e}"))?;
    match Greeting::parse(&greeting_line(stream).await?) {
        Greeting::Granted => Ok(()),
        Greeting::Refused(why) => Err(format!("the screen gateway refused the engine: {why}")),
    }
}

/// Presents `token` on a new connection and reads the gateway's answer byte by byte, so nothing
/// that follows it (the RFB handshake) is consumed. Errors say what failed, for one line to the
/// person.
pub async fn present<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, token: &str) -> Result<(), String> {
    stream.write_all(&hello(token)).await.map_err(|e| format!("screen gateway: {e}"))?;
    match Greeting::parse(&greeting_line(stream).await?) {
        Greeting::Granted => Ok(()),
        Greeting::Refused(why) => Err(format!("the screen gateway refused the token: {why}")),
    }
}

/// A new random capability token: 128 bits as 32 hex digits.
pub fn new_token() -> String {
    let mut b = [0u8; 16];
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).expect("/dev/urandom is readable");
    hex::encode(b)
}

/// How long the gateway watches the screen after an input batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Settle {
    /// Until it changed and then stayed the same this long (0: not watched).
    pub still_ms: u64,
    /// At most this long.
    pub cap_ms: u64,
}

/// The settle bounds both sides keep (the fixtures' `settle`; the gateway clamps to them): the
/// longest stillness asked, and the longest watch.
pub const MAX_SETTLE_STILL_MS: u64 = crate::action::MAX_WAIT_MS;
pub const MAX_SETTLE_CAP_MS: u64 = crate::action::MAX_WAIT_MS;

/// How long one action batch's request may take, its typing and its watch included.
pub const ACT_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

impl Settle {
    /// A batch's watch: still for `still_ms`, for at least [`crate::action::SETTLE_CAP_MS`],
    /// both within the bounds.
    pub fn after_batch(still_ms: u64) -> Settle {
        let still_ms = still_ms.min(MAX_SETTLE_STILL_MS);
        Settle { still_ms, cap_ms: crate::action::SETTLE_CAP_MS.max(still_ms).min(MAX_SETTLE_CAP_MS) }
    }
}

/// How a look after an action batch is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LookWish {
    pub zlib: bool,
}

/// Which refusals an answer brings: those of `uid` after number `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NetAfter {
    pub uid: u32,
    pub after: u64,
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
    /// The display's framebuffer (XWD), as a body after the answer line, with the pointer's
    /// position and the active window's title; zlib-compressed (fast level) when asked, for a
    /// computer across a network (4 MB raw would take seconds there).
    Look {
        display: u32,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        zlib: bool,
    },
    /// A command for the bot's browser on that display.
    Browser { display: u32, command: &'a BrowserCommand },
    /// xdotool runs, then the screen watched as `settle` says; then, in the same answer, a look
    /// and the network refusals when asked (one request per action batch).
    Xdotool {
        display: u32,
        runs: &'a [Vec<String>],
        settle: Settle,
        #[serde(skip_serializing_if = "Option::is_none")]
        look: Option<LookWish>,
        #[serde(skip_serializing_if = "Option::is_none")]
        net: Option<NetAfter>,
    },
    /// The connections of `uid` the network policy refused after number `after`.
    Net { display: u32, uid: u32, after: u64 },
    /// Watch the display's browser for what `policy` asks about (none: stop, refusing what
    /// waits); answered with what waits for the person now.
    Guard { display: u32, policy: Option<&'a crate::Approvals> },
    /// Let what waits by that number go on, or refuse it.
    Approve { display: u32, id: u64, allow: bool },
}

impl AgentRequest<'_> {
    /// Its name on the wire, for messages and time bounds.
    pub fn op(&self) -> &'static str {
        match self {
            AgentRequest::Ping { .. } => "ping",
            AgentRequest::Revoke { .. } => "revoke",
            AgentRequest::Extend { .. } => "extend",
            AgentRequest::Look { .. } => "look",
            AgentRequest::Browser { .. } => "browser",
            AgentRequest::Xdotool { .. } => "xdotool",
            AgentRequest::Net { .. } => "net",
            AgentRequest::Guard { .. } => "guard",
            AgentRequest::Approve { .. } => "approve",
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
    /// The length of the body that follows the line (a look's framebuffer).
    pub len: Option<u64>,
    /// The body is zlib-compressed (the look was asked so).
    pub zlib: Option<bool>,
    /// How many tokens a revoke removed.
    pub removed: Option<u64>,
    pub x: Option<u32>,
    pub y: Option<u32>,
    pub title: Option<String>,
    pub result: Option<serde_json::Value>,
    pub settled: Option<SettledWord>,
    pub ms: Option<u64>,
    /// A `net` answer: the boot of the gateway its numbers count in, the last number given out,
    /// and the refusals.
    pub boot: Option<String>,
    pub next: Option<u64>,
    pub events: Option<Vec<crate::NetRefusal>>,
    /// A `guard` answer: what waits for the person.
    pub pending: Option<Vec<crate::PendingApproval>>,
    /// An `approve` answer: something waited by that number (and now went on or was refused).
    pub done: Option<bool>,
}

/// The longest settle an answer may report: no longer than its request may take.
const MAX_SETTLE_MS: u64 = ACT_BOUND.as_millis() as u64;

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

    /// A `net` answer's refusals (at most 100 a request; a boot name of at most 64 characters).
    pub fn refusals(&self) -> Result<crate::NetRefusals, String> {
        match (&self.boot, self.next, &self.events) {
            (Some(boot), Some(next), Some(events)) if boot.len() <= 64 && events.len() <= 100 => {
                Ok(crate::NetRefusals { boot: boot.clone(), next, refusals: events.clone() })
            }
            _ => Err("a net answer without its boot, number and refusals (or too many)".into()),
        }
    }

    /// The pointer and the active window's title of a look (a missing pointer is the
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

    /// The engine's handshake: a gateway that knows the token passes; one that does not (what
    /// took the port of a gateway that moved) learns only a random number and is refused.
    #[tokio::test]
    async fn the_gateway_proves_it_knows_the_agent_token_before_the_engine_does() {
        // RFC 4231, test case 2 (HMAC-SHA256).
        assert_eq!(proof("Jefe", "what do ya want for nothing?"), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        let token = "ab".repeat(16);
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        let gateway = tokio::spawn(async move {
            let hello = String::from_utf8(greeting_line(&mut theirs).await.unwrap()).unwrap();
            let e = hello.strip_prefix("HELLO ").unwrap().to_string();
            let g = "0123456789abcdef0123456789abcdef";
            theirs.write_all(format!("PROOF {g} {}\n", proof(&"ab".repeat(16), &format!("botdesk-gateway {e} {g}"))).as_bytes()).await.unwrap();
            let agent = String::from_utf8(greeting_line(&mut theirs).await.unwrap()).unwrap();
            assert_eq!(agent, format!("AGENT {}", proof(&"ab".repeat(16), &format!("botdesk-engine {e} {g}"))));
            theirs.write_all(b"OK\n").await.unwrap();
            hello
        });
        prove(&mut ours, &token).await.unwrap();
        assert!(!gateway.await.unwrap().contains(&token));
        // A listener that does not know the token: refused, and it saw one line with no secret.
        let (mut ours, mut theirs) = tokio::io::duplex(4096);
        let impostor = tokio::spawn(async move {
            let seen = greeting_line(&mut theirs).await.unwrap();
            theirs.write_all(format!("PROOF {} {}\n", "0".repeat(32), "0".repeat(64)).as_bytes()).await.unwrap();
            let mut rest = vec![];
            let _ = theirs.read_to_end(&mut rest).await;
            (seen, rest)
        });
        let e = prove(&mut ours, &token).await.unwrap_err();
        assert!(e.contains("not this computer's screen gateway"), "{e}");
        drop(ours);
        let (seen, rest) = impostor.await.unwrap();
        assert!(String::from_utf8(seen).unwrap().starts_with("HELLO ") && rest.is_empty(), "nothing more was sent");
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

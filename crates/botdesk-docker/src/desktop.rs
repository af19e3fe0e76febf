//! Per-bot desktops on the Docker provider: displays are started and torn down by
//! `botdesk-display` (exec); screenshots, input, cursor and window titles go through the engine's
//! agent capability on the computer's screen gateway, one persistent port per computer.

use botdesk_core::{action::Action, action::Button, action::Direction, *};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
};

use botdesk_core::gateway::{self, AgentAnswer, AgentRequest, LookWish, NetAfter, RefusalCode, Settle, MAX_ANSWER_LINE};

use crate::gateway::{AgentConn, Gateway};
use crate::{docker_err, spec, spec::InComputer, DockerProvider};
use botdesk_core::screenshot::{encode_jpeg, encode_png};

const MAX_IDLE_AGENT_CONNS: usize = 4;
/// How long a connection to the gateway at the container's own address may take before the
/// published port is used instead.
const DIRECT_CONNECT: std::time::Duration = std::time::Duration::from_millis(300);

/// The gateway runs inside the computer, where a bot can stop, replace or impersonate it: its
/// answers are bounded (`gateway::MAX_ANSWER_LINE` for a line) and every request has a time bound.
///
/// The widest and tallest screen a computer may have.
const MAX_SCREEN_SIDE: u32 = 4096;
/// The largest XWD header (with its color map) taken from a computer.
const MAX_XWD_HEADER: u64 = 64 * 1024;
/// The largest screenshot body: the largest screen's XWD.
const MAX_SHOT: u64 = MAX_XWD_HEADER + MAX_SCREEN_SIDE as u64 * MAX_SCREEN_SIDE as u64 * 4;

/// How long one request to the gateway may take, connecting included.
fn agent_bound(op: &str) -> std::time::Duration {
    std::time::Duration::from_secs(match op {
        // Starting the browser and loading a page have their own bounds inside (up to a minute).
        "browser" => 90,
        // A long `type` runs key by key.
        "xdotool" => return gateway::ACT_BOUND,
        // Revoking is on the way of Stop, which must always finish.
        "revoke" => 5,
        _ => 10,
    })
}

fn xdotool_button(b: Button) -> &'static str {
    match b {
        Button::Left => "1",
        Button::Middle => "2",
        Button::Right => "3",
    }
}

/// Turns a checked batch into xdotool invocations: chainable commands share one process; `type`
/// consumes the rest of its command line, so it ends a chain.
pub fn xdotool_runs(actions: &[Action]) -> Vec<Vec<String>> {
    let mut runs: Vec<Vec<String>> = vec![];
    let mut cur: Vec<String> = vec![];
    // Where this chain left the pointer: a click there again is a bare click, so two clicks in a
    // row are a double click (a move in between, even to the same place, can break one).
    let mut pointer: Option<(u32, u32)> = None;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let to = |cur: &mut Vec<String>, pointer: &mut Option<(u32, u32)>, p: (u32, u32)| {
        if *pointer != Some(p) {
            cur.extend(s(&["mousemove", "--sync", &p.0.to_string(), &p.1.to_string()]));
            *pointer = Some(p);
        }
    };
    for a in actions {
        match a {
            Action::Click { x, y, button } => {
                to(&mut cur, &mut pointer, (*x, *y));
                cur.extend(s(&["click", xdotool_button(*button)]));
            }
            Action::Move { x, y } => to(&mut cur, &mut pointer, (*x, *y)),
            Action::Down { at: p, button } => {
                if let Some(p) = p {
                    to(&mut cur, &mut pointer, *p);
                }
                cur.extend(s(&["mousedown", xdotool_button(*button)]));
            }
            Action::Up { at: p, button } => {
                if let Some(p) = p {
                    to(&mut cur, &mut pointer, *p);
                }
                cur.extend(s(&["mouseup", xdotool_button(*button)]));
            }
            Action::Drag { x, y, to_x, to_y, button } => {
                to(&mut cur, &mut pointer, (*x, *y));
                cur.extend(s(&["mousedown", xdotool_button(*button)]));
                // The end is always moved to (a drag that does not move is a click).
                cur.extend(s(&["mousemove", "--sync", &to_x.to_string(), &to_y.to_string(), "mouseup", xdotool_button(*button)]));
                pointer = Some((*to_x, *to_y));
            }
            Action::Key { key, modifiers } => {
                let mut combo: Vec<String> = modifiers.iter().map(|m| keysym(m)).collect();
                combo.push(keysym(key));
                cur.extend(s(&["key", "--clearmodifiers", &combo.join("+")]));
            }
            Action::Scroll { at: p, direction, amount } => {
                if let Some(p) = p {
                    to(&mut cur, &mut pointer, *p);
                }
                let b = match direction {
                    Direction::Up => "4",
                    Direction::Down => "5",
                    Direction::Left => "6",
                    Direction::Right => "7",
                };
                cur.extend(s(&["click", "--repeat", &amount.to_string(), "--delay", "10", b]));
            }
            Action::Wait { ms } => cur.extend(s(&["sleep", &format!("{:.3}", *ms as f64 / 1000.0)])),
            Action::KeyDown { key } => cur.extend(s(&["keydown", &keysym(key)])),
            Action::KeyUp { key } => cur.extend(s(&["keyup", &keysym(key)])),
            Action::Type { text } => {
                cur.extend(s(&["type", "--delay", "8", "--", text]));
                runs.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        runs.push(cur);
    }
    runs
}

/// Friendly key names a model uses, mapped to X keysym names.
pub fn keysym(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let mapped = match lower.as_str() {
        "ctrl" | "control" => "ctrl",
        "alt" | "option" => "alt",
        "shift" => "shift",
        "super" | "meta" | "cmd" | "command" | "win" | "windows" => "super",
        "enter" | "return" => "Return",
        "esc" | "escape" => "Escape",
        "tab" => "Tab",
        "backspace" => "BackSpace",
        "delete" | "del" => "Delete",
        "space" => "space",
        "up" | "arrowup" => "Up",
        "down" | "arrowdown" => "Down",
        "left" | "arrowleft" => "Left",
        "right" | "arrowright" => "Right",
        "home" => "Home",
        "end" => "End",
        "pageup" | "page_up" => "Prior",
        "pagedown" | "page_down" => "Next",
        "insert" => "Insert",
        _ => return name.to_string(), // a single character or an X keysym name (F5, KP_Enter, …)
    };
    mapped.to_string()
}

/// One answer of the gateway: a JSON line, and the body its `len` announces (at most a
/// screenshot of the largest screen). A connection closed before anything came is `Closed`.
async fn read_answer<R: tokio::io::AsyncBufRead + Unpin>(conn: &mut R) -> std::result::Result<(AgentAnswer, Option<Vec<u8>>), AgentFailure> {
    let io = |e: std::io::Error| AgentFailure::Other(ComputerError::Provider(format!("screen gateway: {e}")));
    let bad = |why: String| AgentFailure::Other(ComputerError::Provider(format!("bad answer from the computer's screen gateway: {why}")));
    let mut line = String::new();
    match (&mut *conn).take(MAX_ANSWER_LINE).read_line(&mut line).await {
        Ok(0) | Err(_) if line.is_empty() => return Err(AgentFailure::Closed),
        Err(e) => return Err(io(e)),
        Ok(_) if !line.ends_with('\n') => return Err(bad(format!("no answer line within {MAX_ANSWER_LINE} bytes"))),
        Ok(_) => {}
    }
    let answer = AgentAnswer::parse(line.trim_end().as_bytes()).map_err(bad)?;
    let body = match answer.len {
        None => None,
        Some(len) => {
            if len > MAX_SHOT {
                return Err(bad(format!("a body of {len} bytes (at most {MAX_SHOT})")));
            }
            let mut buf = vec![0u8; len as usize];
            conn.read_exact(&mut buf).await.map_err(io)?;
            Some(buf)
        }
    };
    Ok((answer, body))
}

/// A zlib-compressed screenshot, inflated to at most [`MAX_SHOT`] bytes (what comes out of a
/// computer is never inflated without a bound).
pub fn inflate_shot(compressed: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(MAX_SHOT as usize));
    flate2::read::ZlibDecoder::new(compressed)
        .take(MAX_SHOT + 1)
        .read_to_end(&mut out)
        .map_err(|e| ComputerError::Provider(format!("bad screenshot from the computer: not zlib ({e})")))?;
    if out.len() as u64 > MAX_SHOT {
        return Err(ComputerError::Provider(format!("bad screenshot from the computer: it inflates past {MAX_SHOT} bytes")));
    }
    Ok(out)
}

/// Pixels of an XWD screenshot as tightly packed RGB, with width and height. The header comes
/// from a file a bot can rewrite: every field is checked against the data before it is used.
pub fn xwd_to_rgb(data: &[u8]) -> Result<(u32, u32, Vec<u8>)> {
    let bad = |why: &str| ComputerError::Provider(format!("bad screenshot from the computer: {why}"));
    let field =
        |i: usize| -> Result<u32> { data.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(|| bad("short header")) };
    let header_size = field(0)? as u64;
    let (width, height) = (field(4)?, field(5)?);
    let byte_order = field(7)?;
    let bits_per_pixel = field(11)?;
    let bytes_per_line = field(12)? as u64;
    let ncolors = field(19)? as u64;
    if bits_per_pixel != 32 {
        return Err(bad(&format!("{bits_per_pixel} bits per pixel")));
    }
    if width == 0 || height == 0 || width > MAX_SCREEN_SIDE || height > MAX_SCREEN_SIDE {
        return Err(bad(&format!("a {width}×{height} screen")));
    }
    // All in u64 from values under 2^32: nothing overflows.
    let start = header_size + ncolors * 12;
    if header_size < 100 || start > MAX_XWD_HEADER || bytes_per_line < width as u64 * 4 {
        return Err(bad("an impossible header"));
    }
    if (data.len() as u64) < start + bytes_per_line * height as u64 {
        return Err(bad("truncated pixels"));
    }
    let (start, bytes_per_line, w) = (start as usize, bytes_per_line as usize, width as usize);
    let mut rgb = vec![0u8; w * height as usize * 3];
    for (row, out) in rgb.chunks_exact_mut(w * 3).enumerate() {
        let at = start + row * bytes_per_line;
        match byte_order {
            0 => rgb_row::<true>(&data[at..at + w * 4], out),
            _ => rgb_row::<false>(&data[at..at + w * 4], out),
        }
    }
    Ok((width, height, rgb))
}

/// One row of 32-bit pixels (`LSB_FIRST`: B G R X, else X R G B) as R G B. Each pixel is one
/// 4-byte load and one 4-byte store whose last byte the next pixel overwrites (the row's last
/// pixel stores 3): twice as fast as byte by byte.
fn rgb_row<const LSB_FIRST: bool>(src: &[u8], out: &mut [u8]) {
    let rgb = |px: &[u8]| {
        let v = u32::from_le_bytes([px[0], px[1], px[2], px[3]]);
        (if LSB_FIRST { v.swap_bytes() } else { v } >> 8).to_le_bytes()
    };
    let (body, last) = src.split_at(src.len() - 4);
    for (i, px) in body.chunks_exact(4).enumerate() {
        out[i * 3..i * 3 + 4].copy_from_slice(&rgb(px));
    }
    let end = out.len();
    out[end - 3..].copy_from_slice(&rgb(last)[..3]);
}

/// Why an agent request failed: `Closed` means the connection was gone before any answer.
enum AgentFailure {
    Closed,
    Other(ComputerError),
}

impl DockerProvider {
    /// The gateway's host port and the agent token, read from the container and cached per
    /// computer (a stale entry is dropped by `agent` when the gateway stops answering to it).
    pub(crate) async fn gateway(&self, c: &ComputerRef) -> Result<Gateway> {
        if let Some(g) = self.gateways.lock().unwrap().get(c.id.as_str()) {
            return Ok(g.clone());
        }
        let id = self.running_container(c).await?;
        let info = self.client().await?.inspect_container(&id, None).await.map_err(docker_err)?;
        let agent_token = info
            .config
            .and_then(|c| c.env)
            .unwrap_or_default()
            .into_iter()
            .find_map(|e| e.strip_prefix("BOTDESK_AGENT_TOKEN=").map(str::to_string))
            .ok_or_else(|| ComputerError::Provider("this computer predates screen support: destroy it and open the bot again".into()))?;
        let g = if self.cfg.remote.is_some() {
            // The port published there is on that machine's loopback: reached through a relay.
            let relay = crate::relay::Relay::start(self.client().await?.clone(), id).await?;
            Gateway { port: relay.port, direct: Default::default(), agent_token, idle: Default::default(), relay: Some(std::sync::Arc::new(relay)) }
        } else {
            let direct = info
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .and_then(|n| n.values().find_map(|e| e.ip_address.as_deref().and_then(|ip| ip.parse::<std::net::IpAddr>().ok())))
                .map(|ip| std::net::SocketAddr::new(ip, spec::GATEWAY_CONTAINER_PORT));
            let port = info
                .network_settings
                .and_then(|n| n.ports)
                .and_then(|p| p.get(spec::GATEWAY_PORT).cloned().flatten())
                .and_then(|b| b.into_iter().find_map(|b| b.host_port.and_then(|p| p.parse().ok())))
                .ok_or_else(|| ComputerError::Provider("the computer's screen gateway port is not published".into()))?;
            Gateway { port, direct: std::sync::Arc::new(std::sync::Mutex::new(direct)), agent_token, idle: Default::default(), relay: None }
        };
        self.gateways.lock().unwrap().insert(c.id.to_string(), g.clone());
        Ok(g)
    }

    /// One agent request; returns the JSON answer and, for screenshots, the raw bytes. An idle
    /// connection that turns out closed is replaced once by a new one; a cached gateway that no
    /// longer answers (the computer was restarted or replaced) is looked up again once.
    async fn agent(&self, c: &ComputerRef, req: &AgentRequest<'_>) -> Result<(AgentAnswer, Option<Vec<u8>>)> {
        let (answer, body) = self.agent_answer(c, req).await?;
        if let Some(why) = answer.refusal() {
            return Err(ComputerError::Provider(why));
        }
        Ok((answer, body))
    }

    /// [`Self::agent`], with a refusal (`"ok": false`) given back as an answer.
    async fn agent_answer(&self, c: &ComputerRef, req: &AgentRequest<'_>) -> Result<(AgentAnswer, Option<Vec<u8>>)> {
        self.sent_computers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let op = req.op();
        let bound = agent_bound(op);
        // On expiry the connection goes with the request (it is never reused).
        tokio::time::timeout(bound, self.agent_unbounded(c, req)).await.map_err(|_| {
            ComputerError::TimedOut(format!(
                "the computer's screen gateway did not answer ({op}) within {} s: it may be stopped or replaced; stopping the computer and starting it again brings a fresh one",
                bound.as_secs()
            ))
        })?
    }

    async fn agent_unbounded(&self, c: &ComputerRef, req: &AgentRequest<'_>) -> Result<(AgentAnswer, Option<Vec<u8>>)> {
        let g = self.gateway(c).await?;
        let idle = g.idle.lock().unwrap().pop();
        if let Some(mut conn) = idle {
            match Self::agent_request(&mut conn, req).await {
                // Closed before it read the request (so it never ran): go on with a new connection.
                Err(AgentFailure::Closed) => {}
                answer => return Self::agent_done(&g, conn, answer),
            }
        }
        let (g, mut conn) = match Self::agent_connect(&g).await {
            Ok(conn) => (g, conn),
            Err(_) => {
                self.forget_gateway(&c.id);
                let g = self.gateway(c).await?;
                let conn = Self::agent_connect(&g).await?;
                (g, conn)
            }
        };
        let answer = Self::agent_request(&mut conn, req).await;
        Self::agent_done(&g, conn, answer)
    }

    /// Keeps a healthy connection for the next request.
    fn agent_done(
        g: &Gateway,
        conn: AgentConn,
        answer: std::result::Result<(AgentAnswer, Option<Vec<u8>>), AgentFailure>,
    ) -> Result<(AgentAnswer, Option<Vec<u8>>)> {
        let (answer, body) = answer.map_err(|e| match e {
            AgentFailure::Closed => ComputerError::Provider("screen gateway: connection closed".into()),
            AgentFailure::Other(e) => e,
        })?;
        let mut idle = g.idle.lock().unwrap();
        if idle.len() < MAX_IDLE_AGENT_CONNS {
            idle.push(conn);
        }
        drop(idle);
        Ok((answer, body))
    }

    async fn agent_request(conn: &mut AgentConn, req: &AgentRequest<'_>) -> std::result::Result<(AgentAnswer, Option<Vec<u8>>), AgentFailure> {
        if conn.get_mut().write_all(&req.line()).await.is_err() {
            return Err(AgentFailure::Closed);
        }
        read_answer(conn).await
    }

    /// Connects to the gateway, which proves it is this computer's, and proves the engine is: at
    /// its own address when it answers there within a moment, else at the published port.
    async fn agent_connect(g: &Gateway) -> Result<AgentConn> {
        let io = |e: std::io::Error| ComputerError::Provider(format!("screen gateway: {e}"));
        let direct = *g.direct.lock().unwrap();
        let stream = match direct {
            Some(at) => match tokio::time::timeout(DIRECT_CONNECT, TcpStream::connect(at)).await {
                Ok(Ok(s)) => Some(s),
                _ => {
                    tracing::debug!("the gateway does not answer at {at}; its published port serves from now on");
                    *g.direct.lock().unwrap() = None;
                    None
                }
            },
            None => None,
        };
        let stream = match stream {
            Some(s) => s,
            None => TcpStream::connect(("127.0.0.1", g.port)).await.map_err(io)?,
        };
        stream.set_nodelay(true).map_err(io)?;
        let mut stream = BufReader::new(stream);
        gateway::prove(&mut stream, &g.agent_token).await.map_err(ComputerError::Provider)?;
        Ok(stream)
    }

    /// `botdesk-display ARGS` in the computer, as the screen services' user, with `token` on its
    /// stdin (a token is never an argument: every process can read the others' command lines).
    pub(crate) async fn display_script(&self, c: &ComputerRef, args: &[&str], token: Option<&str>) -> Result<()> {
        self.display_script_as(InComputer::Screen, c, args, token).await
    }

    /// `botdesk-display ARGS` in the computer, as `who`.
    async fn display_script_as(&self, who: InComputer, c: &ComputerRef, args: &[&str], token: Option<&str>) -> Result<()> {
        let container = self.running_container(c).await?;
        let mut argv = vec!["botdesk-display"];
        argv.extend_from_slice(args);
        let stdin = token.map(|t| Bytes::from(format!("{t}\n")));
        // Bringing up a display starts Xvfb and its window manager and waits for them.
        self.run_checked_input(who, &container, &argv, stdin, std::time::Duration::from_secs(60), &argv.join(" ")).await
    }

    /// Brings up display `slot` for the bot `user`: only it and the screen services may connect.
    pub(crate) async fn open_desktop_impl(&self, c: &ComputerRef, slot: u32, view_token: &str, user: BotUser) -> Result<DesktopInfo> {
        let (slot_arg, uid) = (slot.to_string(), user.uid.to_string());
        self.display_script(c, &["up", &slot_arg, &uid], Some(view_token)).await?;
        // Its browser's DevTools, too: refused to every other bot (a routing rule, as root).
        let container = self.running_container(c).await?;
        let fence = ["botdesk-helper", "fence-devtools", &slot_arg, &uid];
        self.run_checked(InComputer::Root, &container, &fence, std::time::Duration::from_secs(30), &format!("fencing the DevTools of :{slot}")).await?;
        Ok(DesktopInfo { display: slot, slot })
    }

    /// `botdesk-helper net-policy` as root, with every bot's policy on its stdin.
    pub(crate) async fn set_network_impl(&self, c: &ComputerRef, bots: &[BotNetwork]) -> Result<()> {
        let container = self.running_container(c).await?;
        let input = serde_json::to_vec(&serde_json::json!({ "bots": bots })).map_err(|e| ComputerError::Provider(e.to_string()))?;
        let argv = ["botdesk-helper", "net-policy"];
        self.run_checked_input(InComputer::Root, &container, &argv, Some(Bytes::from(input)), std::time::Duration::from_secs(30), "setting the network policy")
            .await
    }

    /// The gateway's `net` request: the refusals it keeps in memory.
    pub(crate) async fn network_refusals_impl(&self, c: &ComputerRef, user: BotUser, after: u64) -> Result<NetRefusals> {
        let (answer, _) = self.agent(c, &AgentRequest::Net { display: 0, uid: user.uid, after }).await?;
        answer.refusals().map_err(ComputerError::Provider)
    }

    pub(crate) async fn watch_browser_impl(&self, c: &ComputerRef, slot: u32, policy: Option<&Approvals>) -> Result<Vec<PendingApproval>> {
        let (answer, _) = self.agent(c, &AgentRequest::Guard { display: slot, policy }).await?;
        Ok(answer.pending.unwrap_or_default())
    }

    pub(crate) async fn answer_browser_impl(&self, c: &ComputerRef, slot: u32, id: u64, allow: bool) -> Result<bool> {
        let (answer, _) = self.agent(c, &AgentRequest::Approve { display: slot, id, allow }).await?;
        Ok(answer.done == Some(true))
    }

    pub(crate) async fn revoke_token_impl(&self, c: &ComputerRef, token: &str) -> Result<()> {
        if let Err(e) = self.agent(c, &AgentRequest::Revoke { display: 0, token: Some(token) }).await {
            tracing::warn!("revoking a token through the gateway failed ({e}); the script revokes it");
        }
        self.display_script(c, &["revoke"], Some(token)).await
    }

    pub(crate) async fn expire_token_impl(&self, c: &ComputerRef, token: &str, expires_ms: i64) -> Result<()> {
        self.agent(c, &AgentRequest::Extend { display: 0, token, expires: expires_ms }).await.map(drop)
    }

    pub(crate) async fn release_desktop_impl(&self, c: &ComputerRef, slot: u32, user: BotUser) -> Result<()> {
        // Revoke first, through the gateway itself (milliseconds, where an exec can take a second
        // under load): open connections drop within 0.25 s. `down` revokes again, then tears down.
        if let Err(e) = self.agent(c, &AgentRequest::Revoke { display: slot, token: None }).await {
            tracing::warn!("revoking display {slot} through the gateway failed ({e}); the teardown revokes it");
        }
        // The bot's browser is closed gracefully, as the bot (so its cookies are saved); what the
        // bot broke there does not stop the teardown: its processes lose their display with X.
        if let Err(e) = self.display_script_as(InComputer::Bot(user), c, &["release", &slot.to_string()], None).await {
            tracing::warn!("closing display {slot}'s browser failed ({e}); the teardown goes on");
        }
        self.display_script(c, &["down", &slot.to_string()], None).await
    }

    pub(crate) async fn start_recording_impl(&self, c: &ComputerRef, slot: u32, rec: &RecordingSpec) -> Result<()> {
        rec.validate()?;
        let (slot, fps, max) = (slot.to_string(), rec.fps.to_string(), rec.max_bytes.to_string());
        self.display_script(c, &["record", &slot, &rec.key, &fps, &max], None).await
    }

    /// `botdesk-display record-stop`: its first line says when the recording started and its
    /// size; the file follows.
    pub(crate) async fn take_recording_impl(&self, c: &ComputerRef, slot: u32, key: &str) -> Result<TakenRecording> {
        if !RecordingSpec::plain_key(key) {
            return Err(ComputerError::Invalid(format!("{key:?} is not a recording's key")));
        }
        let container = self.running_container(c).await?;
        let argv = ["botdesk-display", "record-stop", &slot.to_string(), key].map(String::from).to_vec();
        let (exec_id, output, _input) = self.start_exec(InComputer::Screen, &container, argv, vec![], "/", false, false).await?;
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut data = BufReader::new(tokio_util::io::StreamReader::new(crate::home::split_output(output, stderr.clone())));
        let mut line = String::new();
        // Stopping the recorder takes at most 5 s; the line is short.
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), (&mut data).take(4096).read_line(&mut line)).await;
        let read = read.map_err(|_| ComputerError::TimedOut(format!("ending recording {key} took over 30 s")))?;
        read.map_err(|e| ComputerError::Provider(format!("ending recording {key}: {e}")))?;
        #[derive(serde::Deserialize)]
        struct Head {
            started_ms: i64,
            bytes: u64,
        }
        match serde_json::from_str::<Head>(line.trim_end()) {
            Ok(h) => Ok(TakenRecording { started_ms: h.started_ms, bytes: h.bytes, data: Box::pin(data.take(h.bytes)) }),
            Err(_) => {
                let code = crate::provider::exit_code_when_done(self.client().await?, &exec_id).await?;
                let said = String::from_utf8_lossy(&stderr.lock().unwrap()).trim().to_string();
                Err(match code {
                    4 => ComputerError::NotFound(format!("recording {key} ({said})")),
                    _ => ComputerError::Provider(format!("ending recording {key} (exit {code}): {said}")),
                })
            }
        }
    }

    pub(crate) async fn screen_impl(&self, c: &ComputerRef, token: &str, control: bool) -> Result<ScreenAccess> {
        // A ping proves the cached port still reaches this computer's gateway (a restarted
        // container gets a new port; `agent` looks it up again when the old one fails).
        self.agent(c, &AgentRequest::Ping { display: 0 }).await?;
        let g = self.gateway(c).await?;
        Ok(ScreenAccess { port: g.port, token: token.to_string(), control })
    }

    pub(crate) async fn observe_impl(&self, c: &ComputerRef, slot: u32, format: ImageFormat) -> Result<Observation> {
        // Across a network the framebuffer comes zlib-compressed (4 MB raw would take seconds).
        let zlib = self.cfg.remote.is_some();
        let (answer, raw) = self.agent(c, &AgentRequest::Look { display: slot, zlib }).await?;
        seen(answer, raw.unwrap_or_default(), format).await
    }

    pub(crate) async fn browser_impl(&self, c: &ComputerRef, slot: u32, profile: &str, command: &BrowserCommand, ctx: &CallCtx) -> Result<Value> {
        let failed = |e: ComputerError| ComputerError::Provider(format!("{e}. The page browser failed; computer_act still works on the screen."));
        let request = AgentRequest::Browser { display: slot, command };
        let (answer, _) = self.agent_answer(c, &request).await.map_err(failed)?;
        let no_browser = answer.code == Some(RefusalCode::NoBrowser) && !answer.ok;
        let answer = if no_browser && *command == BrowserCommand::View {
            return Ok(json!({"closed": true}));
        } else if no_browser {
            // The gateway never starts a bot's process: the bot's Chromium starts as the bot.
            self.open_browser(c, slot, profile, ctx).await.map_err(failed)?;
            self.agent(c, &request).await.map_err(failed)?.0
        } else if let Some(why) = answer.refusal() {
            return Err(failed(ComputerError::Provider(why)));
        } else {
            answer
        };
        Ok(answer.result.unwrap_or(Value::Null))
    }

    /// Starts display `slot`'s Chromium with the bot's `profile`, as the bot with its home, and
    /// waits until its DevTools answer (`botdesk-gateway open-browser`).
    async fn open_browser(&self, c: &ComputerRef, slot: u32, profile: &str, ctx: &CallCtx) -> Result<()> {
        let container = self.running_container(c).await?;
        let home = crate::spec::home_of(ctx);
        let argv = ["botdesk-gateway", "open-browser", &slot.to_string(), profile, &home];
        let what = format!("starting the browser of :{slot}");
        self.run_checked(InComputer::Bot(ctx.user), &container, &argv, std::time::Duration::from_secs(45), &what).await
    }

    /// Runs the batch, then (for `settle_ms` > 0) the gateway watches the screen until it changed
    /// and stayed still that long, or for at most `SETTLE_CAP_MS`; what `then` asks comes in the
    /// same answer.
    pub(crate) async fn act_impl(&self, c: &ComputerRef, slot: u32, actions: &[Action], settle_ms: u64, then: &ActThen) -> Result<ActAnswer> {
        let runs = xdotool_runs(actions);
        let settle = Settle::after_batch(settle_ms);
        let look = then.look.map(|_| LookWish { zlib: self.cfg.remote.is_some() });
        let net = then.refusals.map(|(user, after)| NetAfter { uid: user.uid, after });
        let (answer, raw) = self.agent(c, &AgentRequest::Xdotool { display: slot, runs: &runs, settle, look, net }).await?;
        let bad = |why: String| ComputerError::Provider(format!("the screen gateway answered badly: {why}"));
        let settled = answer.settled().map_err(bad)?;
        let refusals = match net {
            Some(_) => Some(answer.refusals().map_err(bad)?),
            None => None,
        };
        // The batch happened: a look that did not come, or came unreadable, is left out (the
        // caller looks again on its own) rather than failing what was done.
        let look = match then.look {
            Some(format) if answer.len.is_some() => seen(answer, raw.unwrap_or_default(), format).await.ok(),
            _ => None,
        };
        Ok(ActAnswer { settled, look, refusals })
    }
}

/// A look's answer and body as an observation: decoded, then hashed and encoded on two cores at
/// once, off the async runtime.
async fn seen(answer: AgentAnswer, raw: Vec<u8>, format: ImageFormat) -> Result<Observation> {
    let (cursor, active_window) = answer.pointer();
    if answer.len.is_none() {
        return Err(ComputerError::Provider("the screen gateway answered a look without its framebuffer".into()));
    }
    let (width, height, frame_id, image) = tokio::task::spawn_blocking(move || -> Result<_> {
        let raw = if answer.zlib == Some(true) { inflate_shot(&raw)? } else { raw };
        let (width, height, rgb) = xwd_to_rgb(&raw)?;
        std::thread::scope(|s| {
            let hash = s.spawn(|| blake3::hash(&rgb).to_hex().to_string());
            let image = match format {
                ImageFormat::Png => encode_png(width, height, &rgb)?,
                ImageFormat::Jpeg { quality } => encode_jpeg(width, height, &rgb, quality)?,
            };
            Ok((width, height, hash.join().expect("hashing does not panic"), image))
        })
    })
    .await
    .map_err(|e| ComputerError::Provider(format!("screenshot task failed: {e}")))??;
    Ok(Observation { frame_id, width, height, cursor, active_window, format, image: Some(image) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use botdesk_core::action::parse_batch;
    use proptest::prelude::*;

    /// A valid XWD header (100 bytes, no colors) for a `w`×`h` screen, then its pixels.
    fn xwd(w: u32, h: u32) -> Vec<u8> {
        let mut fields = [0u32; 25];
        fields[0] = 100;
        (fields[4], fields[5], fields[11], fields[12]) = (w, h, 32, w * 4);
        let mut v: Vec<u8> = fields.iter().flat_map(|f| f.to_be_bytes()).collect();
        v.resize(100 + (w * h * 4) as usize, 7);
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Whatever a bot writes into the framebuffer's header: an error or pixels of the size
        /// the data holds, never a panic or an allocation beyond the largest screen.
        #[test]
        fn any_framebuffer_header_is_decoded_or_refused(w in 1u32..40, h in 1u32..40, edits in proptest::collection::vec((0usize..25, any::<u32>()), 0..4), cut in 0usize..8000) {
            let mut data = xwd(w, h);
            for (field, value) in edits {
                data[field * 4..field * 4 + 4].copy_from_slice(&value.to_be_bytes());
            }
            data.truncate(data.len().saturating_sub(cut));
            if let Ok((w, h, rgb)) = xwd_to_rgb(&data) {
                prop_assert_eq!(rgb.len(), w as usize * h as usize * 3);
                prop_assert!(rgb.len() <= data.len());
            }
        }

        /// Any bytes from a gateway (or an impostor): an answer, or one error; never a panic or
        /// an allocation of the announced size beyond the largest screenshot.
        #[test]
        fn any_gateway_answer_is_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..600), len in any::<u64>(), with_len in any::<bool>()) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut input = if with_len { format!("{{\"ok\": true, \"len\": {len}}}\n").into_bytes() } else { vec![] };
            input.extend_from_slice(&bytes);
            let got = rt.block_on(read_answer(&mut &input[..]));
            if let Ok((_, Some(body))) = got {
                prop_assert!(body.len() as u64 <= MAX_SHOT && body.len() <= input.len());
            }
        }
    }

    #[test]
    fn answers_over_their_bounds_are_refused() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let huge = b"{\"ok\": true, \"len\": 1000000000000000}\n";
        let e = rt.block_on(read_answer(&mut &huge[..])).err().unwrap();
        assert!(matches!(e, AgentFailure::Other(ComputerError::Provider(m)) if m.contains("a body of 1000000000000000 bytes")));
        let long = vec![b'x'; MAX_ANSWER_LINE as usize + 10];
        let e = rt.block_on(read_answer(&mut &long[..])).err().unwrap();
        assert!(matches!(e, AgentFailure::Other(ComputerError::Provider(m)) if m.contains("no answer line within")));
        // bytes_per_line 0 passed the old size check.
        let mut zero = xwd(4, 4);
        zero[48..52].copy_from_slice(&0u32.to_be_bytes());
        assert!(xwd_to_rgb(&zero).unwrap_err().to_string().contains("an impossible header"));
        assert_eq!(xwd_to_rgb(&xwd(4, 4)).unwrap().2.len(), 48);
    }

    #[test]
    fn batches_become_few_xdotool_runs_and_type_ends_a_chain() {
        let actions = parse_batch(&json!([
            {"type": "click", "x": 10, "y": 20},
            {"type": "key", "key": "l", "modifiers": ["ctrl"]},
            {"type": "type", "text": "-héllo 世界"},
            {"type": "scroll", "direction": "down", "amount": 3},
            {"type": "wait", "ms": 250}
        ]))
        .unwrap();
        let runs = xdotool_runs(&actions);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0],
            ["mousemove", "--sync", "10", "20", "click", "1", "key", "--clearmodifiers", "ctrl+l", "type", "--delay", "8", "--", "-héllo 世界"]
        );
        assert_eq!(runs[1], ["click", "--repeat", "3", "--delay", "10", "5", "sleep", "0.250"]);
        assert_eq!(keysym("Enter"), "Return");
        assert_eq!(keysym("PageDown"), "Next");
    }

    /// The gateway runs only the xdotool commands this side sends: every kind of action passes
    /// its allowlist, and what a bot would smuggle in (`exec`, `behave`, an option in a key's
    /// place) does not.
    #[test]
    fn the_gateway_allows_every_run_the_engine_sends_and_nothing_else() {
        use botdesk_core::action::{Button, Direction};
        let actions = vec![
            Action::Click { x: 10, y: 20, button: Button::Left },
            Action::Click { x: 10, y: 20, button: Button::Right },
            Action::Move { x: 1, y: 2 },
            Action::Down { at: Some((3, 4)), button: Button::Middle },
            Action::Up { at: None, button: Button::Middle },
            Action::Drag { x: 1, y: 1, to_x: 99, to_y: 99, button: Button::Left },
            Action::Key { key: "Enter".into(), modifiers: vec!["ctrl".into(), "shift".into()] },
            Action::Key { key: "-".into(), modifiers: vec![] },
            Action::KeyDown { key: "é".into() },
            Action::KeyUp { key: "é".into() },
            Action::Scroll { at: Some((5, 5)), direction: Direction::Left, amount: 7 },
            Action::Wait { ms: 1500 },
            Action::Type { text: "--window 1 exec sh -c id".into() },
            Action::Type { text: "".into() },
        ];
        let mut runs = xdotool_runs(&actions);
        let allowed = runs.len();
        for bad in [
            vec!["exec", "sh", "-c", "id"],
            vec!["key", "--clearmodifiers", "--window", "1", "exec", "sh"],
            vec!["behave", "1", "focus", "exec", "sh"],
            vec!["mousemove", "--sync", "1", "2", "exec", "sh"],
            vec!["type", "--delay", "8", "--", "x", "exec", "sh"],
            vec!["sleep", "1", "search", "--name", "x"],
        ] {
            runs.push(bad.into_iter().map(String::from).collect());
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/sandboxes/computer");
        let out = std::process::Command::new("python3")
            .args([
                "-I",
                "-B",
                "-c",
                "import json, sys; sys.path.insert(0, sys.argv[1]); import botdesk_gateway as g; print(json.dumps([g.xdotool_allowed(r) for r in json.loads(sys.argv[2])]))",
            ])
            .arg(&dir)
            .arg(serde_json::to_string(&runs).unwrap())
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let verdicts: Vec<bool> = serde_json::from_slice(&out.stdout).unwrap();
        for (run, ok) in runs.iter().zip(&verdicts) {
            assert_eq!(*ok, runs.iter().position(|r| r == run).unwrap() < allowed, "{run:?}");
        }
    }

    #[test]
    fn compressed_shots_inflate_within_their_bound() {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&xwd(3, 2)).unwrap();
        assert_eq!(inflate_shot(&z.finish().unwrap()).unwrap(), xwd(3, 2));
        assert!(inflate_shot(b"not zlib at all").unwrap_err().to_string().contains("not zlib"));
        // A bomb: a few hundred KB that would inflate past the largest screen there can be.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..=(MAX_SHOT >> 20) {
            z.write_all(&zeros).unwrap();
        }
        let bomb = z.finish().unwrap();
        assert!(inflate_shot(&bomb).unwrap_err().to_string().contains("inflates past"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]
        #[test]
        fn any_compressed_shot_is_inflated_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = inflate_shot(&bytes);
        }
    }

    #[test]
    fn xwd_pixels_decode() {
        let mut h = [0u32; 25];
        h[0] = 100 + 4; // header + window name
        h[4] = 2;
        h[5] = 1;
        h[7] = 0;
        h[11] = 32;
        h[12] = 8;
        let mut data: Vec<u8> = h.iter().flat_map(|v| v.to_be_bytes()).collect();
        data.extend_from_slice(b"abc\0");
        data.extend_from_slice(&[1, 2, 3, 0, 4, 5, 6, 0]);
        assert_eq!(xwd_to_rgb(&data).unwrap(), (2, 1, vec![3, 2, 1, 6, 5, 4]));
        assert!(xwd_to_rgb(&data[..50]).is_err());
        // Most significant byte first (X R G B), three pixels a row, two rows padded to 16 bytes.
        (h[4], h[5], h[7], h[12]) = (3, 2, 1, 16);
        let mut data: Vec<u8> = h.iter().flat_map(|v| v.to_be_bytes()).collect();
        data.extend_from_slice(b"abc\0");
        data.extend_from_slice(&[9, 1, 2, 3, 9, 4, 5, 6, 9, 7, 8, 9, 0xee, 0xee, 0xee, 0xee]);
        data.extend_from_slice(&[9, 10, 11, 12, 9, 13, 14, 15, 9, 16, 17, 18, 0xee, 0xee, 0xee, 0xee]);
        assert_eq!(xwd_to_rgb(&data).unwrap(), (3, 2, (1..=18).collect::<Vec<u8>>()));
    }
}

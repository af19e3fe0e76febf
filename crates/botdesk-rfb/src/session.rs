//! One screen session: a task that owns the VNC connection, drives its events and the person's
//! input from one `select!` loop (vnc-rs blocks input while another task waits for events),
//! keeps the framebuffer, asks for updates (vnc-rs never does by itself) and reconnects with
//! backoff. A session nobody watches stops asking for updates at once, and after a few seconds
//! lets the connection and its pixels go until a viewer subscribes again. Dropping the `Session`
//! stops the task.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use serde::Serialize;
use tokio::{
    net::TcpStream,
    sync::{broadcast, mpsc},
};
use tokio_util::sync::CancellationToken;
use vnc::{ClientKeyEvent, ClientMouseEvent, PixelFormat, VncClient, VncConnector, VncEncoding, VncEvent, X11Event};

use crate::framebuffer::{Framebuffer, Rect};

/// Where to connect: the gateway's loopback port and a token; `control` says the token is a
/// control capability (input is forwarded only then); `compressed` that the screen is across a
/// network (a computer on another machine), so a compressed encoding is asked for first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub port: u16,
    pub token: String,
    pub control: bool,
    pub compressed: bool,
}

/// Asked for the current target before every (re)connect, so a session follows control being
/// taken, released or expired without being rebuilt.
pub type Resolve = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Target, String>> + Send>> + Send + Sync>;

/// The connection's state, shown by the tab ("reconnecting…" is visible, never silent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ConnState {
    Connecting,
    Connected {
        control: bool,
    },
    Reconnecting {
        attempt: u32,
        retry_in_ms: u64,
        error: String,
    },
    /// Nobody has watched for a while: disconnected, pixels freed, until a viewer subscribes.
    Idle,
    Closed,
}

impl ConnState {
    /// The allowed transitions; anything else is a bug in the session loop.
    pub fn can_become(&self, next: &ConnState) -> bool {
        use ConnState::*;
        matches!(
            (self, next),
            (Connecting, Connected { .. } | Reconnecting { .. } | Closed)
                | (Connected { .. }, Connecting | Reconnecting { .. } | Idle | Closed)
                | (Reconnecting { .. }, Connecting | Reconnecting { .. } | Closed)
                | (Idle, Connecting | Closed)
        )
    }
}

/// The person's input, as the viewer sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Absolute framebuffer coordinates and the RFB button mask (1 left, 2 middle, 4 right, 8/16 wheel).
    Pointer {
        x: u16,
        y: u16,
        buttons: u8,
    },
    Key {
        keysym: u32,
        down: bool,
    },
    /// A full frame, e.g. after a tab was hidden.
    FullRefresh,
    /// The target changed (control taken or released): reconnect now without waiting.
    Retarget,
}

/// What changed, for the viewers subscribed to this session.
#[derive(Debug, Clone)]
pub enum Update {
    /// These rectangles of the framebuffer changed (read the pixels from `Shared::fb`).
    Rects(Vec<Rect>),
    /// The screen has a new size (the whole framebuffer follows as one rectangle).
    Resized(u16, u16),
    State(ConnState),
    /// The bot's clipboard changed (its text comes from the engine: RFB's cut text is Latin-1).
    ClipboardChanged,
}

/// What viewers read: the framebuffer and the connection state.
#[derive(Debug)]
pub struct Shared {
    pub fb: std::sync::Mutex<Framebuffer>,
    pub state: std::sync::Mutex<ConnState>,
    /// When the person's input last reached the bot (the owner renews control while it is recent).
    pub last_input: std::sync::Mutex<Option<std::time::Instant>>,
    /// Told when a viewer subscribes (an idle session wakes up, a paused one asks for updates).
    watched: tokio::sync::Notify,
    /// Bytes received from the screen over all connections (what the encoding costs the link).
    pub bytes_in: Arc<std::sync::atomic::AtomicU64>,
}

pub struct Session {
    pub shared: Arc<Shared>,
    input: mpsc::Sender<Input>,
    updates: broadcast::Sender<Update>,
    stop: CancellationToken,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// When an update has been decoded the session flushes it to the viewers and asks for the next
/// incremental update at once; the request waits at the server until something changes, so an
/// idle screen costs no traffic. A quiet second re-asks, in case an update came with no rectangles.
const IDLE_REREQUEST: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a session with no viewer keeps its connection (a tab switched away and back within
/// it shows the current picture at once; after it, the tab reconnects in a fraction of a second).
pub const IDLE_AFTER: Duration = Duration::from_secs(2);

impl Session {
    /// Starts the session's task (on the current tokio runtime); it goes idle [`IDLE_AFTER`]
    /// without a viewer.
    pub fn spawn(resolve: Resolve) -> Session {
        Session::spawn_with(resolve, IDLE_AFTER)
    }

    /// Like [`Session::spawn`], going idle after `idle_after` without a viewer.
    pub fn spawn_with(resolve: Resolve, idle_after: Duration) -> Session {
        let shared = Arc::new(Shared {
            fb: std::sync::Mutex::new(Framebuffer::new(0, 0)),
            state: std::sync::Mutex::new(ConnState::Connecting),
            last_input: Default::default(),
            watched: Default::default(),
            bytes_in: Default::default(),
        });
        let (input, input_rx) = mpsc::channel(1024);
        let (updates, _) = broadcast::channel(256);
        let stop = CancellationToken::new();
        let task = Task { shared: shared.clone(), resolve, input: input_rx, updates: updates.clone(), stop: stop.clone(), idle_after };
        tokio::spawn(task.run());
        Session { shared, input, updates, stop }
    }

    /// Updates from now on; the session (re)connects for its viewers if it was idle.
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        let rx = self.updates.subscribe();
        self.shared.watched.notify_one();
        rx
    }

    pub fn state(&self) -> ConnState {
        self.shared.state.lock().unwrap().clone()
    }

    /// Queues input; refused (false) when the session is gone or hopelessly behind.
    pub fn send(&self, input: Input) -> bool {
        self.input.try_send(input).is_ok()
    }

    pub fn retarget(&self) {
        let _ = self.input.try_send(Input::Retarget);
    }
}

struct Task {
    shared: Arc<Shared>,
    resolve: Resolve,
    input: mpsc::Receiver<Input>,
    updates: broadcast::Sender<Update>,
    stop: CancellationToken,
    idle_after: Duration,
}

enum Ended {
    Stop,
    Retarget,
    /// Nobody watched for `idle_after`.
    Unwatched,
    Lost(String),
}

/// Connects to the gateway, presents the token and completes the RFB handshake.
pub async fn connect(t: &Target) -> Result<VncClient, String> {
    connect_counting(t, Default::default()).await
}

/// [`connect`], adding the bytes received to `bytes_in`.
pub async fn connect_counting(t: &Target, bytes_in: Arc<std::sync::atomic::AtomicU64>) -> Result<VncClient, String> {
    let io = |e: std::io::Error| format!("screen gateway: {e}");
    let mut stream = TcpStream::connect(("127.0.0.1", t.port)).await.map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    // The answer is read byte by byte: what follows belongs to the RFB handshake.
    botdesk_core::gateway::present(&mut stream, &t.token).await?;
    // The server takes the first encoding of this list it knows for each update.
    let encodings = if t.compressed {
        // Across a network a whole raw screen is 4 MB (1280×800×4): ZRLE (zlib over run-length
        // tiles) sends a typical desktop in a small fraction of that, losslessly.
        [VncEncoding::Zrle, VncEncoding::Tight, VncEncoding::CopyRect, VncEncoding::Raw]
    } else {
        // Raw first: the server is on this machine, and moving bytes (the gateway relays them in
        // the kernel) costs less than compressing and decompressing them on both sides.
        [VncEncoding::Raw, VncEncoding::CopyRect, VncEncoding::Tight, VncEncoding::Zrle]
    };
    let mut connector = VncConnector::new(Counted { inner: stream, bytes_in }).set_auth_method(async { Ok(String::new()) });
    for e in encodings {
        connector = connector.add_encoding(e);
    }
    connector
        // No cursor-shape encoding: the server then draws the pointer into the frames, so
        // everyone watching sees where it is, in every view, whoever moves it (the bot's
        // xdotool or the person).
        .add_encoding(VncEncoding::DesktopSizePseudo)
        .allow_shared(true)
        // The X server's own layout: x11vnc then sends its pixels as they are instead of
        // translating each one (a sixth of a core at full-screen rates), and we store them with a
        // plain copy; the frame transport makes RGBA of them as it scales.
        .set_pixel_format(PixelFormat::bgra())
        .build()
        .map_err(|e| format!("VNC: {e}"))?
        .try_start()
        .await
        .map_err(|e| format!("VNC handshake: {e}"))?
        .finish()
        .map_err(|e| format!("VNC: {e}"))
}

impl Task {
    fn set_state(&self, next: ConnState) {
        let mut state = self.shared.state.lock().unwrap();
        if *state == next {
            return;
        }
        debug_assert!(state.can_become(&next), "{state:?} → {next:?}");
        if !state.can_become(&next) {
            tracing::warn!("screen session: unexpected transition {state:?} → {next:?}");
        }
        *state = next.clone();
        drop(state);
        let _ = self.updates.send(Update::State(next));
    }

    async fn run(mut self) {
        let mut attempt = 0u32;
        loop {
            self.set_state(ConnState::Connecting);
            let resolve = (self.resolve)();
            let connected = tokio::select! {
                _ = self.stop.cancelled() => break,
                r = tokio::time::timeout(CONNECT_TIMEOUT, async {
                    let target = resolve.await?;
                    let client = connect_counting(&target, self.shared.bytes_in.clone()).await?;
                    Ok::<_, String>((client, target))
                }) => r.unwrap_or_else(|_| Err("the screen did not answer within 5 s".into())),
            };
            let error = match connected {
                Ok((client, target)) => {
                    attempt = 0;
                    self.set_state(ConnState::Connected { control: target.control });
                    let ended = self.drive(&client, target.control).await;
                    let _ = client.close().await;
                    match ended {
                        Ended::Stop => break,
                        Ended::Retarget => continue,
                        Ended::Unwatched => match self.idle().await {
                            true => continue,
                            false => break,
                        },
                        Ended::Lost(e) => e,
                    }
                }
                Err(e) => e,
            };
            attempt += 1;
            let delay = (Duration::from_millis(100) * 2u32.saturating_pow(attempt.min(16) - 1)).min(MAX_BACKOFF);
            tracing::info!("screen session: {error}; reconnecting in {delay:?}");
            self.set_state(ConnState::Reconnecting { attempt, retry_in_ms: delay.as_millis() as u64, error });
            let wait = tokio::time::sleep(delay);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    _ = self.stop.cancelled() => {
                        self.set_state(ConnState::Closed);
                        return;
                    }
                    _ = &mut wait => break,
                    i = self.input.recv() => match i {
                        Some(Input::Retarget) => break,
                        Some(_) => {} // input while disconnected goes nowhere
                        None => {
                            self.set_state(ConnState::Closed);
                            return;
                        }
                    },
                }
            }
        }
        self.set_state(ConnState::Closed);
    }

    fn watched(&self) -> bool {
        self.updates.receiver_count() > 0
    }

    /// Disconnected with the pixels freed, until a viewer subscribes (true) or the session stops
    /// (false).
    async fn idle(&mut self) -> bool {
        *self.shared.fb.lock().unwrap() = Framebuffer::new(0, 0);
        self.set_state(ConnState::Idle);
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return false,
                _ = self.shared.watched.notified() => if self.watched() {
                    return true;
                },
                i = self.input.recv() => match i {
                    Some(Input::Retarget) if self.watched() => return true,
                    Some(_) => {} // nothing to send input to
                    None => return false,
                },
            }
        }
    }

    /// Drives one connection until it ends: events, input and update requests from one loop.
    async fn drive(&mut self, client: &VncClient, control: bool) -> Ended {
        // vnc-rs asked for the first full frame; each decoded update asks for the next one while
        // someone watches. Unwatched, the next request waits for a viewer (`paused`).
        let mut paused = false;
        let mut unwatched_since = None;
        loop {
            // Safety net: a quiet second re-asks too, in case an update came with no rectangles.
            let due = tokio::time::sleep(IDLE_REREQUEST);
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Ended::Stop,
                _ = self.shared.watched.notified(), if paused => {
                    paused = false;
                    if let Err(e) = client.input(X11Event::Refresh).await {
                        return Ended::Lost(format!("requesting an update: {e}"));
                    }
                }
                i = self.input.recv() => {
                    let event = match i {
                        None => return Ended::Stop,
                        Some(Input::Retarget) => return Ended::Retarget,
                        Some(Input::FullRefresh) => X11Event::FullRefresh,
                        Some(_) if !control => continue, // view-only: input never leaves the app
                        Some(Input::Pointer { x, y, buttons }) => X11Event::PointerEvent(ClientMouseEvent { position_x: x, position_y: y, bottons: buttons }),
                        Some(Input::Key { keysym, down }) => X11Event::KeyEvent(ClientKeyEvent { keycode: keysym, down }),
                    };
                    if !matches!(event, X11Event::FullRefresh) {
                        *self.shared.last_input.lock().unwrap() = Some(std::time::Instant::now());
                    }
                    if let Err(e) = client.input(event).await {
                        return Ended::Lost(format!("sending input: {e}"));
                    }
                }
                e = client.recv_event() => match e {
                    Ok(e) => {
                        if let Err(why) = self.apply(e) {
                            return Ended::Lost(why);
                        }
                        // Take whatever else is already decoded, then show it at once.
                        loop {
                            match client.poll_event().await {
                                Ok(Some(e)) => if let Err(why) = self.apply(e) {
                                    return Ended::Lost(why);
                                },
                                Ok(None) => break,
                                Err(e) => return Ended::Lost(format!("the screen connection ended: {e}")),
                            }
                        }
                        self.flush();
                        // Ask for the next update now: the server answers when something changes,
                        // so the request waits there instead of the picture waiting here.
                        if !self.watched() {
                            paused = true;
                            unwatched_since.get_or_insert_with(tokio::time::Instant::now);
                        } else if let Err(e) = client.input(X11Event::Refresh).await {
                            return Ended::Lost(format!("requesting an update: {e}"));
                        }
                    }
                    Err(e) => return Ended::Lost(format!("the screen connection ended: {e}")),
                },
                _ = due => {
                    if self.watched() {
                        (paused, unwatched_since) = (false, None);
                    } else if unwatched_since.get_or_insert_with(tokio::time::Instant::now).elapsed() >= self.idle_after {
                        return Ended::Unwatched;
                    } else {
                        paused = true;
                        continue;
                    }
                    self.flush();
                    if let Err(e) = client.input(X11Event::Refresh).await {
                        return Ended::Lost(format!("requesting an update: {e}"));
                    }
                }
            }
        }
    }

    fn apply(&self, e: VncEvent) -> Result<(), String> {
        match e {
            VncEvent::SetResolution(s) => {
                tracing::debug!("resolution {}x{}", s.width, s.height);
                self.shared.fb.lock().unwrap().resize(s.width, s.height);
                let _ = self.updates.send(Update::Resized(s.width, s.height));
            }
            VncEvent::RawImage(r, data) => {
                self.shared
                    .fb
                    .lock()
                    .unwrap()
                    .put_bgrx(Rect { x: r.x, y: r.y, w: r.width, h: r.height }, &data)
                    .map_err(|e| format!("bad update from the screen: {e}"))?;
            }
            VncEvent::Copy(dst, src) => {
                let dst = Rect { x: dst.x, y: dst.y, w: dst.width, h: dst.height };
                let src = Rect { x: src.x, y: src.y, w: src.width, h: src.height };
                self.shared.fb.lock().unwrap().copy(dst, src).map_err(|e| format!("bad update from the screen: {e}"))?;
            }
            // Not requested (see `connect`): the pointer comes drawn into the frames.
            VncEvent::SetCursor(r, _) => tracing::debug!("ignoring a cursor shape {r:?} (not requested)"),
            VncEvent::Text(_) => {
                let _ = self.updates.send(Update::ClipboardChanged);
            }
            VncEvent::Error(e) => return Err(format!("the screen reported: {e}")),
            VncEvent::JpegImage(r, _) => tracing::warn!("ignoring a JPEG rectangle {r:?} (not requested)"),
            _ => {}
        }
        Ok(())
    }

    fn flush(&self) {
        let rects = self.shared.fb.lock().unwrap().take_dirty();
        tracing::trace!("flush {rects:?}");
        if !rects.is_empty() {
            let _ = self.updates.send(Update::Rects(rects));
        }
    }
}

/// A stream that counts the bytes read from it.
struct Counted {
    inner: TcpStream,
    bytes_in: Arc<std::sync::atomic::AtomicU64>,
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.bytes_in.fetch_add((buf.filled().len() - before) as u64, std::sync::atomic::Ordering::Relaxed);
        polled
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>, data: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::ConnState::*;

    #[test]
    fn connection_states_move_only_along_their_edges() {
        let r = Reconnecting { attempt: 1, retry_in_ms: 100, error: "x".into() };
        assert!(Connecting.can_become(&Connected { control: false }));
        assert!(Connected { control: true }.can_become(&Connecting), "retarget");
        assert!(r.can_become(&Connecting));
        assert!(!Closed.can_become(&Connecting), "closed is final");
        assert!(!r.can_become(&Connected { control: false }), "always through connecting");
        assert!(!Connecting.can_become(&Connecting));
        assert!(Connected { control: false }.can_become(&Idle) && Idle.can_become(&Connecting), "unwatched, then watched again");
        assert!(!Idle.can_become(&Connected { control: true }), "idle reconnects through connecting");
    }
}

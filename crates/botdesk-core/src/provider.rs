//! The ComputerProvider contract: lifecycle, desktop, exec and files. Nothing above this
//! trait knows which provider it talks to.

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::{
    action::Action,
    error::ComputerError,
    home_stream::{LoadMode, LoadSummary},
    network::{BotNetwork, NetRefusals},
    path::WorkspacePath,
    types::{BotId, BotUser, ComputerRef, ComputerSpec, HomeOwners, MachineStatus, Provisioned},
};

pub type Result<T, E = ComputerError> = std::result::Result<T, E>;

/// Who is calling and how to stop the call. Every provider method takes one.
#[derive(Debug, Clone, Default)]
pub struct CallCtx {
    pub bot: Option<BotId>,
    /// Whom the bot's commands, shells, browser and files run as ([`BotUser::PRIVATE`] unless
    /// the engine resolved a Team bot).
    pub user: BotUser,
    /// The run a command is for: its processes carry `RUN_TAG=<run>` so they can be stopped when
    /// the run's driver died ([`ComputerProvider::kill_tagged`]).
    pub run: Option<String>,
    /// `<run-id>:<fence>` while a run holds the bot's execution lease.
    pub screen_lease: Option<String>,
    /// The control lease a person's shell is opened under: its processes carry
    /// `CONTROL_TAG=<lease>` so they end with that control, in whichever process sees it end.
    pub control: Option<String>,
    /// The bot's own display, for commands and shells (`DISPLAY=:N`); none when it has no
    /// desktop, so nothing it starts draws on another bot's screen.
    pub display: Option<u32>,
    pub cancel: CancellationToken,
}

impl CallCtx {
    /// A call for `bot`, which runs as `user` in its computer.
    pub fn for_bot(bot: &BotId, user: BotUser) -> Self {
        Self { bot: Some(bot.clone()), user, ..Self::default() }
    }
}

// ---------------------------------------------------------------------------------------------
// Exec

pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(5 * 60);
pub const MIN_EXEC_TIMEOUT: Duration = Duration::from_millis(1);
pub const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Exit code of a command killed by its timeout.
pub const EXIT_TIMED_OUT: i32 = 124;
/// Exit code of a command aborted by cancellation.
pub const EXIT_CANCELLED: i32 = 130;
/// The environment variable naming the run a command belongs to (see [`CallCtx::run`]).
pub const RUN_TAG: &str = "BOTDESK_RUN_ID";
/// The environment variable naming the control lease a person's shell belongs to (see
/// [`CallCtx::control`]).
pub const CONTROL_TAG: &str = "BOTDESK_CONTROL_LEASE";
/// The environment variable naming the bot a command or shell is for (see [`CallCtx::bot`]):
/// removing a bot from a Team computer ends what it left running there.
pub const BOT_TAG: &str = "BOTDESK_BOT_ID";

#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub cwd: WorkspacePath,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Written to the command's stdin, then closed (none: no stdin). What must not be seen goes
    /// here: every process of the machine can read the others' arguments.
    pub stdin: Option<Bytes>,
}

/// The most a command's stdin may carry.
pub const MAX_EXEC_STDIN: usize = 1 << 20;

impl ExecRequest {
    pub fn new(argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { argv: argv.into_iter().map(Into::into).collect(), cwd: WorkspacePath::root(), env: vec![], timeout: DEFAULT_EXEC_TIMEOUT, stdin: None }
    }
    pub fn stdin(mut self, data: Bytes) -> Self {
        self.stdin = Some(data);
        self
    }
    pub fn cwd(mut self, cwd: WorkspacePath) -> Self {
        self.cwd = cwd;
        self
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Checks the request before any provider runs it.
    pub fn validate(&self) -> Result<()> {
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(ComputerError::Invalid("exec needs a command (argv is empty)".into()));
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(ComputerError::Invalid("an argument contains a NUL byte".into()));
        }
        if self.stdin.as_ref().is_some_and(|d| d.len() > MAX_EXEC_STDIN) {
            return Err(ComputerError::Invalid(format!("a command's input is at most {} KiB", MAX_EXEC_STDIN / 1024)));
        }
        if !(MIN_EXEC_TIMEOUT..=MAX_EXEC_TIMEOUT).contains(&self.timeout) {
            return Err(ComputerError::Invalid(format!("timeout must be between 1 ms and 60 min, got {} ms", self.timeout.as_millis())));
        }
        for (k, _) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ComputerError::Invalid(format!("invalid environment variable name {k:?}")));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKind {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub stream: StreamKind,
    pub data: Bytes,
}

/// Where a provider streams a command's output as it arrives (None: nobody listens).
pub type OutputSink = Option<UnboundedSender<ExecOutput>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecOutcome {
    Exited,
    TimedOut,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecExit {
    pub code: i32,
    pub outcome: ExecOutcome,
    /// "command timed out after N ms" or "command aborted"; None for an ordinary exit.
    pub message: Option<String>,
}

impl ExecExit {
    pub fn exited(code: i32) -> Self {
        Self { code, outcome: ExecOutcome::Exited, message: None }
    }
    pub fn timed_out(after: Duration) -> Self {
        Self { code: EXIT_TIMED_OUT, outcome: ExecOutcome::TimedOut, message: Some(format!("command timed out after {} ms", after.as_millis())) }
    }
    pub fn cancelled() -> Self {
        Self { code: EXIT_CANCELLED, outcome: ExecOutcome::Cancelled, message: Some("command aborted".into()) }
    }
}

// ---------------------------------------------------------------------------------------------
// Files

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
}

/// One listing row. Symlinks pointing outside the workspace never appear.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct FileEntry {
    pub path: WorkspacePath,
    pub kind: FileKind,
    pub size: u64,
    pub executable: bool,
}

// ---------------------------------------------------------------------------------------------
// Desktop

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesktopInfo {
    /// X display number inside the computer (`:N`); equal to the slot.
    pub display: u32,
    pub slot: u32,
}

/// A capability to one display's screen through the computer's gateway: connect to
/// `127.0.0.1:port`, send `token` and a newline, then speak RFB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScreenAccess {
    pub port: u16,
    pub token: String,
    pub control: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observation {
    /// BLAKE3 of the pixels (hex): equal ids, equal pixels.
    pub frame_id: String,
    pub width: u32,
    pub height: u32,
    pub cursor: (u32, u32),
    pub active_window: Option<String>,
    /// How `image` is encoded.
    pub format: ImageFormat,
    /// The encoded screenshot; None when the pixels are unchanged since the caller's last observation.
    #[serde(skip)]
    pub image: Option<Bytes>,
}

/// What an action batch's answer brings besides how the screen settled: every batch of a run is
/// followed by a look and a read of the refusals, and they come with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActThen {
    /// A look after the batch, encoded so.
    pub look: Option<ImageFormat>,
    /// The refusals of this bot's user after this number (as [`ComputerProvider::network_refusals`]).
    pub refusals: Option<(BotUser, u64)>,
}

/// An action batch's answer: how the screen settled, and what [`ActThen`] asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActAnswer {
    pub settled: crate::action::Settled,
    pub look: Option<Observation>,
    pub refusals: Option<crate::NetRefusals>,
}

/// How a screenshot is encoded: PNG (lossless, the default) or JPEG at a quality of 1–100.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImageFormat {
    #[default]
    Png,
    Jpeg {
        quality: u8,
    },
}

impl ImageFormat {
    pub fn mime(&self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg { .. } => "image/jpeg",
        }
    }
}

/// One page-browser request (browser_navigate, browser_snapshot, browser_act, and the person's
/// Browser pane).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BrowserCommand {
    /// Start the browser and wait until its DevTools answer.
    Ready,
    Navigate {
        url: String,
    },
    Snapshot,
    Act {
        actions: Vec<crate::browser::BrowserAction>,
    },
    /// The page (as a snapshot) and the tabs, for the person's Browser pane; never starts the
    /// browser.
    View,
    /// Back (`step` < 0) or forward in the tab's history.
    History {
        step: i32,
    },
    Reload,
    /// Fills the page's login form, only when the page's origin is `origin` (checked in the page
    /// in the same step as the fill): the user name, the password, and the one-time code when
    /// the page has a field for one.
    FillLogin {
        origin: String,
        user: String,
        password: crate::login::Secret,
        code: Option<String>,
    },
}

fn unsupported<T>(provider: &'static str, operation: &'static str) -> Result<T> {
    Err(ComputerError::Unsupported { provider, operation })
}

/// How many requests a provider sent since it was made: to the machine that runs computers (the
/// Docker engine's API) and to the computers themselves (their screen gateways). What tests and
/// the bench count an operation's cost by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    pub machine: u64,
    pub computers: u64,
}

/// A backend that runs computers. Stop and destroy are idempotent; an unknown computer counts as
/// gone. Every path argument is already a checked [`WorkspacePath`].
#[async_trait]
pub trait ComputerProvider: Send + Sync + 'static {
    fn kind(&self) -> &'static str;

    /// The requests sent so far (none counted: zeros).
    fn requests(&self) -> Requests {
        Requests::default()
    }

    // 1. Lifecycle
    /// Creates the computer, or reconnects to the existing one and starts it if stopped.
    async fn provision(&self, spec: &ComputerSpec, ctx: &CallCtx) -> Result<Provisioned>;
    /// Idempotent setup after provision (folders, ownership).
    async fn prepare(&self, computer: &ComputerRef, ctx: &CallCtx) -> Result<()>;
    async fn status(&self, computer: &ComputerRef) -> Result<MachineStatus>;
    /// Stops the machine and keeps its disk.
    async fn stop(&self, computer: &ComputerRef, ctx: &CallCtx) -> Result<()>;
    /// Removes the machine; the next provision is fresh.
    async fn destroy(&self, computer: &ComputerRef, ctx: &CallCtx) -> Result<()>;

    // 2. Desktop (per-bot displays). The engine allocates slots; display N = slot N.
    // Providers without screens keep the defaults.
    /// Starts display `slot` (if needed) with a view transport bound to `view_token`.
    async fn open_desktop(&self, _computer: &ComputerRef, _bot: &BotId, _slot: u32, _view_token: &str, _ctx: &CallCtx) -> Result<DesktopInfo> {
        unsupported(self.kind(), "open_desktop")
    }
    /// Revokes the display's tokens, stops everything on it and verifies it is gone; an error
    /// means the teardown was not verified (the slot must stay reserved).
    async fn release_desktop(&self, _computer: &ComputerRef, _slot: u32, _ctx: &CallCtx) -> Result<()> {
        unsupported(self.kind(), "release_desktop")
    }
    /// Starts the control transport of display `slot` (input allowed), bound to `token`.
    async fn control_transport(&self, _computer: &ComputerRef, _slot: u32, _token: &str, _ctx: &CallCtx) -> Result<()> {
        unsupported(self.kind(), "control_transport")
    }
    /// Revokes a screen token: refused at once, open connections dropped within a second.
    /// Makes a token lapse at `expires_ms` (Unix ms) inside the computer: refused, its open
    /// connections dropped, from then on, whether or not any process of ours runs then.
    async fn expire_token_at(&self, _computer: &ComputerRef, _token: &str, _expires_ms: i64) -> Result<()> {
        Ok(())
    }
    async fn revoke_token(&self, _computer: &ComputerRef, _token: &str, _ctx: &CallCtx) -> Result<()> {
        unsupported(self.kind(), "revoke_token")
    }
    /// How a VNC client reaches the screen behind `token`.
    async fn screen(&self, _computer: &ComputerRef, _token: &str, _control: bool) -> Result<ScreenAccess> {
        unsupported(self.kind(), "screen")
    }
    async fn observe(&self, _computer: &ComputerRef, _slot: u32, _format: ImageFormat, _ctx: &CallCtx) -> Result<Observation> {
        unsupported(self.kind(), "observe")
    }
    /// DOM-level control of the bot's own Chromium on display `slot` (started on first use with
    /// the profile folder `profile` under `.browser-profiles/`). Returns the page snapshot.
    async fn page_browser(&self, _computer: &ComputerRef, _slot: u32, _profile: &str, _command: &BrowserCommand, _ctx: &CallCtx) -> Result<serde_json::Value> {
        unsupported(self.kind(), "page_browser")
    }
    /// Performs a checked batch in order on display `slot`, then what `then` asks (a look, the
    /// network refusals) in the same request to the computer.
    async fn act(&self, _computer: &ComputerRef, _slot: u32, _actions: &[Action], _settle_ms: u64, _then: &ActThen, _ctx: &CallCtx) -> Result<ActAnswer> {
        unsupported(self.kind(), "act")
    }
    /// Starts recording display `slot` as `rec.key`, as the screen services (no bot can read or
    /// stop it). A recording of that key already going on goes on. It ends with the display.
    async fn start_recording(&self, _computer: &ComputerRef, _slot: u32, _rec: &RecordingSpec) -> Result<()> {
        unsupported(self.kind(), "start_recording")
    }
    /// Ends recording `key` (of display `slot`) and hands its file over; the computer keeps no
    /// copy. `NotFound` when there is none.
    async fn take_recording(&self, _computer: &ComputerRef, _slot: u32, _key: &str) -> Result<TakenRecording> {
        unsupported(self.kind(), "take_recording")
    }

    // Network policy. Providers without one keep the defaults.
    /// Sets the network policies of the computer's bots, every one of them (a bot not named is
    /// [`NetPolicy::Open`]), where no bot can change them: in force within a second, for
    /// connections already open too.
    async fn set_network(&self, _computer: &ComputerRef, _bots: &[BotNetwork], _ctx: &CallCtx) -> Result<()> {
        unsupported(self.kind(), "set_network")
    }
    /// The connections of `user` its policy refused after number `after` of the computer's
    /// current boot ([`NetRefusals::boot`] says which; at most 100 an answer).
    async fn network_refusals(&self, _computer: &ComputerRef, _user: BotUser, _after: u64) -> Result<NetRefusals> {
        unsupported(self.kind(), "network_refusals")
    }
    /// Watches the browser of display `slot` for what `policy` asks the person about (None: no
    /// more, refusing what waits); returns what waits for the person's answer now. The browser
    /// holds each such request until [`ComputerProvider::answer_browser`].
    async fn watch_browser(&self, _computer: &ComputerRef, _slot: u32, _policy: Option<&crate::Approvals>) -> Result<Vec<crate::PendingApproval>> {
        unsupported(self.kind(), "watch_browser")
    }
    /// Lets what waits by number `id` go on, or refuses it; false when nothing waits so.
    async fn answer_browser(&self, _computer: &ComputerRef, _slot: u32, _id: u64, _allow: bool) -> Result<bool> {
        unsupported(self.kind(), "answer_browser")
    }

    /// An interactive shell on a terminal (PTY) as the workspace user, `cols`×`rows`, in `cwd`.
    /// Dropping the session's `input` ends the shell and kills every process it started.
    async fn open_shell(&self, _computer: &ComputerRef, _cwd: &WorkspacePath, _cols: u16, _rows: u16, _ctx: &CallCtx) -> Result<ShellSession> {
        unsupported(self.kind(), "open_shell")
    }
    /// Tells a shell's terminal its new size.
    /// Starts a long-lived command whose stdin and stdout are pipes (an MCP server on stdio), as
    /// the bot, in `req.cwd`, tagged like every command of `ctx` (`req.timeout` and `req.stdin`
    /// are not used). It ends, with everything it started, when its session's `input` is dropped.
    async fn open_pipe(&self, _computer: &ComputerRef, _req: ExecRequest, _ctx: &CallCtx) -> Result<PipeSession> {
        unsupported(self.kind(), "open_pipe")
    }
    async fn resize_shell(&self, _computer: &ComputerRef, _id: &str, _cols: u16, _rows: u16) -> Result<()> {
        unsupported(self.kind(), "resize_shell")
    }

    // 3. Exec
    /// Runs `req.argv`, streaming output to `out`. Timeout → exit 124 with everything it started
    /// killed; `ctx.cancel` → exit 130 (the same). A command's own exit 124 stays `ExecOutcome::Exited`.
    async fn exec(&self, computer: &ComputerRef, req: ExecRequest, out: OutputSink, ctx: &CallCtx) -> Result<ExecExit>;
    /// Stops every process of the commands and shells tagged `key=value`, including what they
    /// started that left their session and environment (a run's tag: a stopped run, or one whose
    /// driver died; a control's tag: the person's shells of a control that ended; a bot's tag: a
    /// bot removed from a Team computer). A computer that is not running has none.
    async fn kill_tagged(&self, _computer: &ComputerRef, _user: BotUser, _key: &str, _value: &str) -> Result<()> {
        Ok(())
    }

    // 4. Files
    /// One directory level; entries carry full workspace paths.
    async fn list(&self, computer: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<Vec<FileEntry>>;
    /// Creates a directory and its parents; an existing directory is fine.
    async fn create_dir(&self, computer: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<()>;
    /// Whole file or an error: over `max_bytes` nothing is returned.
    async fn read(&self, computer: &ComputerRef, path: &WorkspacePath, max_bytes: u64, ctx: &CallCtx) -> Result<Bytes>;
    /// Creates parents; replaces atomically.
    async fn write(&self, computer: &ComputerRef, path: &WorkspacePath, data: Bytes, executable: bool, ctx: &CallCtx) -> Result<()>;

    // 5. The home as a stream (see [`crate::home_stream`]): checkpoints, restores and switches.
    /// Streams the whole home out: `manifest` is the save's options line and the previous
    /// version's index, read by the computer while it walks (so it goes in while the records come
    /// out); the records come on [`HomeOut::records`].
    async fn save_home(&self, _computer: &ComputerRef, _manifest: HomeIn, _ctx: &CallCtx) -> Result<HomeOut> {
        unsupported(self.kind(), "save_home")
    }
    /// Streams records into the home; nothing changes unless `records` ends with its `end`.
    /// What it writes is owned as [`ComputerProvider::set_owners`] says, which the caller runs next.
    async fn load_home(&self, _computer: &ComputerRef, _mode: &LoadMode, _records: HomeIn, _ctx: &CallCtx) -> Result<LoadSummary> {
        unsupported(self.kind(), "load_home")
    }
    /// Gives the home its owners by path. On a Team computer: each bot's folder `bots/<id>` (mode
    /// 0700 at its top) and its browser profile to its uid, `shared/` (setgid, mode 2770) to the
    /// bots' group, everything else to [`BotUser::PRIVATE`]; on a Private one, everything to
    /// [`BotUser::PRIVATE`]. Folders missing are made; links are never followed.
    async fn set_owners(&self, _computer: &ComputerRef, _owners: &HomeOwners, _ctx: &CallCtx) -> Result<()> {
        Ok(())
    }
}

/// What a screen recording is: a key (letters, digits, `-`, `_`, at most 64), the frames a second
/// (1 to 30) and the most bytes its file may take (at least 64 KiB; the recorder ends there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingSpec {
    pub key: String,
    pub fps: u32,
    pub max_bytes: u64,
}

impl RecordingSpec {
    /// A recording's key is plain: letters, digits, `-` and `_`, 1 to 64 of them (a run's id is;
    /// it names files in the computer and in the data directory).
    pub fn plain_key(key: &str) -> bool {
        !key.is_empty() && key.len() <= 64 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    pub fn validate(&self) -> Result<()> {
        if !Self::plain_key(&self.key) || !(1..=30).contains(&self.fps) || self.max_bytes < 64 * 1024 {
            return Err(ComputerError::Invalid(format!("a recording needs a plain key, 1 to 30 frames a second and at least 64 KiB: {self:?}")));
        }
        Ok(())
    }
}

/// A recording leaving the computer: when it started (ms since the epoch, the computer's clock),
/// its size, and its bytes (H.264 in Matroska).
pub struct TakenRecording {
    pub started_ms: i64,
    pub bytes: u64,
    pub data: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
}

/// Records coming into a computer.
pub type HomeIn = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// A home leaving a computer: its records, and how the sending ended (awaited after the records
/// reached their end; an error there means the stream is not to be trusted; a process the bot
/// stopped never ends, so the caller bounds the wait).
pub struct HomeOut {
    pub records: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    pub finished: futures::future::BoxFuture<'static, Result<()>>,
}

/// An interactive shell: what it prints (terminal bytes) and what is typed into it. Dropping
/// `input` ends the shell; `output` closes when it has ended.
pub struct ShellSession {
    pub id: String,
    pub output: tokio::sync::mpsc::Receiver<Bytes>,
    pub input: tokio::sync::mpsc::Sender<Bytes>,
}

/// A command on pipes (see [`ComputerProvider::open_pipe`]): its stdout and stderr as they come
/// (closed once it ended), and its stdin. Dropping `input` ends it and everything it started.
pub struct PipeSession {
    pub output: tokio::sync::mpsc::Receiver<ExecOutput>,
    pub input: tokio::sync::mpsc::Sender<Bytes>,
}

/// Runs a command and collects its output (for callers that do not stream).
pub async fn exec_collect(provider: &dyn ComputerProvider, computer: &ComputerRef, req: ExecRequest, ctx: &CallCtx) -> Result<(ExecExit, Vec<u8>, Vec<u8>)> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exit = provider.exec(computer, req, Some(tx), ctx).await?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Ok(chunk) = rx.try_recv() {
        match chunk.stream {
            StreamKind::Stdout => out.extend_from_slice(&chunk.data),
            StreamKind::Stderr => err.extend_from_slice(&chunk.data),
        }
    }
    Ok((exit, out, err))
}

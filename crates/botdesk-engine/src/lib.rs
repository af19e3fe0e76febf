//! The API boundary: a cloneable [`Engine`] handle composing the store and a sandbox provider. The
//! CLI and the app are two front ends of this one engine; it does not know either exists.

mod checkpoint;
mod clipboard;
mod computer;
mod desktop;
mod doctor;
pub mod dto;
mod error;
mod home_store;
mod leases;
mod models;
mod paths;
mod runs;
mod settings;
mod stored;
mod switch;
mod terminal;

pub use botdesk_core::{action, Budget, ImageFormat, Limits, Observation, Prices, Usage};
pub use botdesk_core::{ComputerScope, ExecExit, ExecOutcome, ExecOutput, FileEntry, FileKind, MachineStatus, StreamKind};
pub use botdesk_core::{ReservationAction, ReservationStage, ReservationStatus, RunStatus, TakeoverResult};
pub use botdesk_docker::image::BuildProgress;
pub use botdesk_store::{ActivityRow, ControlLease, ExecLease, Reservation, Run};
pub use checkpoint::CheckpointReport;
pub use clipboard::MAX_CLIPBOARD;
pub use desktop::{new_token, snapshot_text, BrowserGo, BrowserTab, BrowserView, ControlView, DesktopView, PageElement, PageSnapshot, ScreenTarget};
pub use doctor::{Check, DoctorReport};
pub use error::{EngineError, ErrorCode, Result};
pub use home_store::Skipped;
pub use leases::{boot_id, IdleOutcome, Policy, ReleaseOutcome, ReleaseProof, MAX_NOTE, MIN_IDLE_SUSPEND_MS, PAUSE_WAIT};
pub use models::{ModelView, NewModel};
pub use paths::DataDir;
pub use runs::{ChatCall, ChatItem, RunEvent, MAX_STEPS};
pub use settings::Settings;
pub use switch::SwitchReport;
pub use terminal::Terminal;

use botdesk_core::*;
use botdesk_docker::{DockerConfig, DockerProvider};
use botdesk_store::{NewBot, Store};
use bytes::Bytes;
use checkpoint::Before;
use serde::Serialize;
use std::{collections::HashSet, path::PathBuf, sync::Arc, time::Duration};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// Time is an input: tests pass their own clock.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

pub struct SystemClock;
impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

pub enum ProviderChoice {
    /// The local Docker engine (`DOCKER_HOST` respected).
    Docker,
    /// Any other provider (tests use the fake).
    Custom(Arc<dyn SandboxProvider>),
}

pub struct EngineConfig {
    pub data_dir: PathBuf,
    pub provider: ProviderChoice,
    pub clock: Arc<dyn Clock>,
    pub resources: Resources,
    pub policy: Policy,
    /// Hard cap on concurrent desktops per computer (`SANDBOX_TEAM_SCREEN_LIMIT`); none by default.
    pub screen_limit: Option<u32>,
    /// Where model keys are kept.
    pub secrets: Secrets,
}

/// Where model keys are kept.
#[derive(Clone)]
pub enum Secrets {
    /// The OS keyring (Secret Service on Linux): the app and the CLI.
    Keyring,
    /// In this process's memory, gone with it: tests that need no keyring daemon.
    Memory(Arc<keyring_core::CredentialStore>),
}

impl Secrets {
    /// A new, empty in-memory store.
    pub fn memory() -> Self {
        Secrets::Memory(keyring_core::mock::Store::new().expect("an in-memory store"))
    }
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>, provider: ProviderChoice) -> Self {
        Self {
            data_dir: data_dir.into(),
            provider,
            clock: Arc::new(SystemClock),
            resources: Resources::default(),
            policy: Policy::default(),
            screen_limit: std::env::var("SANDBOX_TEAM_SCREEN_LIMIT").ok().and_then(|v| v.trim().parse().ok()),
            secrets: Secrets::Keyring,
        }
    }
}

/// The system clock shifted by `BOTDESK_CLOCK_OFFSET_MS` (a test input: a second process can
/// live "later" to see leases expire without waiting).
pub struct OffsetClock(pub i64);
impl OffsetClock {
    pub fn from_env() -> Self {
        Self(std::env::var("BOTDESK_CLOCK_OFFSET_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
    }
}
impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.0
    }
}

/// A bot's state as the sidebar shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum BotStatus {
    Idle,
    Running,
    /// The person asked the run to pause; it finishes its current step first.
    Pausing,
    WaitingForYou,
    YouHaveControl,
    Error,
}

/// Whether a bot's run waits for the person, and why: shown beside "You have control", where
/// Release resumes it (and a note reaches it) and Stop ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum RunHold {
    /// No active run.
    None,
    /// A run is working (or queued).
    Working,
    /// The run asked for the person (`request_takeover`).
    AskedForYou,
    /// The person paused the run to take the screen.
    PausedForYou,
}

/// A bot's state as front ends show it: its status and what its run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct BotState {
    pub status: BotStatus,
    pub run: RunHold,
}

/// What a front end shows for a bot.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct BotView {
    pub id: String,
    pub name: String,
    pub computer: ComputerBrief,
    pub model: Option<String>,
    pub instructions: String,
    /// The bot's own folder in the workspace (`bots/<id>` on a Team computer, `.` on a Private one).
    pub folder: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ComputerBrief {
    pub id: String,
    pub name: String,
    pub scope: ComputerScope,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComputerView {
    pub id: String,
    pub name: String,
    pub scope: ComputerScope,
    /// What the provider reports now (`running`, `stopped`, `missing`), or the stored state when
    /// the provider cannot be reached.
    pub status: MachineStatus,
    /// The lifecycle state recorded in the database (stopped, booting, running, suspending,
    /// suspended, error).
    pub state: ComputerState,
    pub bots: Vec<String>,
    /// The home store: the workspace's checkpoints (`current` is the latest).
    pub home: PathBuf,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconcileReport {
    /// Containers matched to a computer in the database.
    pub adopted: Vec<String>,
    /// Containers of this data directory with no computer in the database, removed.
    pub removed: Vec<String>,
    /// Home volumes of this data directory that are no computer's home (left by an interrupted
    /// destroy or start), removed.
    pub volumes_removed: Vec<String>,
    /// Networks of this data directory whose computer is gone, removed.
    pub networks_removed: Vec<String>,
}

#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

/// A person's open shell: its bot, its computer and its input.
pub(crate) type OpenShell = (BotId, ComputerId, tokio::sync::mpsc::Sender<bytes::Bytes>);

pub(crate) struct Inner {
    data: DataDir,
    store: Store,
    provider: Arc<dyn SandboxProvider>,
    docker: Option<Arc<DockerProvider>>,
    clock: Arc<dyn Clock>,
    policy: Policy,
    secrets: Secrets,
    /// Resources and screen limit in force (settings file, then the environment).
    limits: std::sync::RwLock<(Resources, Option<u32>)>,
    /// `SANDBOX_TEAM_SCREEN_LIMIT` from the config, which wins over the settings file.
    screen_limit_override: Option<u32>,
    /// Last frame id each bot observed (an unchanged screen returns no image).
    frames: Mutex<std::collections::HashMap<BotId, String>>,
    /// Per computer: its boot lock, its home's lock, whether this process made it ready, its
    /// desktops brought up here (see [`computer::ComputerHandle`]).
    computers: computer::Computers,
    /// What happens in this process's runs.
    run_events: tokio::sync::broadcast::Sender<runs::RunEvent>,
    /// Runs of this process, to cancel them at once on Stop.
    local_runs: std::sync::Mutex<std::collections::HashMap<String, CancellationToken>>,
    /// Work that goes on after a call returned (removing replaced checkpoint versions);
    /// [`Engine::settle`] waits for it.
    background: tokio_util::task::TaskTracker,
    /// The person's open shells. Dropping a shell's input ends it.
    terminals: std::sync::Mutex<std::collections::HashMap<String, OpenShell>>,
}

const MAX_BOT_NAME: usize = 64;

fn check_bot_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.');
    if name.is_empty() || name.chars().count() > MAX_BOT_NAME || !name.chars().all(ok_char) || name.starts_with([' ', '.', '-']) || name.ends_with(' ') {
        return Err(EngineError::invalid(format!(
            "{name:?} is not a valid bot name: use 1 to {MAX_BOT_NAME} letters, digits, spaces, '-', '_' or '.', starting with a letter or digit"
        )));
    }
    Ok(())
}

impl Engine {
    /// Opens the data directory and the database. Docker is not contacted here: a stopped engine
    /// shows up as a clear error from the first call that needs it.
    pub async fn open(config: EngineConfig) -> Result<Self> {
        let data = DataDir::open(config.data_dir)?;
        let store = Store::open(&data.db()).await.map_err(|e| EngineError::from(e).context(format!("opening {}", data.db().display())))?;
        let (provider, docker): (Arc<dyn SandboxProvider>, _) = match config.provider {
            ProviderChoice::Docker => {
                let d = Arc::new(DockerProvider::new(DockerConfig::new(botdesk_docker::image::image_tag(), data.label())));
                (d.clone(), Some(d))
            }
            ProviderChoice::Custom(p) => (p, None),
        };
        config.policy.validate()?;
        let settings = Settings::load(&data.settings())?;
        let mut resources = config.resources;
        if data.settings().exists() {
            settings.apply(&mut resources);
        }
        let engine = Self {
            inner: Arc::new(Inner {
                data,
                store,
                provider,
                docker,
                clock: config.clock,
                limits: std::sync::RwLock::new((resources, config.screen_limit.or(settings.screen_limit))),
                screen_limit_override: config.screen_limit,
                policy: config.policy,
                secrets: config.secrets,
                frames: Mutex::new(Default::default()),
                computers: Default::default(),
                run_events: tokio::sync::broadcast::channel(4096).0,
                local_runs: Default::default(),
                background: Default::default(),
                terminals: Default::default(),
            }),
        };
        // Runs whose process died (the app or CLI was killed) end now, with the reason.
        engine.recover_runs().await.map_err(|e| e.context("recovering interrupted runs"))?;
        // Control that lapsed while no process watched ends now, with its shells' processes.
        if let Err(e) = engine.end_lapsed_control().await {
            tracing::warn!("ending lapsed control: {e}");
        }
        Ok(engine)
    }

    /// Waits for the work this engine left going after calls returned (a process about to exit
    /// calls it; what it leaves undone is finished by a later checkpoint of the same home).
    pub async fn settle(&self) {
        self.inner.background.close();
        self.inner.background.wait().await;
        self.inner.background.reopen();
    }

    /// The settings shared with every process on this data directory.
    pub fn settings(&self) -> Result<Settings> {
        Settings::load(&self.inner.data.settings())
    }

    /// Saves the settings; the screen limit applies at once, resources to computers started later.
    pub fn save_settings(&self, s: &Settings) -> Result<Settings> {
        s.save(&self.inner.data.settings())?;
        let mut limits = self.inner.limits.write().unwrap();
        s.apply(&mut limits.0);
        limits.1 = self.inner.screen_limit_override.or(s.screen_limit);
        Ok(s.clone())
    }

    pub(crate) fn screen_limit(&self) -> Option<u32> {
        self.inner.limits.read().unwrap().1
    }

    pub fn data_dir(&self) -> &DataDir {
        &self.inner.data
    }

    pub fn provider_kind(&self) -> &'static str {
        self.inner.provider.kind()
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    fn docker(&self) -> Result<&Arc<DockerProvider>> {
        self.inner.docker.as_ref().ok_or_else(|| EngineError::invalid("this engine does not use Docker"))
    }

    // --------------------------------------------------------------------------------------------
    // Image

    pub fn image_tag(&self) -> String {
        botdesk_docker::image::image_tag()
    }

    pub async fn image_present(&self) -> Result<bool> {
        Ok(self.docker()?.image_present(&self.image_tag()).await?)
    }

    /// Builds the computer image (base from `BOTDESK_BASE_IMAGE` if set), reporting real stages;
    /// `refresh` rebuilds every layer with current packages (a newer Chromium), as `doctor`
    /// advises once the image is 30 days old.
    pub async fn build_image(&self, refresh: bool, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String> {
        let opts = botdesk_docker::image::BuildOptions {
            base: std::env::var("BOTDESK_BASE_IMAGE").ok().filter(|b| !b.is_empty()),
            cache_dir: self.inner.data.cache(),
            refresh,
            stamp: botdesk_docker::image::stamp_of(self.now()),
        };
        self.docker()?.build_image(&opts, progress).await.map_err(|e| EngineError::from(e).context("building the computer image"))
    }

    // --------------------------------------------------------------------------------------------
    // Bots

    pub async fn create_bot(&self, name: &str, scope: ComputerScope, model: Option<&str>, instructions: &str) -> Result<BotView> {
        check_bot_name(name)?;
        if let Some(m) = model {
            self.inner.store.model(m).await?; // a bot names a model that exists
        }
        let new = NewBot { name, scope, model, instructions, provider: self.inner.provider.kind() };
        let (bot, computer) = self.inner.store.create_bot(new, self.now()).await?;
        // A Team computer that is already up gets the new bot's folder now (whichever process
        // started it); otherwise on its next start.
        // (A start under way makes it after recording `running`: see `bring_up`.)
        if computer.scope == ComputerScope::Team && self.stored_state(&computer.id).await? == ComputerState::Running {
            let cref = ComputerRef { id: computer.id.clone() };
            if let Err(e) = self.inner.provider.create_dir(&cref, &path::bot_folder(&bot.id), &CallCtx::default()).await {
                // Recorded as not running, the next use of the computer prepares it again (and
                // makes the folder); the container itself is left as it is.
                tracing::info!(bot = %bot.id, "the new bot's folder waits for the computer's next preparation: {e}");
                self.forget_ready(&computer.id).await;
                let _ = self.swap(&computer.id, ComputerState::Running, ComputerState::Stopped, self.now()).await;
            }
        }
        Ok(view(bot, &computer))
    }

    /// What the sidebar shows for each bot, computed from the shared database (so a run or a
    /// takeover started by another process shows up too).
    pub async fn bot_statuses(&self) -> Result<Vec<(String, BotState)>> {
        let now = self.now();
        let computers = self.inner.store.list_computers().await?;
        let mut out = vec![];
        for b in self.inner.store.list_bots().await? {
            let runs = self.inner.store.active_runs(&b.id).await?;
            let control = self.inner.store.control(&b.computer_id, now).await?.filter(|c| c.bot_id == b.id);
            let broken = computers.iter().any(|c| c.id == b.computer_id && c.state == ComputerState::Error);
            let status = if control.is_some() {
                BotStatus::YouHaveControl
            } else if runs.iter().any(|r| r.status == RunStatus::WaitingTakeover) {
                BotStatus::WaitingForYou
            } else if runs.iter().any(|r| r.pause_requested_at.is_some()) {
                BotStatus::Pausing
            } else if !runs.is_empty() {
                BotStatus::Running
            } else if broken {
                BotStatus::Error
            } else {
                BotStatus::Idle
            };
            let waiting = runs.iter().find(|r| r.status == RunStatus::WaitingTakeover);
            let run = match (waiting, runs.is_empty()) {
                (Some(r), _) if r.pause_requested_at.is_some() => RunHold::PausedForYou,
                (Some(_), _) => RunHold::AskedForYou,
                (None, true) => RunHold::None,
                (None, false) => RunHold::Working,
            };
            out.push((b.id.to_string(), BotState { status, run }));
        }
        Ok(out)
    }

    /// Every bot with its state, as the app's sidebar lists them.
    pub async fn bot_rows(&self) -> Result<Vec<dto::BotRow>> {
        let mut states: std::collections::HashMap<_, _> = self.bot_statuses().await?.into_iter().collect();
        let idle = BotState { status: BotStatus::Idle, run: RunHold::None };
        Ok(self.list_bots().await?.into_iter().map(|bot| dto::BotRow { state: states.remove(&bot.id).unwrap_or(idle), bot }).collect())
    }

    pub async fn list_bots(&self) -> Result<Vec<BotView>> {
        let computers = self.inner.store.list_computers().await?;
        let bots = self.inner.store.list_bots().await?;
        Ok(bots
            .into_iter()
            .filter_map(|b| {
                let c = computers.iter().find(|c| c.id == b.computer_id)?;
                Some(view(b, c))
            })
            .collect())
    }

    pub async fn bot(&self, name_or_id: &str) -> Result<BotView> {
        let (bot, computer) = self.bot_and_computer(name_or_id).await?;
        Ok(view(bot, &computer))
    }

    /// Removes a bot. Its Private computer goes with it, also one kept from a switch to Team (its
    /// container is destroyed; its workspace stays on disk). On a Team computer the bot's folder
    /// stays too.
    pub async fn remove_bot(&self, name_or_id: &str) -> Result<BotView> {
        let (bot, computer) = self.bot_and_computer(name_or_id).await?;
        let shown = view(bot.clone(), &computer);
        if let Some(c) = self.inner.store.private_computer_of(&bot.id).await? {
            self.inner
                .provider
                .destroy(&ComputerRef { id: c.id.clone() }, &CallCtx::default())
                .await
                .map_err(|e| EngineError::from(e).context(format!("removing the computer of bot {}", bot.name)))?;
        }
        self.inner.store.delete_bot(&bot.id).await?;
        Ok(shown)
    }

    pub(crate) async fn bot_and_computer(&self, name_or_id: &str) -> Result<(botdesk_store::Bot, botdesk_store::Computer)> {
        let bot = self.inner.store.bot(name_or_id).await?;
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await?;
        Ok((bot, computer))
    }

    // --------------------------------------------------------------------------------------------
    // Computers

    fn spec(&self, c: &botdesk_store::Computer, home_volume: String) -> ComputerSpec {
        ComputerSpec { id: c.id.clone(), name: c.name.clone(), scope: c.scope, home_volume, resources: self.inner.limits.read().unwrap().0 }
    }

    /// A new home volume's name: this data directory's label, the computer and a random part, so
    /// a volume whose deletion started is never taken for its successor.
    fn new_home_volume(&self, c: &botdesk_store::Computer) -> String {
        format!("botdesk-{}-{}-{}", &self.inner.data.label()[..8], c.id, &uuid::Uuid::new_v4().simple().to_string()[..8])
    }

    pub async fn list_computers(&self) -> Result<Vec<ComputerView>> {
        let mut out = vec![];
        for c in self.inner.store.list_computers().await? {
            out.push(self.computer_view(c).await?);
        }
        Ok(out)
    }

    /// Provisions (or reconnects) and prepares a bot's computer, creating the Team folders.
    pub(crate) async fn ensure_running(&self, computer: &botdesk_store::Computer) -> Result<ComputerRef> {
        Ok(self.bring_up(computer).await?.0)
    }

    /// This process's handle on a computer (its boot lock, readiness and desktops).
    pub(crate) fn handle(&self, id: &ComputerId) -> Arc<computer::ComputerHandle> {
        self.inner.computers.get(id)
    }

    /// Forgets that this process made the computer ready, so its next use prepares it again; waits
    /// for a boot of it under way here to finish first.
    pub(crate) async fn forget_ready(&self, id: &ComputerId) {
        let handle = self.handle(id);
        let _booting = handle.boot.lock().await;
        handle.set_ready(false);
    }

    /// [`Engine::ensure_running`], saying whether the computer was up already (made ready
    /// earlier, by this process or another) or was started now.
    pub(crate) async fn bring_up(&self, computer: &botdesk_store::Computer) -> Result<(ComputerRef, Up)> {
        let cref = ComputerRef { id: computer.id.clone() };
        self.inner.store.touch(&computer.id, self.now()).await?;
        let handle = self.handle(&computer.id);
        let _booting = handle.boot.lock().await;
        if handle.is_ready() && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            return Ok((cref, Up::Already));
        }
        let ctx = CallCtx::default();
        let starting = |e: SandboxError| EngineError::from(e).context(format!("starting computer {}", computer.name));
        let mut state = self.stored_state(&computer.id).await?;
        // Recorded running (only a finished start records it) and running: another process, or
        // this one before, made it ready, and nothing of that is undone while it runs (a bot
        // created since got its folder then). A CLI call does only its own work.
        if state == ComputerState::Running && computer.home_volume.is_some() && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            handle.set_ready(true);
            return Ok((cref, Up::Already));
        }
        // The row walks stopped|suspended|error → booting → running by compare-and-swap. Losing a
        // swap means another process (the app beside the CLI) is booting it: provisioning is
        // idempotent, so both go on and one of them records `running`.
        let now = self.now();
        if state == ComputerState::Suspending {
            return Err(EngineError::new(ErrorCode::Busy, format!("computer {} is being suspended; try again in a moment", computer.name)));
        }
        if state == ComputerState::Running && self.inner.provider.status(&cref).await? != MachineStatus::Running {
            self.swap(&computer.id, ComputerState::Running, ComputerState::Stopped, now).await?;
            state = ComputerState::Stopped;
        }
        if state != ComputerState::Running && state != ComputerState::Booting {
            self.swap(&computer.id, state, ComputerState::Booting, now).await?;
        }
        // A computer without a whole home volume (new, destroyed, or one whose deletion started)
        // gets a new one, restored from the latest checkpoint before anything runs there.
        let computer = &self.inner.store.computer(computer.id.as_str()).await?;
        let (volume, new_home) = match &computer.home_volume {
            Some(v) => (v.clone(), false),
            None => (self.new_home_volume(computer), true),
        };
        let provisioned = async {
            let p = self.inner.provider.provision(&self.spec(computer, volume.clone()), &ctx).await?;
            self.inner.provider.prepare(&cref, &ctx).await?;
            if new_home {
                if let Some(r) = self.restore_into(computer, &cref).await.map_err(|e| SandboxError::Provider(format!("restoring its workspace: {e}")))? {
                    tracing::info!(computer = %computer.id, version = r.version, files = r.files, ms = r.millis, "workspace restored");
                }
                self.inner.store.set_home_volume(&computer.id, Some(&volume), self.now()).await.map_err(|e| SandboxError::Provider(e.to_string()))?;
            }
            let mut folders = HashSet::new();
            if computer.scope == ComputerScope::Team {
                self.inner.provider.create_dir(&cref, &WorkspacePath::parse("shared")?, &ctx).await?;
                folders = self.make_bot_folders(computer, &cref, &folders).await.map_err(|e| SandboxError::Provider(e.to_string()))?;
            }
            Ok::<_, SandboxError>((p, folders))
        }
        .await;
        let (p, folders) = match provisioned {
            Ok(p) => p,
            Err(e) => {
                self.swap(&computer.id, ComputerState::Booting, ComputerState::Error, self.now()).await?;
                return Err(starting(e));
            }
        };
        self.swap(&computer.id, ComputerState::Booting, ComputerState::Running, self.now()).await?;
        self.inner.store.set_computer_state(&computer.id, ComputerState::Running, Some(&p.provider_ref), self.now()).await?;
        // A bot created while this start ran saw the computer not yet running, so left its folder
        // to the start: made now (it was created before this read, which follows `running`).
        if computer.scope == ComputerScope::Team {
            self.make_bot_folders(computer, &cref, &folders).await?;
        }
        handle.forget_displays();
        handle.set_ready(true);
        Ok((cref, Up::Started))
    }

    /// Makes the folders of the computer's bots not in `done`; returns the bots it now has.
    async fn make_bot_folders(&self, computer: &botdesk_store::Computer, cref: &ComputerRef, done: &HashSet<BotId>) -> Result<HashSet<BotId>> {
        let bots = self.inner.store.bots_on(&computer.id).await?;
        for bot in bots.iter().filter(|b| !done.contains(&b.id)) {
            // A bot that replaced its own folder (with a link, say) breaks only its own work.
            if let Err(e) = self.inner.provider.create_dir(cref, &path::bot_folder(&bot.id), &CallCtx::default()).await {
                tracing::warn!(bot = %bot.id, "the bot's folder could not be made: {e}");
            }
        }
        Ok(bots.into_iter().map(|b| b.id).collect())
    }

    async fn stored_state(&self, id: &ComputerId) -> Result<ComputerState> {
        Ok(self.inner.store.computer(id.as_str()).await?.state)
    }

    /// A compare-and-swap of the computer's state; losing it to another process is fine.
    async fn swap(&self, id: &ComputerId, from: ComputerState, to: ComputerState, now: i64) -> Result<()> {
        match self.inner.store.transition_computer(id, from, to, now).await {
            Ok(()) | Err(botdesk_store::StoreError::Stale(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops a computer and keeps its disk. Refused while bots hold live execution leases on it
    /// ("Other bots are still using this computer") or while it is reserved.
    pub async fn stop_computer(&self, id_or_name: &str) -> Result<ComputerView> {
        let c = self.inner.store.computer(id_or_name).await?;
        // Never stop a computer whose checkpoint failed: it keeps running and the error is returned.
        self.checkpoint_before(&c, Before::Stop).await?;
        let res = self.inner.store.reserve(&c.id, ReservationAction::Stop, std::process::id() as i64, &leases::boot_id(), self.now()).await?;
        self.forget_ready(&c.id).await;
        self.inner.store.set_reservation_stage(&res.id, ReservationStage::Stopping, self.now()).await?;
        let stopped = self.inner.provider.stop(&ComputerRef { id: c.id.clone() }, &CallCtx::default()).await;
        let ok = stopped.is_ok();
        let err = stopped.as_ref().err().map(|e| e.to_string());
        self.inner
            .store
            .finish_reservation(&res.id, if ok { ReservationStatus::Completed } else { ReservationStatus::Failed }, err.as_deref(), self.now())
            .await?;
        stopped.map_err(|e| EngineError::from(e).context(format!("stopping computer {}", c.name)))?;
        self.inner.store.clear_desktops(&c.id).await?;
        match self.stored_state(&c.id).await? {
            ComputerState::Running => self.swap(&c.id, ComputerState::Running, ComputerState::Stopped, self.now()).await?,
            ComputerState::Booting => self.swap(&c.id, ComputerState::Booting, ComputerState::Stopped, self.now()).await?,
            _ => {}
        }
        self.computer_view(c).await
    }

    /// Removes the machine and its home volume, after a checkpoint (refused when the checkpoint
    /// fails). Fenced like stop: it takes the computer's reservation, so it is refused while a bot
    /// holds a lease there. The home store keeps the workspace: the next use restores it.
    pub async fn destroy_computer(&self, id_or_name: &str) -> Result<ComputerView> {
        let c = self.inner.store.computer(id_or_name).await?;
        let res = self.inner.store.reserve(&c.id, ReservationAction::Stop, std::process::id() as i64, &leases::boot_id(), self.now()).await?;
        let destroyed = async {
            self.inner.store.set_reservation_stage(&res.id, ReservationStage::Checkpointing, self.now()).await?;
            self.checkpoint_before(&c, Before::Destroy).await?;
            self.forget_ready(&c.id).await;
            // The fence: from here on the old volume is never used or checkpointed again, even if
            // its deletion is interrupted (the next start makes a new one from the checkpoint).
            self.inner.store.set_home_volume(&c.id, None, self.now()).await?;
            self.inner.store.set_reservation_stage(&res.id, ReservationStage::Stopping, self.now()).await?;
            self.inner
                .provider
                .destroy(&ComputerRef { id: c.id.clone() }, &CallCtx::default())
                .await
                .map_err(|e| EngineError::from(e).context(format!("destroying computer {}", c.name)))
        }
        .await;
        let status = if destroyed.is_ok() { ReservationStatus::Completed } else { ReservationStatus::Failed };
        let msg = destroyed.as_ref().err().map(|e| e.message.clone());
        self.inner.store.finish_reservation(&res.id, status, msg.as_deref(), self.now()).await?;
        destroyed?;
        self.inner.store.clear_desktops(&c.id).await?;
        self.inner.store.set_computer_state(&c.id, ComputerState::Stopped, None, self.now()).await?;
        self.computer_view(c).await
    }

    /// A checkpoint before stopping, suspending or destroying a computer that has a home. A
    /// stopped computer's home is saved only before it is destroyed (it is started for that: a
    /// computer that stopped by itself may hold work its last checkpoint has not).
    pub(crate) async fn checkpoint_before(&self, c: &botdesk_store::Computer, doing: Before) -> Result<()> {
        let c = self.inner.store.computer(c.id.as_str()).await?;
        if c.home_volume.is_none() {
            return Ok(());
        }
        let running = self.inner.provider.status(&ComputerRef { id: c.id.clone() }).await? == MachineStatus::Running;
        if !running {
            if doing != Before::Destroy {
                return Ok(());
            }
            self.ensure_running(&c).await?;
        }
        self.checkpoint(c.id.as_str())
            .await
            .map(drop)
            .map_err(|e| e.context(format!("not {} computer {}: its workspace could not be saved first", doing.doing(), c.name)))
    }

    async fn computer_view(&self, c: botdesk_store::Computer) -> Result<ComputerView> {
        let status = self.inner.provider.status(&ComputerRef { id: c.id.clone() }).await?;
        let bots = self.inner.store.bots_on(&c.id).await?.into_iter().map(|b| b.name).collect();
        let state = self.inner.store.computer(c.id.as_str()).await?.state;
        Ok(ComputerView { home: self.inner.data.home(&c.home_key), id: c.id.to_string(), name: c.name, scope: c.scope, status, state, bots })
    }

    /// After a crash: every container labelled with this data directory is adopted when the
    /// database knows its computer, and removed when it does not (it can only be left over from a
    /// computer whose row is gone, e.g. a bot removed while Docker was down). Containers of other
    /// data directories are never touched.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        let docker = match &self.inner.docker {
            Some(d) => d,
            None => return Ok(ReconcileReport::default()),
        };
        let computers = self.inner.store.list_computers().await?;
        let known: HashSet<String> = computers.iter().map(|c| c.id.to_string()).collect();
        let homes: HashSet<String> = computers.into_iter().filter_map(|c| c.home_volume).collect();
        let mut report = ReconcileReport::default();
        for found in docker.list_managed().await? {
            if known.contains(&found.computer) {
                let state = if found.running { ComputerState::Running } else { ComputerState::Stopped };
                self.inner.store.set_computer_state(&ComputerId::new(&found.computer), state, Some(&found.id), self.now()).await?;
                report.adopted.push(found.computer);
            } else {
                docker.remove_container(&found.id).await?;
                report.removed.push(found.computer);
            }
        }
        // A volume in use (a computer starting in another process) is left for the next time.
        report.volumes_removed = docker.remove_volumes_except(&homes).await?;
        report.networks_removed = docker.remove_networks(None, &known).await?;
        Ok(report)
    }

    // --------------------------------------------------------------------------------------------
    // Exec and files, with paths resolved the way the bot's own tools resolve them

    fn resolve(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, input: &str) -> Result<WorkspacePath> {
        Ok(resolve_for_bot(computer.scope, &bot.id, input)?)
    }

    /// Runs `sh -c COMMAND` in the bot's folder and returns its exit code and its output
    /// (stdout and stderr in arrival order, lossily decoded).
    pub async fn shell(&self, bot: &str, command: &str) -> Result<(i32, String)> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let exit = self.exec(bot, vec!["sh".into(), "-c".into(), command.into()], None, None, Some(tx), CancellationToken::new()).await?;
        let mut out = Vec::new();
        while let Ok(o) = rx.try_recv() {
            out.extend_from_slice(&o.data);
        }
        Ok((exit.code, String::from_utf8_lossy(&out).into_owned()))
    }

    /// Runs a command on the bot's computer. `cwd` is relative to the bot's folder.
    pub async fn exec(
        &self,
        bot: &str,
        argv: Vec<String>,
        cwd: Option<&str>,
        timeout: Option<Duration>,
        out: OutputSink,
        cancel: CancellationToken,
    ) -> Result<ExecExit> {
        self.exec_for(bot, None, argv, cwd, timeout, out, cancel).await
    }

    /// [`Engine::exec`] for a run: the command's processes carry the run's tag, so they are
    /// stopped if the run's driver dies.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exec_for(
        &self,
        bot: &str,
        run: Option<&str>,
        argv: Vec<String>,
        cwd: Option<&str>,
        timeout: Option<Duration>,
        out: OutputSink,
        cancel: CancellationToken,
    ) -> Result<ExecExit> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let cwd = self.resolve(&bot, &computer, cwd.unwrap_or(""))?;
        let cref = self.ensure_running(&computer).await?;
        let mut req = ExecRequest::new(argv).cwd(cwd).env("BOTDESK_BOT_ID", bot.id.as_str());
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let display = self.display_of(&computer.id, &bot.id).await?;
        let ctx = CallCtx { cancel, run: run.map(str::to_string), display, ..CallCtx::for_bot(&bot.id) };
        // A command that runs is activity: idle suspend never stops the computer under it.
        let keep_awake = async {
            let mut beat = tokio::time::interval(Duration::from_millis((self.inner.policy.idle_suspend / 3).max(1_000) as u64));
            beat.tick().await;
            loop {
                beat.tick().await;
                if let Err(e) = self.inner.store.touch(&computer.id, self.now()).await {
                    tracing::warn!("marking computer {} active: {e}", computer.id);
                }
            }
        };
        tokio::select! {
            exit = self.inner.provider.exec(&cref, req, out, &ctx) => Ok(exit?),
            _ = keep_awake => unreachable!("it never ends"),
        }
    }

    pub async fn files_list(&self, bot: &str, path: &str) -> Result<(String, Vec<FileEntry>)> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let dir = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        let mut entries = self.inner.provider.list(&cref, &dir, &CallCtx::for_bot(&bot.id)).await?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((dir.to_string(), entries))
    }

    pub async fn files_read(&self, bot: &str, path: &str, max_bytes: u64) -> Result<Bytes> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let file = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        Ok(self.inner.provider.read(&cref, &file, max_bytes, &CallCtx::for_bot(&bot.id)).await?)
    }

    /// Writes a file (parents created). Returns the workspace path written.
    pub async fn files_write(&self, bot: &str, path: &str, data: Bytes, executable: bool) -> Result<String> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let file = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        self.inner.provider.write(&cref, &file, data, executable, &CallCtx::for_bot(&bot.id)).await?;
        Ok(file.to_string())
    }

    // --------------------------------------------------------------------------------------------

    pub async fn doctor(&self) -> DoctorReport {
        doctor::run(self.inner.docker.as_deref(), &self.inner.data, self.now()).await
    }
}

fn view(bot: botdesk_store::Bot, c: &botdesk_store::Computer) -> BotView {
    let folder = match c.scope {
        ComputerScope::Team => path::bot_folder(&bot.id).to_string(),
        ComputerScope::Private => ".".into(),
    };
    BotView {
        id: bot.id.to_string(),
        name: bot.name,
        computer: ComputerBrief { id: c.id.to_string(), name: c.name.clone(), scope: c.scope },
        model: bot.model,
        instructions: bot.instructions,
        folder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bot_names() {
        for ok in ["alpha", "Research bot 2", "a.b_c-d", "Ünïcode"] {
            check_bot_name(ok).unwrap();
        }
        for bad in ["", " x", "x ", ".hidden", "-x", "a/b", "a\\b", "x\n", &"x".repeat(65)] {
            assert!(check_bot_name(bad).is_err(), "{bad:?}");
        }
    }
}

/// Whether [`Engine::bring_up`] found the computer up or started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Up {
    /// Made ready earlier (by this process or another) and running since: what was set up in it
    /// then (folders, displays) is there.
    Already,
    /// Started (or prepared again) by this call: nothing set up in it before is assumed.
    Started,
}

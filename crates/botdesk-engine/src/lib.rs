//! The API boundary: a cloneable [`Engine`] handle composing the store and a computer provider. The
//! CLI and the app are two front ends of this one engine; it does not know either exists.

mod approvals;
mod bots;
mod calibrate;
mod checkpoint;
mod clipboard;
mod computer;
mod data_dir;
mod desktop;
mod doctor;
pub mod dto;
mod error;
mod export;
mod history;
mod home_store;
mod hosts;
mod keys;
mod leases;
mod logins;
mod mcp_servers;
mod models;
mod network;
mod recording;
mod replay;
mod runs;
mod settings;
mod spare;
mod stored;
mod switch;
mod terminal;
mod versions;
mod workspace;

pub use approvals::APPROVAL_ACTIVITY;
pub use botdesk_core::machine::{BuildProgress, Check, Machine};
pub use botdesk_core::{action, ApprovalKind, Approvals, Budget, ImageFormat, Limits, NetPolicy, NetTarget, Observation, Prices, Usage, Verdict};
pub use botdesk_core::{BotId, ComputerId, ComputerScope, ExecExit, ExecOutcome, ExecOutput, FileEntry, FileKind, MachineStatus, StreamKind};
pub use botdesk_core::{ReservationAction, ReservationStage, ReservationStatus, RunStatus, TakeoverResult};
pub use botdesk_store::{ActivityRow, BotLogin, BotMcpServer, ControlLease, ExecLease, Question, Reservation, Run};
pub(crate) use bots::bot_ctx;
pub use bots::{BotRef, BotState, BotStatus, BotView, ComputerBrief, RunHold};
pub use calibrate::{find_targets as calibrate_targets, Calibration, Fit, Try, FITS_WITHIN, TARGETS};
pub use checkpoint::CheckpointReport;
pub use clipboard::MAX_CLIPBOARD;
pub(crate) use computer::Up;
pub use computer::{ComputerView, ReconcileReport};
pub use data_dir::DataDir;
pub use desktop::{new_token, snapshot_text, BrowserGo, BrowserTab, BrowserView, ControlView, DesktopView, PageElement, PageSnapshot, ScreenTarget};
pub use doctor::DoctorReport;
pub use error::{EngineError, ErrorCode, Result};
pub use export::Exported;
pub use history::{History, RestoreReport, VersionView};
pub use home_store::Skipped;
pub use hosts::{HostView, LOCAL as LOCAL_HOST};
pub use keys::{AskPassphrase, KeyStore};
pub use leases::{boot_id, IdleOutcome, LeftRunning, Policy, ReleaseOutcome, ReleaseProof, RunningComputer, MAX_NOTE, MIN_IDLE_SUSPEND_MS, PAUSE_WAIT};
pub use logins::NewLogin;
pub use models::{ModelCheck, ModelView, NewModel};
pub use network::NETWORK_ACTIVITY;
pub use recording::RecordingMeta;
pub use replay::{Acted, Mark, ReplayKind, ReplayStep, ReplayView};
pub use runs::{
    ChatCall, ChatItem, ClientSession, NoteEvent, RunEvent, RunSummary, SessionOutput, Trajectory, TrajectoryBot, TrajectoryStep, MAX_STEPS, PAUSED_FOR_YOU,
    TRAJECTORY_FORMAT,
};
pub use settings::Settings;
pub use switch::SwitchReport;
pub use terminal::Terminal;
pub use versions::{Changes, Retention, Why};
pub use workspace::listing_text;

use botdesk_core::*;
use botdesk_store::Store;
use std::{path::PathBuf, sync::Arc};

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

/// Which provider runs the computers. The engine never learns which one it is.
pub enum ProviderChoice {
    /// A provider with its machine-level side (Docker: `botdesk_docker::machine`), made for the
    /// data directory's label.
    Machine(fn(data_dir_label: &str) -> Arc<dyn Machine>),
    /// Computers only, with no image, hosts or reconcile (tests use the fake).
    Custom(Arc<dyn ComputerProvider>),
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
    /// Asks for the key vault's passphrase when no Secret Service answers (the CLI's terminal);
    /// None: calls that need a key fail with `KEYS_LOCKED` until [`Engine::unlock_keys`].
    pub ask_passphrase: Option<keys::AskPassphrase>,
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
            ask_passphrase: None,
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

#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    data: DataDir,
    store: Store,
    provider: Arc<dyn ComputerProvider>,
    /// The provider's machine-level side (image builds, doctor, reconcile, hosts), when it has one.
    machine: Option<Arc<dyn Machine>>,
    clock: Arc<dyn Clock>,
    policy: Policy,
    /// Where keys are kept (the OS keyring or the encrypted vault).
    keys: keys::Keys,
    /// Resources and screen limit in force.
    limits: settings::InForce,
    /// Per computer: its boot lock, its home's lock, whether this process made it ready, its
    /// desktops brought up here, what each bot last saw of its screen (see
    /// [`computer::ComputerHandle`]).
    computers: computer::Computers,
    /// This process's runs: their events, and how to cancel each at once.
    runs: runs::LocalRuns,
    /// The person's open shells.
    terminals: terminal::Terminals,
    /// Work that goes on after a call returned (removing replaced checkpoint versions);
    /// [`Engine::settle`] waits for it.
    background: tokio_util::task::TaskTracker,
    /// Told when a spare computer may be wanted (see [`Engine::spare_wanted`]).
    spare_wanted: tokio::sync::Notify,
}

impl Engine {
    /// Opens the data directory and the database. Docker is not contacted here: a stopped engine
    /// shows up as a clear error from the first call that needs it.
    pub async fn open(config: EngineConfig) -> Result<Self> {
        let data = DataDir::open(config.data_dir)?;
        let store = Store::open(&data.db()).await.map_err(|e| EngineError::from(e).context(format!("opening {}", data.db().display())))?;
        let (provider, machine) = match config.provider {
            ProviderChoice::Machine(make) => {
                let m = make(&data.label());
                (m.computers(Arc::new(hosts::StoreHosts(store.clone()))), Some(m))
            }
            ProviderChoice::Custom(p) => (p, None),
        };
        config.policy.validate()?;
        let settings = Settings::load(&data.settings())?;
        let mut resources = config.resources;
        let mut idle_ms = config.policy.idle_suspend;
        if data.settings().exists() {
            settings.apply(&mut resources);
            idle_ms = settings.idle_ms();
        }
        let keys = keys::Keys::new(config.secrets, data.root(), config.ask_passphrase);
        let engine = Self {
            inner: Arc::new(Inner {
                data,
                store,
                provider,
                machine,
                clock: config.clock,
                limits: settings::InForce::new(resources, config.screen_limit, idle_ms, &settings),
                policy: config.policy,
                keys,
                computers: Default::default(),
                runs: Default::default(),
                terminals: Default::default(),
                background: Default::default(),
                spare_wanted: Default::default(),
            }),
        };
        // Runs whose process died (the app or CLI was killed) end now, with the reason.
        engine.recover_runs().await.map_err(|e| e.context("recovering interrupted runs"))?;
        // Control that lapsed while no process watched ends now, with its shells' processes.
        if let Err(e) = engine.end_lapsed_control().await {
            tracing::warn!("ending lapsed control: {e}");
        }
        // Recordings past their days (or over the total cap) go, whether or not runs end here.
        engine.prune_recordings_if_due().await;
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
        self.inner.limits.apply(s);
        self.inner.spare_wanted.notify_one();
        Ok(s.clone())
    }

    pub(crate) fn screen_limit(&self) -> Option<u32> {
        self.inner.limits.screen_limit()
    }

    pub fn data_dir(&self) -> &DataDir {
        &self.inner.data
    }

    /// The requests this process's provider sent so far (to the Docker engines and to the
    /// computers' gateways): what an operation costs, for tests and the bench.
    pub fn provider_requests(&self) -> botdesk_core::Requests {
        self.inner.provider.requests()
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    fn machine(&self) -> Result<&Arc<dyn Machine>> {
        self.inner.machine.as_ref().ok_or_else(|| EngineError::invalid("this engine's provider has no image, hosts or machine of its own"))
    }

    // --------------------------------------------------------------------------------------------
    // Image

    /// The image new computers start from (a provider without a machine of its own has none).
    pub fn image_tag(&self) -> String {
        self.inner.machine.as_ref().map_or_else(|| "none (the provider has no image)".into(), |m| m.image_tag())
    }

    pub async fn image_present(&self) -> Result<bool> {
        Ok(self.machine()?.image_present().await?)
    }

    /// Builds the computer image (base from `BOTDESK_BASE_IMAGE` if set), reporting real stages;
    /// `refresh` rebuilds every layer with current packages (a newer Chromium), as `doctor`
    /// advises once the image is 30 days old.
    pub async fn build_image(&self, refresh: bool, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String> {
        let build = botdesk_core::machine::ImageBuild {
            base: std::env::var("BOTDESK_BASE_IMAGE").ok().filter(|b| !b.is_empty()),
            cache_dir: self.inner.data.cache(),
            refresh,
            now_ms: self.now(),
        };
        self.machine()?.build_image(&build, progress).await.map_err(|e| EngineError::from(e).context("building the computer image"))
    }

    /// Every check a person needs before the first bot runs, the Docker hosts on other machines
    /// included.
    pub async fn doctor(&self) -> DoctorReport {
        let keys = self.key_store().await;
        let mut report = doctor::run(self.inner.machine.as_deref(), &self.inner.data, &keys, self.now()).await;
        report.checks.extend(self.check_hosts().await);
        report.checks.extend(self.check_models().await);
        report.ok = report.checks.iter().all(|c| c.ok);
        report
    }
}

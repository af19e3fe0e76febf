//! Runs: a task for a bot, carried out by the agent under the bot's execution lease. The run's
//! messages, tool calls and activity are persisted (redacted) and broadcast as [`RunEvent`]s.
//!
//! `mod.rs` starts and drives a run; `chat.rs` is what front ends read (the chat, events, usage,
//! activity); `host.rs` carries out the model's tool calls for a run and records them;
//! `takeover.rs` is the person taking the screen mid-run; `output.rs` keeps a command's output;
//! `session.rs` is a client outside the app (MCP) driving a bot with the same tools.

mod approve;
mod ask;
mod chat;
mod host;
mod output;
mod session;
mod takeover;
mod trajectory;

pub use chat::{ChatCall, ChatItem, RunEvent, RunSummary};
pub(crate) use session::DRIVEN_BY;
pub use session::{ClientSession, SessionOutput};
pub(crate) use takeover::format_span;
pub use trajectory::{NoteEvent, Trajectory, TrajectoryBot, TrajectoryStep, TRAJECTORY_FORMAT};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use botdesk_agent::tools::{SafetyCheck, ToolKind};
use botdesk_agent::{run::Host, Image, Message, ModelClient, ModelConfig, RunConfig, RunEnd, Tool, ToolCall, ToolOutput, ToolResult};
use botdesk_core::{
    action, ActThen, ActivityStatus, BotId, CallStatus, ImageFormat, MachineStatus, MessageRole, Observation, Redactor, RunFailure, RunStatus, TakeoverResult,
    Usage,
};
use botdesk_store::{ExecLease, Run};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::Browsers;
use crate::versions::Why;
use crate::{Engine, EngineError, ErrorCode, Result};

use chat::graphical;
use host::RunHost;
use output::{tail, OutputTail};

/// This process's runs: what happens in them, and how to cancel each at once (on Stop).
pub(crate) struct LocalRuns {
    pub events: tokio::sync::broadcast::Sender<RunEvent>,
    pub cancels: std::sync::Mutex<std::collections::HashMap<String, CancellationToken>>,
}

impl Default for LocalRuns {
    fn default() -> Self {
        LocalRuns { events: tokio::sync::broadcast::channel(4096).0, cancels: Default::default() }
    }
}

/// Why a run waits for the person when they paused it themselves (its `Status` event's `error`),
/// as against the bot asking for them.
pub const PAUSED_FOR_YOU: &str = "paused for you";

/// Model calls one run may make.
pub const MAX_STEPS: u32 = 60;
/// Earlier chat messages given to the model with a new task.
/// Earlier runs a new run sees (whole runs, each collapsed like old steps).
const HISTORY_RUNS: i64 = 5;
/// Activity keeps the last this many characters of a command's output.
pub const OUTPUT_TAIL: usize = 16_000;

/// Run secrets: the model key, the bot's logins' secrets and secret-looking variables of this
/// process's environment.
fn redactor(key: Option<&str>, logins: Vec<String>) -> Redactor {
    let secret_name = |n: &str| {
        let n = n.to_ascii_uppercase();
        ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"].iter().any(|w| n.contains(w))
    };
    let env = std::env::vars().filter(|(k, _)| secret_name(k)).map(|(_, v)| v);
    Redactor::new(key.map(str::to_string).into_iter().chain(logins).chain(env))
}

impl Engine {
    /// Starts a run in the background and returns its id (the app's Send).
    pub async fn start_run(&self, bot: &BotId, task: &str) -> Result<String> {
        let prepared = self.prepare_run(bot, task).await?;
        let id = prepared.run.id.clone();
        let engine = self.clone();
        tokio::spawn(async move { engine.drive(prepared).await });
        Ok(id)
    }

    /// Runs a task to its end and returns the finished run (the CLI's `run`).
    pub async fn run_task(&self, bot: &BotId, task: &str) -> Result<Run> {
        let prepared = self.prepare_run(bot, task).await?;
        self.drive(prepared).await
    }

    /// Checks the bot's model and key, queues the run, takes the execution lease.
    async fn prepare_run(&self, bot: &BotId, task: &str) -> Result<Prepared> {
        if task.trim().is_empty() {
            return Err(EngineError::invalid("the task is empty"));
        }
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let model_id = bot.model.clone().ok_or_else(|| {
            EngineError::invalid(format!(
                "{} has no model: give it one in the chat (Settings ▾ → Name and model…) or with `botdesk bot set {} --model ID`",
                bot.name, bot.name
            ))
        })?;
        let (client, m, key) = self.model_client(&model_id).await?;
        self.recover_runs().await?;
        let run = self.create_run(&bot.id, task).await?;
        self.own_run(&run.id).await?;
        let (run, lease) = match self.lease_run(&run.id).await {
            Ok(x) => x,
            Err(e) => {
                let _ = self.fail_queued_run(&run.id, &e.message).await;
                return Err(e);
            }
        };
        let run = self.begin_run(&run).await?;
        // Claude's and OpenAI's computer tools are declared in pixels of the screen.
        let coords = if client.config().dialect.own_computer_tool() { action::CoordSpace::Pixels } else { m.coordinates };
        let day = botdesk_core::civil::stamp_of(self.now());
        let setting = botdesk_agent::run::Setting {
            bot: &bot.name,
            instructions: &bot.instructions,
            folder: &crate::bots::view(bot.clone(), &computer).folder,
            shared: computer.scope == botdesk_core::ComputerScope::Team,
            today: &format!("{}-{}-{}", &day[..4], &day[4..6], &day[6..]),
            coords,
            dialect: client.config().dialect,
        };
        let system = botdesk_agent::system_prompt(&setting);
        let prices = self.inner.store.model_prices(&m.id).await?;
        let budget = self.inner.store.bot_budget(&bot.id).await?;
        // Its saved logins' secrets never reach the model, the chat or the activity, even if a
        // page shows one back.
        let redactor = redactor(key.as_deref(), self.login_secrets(&bot.id).await);
        let login_sites = self.inner.store.bot_logins(&bot.id).await?.into_iter().map(|l| l.site).collect();
        Ok(Prepared { client, run, lease, bot, system, redactor, coords, prices, budget, login_sites })
    }

    async fn drive(&self, p: Prepared) -> Result<Run> {
        let Prepared { client, run, lease, bot, system, redactor, coords, prices, budget, login_sites } = p;
        let cancel = CancellationToken::new();
        self.inner.runs.cancels.lock().unwrap().insert(run.id.clone(), cancel.clone());
        let history = self.earlier_runs(&bot.id).await?;
        // The bot's MCP servers start in its computer now and end with the run.
        let (mcp, mcp_tools, mcp_notes) = self.start_mcp_servers(&bot, &run.id).await;
        let host = RunHost {
            engine: self.clone(),
            bot: bot.clone(),
            me: crate::BotRef::of(&bot),
            run: run.clone(),
            lease: Arc::new(tokio::sync::Mutex::new(lease)),
            redactor,
            finished: Default::default(),
            fatal: Default::default(),
            stop: cancel.clone(),
            usage: Default::default(),
            coords,
            prices,
            page_urls: matches!(client.config().dialect, botdesk_agent::Dialect::OpenAiComputer(_)),
            mcp,
            recorder: crate::recording::Recorder::new(self, &bot, &run.id),
            acted: Default::default(),
            spend_asked: Default::default(),
            watching: Default::default(),
            desk: Default::default(),
        };
        // What "Undo this run's file changes" goes back to.
        self.mark_run_start(&bot, &run.id).await;
        host.message(MessageRole::User, &run.task).await;
        for note in &mcp_notes {
            host.message(MessageRole::System, note).await;
        }
        self.emit(RunEvent::Status { bot: bot.id.to_string(), run_id: run.id.clone(), status: RunStatus::Running, error: None, failure: None });
        let watcher = tokio::spawn(watch(self.clone(), run.clone(), host.lease.clone(), cancel.clone()));
        let cfg = RunConfig { system, max_steps: MAX_STEPS, budget, prices, coords, mcp_tools, login_sites };
        let end = botdesk_agent::run(&client, &host, &cfg, history, &run.task, &cancel).await;
        watcher.abort();
        if host.watching.load(std::sync::atomic::Ordering::SeqCst) {
            host.stop_watching().await;
        }
        host.recorder.finish().await;
        host.mcp.close().await;
        self.inner.runs.cancels.lock().unwrap().remove(&run.id);
        let fatal = host.fatal.lock().unwrap().clone();
        // A question the run left waiting is answered by nobody now.
        let _ = self.inner.store.close_questions(&run.id, "the run ended", self.now()).await;
        let (status, error, failure) = match (&end, fatal) {
            (RunEnd::Completed(_), _) => (RunStatus::Completed, None, None),
            (RunEnd::Failed(failure, why), _) => (RunStatus::Failed, Some(host.redactor.redact(why)), Some(*failure)),
            (RunEnd::Cancelled, Some((failure, why))) => (RunStatus::Failed, Some(why), Some(failure)),
            (RunEnd::Cancelled, None) => {
                let current = self.inner.store.run(&run.id).await?;
                let why = current.error.unwrap_or_else(|| "stopped".into());
                (RunStatus::Cancelled, Some(why), None)
            }
        };
        let lease = host.lease.lock().await.clone();
        let current = self.inner.store.run(&run.id).await?;
        let finished = if current.status.is_terminal() {
            let _ = self.inner.store.release_execution(&lease).await;
            current
        } else {
            self.finish_run(&run, &lease, status, error.as_deref(), failure).await?
        };
        self.forget_run_start(&bot.computer_id, &run.id);
        self.save_after_run(&bot, &run.id, &host).await;
        if let Some(e) = &finished.error {
            let note = match finished.status {
                RunStatus::Cancelled => format!("Stopped: {e}"),
                _ => format!("The run failed: {e}"),
            };
            host.message(MessageRole::System, &note).await;
        }
        self.emit(RunEvent::Status {
            bot: bot.id.to_string(),
            run_id: run.id.clone(),
            status: finished.status,
            error: finished.error.clone(),
            failure: finished.failure,
        });
        Ok(finished)
    }
    /// Checkpoints the bot's computer at a run's end (what "Undo this run's file changes" goes
    /// back to) and records how many files of the bot's folder it changed. A failed checkpoint is
    /// said in the chat; the run stays as it ended. A run that never touched its computer has
    /// nothing to save.
    async fn save_after_run(&self, bot: &botdesk_store::Bot, run_id: &str, host: &RunHost) {
        let run = run_id.to_string();
        let with_home = self.inner.store.computer(bot.computer_id.as_str()).await.ok().filter(|c| c.home_volume.is_some());
        let running = match &with_home {
            Some(c) => matches!(self.inner.provider.status(&c.cref()).await, Ok(MachineStatus::Running)),
            None => false,
        };
        if running {
            let slot = self.inner.store.desktop_of(&bot.computer_id, &bot.id).await.ok().flatten().map(|d| d.slot);
            let browsers = slot.map_or(Browsers::None, Browsers::OnDisplay);
            match self.checkpoint_closing(&bot.computer_id, browsers, Why::Run { run_id: run.clone() }).await {
                Ok(r) => {
                    let team = with_home.as_ref().is_some_and(|c| c.scope == botdesk_core::ComputerScope::Team);
                    let folder = if team { botdesk_core::path::bot_folder(&bot.id).as_str().to_string() } else { String::new() };
                    let c = r.changed.in_folder(&folder);
                    let files_changed = c.written + c.removed;
                    if self.inner.store.set_run_files_changed(&run, files_changed as i64).await.is_ok() {
                        self.emit(RunEvent::Saved { bot: bot.id.to_string(), run_id: run.clone(), files_changed });
                    }
                }
                Err(e) => {
                    host.message(MessageRole::System, &format!("The workspace could not be saved: {e}")).await;
                }
            }
        }
    }
}

impl Engine {
    /// A client for a stored model: its key from the keyring, its limits and thinking as set.
    pub(crate) async fn model_client(&self, model_id: &str) -> Result<(ModelClient, crate::ModelView, Option<String>)> {
        let m = self.inner.store.model(model_id).await?;
        let key = self.model_key(model_id).await?;
        let mut config = ModelConfig::new(m.kind.as_str(), &m.model, m.base_url.as_deref(), key.clone()).map_err(|e| EngineError::invalid(e.to_string()))?;
        if let Some(l) = self.inner.store.model_limits(&m.id).await? {
            (config.context_window, config.max_tokens) = (l.context_window, l.max_output.min(u32::MAX as u64) as u32);
        }
        config.thinking = self.model_thinking(&m.id).await?;
        let client = ModelClient::new(config).map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
        Ok((client, m, key))
    }
}

struct Prepared {
    client: ModelClient,
    run: Run,
    lease: ExecLease,
    bot: botdesk_store::Bot,
    system: String,
    redactor: Redactor,
    coords: action::CoordSpace,
    prices: Option<botdesk_core::Prices>,
    budget: botdesk_core::Budget,
    login_sites: Vec<String>,
}

/// Heartbeats the run's lease, and cancels the run when it was stopped (by this or another
/// process) or its lease was lost.
async fn watch(engine: Engine, run: Run, lease: Arc<tokio::sync::Mutex<ExecLease>>, cancel: CancellationToken) {
    let beat = engine.policy().run_heartbeat.clamp(200, engine.policy().exec_ttl / 3);
    let mut last_beat = engine.now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match engine.inner.store.run(&run.id).await {
            Ok(r) if r.status.is_terminal() => return cancel.cancel(),
            _ => {}
        }
        if engine.now() - last_beat >= beat {
            let current = lease.lock().await.clone();
            match engine.heartbeat_run(&run, &current).await {
                Ok(renewed) => {
                    *lease.lock().await = renewed;
                    last_beat = engine.now();
                }
                Err(e) if e.code == ErrorCode::Stale => {
                    tracing::warn!(run = %run.id, "the run lost its execution lease: {e}");
                    return cancel.cancel();
                }
                Err(e) => tracing::warn!(run = %run.id, "heartbeat failed (will retry): {e}"),
            }
        }
    }
}

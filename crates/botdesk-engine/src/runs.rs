//! Runs: a task for a bot, carried out by the agent under the bot's execution lease. The run's
//! messages, tool calls and activity are persisted (redacted) and broadcast as [`RunEvent`]s.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use botdesk_agent::tools::ToolKind;
use botdesk_agent::{run::Host, Image, Message, ModelClient, ModelConfig, RunConfig, RunEnd, Tool, ToolCall, ToolOutput, ToolResult};
use botdesk_core::{action, ComputerRef, ImageFormat, MachineStatus, Redactor, RunFailure, RunStatus, TakeoverResult, Usage};
use botdesk_store::{ExecLease, Run};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::Browsers;
use crate::{Engine, EngineError, ErrorCode, Result};

/// Model calls one run may make.
pub const MAX_STEPS: u32 = 60;
/// Earlier chat messages given to the model with a new task.
/// Earlier runs a new run sees (whole runs, each collapsed like old steps).
const HISTORY_RUNS: i64 = 5;
/// Activity keeps the last this many characters of a command's output.
pub const OUTPUT_TAIL: usize = 16_000;

/// A tool call in the chat. `status` is running, done or error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCall {
    pub id: String,
    pub name: String,
    /// The tool works on the bot's screen or browser (the app shows the screen while it runs).
    pub graphical: bool,
    pub arguments: String,
    pub status: &'static str,
    pub text: Option<String>,
    /// A screenshot, relative to the data directory (`shots/…`).
    pub image: Option<String>,
    /// A file the bot attached (workspace path).
    pub attachment: Option<String>,
}

/// One chat message: the person's task, the bot's reply (with its tool calls) or a note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatItem {
    pub id: i64,
    pub run_id: String,
    pub role: String,
    pub text: String,
    pub calls: Vec<ChatCall>,
    pub created_at: i64,
    /// On the last message of a run: what the run's model calls cost so far, in tokens and (when
    /// its model's prices are known) dollars.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// On the last message of a failed run: what it failed of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
}

/// What happens in runs, for front ends. `bot` is the bot id.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Delta {
        bot: String,
        run_id: String,
        text: String,
    },
    Message {
        bot: String,
        item: ChatItem,
    },
    Tool {
        bot: String,
        run_id: String,
        call: ChatCall,
    },
    Activity {
        bot: String,
        entry: botdesk_store::ActivityRow,
    },
    /// `failure`: what a failed run failed of.
    Status {
        bot: String,
        run_id: String,
        status: RunStatus,
        error: Option<String>,
        failure: Option<RunFailure>,
    },
    /// The model's reply broke off mid-stream and is asked for again: forget its streamed text.
    Restart {
        bot: String,
        run_id: String,
        why: String,
    },
    /// What one model call cost (`call`) and the run so far (`run`, and `run_usd` when the
    /// model's prices are known).
    Usage {
        bot: String,
        run_id: String,
        call: Usage,
        run: Usage,
        run_usd: Option<f64>,
    },
}

impl RunEvent {
    pub fn bot(&self) -> &str {
        match self {
            RunEvent::Delta { bot, .. }
            | RunEvent::Message { bot, .. }
            | RunEvent::Tool { bot, .. }
            | RunEvent::Activity { bot, .. }
            | RunEvent::Status { bot, .. }
            | RunEvent::Restart { bot, .. }
            | RunEvent::Usage { bot, .. } => bot,
        }
    }
}

fn graphical(tool: &str) -> bool {
    ToolKind::named(tool).is_some_and(|k| k.graphical())
}

fn call_view(row: &botdesk_store::ToolCallRow) -> ChatCall {
    let result: Option<serde_json::Value> = row.result.as_deref().and_then(|r| serde_json::from_str(r).ok());
    let s = |k: &str| result.as_ref().and_then(|r| r[k].as_str()).map(str::to_string);
    ChatCall {
        id: row.id.clone(),
        name: row.name.clone(),
        graphical: graphical(&row.name),
        arguments: row.arguments.clone(),
        status: if row.result.is_none() {
            "running"
        } else if row.is_error {
            "error"
        } else {
            "done"
        },
        text: s("text"),
        image: s("image"),
        attachment: s("attachment"),
    }
}

/// Run secrets: the model key and secret-looking variables of this process's environment.
fn redactor(key: Option<&str>) -> Redactor {
    let secret_name = |n: &str| {
        let n = n.to_ascii_uppercase();
        ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"].iter().any(|w| n.contains(w))
    };
    let env = std::env::vars().filter(|(k, _)| secret_name(k)).map(|(_, v)| v);
    Redactor::new(key.map(str::to_string).into_iter().chain(env))
}

/// The last `n` characters of `s`.
fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    s.chars().skip(count - n).collect()
}

impl Engine {
    /// Follow every run of this process.
    pub fn run_events(&self) -> tokio::sync::broadcast::Receiver<RunEvent> {
        self.inner.run_events.subscribe()
    }

    fn emit(&self, ev: RunEvent) {
        let _ = self.inner.run_events.send(ev);
    }

    /// Cancels a run of this process at once (its command gets exit 130). Runs of another process
    /// see the `cancelled` status at their next check.
    pub(crate) fn cancel_local_run(&self, run_id: &str) {
        if let Some(t) = self.inner.local_runs.lock().unwrap().get(run_id) {
            t.cancel();
        }
    }

    /// A bot's chat, oldest first (the latest `limit` messages).
    pub async fn chat(&self, bot: &str, limit: i64) -> Result<Vec<ChatItem>> {
        let bot = self.inner.store.bot(bot).await?;
        let rows = self.inner.store.messages_of(&bot.id, limit).await?;
        let first = rows.first().map_or(i64::MAX, |m| m.id);
        let calls = self.inner.store.tool_calls_of(&bot.id, first).await?;
        let mut items: Vec<ChatItem> = rows
            .into_iter()
            .map(|m| {
                let content: serde_json::Value = serde_json::from_str(&m.content).unwrap_or_default();
                ChatItem {
                    id: m.id,
                    calls: calls.iter().filter(|c| c.message_id == m.id).map(call_view).collect(),
                    run_id: m.run_id,
                    role: m.role,
                    text: content["text"].as_str().unwrap_or("").to_string(),
                    created_at: m.created_at,
                    usage: None,
                    cost_usd: None,
                    failure: None,
                }
            })
            .collect();
        // Each run's cost, and what a failed one failed of, go on its last message.
        let usages = self.inner.store.run_usages(&bot.id).await?;
        let failures = self.inner.store.run_failures(&bot.id).await?;
        for i in 0..items.len() {
            if items.get(i + 1).is_none_or(|next| next.run_id != items[i].run_id) {
                if let Some(&(u, usd)) = usages.get(&items[i].run_id) {
                    (items[i].usage, items[i].cost_usd) = (Some(u), usd);
                }
                items[i].failure = failures.get(&items[i].run_id).copied();
            }
        }
        Ok(items)
    }

    /// The bot's latest [`HISTORY_RUNS`] runs in the model's own form, within the run's context
    /// rules: each task, its tool calls with their results collapsed to a line each (screenshots
    /// are not kept), notes such as a failure, and its answer.
    async fn history(&self, bot: &botdesk_core::BotId) -> Result<Vec<Message>> {
        use botdesk_agent::conversation::{collapse_steps_to, Block, Role};
        let rows = self.inner.store.messages_of_runs(bot, HISTORY_RUNS).await?;
        let Some(first) = rows.first().map(|m| m.id) else { return Ok(vec![]) };
        let calls = self.inner.store.tool_calls_of(bot, first).await?;
        let text_of =
            |json: &str| serde_json::from_str::<serde_json::Value>(json).ok().and_then(|v| v["text"].as_str().map(str::to_string)).unwrap_or_default();
        let mut out: Vec<Message> = vec![];
        let mut run_start = 0;
        for (i, m) in rows.iter().enumerate() {
            if i == 0 || rows[i - 1].run_id != m.run_id {
                run_start = out.len();
            }
            let text = text_of(&m.content);
            match m.role.as_str() {
                "user" => out.push(Message::user(text)),
                "system" => out.push(Message::user(format!("(Note from Botdesk: {text})"))),
                "assistant" => {
                    let mine: Vec<&botdesk_store::ToolCallRow> = calls.iter().filter(|c| c.message_id == m.id).collect();
                    let mut blocks = if text.is_empty() { vec![] } else { vec![Block::Text(text)] };
                    let mut results = vec![];
                    for c in mine {
                        let id = c.id.rsplit(':').next().unwrap_or(&c.id).to_string();
                        blocks.push(Block::ToolCall(botdesk_agent::ToolCall::new(id.clone(), c.name.clone(), c.arguments.clone())));
                        results.push(Block::ToolResult(match &c.result {
                            Some(r) if c.is_error => ToolResult::error(&id, text_of(r)),
                            Some(r) => ToolResult::ok(&id, text_of(r)),
                            None => ToolResult::error(&id, "no result: the run ended first"),
                        }));
                    }
                    if !blocks.is_empty() {
                        out.push(Message { role: Role::Assistant, blocks });
                    }
                    if !results.is_empty() {
                        out.push(Message { role: Role::User, blocks: results });
                    }
                }
                _ => {}
            }
            let run_ends = rows.get(i + 1).is_none_or(|n| n.run_id != m.run_id);
            if run_ends {
                collapse_steps_to(&mut out, run_start + 1, 0, 0);
            }
        }
        Ok(out)
    }

    /// A screenshot saved for the chat (`shots/<run>/<call>.png`, relative to the data directory).
    pub async fn chat_image(&self, rel: &str) -> Result<Vec<u8>> {
        let ok =
            rel.starts_with("shots/") && rel.ends_with(".png") && rel.split('/').count() == 3 && !rel.split('/').any(|c| c.is_empty() || c == "." || c == "..");
        if !ok {
            return Err(EngineError::invalid(format!("{rel:?} is not a chat screenshot")));
        }
        tokio::fs::read(self.data_dir().root().join(rel)).await.map_err(|e| EngineError::new(ErrorCode::NotFound, format!("screenshot {rel}: {e}")))
    }

    /// What a run's model calls cost together: tokens, and dollars when its model's prices are known.
    pub async fn run_usage(&self, run_id: &str) -> Result<(Usage, Option<f64>)> {
        Ok(self.inner.store.run_usage(run_id).await?)
    }

    /// What all of a bot's runs cost: tokens, dollars over the calls whose prices were known, and
    /// how many calls had none.
    pub async fn bot_usage(&self, bot: &str) -> Result<(Usage, f64, u64)> {
        let (bot, _) = self.bot_and_computer(bot).await?;
        Ok(self.inner.store.bot_usage(&bot.id).await?)
    }

    /// What a bot's runs may spend each.
    pub async fn bot_budget(&self, bot: &str) -> Result<botdesk_core::Budget> {
        let (bot, _) = self.bot_and_computer(bot).await?;
        Ok(self.inner.store.bot_budget(&bot.id).await?)
    }

    /// Sets what a bot's runs may spend each: tokens (None: the default) and dollars (None: no limit).
    pub async fn set_bot_budget(&self, bot: &str, tokens: Option<u64>, usd: Option<f64>) -> Result<botdesk_core::Budget> {
        if tokens == Some(0) || usd.is_some_and(|u| !(u.is_finite() && u > 0.0)) {
            return Err(EngineError::invalid("a budget is a positive number of tokens or dollars"));
        }
        let (b, _) = self.bot_and_computer(bot).await?;
        self.inner.store.set_bot_budget(&b.id, tokens, usd).await?;
        self.bot_budget(bot).await
    }

    /// A bot's latest `limit` activity entries, oldest first (what the Terminal pane shows).
    pub async fn latest_activity(&self, bot: &str, limit: i64) -> Result<Vec<botdesk_store::ActivityRow>> {
        let bot = self.inner.store.bot(bot).await?;
        Ok(self.inner.store.latest_activity(&bot.id, limit).await?)
    }

    /// A bot's activity entries after `after` (ids grow), oldest first.
    pub async fn activity(&self, bot: &str, after: i64, limit: i64) -> Result<Vec<botdesk_store::ActivityRow>> {
        let bot = self.inner.store.bot(bot).await?;
        Ok(self.inner.store.activity_of(&bot.id, after, limit).await?)
    }

    /// Starts a run in the background and returns its id (the app's Send).
    pub async fn start_run(&self, bot: &str, task: &str) -> Result<String> {
        let prepared = self.prepare_run(bot, task).await?;
        let id = prepared.run.id.clone();
        let engine = self.clone();
        tokio::spawn(async move { engine.drive(prepared).await });
        Ok(id)
    }

    /// Runs a task to its end and returns the finished run (the CLI's `run`).
    pub async fn run_task(&self, bot: &str, task: &str) -> Result<Run> {
        let prepared = self.prepare_run(bot, task).await?;
        self.drive(prepared).await
    }

    /// Checks the bot's model and key, queues the run, takes the execution lease.
    async fn prepare_run(&self, bot: &str, task: &str) -> Result<Prepared> {
        if task.trim().is_empty() {
            return Err(EngineError::invalid("the task is empty"));
        }
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let model_id = bot
            .model
            .clone()
            .ok_or_else(|| EngineError::invalid(format!("{} has no model: pick one in the bot's settings or with `botdesk bot create --model`", bot.name)))?;
        let m = self.inner.store.model(&model_id).await?;
        let key = self.model_key(&model_id).await?;
        let mut config = ModelConfig::new(&m.kind, &m.model, m.base_url.as_deref(), key.clone()).map_err(|e| EngineError::invalid(e.to_string()))?;
        if let Some(l) = self.inner.store.model_limits(&m.id).await? {
            (config.context_window, config.max_tokens) = (l.context_window, l.max_output.min(u32::MAX as u64) as u32);
        }
        let client = ModelClient::new(config).map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
        self.recover_runs().await?;
        let run = self.create_run(bot.id.as_str(), task).await?;
        self.own_run(&run.id).await?;
        let (run, lease) = match self.lease_run(&run.id).await {
            Ok(x) => x,
            Err(e) => {
                let _ = self.fail_queued_run(&run.id, &e.message).await;
                return Err(e);
            }
        };
        let run = self.begin_run(&run).await?;
        // The model of a new run has seen no screen yet: its first observe carries an image.
        self.inner.frames.lock().await.remove(&bot.id);
        // Claude's computer tool is declared in pixels of the screen: its coordinates are those.
        let coords = if client.config().dialect.claude_computer() { action::CoordSpace::Pixels } else { m.coordinates };
        let day = botdesk_docker::image::stamp_of(self.now());
        let setting = botdesk_agent::run::Setting {
            bot: &bot.name,
            instructions: &bot.instructions,
            folder: &crate::view(bot.clone(), &computer).folder,
            shared: computer.scope == botdesk_core::ComputerScope::Team,
            today: &format!("{}-{}-{}", &day[..4], &day[4..6], &day[6..]),
            coords,
            dialect: client.config().dialect,
        };
        let system = botdesk_agent::system_prompt(&setting);
        let prices = self.inner.store.model_prices(&m.id).await?;
        let budget = self.inner.store.bot_budget(&bot.id).await?;
        Ok(Prepared { client, run, lease, bot, system, redactor: redactor(key.as_deref()), coords, prices, budget })
    }

    async fn drive(&self, p: Prepared) -> Result<Run> {
        let Prepared { client, run, lease, bot, system, redactor, coords, prices, budget } = p;
        let cancel = CancellationToken::new();
        self.inner.local_runs.lock().unwrap().insert(run.id.clone(), cancel.clone());
        let history = self.history(&bot.id).await?;
        let host = RunHost {
            engine: self.clone(),
            bot: bot.clone(),
            run: run.clone(),
            lease: Arc::new(tokio::sync::Mutex::new(lease)),
            redactor,
            finished: Default::default(),
            fatal: Default::default(),
            stop: cancel.clone(),
            usage: Default::default(),
            coords,
            prices,
        };
        host.message("user", &run.task).await;
        self.emit(RunEvent::Status { bot: bot.id.to_string(), run_id: run.id.clone(), status: RunStatus::Running, error: None, failure: None });
        let watcher = tokio::spawn(watch(self.clone(), run.clone(), host.lease.clone(), cancel.clone()));
        let cfg = RunConfig { system, max_steps: MAX_STEPS, budget, prices };
        let end = botdesk_agent::run(&client, &host, &cfg, history, &run.task, &cancel).await;
        watcher.abort();
        self.inner.local_runs.lock().unwrap().remove(&run.id);
        let fatal = host.fatal.lock().unwrap().clone();
        let (status, error, failure) = match &end {
            RunEnd::Completed(_) => (RunStatus::Completed, None, None),
            RunEnd::Failed(failure, why) => (RunStatus::Failed, Some(host.redactor.redact(why)), Some(*failure)),
            RunEnd::Cancelled if fatal.is_some() => (RunStatus::Failed, fatal, Some(RunFailure::ComputerStopped)),
            RunEnd::Cancelled => {
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
        // Checkpoint at completion or failure; a failed checkpoint is said, the run stays as it ended.
        // (A run that never touched its computer has nothing to save.)
        let has_home = self.inner.store.computer(bot.computer_id.as_str()).await.is_ok_and(|c| c.home_volume.is_some());
        let cref = ComputerRef { id: bot.computer_id.clone() };
        if has_home && matches!(self.inner.provider.status(&cref).await, Ok(MachineStatus::Running)) {
            let slot = self.inner.store.desktop_of(&bot.computer_id, &bot.id).await.ok().flatten().map(|d| d.slot);
            let browsers = slot.map_or(Browsers::None, Browsers::OnDisplay);
            if let Err(e) = self.checkpoint_closing(bot.computer_id.as_str(), browsers).await {
                host.message("system", &format!("The workspace could not be saved: {e}")).await;
            }
        }
        if let Some(e) = &finished.error {
            let note = match finished.status {
                RunStatus::Cancelled => format!("Stopped: {e}"),
                _ => format!("The run failed: {e}"),
            };
            host.message("system", &note).await;
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

struct RunHost {
    engine: Engine,
    bot: botdesk_store::Bot,
    run: Run,
    lease: Arc<tokio::sync::Mutex<ExecLease>>,
    redactor: Redactor,
    /// Calls whose result is stored.
    finished: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Set when the run cannot go on (its computer stopped under it); the run then fails with it.
    fatal: std::sync::Mutex<Option<String>>,
    stop: CancellationToken,
    /// What the run's model calls cost so far.
    usage: std::sync::Mutex<Usage>,
    /// How the model gives screen coordinates (and is told where the cursor is).
    coords: action::CoordSpace,
    /// The model's prices, when known: each call's cost is stored beside its tokens.
    prices: Option<botdesk_core::Prices>,
}

impl RunHost {
    fn bot_id(&self) -> String {
        self.bot.id.to_string()
    }

    async fn message(&self, role: &str, text: &str) -> i64 {
        let text = self.redactor.redact(text);
        let content = json!({ "text": text }).to_string();
        let now = self.engine.now();
        match self.engine.inner.store.add_message(&self.run.id, role, &content, now).await {
            Ok(id) => {
                let item = ChatItem {
                    id,
                    run_id: self.run.id.clone(),
                    role: role.into(),
                    text,
                    calls: vec![],
                    created_at: now,
                    usage: None,
                    cost_usd: None,
                    failure: None,
                };
                self.engine.emit(RunEvent::Message { bot: self.bot_id(), item });
                id
            }
            Err(e) => {
                tracing::error!(run = %self.run.id, "could not store a chat message: {e}");
                0
            }
        }
    }

    /// Starts an activity entry; losing it never fails the tool.
    async fn activity(&self, tool: ToolKind, target: &str, status: &str) -> Option<i64> {
        let target = self.redactor.redact(target);
        match self.engine.inner.store.add_activity(&self.bot.id, Some(&self.run.id), tool.name(), &target, status, self.engine.now()).await {
            Ok(id) => {
                self.push_activity(id).await;
                Some(id)
            }
            Err(e) => {
                tracing::warn!("activity entry lost: {e}");
                None
            }
        }
    }

    async fn finish_activity(&self, id: Option<i64>, status: &str, exit: Option<i64>, output: &str) {
        let Some(id) = id else { return };
        let output = tail(&self.redactor.redact(output), OUTPUT_TAIL);
        if let Err(e) = self.engine.inner.store.finish_activity(id, status, exit, &output, self.engine.now()).await {
            tracing::warn!("activity update lost: {e}");
        }
        self.push_activity(id).await;
    }

    /// A one-line entry (write_file, attach_file, open_path, launch_app).
    async fn line(&self, tool: ToolKind, target: &str, result: &std::result::Result<String, String>) {
        let id = self.activity(tool, target, "running").await;
        match result {
            Ok(detail) => self.finish_activity(id, "done", None, detail).await,
            Err(e) => self.finish_activity(id, "error", None, e).await,
        }
    }

    async fn push_activity(&self, id: i64) {
        if let Ok(rows) = self.engine.inner.store.activity_of(&self.bot.id, id - 1, 1).await {
            for entry in rows {
                self.engine.emit(RunEvent::Activity { bot: self.bot_id(), entry });
            }
        }
    }

    fn err(&self, e: EngineError) -> ToolOutput {
        let mut text = e.message;
        if e.code == ErrorCode::MultiScreenUnavailable {
            text.push_str(". Your shell and files still work.");
        }
        ToolOutput::error(text)
    }

    /// After a failed tool: if the computer itself stopped under the run (killed, crashed), the
    /// run cannot go on; it fails with that reason instead of quietly starting a new machine.
    async fn check_computer(&self) {
        let cref = botdesk_core::ComputerRef { id: self.bot.computer_id.clone() };
        if let Ok(status) = self.engine.inner.provider.status(&cref).await {
            if status != botdesk_core::MachineStatus::Running {
                let why = format!(
                    "the computer stopped during the run (it is {} now; was it killed?). Send the task again to start it anew: the workspace is kept",
                    status.as_str()
                );
                *self.fatal.lock().unwrap() = Some(why);
                self.stop.cancel();
            }
        }
    }

    /// Saves a screenshot for the chat; returns its path relative to the data directory.
    async fn save_shot(&self, call_id: &str, png: &[u8]) -> Option<String> {
        let rel = format!("shots/{}/{}.png", self.run.id, sanitize(call_id));
        let path = self.engine.data_dir().root().join(&rel);
        tokio::fs::create_dir_all(path.parent()?).await.ok()?;
        tokio::fs::write(&path, png).await.ok()?;
        Some(rel)
    }

    async fn observe(&self) -> ToolOutput {
        match self.engine.observe(self.bot.id.as_str(), ImageFormat::Png).await {
            Ok(o) => {
                let window = o.active_window.as_deref().map(|w| format!(", active window {w:?}")).unwrap_or_default();
                let (x, y) = self.coords.from_pixel(o.cursor, (o.width, o.height));
                let units = match self.coords {
                    action::CoordSpace::Pixels => String::new(),
                    action::CoordSpace::Thousandths => " (coordinates from 0 to 1000 on each axis)".into(),
                };
                let mut text = format!("Screen {}x{}{units}, cursor at ({x}, {y}){window}.", o.width, o.height);
                if o.image.is_none() {
                    text.push_str(" The screen has not changed since your last look (no new screenshot).");
                }
                ToolOutput { text, image: o.image.map(Image::png), is_error: false }
            }
            Err(e) => self.err(e),
        }
    }

    async fn shell(&self, command: &str, cwd: Option<&str>, timeout_s: u64, cancel: &CancellationToken) -> ToolOutput {
        let entry = self.activity(ToolKind::Shell, command, "running").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let argv = vec!["sh".into(), "-c".into(), command.into()];
        let exec = self.engine.exec_for(self.bot.id.as_str(), Some(&self.run.id), argv, cwd, Some(Duration::from_secs(timeout_s)), Some(tx), cancel.clone());
        // Drained while the command runs, into a bounded tail: `yes` for half an hour costs nothing.
        let drain = async {
            let mut out = OutputTail::default();
            while let Some(o) = rx.recv().await {
                out.push(&o.data);
            }
            out
        };
        let (result, out) = tokio::join!(exec, drain);
        let output = out.text(&self.redactor);
        match result {
            Ok(exit) => {
                let status = if exit.code == 0 { "done" } else { "failed" };
                self.finish_activity(entry, status, Some(exit.code as i64), &output).await;
                let note = exit.message.map(|m| format!(" ({m})")).unwrap_or_default();
                let shown = if out.total > out.kept.len() as u64 || output.chars().count() > botdesk_agent::conversation::MAX_TOOL_TEXT - 200 {
                    format!("[cut: showing the last 11800 characters of {} bytes of output]\n{}", out.total, tail(&output, 11_800))
                } else {
                    output
                };
                let text = format!("exit code {}{note}\n{shown}", exit.code);
                if exit.code == 0 {
                    ToolOutput::ok(text)
                } else {
                    ToolOutput::error(text)
                }
            }
            Err(e) => {
                self.finish_activity(entry, "error", None, &e.message).await;
                self.err(e)
            }
        }
    }

    async fn read_file(&self, path: &str) -> ToolOutput {
        let max = botdesk_agent::tools::MAX_READ_BYTES;
        match self.engine.files_read(self.bot.id.as_str(), path, max).await {
            Ok(bytes) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => ToolOutput::ok(self.redactor.redact(&text)),
                Err(_) => ToolOutput::error(format!(
                    "{path} is not UTF-8 text; read_file only returns text. Use shell (e.g. `file`, `xxd | head`) to look at binary files"
                )),
            },
            Err(e) if e.code == ErrorCode::TooLarge => ToolOutput::error(format!(
                "{}. read_file returns at most {max} bytes; use shell (e.g. `head -c`, `grep`, `sed -n`) to read parts of it",
                e.message
            )),
            Err(e) => self.err(e),
        }
    }

    async fn attach(&self, path: &str) -> std::result::Result<(String, u64), String> {
        let (parent, name) = match path.trim_end_matches('/').rsplit_once('/') {
            Some((p, n)) => (if p.is_empty() { "/" } else { p }, n),
            None => (".", path),
        };
        let (dir, entries) = self.engine.files_list(self.bot.id.as_str(), parent).await.map_err(|e| e.message)?;
        let file = entries.into_iter().find(|e| e.path.file_name() == Some(name)).ok_or_else(|| format!("{path} does not exist"))?;
        if file.kind != botdesk_core::FileKind::File {
            return Err(format!("{path} is not a file"));
        }
        let full = if dir.is_empty() || dir == "." { name.to_string() } else { format!("{}/{name}", dir.trim_end_matches('/')) };
        Ok((full, file.size))
    }
}

/// The end of a command's output as it comes, and how much came in all.
#[derive(Default)]
struct OutputTail {
    kept: Vec<u8>,
    total: u64,
}

impl OutputTail {
    /// Bytes kept: the characters an activity keeps (up to 4 bytes each in UTF-8), and room for a
    /// secret cut at the front, so the redactor still sees it whole before the cut that is shown.
    const KEEP: usize = OUTPUT_TAIL * 4 + 4096;

    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        self.kept.extend_from_slice(data);
        if self.kept.len() > 2 * Self::KEEP {
            self.kept.drain(..self.kept.len() - Self::KEEP);
        }
    }

    /// The kept bytes as text, secrets redacted (what the activity and the model are given).
    fn text(&self, redactor: &Redactor) -> String {
        redactor.redact(&String::from_utf8_lossy(&self.kept))
    }
}

#[cfg(test)]
mod output_tests {
    use super::{tail, OutputTail, Redactor, OUTPUT_TAIL};
    use proptest::prelude::*;

    proptest! {
        /// However a command's output arrives, the tail holds its last bytes (at least `KEEP` of
        /// them, at most twice that) and the count is exact.
        #[test]
        fn the_tail_is_the_end_of_the_output(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40_000), 0..12)) {
            let mut t = OutputTail::default();
            let all: Vec<u8> = chunks.concat();
            for c in &chunks {
                t.push(c);
            }
            prop_assert_eq!(t.total, all.len() as u64);
            prop_assert!(t.kept.len() <= 2 * OutputTail::KEEP);
            prop_assert!(t.kept.len() >= all.len().min(OutputTail::KEEP));
            prop_assert!(all.ends_with(&t.kept));
        }

        /// Whatever bytes a command prints, and wherever a secret lands in them (split across
        /// chunks, beside broken UTF-8), the activity's text is at most `OUTPUT_TAIL` characters
        /// and never shows the secret.
        #[test]
        fn the_activity_text_is_bounded_and_never_shows_a_secret(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30_000), 0..8),
            at in any::<prop::sample::Index>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            const SECRET: &str = "sk-test-0123456789abcdef";
            let mut all: Vec<u8> = chunks.concat();
            let at = at.index(all.len() + 1);
            all.splice(at..at, SECRET.bytes());
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(all.len() + 1)).collect();
            bounds.sort();
            let mut t = OutputTail::default();
            let mut from = 0;
            for b in bounds.into_iter().chain([all.len()]) {
                t.push(&all[from..b]);
                from = b;
            }
            let shown = tail(&t.text(&Redactor::new([SECRET.to_string()])), OUTPUT_TAIL);
            prop_assert!(shown.chars().count() <= OUTPUT_TAIL);
            // Nor its end, as when a secret cut at the front of what is kept were shown.
            prop_assert!(!shown.contains(&SECRET[8..]), "the secret is shown");
        }
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

#[async_trait]
impl Host for RunHost {
    async fn execute(&self, call_id: &str, tool: Tool, cancel: &CancellationToken) -> ToolOutput {
        let bot = self.bot.id.as_str();
        let e = &self.engine;
        let mut out = match tool {
            Tool::Observe => self.observe().await,
            Tool::Zoom { region } => match e.zoom(bot, region, self.coords).await {
                Ok((r, (w, h), png)) => ToolOutput {
                    text: format!(
                        "The region from ({}, {}) to ({}, {}) of the screen ({}x{} pixels), shown enlarged at {w}x{h}.",
                        region[0],
                        region[1],
                        region[2],
                        region[3],
                        r.width(),
                        r.height()
                    ),
                    image: Some(Image::png(png)),
                    is_error: false,
                },
                Err(e) => self.err(e),
            },
            Tool::Act { actions, settle_ms } => match e.act_batch(bot, actions, settle_ms, self.coords).await {
                Ok((n, settled)) => {
                    let mut o = self.observe().await;
                    o.text = format!("Did {n} action{}. {} {}", if n == 1 { "" } else { "s" }, settled.describe(), o.text);
                    o
                }
                Err(err) => self.err(err),
            },
            Tool::Shell { command, cwd, timeout_s } => self.shell(&command, cwd.as_deref(), timeout_s, cancel).await,
            Tool::ListFiles { path } => match e.files_list(bot, &path).await {
                Ok((dir, entries)) => {
                    let mut text = format!("{dir}:\n");
                    for f in &entries {
                        let name = f.path.file_name().unwrap_or(".");
                        match f.kind {
                            botdesk_core::FileKind::Dir => text.push_str(&format!("{name}/\n")),
                            _ => text.push_str(&format!("{name}  {} bytes\n", f.size)),
                        }
                    }
                    if entries.is_empty() {
                        text.push_str("(empty)\n");
                    }
                    ToolOutput::ok(text)
                }
                Err(err) => self.err(err),
            },
            Tool::ReadFile { path } => self.read_file(&path).await,
            Tool::WriteFile { path, content, append } => {
                let size = content.len();
                let r = self.write_file(&path, content, append).await;
                let did = if append { "appended" } else { "written" };
                self.line(ToolKind::WriteFile, &path, &r.as_ref().map(|(p, _)| format!("{size} bytes {did} to {p}")).map_err(Clone::clone)).await;
                r.map_or_else(ToolOutput::error, |(p, total)| {
                    ToolOutput::ok(if append { format!("Appended {size} bytes to {p} (now {total} bytes).") } else { format!("Wrote {size} bytes to {p}.") })
                })
            }
            Tool::AttachFile { path, note } => {
                let r = self.attach(&path).await;
                self.line(ToolKind::AttachFile, &path, &r.as_ref().map(|(p, s)| format!("{p} ({s} bytes) attached")).map_err(Clone::clone)).await;
                match r {
                    Ok((p, size)) => {
                        let mut o = ToolOutput::ok(format!("Attached {p} ({size} bytes) to the chat."));
                        if let Some(n) = note {
                            o.text.push_str(&format!(" Note: {n}"));
                        }
                        return self.finish(call_id, o, None, Some(p)).await;
                    }
                    Err(m) => ToolOutput::error(m),
                }
            }
            Tool::OpenPath { target } => {
                let r = e.open_path(bot, &target).await.map_err(|err| err.message);
                self.line(ToolKind::OpenPath, &target, &r).await;
                r.map_or_else(ToolOutput::error, ToolOutput::ok)
            }
            Tool::LaunchApp { command } => {
                let r = e.launch_app(bot, &command).await.map_err(|err| err.message);
                self.line(ToolKind::LaunchApp, &command, &r).await;
                r.map_or_else(ToolOutput::error, ToolOutput::ok)
            }
            Tool::RequestTakeover { reason } => self.takeover(&reason, cancel).await,
            Tool::BrowserNavigate { url } => match e.browser_navigate(bot, &url).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
            Tool::BrowserSnapshot => match e.browser_snapshot(bot).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
            Tool::BrowserAct { actions } => match e.browser_act_batch(bot, actions).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
        };
        out.text = self.redactor.redact(&out.text);
        if out.is_error {
            self.check_computer().await;
        }
        let shot = match &out.image {
            Some(img) => self.save_shot(call_id, &img.data).await,
            None => None,
        };
        self.finish(call_id, out, shot, None).await
    }

    fn text_delta(&self, text: &str) {
        self.engine.emit(RunEvent::Delta { bot: self.bot_id(), run_id: self.run.id.clone(), text: self.redactor.redact(text) });
    }

    fn restart(&self, why: &str) {
        self.engine.emit(RunEvent::Restart { bot: self.bot_id(), run_id: self.run.id.clone(), why: self.redactor.redact(why) });
    }

    async fn note(&self, text: &str) {
        self.message("system", text).await;
    }

    async fn between_steps(&self, cancel: &CancellationToken) -> Option<String> {
        self.pause_if_asked(cancel).await
    }

    async fn assistant(&self, text: &str, calls: &[ToolCall]) {
        let id = self.message("assistant", text).await;
        for c in calls {
            let args = self.redactor.redact(&c.raw);
            let cid = format!("{}:{}", self.run.id, c.id);
            if let Err(e) = self.engine.inner.store.add_tool_call(&cid, &self.run.id, id, &c.name, &args, self.engine.now()).await {
                tracing::error!("could not store a tool call: {e}");
            }
            let call = ChatCall {
                id: cid,
                name: c.name.clone(),
                graphical: graphical(&c.name),
                arguments: args,
                status: "running",
                text: None,
                image: None,
                attachment: None,
            };
            self.engine.emit(RunEvent::Tool { bot: self.bot_id(), run_id: self.run.id.clone(), call });
        }
    }

    async fn usage(&self, call: &Usage) {
        let cost = self.prices.map(|p| p.cost(call));
        if let Err(e) = self.engine.inner.store.add_model_call(&self.run.id, call, cost, self.engine.now()).await {
            tracing::warn!(run = %self.run.id, "a model call's usage was not stored: {e}");
        }
        let run = {
            let mut total = self.usage.lock().unwrap();
            total.add(call);
            *total
        };
        let run_usd = self.prices.map(|p| p.cost(&run));
        self.engine.emit(RunEvent::Usage { bot: self.bot_id(), run_id: self.run.id.clone(), call: *call, run, run_usd });
    }

    async fn tool_result(&self, call: &ToolCall, r: &ToolResult) {
        // Results the host produced were stored by `finish`; calls refused before reaching the host
        // (malformed, unknown tool) are stored here.
        if !self.finished.lock().unwrap().contains(&call.id) {
            let out = ToolOutput { text: self.redactor.redact(&r.text), image: None, is_error: r.is_error };
            self.finish(&call.id, out, None, None).await;
        }
    }
}

impl RunHost {
    /// `write_file`: replaces the file, or adds to its end (the file may grow to
    /// `MAX_WRITE_BYTES` this way; it is read and written whole). Returns the path and the size.
    async fn write_file(&self, path: &str, content: String, append: bool) -> std::result::Result<(String, usize), String> {
        let (bot, max) = (self.bot.id.as_str(), botdesk_agent::tools::MAX_WRITE_BYTES);
        let mut data = Vec::new();
        if append {
            match self.engine.files_read(bot, path, max as u64).await {
                Ok(old) => data.extend_from_slice(&old),
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) if e.code == ErrorCode::TooLarge => {
                    return Err(format!("{path} is over {max} bytes: append to it with shell (e.g. cat >> {path}) instead. Nothing was written"))
                }
                Err(e) => return Err(e.message),
            }
            if data.len() + content.len() > max {
                return Err(format!(
                    "appending {} bytes would make {path} larger than {max} bytes: append to it with shell (e.g. cat >> {path}) instead. Nothing was written",
                    content.len()
                ));
            }
        }
        data.extend_from_slice(content.as_bytes());
        let total = data.len();
        let p = self.engine.files_write(bot, path, bytes::Bytes::from(data), false).await.map_err(|e| e.message)?;
        Ok((p, total))
    }

    /// Stores and broadcasts a tool call's result, and hands it back for the model.
    async fn finish(&self, call_id: &str, out: ToolOutput, image: Option<String>, attachment: Option<String>) -> ToolOutput {
        self.finished.lock().unwrap().insert(call_id.to_string());
        let cid = format!("{}:{}", self.run.id, call_id);
        let mut result = json!({ "text": out.text });
        if let Some(i) = &image {
            result["image"] = json!(i);
        }
        if let Some(a) = &attachment {
            result["attachment"] = json!(a);
        }
        if let Err(e) = self.engine.inner.store.finish_tool_call(&cid, &result.to_string(), out.is_error, self.engine.now()).await {
            tracing::error!("could not store a tool result: {e}");
        }
        let call = ChatCall {
            id: cid,
            name: String::new(),
            graphical: false,
            arguments: String::new(),
            status: if out.is_error { "error" } else { "done" },
            text: Some(out.text.clone()),
            image,
            attachment,
        };
        self.engine.emit(RunEvent::Tool { bot: self.bot_id(), run_id: self.run.id.clone(), call });
        out
    }

    /// The run waits for the person: status waiting_takeover until they release (finished or
    /// skipped), control expires (skipped) or the run is stopped.
    async fn takeover(&self, reason: &str, cancel: &CancellationToken) -> ToolOutput {
        if let Err(e) = self.wait_for_person().await {
            return self.err(e);
        }
        self.message("system", &format!("The bot needs you: {reason}")).await;
        self.engine.emit(RunEvent::Status {
            bot: self.bot_id(),
            run_id: self.run.id.clone(),
            status: RunStatus::WaitingTakeover,
            error: Some(self.redactor.redact(reason)),
            failure: None,
        });
        match self.until_handed_back(cancel, None).await {
            Ok(r) => match r.takeover_result.unwrap_or(TakeoverResult::Skipped) {
                TakeoverResult::Finished => ToolOutput::ok(format!(
                    "finished: the person did what you asked and handed the screen back.{} Look at the screen again before going on.",
                    said(&r)
                )),
                TakeoverResult::Skipped => ToolOutput::ok(format!(
                    "skipped: the person handed the screen back without doing it.{} Find another way or explain what is missing.",
                    said(&r)
                )),
            },
            Err(why) => ToolOutput::error(why),
        }
    }

    /// Moves the run to waiting_takeover, its lease extended for as long as control may last.
    async fn wait_for_person(&self) -> Result<()> {
        let lease = self.lease.lock().await.clone();
        let run = self.engine.inner.store.run(&self.run.id).await?;
        let (_, renewed) = self.engine.wait_for_takeover(&run, &lease).await?;
        *self.lease.lock().await = renewed;
        Ok(())
    }

    /// Waits while the run waits for the person; returns the run once they handed the screen
    /// back, or why it cannot go on (stopped, or ended while paused). A paused run (`unattended`
    /// set) ends if nobody holds its screen that long after the pause (the take that should have
    /// followed failed, or the person's control ended without a release reaching it).
    async fn until_handed_back(&self, cancel: &CancellationToken, unattended: Option<Duration>) -> std::result::Result<Run, String> {
        let since = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = cancel.cancelled() => return Err("the run was stopped while waiting for the person".into()),
            }
            match self.engine.inner.store.run(&self.run.id).await {
                Ok(r) if r.status == RunStatus::WaitingTakeover => {
                    if unattended.is_some_and(|limit| since.elapsed() >= limit) && matches!(self.engine.control_of(self.bot.id.as_str()).await, Ok(None)) {
                        // Control that lapsed ends the paused run with its own reason; else
                        // nobody took the screen at all.
                        if let Err(e) = self.engine.end_lapsed_control().await {
                            tracing::warn!("ending lapsed control: {e}");
                        }
                        let why = "paused, but nobody took the bot's screen for as long as control lasts";
                        let _ = self
                            .engine
                            .inner
                            .store
                            .transition_run(&self.run.id, RunStatus::WaitingTakeover, RunStatus::Cancelled, self.engine.now(), None, Some(why))
                            .await;
                    }
                }
                Ok(r) if r.status == RunStatus::Running => {
                    self.engine.emit(RunEvent::Status {
                        bot: self.bot_id(),
                        run_id: self.run.id.clone(),
                        status: RunStatus::Running,
                        error: None,
                        failure: None,
                    });
                    return Ok(r);
                }
                Ok(r) => return Err(format!("the run is {} now", r.status)),
                Err(e) => tracing::warn!("reading the run while waiting: {e}"),
            }
        }
    }

    /// Pause and take: at a step boundary, a run the person asked to pause waits for them; once
    /// they hand the screen back, the model is told for how long they had it and what they said.
    async fn pause_if_asked(&self, cancel: &CancellationToken) -> Option<String> {
        let run = self.engine.inner.store.run(&self.run.id).await.ok()?;
        if run.pause_requested_at.is_none() || run.status != RunStatus::Running || cancel.is_cancelled() {
            return None;
        }
        let paused = std::time::Instant::now();
        if let Err(e) = self.wait_for_person().await {
            tracing::warn!(run = %self.run.id, "could not pause the run: {e}");
            return None;
        }
        self.message("system", "Paused: the bot stopped between two steps and waits while you have its screen. Release hands it back and the task goes on.")
            .await;
        self.engine.emit(RunEvent::Status {
            bot: self.bot_id(),
            run_id: self.run.id.clone(),
            status: RunStatus::WaitingTakeover,
            error: Some("paused for you".into()),
            failure: None,
        });
        let unattended = Duration::from_millis(self.engine.policy().control_ttl.max(0) as u64);
        let r = match self.until_handed_back(cancel, Some(unattended)).await {
            Ok(r) => r,
            Err(why) => {
                // Stopped, or ended while paused (control expired): no further model call.
                tracing::info!(run = %self.run.id, "a paused run ends: {why}");
                self.stop.cancel();
                return None;
            }
        };
        let held = format_span(paused.elapsed());
        self.message("system", &format!("Resumed: you had the screen for {held}.{}", said(&r))).await;
        Some(format!(
            "The person paused you, took control of the screen for {held} and handed it back.{} The screen may have changed: look at it again before going on.",
            said(&r)
        ))
    }
}

/// The person's note at handback, as a sentence to append (empty without one).
fn said(r: &Run) -> String {
    match r.handback_note.as_deref().map(str::trim) {
        Some(n) if !n.is_empty() => format!(" Their note: \"{n}\"."),
        _ => String::new(),
    }
}

/// A span as a person says it: "45 s", "2 min 14 s", "1 h 3 min".
pub(crate) fn format_span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod span_tests {
    #[test]
    fn spans_read_as_a_person_says_them() {
        let f = |s| super::format_span(std::time::Duration::from_secs(s));
        assert_eq!([f(0), f(59), f(134), f(3599), f(3780)], ["0 s", "59 s", "2 min 14 s", "59 min 59 s", "1 h 3 min"]);
    }
}

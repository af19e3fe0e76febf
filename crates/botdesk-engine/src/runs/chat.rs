//! What front ends read of runs: the chat, the run events, usage and budgets, activity.

use super::*;

/// A tool call in the chat. `status` is running, done or error.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ChatCall {
    pub id: String,
    pub name: String,
    /// The tool works on the bot's screen or browser (the app shows the screen while it runs).
    pub graphical: bool,
    pub arguments: String,
    pub status: CallStatus,
    pub text: Option<String>,
    /// A screenshot, relative to the data directory (`shots/…`).
    pub image: Option<String>,
    /// A file the bot attached (workspace path).
    pub attachment: Option<String>,
    /// Where its actions landed on the screen, and when (screen-acting calls).
    pub acted: Option<crate::replay::Acted>,
}

/// One chat message: the person's task, the bot's reply (with its tool calls) or a note.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ChatItem {
    pub id: i64,
    pub run_id: String,
    pub role: MessageRole,
    pub text: String,
    pub calls: Vec<ChatCall>,
    pub created_at: i64,
    /// On the last message of a run: what the run's model calls cost so far, in tokens and (when
    /// its model's prices are known) dollars.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub cost_usd: Option<f64>,
    /// On the last message of a failed run: what it failed of.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub failure: Option<RunFailure>,
    /// On the last message of a run that wrote or removed files in the bot's folder: how many
    /// (its changes can be undone, `Engine::undo_run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub files_changed: Option<u64>,
}

/// What happens in runs, for front ends. `bot` is the bot id.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
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
    /// The run asks the person (a safety check on the model's next action): it waits for
    /// `answer_question`.
    Question {
        bot: String,
        run_id: String,
        id: i64,
        kind: String,
        question: String,
    },
    /// The question was answered (or closed, the run stopped).
    Answered {
        bot: String,
        run_id: String,
        id: i64,
        allow: bool,
    },
    /// The next model call waits `seconds` first, for `why` ("the rate limit", "a retry after an
    /// error"); the chat says so until something else comes.
    Waiting {
        bot: String,
        run_id: String,
        seconds: u64,
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
    /// The run's end was saved as a version: `files_changed` paths of the bot's folder were
    /// written or removed by the run (its last message offers to undo them when not zero).
    Saved {
        bot: String,
        run_id: String,
        files_changed: u64,
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
            | RunEvent::Waiting { bot, .. }
            | RunEvent::Question { bot, .. }
            | RunEvent::Answered { bot, .. }
            | RunEvent::Usage { bot, .. }
            | RunEvent::Saved { bot, .. } => bot,
        }
    }
}

pub(super) fn graphical(tool: &str) -> bool {
    ToolKind::named(tool).is_some_and(|k| k.graphical())
}

pub(super) fn call_view(row: &botdesk_store::ToolCallRow) -> ChatCall {
    let result: Option<serde_json::Value> = row.result.as_deref().and_then(|r| serde_json::from_str(r).ok());
    let s = |k: &str| result.as_ref().and_then(|r| r[k].as_str()).map(str::to_string);
    ChatCall {
        id: row.id.clone(),
        name: row.name.clone(),
        graphical: graphical(&row.name),
        arguments: row.arguments.clone(),
        status: if row.result.is_none() {
            CallStatus::Running
        } else if row.is_error {
            CallStatus::Error
        } else {
            CallStatus::Done
        },
        text: s("text"),
        image: s("image"),
        attachment: s("attachment"),
        acted: result.as_ref().and_then(|r| serde_json::from_value(r["acted"].clone()).ok()),
    }
}

impl Engine {
    /// Follow every run of this process.
    pub fn run_events(&self) -> tokio::sync::broadcast::Receiver<RunEvent> {
        self.inner.runs.events.subscribe()
    }

    pub(crate) fn emit(&self, ev: RunEvent) {
        let _ = self.inner.runs.events.send(ev);
    }

    /// Cancels a run of this process at once (its command gets exit 130). Runs of another process
    /// see the `cancelled` status at their next check.
    pub(crate) fn cancel_local_run(&self, run_id: &str) {
        if let Some(t) = self.inner.runs.cancels.lock().unwrap().get(run_id) {
            t.cancel();
        }
    }

    /// A bot's chat, oldest first (the latest `limit` messages).
    pub async fn chat(&self, bot: &crate::BotRef, limit: i64) -> Result<Vec<ChatItem>> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
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
                    files_changed: None,
                }
            })
            .collect();
        // Each run's cost, and what a failed one failed of, go on its last message.
        let usages = self.inner.store.run_usages(&bot.id).await?;
        let failures = self.inner.store.run_failures(&bot.id).await?;
        let undoable = self.inner.store.undoable_runs(&bot.id).await?;
        for i in 0..items.len() {
            if items.get(i + 1).is_none_or(|next| next.run_id != items[i].run_id) {
                if let Some(&(u, usd)) = usages.get(&items[i].run_id) {
                    (items[i].usage, items[i].cost_usd) = (Some(u), usd);
                }
                items[i].failure = failures.get(&items[i].run_id).copied();
                items[i].files_changed = undoable.get(&items[i].run_id).map(|&n| n as u64);
            }
        }
        Ok(items)
    }

    /// The bot's latest [`HISTORY_RUNS`] runs in the model's own form, within the run's context
    /// rules: each task, its tool calls with their results collapsed to a line each (screenshots
    /// are not kept), notes such as a failure, and its answer.
    pub(super) async fn earlier_runs(&self, bot: &botdesk_core::BotId) -> Result<Vec<Message>> {
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
            match m.role {
                MessageRole::User => out.push(Message::user(text)),
                MessageRole::System => out.push(Message::user(format!("(Note from Botdesk: {text})"))),
                MessageRole::Assistant => {
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

    /// A bot's latest runs, newest first, with what each cost.
    pub async fn runs_of(&self, bot: &crate::BotRef, limit: u32) -> Result<Vec<RunSummary>> {
        self.summaries(&bot.id, None, limit).await
    }

    /// [`Self::runs_of`], or only the run with id `only` (none when the bot has no such run).
    pub(super) async fn summaries(&self, bot: &BotId, only: Option<&str>, limit: u32) -> Result<Vec<RunSummary>> {
        let (bot, _) = self.bot_and_computer(bot).await?;
        let usages = self.inner.store.run_usages(&bot.id).await?;
        let now = self.now();
        let runs = self.inner.store.runs_of_bot(&bot.id, only, i64::from(limit)).await?;
        Ok(runs
            .into_iter()
            .map(|(run, started_at, changed_at)| {
                let ended_at = run.status.is_terminal().then_some(changed_at);
                let (usage, cost_usd) = usages.get(&run.id).cloned().unwrap_or_default();
                let recording_bytes = self.recording(&run.id).map(|(m, _)| m.bytes);
                RunSummary {
                    recording_bytes,
                    duration_ms: (ended_at.unwrap_or(now) - started_at).max(0),
                    id: run.id,
                    status: run.status,
                    task: run.task,
                    started_at,
                    ended_at,
                    usage,
                    cost_usd,
                    failure: run.failure,
                    error: run.error,
                }
            })
            .collect())
    }

    /// What all of a bot's runs cost: tokens, dollars over the calls whose prices were known, and
    /// how many calls had none.
    pub async fn bot_usage(&self, bot: &crate::BotRef) -> Result<(Usage, f64, u64)> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        Ok(self.inner.store.bot_usage(&bot.id).await?)
    }

    /// What a bot's runs may spend each.
    pub async fn bot_budget(&self, bot: &crate::BotRef) -> Result<botdesk_core::Budget> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        Ok(self.inner.store.bot_budget(&bot.id).await?)
    }

    /// Sets what a bot's runs may spend each: tokens (None: the default) and dollars (None: no limit).
    pub async fn set_bot_budget(&self, bot: &crate::BotRef, tokens: Option<u64>, usd: Option<f64>) -> Result<botdesk_core::Budget> {
        if tokens == Some(0) || usd.is_some_and(|u| !(u.is_finite() && u > 0.0)) {
            return Err(EngineError::invalid("a budget is a positive number of tokens or dollars"));
        }
        let (b, _) = self.bot_and_computer(&bot.id).await?;
        self.inner.store.set_bot_budget(&b.id, tokens, usd).await?;
        self.bot_budget(bot).await
    }

    /// A bot's latest `limit` activity entries, oldest first (what the Terminal pane shows).
    pub async fn latest_activity(&self, bot: &crate::BotRef, limit: i64) -> Result<Vec<botdesk_store::ActivityRow>> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
        self.refusals_for_reader(&bot).await;
        Ok(self.inner.store.latest_activity(&bot.id, limit).await?)
    }

    /// A bot's activity entries after `after` (ids grow), oldest first.
    pub async fn activity(&self, bot: &crate::BotRef, after: i64, limit: i64) -> Result<Vec<botdesk_store::ActivityRow>> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
        self.refusals_for_reader(&bot).await;
        Ok(self.inner.store.activity_of(&bot.id, after, limit).await?)
    }
}

/// One run as `botdesk runs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct RunSummary {
    pub id: String,
    pub status: RunStatus,
    pub task: String,
    /// When it was queued, and when it ended (None while it goes on); ms since the epoch.
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// Until it ended, or until now.
    pub duration_ms: i64,
    /// Its model calls' tokens, and their cost when every call's prices were known.
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub failure: Option<RunFailure>,
    pub error: Option<String>,
    /// The size of its screen recording, when it has one.
    pub recording_bytes: Option<u64>,
}

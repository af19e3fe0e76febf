//! A client outside the app (an MCP client) driving a bot with the tools a run's model has.
//!
//! A session is a run whose task names its driver ("Driven by MCP: claude-code"). It holds the
//! bot's execution lease from its first call until the client leaves or stays idle, so a run, the
//! person and a client never act on one bot at once: while one holds it, opening a session is
//! `Busy`, saying who. Every call goes through the run's own host, with the same checks, limits,
//! chat records and activity as a model's call, in the screen's own pixels. Stop ends the session
//! (and what it started); Pause and take control pauses it between calls, and a call made while
//! the person has the screen is refused, saying so.

use super::*;

/// The bot's execution lease held for a client, with the calls it makes.
pub struct ClientSession {
    host: Arc<RunHost>,
    /// One call at a time, and no pause in the middle of one.
    turn: Arc<tokio::sync::Mutex<Turn>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Turn {
    calls: u64,
    /// This session moved its run to waiting for the person (Pause and take control).
    paused_at: Option<std::time::Instant>,
}

/// How a session's run task begins, before the name of who drives it.
pub(crate) const DRIVEN_BY: &str = "Driven by ";

/// What a session's call answers: the tool's output, as a run's model would get it.
pub type SessionOutput = ToolOutput;

impl Engine {
    /// Takes `bot`'s execution lease for `driver` (e.g. "MCP: claude-code"). `Busy` while a run
    /// works, another client drives it or the person has its screen, saying which.
    pub async fn open_client_session(&self, bot: &BotId, driver: &str) -> Result<ClientSession> {
        let (bot, _) = self.bot_and_computer(bot).await?;
        self.recover_runs().await?;
        let run = self.create_run(&bot.id, &format!("{DRIVEN_BY}{driver}")).await?;
        self.own_run(&run.id).await?;
        let (run, lease) = match self.lease_run(&run.id).await {
            Ok(x) => x,
            Err(e) => {
                let _ = self.fail_queued_run(&run.id, &e.message).await;
                return Err(self.who_holds(&bot, e).await);
            }
        };
        let run = self.begin_run(&run).await?;
        let cancel = CancellationToken::new();
        self.inner.runs.cancels.lock().unwrap().insert(run.id.clone(), cancel.clone());
        let host = Arc::new(RunHost {
            engine: self.clone(),
            bot: bot.clone(),
            me: crate::BotRef::of(&bot),
            run: run.clone(),
            lease: Arc::new(tokio::sync::Mutex::new(lease)),
            redactor: redactor(None, self.login_secrets(&bot.id).await),
            finished: Default::default(),
            fatal: Default::default(),
            stop: cancel.clone(),
            usage: Default::default(),
            coords: action::CoordSpace::Pixels,
            prices: None,
            page_urls: false,
            mcp: Default::default(),
            recorder: crate::recording::Recorder::new(self, &bot, &run.id),
            acted: Default::default(),
            spend_asked: Default::default(),
            watching: Default::default(),
            desk: Default::default(),
        });
        self.mark_run_start(&bot, &run.id).await;
        host.message(MessageRole::User, &run.task).await;
        self.emit(RunEvent::Status { bot: bot.id.to_string(), run_id: run.id.clone(), status: RunStatus::Running, error: None, failure: None });
        let turn = Arc::new(tokio::sync::Mutex::new(Turn::default()));
        let tasks = vec![
            tokio::spawn(watch(self.clone(), run.clone(), host.lease.clone(), cancel.clone())),
            tokio::spawn(pause_between_calls(host.clone(), turn.clone())),
        ];
        Ok(ClientSession { host, turn, tasks })
    }

    /// A `Busy` refusal of a session, saying who holds the bot.
    async fn who_holds(&self, bot: &botdesk_store::Bot, e: EngineError) -> EngineError {
        if e.code != ErrorCode::Busy {
            return e;
        }
        if let Ok(Some(_)) = self.control_of(&bot.id).await {
            return EngineError::new(ErrorCode::Busy, format!("the person has {}'s screen; try again once they hand it back", bot.name));
        }
        let runs = self.inner.store.active_runs(&bot.id).await.unwrap_or_default();
        match runs.iter().find(|r| r.status != RunStatus::Queued) {
            Some(r) => {
                let what: String = r.task.chars().take(80).collect();
                EngineError::new(
                    ErrorCode::Busy,
                    format!("{} is busy: run {} holds it (\"{what}\"); it can be stopped in the app or with `botdesk bot stop {}`", bot.name, r.id, bot.name),
                )
            }
            None => e,
        }
    }
}

impl ClientSession {
    pub fn run_id(&self) -> &str {
        &self.host.run.id
    }

    /// Whether the session still holds the bot (not stopped, not ended).
    pub async fn is_live(&self) -> bool {
        !self.host.stop.is_cancelled() && self.host.engine.inner.store.run(&self.host.run.id).await.is_ok_and(|r| !r.status.is_terminal())
    }

    /// One call of a tool a run's model has (`computer_observe`, `computer_act`, `shell`, …, with
    /// the same arguments). A malformed call, or one made while the person has the screen, is an
    /// error output; nothing reaches the computer.
    pub async fn call(&self, tool: &str, input: serde_json::Value, cancel: &CancellationToken) -> SessionOutput {
        let mut turn = self.turn.lock().await;
        let run = match self.host.engine.inner.store.run(&self.host.run.id).await {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let bot = &self.host.bot.name;
        if run.status.is_terminal() || self.host.stop.is_cancelled() {
            return ToolOutput::error(format!("this session with {bot} ended ({}); call again to start another", run.error.as_deref().unwrap_or("stopped")));
        }
        if run.status == RunStatus::Running && run.pause_requested_at.is_some() {
            pause(&self.host, &mut turn).await;
        }
        let run = self.host.engine.inner.store.run(&self.host.run.id).await.unwrap_or(run);
        if run.status == RunStatus::WaitingTakeover {
            return ToolOutput::error(format!("paused: the person took control of {bot}'s screen (Pause and take control); call again once they hand it back"));
        }
        let resumed = turn.paused_at.take().map(|at| {
            let note = run.handback_note.as_deref().map(str::trim).filter(|n| !n.is_empty()).map(|n| format!(" Their note: \"{n}\".")).unwrap_or_default();
            format!("The person had the screen for {} and handed it back.{note} Look at the screen again before going on.\n", format_span(at.elapsed()))
        });
        turn.calls += 1;
        let call = ToolCall { id: format!("c{}", turn.calls), name: tool.to_string(), raw: input.to_string(), input, from_text: false };
        self.host.assistant("", std::slice::from_ref(&call)).await;
        let mut out = match botdesk_agent::tools::parse(&call) {
            Ok(t) => self.host.execute(&call.id, t, cancel).await,
            Err(why) => self.host.finish(&call.id, ToolOutput::error(why), None, None).await,
        };
        if let Some(r) = resumed {
            out.text = format!("{r}{}", out.text);
        }
        out
    }

    /// Ends the session: the run completes, the lease is freed and the computer checkpointed (what
    /// "Undo this run's file changes" goes back to).
    pub async fn close(self) {
        let _turn = self.turn.lock().await;
        for t in &self.tasks {
            t.abort();
        }
        let engine = &self.host.engine;
        let run = &self.host.run;
        engine.inner.runs.cancels.lock().unwrap().remove(&run.id);
        self.host.recorder.finish().await;
        if self.host.watching.load(std::sync::atomic::Ordering::SeqCst) {
            self.host.stop_watching().await;
        }
        let lease = self.host.lease.lock().await.clone();
        let finished = match engine.inner.store.run(&run.id).await {
            Ok(current) if current.status.is_terminal() => {
                let _ = engine.inner.store.release_execution(&lease).await;
                current
            }
            _ => match engine.finish_run(run, &lease, RunStatus::Completed, None, None).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(run = %run.id, "ending a client's session: {e}");
                    return;
                }
            },
        };
        engine.forget_run_start(&self.host.bot.computer_id, &run.id);
        engine.save_after_run(&self.host.bot, &run.id, &self.host).await;
        engine.emit(RunEvent::Status {
            bot: self.host.bot_id(),
            run_id: run.id.clone(),
            status: finished.status,
            error: finished.error.clone(),
            failure: finished.failure,
        });
    }
}

/// Moves the session's run to waiting for the person, as a run does at a step boundary.
async fn pause(host: &RunHost, turn: &mut Turn) {
    if let Err(e) = host.wait_for_person().await {
        tracing::warn!(run = %host.run.id, "could not pause a client's session: {e}");
        return;
    }
    turn.paused_at = Some(std::time::Instant::now());
    host.message(MessageRole::System, "Paused: the client's next call waits for you to hand the screen back.").await;
    host.engine.emit(RunEvent::Status {
        bot: host.bot_id(),
        run_id: host.run.id.clone(),
        status: RunStatus::WaitingTakeover,
        error: Some(super::PAUSED_FOR_YOU.into()),
        failure: None,
    });
}

/// Between calls, a pause the person asked for takes effect at once (a run's would at its next
/// step boundary; a client may not call again for a long time).
async fn pause_between_calls(host: Arc<RunHost>, turn: Arc<tokio::sync::Mutex<Turn>>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(mut t) = turn.try_lock() else { continue };
        match host.engine.inner.store.run(&host.run.id).await {
            Ok(r) if r.status.is_terminal() => return,
            Ok(r) if r.status == RunStatus::Running && r.pause_requested_at.is_some() => pause(&host, &mut t).await,
            _ => {}
        }
    }
}

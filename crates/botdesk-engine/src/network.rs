//! Each bot's network policy: the person sets it (CLI, app); it is kept with the bot, sent to
//! its computer whenever the computer starts and at once when it changes (the computer enforces
//! it where the bot cannot reach). The connections it refused are taken into the bot's activity:
//! by a run after each tool call (and into its tool results, so the model knows why a page or a
//! command failed), otherwise when the activity is read.

use botdesk_core::{BotNetwork, ComputerRef, NetPolicy, NetRefusal};

use crate::runs::RunEvent;
use crate::{bots::user, ActivityStatus, Engine, EngineError, Result};

/// The activity entries of refusals have this kind.
pub const NETWORK_ACTIVITY: &str = "network";

impl Engine {
    /// A bot's network policy.
    pub async fn bot_network(&self, bot: &crate::BotRef) -> Result<NetPolicy> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        parse_stored(&self.inner.store.bot_network(&bot.id).await?)
    }

    /// Sets a bot's network policy. On a running computer it holds within a second, for the
    /// connections already open too; otherwise from the computer's next start.
    pub async fn set_bot_network(&self, bot: &crate::BotRef, policy: NetPolicy) -> Result<NetPolicy> {
        policy.validate().map_err(EngineError::invalid)?;
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        let json = serde_json::to_string(&policy).expect("a policy serializes");
        self.inner.store.set_bot_network(&bot.id, &json).await?;
        tracing::info!(bot = %bot.id, "network policy: {policy}");
        // The change is in the bot's activity, beside what the policy refuses.
        self.network_activity(&bot, None, &format!("policy set: {policy}"), ActivityStatus::Done, self.now()).await;
        if self.inner.provider.status(&computer.cref()).await.is_ok_and(|s| s == botdesk_core::MachineStatus::Running) {
            self.apply_network(&computer, &computer.cref()).await?;
        }
        Ok(policy)
    }

    /// Sends the computer every one of its bots' policies.
    pub(crate) async fn apply_network(&self, computer: &botdesk_store::Computer, cref: &ComputerRef) -> Result<()> {
        let mut bots = vec![];
        for (bot, uid, stored) in self.inner.store.networks_on(&computer.id).await? {
            let policy = parse_stored(&stored).map_err(|e| e.context(format!("the network policy of bot {bot}")))?;
            bots.push(BotNetwork { uid: botdesk_core::BotUser::on(computer.scope, uid).uid, policy });
        }
        self.inner.provider.set_network(cref, &bots, &botdesk_core::CallCtx::default()).await?;
        Ok(())
    }

    /// Takes the computer's refusals of `bot` not yet taken into its activity (for `run`, when
    /// in one); returns their lines. Nothing when the computer does not answer: they are taken
    /// next time, or were lost with the computer's services.
    pub(crate) async fn take_refusals(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, run: Option<&str>) -> Vec<String> {
        let taken = self.refusals_of(bot, computer).await;
        self.record_refusals(bot, run, taken).await
    }

    /// The refusals taken, as entries of the bot's activity; returns their lines.
    pub(crate) async fn record_refusals(&self, bot: &botdesk_store::Bot, run: Option<&str>, taken: Result<Vec<NetRefusal>>) -> Vec<String> {
        match taken {
            Ok(refused) => {
                let mut lines = vec![];
                for r in refused {
                    let line = r.line();
                    self.network_activity(bot, run, &line, ActivityStatus::Failed, r.at).await;
                    lines.push(line);
                }
                lines
            }
            Err(e) => {
                tracing::debug!(bot = %bot.id, "the computer's refusals were not read: {e}");
                vec![]
            }
        }
    }

    /// Before the activity is read: the refusals of commands run outside a run (`botdesk exec`,
    /// so that no command pays for the read), unless a run of the bot is going on (its host
    /// takes them into the run, after each tool call).
    pub(crate) async fn refusals_for_reader(&self, bot: &botdesk_store::Bot) {
        if self.inner.store.active_runs(&bot.id).await.map_or(true, |runs| !runs.is_empty()) {
            return;
        }
        if let Ok(computer) = self.inner.store.computer(bot.computer_id.as_str()).await {
            self.take_refusals(bot, &computer, None).await;
        }
    }

    /// An activity entry of the network policy (a refusal, a change), shown at once.
    async fn network_activity(&self, bot: &botdesk_store::Bot, run: Option<&str>, line: &str, status: ActivityStatus, at: i64) {
        self.record_activity(bot, run, NETWORK_ACTIVITY, line, status, at).await
    }

    /// A guardrail's decision (a login saved or used, an approval asked and answered) in the
    /// bot's activity, as `kind`.
    pub(crate) async fn guardrail_activity(&self, bot: &botdesk_store::Bot, run: Option<&str>, kind: &str, line: &str) {
        self.record_activity(bot, run, kind, line, ActivityStatus::Done, self.now()).await
    }

    async fn record_activity(&self, bot: &botdesk_store::Bot, run: Option<&str>, kind: &str, line: &str, status: ActivityStatus, at: i64) {
        match self.inner.store.add_activity(&bot.id, run, kind, line, status, at).await {
            Ok(id) => {
                if let Ok(rows) = self.inner.store.activity_of(&bot.id, id - 1, 1).await {
                    for entry in rows {
                        self.emit(RunEvent::Activity { bot: bot.id.to_string(), entry });
                    }
                }
            }
            Err(e) => tracing::warn!("a guardrail activity entry was lost: {e}"),
        }
    }

    /// [`Engine::take_refusals`] in a run, on the bot's computer.
    pub(crate) async fn take_run_refusals(&self, bot: &botdesk_store::Bot, run: &str) -> Vec<String> {
        match self.inner.store.computer(bot.computer_id.as_str()).await {
            Ok(computer) => self.take_refusals(bot, &computer, Some(run)).await,
            Err(_) => vec![],
        }
    }

    async fn refusals_of(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer) -> Result<Vec<NetRefusal>> {
        let (cref, who) = (computer.cref(), user(bot, computer));
        let cursor = self.inner.store.net_cursor(&bot.id).await?;
        let answer = self.inner.provider.network_refusals(&cref, who, cursor.1).await?;
        self.refusals_answered(&bot.id, (&cref, who), cursor, answer).await
    }

    /// The refusals of an answer read after the bot's `cursor` (alone or with an action batch),
    /// moving the cursor past them: read again from the start when the computer's services
    /// started anew since (their numbers count from 0 again).
    pub(crate) async fn refusals_answered(
        &self,
        bot: &botdesk_core::BotId,
        (cref, who): (&ComputerRef, botdesk_core::BotUser),
        (boot, seen): (String, u64),
        mut answer: botdesk_core::NetRefusals,
    ) -> Result<Vec<NetRefusal>> {
        if answer.boot != boot && seen > 0 {
            answer = self.inner.provider.network_refusals(cref, who, 0).await?;
        }
        let last = answer.refusals.last().map(|r| r.seq);
        let to = match last {
            Some(seq) => seq,
            None if answer.boot == boot => return Ok(vec![]),
            None => 0,
        };
        // Another process (the app beside the CLI) that moved the cursor first takes them.
        if !self.inner.store.advance_net_cursor(bot, (&boot, seen), (&answer.boot, to)).await? {
            return Ok(vec![]);
        }
        Ok(answer.refusals)
    }
}

fn parse_stored(stored: &str) -> Result<NetPolicy> {
    let policy: NetPolicy = serde_json::from_str(stored).map_err(|e| EngineError::invalid(format!("a stored network policy does not read: {e}")))?;
    policy.validate().map_err(EngineError::invalid)?;
    Ok(policy)
}

//! What a bot must ask the person before doing (its approvals): the person sets them (CLI, app);
//! a run asks at the action and waits for the answer (see `runs/approve.rs`). Downloads, uploads,
//! forms and new domains are held in the bot's browser by its computer (the engine tells it what
//! to watch for during a run); commands and spend are checked here, before they happen.

use botdesk_core::{ApprovalKind, Approvals, PendingApproval};

use crate::{Engine, EngineError, Result};

/// The activity entries of approvals (asked and answered, and the policy set) have this kind.
pub const APPROVAL_ACTIVITY: &str = "approval";

fn parse_stored(json: &str) -> Result<Approvals> {
    let mut a: Approvals = serde_json::from_str(json).map_err(|e| EngineError::invalid(format!("the stored approvals are not valid ({e})")))?;
    a.normalize().map_err(EngineError::invalid)?;
    Ok(a)
}

impl Engine {
    /// A bot's approvals.
    pub async fn bot_approvals(&self, bot: &crate::BotRef) -> Result<Approvals> {
        let b = self.inner.store.bot(bot.id.as_str()).await?;
        self.approvals_of(&b.id).await
    }

    pub(crate) async fn approvals_of(&self, bot: &botdesk_core::BotId) -> Result<Approvals> {
        parse_stored(&self.inner.store.bot_approvals(bot).await?)
    }

    /// Sets what a bot must ask first (with the answers given "always"); it holds from its runs'
    /// next action on.
    pub async fn set_bot_approvals(&self, bot: &crate::BotRef, mut approvals: Approvals) -> Result<Approvals> {
        let b = self.inner.store.bot(bot.id.as_str()).await?;
        approvals.normalize().map_err(EngineError::invalid)?;
        self.store_approvals(&b, &approvals).await?;
        self.guardrail_activity(&b, None, APPROVAL_ACTIVITY, &format!("approvals set: {approvals}")).await;
        Ok(approvals)
    }

    async fn store_approvals(&self, bot: &botdesk_store::Bot, approvals: &Approvals) -> Result<()> {
        let json = serde_json::to_string(approvals).expect("approvals serialize");
        Ok(self.inner.store.set_bot_approvals(&bot.id, &json).await?)
    }

    /// Remembers "Always for this site" (from a run's question).
    pub(crate) async fn allow_always(&self, bot: &botdesk_store::Bot, kind: ApprovalKind, host: &str) -> Result<Approvals> {
        let mut a = self.approvals_of(&bot.id).await?;
        a.allow_always(kind, host);
        a.normalize().map_err(EngineError::invalid)?;
        self.store_approvals(bot, &a).await?;
        Ok(a)
    }

    /// Has the computer watch the bot's browser for what `policy` asks about (None: stop), and
    /// returns what waits for the person's answer now. The bot's desktop opens if it is not.
    pub(crate) async fn watch_browser(&self, bot: &botdesk_store::Bot, policy: Option<&Approvals>) -> Result<Vec<PendingApproval>> {
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await?;
        let slot = match policy {
            Some(_) => self.open_desktop_of(bot, &computer).await?.slot,
            None => match self.display_of(&computer.id, &bot.id).await? {
                Some(slot) => slot,
                None => return Ok(vec![]),
            },
        };
        Ok(self.inner.provider.watch_browser(&computer.cref(), slot, policy).await?)
    }

    /// Lets what the bot's browser holds (by its number) go on, or refuses it.
    pub(crate) async fn answer_browser(&self, bot: &botdesk_store::Bot, id: u64, allow: bool) -> Result<bool> {
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await?;
        let Some(slot) = self.display_of(&computer.id, &bot.id).await? else { return Ok(false) };
        Ok(self.inner.provider.answer_browser(&computer.cref(), slot, id, allow).await?)
    }
}

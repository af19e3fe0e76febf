//! Bots: making, listing and removing them, and each bot's state as front ends show it, computed
//! from the shared database (so a run or a takeover started by another process shows up too).

use botdesk_core::*;
use botdesk_store::NewBot;
use serde::Serialize;

use crate::{dto, Engine, EngineError, Result};

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
    /// The run waits for the person's answer to a question (a safety check).
    AsksYou,
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
    pub id: BotId,
    pub name: String,
    pub computer: ComputerBrief,
    pub model: Option<String>,
    pub instructions: String,
    /// The bot's own folder in the workspace (`bots/<id>` on a Team computer, `.` on a Private one).
    pub folder: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ComputerBrief {
    pub id: ComputerId,
    pub name: String,
    pub scope: ComputerScope,
    /// The Docker host it runs on (`local`: this machine).
    pub host: String,
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

/// Whom `bot` runs as on `computer` (its own uid on a Team computer).
pub(crate) fn user(bot: &botdesk_store::Bot, computer: &botdesk_store::Computer) -> BotUser {
    BotUser::on(computer.scope, bot.uid)
}

/// A call for `bot` on `computer`, resolved once: the bot, and whom it runs as there.
pub(crate) fn bot_ctx(bot: &botdesk_store::Bot, computer: &botdesk_store::Computer) -> CallCtx {
    CallCtx::for_bot(&bot.id, user(bot, computer))
}

/// A bot resolved once, where a call comes in (a CLI or app command, an MCP call, a run's start):
/// what the engine's per-bot calls take in place of a name. It names the bot by id, and the
/// computer it was on when resolved: a call that finds the bot's desktop there looks no further;
/// anything else reads the bot again by its id (it may have moved to another computer since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotRef {
    pub id: BotId,
    pub name: String,
    pub computer: ComputerId,
}

impl BotRef {
    pub(crate) fn of(bot: &botdesk_store::Bot) -> BotRef {
        BotRef { id: bot.id.clone(), name: bot.name.clone(), computer: bot.computer_id.clone() }
    }
}

impl Engine {
    /// Resolves a bot's name or id (one read): what the per-bot calls take.
    pub async fn bot_ref(&self, name_or_id: &str) -> Result<BotRef> {
        Ok(BotRef::of(&self.inner.store.bot(name_or_id).await?))
    }
}

impl Engine {
    /// Whom a bot runs as on a computer, looked up; uid 1000 when either is gone (what it left
    /// running then belongs to a Private computer, or to nobody).
    pub(crate) async fn user_of(&self, bot: &BotId, computer: &ComputerId) -> BotUser {
        match (self.inner.store.bot(bot.as_str()).await, self.inner.store.computer(computer.as_str()).await) {
            (Ok(b), Ok(c)) => user(&b, &c),
            _ => BotUser::PRIVATE,
        }
    }

    /// Gives the computer's home its owners (see `ComputerProvider::set_owners`): `all` after a
    /// load (which writes as root); otherwise its top folders, made when missing.
    pub(crate) async fn set_home_owners(&self, computer: &botdesk_store::Computer, cref: &ComputerRef, all: bool) -> Result<()> {
        self.set_home_owners_with(computer, cref, all, None).await
    }

    /// [`Engine::set_home_owners`], with a bot arriving there (a switch: not on it yet).
    pub(crate) async fn set_home_owners_with(
        &self,
        computer: &botdesk_store::Computer,
        cref: &ComputerRef,
        all: bool,
        arriving: Option<FolderOwner>,
    ) -> Result<()> {
        let bots = match computer.scope {
            ComputerScope::Team => {
                let mut bots: Vec<FolderOwner> =
                    self.inner.store.bots_on(&computer.id).await?.into_iter().map(|b| FolderOwner { bot: b.id, uid: b.uid }).collect();
                bots.extend(arriving.filter(|a| !bots.iter().any(|b| b.bot == a.bot)));
                bots
            }
            ComputerScope::Private => vec![],
        };
        let owners = HomeOwners { scope: computer.scope, bots, all };
        Ok(self.inner.provider.set_owners(cref, &owners, &CallCtx::default()).await?)
    }

    /// A new bot on this machine's engine.
    pub async fn create_bot(&self, name: &str, scope: ComputerScope, model: Option<&str>, instructions: &str) -> Result<BotView> {
        self.create_bot_on(name, scope, HostName::LOCAL, model, instructions).await
    }

    /// A new bot whose computer is on `host` (`local`, or a host of `botdesk host add`): the Team
    /// computer of that host, or a Private computer there.
    pub async fn create_bot_on(&self, name: &str, scope: ComputerScope, host: &str, model: Option<&str>, instructions: &str) -> Result<BotView> {
        check_bot_name(name)?;
        if let Some(m) = model {
            self.inner.store.model(m).await?; // a bot names a model that exists
        }
        if host != HostName::LOCAL {
            self.inner.store.host(host).await?; // a host that was added
        }
        let new = NewBot { name, scope, model, instructions, provider: self.inner.provider.kind(), host: HostName::new(host) };
        let (bot, computer) = self.inner.store.create_bot(new, self.now()).await?;
        // It may have taken the spare computer.
        self.inner.spare_wanted.notify_one();
        // A Team computer that is already up gets the new bot's folder now (whichever process
        // started it); otherwise on its next start.
        // (A start under way makes it after recording `running`: see `bring_up`.)
        if computer.scope == ComputerScope::Team && self.stored_state(&computer.id).await? == ComputerState::Running {
            if let Err(e) = self.set_home_owners(&computer, &computer.cref(), false).await {
                // Recorded as not running, the next use of the computer prepares it again (and
                // makes the folder); the container itself is left as it is.
                tracing::info!(bot = %bot.id, "the new bot's folder waits for the computer's next preparation: {e}");
                self.forget_ready(&computer.id).await;
                let _ = self.swap(&computer.id, ComputerState::Running, ComputerState::Stopped, self.now()).await;
            }
        }
        Ok(view(bot, &computer))
    }

    /// Changes a bot's name or its model (its next run uses the new model; a run under way keeps
    /// the one it started with). Returns the bot as it is now.
    pub async fn set_bot(&self, bot: &crate::BotRef, name: Option<&str>, model: Option<&str>) -> Result<BotView> {
        let (b, _) = self.bot_and_computer(&bot.id).await?;
        if let Some(m) = model {
            self.inner.store.model(m).await?; // a model that exists
        }
        if let Some(n) = name {
            check_bot_name(n)?;
        }
        if let Some(m) = model.filter(|m| b.model.as_deref() != Some(*m)) {
            self.inner.store.set_bot_model(&b.id, m).await?;
            tracing::info!(bot = %b.id, "the bot's model is now {m}");
        }
        if let Some(n) = name.filter(|n| *n != b.name) {
            self.inner.store.rename_bot(&b.id, n).await?;
            tracing::info!(bot = %b.id, "the bot is now named {n:?}");
        }
        self.bot(b.id.as_str()).await
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
            let asks = !runs.is_empty() && self.inner.store.open_question(&b.id).await?.is_some_and(|q| runs.iter().any(|r| r.id == q.run_id));
            let status = if control.is_some() {
                BotStatus::YouHaveControl
            } else if asks || runs.iter().any(|r| r.status == RunStatus::WaitingTakeover) {
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
                _ if asks => RunHold::AsksYou,
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
        let mut rows = vec![];
        for bot in self.list_bots().await? {
            let runs = self.inner.store.active_runs(&bot.id).await?;
            let driver = runs.iter().find_map(|r| r.task.strip_prefix(crate::runs::DRIVEN_BY)).map(str::to_string);
            rows.push(dto::BotRow { state: states.remove(bot.id.as_str()).unwrap_or(idle), bot, driver });
        }
        Ok(rows)
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
        let bot = self.inner.store.bot(name_or_id).await?;
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await?;
        Ok(view(bot, &computer))
    }

    /// Removes a bot. Its Private computer goes with it, also one kept from a switch to Team (its
    /// container is destroyed; its workspace stays on disk). On a Team computer the bot's folder
    /// stays too.
    pub async fn remove_bot(&self, bot: &BotId) -> Result<BotView> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let shown = view(bot.clone(), &computer);
        if let Some(c) = self.inner.store.private_computer_of(&bot.id).await? {
            self.inner
                .provider
                .destroy(&c.cref(), &CallCtx::default())
                .await
                .map_err(|e| EngineError::from(e).context(format!("removing the computer of bot {}", bot.name)))?;
        } else if let Err(e) = self.inner.provider.kill_tagged(&computer.cref(), user(&bot, &computer), botdesk_core::BOT_TAG, bot.id.as_str()).await {
            // Nothing of it runs once that computer stops; a computer Docker cannot reach now
            // does not keep the bot.
            tracing::warn!(bot = %bot.id, "ending what the removed bot left running: {e}");
        }
        self.forget_logins(&bot.id).await;
        self.inner.store.delete_bot(&bot.id).await?;
        Ok(shown)
    }

    pub(crate) async fn bot_and_computer(&self, bot: &BotId) -> Result<(botdesk_store::Bot, botdesk_store::Computer)> {
        let bot = self.inner.store.bot(bot.as_str()).await?;
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await?;
        Ok((bot, computer))
    }
}

pub(crate) fn view(bot: botdesk_store::Bot, c: &botdesk_store::Computer) -> BotView {
    let folder = match c.scope {
        ComputerScope::Team => path::bot_folder(&bot.id).to_string(),
        ComputerScope::Private => ".".into(),
    };
    BotView {
        id: bot.id.clone(),
        name: bot.name,
        computer: ComputerBrief { id: c.id.clone(), name: c.name.clone(), scope: c.scope, host: c.host.to_string() },
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

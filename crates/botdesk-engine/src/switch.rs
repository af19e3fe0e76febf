//! Switching a bot between the Team computer and a Private one. Both homes are
//! kept: the home the bot leaves is checkpointed and left as it is (its Team folder, or its
//! stopped Private computer, which the bot gets back when it switches again), and the bot's own
//! work comes along into the home it joins:
//!
//! - Team → Private: the bot's folder `bots/<id>/` becomes the root of its Private home.
//! - Private → Team: the visible entries at its Private home's root go into `bots/<id>/`.
//! - Either way its browser profile comes along whole (logins and cookies included).
//!
//! - Between hosts (`--host`): to the Team computer of the other host, the bot's folder comes
//!   along the same way; a Private computer moves whole: its latest checkpoint (on this machine)
//!   becomes its home on the other host, and its old container and volume are removed.
//!
//! Nothing is deleted and nothing newer is overwritten: a file the joined home already has is
//! replaced only by a newer copy; where the joined home's copy is newer it stays, the bot's copy
//! stays in the home it left, and the report names the file. Before any of this the bot is
//! stopped-checked and its execution lease is held, so no run starts meanwhile.

use botdesk_core::home_stream::LoadMode;
use botdesk_core::{browser::profile_name, path, ComputerScope, FolderOwner, HostName, MachineStatus};
use serde::Serialize;

use crate::checkpoint::{everything, Browsers, Sending};
use crate::error::blocking;
use crate::home_store::{self, current_version, Found, BROWSER_JUNK, PROFILES};
use crate::versions::Why;
use crate::{Engine, EngineError, ErrorCode, Result};

/// What a switch did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ts_rs::TS)]
pub struct SwitchReport {
    pub bot: String,
    pub scope: ComputerScope,
    /// Computer names.
    pub from: String,
    pub to: String,
    /// Files copied into the joined home (new there, or newer than its copy).
    pub copied: u64,
    /// Files the joined home had in a newer version: kept; the bot's older copy stays in the
    /// home it left. Paths relative to the bot's folder.
    pub kept_newer: Vec<String>,
    /// The Docker host the bot works on now.
    pub host: String,
    /// Whether a browser profile came along.
    pub profile: bool,
}

impl Engine {
    /// Moves a bot to the Team computer or to its own Private computer, keeping both homes.
    /// Refused while the bot runs or the person has control of it.
    pub async fn switch_bot(&self, bot: &crate::BotRef, to: ComputerScope) -> Result<SwitchReport> {
        self.switch_bot_to(bot, to, None).await
    }

    /// [`Engine::switch_bot`] onto a computer of `host` (None: the host the bot is on).
    pub async fn switch_bot_to(&self, bot: &crate::BotRef, to: ComputerScope, host: Option<&str>) -> Result<SwitchReport> {
        let (bot, from) = self.bot_and_computer(&bot.id).await?;
        let host = HostName::new(host.unwrap_or(from.host.as_str()));
        if !host.is_local() {
            self.inner.store.host(host.as_str()).await?;
        }
        let on = if host.is_local() { String::new() } else { format!(" of host {host}") };
        let target = if to == ComputerScope::Team { format!("the Team computer{on}") } else { format!("a Private computer{on}") };
        if from.scope == to && from.host == host {
            return Err(EngineError::new(ErrorCode::Invalid, format!("{} already works on {target}", bot.name)));
        }
        let now = self.now();
        if !self.inner.store.active_runs(&bot.id).await?.is_empty() {
            return Err(EngineError::new(ErrorCode::BotRunning, format!("Stop the bot first: {} is working on a task", bot.name)));
        }
        if self.inner.store.control(&from.id, now).await?.is_some_and(|c| c.bot_id == bot.id) {
            return Err(EngineError::new(ErrorCode::Busy, format!("Release control of {} first", bot.name)));
        }
        let result = if (from.scope, to) == (ComputerScope::Private, ComputerScope::Private) {
            // Its computer moves whole; the destroy's reservation of it keeps runs from starting
            // (a run that started just before refuses the move: the computer stays where it was,
            // its desktop closed and its home checkpointed).
            self.move_private(&bot, &from, &host).await
        } else {
            // Holding the bot's execution lease keeps runs from starting until the switch is done.
            let holder = format!("switch:{}", std::process::id());
            let lease = self
                .inner
                .store
                .claim_execution(&from.id, &bot.id, &holder, now, self.inner.policy.exec_ttl)
                .await
                .map_err(|e| EngineError::from(e).context(format!("Stop the bot first: {} is busy", bot.name)))?;
            let result = self.switch_holding(&bot, &from, to, &host).await;
            if let Err(e) = self.inner.store.release_execution(&lease).await {
                tracing::warn!("releasing the switch's execution lease: {e}");
            }
            result
        };
        let report = result.map_err(|e| e.context(format!("moving {} to {target}", bot.name)))?;
        // A Private computer left without its bot stops; its disk and checkpoint are kept, and
        // the bot gets it back when it switches again.
        let cref = from.cref();
        let left = report.to != from.name;
        if left && from.scope == ComputerScope::Private && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            if let Err(e) = self.stop_computer(&from.id).await {
                tracing::warn!("stopping {} after its bot moved: {e}", from.name);
            }
        }
        Ok(report)
    }

    /// A Private computer moves to another host whole: its browser closed and its home
    /// checkpointed here, its container and volume removed there, and its next start (now, on the
    /// new host) restores that checkpoint.
    async fn move_private(&self, bot: &botdesk_store::Bot, c: &botdesk_store::Computer, host: &HostName) -> Result<SwitchReport> {
        if c.home_volume.is_some() && self.inner.provider.status(&c.cref()).await? == MachineStatus::Running {
            let slot = self.inner.store.desktop_of(&c.id, &bot.id).await?.map(|d| d.slot);
            self.checkpoint_closing(&c.id, slot.map_or(Browsers::None, Browsers::OnDisplay), Why::Switch).await?;
        }
        self.release_desktop(&crate::BotRef::of(bot)).await?;
        self.move_computer(c, host).await?;
        let moved = self.inner.store.computer(c.id.as_str()).await?;
        self.ensure_running(&moved).await?;
        tracing::info!(bot = %bot.id, computer = %c.name, from = %c.host, to = %host, "computer moved between hosts");
        Ok(SwitchReport {
            bot: bot.name.clone(),
            scope: ComputerScope::Private,
            from: c.name.clone(),
            to: c.name.clone(),
            copied: 0,
            kept_newer: vec![],
            profile: false,
            host: host.to_string(),
        })
    }

    /// Moves a computer that has no bot running to `host`: its home stays as its latest
    /// checkpoint here (taken now), and its machine on the old host is destroyed.
    async fn move_computer(&self, c: &botdesk_store::Computer, host: &HostName) -> Result<()> {
        if c.host == *host {
            return Ok(());
        }
        self.destroy_computer(&c.id).await.map_err(|e| e.context(format!("moving computer {} to host {host}", c.name)))?;
        Ok(self.inner.store.set_computer_host(&c.id, host).await?)
    }

    async fn switch_holding(&self, bot: &botdesk_store::Bot, from: &botdesk_store::Computer, to: ComputerScope, host: &HostName) -> Result<SwitchReport> {
        // 1. The home it leaves: its browser closed gracefully and a checkpoint (while it runs: a
        // stopped computer's latest checkpoint is its home), its desktop released.
        let from_ref = from.cref();
        if from.home_volume.is_some() && self.inner.provider.status(&from_ref).await? == MachineStatus::Running {
            let slot = self.inner.store.desktop_of(&from.id, &bot.id).await?.map(|d| d.slot);
            self.checkpoint_closing(&from.id, slot.map_or(Browsers::None, Browsers::OnDisplay), Why::Switch).await?;
        }
        self.release_desktop(&crate::BotRef::of(bot)).await?;

        // 2. What comes along, from the checkpoint of the home it left: checked whole before
        // anything moves (a link where its folder or profile should be refuses the switch).
        let folder = path::bot_folder(&bot.id).to_string();
        let profile = format!("{PROFILES}/{}", profile_name(&bot.id));
        let (sub, into, keep): (&str, &str, fn(&str) -> bool) = match (from.scope, to) {
            (ComputerScope::Team, ComputerScope::Private) => (&folder, "", everything),
            (ComputerScope::Private, ComputerScope::Team) => ("", &folder, visible),
            // Between the Team computers of two hosts.
            (ComputerScope::Team, ComputerScope::Team) => (&folder, &folder, everything),
            (ComputerScope::Private, ComputerScope::Private) => unreachable!("a Private computer moves whole (move_private)"),
        };
        let s = self.inner.data.home(&from.home_key);
        let root = blocking(move || Ok(current_version(&s).map(|(_, p)| p))).await?;
        let (carry_work, carry_profile) = match &root {
            Some(r) => (self.carried(r, sub).await?, self.carried(r, &profile).await?),
            None => (false, false),
        };

        // 3. The home it joins: found or created, and started (a new one restored from its
        // checkpoint). The work is streamed into it: the host reads only its own checkpoint, the
        // computer places the files, and neither follows a link.
        // A Private computer the bot kept on another host comes to this one first.
        if to == ComputerScope::Private {
            if let Some(kept) = self.inner.store.private_computer_of(&bot.id).await? {
                self.move_computer(&kept, host).await?;
            }
        }
        let dest = self.inner.store.home_computer(bot, to, self.inner.provider.kind(), host, self.now()).await?;
        let dest_ref = self.ensure_running(&dest).await?;
        let (mut copied, mut kept_newer) = (0, vec![]);
        let arriving = Some(FolderOwner { bot: bot.id.clone(), uid: bot.uid });
        if let (Some(root), true) = (&root, carry_work) {
            let sending = Sending {
                root: root.clone(),
                sub: sub.to_string(),
                keep: Box::new(keep),
                mode: LoadMode::Merge { into: into.to_string() },
                for_bot: arriving.clone(),
            };
            let summary = self.send_home(&dest_ref, sending).await?;
            copied += summary.files;
            kept_newer = summary.kept_newer;
        }
        if let (Some(root), true) = (root, carry_profile) {
            let sending = Sending {
                root,
                sub: profile.clone(),
                keep: Box::new(not_browser_junk),
                mode: LoadMode::Replace { into: profile.clone() },
                for_bot: arriving.clone(),
            };
            copied += self.send_home(&dest_ref, sending).await?.files;
        }
        // The joined home's new content is durable before the bot moves.
        self.checkpoint_closing(&dest.id, Browsers::None, Why::Switch).await?;

        // 4. The bot moves.
        self.inner.store.move_bot(&bot.id, &from.id, &dest.id).await?;
        // Its folder and profile there are its own now (its uid on a Team computer).
        self.set_home_owners(&dest, &dest_ref, false).await?;
        // Its network policy holds there before its first command.
        self.apply_network(&dest, &dest_ref).await?;
        self.forget_ready(&dest.id).await;
        tracing::info!(bot = %bot.id, from = %from.name, to = %dest.name, copied, kept = kept_newer.len(), "bot switched computers");
        Ok(SwitchReport {
            bot: bot.name.clone(),
            scope: to,
            from: from.name.clone(),
            to: dest.name,
            copied,
            kept_newer,
            profile: carry_profile,
            host: host.to_string(),
        })
    }

    /// Whether `sub` of a checkpoint is a folder to carry: false when it is missing; an error when
    /// anything on its way is a link or a file (a bot replaced its own folder or profile: nothing
    /// is read through it, and the bot stays where it is).
    async fn carried(&self, root: &std::path::Path, sub: &str) -> Result<bool> {
        let (r, s) = (root.to_path_buf(), sub.to_string());
        blocking(move || match home_store::find_dir(&r, &s)? {
            Found::Folder => Ok(true),
            Found::Missing => Ok(false),
            Found::Other => Err(EngineError::new(
                ErrorCode::PathEscapes,
                format!("{s} is not a folder in the checkpoint (a bot made it or a folder above it a link or a file); nothing was moved"),
            )),
        })
        .await
    }
}

/// Private → Team: the visible entries of the Private home's root (not its settings, caches or
/// browser profiles).
fn visible(rel: &str) -> bool {
    rel.contains('/') || !rel.starts_with('.')
}

/// A browser profile comes along without its caches and lock files.
fn not_browser_junk(rel: &str) -> bool {
    !rel.split('/').any(|c| BROWSER_JUNK.contains(&c))
}

//! Switching a bot between the Team computer and a Private one (DESIGN §4, §10). Both homes are
//! kept: the home the bot leaves is checkpointed and left as it is (its Team folder, or its
//! stopped Private computer, which the bot gets back when it switches again), and the bot's own
//! work comes along into the home it joins:
//!
//! - Team → Private: the bot's folder `bots/<id>/` becomes the root of its Private home.
//! - Private → Team: the visible entries at its Private home's root go into `bots/<id>/`.
//! - Either way its browser profile comes along whole (logins and cookies included).
//!
//! Nothing is deleted and nothing newer is overwritten: a file the joined home already has is
//! replaced only by a newer copy; where the joined home's copy is newer it stays, the bot's copy
//! stays in the home it left, and the report names the file. Before any of this the bot is
//! stopped-checked and its execution lease is held, so no run starts meanwhile.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use botdesk_core::{browser::profile_name, path, ComputerRef, ComputerScope, MachineStatus};
use serde::Serialize;

use crate::checkpoint::{browser_junk, checkpoint_files, current_version, err, Browsers};
use crate::error::blocking;
use crate::{Engine, EngineError, ErrorCode, Result};

/// What a switch did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
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
    /// Whether a browser profile came along.
    pub profile: bool,
}

impl Engine {
    /// Moves a bot to the Team computer or to its own Private computer, keeping both homes.
    /// Refused while the bot runs or the person has control of it.
    pub async fn switch_bot(&self, bot: &str, to: ComputerScope) -> Result<SwitchReport> {
        let (bot, from) = self.bot_and_computer(bot).await?;
        let target = if to == ComputerScope::Team { "the Team computer" } else { "a Private computer" };
        if from.scope == to {
            return Err(EngineError::new(ErrorCode::Invalid, format!("{} already works on {target}", bot.name)));
        }
        let now = self.now();
        if !self.inner.store.active_runs(&bot.id).await?.is_empty() {
            return Err(EngineError::new(ErrorCode::BotRunning, format!("Stop the bot first: {} is working on a task", bot.name)));
        }
        if self.inner.store.control(&from.id, now).await?.is_some_and(|c| c.bot_id == bot.id) {
            return Err(EngineError::new(ErrorCode::Busy, format!("Release control of {} first", bot.name)));
        }
        // Holding the bot's execution lease keeps runs from starting until the switch is done.
        let holder = format!("switch:{}", std::process::id());
        let lease = self.inner.store.claim_execution(&from.id, &bot.id, &holder, now, self.inner.policy.exec_ttl).await.map_err(|e| {
            EngineError::from(e).context(format!("Stop the bot first: {} is busy", bot.name))
        })?;
        let result = self.switch_holding(&bot, &from, to).await;
        if let Err(e) = self.inner.store.release_execution(&lease).await {
            tracing::warn!("releasing the switch's execution lease: {e}");
        }
        let report = result.map_err(|e| e.context(format!("moving {} to {target}", bot.name)))?;
        // A Private computer left without its bot stops; its disk and checkpoint are kept, and
        // the bot gets it back when it switches again.
        let cref = ComputerRef { id: from.id.clone() };
        if from.scope == ComputerScope::Private && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            if let Err(e) = self.stop_computer(from.id.as_str()).await {
                tracing::warn!("stopping {} after its bot moved: {e}", from.name);
            }
        }
        Ok(report)
    }

    async fn switch_holding(&self, bot: &botdesk_store::Bot, from: &botdesk_store::Computer, to: ComputerScope) -> Result<SwitchReport> {
        // 1. The home it leaves: its browser closed gracefully, a checkpoint, its desktop released.
        let from_machine = self.inner.data.machine(from.id.as_str());
        if from_machine.exists() {
            let slot = self.inner.store.desktop_of(&from.id, &bot.id).await?.map(|d| d.slot);
            self.checkpoint_closing(from.id.as_str(), slot.map_or(Browsers::None, Browsers::OnDisplay)).await?;
        }
        self.release_desktop(bot.id.as_str()).await?;

        // 2. The home it joins: found or created, its disk restored when it has none here.
        let dest = self.inner.store.home_computer(bot, to, self.inner.provider.kind(), self.now()).await?;
        self.restore_if_missing(&dest).await?;
        let dest_machine = self.inner.data.machine(dest.id.as_str());

        // 3. The bot's work comes along (from the checkpoint when the left machine has no disk).
        let from_root = if from_machine.exists() { Some(from_machine) } else { current_version(&self.inner.data.home(&from.home_key)).map(|(_, p)| p) };
        let profile = Path::new(".browser-profiles").join(profile_name(&bot.id));
        let profiles = (from_root.as_ref().map(|r| r.join(&profile)), dest_machine.join(&profile));
        let (src, dst) = match to {
            ComputerScope::Private => (from_root.map(|r| r.join(path::bot_folder(&bot.id).as_str())), dest_machine.clone()),
            ComputerScope::Team => (from_root, dest_machine.join(path::bot_folder(&bot.id).as_str())),
        };
        let lock = self.home_lock(&dest.home_key);
        let held = lock.lock().await;
        let only_visible = to == ComputerScope::Team;
        let store = self.inner.data.home(&dest.home_key);
        let (copied, kept_newer, profile_came) = blocking(move || {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            new_dir(&dest_machine, root)?;
            let mut carry = Carry { root, profile: false, copied: 0, kept_newer: vec![] };
            if let Some(src) = src.filter(|s| s.is_dir()) {
                new_dir(&dst, root)?;
                carry.merge(&src, &dst, Path::new(""), only_visible)?;
            }
            let profile_came = match profiles {
                (Some(from), to) if from.is_dir() => {
                    carry.replace_profile(&from, &to)?;
                    true
                }
                _ => false,
            };
            // The joined home's new content is durable before the bot moves.
            checkpoint_files(&dest_machine, &store)?;
            Ok((carry.copied, carry.kept_newer, profile_came))
        })
        .await?;
        drop(held);

        // 4. The bot moves.
        self.inner.store.move_bot(&bot.id, &from.id, &dest.id).await?;
        self.inner.ready.lock().await.remove(&dest.id);
        tracing::info!(bot = %bot.id, from = %from.name, to = %dest.name, copied, kept = kept_newer.len(), "bot switched computers");
        Ok(SwitchReport { bot: bot.name.clone(), scope: to, from: from.name.clone(), to: dest.name, copied, kept_newer, profile: profile_came })
    }
}

/// A folder owned by the workspace user (uid 1000) when we run as root.
fn new_dir(p: &Path, root: bool) -> Result<()> {
    if p.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(p).map_err(|e| err("creating", p, e))?;
    if root {
        std::os::unix::fs::chown(p, Some(1000), Some(1000)).map_err(|e| err("handing over", p, e))?;
    }
    Ok(())
}

struct Carry {
    root: bool,
    /// Copying a browser profile: its caches and lock files stay behind.
    profile: bool,
    copied: u64,
    kept_newer: Vec<String>,
}

impl Carry {
    /// Copies `src/rel` into `dst/rel`: new files and newer ones; a newer file at the destination
    /// is kept and named. Never deletes. At the top level, `only_visible` skips dot entries (the
    /// computer's own settings, caches and browser profiles of a Private home).
    fn merge(&mut self, src: &Path, dst: &Path, rel: &Path, only_visible: bool) -> Result<()> {
        let dir = src.join(rel);
        for entry in fs::read_dir(&dir).map_err(|e| err("reading", &dir, e))? {
            let entry = entry.map_err(|e| err("reading", &dir, e))?;
            let name = entry.file_name();
            if only_visible && rel.as_os_str().is_empty() && name.to_string_lossy().starts_with('.') {
                continue;
            }
            let r = rel.join(&name);
            if self.profile && browser_junk(&r) {
                continue;
            }
            let (from, to) = (src.join(&r), dst.join(&r));
            let meta = fs::symlink_metadata(&from).map_err(|e| err("reading", &from, e))?;
            let there = fs::symlink_metadata(&to).ok();
            if meta.is_dir() {
                match &there {
                    Some(m) if m.is_dir() => {}
                    Some(_) => {
                        self.kept_newer.push(r.to_string_lossy().into_owned());
                        continue;
                    }
                    None => self.mkdir(&to, &meta)?,
                }
                self.merge(src, dst, &r, false)?;
            } else if meta.is_file() || meta.file_type().is_symlink() {
                match &there {
                    None => {}
                    Some(m) if m.is_file() && m.len() == meta.len() && m.mtime() == meta.mtime() && m.mtime_nsec() == meta.mtime_nsec() => continue,
                    Some(m) if (m.mtime(), m.mtime_nsec()) < (meta.mtime(), meta.mtime_nsec()) && !m.is_dir() => {}
                    Some(_) => {
                        self.kept_newer.push(r.to_string_lossy().into_owned());
                        continue;
                    }
                }
                self.copy(&from, &to, &meta)?;
            }
        }
        Ok(())
    }

    /// The bot's browser profile comes along whole: a profile is one database set, never mixed
    /// file by file with an older copy of itself.
    fn replace_profile(&mut self, from: &Path, to: &Path) -> Result<()> {
        let parent = to.parent().expect("a profile has a parent");
        new_dir(parent, self.root)?;
        let partial = to.with_extension("switching");
        let _ = fs::remove_dir_all(&partial);
        new_dir(&partial, self.root)?;
        let mut whole = Carry { root: self.root, profile: true, copied: 0, kept_newer: vec![] };
        whole.merge(from, &partial, Path::new(""), false)?;
        self.copied += whole.copied;
        if to.exists() {
            fs::remove_dir_all(to).map_err(|e| err("replacing", to, e))?;
        }
        fs::rename(&partial, to).map_err(|e| err("moving", to, e))
    }

    fn mkdir(&self, to: &Path, meta: &fs::Metadata) -> Result<()> {
        fs::create_dir(to).map_err(|e| err("creating", to, e))?;
        fs::set_permissions(to, meta.permissions()).map_err(|e| err("writing", to, e))?;
        if self.root {
            let _ = std::os::unix::fs::lchown(to, Some(1000), Some(1000));
        }
        Ok(())
    }

    fn copy(&mut self, from: &Path, to: &Path, meta: &fs::Metadata) -> Result<()> {
        if fs::symlink_metadata(to).is_ok() {
            fs::remove_file(to).map_err(|e| err("replacing", to, e))?;
        }
        if meta.file_type().is_symlink() {
            let target = fs::read_link(from).map_err(|e| err("reading", from, e))?;
            std::os::unix::fs::symlink(&target, to).map_err(|e| err("writing", to, e))?;
        } else {
            fs::copy(from, to).map_err(|e| err("copying", from, e))?;
            let f = fs::File::options().write(true).open(to).map_err(|e| err("writing", to, e))?;
            f.set_modified(meta.modified().map_err(|e| err("reading", from, e))?).map_err(|e| err("writing", to, e))?;
        }
        if self.root {
            let _ = std::os::unix::fs::lchown(to, Some(1000), Some(1000));
        }
        self.copied += 1;
        Ok(())
    }
}

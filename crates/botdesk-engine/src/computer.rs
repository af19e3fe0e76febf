//! One computer: what this process knows and holds of it (its handle: its boot lock, its home's
//! lock, whether this process made it ready, the desktops it brought up there and the frame each
//! bot there last observed; one handle per computer, made on first use and shared by every call on
//! that computer, nothing shared between computers), and its lifecycle: bringing it up, stopping,
//! destroying, reconciling.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use botdesk_core::*;
use serde::Serialize;

use crate::checkpoint::{Before, Browsers};
use crate::versions::Why;
use crate::{leases, Engine, EngineError, ErrorCode, Result};

#[derive(Default)]
pub(crate) struct ComputerHandle {
    /// Held while the computer is brought up: two calls of this process do not boot it at once,
    /// and its boot holds up no other computer.
    pub boot: tokio::sync::Mutex<()>,
    /// Held while its home is checkpointed or restored: one at a time in this process (the home's
    /// lock file keeps processes apart).
    pub home: tokio::sync::Mutex<()>,
    /// This process provisioned and prepared it, so a second call skips the set-up.
    ready: AtomicBool,
    /// Desktops this process brought up here (slot, view token), so a graphical call skips the
    /// set-up; forgotten on release, when the computer is set up again, and when a call on the
    /// display fails.
    displays: Mutex<HashSet<(u32, String)>>,
    /// The desktops resolved on those displays, by bot (see [`crate::desktop::Desk`]).
    desks: Mutex<HashMap<BotId, crate::desktop::Desk>>,
    /// Runs of this process that started while the computer was down and take their starting
    /// version when it is next brought up (see `Engine::mark_run_start`).
    waiting_runs: Mutex<Vec<String>>,
    /// An idle suspend of the app's upkeep is under way.
    suspending: AtomicBool,
}

impl ComputerHandle {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn has_display(&self, slot: u32, token: &str) -> bool {
        self.displays.lock().unwrap().contains(&(slot, token.to_string()))
    }

    pub fn add_display(&self, slot: u32, token: &str) {
        self.displays.lock().unwrap().insert((slot, token.to_string()));
    }

    pub fn forget_display(&self, slot: u32) {
        self.displays.lock().unwrap().retain(|(s, _)| *s != slot);
        self.desks.lock().unwrap().retain(|_, d| d.slot() != slot);
    }

    pub fn keep_desk(&self, desk: crate::desktop::Desk) {
        self.desks.lock().unwrap().insert(desk.bot().clone(), desk);
    }

    pub fn desk(&self, bot: &BotId) -> Option<crate::desktop::Desk> {
        self.desks.lock().unwrap().get(bot).cloned()
    }

    /// A computer set up again has none of the displays brought up before.
    pub fn forget_displays(&self) {
        self.displays.lock().unwrap().clear();
        self.desks.lock().unwrap().clear();
    }

    /// Whether this call may start an idle suspend (none is under way).
    pub fn start_suspend(&self) -> bool {
        !self.suspending.swap(true, Ordering::SeqCst)
    }

    pub fn end_suspend(&self) {
        self.suspending.store(false, Ordering::SeqCst);
    }

    pub fn await_start_version(&self, run_id: &str) {
        self.waiting_runs.lock().unwrap().push(run_id.to_string());
    }

    pub fn take_waiting_runs(&self) -> Vec<String> {
        std::mem::take(&mut *self.waiting_runs.lock().unwrap())
    }

    pub fn forget_waiting_run(&self, run_id: &str) {
        self.waiting_runs.lock().unwrap().retain(|r| r != run_id);
    }
}

/// The handles of this process, by computer.
#[derive(Default)]
pub(crate) struct Computers(Mutex<HashMap<ComputerId, Arc<ComputerHandle>>>);

impl Computers {
    pub fn get(&self, id: &ComputerId) -> Arc<ComputerHandle> {
        self.0.lock().unwrap().entry(id.clone()).or_default().clone()
    }
}

// ------------------------------------------------------------------------------------------------
// Lifecycle

#[derive(Debug, Clone, Serialize)]
pub struct ComputerView {
    pub id: ComputerId,
    pub name: String,
    pub scope: ComputerScope,
    /// What the provider reports now (`running`, `stopped`, `missing`), or the stored state when
    /// the provider cannot be reached.
    pub status: MachineStatus,
    /// The lifecycle state recorded in the database (stopped, booting, running, suspending,
    /// suspended, error).
    pub state: ComputerState,
    pub bots: Vec<String>,
    /// The home store: the workspace's checkpoints (`current` is the latest).
    pub home: PathBuf,
    /// The Docker host it runs on (`local`: this machine).
    pub host: String,
    /// Why its host on another machine could not be asked (then `status` is what the database
    /// last recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// A stop or destroy went ahead though the workspace could not be saved first: why, and
    /// which version is the last saved (for a stop its disk keeps the work).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconcileReport {
    /// Containers matched to a computer in the database.
    pub adopted: Vec<String>,
    /// Containers of this data directory with no computer in the database, removed.
    pub removed: Vec<String>,
    /// Home volumes of this data directory that are no computer's home (left by an interrupted
    /// destroy or start), removed.
    pub volumes_removed: Vec<String>,
    /// Networks of this data directory whose computer is gone, removed.
    pub networks_removed: Vec<String>,
}

/// Whether [`Engine::bring_up`] found the computer up or started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Up {
    /// Made ready earlier (by this process or another) and running since: what was set up in it
    /// then (folders, displays) is there.
    Already,
    /// Started (or prepared again) by this call: nothing set up in it before is assumed.
    Started,
}

impl Engine {
    fn spec(&self, c: &botdesk_store::Computer, home_volume: String) -> ComputerSpec {
        ComputerSpec { id: c.id.clone(), name: c.name.clone(), scope: c.scope, home_volume, resources: self.inner.limits.resources(), host: c.host.clone() }
    }

    /// How the provider finds a computer known only by id (its host is in the database).
    pub(crate) async fn cref_of(&self, id: &ComputerId) -> Result<ComputerRef> {
        Ok(self.inner.store.computer(id.as_str()).await?.cref())
    }

    /// A new home volume's name: this data directory's label, the computer and a random part, so
    /// a volume whose deletion started is never taken for its successor.
    pub(crate) fn new_home_volume(&self, id: &ComputerId) -> String {
        format!("botdesk-{}-{id}-{}", &self.inner.data.label()[..8], &uuid::Uuid::new_v4().simple().to_string()[..8])
    }

    /// Resolves a computer named by the person (its id or name) once, where a call comes in.
    pub async fn computer_id(&self, id_or_name: &str) -> Result<ComputerId> {
        Ok(self.inner.store.computer(id_or_name).await?.id)
    }

    pub async fn list_computers(&self) -> Result<Vec<ComputerView>> {
        let mut out = vec![];
        for c in self.inner.store.list_computers().await? {
            out.push(self.computer_view(c).await?);
        }
        Ok(out)
    }

    /// Starts a bot's computer, as its first use would, and returns once it is ready.
    pub async fn start_bot_computer(&self, bot: &crate::BotRef) -> Result<()> {
        let (_, computer) = self.bot_and_computer(&bot.id).await?;
        self.ensure_running(&computer).await.map(drop)
    }

    /// Provisions (or reconnects) and prepares a bot's computer, creating the Team folders.
    pub(crate) async fn ensure_running(&self, computer: &botdesk_store::Computer) -> Result<ComputerRef> {
        Ok(self.bring_up(computer).await?.0)
    }

    /// This process's handle on a computer (its boot lock, readiness and desktops).
    pub(crate) fn handle(&self, id: &ComputerId) -> Arc<ComputerHandle> {
        self.inner.computers.get(id)
    }

    /// Forgets that this process made the computer ready, so its next use prepares it again; waits
    /// for a boot of it under way here to finish first.
    pub(crate) async fn forget_ready(&self, id: &ComputerId) {
        let handle = self.handle(id);
        let _booting = handle.boot.lock().await;
        handle.set_ready(false);
    }

    /// [`Engine::ensure_running`], saying whether the computer was up already (made ready
    /// earlier, by this process or another) or was started now. Runs waiting for their starting
    /// version get it here, before the caller works there.
    pub(crate) async fn bring_up(&self, computer: &botdesk_store::Computer) -> Result<(ComputerRef, Up)> {
        let up = self.start_up(computer).await?;
        self.version_waiting_runs(&computer.id).await;
        Ok(up)
    }

    async fn start_up(&self, computer: &botdesk_store::Computer) -> Result<(ComputerRef, Up)> {
        let cref = computer.cref();
        self.inner.store.touch(&computer.id, self.now()).await?;
        let handle = self.handle(&computer.id);
        let _booting = handle.boot.lock().await;
        if handle.is_ready() && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            return Ok((cref, Up::Already));
        }
        let ctx = CallCtx::default();
        let starting = |e: ComputerError| EngineError::from(e).context(format!("starting computer {}", computer.name));
        let mut state = self.stored_state(&computer.id).await?;
        // Recorded running (only a finished start records it) and running: another process, or
        // this one before, made it ready, and nothing of that is undone while it runs (a bot
        // created since got its folder then). A CLI call does only its own work.
        if state == ComputerState::Running && computer.home_volume.is_some() && self.inner.provider.status(&cref).await? == MachineStatus::Running {
            handle.set_ready(true);
            return Ok((cref, Up::Already));
        }
        // The row walks stopped|suspended|error → booting → running by compare-and-swap. Losing a
        // swap means another process (the app beside the CLI) is booting it: provisioning is
        // idempotent, so both go on and one of them records `running`.
        let now = self.now();
        if state == ComputerState::Suspending {
            return Err(EngineError::new(ErrorCode::Busy, format!("computer {} is being suspended; try again in a moment", computer.name)));
        }
        if state == ComputerState::Running && self.inner.provider.status(&cref).await? != MachineStatus::Running {
            self.swap(&computer.id, ComputerState::Running, ComputerState::Stopped, now).await?;
            state = ComputerState::Stopped;
        }
        if state != ComputerState::Running && state != ComputerState::Booting {
            self.swap(&computer.id, state, ComputerState::Booting, now).await?;
        }
        // A computer without a whole home volume (new, destroyed, or one whose deletion started)
        // gets a new one, restored from the latest checkpoint before anything runs there.
        let computer = &self.inner.store.computer(computer.id.as_str()).await?;
        let (volume, new_home) = match &computer.home_volume {
            Some(v) => (v.clone(), false),
            None => (self.new_home_volume(&computer.id), true),
        };
        let provisioned = async {
            let p = self.inner.provider.provision(&self.spec(computer, volume.clone()), &ctx).await?;
            // From here the volume may hold work its latest version does not.
            self.inner.store.set_home_saved(&computer.id, false).await.map_err(|e| ComputerError::Provider(e.to_string()))?;
            self.inner.provider.prepare(&cref, &ctx).await?;
            if new_home {
                if let Some(r) = self.restore_into(computer, &cref).await.map_err(|e| ComputerError::Provider(format!("restoring its workspace: {e}")))? {
                    tracing::info!(computer = %computer.id, version = r.version, files = r.files, ms = r.millis, "workspace restored");
                }
                self.inner.store.set_home_volume(&computer.id, Some(&volume), self.now()).await.map_err(|e| ComputerError::Provider(e.to_string()))?;
            }
            // A Team computer's `shared/` and each bot's folder, as theirs (a new home was given its
            // owners whole as it was restored).
            if computer.scope == ComputerScope::Team {
                self.set_home_owners(computer, &cref, false).await.map_err(|e| ComputerError::Provider(e.to_string()))?;
            }
            // Its bots' network policies, before any of their commands runs.
            self.apply_network(computer, &cref).await.map_err(|e| ComputerError::Provider(format!("setting its network policies: {e}")))?;
            Ok::<_, ComputerError>(p)
        }
        .await;
        let p = match provisioned {
            Ok(p) => p,
            Err(e) => {
                self.swap(&computer.id, ComputerState::Booting, ComputerState::Error, self.now()).await?;
                return Err(starting(e));
            }
        };
        self.swap(&computer.id, ComputerState::Booting, ComputerState::Running, self.now()).await?;
        self.inner.store.set_computer_state(&computer.id, ComputerState::Running, Some(&p.provider_ref), self.now()).await?;
        // A bot created while this start ran saw the computer not yet running, so left its folder
        // to the start: made now (it was created before this read, which follows `running`).
        if computer.scope == ComputerScope::Team {
            self.set_home_owners(computer, &cref, false).await?;
        }
        handle.forget_displays();
        handle.set_ready(true);
        Ok((cref, Up::Started))
    }

    pub(crate) async fn stored_state(&self, id: &ComputerId) -> Result<ComputerState> {
        Ok(self.inner.store.computer(id.as_str()).await?.state)
    }

    /// A compare-and-swap of the computer's state; losing it to another process is fine.
    pub(crate) async fn swap(&self, id: &ComputerId, from: ComputerState, to: ComputerState, now: i64) -> Result<()> {
        match self.inner.store.transition_computer(id, from, to, now).await {
            Ok(()) | Err(botdesk_store::StoreError::Stale(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops a computer and keeps its disk. Refused while bots hold live execution leases on it
    /// ("Other bots are still using this computer") or while it is reserved. A checkpoint that
    /// fails (a stalled helper, a full disk) never keeps it running: it stops, its disk keeps the
    /// work, and the view says so (`not_saved`).
    pub async fn stop_computer(&self, computer: &ComputerId) -> Result<ComputerView> {
        let c = self.inner.store.computer(computer.as_str()).await?;
        let not_saved = match self.checkpoint_before(&c, Before::Stop).await {
            Ok(()) => None,
            Err(e) if e.code == ErrorCode::Busy || e.code == ErrorCode::Conflict => return Err(e),
            Err(e) => Some(self.not_saved(&c, &e).await),
        };
        let res = self.inner.store.reserve(&c.id, ReservationAction::Stop, std::process::id() as i64, &leases::boot_id(), self.now()).await?;
        let _beat = self.beating(&res);
        self.forget_ready(&c.id).await;
        self.inner.store.set_reservation_stage(&res.id, ReservationStage::Stopping, self.now()).await?;
        let stopped = self.inner.provider.stop(&c.cref(), &CallCtx::default()).await;
        let ok = stopped.is_ok();
        let err = stopped.as_ref().err().map(|e| e.to_string());
        self.inner
            .store
            .finish_reservation(&res.id, if ok { ReservationStatus::Completed } else { ReservationStatus::Failed }, err.as_deref(), self.now())
            .await?;
        stopped.map_err(|e| EngineError::from(e).context(format!("stopping computer {}", c.name)))?;
        // Saved just before it stopped (a computer without a home has nothing to save).
        self.inner.store.set_home_saved(&c.id, c.home_volume.is_some() && not_saved.is_none()).await?;
        self.inner.store.clear_desktops(&c.id).await?;
        match self.stored_state(&c.id).await? {
            ComputerState::Running => self.swap(&c.id, ComputerState::Running, ComputerState::Stopped, self.now()).await?,
            ComputerState::Booting => self.swap(&c.id, ComputerState::Booting, ComputerState::Stopped, self.now()).await?,
            _ => {}
        }
        Ok(ComputerView { not_saved, ..self.computer_view(c).await? })
    }

    /// What a stop or destroy that went ahead without a checkpoint says: why, and the last
    /// version saved.
    async fn not_saved(&self, c: &botdesk_store::Computer, e: &EngineError) -> String {
        let store = self.inner.data.home(&c.home_key);
        let last = match crate::home_store::current_version(&store) {
            Some((n, _)) => format!("version {n} is the last saved"),
            None => "nothing of it was saved yet".to_string(),
        };
        tracing::warn!(computer = %c.id, "going ahead without a checkpoint: {e}");
        format!("its workspace could not be saved ({}); {last}", e.message)
    }

    /// Removes the machine and its home volume, after a checkpoint (refused when the checkpoint
    /// fails: see [`Engine::destroy_computer_unsaved`]). Fenced like stop: it takes the
    /// computer's reservation, so it is refused while a bot holds a lease there. The home store
    /// keeps the workspace: the next use restores it.
    pub async fn destroy_computer(&self, computer: &ComputerId) -> Result<ComputerView> {
        self.destroy(computer, false).await
    }

    /// [`Engine::destroy_computer`] that goes ahead when the checkpoint fails (a bot that wedges
    /// every save cannot keep its computer alive): the last saved version is kept, what changed
    /// since is lost, and the view says which version that is (`not_saved`).
    pub async fn destroy_computer_unsaved(&self, computer: &ComputerId) -> Result<ComputerView> {
        self.destroy(computer, true).await
    }

    async fn destroy(&self, computer: &ComputerId, unsaved: bool) -> Result<ComputerView> {
        let c = self.inner.store.computer(computer.as_str()).await?;
        let res = self.inner.store.reserve(&c.id, ReservationAction::Stop, std::process::id() as i64, &leases::boot_id(), self.now()).await?;
        let beat = self.beating(&res);
        let mut not_saved = None;
        let destroyed = async {
            self.inner.store.set_reservation_stage(&res.id, ReservationStage::Checkpointing, self.now()).await?;
            match self.checkpoint_before(&c, Before::Destroy).await {
                Ok(()) => {}
                Err(e) if unsaved => not_saved = Some(self.not_saved(&c, &e).await),
                Err(e) => {
                    let anyway = format!("; `botdesk computer destroy --unsaved {}` destroys it anyway, keeping the last saved version", c.name);
                    return Err(EngineError { message: e.message.clone() + &anyway, ..e });
                }
            }
            self.forget_ready(&c.id).await;
            // The fence: from here on the old volume is never used or checkpointed again, even if
            // its deletion is interrupted (the next start makes a new one from the checkpoint).
            self.inner.store.set_home_volume(&c.id, None, self.now()).await?;
            self.inner.store.set_reservation_stage(&res.id, ReservationStage::Stopping, self.now()).await?;
            self.inner
                .provider
                .destroy(&c.cref(), &CallCtx::default())
                .await
                .map_err(|e| EngineError::from(e).context(format!("destroying computer {}", c.name)))
        }
        .await;
        drop(beat);
        let status = if destroyed.is_ok() { ReservationStatus::Completed } else { ReservationStatus::Failed };
        let msg = destroyed.as_ref().err().map(|e| e.message.clone());
        self.inner.store.finish_reservation(&res.id, status, msg.as_deref(), self.now()).await?;
        destroyed?;
        self.inner.store.clear_desktops(&c.id).await?;
        self.inner.store.set_computer_state(&c.id, ComputerState::Stopped, None, self.now()).await?;
        Ok(ComputerView { not_saved, ..self.computer_view(c).await? })
    }

    /// A checkpoint before stopping, suspending or destroying a computer that has a home. A
    /// stopped computer's home is saved only before it is destroyed (it is started for that: a
    /// computer that stopped by itself may hold work its last checkpoint has not).
    pub(crate) async fn checkpoint_before(&self, c: &botdesk_store::Computer, doing: Before) -> Result<()> {
        let c = self.inner.store.computer(c.id.as_str()).await?;
        if c.home_volume.is_none() {
            return Ok(());
        }
        let running = self.inner.provider.status(&c.cref()).await? == MachineStatus::Running;
        if !running {
            if doing != Before::Destroy {
                return Ok(());
            }
            self.ensure_running(&c).await?;
        }
        let why = match doing {
            Before::Stop => Why::Stop,
            Before::Suspend => Why::Suspend,
            Before::Destroy => Why::Destroy,
        };
        self.checkpoint_closing(&c.id, Browsers::All, why)
            .await
            .map(drop)
            .map_err(|e| e.context(format!("not {} computer {}: its workspace could not be saved first", doing.doing(), c.name)))
    }

    async fn computer_view(&self, c: botdesk_store::Computer) -> Result<ComputerView> {
        let (status, unreachable) = match self.inner.provider.status(&c.cref()).await {
            Ok(s) => (s, None),
            // A host on another machine that cannot be reached leaves its computers listed; the
            // engine on this machine being down is one clear error, as for every other call.
            Err(ComputerError::Unavailable(why)) if !c.host.is_local() => {
                let recorded = if c.state == ComputerState::Running { MachineStatus::Running } else { MachineStatus::Stopped };
                (recorded, Some(why))
            }
            Err(e) => return Err(e.into()),
        };
        let bots = self.inner.store.bots_on(&c.id).await?.into_iter().map(|b| b.name).collect();
        let state = self.inner.store.computer(c.id.as_str()).await?.state;
        Ok(ComputerView {
            home: self.inner.data.home(&c.home_key),
            id: c.id.clone(),
            name: c.name,
            scope: c.scope,
            status,
            state,
            bots,
            host: c.host.to_string(),
            unreachable,
            not_saved: None,
        })
    }

    /// After a crash: every container labelled with this data directory is adopted when the
    /// database knows its computer, and removed when it does not (it can only be left over from a
    /// computer whose row is gone, e.g. a bot removed while Docker was down). Containers of other
    /// data directories are never touched.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        let Some(machine) = &self.inner.machine else { return Ok(ReconcileReport::default()) };
        let computers = self.inner.store.list_computers().await?;
        let spares = self.inner.store.spares().await?;
        // A spare computer's parts are kept too: the next new computer takes them.
        let known = botdesk_core::machine::Known {
            computers: computers.iter().map(|c| c.id.to_string()).chain(spares.iter().map(|s| s.id.to_string())).collect(),
            spares: spares.iter().map(|s| s.id.to_string()).collect(),
            homes: computers.into_iter().filter_map(|c| c.home_volume).chain(spares.into_iter().map(|s| s.home_volume)).collect(),
        };
        let done = machine.reconcile(&known).await?;
        let mut report =
            ReconcileReport { removed: done.removed, volumes_removed: done.volumes_removed, networks_removed: done.networks_removed, ..Default::default() };
        for found in done.found {
            let state = if found.running { ComputerState::Running } else { ComputerState::Stopped };
            self.inner.store.set_computer_state(&ComputerId::new(&found.computer), state, Some(&found.provider_ref), self.now()).await?;
            report.adopted.push(found.computer);
        }
        Ok(report)
    }
}

//! Runs, execution and control leases, reservations and idle suspend on top of the
//! store's compare-and-swap transitions. Policies (TTLs, heartbeats) live here.

use botdesk_core::*;
use botdesk_store::{ControlLease, ExecLease, Reservation, Run};
use serde::Serialize;
use std::time::Duration;

use crate::{Engine, EngineError, ErrorCode, Result};

/// Longest the upkeep waits on one computer for one step of ending lapsed control.
const UPKEEP_CALL_BOUND: Duration = Duration::from_secs(10);
/// Longest one idle suspend may take in the background (its checkpoint has its own bound).
pub(crate) const IDLE_SUSPEND_BOUND: Duration = Duration::from_secs(35 * 60);

/// Lease timings (milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub exec_ttl: i64,
    pub run_heartbeat: i64,
    pub control_ttl: i64,
    pub reservation_heartbeat: i64,
    /// A reservation whose worker is silent this long is marked interrupted (and kept).
    pub reservation_silence: i64,
    /// Idle time before a computer is suspended (at least 30 s).
    pub idle_suspend: i64,
    /// A checkpoint whose computer sends nothing for this long is abandoned (the previous version
    /// stays): a stalled or stopped save helper.
    pub checkpoint_idle: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            exec_ttl: 5 * 60_000,
            run_heartbeat: 60_000,
            control_ttl: 15 * 60_000,
            reservation_heartbeat: 30_000,
            reservation_silence: 10 * 60_000,
            idle_suspend: 10 * 60_000,
            checkpoint_idle: 60_000,
        }
    }
}

pub const MIN_IDLE_SUSPEND_MS: i64 = 30_000;

/// How long a pause may take to reach a step boundary: the longest command a step may run, and
/// the model's turn around it.
pub const PAUSE_WAIT: Duration = Duration::from_secs(botdesk_agent::tools::MAX_SHELL_TIMEOUT_S + 300);

/// The longest note a person may give a run at handback (characters).
pub const MAX_NOTE: usize = 2_000;

impl Policy {
    pub fn validate(&self) -> Result<()> {
        if self.idle_suspend < MIN_IDLE_SUSPEND_MS {
            return Err(EngineError::invalid(format!("idle suspend must be at least 30 s, got {} ms", self.idle_suspend)));
        }
        Ok(())
    }
}

/// Which process on which machine holds a reservation: what the owner's Release checks.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

fn process_alive(pid: i64) -> bool {
    pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseProof {
    /// The worker's process is gone from this machine.
    WorkerGone { pid: i64 },
    /// The machine rebooted since the reservation was made.
    Rebooted,
    /// The owner confirmed no worker is running.
    OwnerConfirmed,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReleaseOutcome {
    pub computer: String,
    pub reservation: Option<Reservation>,
    pub proof: Option<ReleaseProof>,
}

/// A reservation's heartbeat, stopped when dropped ([`Engine::beating`]).
pub(crate) struct Beat(tokio::task::JoinHandle<()>);

impl Drop for Beat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What keeps running when the app quits ([`Engine::left_running`]).
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct LeftRunning {
    pub computers: Vec<RunningComputer>,
    pub spares: u32,
    /// After how many unused minutes each is suspended.
    pub idle_minutes: f64,
}

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct RunningComputer {
    pub id: String,
    pub name: String,
    pub bots: Vec<String>,
    /// A run works on it now (quitting the app ends the app's runs).
    pub working: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleOutcome {
    /// Not idle long enough, or in use.
    NotIdle,
    Suspended,
    /// Activity appeared while checkpointing: the computer stays up.
    Aborted,
}

/// The app's mark on its data directory, held while it runs ([`Engine::hold_app_mark`]).
static APP_MARK: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

impl Engine {
    pub fn policy(&self) -> Policy {
        self.inner.policy
    }

    /// The computer a bot is on now (a switch moves it).
    async fn computer_of(&self, bot: &BotId) -> Result<ComputerId> {
        Ok(self.inner.store.bot(bot.as_str()).await?.computer_id)
    }

    // ---------------------------------------------------------------------------------------------
    // Runs and execution leases

    /// Queues a run for a bot.
    pub async fn create_run(&self, bot: &BotId, task: &str) -> Result<Run> {
        let computer = self.computer_of(bot).await?;
        Ok(self.inner.store.create_run(bot, &computer, task, self.now()).await?)
    }

    /// Claims the bot's execution lease for a queued run (holder = run id) and moves it to
    /// `leased`. A live lease held by another run is `Busy`. Runs left behind with an older fence
    /// (their process died and their lease expired) are marked failed.
    pub async fn lease_run(&self, run_id: &str) -> Result<(Run, ExecLease)> {
        let run = self.inner.store.run(run_id).await?;
        let now = self.now();
        let lease = self.inner.store.claim_execution(&run.computer_id, &run.bot_id, &run.id, now, self.inner.policy.exec_ttl).await?;
        for stale in self.inner.store.active_runs(&run.bot_id).await? {
            if stale.id != run.id && stale.fence.is_some_and(|f| f < lease.fence) {
                self.stop_leftovers(&stale.id).await;
                let reason = "its process stopped heartbeating and its execution lease expired";
                let _ = self.inner.store.fail_run(&stale.id, stale.status, now, RunFailure::Interrupted, reason).await;
            }
        }
        let run = self.inner.store.transition_run(&run.id, RunStatus::Queued, RunStatus::Leased, now, Some(lease.fence), None).await?;
        Ok((run, lease))
    }

    /// Runs whose driving process is gone (the app or CLI was killed, or the machine restarted)
    /// end as failed with the reason, their open tool calls and activity closed and a line in
    /// their chat; their leases are freed at once. Every process does this when it opens the
    /// engine, and the app every few seconds. Returns their ids.
    pub async fn recover_runs(&self) -> Result<Vec<String>> {
        let boot = boot_id();
        let mut ended = vec![];
        for (id, owner) in self.inner.store.owned_active_runs().await? {
            let Some((pid, owner_boot)) = owner.strip_prefix("pid:").and_then(|o| o.split_once('@')) else { continue };
            let pid: i64 = pid.parse().unwrap_or(0);
            let reason = if owner_boot != boot {
                "interrupted: the machine restarted while the run was going".to_string()
            } else if !process_alive(pid) {
                format!("interrupted: the app or CLI running it stopped (process {pid} is gone)")
            } else {
                continue;
            };
            self.stop_leftovers(&id).await;
            if self.inner.store.abandon_run(&id, &reason, self.now()).await? {
                if let Ok(run) = self.inner.store.run(&id).await {
                    self.emit(crate::RunEvent::Status {
                        bot: run.bot_id.to_string(),
                        run_id: id.clone(),
                        status: RunStatus::Failed,
                        error: Some(reason),
                        failure: Some(RunFailure::Interrupted),
                    });
                }
                ended.push(id);
            }
        }
        Ok(ended)
    }

    /// Stops everything a run started in its computer (every process in a group tagged with it):
    /// when it is stopped, or when its driver died, before its bot is handed on.
    async fn stop_leftovers(&self, run_id: &str) {
        let Ok(run) = self.inner.store.run(run_id).await else { return };
        let Ok(cref) = self.cref_of(&run.computer_id).await else { return };
        let user = self.user_of(&run.bot_id, &run.computer_id).await;
        if let Err(e) = self.inner.provider.kill_tagged(&cref, user, botdesk_core::RUN_TAG, run_id).await {
            tracing::warn!(run = run_id, "stopping what an interrupted run left running: {e}");
        }
        // Its screen recorder too; what it recorded is kept.
        self.keep_left_recording(&run).await;
    }

    /// Marks this process as the run's driver (see [`Engine::recover_runs`]).
    pub(crate) async fn own_run(&self, run_id: &str) -> Result<()> {
        Ok(self.inner.store.set_run_owner(run_id, &format!("pid:{}@{}", std::process::id(), boot_id())).await?)
    }

    pub async fn run_status(&self, run_id: &str) -> Result<Run> {
        Ok(self.inner.store.run(run_id).await?)
    }

    /// A queued run that could not get its lease ends as failed, with the reason.
    pub async fn fail_queued_run(&self, run_id: &str, reason: &str) -> Result<Run> {
        Ok(self.inner.store.fail_run(run_id, RunStatus::Queued, self.now(), RunFailure::NotStarted, reason).await?)
    }

    pub async fn begin_run(&self, run: &Run) -> Result<Run> {
        Ok(self.inner.store.transition_run(&run.id, RunStatus::Leased, RunStatus::Running, self.now(), None, None).await?)
    }

    /// The run's heartbeat: renews its lease (an older fence fails) and records the beat.
    pub async fn heartbeat_run(&self, run: &Run, lease: &ExecLease) -> Result<ExecLease> {
        let now = self.now();
        let lease = self.inner.store.renew_execution(lease, now, self.inner.policy.exec_ttl).await?;
        self.inner.store.heartbeat_run(&run.id, now).await?;
        Ok(lease)
    }

    /// The bot asks for the person: the run waits for a takeover and its lease is extended for as
    /// long as a control lease may last.
    pub async fn wait_for_takeover(&self, run: &Run, lease: &ExecLease) -> Result<(Run, ExecLease)> {
        let now = self.now();
        let lease = self.inner.store.renew_execution(lease, now, self.inner.policy.control_ttl.max(self.inner.policy.exec_ttl)).await?;
        let run = self.inner.store.transition_run(&run.id, RunStatus::Running, RunStatus::WaitingTakeover, now, None, None).await?;
        Ok((run, lease))
    }

    /// Ends a run (completed, failed or cancelled) and releases its lease.
    /// Ends a run as `to`; a failed one says what it failed of (`failure`).
    pub async fn finish_run(&self, run: &Run, lease: &ExecLease, to: RunStatus, error: Option<&str>, failure: Option<RunFailure>) -> Result<Run> {
        if !to.is_terminal() {
            return Err(EngineError::invalid(format!("{to} does not end a run")));
        }
        let current = self.inner.store.run(&run.id).await?;
        let run = match (to, failure) {
            (RunStatus::Failed, Some(failure)) => self.inner.store.fail_run(&run.id, current.status, self.now(), failure, error.unwrap_or("failed")).await?,
            _ => self.inner.store.transition_run(&run.id, current.status, to, self.now(), None, error).await?,
        };
        match self.inner.store.release_execution(lease).await {
            Ok(()) | Err(botdesk_store::StoreError::Stale(_)) => Ok(run),
            Err(e) => Err(e.into()),
        }
    }

    /// Stop: cancels the bot's active runs, ends its leases and releases its desktop.
    pub async fn stop_bot(&self, bot: &BotId) -> Result<Vec<String>> {
        let computer = self.computer_of(bot).await?;
        let now = self.now();
        let mut cancelled = vec![];
        for run in self.inner.store.active_runs(bot).await? {
            if self.inner.store.transition_run(&run.id, run.status, RunStatus::Cancelled, now, None, Some("stopped by the person")).await.is_ok() {
                self.cancel_local_run(&run.id);
                cancelled.push(run.id);
            }
        }
        self.inner.store.end_bot_leases(bot).await?;
        // Everything the runs started ends with them, also what their commands left running and
        // whatever a driver in another process is running now.
        for run in &cancelled {
            self.stop_leftovers(run).await;
        }
        if self.inner.store.desktop_of(&computer, bot).await?.is_some() {
            match self.release_desktop(&self.bot_ref(bot.as_str()).await?).await {
                Ok(_) => {}
                Err(e) if matches!(e.code, ErrorCode::DockerUnavailable | ErrorCode::NotRunning) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(cancelled)
    }

    // ---------------------------------------------------------------------------------------------
    // Control

    /// Pause and take, first half: asks the bot's run to pause at its next step boundary (after
    /// the model's current turn and the actions or command it asked for) and waits until it has,
    /// for at most `within`. Returns the paused run, or `None` when there was nothing to pause (no
    /// run, one already waiting for the person, or one that ended meanwhile). Everything the paused
    /// run started is ended. If the run does not
    /// reach a boundary in time the request is withdrawn and the run goes on. Then take control
    /// as usual.
    pub async fn pause_run(&self, bot: &BotId, within: Duration) -> Result<Option<String>> {
        let run = match self.inner.store.request_pause(bot, self.now()).await {
            Ok(r) => r,
            Err(botdesk_store::StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let r = self.inner.store.run(&run.id).await?;
            if r.status == RunStatus::WaitingTakeover {
                // Nothing the run started (a daemon typing on its display, say) acts while the
                // person has its screen.
                self.stop_leftovers(&r.id).await;
                return Ok(Some(r.id));
            }
            if r.status.is_terminal() {
                return Ok(None);
            }
            // (A run that paused just now keeps its pause: the next round sees it.)
            if tokio::time::Instant::now() >= deadline && self.inner.store.withdraw_pause(&run.id, self.now()).await? {
                return Err(EngineError::new(
                    ErrorCode::Busy,
                    format!("the bot did not finish its current step within {}; it goes on (Stop ends it)", crate::runs::format_span(within)),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Take control of a bot's screen. Refused with Busy "Stop the bot first" while the bot runs,
    /// unless its run waits for a takeover; taking it again returns the existing lease.
    pub async fn take_control(&self, bot: &BotId) -> Result<ControlLease> {
        let computer = self.computer_of(bot).await?;
        Ok(self.inner.store.take_control(&computer, bot, self.now(), self.inner.policy.control_ttl).await?)
    }

    /// The person is active: extend control.
    pub async fn renew_control(&self, bot: &BotId, lease_id: &str) -> Result<ControlLease> {
        let computer = self.computer_of(bot).await?;
        let lease = self.inner.store.renew_control(&computer, lease_id, self.now(), self.inner.policy.control_ttl).await?;
        // Its screen token lasts as long, inside the computer.
        if let Some(token) = self.inner.store.desktop_of(&computer, bot).await?.and_then(|d| d.control_token) {
            match self.inner.provider.expire_token_at(&self.cref_of(&computer).await?, &token, lease.expires_at).await {
                Ok(()) | Err(ComputerError::NotRunning(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(lease)
    }

    /// Release hands the screen back and resumes a waiting or paused run (`finished` or
    /// `skipped`), which is told `note` (at most [`MAX_NOTE`] characters) if given.
    pub async fn release_control(&self, bot: &BotId, lease_id: &str, result: TakeoverResult, note: Option<&str>) -> Result<Option<String>> {
        let note = note.map(str::trim).filter(|n| !n.is_empty());
        if let Some(n) = note {
            if n.chars().count() > MAX_NOTE {
                return Err(EngineError::invalid(format!("the note is {} characters; at most {MAX_NOTE} reach the bot", n.chars().count())));
            }
        }
        let computer = self.computer_of(bot).await?;
        let resumed = self.inner.store.release_control(&computer, lease_id, result, note, self.now()).await?;
        self.close_terminals(bot);
        self.end_control_shells(bot, &computer, lease_id).await;
        self.revoke_control_transport(bot, &computer).await?;
        Ok(resumed)
    }

    /// Stops whatever the person's shells of an ended control left in the computer (they carry
    /// its tag), also those a process that died had opened. A failure is logged: the shells'
    /// input is already refused.
    async fn end_control_shells(&self, bot: &BotId, computer: &ComputerId, lease_id: &str) {
        let user = self.user_of(bot, computer).await;
        let killed = match self.cref_of(computer).await {
            Ok(cref) => self.inner.provider.kill_tagged(&cref, user, botdesk_core::CONTROL_TAG, lease_id).await.map_err(EngineError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = killed {
            tracing::warn!(computer = %computer, "stopping the shells of an ended control: {e}");
        }
    }

    /// The current control lease of a bot's computer, if it names this bot.
    pub async fn control_of(&self, bot: &BotId) -> Result<Option<ControlLease>> {
        let computer = self.computer_of(bot).await?;
        Ok(self.inner.store.control(&computer, self.now()).await?.filter(|c| &c.bot_id == bot))
    }

    /// Whether input to this bot's screen is allowed under this control lease.
    pub async fn authorize_input(&self, bot: &BotId, lease_id: &str) -> Result<()> {
        let computer = self.computer_of(bot).await?;
        Ok(self.inner.store.authorize_input(&computer, bot, lease_id, self.now()).await?)
    }

    /// Housekeeping: revokes expired control (waiting runs resume as skipped) and marks silent
    /// reservation workers interrupted.
    pub async fn expire(&self) -> Result<(Vec<ControlLease>, Vec<String>)> {
        let revoked = self.end_lapsed_control().await?;
        let now = self.now();
        let interrupted = self.inner.store.interrupt_silent_reservations(now - self.inner.policy.reservation_silence, now).await?;
        Ok((revoked, interrupted))
    }

    /// Ends control whose lease lapsed: its token revoked, its terminals closed and its shells'
    /// processes stopped. Writes to the database only when some control lapsed (every process
    /// calls it when it opens the engine).
    pub(crate) async fn end_lapsed_control(&self) -> Result<Vec<ControlLease>> {
        let revoked = self.inner.store.expire_control(self.now()).await?;
        // Each computer's part at once, each bounded: an unreachable host holds up only its own
        // (its lease is over in the database either way, so its screen turns view-only).
        let ends = revoked.iter().map(|c| async move {
            self.close_terminals(&c.bot_id);
            let end = async {
                self.end_control_shells(&c.bot_id, &c.computer_id, &c.lease_id).await;
                self.revoke_control_transport(&c.bot_id, &c.computer_id).await
            };
            match tokio::time::timeout(UPKEEP_CALL_BOUND, end).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(computer = %c.computer_id, "ending lapsed control: {e}"),
                Err(_) => tracing::warn!(computer = %c.computer_id, "ending lapsed control took over {} s; left to the computer", UPKEEP_CALL_BOUND.as_secs()),
            }
        });
        futures::future::join_all(ends).await;
        self.close_orphan_terminals().await?;
        Ok(revoked)
    }

    // ---------------------------------------------------------------------------------------------
    // Reservations

    /// Reserves a computer for this process (its pid and the machine's boot id are recorded).
    pub async fn reserve_computer(&self, computer: &ComputerId, action: ReservationAction) -> Result<Reservation> {
        let c = self.inner.store.computer(computer.as_str()).await?;
        Ok(self.inner.store.reserve(&c.id, action, std::process::id() as i64, &boot_id(), self.now()).await?)
    }

    /// Heartbeats the reservation every `reservation_heartbeat` while the returned guard lives,
    /// so a worker busy with a long checkpoint is never taken for a silent one (and marked
    /// interrupted under it). A beat that fails is logged; the next one tries again.
    pub(crate) fn beating(&self, reservation: &Reservation) -> Beat {
        let (engine, id) = (self.clone(), reservation.id.clone());
        let every = Duration::from_millis(self.inner.policy.reservation_heartbeat.max(1) as u64);
        Beat(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = engine.inner.store.heartbeat_reservation(&id, engine.now()).await {
                    tracing::warn!(reservation = %id, "a reservation heartbeat failed: {e}");
                }
            }
        }))
    }

    pub async fn finish_reservation(&self, reservation: &Reservation, ok: bool, error: Option<&str>) -> Result<()> {
        let status = if ok { ReservationStatus::Completed } else { ReservationStatus::Failed };
        Ok(self.inner.store.finish_reservation(&reservation.id, status, error, self.now()).await?)
    }

    /// The owner's **Release computer**: frees a reservation once the worker is proven gone (its
    /// process is not running on this machine, or the machine rebooted), or when the owner
    /// confirms. A worker still running on this machine is never overridden.
    pub async fn release_computer(&self, computer: &ComputerId, owner_confirms: bool) -> Result<ReleaseOutcome> {
        let c = self.inner.store.computer(computer.as_str()).await?;
        let Some(res) = self.inner.store.reservation(&c.id).await? else {
            return Ok(ReleaseOutcome { computer: c.id.to_string(), reservation: None, proof: None });
        };
        let same_boot = res.owner_boot_id == boot_id();
        let proof = if !same_boot {
            ReleaseProof::Rebooted
        } else if res.owner_pid == std::process::id() as i64 {
            return Err(EngineError::new(ErrorCode::Busy, "this process is the worker holding the reservation; let it finish"));
        } else if !process_alive(res.owner_pid) {
            ReleaseProof::WorkerGone { pid: res.owner_pid }
        } else if owner_confirms {
            // The pid is alive on this machine: it may be ours, or a recycled pid. Only the owner can tell.
            ReleaseProof::OwnerConfirmed
        } else {
            return Err(EngineError::new(
                ErrorCode::Busy,
                format!(
                    "the worker holding this computer ({} {}, process {}) may still be running; stop it, or confirm with --confirm that nothing is running",
                    res.action, res.stage, res.owner_pid
                ),
            ));
        };
        self.inner.store.release_reservation(&res.id, self.now()).await?;
        Ok(ReleaseOutcome { computer: c.id.to_string(), reservation: Some(res), proof: Some(proof) })
    }

    // ---------------------------------------------------------------------------------------------
    // Idle suspend

    /// Suspends a computer idle for the policy's time: never during an active run or a live lease,
    /// checkpointed first (`checkpoint` does it) and re-checked after the checkpoint. A checkpoint
    /// that fails does not keep it running (a bot could wedge every save): it is suspended with
    /// its disk, which keeps the work, and the failure is logged.
    pub async fn idle_suspend<F, Fut>(&self, computer: &str, checkpoint: F) -> Result<IdleOutcome>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        self.suspend_unused_for(computer, self.inner.limits.idle_ms(), checkpoint).await
    }

    /// [`Engine::idle_suspend`] with the time a computer must have been unused given.
    async fn suspend_unused_for<F, Fut>(&self, computer: &str, unused_ms: i64, checkpoint: F) -> Result<IdleOutcome>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let c = self.inner.store.computer(computer).await?;
        if !self.unused_for(&c.id, unused_ms).await? {
            return Ok(IdleOutcome::NotIdle);
        }
        let res = match self.inner.store.reserve(&c.id, ReservationAction::IdleSuspend, std::process::id() as i64, &boot_id(), self.now()).await {
            Ok(r) => r,
            Err(botdesk_store::StoreError::Busy(_)) => return Ok(IdleOutcome::NotIdle),
            Err(e) => return Err(e.into()),
        };
        let _beat = self.beating(&res);
        self.inner.store.set_reservation_stage(&res.id, ReservationStage::Checkpointing, self.now()).await?;
        let saved = match checkpoint().await {
            Ok(()) => true,
            Err(e) if e.code == ErrorCode::Busy || e.code == ErrorCode::Conflict => {
                self.inner.store.finish_reservation(&res.id, ReservationStatus::Failed, Some(&e.message), self.now()).await?;
                return Ok(IdleOutcome::Aborted);
            }
            Err(e) => {
                tracing::warn!(computer = %c.id, "suspending without a checkpoint (its disk keeps the work): {e}");
                false
            }
        };
        // Re-check: a run may have been queued while we checkpointed.
        if self.has_active_runs(&c.id).await? {
            self.inner.store.finish_reservation(&res.id, ReservationStatus::Completed, Some("activity during the checkpoint"), self.now()).await?;
            return Ok(IdleOutcome::Aborted);
        }
        self.inner.store.set_reservation_stage(&res.id, ReservationStage::Stopping, self.now()).await?;
        self.forget_ready(&c.id).await;
        let state = c.state;
        if state == ComputerState::Running {
            self.inner.store.transition_computer(&c.id, ComputerState::Running, ComputerState::Suspending, self.now()).await?;
        }
        let stopped = self.inner.provider.stop(&c.cref(), &CallCtx::default()).await;
        match stopped {
            Ok(()) => {
                if state == ComputerState::Running {
                    self.inner.store.transition_computer(&c.id, ComputerState::Suspending, ComputerState::Suspended, self.now()).await?;
                }
                // Its home was checkpointed just before (or its disk holds what was not).
                self.inner.store.set_home_saved(&c.id, c.home_volume.is_some() && saved).await?;
                self.inner.store.set_reservation_stage(&res.id, ReservationStage::Done, self.now()).await?;
                self.inner.store.finish_reservation(&res.id, ReservationStatus::Completed, None, self.now()).await?;
                Ok(IdleOutcome::Suspended)
            }
            Err(e) => {
                let e = EngineError::from(e);
                let _ = self.inner.store.transition_computer(&c.id, ComputerState::Suspending, ComputerState::Error, self.now()).await;
                self.inner.store.finish_reservation(&res.id, ReservationStatus::Failed, Some(&e.message), self.now()).await?;
                Err(e.context("suspending the computer"))
            }
        }
    }

    async fn has_active_runs(&self, computer: &ComputerId) -> Result<bool> {
        let now = self.now();
        if !self.inner.store.live_lease_bots(computer, now).await?.is_empty() {
            return Ok(true);
        }
        for bot in self.inner.store.bots_on(computer).await? {
            if !self.inner.store.active_runs(&bot.id).await?.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Suspends every running computer idle for the policy's time, each checkpointed first (see
    /// [`Engine::idle_suspend`]), and waits for them all: all at once, a failure naming its
    /// computer. The app uses [`Engine::start_idle_suspends`].
    pub async fn suspend_idle_computers(&self) -> Result<Vec<(String, IdleOutcome)>> {
        let mut idle = vec![];
        for c in self.inner.store.list_computers().await? {
            if c.state == ComputerState::Running && self.idle_now(&c.id).await? {
                idle.push(c);
            }
        }
        let done = futures::future::join_all(idle.iter().map(|c| self.suspend_one(c))).await;
        done.into_iter().zip(&idle).map(|(o, c)| Ok((c.id.to_string(), o.map_err(|e| e.context(format!("computer {}", c.name)))?))).collect()
    }

    /// Starts the idle suspend of each running computer idle for the policy's time, each in a
    /// task of its own (at most one per computer in this process, bounded by
    /// [`IDLE_SUSPEND_BOUND`]): a slow checkpoint or an unreachable host holds up only its own
    /// computer, never control expiry, renewal or another computer's suspend. Returns how many
    /// started. The app calls this every 30 s.
    pub async fn start_idle_suspends(&self) -> Result<usize> {
        let mut started = 0;
        for c in self.inner.store.list_computers().await? {
            if c.state != ComputerState::Running || !self.idle_now(&c.id).await? {
                continue;
            }
            let handle = self.handle(&c.id);
            if !handle.start_suspend() {
                continue; // one is under way
            }
            started += 1;
            let engine = self.clone();
            self.inner.background.spawn(async move {
                match tokio::time::timeout(IDLE_SUSPEND_BOUND, engine.suspend_one(&c)).await {
                    Ok(Ok(outcome)) => tracing::info!(computer = %c.id, ?outcome, "idle suspend"),
                    Ok(Err(e)) => tracing::warn!(computer = %c.id, "idle suspend: {e}"),
                    Err(_) => tracing::warn!(computer = %c.id, "idle suspend took over {} s: given up", IDLE_SUSPEND_BOUND.as_secs()),
                }
                handle.end_suspend();
            });
        }
        Ok(started)
    }

    async fn suspend_one(&self, c: &botdesk_store::Computer) -> Result<IdleOutcome> {
        self.idle_suspend(c.id.as_str(), || self.checkpoint_before(c, crate::checkpoint::Before::Suspend)).await
    }

    async fn idle_now(&self, computer: &ComputerId) -> Result<bool> {
        self.unused_for(computer, self.inner.limits.idle_ms()).await
    }

    /// Unused for `ms`: no run, no control, nothing done on it for that long.
    async fn unused_for(&self, computer: &ComputerId, ms: i64) -> Result<bool> {
        let last = self.inner.store.last_active(computer).await?;
        Ok(self.now() - last >= ms && !self.has_active_runs(computer).await? && self.inner.store.control(computer, self.now()).await?.is_none())
    }

    /// What keeps running when the app quits: the running computers with their bots, and the
    /// spare computers.
    pub async fn left_running(&self) -> Result<LeftRunning> {
        let mut computers = vec![];
        for c in self.inner.store.list_computers().await? {
            if c.state == ComputerState::Running {
                let bots = self.inner.store.bots_on(&c.id).await?.into_iter().map(|b| b.name).collect();
                let working = self.has_active_runs(&c.id).await?;
                computers.push(RunningComputer { id: c.id.to_string(), name: c.name, bots, working });
            }
        }
        Ok(LeftRunning { computers, spares: self.spares().await?.len() as u32, idle_minutes: self.inner.limits.idle_ms() as f64 / 60_000.0 })
    }

    /// Suspends every running computer nobody works on now (saved first), and removes the
    /// spares: what "Suspend them and quit" does. A computer a run or the person's control holds
    /// is left to its idle rule.
    pub async fn suspend_all(&self) -> Result<Vec<(String, IdleOutcome)>> {
        let mut running = vec![];
        for c in self.inner.store.list_computers().await? {
            if c.state == ComputerState::Running {
                running.push(c);
            }
        }
        let done = futures::future::join_all(
            running.iter().map(|c| self.suspend_unused_for(c.id.as_str(), 0, || self.checkpoint_before(c, crate::checkpoint::Before::Suspend))),
        )
        .await;
        self.drop_spares().await?;
        done.into_iter().zip(&running).map(|(o, c)| Ok((c.id.to_string(), o.map_err(|e| e.context(format!("computer {}", c.name)))?))).collect()
    }

    /// Applies the idle rule while no app does (`botdesk computer idle-watch`, which the app
    /// starts when it quits with computers left running): removes the spares (nobody will take
    /// them), then `every` so often suspends the computers idle for the set time, and returns
    /// once none is running or an app has started on this data directory (it applies the rule
    /// itself). Only one watcher runs per data directory; a second returns at once.
    pub async fn watch_idle(&self, every: Duration) -> Result<()> {
        let lock_path = self.inner.data.root().join("idle-watch.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| EngineError::invalid(format!("{}: {e}", lock_path.display())))?;
        if lock.try_lock().is_err() {
            return Ok(());
        }
        self.drop_spares().await?;
        loop {
            if self.app_running() {
                return Ok(());
            }
            for (computer, outcome) in self.suspend_idle_computers().await? {
                tracing::info!(%computer, ?outcome, "idle suspend with no app");
            }
            if !self.inner.store.list_computers().await?.iter().any(|c| c.state == ComputerState::Running) {
                return Ok(());
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Marks this process as the app of its data directory, for as long as it runs (see
    /// [`Engine::watch_idle`]). False when another app holds the mark.
    pub fn hold_app_mark(&self) -> bool {
        let path = self.inner.data.root().join("app.lock");
        let Ok(f) = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path) else { return false };
        if f.try_lock().is_err() {
            return false;
        }
        APP_MARK.set(f).is_ok()
    }

    /// Lets go of the app's mark (the app quits, and the watcher it leaves must not take it for a
    /// running app).
    pub fn release_app_mark(&self) {
        if let Some(f) = APP_MARK.get() {
            let _ = f.unlock();
        }
    }

    fn app_running(&self) -> bool {
        let path = self.inner.data.root().join("app.lock");
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(f) => f.try_lock_shared().is_err(),
            Err(_) => false,
        }
    }
}

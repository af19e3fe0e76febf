//! Leases, runs, control and reservations. Every transition is one compare-and-swap
//! statement: it changes a row only if the row is still in the state the caller saw, so two
//! processes on one database can never both win.

use botdesk_core::{BotId, ComputerId, ComputerState, ReservationAction, ReservationStage, ReservationStatus, RunFailure, RunStatus, TakeoverResult};
use serde::Serialize;

use crate::{new_id, Result, Store, StoreError};

/// A fenced execution lease on one (computer, bot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecLease {
    pub computer_id: ComputerId,
    pub bot_id: BotId,
    pub holder: String,
    pub fence: i64,
    pub expires_at: i64,
}

impl ExecLease {
    /// `<run-id>:<fence>`.
    pub fn screen_lease_id(&self) -> String {
        format!("{}:{}", self.holder, self.fence)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Run {
    pub id: String,
    pub bot_id: BotId,
    pub computer_id: ComputerId,
    pub status: RunStatus,
    pub task: String,
    pub fence: Option<i64>,
    pub heartbeat_at: Option<i64>,
    pub takeover_result: Option<TakeoverResult>,
    pub error: Option<String>,
    /// Why it failed (failed runs only; none for those from before failures had codes).
    pub failure: Option<RunFailure>,
    /// The person asked this run to pause at its next step boundary (ms); cleared on resume.
    pub pause_requested_at: Option<i64>,
    /// What the person typed when handing the screen back, for the resumed run.
    pub handback_note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ControlLease {
    pub computer_id: ComputerId,
    pub bot_id: BotId,
    pub lease_id: String,
    pub holder: String,
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reservation {
    pub id: String,
    pub computer_id: ComputerId,
    pub action: ReservationAction,
    pub stage: ReservationStage,
    pub status: ReservationStatus,
    pub owner_pid: i64,
    pub owner_boot_id: String,
    pub heartbeat_at: i64,
    pub error: Option<String>,
}

/// The only holder of control leases: the person at the app or the CLI.
pub const USER: &str = "user";

fn busy(msg: impl Into<String>) -> StoreError {
    StoreError::Busy(msg.into())
}
fn stale(msg: impl Into<String>) -> StoreError {
    StoreError::Stale(msg.into())
}
fn parse<T>(v: &str, f: impl Fn(&str) -> Option<T>) -> Result<T> {
    f(v).ok_or_else(|| StoreError::Conflict(format!("unknown value {v:?} in the database")))
}

impl Store {
    // ---------------------------------------------------------------------------------------------
    // Execution leases

    /// Inserts the lease, or reclaims an expired one with `fence + 1`. A live lease is `Busy`; so
    /// is a reserved computer, and a bot whose screen the person controls (one driver per bot).
    pub async fn claim_execution(&self, computer: &ComputerId, bot: &BotId, holder: &str, now: i64, ttl_ms: i64) -> Result<ExecLease> {
        let (c, b, expires) = (computer.as_str(), bot.as_str(), now + ttl_ms);
        let row = sqlx::query!(
            r#"INSERT INTO execution_leases (computer_id, bot_id, holder, fence, expires_at)
               SELECT ?1, ?2, ?3, 1, ?4 WHERE NOT EXISTS (
                   SELECT 1 FROM computers WHERE id = ?1
                   AND (reservation_id IS NOT NULL OR (control_bot_id = ?2 AND control_expires_at > ?5)))
               ON CONFLICT (computer_id, bot_id) DO UPDATE
                 SET holder = excluded.holder, fence = execution_leases.fence + 1, expires_at = excluded.expires_at
                 WHERE execution_leases.expires_at <= ?5
               RETURNING fence AS "fence!: i64""#,
            c,
            b,
            holder,
            expires,
            now
        )
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => {
                self.touch(computer, now).await?;
                Ok(ExecLease { computer_id: computer.clone(), bot_id: bot.clone(), holder: holder.into(), fence: r.fence, expires_at: expires })
            }
            None if self.reservation(computer).await?.is_some() => Err(busy("this computer is reserved for maintenance; try again when it finishes")),
            None if self.control(computer, now).await?.is_some_and(|c| c.bot_id == *bot) => {
                Err(busy("the user has the screen of this bot; the run can start when they release it"))
            }
            None => Err(busy("the bot is busy: another run holds its execution lease")),
        }
    }

    /// Extends a live lease held with this fence; an older fence or an expired lease is `Stale`.
    pub async fn renew_execution(&self, lease: &ExecLease, now: i64, ttl_ms: i64) -> Result<ExecLease> {
        let (c, b, expires) = (lease.computer_id.as_str(), lease.bot_id.as_str(), now + ttl_ms);
        let done = sqlx::query!(
            "UPDATE execution_leases SET expires_at = ?1
             WHERE computer_id = ?2 AND bot_id = ?3 AND fence = ?4 AND holder = ?5 AND expires_at > ?6",
            expires,
            c,
            b,
            lease.fence,
            lease.holder,
            now
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("the execution lease with fence {} was lost (expired or taken over)", lease.fence)));
        }
        Ok(ExecLease { expires_at: expires, ..lease.clone() })
    }

    /// Releases the lease held with this fence; an older fence changes nothing and is `Stale`.
    pub async fn release_execution(&self, lease: &ExecLease) -> Result<()> {
        let (c, b) = (lease.computer_id.as_str(), lease.bot_id.as_str());
        let done = sqlx::query!(
            "UPDATE execution_leases SET holder = NULL, expires_at = 0
             WHERE computer_id = ?1 AND bot_id = ?2 AND fence = ?3 AND holder = ?4",
            c,
            b,
            lease.fence,
            lease.holder
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("fence {} no longer holds this lease; nothing was released", lease.fence)));
        }
        Ok(())
    }

    /// Ends every lease of a bot whatever its fence (Stop). The row stays so fences keep growing.
    pub async fn end_bot_leases(&self, bot: &BotId) -> Result<u64> {
        let b = bot.as_str();
        Ok(sqlx::query!("UPDATE execution_leases SET holder = NULL, expires_at = 0 WHERE bot_id = ?1 AND holder IS NOT NULL", b)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    pub async fn live_execution(&self, computer: &ComputerId, bot: &BotId, now: i64) -> Result<Option<ExecLease>> {
        let (c, b) = (computer.as_str(), bot.as_str());
        let row = sqlx::query!(
            r#"SELECT holder AS "holder!", fence, expires_at FROM execution_leases
               WHERE computer_id = ?1 AND bot_id = ?2 AND holder IS NOT NULL AND expires_at > ?3"#,
            c,
            b,
            now
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| ExecLease { computer_id: computer.clone(), bot_id: bot.clone(), holder: r.holder, fence: r.fence, expires_at: r.expires_at }))
    }

    /// Bots with a live lease on a computer.
    pub async fn live_lease_bots(&self, computer: &ComputerId, now: i64) -> Result<Vec<BotId>> {
        let c = computer.as_str();
        let rows = sqlx::query!("SELECT bot_id FROM execution_leases WHERE computer_id = ?1 AND holder IS NOT NULL AND expires_at > ?2", c, now)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|r| BotId::new(r.bot_id)).collect())
    }

    /// Records activity on a computer (idle suspend counts from the last one).
    pub async fn touch(&self, computer: &ComputerId, now: i64) -> Result<()> {
        let c = computer.as_str();
        sqlx::query!("UPDATE computers SET last_active_at = MAX(last_active_at, ?1) WHERE id = ?2", now, c).execute(&self.pool).await?;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------
    // Runs

    pub async fn create_run(&self, bot: &BotId, computer: &ComputerId, task: &str, now: i64) -> Result<Run> {
        let id = format!("r{}", new_id());
        let (b, c, q) = (bot.as_str(), computer.as_str(), RunStatus::Queued.as_str());
        sqlx::query!(
            "INSERT INTO runs (id, bot_id, computer_id, status, task, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
            id,
            b,
            c,
            q,
            task,
            now
        )
        .execute(&self.pool)
        .await?;
        self.run(&id).await
    }

    /// Records the checkpoint version of its computer's home a run started from.
    pub async fn set_run_home_version(&self, id: &str, version: i64) -> Result<()> {
        sqlx::query!("UPDATE runs SET home_version = ?1 WHERE id = ?2", version, id).execute(&self.pool).await?;
        Ok(())
    }

    /// Records how many files of its bot's folder a run wrote or removed (by its ending checkpoint).
    pub async fn set_run_files_changed(&self, id: &str, files: i64) -> Result<()> {
        sqlx::query!("UPDATE runs SET files_changed = ?1 WHERE id = ?2", files, id).execute(&self.pool).await?;
        Ok(())
    }

    /// Runs of a bot whose file changes can be undone: run id → files they changed (only runs
    /// with a starting version that changed something).
    pub async fn undoable_runs(&self, bot: &BotId) -> Result<std::collections::HashMap<String, i64>> {
        let b = bot.as_str();
        let rows =
            sqlx::query!(r#"SELECT id AS "id!", files_changed AS "files!" FROM runs WHERE bot_id = ?1 AND home_version IS NOT NULL AND files_changed > 0"#, b)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|r| (r.id, r.files)).collect())
    }

    /// The checkpoint version a run started from (None: its computer had none yet).
    pub async fn run_home_version(&self, id: &str) -> Result<Option<i64>> {
        let r = sqlx::query!("SELECT home_version FROM runs WHERE id = ?1", id).fetch_optional(&self.pool).await?;
        Ok(r.ok_or_else(|| StoreError::NotFound(format!("run {id}")))?.home_version)
    }

    /// A bot's latest runs (or only the one with id `only`), newest first: each one with when it
    /// was made and last changed.
    pub async fn runs_of_bot(&self, bot: &BotId, only: Option<&str>, limit: i64) -> Result<Vec<(Run, i64, i64)>> {
        let b = bot.as_str();
        let rows = sqlx::query!(
            r#"SELECT id AS "id!", created_at AS "created_at: i64", updated_at AS "updated_at: i64" FROM runs
               WHERE bot_id = ?1 AND (?2 IS NULL OR id = ?2) ORDER BY created_at DESC, rowid DESC LIMIT ?3"#,
            b,
            only,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        let mut runs = Vec::with_capacity(rows.len());
        for r in rows {
            runs.push((self.run(&r.id).await?, r.created_at, r.updated_at));
        }
        Ok(runs)
    }

    pub async fn run(&self, id: &str) -> Result<Run> {
        let r = sqlx::query!(
            r#"SELECT id AS "id!", bot_id, computer_id, status, task, fence, heartbeat_at, takeover_result, error, failure, pause_requested_at, handback_note FROM runs WHERE id = ?1"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("run {id}")))?;
        Ok(Run {
            id: r.id,
            bot_id: BotId::new(r.bot_id),
            computer_id: ComputerId::new(r.computer_id),
            status: parse(&r.status, RunStatus::parse)?,
            task: r.task,
            fence: r.fence,
            heartbeat_at: r.heartbeat_at,
            takeover_result: r.takeover_result.as_deref().map(|t| parse(t, TakeoverResult::parse)).transpose()?,
            error: r.error,
            // A code this version does not know (written by a newer one) reads as none.
            failure: r.failure.as_deref().and_then(RunFailure::parse),
            pause_requested_at: r.pause_requested_at,
            handback_note: r.handback_note,
        })
    }

    /// Asks the bot's active run to pause at its next step boundary. Asking twice keeps the first
    /// time. `NotFound` when the bot has no run to pause (a run waiting for the person needs none).
    pub async fn request_pause(&self, bot: &BotId, now: i64) -> Result<Run> {
        let b = bot.as_str();
        let row = sqlx::query!(
            r#"UPDATE runs SET pause_requested_at = COALESCE(pause_requested_at, ?1), updated_at = ?1
               WHERE bot_id = ?2 AND status IN ('queued', 'leased', 'running') RETURNING id AS "id!""#,
            now,
            b
        )
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => self.run(&r.id).await,
            None => Err(StoreError::NotFound("a task to pause: the bot is not working on one".into())),
        }
    }

    /// Withdraws a pause the run has not reached yet (the person gave up waiting). A run already
    /// paused stays paused until released.
    pub async fn withdraw_pause(&self, run: &str, now: i64) -> Result<bool> {
        let done = sqlx::query!("UPDATE runs SET pause_requested_at = NULL, updated_at = ?1 WHERE id = ?2 AND status != 'waiting_takeover'", now, run)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Active (not terminal) runs of a bot.
    pub async fn active_runs(&self, bot: &BotId) -> Result<Vec<Run>> {
        let b = bot.as_str();
        let ids =
            sqlx::query!(r#"SELECT id AS "id!" FROM runs WHERE bot_id = ?1 AND status NOT IN ('completed', 'failed', 'cancelled') ORDER BY created_at"#, b)
                .fetch_all(&self.pool)
                .await?;
        let mut runs = vec![];
        for r in ids {
            runs.push(self.run(&r.id).await?);
        }
        Ok(runs)
    }

    /// Moves a run from `from` to `to` if it is still in `from` (checked against the table of
    /// transitions first). `fence` is recorded when entering `leased`; `error` when failing.
    pub async fn transition_run(&self, id: &str, from: RunStatus, to: RunStatus, now: i64, fence: Option<i64>, error: Option<&str>) -> Result<Run> {
        self.move_run(id, from, to, now, fence, error, None).await
    }

    /// Fails a run (from `from`), with what it failed of and the sentence for the person.
    pub async fn fail_run(&self, id: &str, from: RunStatus, now: i64, failure: RunFailure, error: &str) -> Result<Run> {
        self.move_run(id, from, RunStatus::Failed, now, None, Some(error), Some(failure)).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn move_run(
        &self,
        id: &str,
        from: RunStatus,
        to: RunStatus,
        now: i64,
        fence: Option<i64>,
        error: Option<&str>,
        failure: Option<RunFailure>,
    ) -> Result<Run> {
        from.check(to).map_err(|e| StoreError::Conflict(e.to_string()))?;
        let (f, t) = (from.as_str(), to.as_str());
        let failure = failure.map(RunFailure::as_str);
        let done = sqlx::query!(
            "UPDATE runs SET status = ?1, updated_at = ?2, fence = COALESCE(?3, fence), error = COALESCE(?4, error),
                             failure = COALESCE(?7, failure), heartbeat_at = ?2
             WHERE id = ?5 AND status = ?6",
            t,
            now,
            fence,
            error,
            id,
            f,
            failure
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            let current = self.run(id).await?;
            return Err(stale(format!("run {id} is {} now, not {from}; it was not moved to {to}", current.status)));
        }
        self.run(id).await
    }

    /// Records which process drives a run (`pid:<pid>@<boot id>`), so a restart can tell it died.
    pub async fn set_run_owner(&self, id: &str, owner: &str) -> Result<()> {
        sqlx::query!("UPDATE runs SET lease_owner = ?1 WHERE id = ?2", owner, id).execute(&self.pool).await?;
        Ok(())
    }

    /// Active runs with the process that drives them.
    pub async fn owned_active_runs(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query!(
            r#"SELECT id AS "id!", lease_owner AS "owner!" FROM runs WHERE lease_owner IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled')"#
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.id, r.owner)).collect())
    }

    /// A run whose process died: failed with the reason, and its execution lease freed at once (the
    /// next claim gets fence + 1). False if the run had already moved on.
    pub async fn abandon_run(&self, id: &str, reason: &str, now: i64) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let failure = RunFailure::Interrupted.as_str();
        let done = sqlx::query!(
            "UPDATE runs SET status = 'failed', error = ?1, failure = ?4, updated_at = ?2
             WHERE id = ?3 AND status NOT IN ('completed', 'failed', 'cancelled')",
            reason,
            now,
            id,
            failure
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!("UPDATE execution_leases SET holder = NULL, expires_at = 0 WHERE holder = ?1", id).execute(&mut *tx).await?;
        if done.rows_affected() == 1 {
            // Its chat says so, and nothing of it stays "running": its open tool calls and
            // activity end as errors with the reason.
            let (ended, note) = (format!("not finished: the run was {reason}"), format!("The run failed: {reason}"));
            sqlx::query!(
                "UPDATE tool_calls SET result = json_object('text', ?1), is_error = 1, finished_at = ?2 WHERE run_id = ?3 AND finished_at IS NULL",
                ended,
                now,
                id
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query!("UPDATE activity SET status = 'error', updated_at = ?1 WHERE run_id = ?2 AND status = 'running'", now, id).execute(&mut *tx).await?;
            sqlx::query!("INSERT INTO messages (run_id, role, content, created_at) VALUES (?1, 'system', json_object('text', ?2), ?3)", id, note, now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn heartbeat_run(&self, id: &str, now: i64) -> Result<()> {
        sqlx::query!("UPDATE runs SET heartbeat_at = ?1 WHERE id = ?2", now, id).execute(&self.pool).await?;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------
    // Computer state

    /// Compare-and-swap of a computer's state (bumping its generation).
    pub async fn transition_computer(&self, id: &ComputerId, from: ComputerState, to: ComputerState, now: i64) -> Result<()> {
        from.check(to).map_err(|e| StoreError::Conflict(e.to_string()))?;
        let (c, f, t) = (id.as_str(), from.as_str(), to.as_str());
        let done = sqlx::query!("UPDATE computers SET state = ?1, generation = generation + 1, updated_at = ?2 WHERE id = ?3 AND state = ?4", t, now, c, f)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("computer {id} is no longer {from}; it was not moved to {to}")));
        }
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------
    // Control leases (Take control)

    /// Takes control of a bot's screen for the person. Refused with `BotRunning("Stop the bot first")`
    /// while that bot has a live execution lease or an active run, unless its run is waiting for a
    /// takeover. Taking it again returns the existing lease.
    pub async fn take_control(&self, computer: &ComputerId, bot: &BotId, now: i64, ttl_ms: i64) -> Result<ControlLease> {
        if let Some(existing) = self.control(computer, now).await? {
            if existing.bot_id == *bot {
                return Ok(existing);
            }
            return Err(busy(format!("you already control another bot's screen on this computer ({}); release it first", existing.bot_id)));
        }
        let lease_id = format!("ctl{}", new_id());
        let (c, b, expires) = (computer.as_str(), bot.as_str(), now + ttl_ms);
        let done = sqlx::query!(
            "UPDATE computers
                SET control_holder = ?1, control_lease_id = ?2, control_expires_at = ?3, control_bot_id = ?4, last_active_at = MAX(last_active_at, ?5)
              WHERE id = ?6 AND reservation_id IS NULL
                AND (control_lease_id IS NULL OR control_expires_at <= ?5)
                AND NOT EXISTS (SELECT 1 FROM runs WHERE bot_id = ?4 AND status IN ('queued', 'leased', 'running'))
                AND (NOT EXISTS (SELECT 1 FROM execution_leases WHERE computer_id = ?6 AND bot_id = ?4 AND holder IS NOT NULL AND expires_at > ?5)
                     OR EXISTS (SELECT 1 FROM runs WHERE bot_id = ?4 AND status = 'waiting_takeover'))",
            USER,
            lease_id,
            expires,
            b,
            now,
            c
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(ControlLease { computer_id: computer.clone(), bot_id: bot.clone(), lease_id, holder: USER.into(), expires_at: expires });
        }
        if self.reservation(computer).await?.is_some() {
            return Err(busy("this computer is reserved for maintenance; try again when it finishes"));
        }
        if let Some(other) = self.control(computer, now).await? {
            if other.bot_id == *bot {
                return Ok(other); // a concurrent take by the same person won
            }
            return Err(busy("another screen on this computer is under control; release it first"));
        }
        Err(StoreError::BotRunning("Stop the bot first".into()))
    }

    /// The live control lease of a computer, if any.
    pub async fn control(&self, computer: &ComputerId, now: i64) -> Result<Option<ControlLease>> {
        let c = computer.as_str();
        let row = sqlx::query!(
            r#"SELECT control_holder AS "holder!", control_lease_id AS "lease_id!", control_expires_at AS "expires_at!: i64", control_bot_id AS "bot_id!"
               FROM computers WHERE id = ?1 AND control_lease_id IS NOT NULL AND control_expires_at > ?2"#,
            c,
            now
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| ControlLease {
            computer_id: computer.clone(),
            bot_id: BotId::new(r.bot_id),
            lease_id: r.lease_id,
            holder: r.holder,
            expires_at: r.expires_at,
        }))
    }

    pub async fn renew_control(&self, computer: &ComputerId, lease_id: &str, now: i64, ttl_ms: i64) -> Result<ControlLease> {
        let (c, expires) = (computer.as_str(), now + ttl_ms);
        let done = sqlx::query!(
            "UPDATE computers SET control_expires_at = ?1, last_active_at = MAX(last_active_at, ?2)
             WHERE id = ?3 AND control_lease_id = ?4 AND control_expires_at > ?2",
            expires,
            now,
            c,
            lease_id
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(stale("control of this screen has ended (released or expired)"));
        }
        self.control(computer, now).await?.ok_or_else(|| stale("control of this screen has ended"))
    }

    /// Input is authorised only for the bot named by a live control lease presented by its id.
    pub async fn authorize_input(&self, computer: &ComputerId, bot: &BotId, lease_id: &str, now: i64) -> Result<()> {
        match self.control(computer, now).await? {
            Some(l) if l.lease_id == lease_id && l.bot_id == *bot => Ok(()),
            Some(l) if l.lease_id == lease_id => Err(busy(format!("this control lease is for bot {}, not {bot}", l.bot_id))),
            _ => Err(stale("you do not have control of this screen")),
        }
    }

    /// Ends a control lease and resumes the bot's run if it was waiting for the takeover, telling
    /// it how the person finished. Returns the resumed run's id.
    pub async fn release_control(&self, computer: &ComputerId, lease_id: &str, result: TakeoverResult, note: Option<&str>, now: i64) -> Result<Option<String>> {
        let c = computer.as_str();
        let mut tx = self.write_tx().await?;
        let row = sqlx::query!(r#"SELECT control_bot_id AS "bot!" FROM computers WHERE id = ?1 AND control_lease_id = ?2"#, c, lease_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else { return Err(stale("this control lease was already released or replaced")) };
        sqlx::query!(
            "UPDATE computers SET control_holder = NULL, control_lease_id = NULL, control_expires_at = NULL, control_bot_id = NULL WHERE id = ?1 AND control_lease_id = ?2",
            c, lease_id
        )
        .execute(&mut *tx)
        .await?;
        let resumed = resume_waiting(&mut tx, &row.bot, result, note, now).await?;
        tx.commit().await?;
        Ok(resumed)
    }

    /// Revokes every control lease that expired by `now`. A run that asked for the person resumes
    /// as skipped; a run the person paused ends, cancelled (nobody handed it back: resuming it on
    /// a screen they may have left half-changed would be a guess). Returns the leases revoked.
    pub async fn expire_control(&self, now: i64) -> Result<Vec<ControlLease>> {
        let mut tx = self.write_tx().await?;
        let rows = sqlx::query!(
            r#"SELECT id AS "id!", control_bot_id AS "bot!", control_lease_id AS "lease!", control_holder AS "holder!", control_expires_at AS "expires!"
               FROM computers WHERE control_lease_id IS NOT NULL AND control_expires_at <= ?1"#,
            now
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut out = vec![];
        for r in rows {
            sqlx::query!(
                "UPDATE computers SET control_holder = NULL, control_lease_id = NULL, control_expires_at = NULL, control_bot_id = NULL
                 WHERE id = ?1 AND control_expires_at <= ?2",
                r.id,
                now
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query!(
                "UPDATE runs SET status = 'cancelled', pause_requested_at = NULL, updated_at = ?1,
                        error = 'paused for the person, who did not hand the screen back before their control expired'
                 WHERE bot_id = ?2 AND status = 'waiting_takeover' AND pause_requested_at IS NOT NULL",
                now,
                r.bot
            )
            .execute(&mut *tx)
            .await?;
            resume_waiting(&mut tx, &r.bot, TakeoverResult::Skipped, None, now).await?;
            out.push(ControlLease {
                computer_id: ComputerId::new(r.id),
                bot_id: BotId::new(r.bot),
                lease_id: r.lease,
                holder: r.holder,
                expires_at: r.expires,
            });
        }
        tx.commit().await?;
        Ok(out)
    }

    // ---------------------------------------------------------------------------------------------
    // Reservations

    /// Reserves a computer for update / recover / stop / idle suspend. Refused while another
    /// reservation holds it, while the person controls one of its screens, or while bots hold
    /// live execution leases on it.
    pub async fn reserve(&self, computer: &ComputerId, action: ReservationAction, owner_pid: i64, boot_id: &str, now: i64) -> Result<Reservation> {
        let id = format!("res{}", new_id());
        let (c, a, stage, status) = (computer.as_str(), action.as_str(), ReservationStage::Reserved.as_str(), ReservationStatus::Active.as_str());
        let mut tx = self.write_tx().await?;
        let done = sqlx::query!(
            "UPDATE computers SET reservation_id = ?1, generation = generation + 1
             WHERE id = ?2 AND reservation_id IS NULL
               AND (control_lease_id IS NULL OR control_expires_at <= ?3)
               AND NOT EXISTS (SELECT 1 FROM execution_leases WHERE computer_id = ?2 AND holder IS NOT NULL AND expires_at > ?3)",
            id,
            c,
            now
        )
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            drop(tx);
            if let Some(r) = self.reservation(computer).await? {
                return Err(busy(format!("this computer is already reserved ({}, {})", r.action, r.status)));
            }
            if !self.live_lease_bots(computer, now).await?.is_empty() {
                return Err(busy("Other bots are still using this computer"));
            }
            return Err(busy("you have control of a screen on this computer; release it first"));
        }
        sqlx::query!(
            "INSERT INTO reservations (id, computer_id, action, stage, status, owner_pid, owner_boot_id, heartbeat_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8)",
            id,
            c,
            a,
            stage,
            status,
            owner_pid,
            boot_id,
            now
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.reservation(computer).await?.ok_or_else(|| StoreError::Conflict("the reservation vanished".into()))
    }

    /// The reservation holding a computer, if any (active or interrupted).
    pub async fn reservation(&self, computer: &ComputerId) -> Result<Option<Reservation>> {
        let c = computer.as_str();
        let r = sqlx::query!(
            r#"SELECT r.id AS "id!", r.computer_id, r.action, r.stage, r.status, r.owner_pid, r.owner_boot_id, r.heartbeat_at, r.error
             FROM reservations r JOIN computers c ON c.reservation_id = r.id WHERE c.id = ?1"#,
            c
        )
        .fetch_optional(&self.pool)
        .await?;
        r.map(|r| {
            Ok(Reservation {
                id: r.id,
                computer_id: ComputerId::new(r.computer_id),
                action: parse(&r.action, ReservationAction::parse)?,
                stage: parse(&r.stage, ReservationStage::parse)?,
                status: parse(&r.status, ReservationStatus::parse)?,
                owner_pid: r.owner_pid,
                owner_boot_id: r.owner_boot_id,
                heartbeat_at: r.heartbeat_at,
                error: r.error,
            })
        })
        .transpose()
    }

    /// Records the stage the worker reached (and counts as a heartbeat).
    pub async fn set_reservation_stage(&self, id: &str, stage: ReservationStage, now: i64) -> Result<()> {
        let s = stage.as_str();
        let done = sqlx::query!("UPDATE reservations SET stage = ?1, heartbeat_at = ?2, updated_at = ?2 WHERE id = ?3 AND status = 'active'", s, now, id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("reservation {id} is no longer active")));
        }
        Ok(())
    }

    pub async fn heartbeat_reservation(&self, id: &str, now: i64) -> Result<()> {
        let done = sqlx::query!("UPDATE reservations SET heartbeat_at = ?1 WHERE id = ?2 AND status = 'active'", now, id).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("reservation {id} is no longer active")));
        }
        Ok(())
    }

    /// Marks reservations whose worker has been silent since `silent_since` as interrupted. The
    /// reservation keeps the computer: a stale heartbeat alone never frees it.
    pub async fn interrupt_silent_reservations(&self, silent_since: i64, now: i64) -> Result<Vec<String>> {
        let rows = sqlx::query!(
            r#"UPDATE reservations SET status = 'interrupted', updated_at = ?1 WHERE status = 'active' AND heartbeat_at <= ?2 RETURNING id AS "id!""#,
            now,
            silent_since
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    /// The worker finished (completed or failed): the computer is free again.
    pub async fn finish_reservation(&self, id: &str, status: ReservationStatus, error: Option<&str>, now: i64) -> Result<()> {
        self.end_reservation(id, &["active"], status, error, now).await
    }

    /// The owner's **Release computer**: frees an active or interrupted reservation. The engine
    /// calls this only after proving the worker is gone, or on the owner's confirmation.
    pub async fn release_reservation(&self, id: &str, now: i64) -> Result<()> {
        self.end_reservation(id, &["active", "interrupted"], ReservationStatus::Released, None, now).await
    }

    async fn end_reservation(&self, id: &str, from: &[&str], status: ReservationStatus, error: Option<&str>, now: i64) -> Result<()> {
        let s = status.as_str();
        let (from_a, from_b) = (from[0], *from.get(1).unwrap_or(&from[0]));
        let mut tx = self.write_tx().await?;
        let done = sqlx::query!(
            "UPDATE reservations SET status = ?1, error = ?2, updated_at = ?3 WHERE id = ?4 AND status IN (?5, ?6)",
            s,
            error,
            now,
            id,
            from_a,
            from_b
        )
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(stale(format!("reservation {id} cannot become {status} now")));
        }
        sqlx::query!("UPDATE computers SET reservation_id = NULL, generation = generation + 1 WHERE reservation_id = ?1", id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

async fn resume_waiting(tx: &mut sqlx::SqliteConnection, bot: &str, result: TakeoverResult, note: Option<&str>, now: i64) -> Result<Option<String>> {
    let r = result.as_str();
    let row = sqlx::query!(
        r#"UPDATE runs SET status = 'running', takeover_result = ?1, updated_at = ?2, heartbeat_at = ?2, handback_note = ?3, pause_requested_at = NULL
         WHERE bot_id = ?4 AND status = 'waiting_takeover' RETURNING id AS "id!""#,
        r,
        now,
        note,
        bot
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|r| r.id))
}

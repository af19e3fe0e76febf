//! Every lease, run, control and reservation transition, including each refusal and its message.

use botdesk_core::*;
use botdesk_store::*;

const TTL: i64 = 300_000;
const CTL: i64 = 900_000;

struct Fixture {
    s: Store,
    c: ComputerId,
    bots: Vec<BotId>,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("botdesk.db")).await.unwrap();
    let mut bots = vec![];
    let mut c = None;
    for name in ["a", "b", "c"] {
        let (bot, comp) = s
            .create_bot(NewBot { name, scope: ComputerScope::Team, model: None, instructions: "", provider: "fake", host: HostName::local() }, 0)
            .await
            .unwrap();
        bots.push(bot.id);
        c = Some(comp.id);
    }
    Fixture { s, c: c.unwrap(), bots, _dir: dir }
}

fn msg(e: StoreError) -> String {
    e.to_string()
}

#[tokio::test]
async fn claim_inserts_then_busy_then_reclaims_after_expiry_with_fence_plus_one() {
    let f = fixture().await;
    let (c, a) = (&f.c, &f.bots[0]);
    let l1 = f.s.claim_execution(c, a, "run1", 1_000, TTL).await.unwrap();
    assert_eq!(l1.fence, 1);
    assert_eq!(l1.screen_lease_id(), "run1:1");
    let busy = f.s.claim_execution(c, a, "run2", 1_000 + TTL - 1, TTL).await.unwrap_err();
    assert!(matches!(busy, StoreError::Busy(_)));
    assert_eq!(msg(busy), "the bot is busy: another run holds its execution lease");
    // Another bot of the same computer is independent.
    assert_eq!(f.s.claim_execution(c, &f.bots[1], "run3", 1_000, TTL).await.unwrap().fence, 1);
    // Expired: reclaimed with fence + 1, and the old holder can neither renew nor release.
    let l2 = f.s.claim_execution(c, a, "run2", 1_000 + TTL, TTL).await.unwrap();
    assert_eq!(l2.fence, 2);
    assert!(matches!(f.s.renew_execution(&l1, 1_000 + TTL, TTL).await, Err(StoreError::Stale(_))));
    let e = f.s.release_execution(&l1).await.unwrap_err();
    assert_eq!(msg(e), "fence 1 no longer holds this lease; nothing was released");
    assert_eq!(f.s.live_execution(c, a, 1_000 + TTL).await.unwrap().unwrap().fence, 2, "the newer lease survived");
}

#[tokio::test]
async fn renew_extends_release_frees_and_fences_keep_growing() {
    let f = fixture().await;
    let (c, a) = (&f.c, &f.bots[0]);
    let l1 = f.s.claim_execution(c, a, "r", 0, TTL).await.unwrap();
    let l1 = f.s.renew_execution(&l1, 60_000, TTL).await.unwrap();
    assert_eq!(l1.expires_at, 60_000 + TTL);
    assert!(f.s.claim_execution(c, a, "x", TTL + 1, TTL).await.is_err(), "the renewal kept it live");
    f.s.release_execution(&l1).await.unwrap();
    assert!(f.s.live_execution(c, a, 61_000).await.unwrap().is_none());
    assert!(matches!(f.s.release_execution(&l1).await, Err(StoreError::Stale(_))), "release twice");
    let l2 = f.s.claim_execution(c, a, "r2", 61_000, TTL).await.unwrap();
    assert_eq!(l2.fence, 2, "a release never resets the fence");
    // Renewing an expired lease fails even with the right fence.
    assert!(matches!(f.s.renew_execution(&l2, 61_000 + TTL, TTL).await, Err(StoreError::Stale(_))));
    // Stop ends every lease of the bot whatever its fence.
    let l3 = f.s.claim_execution(c, a, "r3", 61_000 + TTL, TTL).await.unwrap();
    assert_eq!(f.s.end_bot_leases(a).await.unwrap(), 1);
    assert!(f.s.live_execution(c, a, 61_000 + TTL).await.unwrap().is_none());
    assert_eq!(f.s.claim_execution(c, a, "r4", 61_000 + TTL, TTL).await.unwrap().fence, l3.fence + 1);
}

#[tokio::test]
async fn run_transitions_are_compare_and_swap() {
    let f = fixture().await;
    let run = f.s.create_run(&f.bots[0], &f.c, "task", 0).await.unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    let run = f.s.transition_run(&run.id, RunStatus::Queued, RunStatus::Leased, 1, Some(7), None).await.unwrap();
    assert_eq!((run.status, run.fence), (RunStatus::Leased, Some(7)));
    // A writer that saw an old state loses.
    let e = f.s.transition_run(&run.id, RunStatus::Queued, RunStatus::Leased, 2, None, None).await.unwrap_err();
    assert_eq!(msg(e), format!("run {} is leased now, not queued; it was not moved to leased", run.id));
    // A transition the table does not allow is refused before touching SQL.
    let e = f.s.transition_run(&run.id, RunStatus::Leased, RunStatus::Completed, 2, None, None).await.unwrap_err();
    assert_eq!(msg(e), "a run cannot go from leased to completed");
    let steps = [
        (RunStatus::Leased, RunStatus::Running),
        (RunStatus::Running, RunStatus::WaitingTakeover),
        (RunStatus::WaitingTakeover, RunStatus::Running),
        (RunStatus::Running, RunStatus::Completed),
    ];
    for (from, to) in steps {
        assert_eq!(f.s.transition_run(&run.id, from, to, 3, None, None).await.unwrap().status, to);
    }
    assert!(f.s.transition_run(&run.id, RunStatus::Completed, RunStatus::Running, 4, None, None).await.is_err());
    let failed = f.s.create_run(&f.bots[0], &f.c, "t", 5).await.unwrap();
    let failed = f.s.transition_run(&failed.id, RunStatus::Queued, RunStatus::Failed, 6, None, Some("boom")).await.unwrap();
    assert_eq!(failed.error.as_deref(), Some("boom"));
    for to in [RunStatus::Cancelled, RunStatus::Failed] {
        let r = f.s.create_run(&f.bots[1], &f.c, "t", 7).await.unwrap();
        f.s.transition_run(&r.id, RunStatus::Queued, RunStatus::Leased, 8, None, None).await.unwrap();
        f.s.transition_run(&r.id, RunStatus::Leased, to, 9, None, None).await.unwrap();
    }
    assert!(f.s.active_runs(&f.bots[1]).await.unwrap().is_empty());
}

#[tokio::test]
async fn computer_state_transitions_are_compare_and_swap() {
    let f = fixture().await;
    use ComputerState::*;
    for (from, to) in [
        (Stopped, Booting),
        (Booting, Running),
        (Running, Suspending),
        (Suspending, Suspended),
        (Suspended, Booting),
        (Booting, Error),
        (Error, Booting),
        (Booting, Running),
        (Running, Stopped),
    ] {
        f.s.transition_computer(&f.c, from, to, 1).await.unwrap();
    }
    let e = f.s.transition_computer(&f.c, Running, Suspending, 2).await.unwrap_err();
    assert_eq!(msg(e), format!("computer {} is no longer running; it was not moved to suspending", f.c));
    assert_eq!(msg(f.s.transition_computer(&f.c, Stopped, Running, 2).await.unwrap_err()), "a computer cannot go from stopped to running");
}

#[tokio::test]
async fn control_is_refused_while_the_bot_runs_unless_it_waits_for_a_takeover() {
    let f = fixture().await;
    let (c, a, b) = (&f.c, &f.bots[0], &f.bots[1]);
    // A live execution lease: "Stop the bot first".
    let lease = f.s.claim_execution(c, a, "run", 0, TTL).await.unwrap();
    let e = f.s.take_control(c, a, 1, CTL).await.unwrap_err();
    assert!(matches!(e, StoreError::BotRunning(_)));
    assert_eq!(msg(e), "Stop the bot first");
    // An active run without a lease: still refused.
    f.s.release_execution(&lease).await.unwrap();
    let run = f.s.create_run(a, c, "t", 2).await.unwrap();
    assert_eq!(msg(f.s.take_control(c, a, 3, CTL).await.unwrap_err()), "Stop the bot first");
    // The run asks for the person: control is granted even though its lease is live.
    let lease = f.s.claim_execution(c, a, &run.id, 4, TTL).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Queued, RunStatus::Leased, 5, Some(lease.fence), None).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Leased, RunStatus::Running, 6, None, None).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Running, RunStatus::WaitingTakeover, 7, None, None).await.unwrap();
    let ctl = f.s.take_control(c, a, 8, CTL).await.unwrap();
    assert_eq!((ctl.holder.as_str(), ctl.expires_at), ("user", 8 + CTL));
    // Taking it again returns the same lease; another bot's screen is refused meanwhile.
    assert_eq!(f.s.take_control(c, a, 9, CTL).await.unwrap(), ctl);
    assert!(msg(f.s.take_control(c, b, 9, CTL).await.unwrap_err()).contains("release it first"));
    // Input: only this bot, only this lease.
    f.s.authorize_input(c, a, &ctl.lease_id, 10).await.unwrap();
    assert!(f.s.authorize_input(c, b, &ctl.lease_id, 10).await.is_err(), "control of A never authorises input to B");
    assert!(f.s.authorize_input(c, a, "ctl-forged", 10).await.is_err());
    // Renew, then release resumes the waiting run with the person's answer.
    let ctl = f.s.renew_control(c, &ctl.lease_id, 100, CTL).await.unwrap();
    assert_eq!(ctl.expires_at, 100 + CTL);
    assert_eq!(f.s.release_control(c, &ctl.lease_id, TakeoverResult::Finished, None, 200).await.unwrap(), Some(run.id.clone()));
    let resumed = f.s.run(&run.id).await.unwrap();
    assert_eq!((resumed.status, resumed.takeover_result), (RunStatus::Running, Some(TakeoverResult::Finished)));
    assert!(f.s.authorize_input(c, a, &ctl.lease_id, 201).await.is_err(), "release revokes input");
    assert!(matches!(f.s.release_control(c, &ctl.lease_id, TakeoverResult::Finished, None, 202).await, Err(StoreError::Stale(_))));
}

#[tokio::test]
async fn control_expiry_revokes_input_and_resumes_a_waiting_run_as_skipped() {
    let f = fixture().await;
    let (c, a) = (&f.c, &f.bots[0]);
    let run = f.s.create_run(a, c, "t", 0).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Queued, RunStatus::Leased, 1, None, None).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Leased, RunStatus::Running, 1, None, None).await.unwrap();
    f.s.transition_run(&run.id, RunStatus::Running, RunStatus::WaitingTakeover, 1, None, None).await.unwrap();
    let ctl = f.s.take_control(c, a, 10, CTL).await.unwrap();
    assert!(f.s.expire_control(10 + CTL - 1).await.unwrap().is_empty());
    assert_eq!(f.s.expire_control(10 + CTL).await.unwrap(), vec![ctl.clone()]);
    assert!(f.s.authorize_input(c, a, &ctl.lease_id, 10 + CTL).await.is_err());
    assert!(matches!(f.s.renew_control(c, &ctl.lease_id, 10 + CTL, CTL).await, Err(StoreError::Stale(_))));
    let r = f.s.run(&run.id).await.unwrap();
    assert_eq!((r.status, r.takeover_result), (RunStatus::Running, Some(TakeoverResult::Skipped)));
    // An expired control lease does not block the next take.
    f.s.transition_run(&run.id, RunStatus::Running, RunStatus::Completed, 11, None, None).await.unwrap();
    assert_ne!(f.s.take_control(c, a, 10 + CTL + 1, CTL).await.unwrap().lease_id, ctl.lease_id);
}

#[tokio::test]
async fn a_reservation_blocks_leases_takeovers_and_other_reservations() {
    let f = fixture().await;
    let (c, a, b) = (&f.c, &f.bots[0], &f.bots[1]);
    // Refused while a bot holds a live lease.
    let lease = f.s.claim_execution(c, b, "run", 0, TTL).await.unwrap();
    let e = f.s.reserve(c, ReservationAction::Stop, 42, "boot", 1).await.unwrap_err();
    assert_eq!(msg(e), "Other bots are still using this computer");
    f.s.release_execution(&lease).await.unwrap();
    let res = f.s.reserve(c, ReservationAction::Update, 42, "boot", 2).await.unwrap();
    assert_eq!((res.action, res.stage, res.status), (ReservationAction::Update, ReservationStage::Reserved, ReservationStatus::Active));
    let reserved = "this computer is reserved for maintenance; try again when it finishes";
    assert_eq!(msg(f.s.claim_execution(c, a, "r", 3, TTL).await.unwrap_err()), reserved);
    assert_eq!(msg(f.s.take_control(c, a, 3, CTL).await.unwrap_err()), reserved);
    assert_eq!(msg(f.s.reserve(c, ReservationAction::IdleSuspend, 43, "boot", 3).await.unwrap_err()), "this computer is already reserved (update, active)");
    // Stages are stored as they happen; heartbeats keep it active.
    f.s.set_reservation_stage(&res.id, ReservationStage::Provisioning, 30_000).await.unwrap();
    f.s.heartbeat_reservation(&res.id, 60_000).await.unwrap();
    assert_eq!(f.s.reservation(c).await.unwrap().unwrap().stage, ReservationStage::Provisioning);
    // Silent for 10 minutes: interrupted, and still holding the computer.
    assert!(f.s.interrupt_silent_reservations(60_000 - 1, 700_000).await.unwrap().is_empty());
    assert_eq!(f.s.interrupt_silent_reservations(60_000, 700_000).await.unwrap(), vec![res.id.clone()]);
    let r = f.s.reservation(c).await.unwrap().unwrap();
    assert_eq!(r.status, ReservationStatus::Interrupted);
    assert!(f.s.claim_execution(c, a, "r", 700_001, TTL).await.is_err(), "a stale heartbeat alone never frees it");
    assert!(matches!(f.s.heartbeat_reservation(&res.id, 700_002).await, Err(StoreError::Stale(_))));
    assert!(f.s.finish_reservation(&res.id, ReservationStatus::Completed, None, 700_003).await.is_err(), "an interrupted worker cannot finish");
    // Only the owner's release frees it.
    f.s.release_reservation(&res.id, 700_004).await.unwrap();
    assert!(f.s.reservation(c).await.unwrap().is_none());
    f.s.claim_execution(c, a, "r", 700_005, TTL).await.unwrap();
    // A finished reservation frees the computer too.
    let f2 = fixture().await;
    let res = f2.s.reserve(&f2.c, ReservationAction::Recover, 1, "boot", 0).await.unwrap();
    f2.s.finish_reservation(&res.id, ReservationStatus::Failed, Some("disk full"), 1).await.unwrap();
    assert!(f2.s.reservation(&f2.c).await.unwrap().is_none());
}

#[tokio::test]
async fn one_driver_per_bot_a_controlled_screen_refuses_runs_and_reservations() {
    let f = fixture().await;
    let (c, a, b) = (&f.c, &f.bots[0], &f.bots[1]);
    let ctl = f.s.take_control(c, a, 0, CTL).await.unwrap();
    assert_eq!(msg(f.s.claim_execution(c, a, "run", 1, TTL).await.unwrap_err()), "the user has the screen of this bot; the run can start when they release it");
    f.s.claim_execution(c, b, "run-b", 1, TTL).await.expect("another bot still runs");
    assert_eq!(msg(f.s.reserve(c, ReservationAction::Stop, 1, "boot", 2).await.unwrap_err()), "Other bots are still using this computer");
    f.s.end_bot_leases(b).await.unwrap();
    assert_eq!(
        msg(f.s.reserve(c, ReservationAction::Stop, 1, "boot", 2).await.unwrap_err()),
        "you have control of a screen on this computer; release it first"
    );
    f.s.release_control(c, &ctl.lease_id, TakeoverResult::Finished, None, 3).await.unwrap();
    f.s.claim_execution(c, a, "run", 4, TTL).await.unwrap();
}

//! The engine's lease flows over the fake provider, with a manual clock.

use botdesk_core::{ComputerProvider, ComputerScope, ReservationAction, RunStatus, TakeoverResult};
use botdesk_engine::*;
use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

struct ManualClock(AtomicI64);
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct World {
    engine: Engine,
    clock: Arc<ManualClock>,
    fake: Arc<botdesk_fake::FakeProvider>,
    dir: tempfile::TempDir,
}

impl World {
    fn advance(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
    }
}

async fn world(policy: Policy) -> World {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(botdesk_fake::FakeProvider::new());
    let clock = Arc::new(ManualClock(AtomicI64::new(1_000_000)));
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(fake.clone()));
    cfg.clock = clock.clone();
    cfg.policy = policy;
    let engine = Engine::open(cfg).await.unwrap();
    engine.create_bot("a", ComputerScope::Team, None, "").await.unwrap();
    engine.create_bot("b", ComputerScope::Team, None, "").await.unwrap();
    World { engine, clock, fake, dir }
}

async fn start(e: &Engine, bot: &str) -> (Run, ExecLease) {
    let run = e.create_run(&e.bot_ref(bot).await.unwrap().id, "task").await.unwrap();
    let (run, lease) = e.lease_run(&run.id).await.unwrap();
    (e.begin_run(&run).await.unwrap(), lease)
}

#[tokio::test]
async fn a_run_holds_its_lease_with_heartbeats_and_releases_it_at_the_end() {
    let w = world(Policy::default()).await;
    let (run, lease) = start(&w.engine, "a").await;
    assert_eq!(lease.screen_lease_id(), format!("{}:1", run.id));
    let second = w.engine.create_run(&w.engine.bot_ref("a").await.unwrap().id, "other").await.unwrap();
    assert_eq!(w.engine.lease_run(&second.id).await.unwrap_err().code, ErrorCode::Busy);
    w.engine.fail_queued_run(&second.id, "busy").await.unwrap();
    w.advance(200_000);
    let lease = w.engine.heartbeat_run(&run, &lease).await.unwrap();
    w.advance(200_000); // 400 s after the claim, alive thanks to the heartbeat
    let lease = w.engine.heartbeat_run(&run, &lease).await.unwrap();
    let done = w.engine.finish_run(&run, &lease, RunStatus::Completed, None, None).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let (_, next) = start(&w.engine, "a").await;
    assert_eq!(next.fence, 2);
}

#[tokio::test]
async fn a_dead_runs_lease_expires_and_its_run_is_marked_failed_on_reclaim() {
    let w = world(Policy::default()).await;
    let (dead, _lease) = start(&w.engine, "a").await;
    w.advance(Policy::default().exec_ttl);
    let (_, lease) = start(&w.engine, "a").await;
    assert_eq!(lease.fence, 2);
    let dead = w.engine.run_status(&dead.id).await.unwrap();
    assert_eq!(dead.status, RunStatus::Failed);
    assert!(dead.error.unwrap().contains("stopped heartbeating"));
}

#[tokio::test]
async fn take_control_waits_for_stop_or_a_takeover_request_and_release_resumes_the_run() {
    let w = world(Policy::default()).await;
    let (run, lease) = start(&w.engine, "a").await;
    let e = w.engine.take_control(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::BotRunning, "Stop the bot first"));
    // The bot asks for the person; its lease is extended for the takeover.
    let (run, lease) = w.engine.wait_for_takeover(&run, &lease).await.unwrap();
    assert!(lease.expires_at >= w.clock.now_ms() + Policy::default().control_ttl);
    let ctl = w.engine.take_control(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap();
    assert_eq!(w.engine.take_control(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap(), ctl, "taking it again returns the same lease");
    w.engine.authorize_input(&w.engine.bot_ref("a").await.unwrap().id, &ctl.lease_id).await.unwrap();
    assert!(w.engine.authorize_input(&w.engine.bot_ref("b").await.unwrap().id, &ctl.lease_id).await.is_err());
    assert_eq!(
        w.engine.release_control(&w.engine.bot_ref("a").await.unwrap().id, &ctl.lease_id, TakeoverResult::Skipped, None).await.unwrap(),
        Some(run.id.clone())
    );
    let resumed = w.engine.run_status(&run.id).await.unwrap();
    assert_eq!((resumed.status, resumed.takeover_result), (RunStatus::Running, Some(TakeoverResult::Skipped)));
    // Stop cancels the run and ends its lease; control is then allowed.
    assert_eq!(w.engine.stop_bot(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap(), vec![run.id.clone()]);
    assert_eq!(w.engine.run_status(&run.id).await.unwrap().status, RunStatus::Cancelled);
    let ctl = w.engine.take_control(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap();
    // Expiry revokes input by itself.
    w.advance(Policy::default().control_ttl);
    let (revoked, _) = w.engine.expire().await.unwrap();
    assert_eq!(revoked.len(), 1);
    assert!(w.engine.authorize_input(&w.engine.bot_ref("a").await.unwrap().id, &ctl.lease_id).await.is_err());
    let _ = lease;
}

#[tokio::test]
async fn stopping_a_computer_is_refused_while_other_bots_use_it() {
    let w = world(Policy::default()).await;
    w.engine.exec(&w.engine.bot_ref("b").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let (_run, _lease) = start(&w.engine, "a").await;
    let e = w.engine.stop_computer(&w.engine.computer_id("team").await.unwrap()).await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::Busy, "Other bots are still using this computer"));
    w.engine.stop_bot(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap();
    let stopped = w.engine.stop_computer(&w.engine.computer_id("team").await.unwrap()).await.unwrap();
    assert_eq!((stopped.status.as_str(), stopped.state.as_str()), ("stopped", "stopped"));
    w.engine.exec(&w.engine.bot_ref("b").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    assert_eq!(w.engine.list_computers().await.unwrap()[0].state, botdesk_core::state::ComputerState::Running);
}

#[tokio::test]
async fn release_computer_needs_proof_that_the_worker_is_gone_or_the_owners_word() {
    let w = world(Policy::default()).await;
    // This process's own reservation: never released from under it.
    let res = w.engine.reserve_computer(&w.engine.computer_id("team").await.unwrap(), ReservationAction::Update).await.unwrap();
    assert_eq!(w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), true).await.unwrap_err().code, ErrorCode::Busy);
    w.engine.finish_reservation(&res, true, None).await.unwrap();
    assert!(w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), false).await.unwrap().reservation.is_none());

    let store = botdesk_store::Store::open(&w.dir.path().join("botdesk.db")).await.unwrap();
    let team = w.engine.list_computers().await.unwrap()[0].id.clone();
    // A worker process that has exited: proven gone.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id() as i64;
    child.wait().unwrap();
    store.reserve(&team, ReservationAction::Recover, dead_pid, &boot_id(), w.clock.now_ms()).await.unwrap();
    let out = w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), false).await.unwrap();
    assert!(matches!(out.proof, Some(ReleaseProof::WorkerGone { pid }) if pid == dead_pid));
    // Reserved before a reboot: proven gone.
    store.reserve(&team, ReservationAction::Stop, 1, "an-older-boot", w.clock.now_ms()).await.unwrap();
    assert!(matches!(w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), false).await.unwrap().proof, Some(ReleaseProof::Rebooted)));
    // A live process on this machine: only the owner's confirmation frees it; interrupted or not.
    store.reserve(&team, ReservationAction::IdleSuspend, 1, &boot_id(), w.clock.now_ms()).await.unwrap();
    w.advance(Policy::default().reservation_silence);
    let (_, interrupted) = w.engine.expire().await.unwrap();
    assert_eq!(interrupted.len(), 1);
    let e = w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), false).await.unwrap_err();
    assert!(e.message.contains("may still be running"), "{}", e.message);
    assert!(w.engine.create_run(&w.engine.bot_ref("a").await.unwrap().id, "t").await.is_ok());
    assert!(matches!(w.engine.release_computer(&w.engine.computer_id("team").await.unwrap(), true).await.unwrap().proof, Some(ReleaseProof::OwnerConfirmed)));
}

#[tokio::test]
async fn idle_suspend_checkpoints_first_rechecks_and_a_failed_checkpoint_keeps_no_computer_awake() {
    let policy = Policy { idle_suspend: 60_000, ..Policy::default() };
    let w = world(policy).await;
    assert!(
        Engine::open({
            let mut c = EngineConfig::new(w.dir.path().join("other"), ProviderChoice::Custom(w.fake.clone()));
            c.policy = Policy { idle_suspend: 29_999, ..Policy::default() };
            c
        })
        .await
        .is_err(),
        "idle suspend below 30 s is refused"
    );
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let computer = botdesk_core::ComputerRef::local(w.engine.list_computers().await.unwrap()[0].id.clone());
    // Not idle yet.
    assert_eq!(w.engine.idle_suspend("team", || async { Ok(()) }).await.unwrap(), IdleOutcome::NotIdle);
    w.advance(60_000);
    // Never during an active run.
    let (run, lease) = start(&w.engine, "a").await;
    w.advance(60_000);
    assert_eq!(w.engine.idle_suspend("team", || async { Ok(()) }).await.unwrap(), IdleOutcome::NotIdle);
    w.engine.finish_run(&run, &lease, RunStatus::Completed, None, None).await.unwrap();
    w.advance(60_000);
    // Activity during the checkpoint: re-checked, aborted.
    let engine = w.engine.clone();
    let outcome =
        w.engine.idle_suspend("team", || async move { engine.create_run(&engine.bot_ref("b").await.unwrap().id, "new work").await.map(drop) }).await.unwrap();
    assert_eq!(outcome, IdleOutcome::Aborted);
    assert_eq!(w.fake.status(&computer).await.unwrap(), botdesk_core::MachineStatus::Running);
    w.engine.stop_bot(&w.engine.bot_ref("b").await.unwrap().id).await.unwrap();
    // A failed checkpoint does not keep it running (a bot could wedge every save): suspended with
    // its disk, which keeps the work; the next use boots it again.
    let outcome = w.engine.idle_suspend("team", || async { Err(EngineError::invalid("disk full")) }).await.unwrap();
    assert_eq!(outcome, IdleOutcome::Suspended);
    assert_eq!(w.fake.status(&computer).await.unwrap(), botdesk_core::MachineStatus::Stopped);
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    w.advance(60_000);
    // Idle, checkpoint fine: suspended.
    assert_eq!(w.engine.idle_suspend("team", || async { Ok(()) }).await.unwrap(), IdleOutcome::Suspended);
    assert_eq!(w.fake.status(&computer).await.unwrap(), botdesk_core::MachineStatus::Stopped);
    assert_eq!(w.engine.list_computers().await.unwrap()[0].state, botdesk_core::state::ComputerState::Suspended);
    // The next use boots it again: suspended → booting → running.
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    assert_eq!(w.engine.list_computers().await.unwrap()[0].state, botdesk_core::state::ComputerState::Running);

    // The periodic sweep: nothing while recently used; once idle, a checkpoint of the workspace
    // on this machine, then suspended.
    assert!(w.engine.suspend_idle_computers().await.unwrap().is_empty());
    let id = w.engine.list_computers().await.unwrap()[0].id.clone();
    let note = botdesk_core::WorkspacePath::parse("bots/note.txt").unwrap();
    w.fake.write(&computer, &note, bytes::Bytes::from_static(b"kept"), false, &Default::default()).await.unwrap();
    w.advance(60_000);
    assert_eq!(w.engine.suspend_idle_computers().await.unwrap(), vec![(id.to_string(), IdleOutcome::Suspended)]);
    assert_eq!(w.fake.status(&computer).await.unwrap(), botdesk_core::MachineStatus::Stopped);
    let home = w.engine.list_computers().await.unwrap()[0].home.clone();
    assert_eq!(std::fs::read_to_string(home.join("current/bots/note.txt")).unwrap(), "kept");
}

/// A command that runs keeps its computer awake: idle suspend passes the computer by while a
/// command runs, however long nothing else happened, and takes it once the command ended and the
/// idle time passed again. (A running command marks its computer active every third of the idle
/// time, 10 s here, in real time: the 25 s command gives it two chances and 5 s to spare.) A
/// person's shell needs control, which keeps its computer awake by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_keeps_its_computer_from_idle_suspend() {
    let w = world(Policy { idle_suspend: 30_000, ..Policy::default() }).await;
    let e = w.engine.clone();
    let long =
        tokio::spawn(async move { e.exec(&e.bot_ref("a").await.unwrap(), vec!["sleep".into(), "25".into()], None, None, None, Default::default()).await });
    let running = || async {
        w.engine
            .exec(
                &w.engine.bot_ref("b").await.unwrap(),
                vec!["pgrep".into(), "-c".into(), "-fx".into(), "sleep 25".into()],
                None,
                None,
                None,
                Default::default(),
            )
            .await
            .unwrap()
            .code
            == 0
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !running().await {
        assert!(std::time::Instant::now() < deadline, "the command never started");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Nothing else happens for longer than the idle time while the command runs.
    w.advance(31_000);
    assert_eq!(long.await.unwrap().unwrap().code, 0);
    assert_eq!(w.engine.suspend_idle_computers().await.unwrap(), vec![], "the running command did not keep its computer awake");
    w.advance(31_000);
    let id = w.engine.list_computers().await.unwrap()[0].id.clone();
    assert_eq!(w.engine.suspend_idle_computers().await.unwrap(), vec![(id.to_string(), IdleOutcome::Suspended)]);
}

/// One computer whose checkpoint hangs (a stopped helper, a host that drops packets) holds up
/// nothing else: the upkeep suspends another idle computer and ends lapsed control meanwhile, and
/// never starts a second suspend of the hung one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_checkpoint_holds_up_no_other_suspend_nor_control_expiry() {
    let w = world(Policy::default()).await;
    w.engine.create_bot("p", ComputerScope::Private, None, "").await.unwrap();
    w.engine.create_bot("q", ComputerScope::Private, None, "").await.unwrap();
    let mut computers = vec![];
    for bot in ["a", "p", "q"] {
        w.engine.exec(&w.engine.bot_ref(bot).await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
        let id = w.engine.bot(bot).await.unwrap().computer.id;
        computers.push(botdesk_core::ComputerRef::local(id));
    }
    let [team, p, q] = &computers[..] else { unreachable!() };
    let control = w.engine.take_control(&w.engine.bot_ref("q").await.unwrap().id).await.unwrap();
    w.fake.stall_saves(&team.id, true);
    let stopped = |c: &botdesk_core::ComputerRef| {
        let (fake, c) = (w.fake.clone(), c.clone());
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while fake.status(&c).await.unwrap() != botdesk_core::MachineStatus::Stopped {
                assert!(std::time::Instant::now() < deadline, "{} was not suspended", c.id);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    // Idle: the team computer's suspend hangs in its checkpoint, p's goes through.
    w.advance(11 * 60_000);
    assert_eq!(w.engine.start_idle_suspends().await.unwrap(), 2, "q is under control");
    stopped(p).await;
    assert_eq!(w.fake.status(team).await.unwrap(), botdesk_core::MachineStatus::Running);
    // q's control lapses: it ends at once, and q is suspended in turn; the hung one is not
    // started again.
    w.advance(5 * 60_000);
    let (revoked, _) = tokio::time::timeout(std::time::Duration::from_secs(5), w.engine.expire()).await.expect("expiry waited").unwrap();
    assert_eq!(revoked.iter().map(|c| c.lease_id.as_str()).collect::<Vec<_>>(), [control.lease_id.as_str()]);
    assert_eq!(w.engine.start_idle_suspends().await.unwrap(), 1);
    stopped(q).await;
    // Once its checkpoint answers, the team computer is suspended too.
    w.fake.stall_saves(&team.id, false);
    stopped(team).await;
}

/// Quitting the app: what keeps running is listed (working or not), "Suspend them and quit"
/// suspends at once what no run holds, and the watcher left behind suspends the rest once idle,
/// then ends.
#[tokio::test]
async fn quitting_lists_what_keeps_running_suspends_it_and_the_watcher_suspends_the_rest() {
    let w = world(Policy::default()).await;
    assert!(w.engine.left_running().await.unwrap().computers.is_empty());
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let (run, lease) = start(&w.engine, "a").await;
    let left = w.engine.left_running().await.unwrap();
    assert_eq!(left.computers.len(), 1);
    assert_eq!((left.computers[0].bots.clone(), left.computers[0].working, left.idle_minutes), (vec!["a".to_string(), "b".to_string()], true, 10.0));
    // A run holds it: left to the idle rule.
    assert_eq!(w.engine.suspend_all().await.unwrap()[0].1, IdleOutcome::NotIdle);
    w.engine.finish_run(&run, &lease, RunStatus::Completed, None, None).await.unwrap();
    assert!(!w.engine.left_running().await.unwrap().computers[0].working);

    // The watcher: nothing while the computer was used within the idle time …
    w.advance(9 * 60_000);
    let watcher = tokio::spawn({
        let engine = w.engine.clone();
        async move { engine.watch_idle(std::time::Duration::from_millis(50)).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!watcher.is_finished(), "the watcher ended with a computer running");
    assert_eq!(w.engine.list_computers().await.unwrap()[0].state, botdesk_core::state::ComputerState::Running);
    // … then, idle, it is suspended and the watcher ends.
    w.advance(60_000);
    tokio::time::timeout(std::time::Duration::from_secs(60), watcher).await.expect("the watcher ends").unwrap().unwrap();
    assert_eq!(w.engine.list_computers().await.unwrap()[0].state, botdesk_core::state::ComputerState::Suspended);

    // "Suspend them and quit": at once, however recently used.
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    assert_eq!(w.engine.suspend_all().await.unwrap()[0].1, IdleOutcome::Suspended);
    assert!(w.engine.left_running().await.unwrap().computers.is_empty());
}

/// A destroy whose checkpoint takes longer than a silent worker is allowed keeps its reservation
/// by heartbeats: housekeeping does not mark it interrupted under it, and it completes.
#[tokio::test]
async fn a_long_destroy_heartbeats_its_reservation_and_completes() {
    let w = world(Policy { reservation_heartbeat: 20, ..Policy::default() }).await;
    w.engine.exec(&w.engine.bot_ref("a").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let computer = w.engine.list_computers().await.unwrap()[0].id.clone();
    w.fake.stall_saves(&computer, true);
    let destroy = tokio::spawn({
        let engine = w.engine.clone();
        async move { engine.destroy_computer(&engine.computer_id("team").await.unwrap()).await }
    });
    // Its checkpoint hangs for 15 minutes of the clock (a silent worker is given 10).
    for _ in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        w.advance(5 * 60_000);
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let (_, interrupted) = w.engine.expire().await.unwrap();
    assert_eq!(interrupted, Vec::<String>::new(), "the busy destroy was taken for a silent worker");
    w.fake.stall_saves(&computer, false);
    let view = tokio::time::timeout(std::time::Duration::from_secs(60), destroy).await.expect("the destroy ends").unwrap().unwrap();
    assert_eq!(view.state, botdesk_core::state::ComputerState::Stopped);
}

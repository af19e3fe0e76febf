//! The engine over the fake provider (fast, deterministic) and, for reconcile, the real Docker engine.

use botdesk_core::{ComputerId, ComputerProvider, ComputerScope, ComputerSpec, Resources};
use botdesk_engine::{Clock, Engine, EngineConfig, ErrorCode, ProviderChoice};
use bytes::Bytes;
use std::sync::{atomic::AtomicI64, Arc};
use tokio_util::sync::CancellationToken;

struct FixedClock(AtomicI64);
impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

async fn fake_engine() -> (Engine, Arc<botdesk_fake::FakeProvider>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(botdesk_fake::FakeProvider::new());
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(fake.clone()));
    cfg.clock = Arc::new(FixedClock(AtomicI64::new(1_000)));
    (Engine::open(cfg).await.unwrap(), fake, dir)
}

async fn stdout_of(engine: &Engine, bot: &str, argv: &[&str], cwd: Option<&str>) -> (i32, String) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exit = engine
        .exec(&engine.bot_ref(bot).await.unwrap(), argv.iter().map(|s| s.to_string()).collect(), cwd, None, Some(tx), CancellationToken::new())
        .await
        .unwrap();
    let mut out = String::new();
    while let Ok(c) = rx.try_recv() {
        out.push_str(&String::from_utf8_lossy(&c.data));
    }
    (exit.code, out)
}

#[tokio::test]
async fn paths_resolve_in_the_bots_folder_exactly_as_the_bots_tools_will() {
    let (engine, _fake, _dir) = fake_engine().await;
    let a = engine.create_bot("a", ComputerScope::Team, None, "").await.unwrap();
    let local = botdesk_engine::NewModel {
        id: "m1".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "llama3.1".into(),
        base_url: Some("http://127.0.0.1:11434/v1".into()),
        coordinates: None,
    };
    engine.add_model(local, None).await.unwrap(); // keyless: no keyring involved
    let p = engine.create_bot("p", ComputerScope::Private, Some("m1"), "be brief").await.unwrap();
    assert_eq!(a.folder, format!("bots/{}", a.id));
    assert_eq!(p.folder, ".");
    assert_eq!(stdout_of(&engine, "a", &["pwd"], None).await, (0, format!("/home/botdesk/bots/{}\n", a.id)));
    assert_eq!(stdout_of(&engine, "p", &["pwd"], None).await, (0, "/home/botdesk\n".into()));
    let written = engine.files_write(&engine.bot_ref("a").await.unwrap(), "out/r.txt", Bytes::from_static(b"r"), false).await.unwrap();
    assert_eq!(written, format!("bots/{}/out/r.txt", a.id));
    assert_eq!(engine.files_write(&engine.bot_ref("a").await.unwrap(), "shared/s.txt", Bytes::from_static(b"s"), false).await.unwrap(), "shared/s.txt");
    assert_eq!(engine.files_write(&engine.bot_ref("p").await.unwrap(), "notes.txt", Bytes::from_static(b"n"), false).await.unwrap(), "notes.txt");
    let (dir, entries) = engine.files_list(&engine.bot_ref("a").await.unwrap(), "out").await.unwrap();
    assert_eq!(dir, format!("bots/{}/out", a.id));
    assert_eq!(entries.len(), 1);
    assert_eq!(&engine.files_read(&engine.bot_ref("a").await.unwrap(), "out/r.txt", 10).await.unwrap()[..], b"r");
    let err = engine.files_read(&engine.bot_ref("a").await.unwrap(), "../../etc/passwd", 10).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::PathEscapes);
    assert_eq!(err.message, "\"../../etc/passwd\" escapes the computer workspace");
    let err = engine.files_read(&engine.bot_ref("a").await.unwrap(), "out/r.txt", 0).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::TooLarge);
}

#[tokio::test]
async fn bots_are_validated_listed_and_removed() {
    let (engine, fake, _dir) = fake_engine().await;
    assert_eq!(engine.create_bot("../evil", ComputerScope::Team, None, "").await.unwrap_err().code, ErrorCode::Invalid);
    engine.create_bot("one", ComputerScope::Team, None, "").await.unwrap();
    assert_eq!(engine.create_bot("ONE", ComputerScope::Team, None, "").await.unwrap_err().code, ErrorCode::Conflict);
    let solo = engine.create_bot("solo", ComputerScope::Private, None, "").await.unwrap();
    stdout_of(&engine, "solo", &["true"], None).await;
    let solo_ref = botdesk_core::ComputerRef::local(solo.computer.id.clone());
    assert_eq!(fake.status(&solo_ref).await.unwrap(), botdesk_core::MachineStatus::Running);
    engine.remove_bot(&engine.bot_ref("solo").await.unwrap().id).await.unwrap();
    assert_eq!(fake.status(&solo_ref).await.unwrap(), botdesk_core::MachineStatus::Missing, "a Private bot's machine goes with it");
    assert_eq!(engine.list_bots().await.unwrap().iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["one"]);
    assert_eq!(engine.remove_bot(&solo.id).await.unwrap_err().code, ErrorCode::NotFound, "removed already");
    assert_eq!(engine.bot_ref("solo").await.unwrap_err().code, ErrorCode::NotFound);
}

#[tokio::test]
async fn stop_and_destroy_then_the_next_use_starts_again() {
    let (engine, _fake, _dir) = fake_engine().await;
    engine.create_bot("a", ComputerScope::Team, None, "").await.unwrap();
    stdout_of(&engine, "a", &["true"], None).await;
    assert_eq!(engine.stop_computer(&engine.computer_id("team").await.unwrap()).await.unwrap().status, botdesk_engine::MachineStatus::Stopped);
    assert_eq!(stdout_of(&engine, "a", &["echo", "back"], None).await, (0, "back\n".into()));
    assert_eq!(engine.destroy_computer(&engine.computer_id("team").await.unwrap()).await.unwrap().status, botdesk_engine::MachineStatus::Missing);
    assert_eq!(stdout_of(&engine, "a", &["echo", "again"], None).await, (0, "again\n".into()));
    assert_eq!(engine.list_computers().await.unwrap()[0].status, botdesk_engine::MachineStatus::Running);
}

/// Reconcile against the real engine: a labelled container whose computer the database knows is
/// adopted; one it does not know (left by a crash) is removed; other data directories are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_adopts_known_and_removes_orphan_containers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    engine.create_bot("r", ComputerScope::Team, None, "").await.unwrap();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    engine.exec(&engine.bot_ref("r").await.unwrap(), vec!["true".into()], None, None, Some(tx), CancellationToken::new()).await.unwrap();
    // An orphan: a container of this data directory for a computer the database never had.
    let orphan = botdesk_docker::DockerProvider::new(botdesk_docker::DockerConfig::new(engine.image_tag(), engine.data_dir().label()));
    let spec = ComputerSpec {
        id: ComputerId::new("corphan"),
        name: "orphan".into(),
        scope: ComputerScope::Team,
        home_volume: format!("botdesk-{}-corphan", engine.data_dir().label()),
        resources: Resources::default(),
        host: botdesk_core::HostName::local(),
    };
    orphan.provision(&spec, &Default::default()).await.unwrap();
    // A container of another data directory must survive.
    let other_dir = tempfile::tempdir().unwrap();
    let other = botdesk_docker::DockerProvider::new(botdesk_docker::DockerConfig::new(engine.image_tag(), "someone-else"));
    let other_spec = ComputerSpec { home_volume: format!("someone-else-{}", other_dir.path().file_name().unwrap().to_string_lossy()), ..spec.clone() };
    other.provision(&other_spec, &Default::default()).await.unwrap();

    let report = engine.reconcile().await.unwrap();
    let team = engine.list_computers().await.unwrap()[0].id.clone();
    assert_eq!(report.adopted, vec![team.to_string()]);
    assert_eq!(report.removed, vec!["corphan".to_string()]);
    assert!(orphan.list_managed().await.unwrap().iter().all(|f| f.computer != "corphan"));
    assert_eq!(other.list_managed().await.unwrap().len(), 1, "another data directory's container was touched");
    // A second pass finds nothing to remove.
    let again = engine.reconcile().await.unwrap();
    assert!(again.removed.is_empty());
    assert!(
        report.volumes_removed.iter().chain(&again.volumes_removed).any(|v| v.ends_with("-corphan")),
        "the orphan's home volume is reaped: {report:?} {again:?}"
    );
    assert!(!orphan.list_volumes(None).await.unwrap().iter().any(|v| v.ends_with("-corphan")));

    other.destroy(&botdesk_core::ComputerRef::from(&other_spec), &Default::default()).await.unwrap();
    engine.destroy_computer(&team).await.unwrap();
    assert!(orphan.list_managed().await.unwrap().is_empty());
}

/// One computer's boot holds up no other: while a Private computer's provisioning is held, another
/// bot's computer starts and runs a command; the held one finishes once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_computers_boot_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(botdesk_fake::Faulty::new(Arc::new(botdesk_fake::FakeProvider::new())));
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(faulty.clone()));
    cfg.clock = Arc::new(FixedClock(AtomicI64::new(1_000)));
    let engine = Engine::open(cfg).await.unwrap();
    let slow = engine.create_bot("slow", ComputerScope::Private, None, "").await.unwrap();
    engine.create_bot("quick", ComputerScope::Private, None, "").await.unwrap();
    let hold = faulty.hold(slow.computer.id.clone());
    let e = engine.clone();
    let slow_run = tokio::spawn(async move { stdout_of(&e, "slow", &["echo", "late"], None).await });
    hold.entered().await;
    // A hang guard, not a time bound: with one lock over every boot this waits for the held one.
    let quick = tokio::time::timeout(std::time::Duration::from_secs(60), stdout_of(&engine, "quick", &["echo", "on time"], None)).await;
    assert_eq!(quick.expect("the second computer's start waited for the first one's boot"), (0, "on time\n".into()));
    assert!(!slow_run.is_finished(), "the held boot went on before its release");
    hold.release();
    assert_eq!(slow_run.await.unwrap(), (0, "late\n".into()));
}

/// The run loop and the tool mapping with no Docker, no X and no keyring daemon: a scripted model
/// (over HTTP, with its key kept in memory) looks at the fake desktop, clicks on it, runs a
/// command and writes a file; the fake records what reached the screen.
#[tokio::test]
async fn a_run_works_the_fake_desktop_and_shell_with_its_key_in_memory() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(botdesk_fake::FakeProvider::new());
    // Every call to the computer, counted.
    let counted = Arc::new(botdesk_fake::Faulty::new(fake.clone()));
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(counted.clone()));
    cfg.secrets = botdesk_engine::Secrets::memory();
    let engine = Engine::open(cfg).await.unwrap();
    let saw_image = |s: &Seen| match s.results.first() {
        Some(r) if r.has_image && !r.is_error => Ok(()),
        other => Err(format!("expected a screenshot, got {other:?}")),
    };
    let said = |want: &'static str| {
        move |s: &Seen| match s.results.first() {
            Some(r) if !r.is_error && r.text.contains(want) => Ok(()),
            other => Err(format!("expected a result containing {want:?}, got {other:?}")),
        }
    };
    // The second act's look does not come back with its answer (armed as the model is asked
    // for it, after the first act): the run looks on its own, and the model still sees the screen.
    let armed = counted.clone();
    let arm_then_said = move |s: &Seen| {
        armed.arm(botdesk_fake::Fault::ActWithoutLook);
        said("Did 2 actions")(s)
    };
    let saw_both = move |s: &Seen| saw_image(s).and(said("Did 1 action")(s));
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::call("computer_observe", json!({}))),
        Step::check(saw_image, Reply::call("computer_act", json!({"actions": [{"type": "click", "x": 100, "y": 200}, {"type": "type", "text": "hi"}]}))),
        Step::check(arm_then_said, Reply::call("computer_act", json!({"actions": [{"type": "key", "key": "Return"}]}))),
        Step::check(saw_both, Reply::call("shell", json!({"command": "echo from-the-shell"}))),
        Step::check(said("from-the-shell"), Reply::call("write_file", json!({"path": "report.md", "content": "done"}))),
        Step::check(said("Wrote 4 bytes"), Reply::text("All done.")),
    ])
    .await;
    let key = "sk-memory-0123456789";
    let model = botdesk_engine::NewModel {
        id: "scripted".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted-1".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: Some(botdesk_engine::action::CoordSpace::Pixels),
    };
    engine.add_model(model, Some(key.into())).await.unwrap();
    engine.create_bot("clicker", ComputerScope::Team, Some("scripted"), "").await.unwrap();
    let run = engine.run_task(&engine.bot_ref("clicker").await.unwrap().id, "click, then report").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, botdesk_engine::RunStatus::Completed, "{:?}", run.error);
    assert!(server.requests().iter().all(|s| s.headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {key}"))), "the key came from memory");
    let open = fake.open_desktops();
    let [(computer, slot)] = open.as_slice() else { panic!("one desktop, not {open:?}") };
    use botdesk_engine::action::{Action, Button};
    assert_eq!(
        fake.actions(computer, *slot),
        [Action::Click { x: 100, y: 200, button: Button::Left }, Action::Type { text: "hi".into() }, Action::Key { key: "Return".into(), modifiers: vec![] }],
        "the batch reached the screen as the model gave it"
    );
    let report = engine.files_read(&engine.bot_ref("clicker").await.unwrap(), "report.md", 100).await.unwrap();
    assert_eq!(&report[..], b"done");
    // Resolved once: the first look opened the desktop; from then on the act tool is one call,
    // the act that brings the look after it and what the network policy refused meanwhile, with
    // nothing around it (no status, no gateway check, no desktop opened again, no second look).
    let calls = counted.calls();
    let act = calls.iter().position(|c| *c == "act").expect("an act");
    // The second act follows at once; its look came apart, and the shell tool that follows
    // begins with its computer's status.
    assert_eq!(&calls[act - 2..act + 5], ["observe", "network_refusals", "act", "act", "observe", "status", "exec"], "all calls: {calls:?}");
}

/// Recordings are removed `record_days` after their run ended, and the oldest first once all of
/// them take more than `record_total_gib` (sizes planted as sparse files; the engine's clock is
/// moved by hand).
#[tokio::test]
async fn old_recordings_and_those_over_the_total_cap_are_removed() {
    const DAY: i64 = 24 * 3600 * 1000;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock(AtomicI64::new(100 * DAY)));
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(Arc::new(botdesk_fake::FakeProvider::new())));
    cfg.clock = clock.clone();
    let engine = Engine::open(cfg).await.unwrap();
    engine.save_settings(&botdesk_engine::Settings { record_days: 14, record_total_gib: 1, ..Default::default() }).unwrap();
    let plant = |run: &str, ended_days_ago: i64, mib: u64| {
        let d = dir.path().join("recordings").join(run);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::File::create(d.join("screen.mkv")).unwrap().set_len(mib << 20).unwrap();
        let ended = 100 * DAY - ended_days_ago * DAY;
        let meta = serde_json::json!({"run_id": run, "started_at": ended - 60_000, "ended_at": ended, "bytes": mib << 20, "fps": 4, "capped": false});
        std::fs::write(d.join("recording.json"), meta.to_string()).unwrap();
    };
    plant("rold", 20, 1);
    plant("rweek", 7, 400);
    plant("rday", 1, 400);
    plant("rnow", 0, 100);
    assert!(engine.recording("rold").is_some());
    // 20 days old: gone. The other three take 900 MiB, within 1 GiB: kept.
    assert_eq!(engine.prune_recordings().await.unwrap(), 1);
    assert!(engine.recording("rold").is_none() && engine.recording("rweek").is_some());
    // A new one of 300 MiB: 1.2 GiB in all, so the oldest goes.
    plant("rnew", 0, 300);
    assert_eq!(engine.prune_recordings().await.unwrap(), 1);
    assert!(engine.recording("rweek").is_none() && engine.recording("rday").is_some() && engine.recording("rnew").is_some());
    // Eight days on, the one of yesterday is 9 days old (kept); fourteen days on, it goes.
    clock.0.store(108 * DAY, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(engine.prune_recordings().await.unwrap(), 0);
    clock.0.store(114 * DAY, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(engine.prune_recordings().await.unwrap(), 1);
    assert!(engine.recording("rday").is_none() && engine.recording("rnow").is_some());
    assert!(engine.recording("../rnow").is_none(), "a run id is never a path");
}

/// Approvals the engine checks itself, with no Docker: a shell command containing a listed
/// pattern waits for the person (denied, it does not run and the model gets the note; one not
/// matching runs without asking), and a run whose spend passed the amount set asks once before
/// its next model call (allowed, the model is told). A question nobody answers is denied once
/// control of a screen would have lapsed. Each question and answer is in the activity.
#[tokio::test]
async fn a_run_asks_before_a_listed_command_and_past_its_spend() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(botdesk_fake::FakeProvider::new());
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Custom(fake.clone()));
    cfg.secrets = botdesk_engine::Secrets::memory();
    cfg.policy.control_ttl = 3_000;
    let engine = Engine::open(cfg).await.unwrap();
    let said = |want: &'static str| {
        move |s: &Seen| match s.results.first() {
            Some(r) if r.text.contains(want) => Ok(()),
            other => Err(format!("expected a result containing {want:?}, got {other:?}")),
        }
    };
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", json!({"command": "echo start"}))),
        Step::check(
            |s: &Seen| {
                let body = s.body.to_string();
                body.contains("The person allowed this run to spend more than $0.00").then_some(()).ok_or(format!("not told of the spend: {body}"))
            },
            Reply::call("shell", json!({"command": "cd x && git push origin main --force"})),
        ),
        Step::check(
            said("The person denied running this command. It did not run. Their note: \"not on main\"."),
            Reply::call("shell", json!({"command": "echo git push origin topic"})),
        ),
        Step::check(said("exit code 0"), Reply::call("shell", json!({"command": "git push origin main --force"}))),
        Step::check(said("It did not run. Their note: \"nobody answered within 3 s\"."), Reply::text("Pushed the topic only.")),
    ])
    .await;
    let model = botdesk_engine::NewModel {
        id: "priced".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted-1".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    engine.add_model(model, Some("sk-memory-approvals".into())).await.unwrap();
    engine.set_model_prices("priced", Some(botdesk_engine::Prices { input: 1.0, output: 1.0, cache_read: 0.0, cache_write: 0.0 })).await.unwrap();
    engine.create_bot("pusher", ComputerScope::Team, Some("priced"), "").await.unwrap();
    let words: Vec<String> = ["command", "git push*--force", "spend", "0"].map(String::from).to_vec();
    let set = engine.set_bot_approvals(&engine.bot_ref("pusher").await.unwrap(), botdesk_engine::Approvals::from_words(&words).unwrap()).await.unwrap();
    assert_eq!(engine.bot_approvals(&engine.bot_ref("pusher").await.unwrap()).await.unwrap(), set);

    // The person, from another task: allows the spend, denies the push with a note.
    let person = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut answered = vec![];
            while answered.len() < 2 {
                if let Some(q) = engine.open_question(&engine.bot_ref("pusher").await.unwrap()).await.unwrap() {
                    let (verdict, note) =
                        if q.kind == "spend" { (botdesk_engine::Verdict::Allow, None) } else { (botdesk_engine::Verdict::Deny, Some("not on main")) };
                    engine.answer_question(&engine.bot_ref("pusher").await.unwrap(), verdict, note).await.unwrap();
                    answered.push((q.kind, q.question));
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            answered
        })
    };
    let run = engine.run_task(&engine.bot_ref("pusher").await.unwrap().id, "push the work").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, botdesk_engine::RunStatus::Completed, "{:?}", run.error);
    let answered = person.await.unwrap();
    assert_eq!(answered[0].0, "spend");
    assert!(answered[0].1.starts_with("pusher wants to go on past $0.00 of spend on this run"), "{answered:?}");
    assert_eq!(
        answered[1],
        ("command".to_string(), "pusher wants to run a command matching `git push*--force`: cd x && git push origin main --force".to_string())
    );
    let activity: Vec<String> = engine
        .activity(&engine.bot_ref("pusher").await.unwrap(), 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.kind == botdesk_engine::APPROVAL_ACTIVITY)
        .map(|a| a.target)
        .collect();
    assert_eq!(activity.len(), 4, "{activity:?}");
    assert!(activity[3].ends_with("denied (nobody answered within 3 s)"), "{activity:?}");
    assert!(activity[0].starts_with("approvals set: asks before commands containing `git push*--force`; a run's spend past $0.00"), "{activity:?}");
    assert!(activity[1].starts_with("spend: go on past $0.00") && activity[1].ends_with("allowed once"), "{activity:?}");
    assert!(activity[2].ends_with("git push origin main --force: denied (not on main)"), "{activity:?}");
}

/// A desktop this process resolved is looked at again with one call and nothing around it, but
/// never once another process released it (its slot may be another bot's by then): that look sets
/// the bot's desktop up again.
#[tokio::test]
async fn a_kept_desktop_is_looked_at_directly_until_another_process_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(botdesk_fake::FakeProvider::new());
    let counted = Arc::new(botdesk_fake::Faulty::new(fake.clone()));
    let this = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Custom(counted.clone()))).await.unwrap();
    let other = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Custom(fake.clone()))).await.unwrap();
    for bot in ["a", "b"] {
        this.create_bot(bot, ComputerScope::Team, None, "").await.unwrap();
    }
    let a = this.bot_ref("a").await.unwrap();
    this.screenshot(&a, botdesk_core::ImageFormat::Png).await.unwrap();
    let before = counted.calls().len();
    this.screenshot(&a, botdesk_core::ImageFormat::Png).await.unwrap();
    assert_eq!(counted.calls()[before..], ["observe"]);

    assert!(other.release_desktop(&other.bot_ref("a").await.unwrap()).await.unwrap());
    other.screenshot(&other.bot_ref("b").await.unwrap(), botdesk_core::ImageFormat::Png).await.unwrap();
    let before = counted.calls().len();
    this.screenshot(&a, botdesk_core::ImageFormat::Png).await.unwrap();
    let calls = counted.calls()[before..].to_vec();
    assert!(calls.contains(&"open_desktop") && calls.last() == Some(&"observe"), "{calls:?}");
}

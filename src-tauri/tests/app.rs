//! The real app window under Xvfb (`cargo xtask test` provides the display): it opens, renders the
//! bots of its data directory, and a screenshot is saved under target/e2e/ to be looked at.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn e2e_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/e2e");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The app on a data directory, its stdout to `stdout`; killed when dropped.
fn launch(data: &std::path::Path, stdout: Stdio) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_botdesk-app"))
        .env("BOTDESK_DATA_DIR", data)
        .env("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the app");
    KillOnDrop(child)
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_window_opens_and_lists_the_bots() {
    assert!(std::env::var_os("DISPLAY").is_some(), "no DISPLAY: run the app tests through `cargo xtask test`, which starts Xvfb");
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let engine =
            botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(data.path(), botdesk_engine::ProviderChoice::Machine(botdesk_docker::machine)))
                .await
                .unwrap();
        // No spare computer: this test starts none (the next test is about it).
        engine.save_settings(&botdesk_engine::Settings { spare_computer: false, ..Default::default() }).unwrap();
        engine.create_bot("alpha", botdesk_engine::ComputerScope::Team, None, "").await.unwrap();
        engine.create_bot("research", botdesk_engine::ComputerScope::Private, None, "").await.unwrap();
    });

    let mut app = launch(data.path(), Stdio::piped());
    let stdout = app.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("ui ready") => break line,
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => assert!(Instant::now() < deadline, "the UI never reported ready"),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the app exited before its UI was ready"),
        }
    };
    assert_eq!(ready, "botdesk-app: ui ready, 2 bots listed");

    let window = run("xdotool", &["search", "--name", "^Botdesk$"]);
    assert!(!window.is_empty(), "no window titled Botdesk");
    let size = run("xdotool", &["getwindowgeometry", window.lines().next().unwrap()]);
    assert!(size.contains("Geometry: 1280x800"), "{size}");

    std::thread::sleep(Duration::from_millis(500)); // let the first paint land
    let shot = e2e_dir().join("01-app-bot-list.png");
    let st = Command::new("import").args(["-window", "root"]).arg(&shot).status().unwrap();
    assert!(st.success(), "screenshot failed");
    // A real render, not a blank window: many colours, and the dark sidebar at the left edge.
    let colours: u32 = run("convert", &[shot.to_str().unwrap(), "-format", "%k", "info:"]).parse().unwrap();
    assert!(colours > 50, "the window looks blank ({colours} colours)");
    let sidebar = run("convert", &[shot.to_str().unwrap(), "-format", "%[pixel:p{20,400}]", "info:"]);
    assert!(sidebar.contains("29,34,48") || sidebar.contains("1D2230") || sidebar.to_lowercase().contains("1d2230"), "sidebar colour is {sidebar}");
}

/// What Docker says of a computer's container: (its id, its state), or None when there is none.
fn container_of(computer: &str) -> Option<(String, String)> {
    let out = run("docker", &["ps", "-a", "--filter", &format!("label=botdesk.computer={computer}"), "--format", "{{.ID}} {{.State}}"]);
    out.lines().next().and_then(|l| l.split_once(' ')).map(|(id, state)| (id.to_string(), state.to_string()))
}

/// Polls `f` every 200 ms until it gives something; panics with `what` after `limit` (a hang
/// guard, not a timing figure: the keeper works in the background on a loaded machine).
fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(x) = f() {
            return x;
        }
        assert!(Instant::now() < deadline, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The app keeps a spare computer started; a new bot's computer is that spare (its container was
/// made before the bot existed, and is not made again); the app makes the next one; a reconcile
/// keeps it; and turning the setting off removes it, container, volume and network.
#[test]
fn the_app_keeps_a_spare_computer_that_the_next_new_bot_takes() {
    use botdesk_engine::{ComputerScope, Engine, EngineConfig, ProviderChoice, Settings};
    assert!(std::env::var_os("DISPLAY").is_some(), "no DISPLAY: run the app tests through `cargo xtask test`, which starts Xvfb");
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let app = launch(data.path(), Stdio::null());
    let limit = Duration::from_secs(180);
    let running = |id: &str| container_of(id).filter(|(_, state)| state == "running").map(|(c, _)| c);

    // The app makes a spare and starts it.
    let spare = wait_for("the app's spare computer", limit, || rt.block_on(engine.spare_ids()).unwrap().into_iter().next());
    let container = wait_for("the spare computer running", limit, || running(&spare));

    // A new bot (made by another process, as the CLI would) takes it: its computer is the spare.
    let bot = rt.block_on(engine.create_bot("fresh", ComputerScope::Private, None, "")).unwrap();
    assert_eq!(bot.computer.id.as_str(), spare, "the new computer is the spare");
    let exit = rt
        .block_on(engine.exec(
            &rt.block_on(engine.bot_ref("fresh")).unwrap(),
            vec!["sh".into(), "-c".into(), "test -w ~".into()],
            None,
            None,
            None,
            tokio_util::sync::CancellationToken::new(),
        ))
        .unwrap();
    assert_eq!(exit.code, 0, "the bot cannot write its home: {exit:?}");
    assert_eq!(running(&spare), Some(container), "the bot works in the spare's container: none was made anew");

    // The app makes the next spare; a reconcile (of any process) keeps it.
    let next = wait_for("the next spare computer", limit, || rt.block_on(engine.spare_ids()).unwrap().into_iter().find(|id| *id != spare));
    wait_for("the next spare running", limit, || running(&next));
    let report = rt.block_on(engine.reconcile()).unwrap();
    assert!(!report.removed.contains(&next) && running(&next).is_some(), "a reconcile removed the spare: {report:?}");
    assert!(report.volumes_removed.is_empty() && report.networks_removed.is_empty(), "{report:?}");

    // Off: the app removes it, whole.
    engine.save_settings(&Settings { spare_computer: false, ..Settings::default() }).unwrap();
    wait_for("the spare removed", limit, || rt.block_on(engine.spare_ids()).unwrap().is_empty().then_some(()));
    wait_for("the spare's container removed", limit, || container_of(&next).is_none().then_some(()));
    // Its volume and network go after its container: waited for, not read once.
    let parts = format!("docker volume ls -q --filter label=botdesk.computer={next}; docker network ls -q --filter label=botdesk.computer={next}");
    wait_for("the spare's volume and network removed", limit, || run("sh", &["-c", &parts]).is_empty().then_some(()));
    drop(app);
    rt.block_on(engine.destroy_computer(&bot.computer.id)).unwrap();
}

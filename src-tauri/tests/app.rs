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
        let engine = botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(data.path(), botdesk_engine::ProviderChoice::Docker)).await.unwrap();
        engine.create_bot("alpha", botdesk_engine::ComputerScope::Team, None, "").await.unwrap();
        engine.create_bot("research", botdesk_engine::ComputerScope::Private, None, "").await.unwrap();
    });

    let mut child = Command::new(env!("CARGO_BIN_EXE_botdesk-app"))
        .env("BOTDESK_DATA_DIR", data.path())
        .env("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the app");
    let stdout = child.stdout.take().unwrap();
    let _app = KillOnDrop(child);
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

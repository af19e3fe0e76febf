//! Docker unreachable (DOCKER_HOST at a socket with no daemon behind it, so other tests keep
//! theirs): the real app says so plainly, its Files pane still browses and previews the workspace,
//! nothing crashes; when Docker is back (the socket appears), opening the bot's desktop works.

mod webdriver;

use botdesk_engine::*;
use std::time::Duration;
use webdriver::*;

#[test]
fn without_docker_the_app_says_so_files_still_work_and_work_resumes_when_docker_is_back() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Docker))).unwrap();
    rt.block_on(engine.create_bot("offline", ComputerScope::Team, None, "")).unwrap();
    rt.block_on(engine.files_write("offline", "report.md", b"# Report\nwritten before Docker went away\n".to_vec().into(), false)).unwrap();
    let computer = rt.block_on(engine.bot("offline")).unwrap().computer.id;
    rt.block_on(engine.stop_computer(&computer)).unwrap();

    let sockets = tempfile::tempdir().unwrap();
    let socket = sockets.path().join("docker.sock");
    let host = format!("unix://{}", socket.display());
    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap()), ("DOCKER_HOST", &host)]);

    // Said plainly: the first-run check names Docker and how to start it; the footer shows it red.
    d.wait_js("the Docker check", "return (document.querySelector('.modal')?.textContent ?? '').includes('Docker is not reachable')", Duration::from_secs(30));
    let modal = d.js("return document.querySelector('.modal').textContent").as_str().unwrap().to_string();
    assert!(modal.contains("Start the Docker engine"), "{modal}");
    d.wait_js(
        "Docker red in the footer",
        "return [...document.querySelectorAll('.check.bad')].some(c => c.textContent.includes('Docker'))",
        Duration::from_secs(10),
    );
    screenshot("10-docker-unreachable.png");
    d.js("document.querySelector('.modal-close').click(); return true");

    // Files browse and preview from the workspace on this machine.
    d.click(".bot[data-bot]");
    d.click(".dock-button[data-pane=files]");
    d.wait_js("report.md listed", "return !!document.querySelector('.file[data-path$=\"report.md\"]')", Duration::from_secs(10));
    d.js("document.querySelector('.file[data-path$=\"report.md\"]').click(); return true");
    d.wait_js(
        "the preview",
        "return (document.querySelector('.preview-text')?.textContent ?? '').includes('written before Docker went away')",
        Duration::from_secs(10),
    );
    // Opening the desktop fails with the reason, and the app goes on.
    d.click("#open-desktop");
    d.wait_js(
        "the reason",
        "const n = document.querySelector('#control-notice'); return !!n && !n.hidden && n.textContent.includes('Docker is not reachable')",
        Duration::from_secs(20),
    );
    assert_eq!(d.js("return document.querySelectorAll('.bot').length"), 1, "the app still runs");
    screenshot("11-files-offline.png");

    // Docker is back: the same app opens the desktop.
    std::os::unix::fs::symlink("/var/run/docker.sock", &socket).unwrap();
    d.click("#open-desktop");
    d.wait_js("the desktop connected", "return document.querySelector('.viewer.interactive')?.dataset.state === 'connected'", Duration::from_secs(90));
    drop(d);
    rt.block_on(async {
        for c in engine.list_computers().await.unwrap_or_default() {
            let _ = engine.destroy_computer(&c.id).await;
        }
    });
}

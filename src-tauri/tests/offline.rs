//! Docker unreachable (DOCKER_HOST at a socket with no daemon behind it, so other tests keep
//! theirs): the real app says so plainly, its Files pane still browses and previews the workspace,
//! its History restores a file from an earlier version, nothing crashes; when Docker is back (the
//! socket appears), opening the bot's desktop works, and its computer starts from the restore.

mod webdriver;

use botdesk_engine::*;
use std::time::Duration;
use webdriver::*;

#[test]
fn without_docker_the_app_says_so_files_still_work_and_work_resumes_when_docker_is_back() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    rt.block_on(engine.create_bot("offline", ComputerScope::Team, None, "")).unwrap();
    rt.block_on(engine.files_write(&rt.block_on(engine.bot_ref("offline")).unwrap(), "report.md", b"# Report\nfirst draft\n".to_vec().into(), false)).unwrap();
    let computer = rt.block_on(engine.bot("offline")).unwrap().computer.id;
    rt.block_on(engine.checkpoint(&computer)).unwrap();
    rt.block_on(engine.files_write(
        &rt.block_on(engine.bot_ref("offline")).unwrap(),
        "report.md",
        b"# Report\nwritten before Docker went away\n".to_vec().into(),
        false,
    ))
    .unwrap();
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

    // History, offline too: the two versions; the first one browsed, its report.md put back.
    d.click("#files-history");
    d.wait_js("two versions", "return document.querySelectorAll('.version').length === 2", Duration::from_secs(10));
    let labels = d.js("return [...document.querySelectorAll('.version .vwhy')].map(e => e.textContent)");
    assert_eq!(labels, serde_json::json!(["computer stopped · latest", "checkpoint"]));
    screenshot("28-files-history.png");
    d.click(".version[data-version='1'] [data-browse]");
    d.wait_js(
        "the version's banner",
        "return (document.querySelector('#version-banner')?.textContent ?? '') === 'Version 1 (read-only)'",
        Duration::from_secs(10),
    );
    d.wait_js("report.md listed", "return !!document.querySelector('.file[data-path$=\"report.md\"]')", Duration::from_secs(10));
    d.js("document.querySelector('.file[data-path$=\"report.md\"]').click(); return true");
    d.wait_js("the old text", "return (document.querySelector('.preview-text')?.textContent ?? '').includes('first draft')", Duration::from_secs(10));
    screenshot("29-files-version-browsed.png");
    d.click("#restore-file");
    d.wait_js("the restore's answer", "return !!document.querySelector('.files-msgs p')", Duration::from_secs(20));
    let said = d.js("return document.querySelector('.files-msgs p').textContent");
    assert!(said.as_str().unwrap().starts_with("Restored report.md from version 1. What was there is version 2"), "{said}");
    assert!(d.js("return !document.querySelector('#version-banner')").as_bool().unwrap(), "back to the folder as it is now");
    d.js("document.querySelector('.file[data-path$=\"report.md\"]').click(); return true");
    d.wait_js("the restored text now", "return (document.querySelector('.preview-text')?.textContent ?? '').includes('first draft')", Duration::from_secs(10));
    screenshot("30-file-restored-offline.png");

    // Docker is back: the same app opens the desktop.
    std::os::unix::fs::symlink("/var/run/docker.sock", &socket).unwrap();
    d.click("#open-desktop");
    d.wait_js("the desktop connected", "return document.querySelector('.viewer.interactive')?.dataset.state === 'connected'", Duration::from_secs(90));
    // The computer started from the restored version.
    assert_eq!(&rt.block_on(engine.files_read(&rt.block_on(engine.bot_ref("offline")).unwrap(), "report.md", 100)).unwrap()[..], b"# Report\nfirst draft\n");
    drop(d);
    rt.block_on(async {
        for c in engine.list_computers().await.unwrap_or_default() {
            let _ = engine.destroy_computer(&c.id).await;
        }
    });
}

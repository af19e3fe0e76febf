//! Workspace checkpoints on the real Docker engine: a destroyed computer comes back with its files
//! and its browser login; a checkpoint that fails (the data directory's disk full) is reported and
//! the computer keeps running, with the previous checkpoint whole.

use std::time::Duration;

use botdesk_engine::*;

struct World {
    engine: Engine,
    dir: tempfile::TempDir,
}

impl Drop for World {
    fn drop(&mut self) {
        let engine = self.engine.clone();
        let homes = self.dir.path().join("homes");
        let _ = std::thread::spawn(move || {
            let _ = std::process::Command::new("umount").arg(&homes).status();
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                for c in engine.list_computers().await.unwrap_or_default() {
                    let _ = engine.destroy_computer(&c.id).await;
                }
                // A computer whose checkpoint cannot be written is removed without one.
                for c in engine.list_computers().await.unwrap_or_default() {
                    let out = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &format!("label=botdesk.computer={}", c.id)]).output().unwrap();
                    for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                        let _ = std::process::Command::new("docker").args(["rm", "-f", id]).output();
                    }
                }
            })
        })
        .join();
    }
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Docker)).await.unwrap();
    World { engine, dir }
}

/// A site that logs you in with a persistent cookie and shows the cookies it gets.
const SITE: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200)
        self.send_header('content-type', 'text/html')
        if self.path == '/login':
            self.send_header('set-cookie', 'session=s3cr3t-login; Max-Age=86400; Path=/')
        self.end_headers()
        cookies = self.headers.get('cookie') or 'none'
        self.wfile.write(('<html><title>site</title><body><p>cookies: ' + cookies + '</p></body></html>').encode())
http.server.ThreadingHTTPServer(('127.0.0.1', 8766), H).serve_forever()
"#;

async fn start_site(engine: &Engine) {
    let (code, out) = engine
        .shell("keeper", "cd ../../shared && (setsid -f python3 site.py >site.out 2>&1 </dev/null) && for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8766/\")' 2>/dev/null && exit 0; sleep 0.1; done; cat site.out; exit 1")
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_destroyed_computer_comes_back_with_its_files_and_its_browser_login() {
    let w = world().await;
    let bot = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write("keeper", "shared/site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    w.engine.files_write("keeper", "notes/today.md", bytes::Bytes::from_static("# Today\n".as_bytes()), false).await.unwrap();
    start_site(&w.engine).await;
    w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/login").await.unwrap();
    let page = w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/").await.unwrap();
    assert!(snapshot_text(&page).contains("cookies: session=s3cr3t-login"), "{}", snapshot_text(&page));

    // Destroy: checkpoint (browser closed gracefully first), container and machine disk gone.
    w.engine.destroy_computer(&bot.computer.id).await.unwrap();
    assert!(!w.dir.path().join("machines").join(&bot.computer.id).join("home").exists());
    // Offline, the files are browsable from the checkpoint.
    assert_eq!(&w.engine.stored_read("keeper", "notes/today.md", 100).await.unwrap()[..], b"# Today\n");

    // Open the bot again: a new machine, restored before first use.
    assert_eq!(&w.engine.files_read("keeper", "notes/today.md", 100).await.unwrap()[..], b"# Today\n");
    start_site(&w.engine).await;
    let page = w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/").await.unwrap();
    assert!(snapshot_text(&page).contains("cookies: session=s3cr3t-login"), "the login is gone: {}", snapshot_text(&page));
}

#[tokio::test]
async fn a_checkpoint_that_fails_is_reported_and_the_computer_keeps_running() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test mounts a small tmpfs as the data directory's store: run it as root (CI does)");
    let w = world().await;
    let homes = w.dir.path().join("homes");
    std::fs::create_dir_all(&homes).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"]).arg(&homes).status().unwrap();
    assert!(mounted.success(), "mount a 2 MiB tmpfs");
    let bot = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write("keeper", "small.txt", bytes::Bytes::from_static(b"first"), false).await.unwrap();
    let first = w.engine.checkpoint(&bot.computer.id).await.unwrap();
    assert_eq!(first.version, 1);

    // 3 MiB more than the store can take.
    let (code, _) = w.engine.shell("keeper", "head -c 3000000 /dev/urandom > big.bin && echo second > small.txt").await.unwrap();
    assert_eq!(code, 0);
    let e = w.engine.stop_computer(&bot.computer.id).await.unwrap_err();
    assert!(e.message.contains("not stopping computer") && e.message.contains("the disk holding the data directory is full"), "{}", e.message);
    // Still running, still usable; the previous checkpoint is whole and nothing half-written is left.
    let (code, out) = w.engine.shell("keeper", "cat small.txt").await.unwrap();
    assert_eq!((code, out.as_str()), (0, "second\n"));
    let c = w.engine.list_computers().await.unwrap().into_iter().find(|c| c.id == bot.computer.id).unwrap();
    assert_eq!(c.status, "running");
    let store: Vec<String> = std::fs::read_dir(homes.read_dir().unwrap().next().unwrap().unwrap().path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let mut store = store;
    store.sort();
    assert_eq!(store, [".lock", "current", "v1"]);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

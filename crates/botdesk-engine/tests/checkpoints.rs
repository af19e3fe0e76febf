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
        if self.path.startswith('/login'):
            self.send_header('set-cookie', 's3cr3t-login'.join(['session=', self.path[6:] + '; Max-Age=86400; Path=/']))
        self.end_headers()
        cookies = self.headers.get('cookie') or 'none'
        self.wfile.write(('<html><title>site</title><body><p>cookies: ' + cookies + '</p></body></html>').encode())
http.server.ThreadingHTTPServer(('127.0.0.1', 8766), H).serve_forever()
"#;

/// Starts the site from the folder holding `site.py`, relative to the bot's folder.
async fn start_site(engine: &Engine, bot: &str, dir: &str) {
    let (code, out) = engine
        .shell(bot, &format!("cd {dir} && (setsid -f python3 site.py >site.out 2>&1 </dev/null) && for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8766/\")' 2>/dev/null && exit 0; sleep 0.1; done; cat site.out; exit 1"))
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
    start_site(&w.engine, "keeper", "../../shared").await;
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
    start_site(&w.engine, "keeper", "../../shared").await;
    let page = w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/").await.unwrap();
    assert!(snapshot_text(&page).contains("cookies: session=s3cr3t-login"), "the login is gone: {}", snapshot_text(&page));
}

fn text(b: bytes::Bytes) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

async fn cookies(engine: &Engine, bot: &str) -> String {
    let page = engine.browser_navigate(bot, "http://127.0.0.1:8766/").await.unwrap();
    page["text"].as_str().unwrap_or("").trim().trim_start_matches("cookies: ").to_string()
}

#[tokio::test]
async fn switching_a_bot_between_team_and_private_keeps_both_homes_its_work_and_its_login() {
    let w = world().await;
    let keeper = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.create_bot("other", ComputerScope::Team, None, "").await.unwrap();
    let on_team = |p: &str| format!("bots/{}/{p}", keeper.id);
    w.engine.files_write("keeper", "shared/site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    w.engine.files_write("keeper", "notes/today.md", bytes::Bytes::from_static(b"# Today\n"), false).await.unwrap();
    start_site(&w.engine, "keeper", "../../shared").await;
    w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/login").await.unwrap();
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login");

    // Refused while the bot has a task.
    let run = w.engine.create_run("keeper", "wait").await.unwrap();
    let e = w.engine.switch_bot("keeper", ComputerScope::Private).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BotRunning, "{}", e.message);
    assert!(e.message.contains("Stop the bot first"), "{}", e.message);
    w.engine.fail_queued_run(&run.id, "not needed").await.unwrap();

    // Team → Private: its folder becomes the Private home, its login comes along.
    let r = w.engine.switch_bot("keeper", ComputerScope::Private).await.unwrap();
    assert_eq!((r.from.as_str(), r.to.as_str(), r.profile), ("team", "private-keeper", true), "{r:?}");
    assert!(r.copied >= 2 && r.kept_newer.is_empty(), "{r:?}");
    let now = w.engine.bot("keeper").await.unwrap();
    assert_eq!((now.computer.scope, now.computer.name.as_str()), (ComputerScope::Private, "private-keeper"));
    assert_eq!(text(w.engine.files_read("keeper", "notes/today.md", 100).await.unwrap()), "# Today\n");
    // The Team home keeps the bot's folder.
    assert_eq!(text(w.engine.files_read("other", &on_team("notes/today.md"), 100).await.unwrap()), "# Today\n");
    w.engine.files_write("keeper", "site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    start_site(&w.engine, "keeper", ".").await;
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login", "the login came along");
    w.engine.browser_navigate("keeper", "http://127.0.0.1:8766/login-private").await.unwrap();

    // Work on both sides: the bot edits and adds on Private; later someone edits its Team copy.
    w.engine.files_write("keeper", "notes/today.md", bytes::Bytes::from_static(b"# Today, private\n"), false).await.unwrap();
    w.engine.files_write("keeper", "notes/private.md", bytes::Bytes::from_static(b"made while private\n"), false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.engine.files_write("other", &on_team("notes/today.md"), bytes::Bytes::from_static(b"# Edited on Team\n"), false).await.unwrap();

    // Private → Team: new work comes along, the newer Team copy is kept and named, the login too.
    let r = w.engine.switch_bot("keeper", ComputerScope::Team).await.unwrap();
    assert_eq!((r.from.as_str(), r.to.as_str(), r.profile), ("private-keeper", "team", true), "{r:?}");
    assert_eq!(r.kept_newer, ["notes/today.md"], "{r:?}");
    assert_eq!(text(w.engine.files_read("keeper", "notes/private.md", 100).await.unwrap()), "made while private\n");
    assert_eq!(text(w.engine.files_read("keeper", "notes/today.md", 100).await.unwrap()), "# Edited on Team\n");
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login-private", "the login made on Private came back");
    // The Private computer is kept, stopped, its home whole (its version of the edited file too).
    let computers = w.engine.list_computers().await.unwrap();
    let private = computers.iter().find(|c| c.name == "private-keeper").expect("the Private computer is kept");
    assert_eq!((private.status.as_str(), private.bots.len()), ("stopped", 0), "{private:?}");
    assert_eq!(std::fs::read_to_string(private.home.join("current/notes/today.md")).unwrap(), "# Today, private\n");
    assert!(private.home.join("current/site.py").exists());

    // And back again: the same Private computer, now with the newer Team copy.
    let r = w.engine.switch_bot("keeper", ComputerScope::Private).await.unwrap();
    assert_eq!((r.to.as_str(), r.kept_newer.len()), ("private-keeper", 0), "{r:?}");
    assert_eq!(w.engine.list_computers().await.unwrap().len(), 2);
    assert_eq!(text(w.engine.files_read("keeper", "notes/today.md", 100).await.unwrap()), "# Edited on Team\n");
    assert_eq!(text(w.engine.files_read("keeper", "site.py", 10_000).await.unwrap()), SITE, "what it had there is still there");
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

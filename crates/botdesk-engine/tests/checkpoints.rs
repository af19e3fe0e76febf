//! Workspace checkpoints on the real Docker engine: a destroyed computer comes back with its files
//! and its browser login; a checkpoint that fails (the data directory's disk full) keeps the
//! previous version whole and never keeps a computer alive; what a bot makes to wedge a checkpoint
//! is skipped and named.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

mod common;

use botdesk_engine::*;

struct World {
    engine: Engine,
    dir: tempfile::TempDir,
}

impl World {
    /// The bot, resolved once (what the engine's per-bot calls take).
    async fn bot(&self, name: &str) -> botdesk_engine::BotRef {
        self.engine.bot_ref(name).await.unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // A computer whose checkpoint cannot be written (the full-disk test) is removed by force.
        common::tear_down(self.dir.path(), &[]);
    }
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
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
        .shell(&engine.bot_ref(bot).await.unwrap(), &format!("cd {dir} && (setsid -f python3 site.py >site.out 2>&1 </dev/null) && for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8766/\")' 2>/dev/null && exit 0; sleep 0.1; done; cat site.out; exit 1"))
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_destroyed_computer_comes_back_with_its_files_and_its_browser_login() {
    let w = world().await;
    let bot = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "shared/site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "notes/today.md", bytes::Bytes::from_static("# Today\n".as_bytes()), false).await.unwrap();
    start_site(&w.engine, "keeper", "../../shared").await;
    w.engine.browser_navigate(&w.bot("keeper").await, "http://127.0.0.1:8766/login").await.unwrap();
    let page = w.engine.browser_navigate(&w.bot("keeper").await, "http://127.0.0.1:8766/").await.unwrap();
    assert!(snapshot_text(&page).contains("cookies: session=s3cr3t-login"), "{}", snapshot_text(&page));

    // Destroy: checkpoint (browser closed gracefully first), container and home volume gone.
    w.engine.destroy_computer(&bot.computer.id).await.unwrap();
    let volumes =
        std::process::Command::new("docker").args(["volume", "ls", "-q", "--filter", &format!("label=botdesk.computer={}", bot.computer.id)]).output().unwrap();
    assert!(volumes.stdout.is_empty(), "the home volume is gone");
    // Offline, the files are browsable from the checkpoint.
    assert_eq!(&w.engine.stored_read(&w.bot("keeper").await, "notes/today.md", 100).await.unwrap()[..], b"# Today\n");

    // Open the bot again: a new machine, restored before first use.
    assert_eq!(&w.engine.files_read(&w.bot("keeper").await, "notes/today.md", 100).await.unwrap()[..], b"# Today\n");
    start_site(&w.engine, "keeper", "../../shared").await;
    let page = w.engine.browser_navigate(&w.bot("keeper").await, "http://127.0.0.1:8766/").await.unwrap();
    assert!(snapshot_text(&page).contains("cookies: session=s3cr3t-login"), "the login is gone: {}", snapshot_text(&page));
}

fn text(b: bytes::Bytes) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// Runs `script` as root in a computer: what neither a bot nor the engine's file tools would do
/// (another bot's folder is its own; root stands in for someone editing it, or for a helper hung
/// by something other than the bot).
fn as_root(computer: &str, script: &str) {
    let docker = |args: &[&str]| std::process::Command::new("docker").args(args).output().unwrap();
    let container = String::from_utf8(docker(&["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).stdout).unwrap().trim().to_string();
    let out = docker(&["exec", "-u", "0", &container, "sh", "-c", script]);
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn cookies(engine: &Engine, bot: &str) -> String {
    let page = engine.browser_navigate(&engine.bot_ref(bot).await.unwrap(), "http://127.0.0.1:8766/").await.unwrap();
    page["text"].as_str().unwrap_or("").trim().trim_start_matches("cookies: ").to_string()
}

#[tokio::test]
async fn switching_a_bot_between_team_and_private_keeps_both_homes_its_work_and_its_login() {
    let w = world().await;
    let keeper = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.create_bot("other", ComputerScope::Team, None, "").await.unwrap();
    let on_team = |p: &str| format!("bots/{}/{p}", keeper.id);
    w.engine.files_write(&w.bot("keeper").await, "shared/site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "notes/today.md", bytes::Bytes::from_static(b"# Today\n"), false).await.unwrap();
    start_site(&w.engine, "keeper", "../../shared").await;
    w.engine.browser_navigate(&w.bot("keeper").await, "http://127.0.0.1:8766/login").await.unwrap();
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login");

    // Refused while the bot has a task.
    let run = w.engine.create_run(&w.engine.bot_ref("keeper").await.unwrap().id, "wait").await.unwrap();
    let e = w.engine.switch_bot(&w.bot("keeper").await, ComputerScope::Private).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BotRunning, "{}", e.message);
    assert!(e.message.contains("Stop the bot first"), "{}", e.message);
    w.engine.fail_queued_run(&run.id, "not needed").await.unwrap();

    // Team → Private: its folder becomes the Private home, its login comes along.
    let r = w.engine.switch_bot(&w.bot("keeper").await, ComputerScope::Private).await.unwrap();
    assert_eq!((r.from.as_str(), r.to.as_str(), r.profile), ("team", "private-keeper", true), "{r:?}");
    assert!(r.copied >= 2 && r.kept_newer.is_empty(), "{r:?}");
    let now = w.engine.bot("keeper").await.unwrap();
    assert_eq!((now.computer.scope, now.computer.name.as_str()), (ComputerScope::Private, "private-keeper"));
    assert_eq!(text(w.engine.files_read(&w.bot("keeper").await, "notes/today.md", 100).await.unwrap()), "# Today\n");
    // The Team home keeps the bot's folder, still its own: the other bot there cannot read it.
    let team = w.engine.list_computers().await.unwrap().into_iter().find(|c| c.name == "team").unwrap();
    assert_eq!(std::fs::read_to_string(team.home.join(format!("current/{}", on_team("notes/today.md")))).unwrap(), "# Today\n");
    let e = w.engine.files_read(&w.bot("other").await, &on_team("notes/today.md"), 100).await.unwrap_err();
    assert!(e.message.contains("Permission denied"), "{e:?}");
    w.engine.files_write(&w.bot("keeper").await, "site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    start_site(&w.engine, "keeper", ".").await;
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login", "the login came along");
    w.engine.browser_navigate(&w.bot("keeper").await, "http://127.0.0.1:8766/login-private").await.unwrap();

    // Work on both sides: the bot edits and adds on Private; later someone edits its Team copy.
    w.engine.files_write(&w.bot("keeper").await, "notes/today.md", bytes::Bytes::from_static(b"# Today, private\n"), false).await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "notes/private.md", bytes::Bytes::from_static(b"made while private\n"), false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    as_root(keeper.computer.id.as_str(), &format!("printf '# Edited on Team\\n' > /home/botdesk/{}", on_team("notes/today.md")));

    // Private → Team: new work comes along, the newer Team copy is kept and named, the login too.
    let r = w.engine.switch_bot(&w.bot("keeper").await, ComputerScope::Team).await.unwrap();
    assert_eq!((r.from.as_str(), r.to.as_str(), r.profile), ("private-keeper", "team", true), "{r:?}");
    assert_eq!(r.kept_newer, ["notes/today.md"], "{r:?}");
    assert_eq!(text(w.engine.files_read(&w.bot("keeper").await, "notes/private.md", 100).await.unwrap()), "made while private\n");
    assert_eq!(text(w.engine.files_read(&w.bot("keeper").await, "notes/today.md", 100).await.unwrap()), "# Edited on Team\n");
    assert_eq!(cookies(&w.engine, "keeper").await, "session=s3cr3t-login-private", "the login made on Private came back");
    // The Private computer is kept, stopped, its home whole (its version of the edited file too).
    let computers = w.engine.list_computers().await.unwrap();
    let private = computers.iter().find(|c| c.name == "private-keeper").expect("the Private computer is kept");
    assert_eq!((private.status.as_str(), private.bots.len()), ("stopped", 0), "{private:?}");
    assert_eq!(std::fs::read_to_string(private.home.join("current/notes/today.md")).unwrap(), "# Today, private\n");
    assert!(private.home.join("current/site.py").exists());

    // And back again: the same Private computer, now with the newer Team copy.
    let r = w.engine.switch_bot(&w.bot("keeper").await, ComputerScope::Private).await.unwrap();
    assert_eq!((r.to.as_str(), r.kept_newer.len()), ("private-keeper", 0), "{r:?}");
    assert_eq!(w.engine.list_computers().await.unwrap().len(), 2);
    assert_eq!(text(w.engine.files_read(&w.bot("keeper").await, "notes/today.md", 100).await.unwrap()), "# Edited on Team\n");
    assert_eq!(text(w.engine.files_read(&w.bot("keeper").await, "site.py", 10_000).await.unwrap()), SITE, "what it had there is still there");
}

#[tokio::test]
async fn a_checkpoint_that_fails_keeps_the_last_version_and_never_keeps_a_computer_alive() {
    let w = world().await;
    let bot = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "small.txt", bytes::Bytes::from_static(b"first"), false).await.unwrap();
    let first = w.engine.checkpoint(&bot.computer.id).await.unwrap();
    assert_eq!(first.version, 1);
    // The store cannot take a new version (as with a full disk, or a folder made read-only).
    let store = w.dir.path().join("homes").read_dir().unwrap().next().unwrap().unwrap().path();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o555)).unwrap();
    let (code, _) = w.engine.shell(&w.bot("keeper").await, "echo second > small.txt").await.unwrap();
    assert_eq!(code, 0);
    // Destroying would lose the work: refused, with the way to do it anyway.
    let e = w.engine.destroy_computer(&bot.computer.id).await.unwrap_err();
    assert!(e.message.contains("ermission denied") && e.message.contains("destroy --unsaved"), "{}", e.message);
    // A stop goes ahead: the disk keeps the work, and the view says what was not saved.
    let c = w.engine.stop_computer(&bot.computer.id).await.unwrap();
    let why = c.not_saved.unwrap_or_default();
    assert!(why.contains("could not be saved") && why.contains("version 1 is the last saved"), "{why}");
    assert_eq!(c.status, botdesk_engine::MachineStatus::Stopped);
    // The previous version is whole and nothing half-written is left.
    let mut names: Vec<String> = std::fs::read_dir(&store).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".lock", "current", "trash", "v1", "v1.index", "v1.meta"]);
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
    // It starts again with its disk, so the unsaved work is there, and the next checkpoint works.
    let (code, out) = w.engine.shell(&w.bot("keeper").await, "cat small.txt").await.unwrap();
    assert_eq!((code, out.as_str()), (0, "second\n"));
    assert_eq!(w.engine.checkpoint(&bot.computer.id).await.unwrap().version, 2);
    // A disk that would fill past the person's margin: the checkpoint stops, says the numbers,
    // and keeps the version before.
    w.engine.save_settings(&Settings { keep_free_gib: 1024, ..Settings::default() }).unwrap();
    let e = w.engine.checkpoint(&bot.computer.id).await.unwrap_err();
    assert!(e.code == ErrorCode::DiskFull && e.message.contains("GiB free and checkpoints keep 1024.0 GiB free"), "{e:?}");
    w.engine.save_settings(&Settings::default()).unwrap();
    // A destroy that cannot save goes ahead when the person says so, keeping the last version.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o555)).unwrap();
    let c = w.engine.destroy_computer_unsaved(&bot.computer.id).await.unwrap();
    assert!(c.not_saved.unwrap_or_default().contains("version 2 is the last saved"));
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(&w.engine.files_read(&w.bot("keeper").await, "small.txt", 100).await.unwrap()[..], b"second\n", "it comes back from version 2");
}

/// Every file, folder and link of `dir` (relative to the bot's folder) with its kind, mode, size,
/// modification time and content hash, as seen inside the computer.
async fn fingerprint(engine: &Engine, bot: &str, dir: &str) -> String {
    let (code, out) = engine
        .shell(&engine.bot_ref(bot).await.unwrap(), &format!("cd {dir} && find . -printf '%p %y %m %s %T@ %l\\n' | LC_ALL=C sort && find . -type f -exec sha256sum {{}} + | LC_ALL=C sort && du -k sparse.img"))
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    out
}

/// The person is not root and the bot's files are not the person's: git objects (0444), a
/// read-only folder (0555), a sparse file, a setuid bit. Stop, destroy (and the restore that
/// follows) and both switches keep every byte and mode, and the checkpoint stays sparse.
#[tokio::test]
async fn git_work_and_read_only_folders_survive_stop_destroy_restore_and_both_switches() {
    let w = world().await;
    let bot = w.engine.create_bot("dev", ComputerScope::Team, None, "").await.unwrap();
    let setup = "mkdir -p work && cd work && git init -q repo && cd repo && git config user.email bot@example.invalid && git config user.name bot \
        && echo hello > README && git add README && git commit -qm one && echo again >> README && git commit -qam two \
        && mkdir -p ro/inner && echo kept > ro/inner/file && chmod 0444 ro/inner/file && chmod 0555 ro/inner ro \
        && truncate -s 200M sparse.img && printf x | dd of=sparse.img bs=1 seek=100000000 conv=notrunc status=none \
        && echo run > tool.sh && chmod 4755 tool.sh && ln -s README link-in && ln -s /etc/passwd link-out";
    let (code, out) = w.engine.shell(&w.bot("dev").await, setup).await.unwrap();
    assert_eq!(code, 0, "{out}");
    let before = fingerprint(&w.engine, "dev", "work/repo").await;
    // The setuid bit never travels: once saved, the tool is 0755.
    let expected = before.replace(" 4755 ", " 755 ");

    w.engine.stop_computer(&bot.computer.id).await.expect("stop saves git objects and read-only folders");
    assert_eq!(fingerprint(&w.engine, "dev", "work/repo").await, before, "after stop and start (the home volume is kept as it is)");
    let store = w.dir.path().join("homes").read_dir().unwrap().next().unwrap().unwrap().path();
    let sparse = std::fs::metadata(store.join(format!("current/bots/{}/work/repo/sparse.img", bot.id))).unwrap();
    assert!(std::os::unix::fs::MetadataExt::blocks(&sparse) < 4096, "the checkpoint keeps the sparse file sparse");
    w.engine.destroy_computer(&bot.computer.id).await.expect("destroy saves them too");
    assert_eq!(fingerprint(&w.engine, "dev", "work/repo").await, expected, "after destroy and restore");
    let (code, out) =
        w.engine.shell(&w.bot("dev").await, "cd work/repo && GIT_OPTIONAL_LOCKS=0 git status --porcelain -uno && git log --format=%s").await.unwrap();
    assert_eq!((code, out.as_str()), (0, "two\none\n"));

    w.engine.switch_bot(&w.bot("dev").await, ComputerScope::Private).await.unwrap();
    assert_eq!(fingerprint(&w.engine, "dev", "work/repo").await, expected, "after Team → Private");
    w.engine.switch_bot(&w.bot("dev").await, ComputerScope::Team).await.unwrap();
    assert_eq!(fingerprint(&w.engine, "dev", "work/repo").await, expected, "after Private → Team");
}

/// A canary outside the data directory that no plant may read or write.
struct Canary(tempfile::TempDir);

impl Canary {
    fn new() -> Self {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("secret.txt"), "canary-secret").unwrap();
        Canary(d)
    }
    fn path(&self) -> String {
        self.0.path().display().to_string()
    }
    fn untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(self.0.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["secret.txt"], "something was written next to the canary");
        assert_eq!(std::fs::read_to_string(self.0.path().join("secret.txt")).unwrap(), "canary-secret");
    }
}

/// Nothing of the canary may be anywhere in the store (the host never followed a plant).
fn store_has_no_canary(root: &std::path::Path) {
    for e in std::fs::read_dir(root).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        assert_ne!(e.file_name(), "secret.txt", "the canary was copied to {}", e.path().display());
        if m.is_dir() {
            store_has_no_canary(&e.path());
        }
    }
}

/// A bot's folder, `.browser-profiles` or its browser profile replaced by a link to a host folder
/// (a Private bot owns its whole home and can; on a Team computer root stands in, since a Team bot
/// may not): checkpoints store the link as a link, a switch refuses to carry through it, and the
/// host's canary is never read into a home nor written.
#[tokio::test]
async fn symlinks_a_bot_plants_never_lead_the_host_outside_its_files() {
    let w = world().await;
    let canary = Canary::new();
    let bot = w.engine.create_bot("planter", ComputerScope::Team, None, "").await.unwrap();
    w.engine.create_bot("neighbour", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("neighbour").await, "mine.txt", bytes::Bytes::from_static(b"neighbour's"), false).await.unwrap();
    let profile = botdesk_core::browser::profile_name(&bot.id);
    let home = "/home/botdesk";
    let folder = format!("{home}/bots/{}", bot.id);
    let c = canary.path();

    // A Team bot may replace none of them: they are not its to remove.
    let (code, out) =
        w.engine.shell(&w.bot("planter").await, &format!("rm -rf {home}/.browser-profiles/{profile} || mv {folder} {folder}.real")).await.unwrap();
    assert!(code != 0 && out.contains("Permission denied"), "{out}");

    // 1. Its browser profile, then all of .browser-profiles, made links to the canary.
    for plant in [
        format!("mkdir -p {home}/.browser-profiles && rm -rf {home}/.browser-profiles/{profile} && ln -s {c} {home}/.browser-profiles/{profile}"),
        format!("rm -rf {home}/.browser-profiles && ln -s {c} {home}/.browser-profiles"),
    ] {
        as_root(bot.computer.id.as_str(), &plant);
        w.engine.checkpoint(&bot.computer.id).await.unwrap();
        let e = w.engine.switch_bot(&w.bot("planter").await, ComputerScope::Private).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PathEscapes, "{}", e.message);
        assert_eq!(w.engine.bot("planter").await.unwrap().computer.scope, ComputerScope::Team, "the bot stays where it was");
        canary.untouched();
    }
    as_root(bot.computer.id.as_str(), &format!("rm -f {home}/.browser-profiles"));

    // 2. Its own folder made a link to the canary: offline browsing and the switch refuse it.
    as_root(bot.computer.id.as_str(), &format!("cd / && mv {folder} {folder}.real && ln -s {c} {folder}"));
    w.engine.stop_computer(&bot.computer.id).await.unwrap();
    let e = w.engine.stored_list(&w.bot("planter").await, "").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PathEscapes, "{}", e.message);
    assert!(w.engine.stored_read(&w.bot("planter").await, "secret.txt", 100).await.is_err());
    let e = w.engine.switch_bot(&w.bot("planter").await, ComputerScope::Private).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PathEscapes, "{}", e.message);
    canary.untouched();
    let (code, _) = w.engine.shell(&w.bot("neighbour").await, "true").await.unwrap();
    assert_eq!(code, 0);
    as_root(bot.computer.id.as_str(), &format!("rm {folder} && mv {folder}.real {folder}"));

    // 3. Private → Team while a plant on the Team computer makes its folder a link to its
    // neighbour's: the Team computer refuses to place anything through it.
    w.engine.switch_bot(&w.bot("planter").await, ComputerScope::Private).await.unwrap();
    w.engine.files_write(&w.bot("planter").await, "private-work.txt", bytes::Bytes::from_static(b"from private"), false).await.unwrap();
    let neighbour = w.engine.bot("neighbour").await.unwrap();
    as_root(bot.computer.id.as_str(), &format!("rm -rf {folder} && ln -s {home}/bots/{} {folder}", neighbour.id));
    assert!(w.engine.switch_bot(&w.bot("planter").await, ComputerScope::Team).await.is_err(), "nothing is placed through a planted link");
    let (code, out) = w.engine.shell(&w.bot("neighbour").await, "ls").await.unwrap();
    assert_eq!((code, out.as_str()), (0, "mine.txt\n"), "the neighbour's folder is untouched");

    canary.untouched();
    store_has_no_canary(&w.dir.path().join("homes"));
}

/// While checkpoints run, a bot swaps a folder and a link to `/etc` with renameat2(EXCHANGE) in
/// a loop, and a file and a FIFO: checkpoints finish, capture nothing outside the home, and name
/// what they skipped.
#[tokio::test]
async fn swaps_and_fifos_during_checkpoints_capture_nothing_and_hang_nothing() {
    let w = world().await;
    let bot = w.engine.create_bot("swapper", ComputerScope::Private, None, "").await.unwrap();
    let swapper = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs('swap/d', exist_ok=True)
open('swap/d/inside.txt', 'w').write('inside')
if not os.path.lexists('swap/l'):
    os.symlink('/etc', 'swap/l')
end = time.time() + 60
while time.time() < end:
    libc.renameat2(-100, b'swap/d', -100, b'swap/l', 2)
    try:
        os.unlink('pipe')
    except FileNotFoundError:
        pass
    os.mkfifo('pipe')
    os.unlink('pipe')
    open('pipe', 'w').write('file')
"#;
    w.engine.files_write(&w.bot("swapper").await, "swapper.py", bytes::Bytes::from(swapper.as_bytes().to_vec()), false).await.unwrap();
    let (code, out) = w
        .engine
        .shell(&w.bot("swapper").await, "mkfifo fifo-kept-out && (setsid -f python3 swapper.py >swapper.out 2>&1 </dev/null) && sleep 1")
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let store = || w.dir.path().join("homes").read_dir().unwrap().next().unwrap().unwrap().path().join("current");
    for _ in 0..5 {
        let r = tokio::time::timeout(Duration::from_secs(300), w.engine.checkpoint(&bot.computer.id)).await.expect("a checkpoint never hangs").unwrap();
        assert!(r.skipped.iter().any(|s| s.path == "fifo-kept-out"), "the FIFO is named: {:?}", r.skipped);
        let v = std::fs::canonicalize(store()).unwrap();
        for name in ["swap/d", "swap/l"] {
            // Caught mid-swap, an entry is left out and named.
            let Ok(m) = std::fs::symlink_metadata(v.join(name)) else {
                assert!(r.skipped.iter().any(|s| s.path == name && s.why == "changed while saved"), "{name} is missing and not named: {:?}", r.skipped);
                continue;
            };
            if m.is_dir() {
                let mut inside: Vec<_> = std::fs::read_dir(v.join(name)).unwrap().map(|e| e.unwrap().file_name()).collect();
                inside.sort();
                assert_eq!(inside, ["inside.txt"], "{name} holds only the bot's own file");
            } else {
                assert!(m.file_type().is_symlink(), "{name} is the folder or the link");
            }
        }
        if let Ok(m) = std::fs::symlink_metadata(v.join("pipe")) {
            assert!(m.is_file(), "a FIFO is never stored");
        }
        assert!(!v.join("passwd").exists() && !v.join("swap/passwd").exists());
    }
    let (code, _) = w.engine.shell(&w.bot("swapper").await, "pkill -f '^python3 swapper'; true").await.unwrap();
    assert_eq!(code, 0);
}

/// A Team bot's restores are loaded as root (the files go to their owners after). While they run,
/// the bot swaps one of its folders and a link to a root-only file with renameat2(EXCHANGE) in a
/// loop: no restore changes the file (its mode, owner or bytes), since root places entries by
/// descriptor and never through a link.
#[tokio::test]
async fn a_team_bot_swapping_its_folders_never_turns_a_restore_onto_a_root_file() {
    let w = world().await;
    let bot = w.engine.create_bot("racer", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("racer").await, "swap/inside.txt", bytes::Bytes::from_static(b"inside"), false).await.unwrap();
    w.engine.checkpoint(&bot.computer.id).await.unwrap();
    let version = w.engine.history(&w.bot("racer").await).await.unwrap().versions[0].version;
    as_root(bot.computer.id.as_str(), "printf root-only > /var/canary && chmod 600 /var/canary");
    let swapper = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
os.symlink('/var/canary', 'l')
end = time.time() + 120
while time.time() < end and not os.path.exists('stop'):
    libc.renameat2(-100, b'swap', -100, b'l', 2)
"#;
    w.engine.files_write(&w.bot("racer").await, "swapper.py", bytes::Bytes::from(swapper.as_bytes().to_vec()), false).await.unwrap();
    let (code, out) = w.engine.shell(&w.bot("racer").await, "(setsid -f python3 swapper.py >swapper.out 2>&1 </dev/null) && sleep 0.5").await.unwrap();
    assert_eq!(code, 0, "{out}");
    let mut placed = 0;
    for _ in 0..8 {
        // Caught with the link in place, a restore may fail; it never goes through the link.
        if w.engine.restore(&w.bot("racer").await, version, Some("swap/inside.txt")).await.is_ok() {
            placed += 1;
        }
        as_root(bot.computer.id.as_str(), "test \"$(stat -c %a:%u:%s /var/canary)\" = 600:0:9 || { stat /var/canary >&2; exit 1; }");
    }
    assert!(placed > 0, "no restore got through");
    w.engine.files_write(&w.bot("racer").await, "stop", bytes::Bytes::new(), false).await.unwrap();
}

/// Thirty checkpoints, one changed file each, keep thirty versions sharing the rest; a destroyed
/// computer's file is restored from an old version in the store alone (no computer to go
/// through), and the computer's next start begins from that.
#[tokio::test]
async fn thirty_checkpoints_keep_thirty_versions_and_a_restore_needs_no_computer() {
    let w = world().await;
    let bot = w.engine.create_bot("keeper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("keeper").await, "big.bin", bytes::Bytes::from(vec![7u8; 4 << 20]), false).await.unwrap();
    for i in 1..=30 {
        w.engine.files_write(&w.bot("keeper").await, "count.txt", bytes::Bytes::from(format!("{i}\n")), false).await.unwrap();
        assert_eq!(w.engine.checkpoint(&bot.computer.id).await.unwrap().version, i);
    }
    let h = w.engine.history(&w.bot("keeper").await).await.unwrap();
    assert_eq!(h.versions.len(), 30, "{h:?}");
    assert!(h.versions[..29].iter().all(|v| v.changes.written == 1 && v.changes.removed == 0 && v.label == "checkpoint"), "{h:?}");
    assert!(h.disk_bytes < 5 << 20, "30 versions share the 4 MiB file: {} bytes", h.disk_bytes);

    w.engine.destroy_computer(&bot.computer.id).await.unwrap();
    let r = w.engine.restore(&w.bot("keeper").await, 5, Some("count.txt")).await.unwrap();
    assert_eq!((r.live, r.from, r.saved, r.version), (false, 5, Some(31), 32), "{r:?}");
    assert_eq!(&w.engine.stored_read(&w.bot("keeper").await, "count.txt", 100).await.unwrap()[..], b"5\n");
    assert_eq!(&w.engine.files_read(&w.bot("keeper").await, "count.txt", 100).await.unwrap()[..], b"5\n", "the computer starts from the restored version");
    assert_eq!(w.engine.files_read(&w.bot("keeper").await, "big.bin", 8 << 20).await.unwrap().len(), 4 << 20);
}

/// What a bot can make to wedge a checkpoint or fill the disk: a sparse file of 1 TiB with 5,000
/// data extents (its holes stay holes on the host, both ways), a thousand hard links (one file on
/// the host, links again after a restore), a file of 2 TiB (over the stream's limit), a path too
/// long for the host's store, a folder it can read but not search, a file nobody may read (both
/// saved: the save runs as root). Each is saved well or skipped and named; the next checkpoint, stop, destroy and restore all work.
#[tokio::test]
async fn what_a_bot_makes_to_wedge_a_checkpoint_is_saved_sparse_or_skipped_and_named() {
    use std::os::unix::fs::MetadataExt;
    let w = world().await;
    let bot = w.engine.create_bot("wedger", ComputerScope::Team, None, "").await.unwrap();
    const MAKE: &str = r#"python3 - <<'PY'
import os
with open('sparse.bin', 'wb') as f:
    f.truncate(1 << 40)
    for i in range(5000):
        f.seek(i * ((1 << 40) // 5000))
        f.write(b'x' * 4096)
with open('huge.bin', 'wb') as f:
    f.truncate(2 << 40)
p = 'deep'
os.mkdir(p)
while len(p) < 3200:
    p += '/' + 'n' * 200
    os.mkdir(p)
open(p + '/' + 'f' * 200, 'w').write('x')
os.mkdir('noexec'); open('noexec/inside', 'w').write('x'); os.chmod('noexec', 0o400)
open('secret', 'w').write('x'); os.chmod('secret', 0)
os.mkdir('links'); open('links/base', 'wb').write(os.urandom(1 << 20))
for i in range(1000):
    os.link('links/base', 'links/l%d' % i)
PY
du -B1 sparse.bin | cut -f1; du -B1 -s links | cut -f1"#;
    let (code, out) = w.engine.shell(&w.bot("wedger").await, MAKE).await.unwrap();
    assert_eq!(code, 0, "{out}");
    let du: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    let (inside, links_inside) = (du[0], du[1]);
    let r = w.engine.checkpoint(&bot.computer.id).await.unwrap();
    let named = |end: &str, why: &str| r.skipped.iter().any(|s| s.path.ends_with(end) && s.why.starts_with(why));
    assert!(named("/huge.bin", "larger than 1 TiB"), "{:?}", r.skipped);
    // The save runs as root: what the bot made unreadable to itself is saved all the same.
    assert!(!r.skipped.iter().any(|s| s.path.ends_with("/secret") || s.path.ends_with("/noexec/inside")), "{:?}", r.skipped);
    assert!(named("…", "path longer than 3072 bytes"), "{:?}", r.skipped);
    // The sparse file takes on the host what it takes inside (no zero is written).
    let home = w.engine.list_computers().await.unwrap().into_iter().find(|c| c.id == bot.computer.id).unwrap().home;
    let root = home.join(format!("v{}", r.version)).join(&bot.folder);
    let host = std::fs::metadata(root.join("sparse.bin")).unwrap();
    assert_eq!(host.len(), 1 << 40);
    assert!(host.blocks() * 512 <= inside * 12 / 10, "host {} bytes for {inside} inside", host.blocks() * 512);
    // A thousand hard links stay one file.
    let mut inodes = std::collections::HashMap::new();
    for e in std::fs::read_dir(root.join("links")).unwrap() {
        let m = e.unwrap().metadata().unwrap();
        inodes.insert(m.ino(), m.blocks() * 512);
    }
    let links_host: u64 = inodes.values().sum();
    assert!(links_host <= links_inside * 12 / 10, "1,001 names take {links_host} bytes on the host for {links_inside} inside");
    // The next checkpoint links through the folder it could not search; stop and destroy work;
    // the restore sends the sparse file back by its extents.
    let (code, _) = w.engine.shell(&w.bot("wedger").await, "echo more > more.txt").await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(w.engine.checkpoint(&bot.computer.id).await.unwrap().version, r.version + 1);
    assert!(w.engine.stop_computer(&bot.computer.id).await.unwrap().not_saved.is_none());
    let destroyed = w.engine.destroy_computer(&bot.computer.id).await.unwrap();
    assert!(destroyed.not_saved.is_none());
    let (code, out) = w
        .engine
        .shell(&w.bot("wedger").await, "stat -c '%s %b %B' sparse.bin && cat more.txt && stat -c %h links/base && ls noexec 2>&1; stat -c %a noexec")
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let mut l = out.lines();
    let f: Vec<u64> = l.next().unwrap().split(' ').map(|n| n.parse().unwrap()).collect();
    assert_eq!(f[0], 1 << 40);
    assert!(f[1] * f[2] <= inside * 12 / 10, "restored: {} bytes for {inside}", f[1] * f[2]);
    assert_eq!(l.next(), Some("more"));
    assert_eq!(l.next(), Some("1001"), "the hard links came back as links");
    assert!(out.ends_with("\n500\n"), "the folder it could not search comes back searchable by its owner: {out}");
}

/// A save helper that stops sending (stopped here from outside, as root: it runs as root, which no
/// bot can signal): the checkpoint gives up after its idle bound (2 s here, 60 s by default) and
/// says so, the previous version stays, and the computer still stops and is destroyed.
#[tokio::test]
async fn a_save_helper_the_bot_stops_times_out_and_stop_and_destroy_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine));
    cfg.policy.checkpoint_idle = 2_000;
    let w = World { engine: Engine::open(cfg).await.unwrap(), dir };
    let bot = w.engine.create_bot("stopper", ComputerScope::Team, None, "").await.unwrap();
    w.engine.files_write(&w.bot("stopper").await, "kept.txt", bytes::Bytes::from_static(b"first"), false).await.unwrap();
    // Enough to save that a save lasts longer than one round of the stopping loop below.
    let (code, _) = w.engine.shell(&w.bot("stopper").await, "head -c 64M /dev/urandom > big.bin").await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(w.engine.checkpoint(&bot.computer.id).await.unwrap().version, 1);
    // The bot cannot stop the save helper (root's).
    let (code, out) = w.engine.shell(&w.bot("stopper").await, "(sleep 0.3; pkill -STOP -f 'botdesk-helpe[r] save'; echo $?) & true").await.unwrap();
    assert_eq!(code, 0, "{out}");
    // In the background, every save helper is stopped as it starts (the class keeps the loop from
    // matching its own command line), so every checkpoint would hang.
    as_root(bot.computer.id.as_str(), r#"(for i in $(seq 200000); do pkill -STOP -f "botdesk-helpe[r] save"; done) >/dev/null 2>&1 </dev/null & sleep 1"#);
    // A changed file makes the save long enough that the loop cannot miss it (a save of nothing
    // new can end within a round of the loop on a loaded machine).
    let (code, _) = w.engine.shell(&w.bot("stopper").await, "head -c 64M /dev/urandom > big.bin").await.unwrap();
    assert_eq!(code, 0);
    let e = w.engine.checkpoint(&bot.computer.id).await.unwrap_err();
    assert!(e.code == ErrorCode::TimedOut && e.message.contains("stopped sending"), "{e:?}");
    let c = w.engine.stop_computer(&bot.computer.id).await.unwrap();
    let why = c.not_saved.unwrap_or_default();
    assert!(why.contains("stopped sending") && why.contains("version 1 is the last saved"), "{why}");
    assert_eq!(c.status, botdesk_engine::MachineStatus::Stopped);
    // Destroy starts it again to save first: the stop ended the loop, so that save goes through.
    assert!(w.engine.destroy_computer(&bot.computer.id).await.unwrap().not_saved.is_none());
    assert_eq!(&w.engine.stored_read(&w.bot("stopper").await, "kept.txt", 100).await.unwrap()[..], b"first");
}

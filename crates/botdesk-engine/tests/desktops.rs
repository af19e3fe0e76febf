//! Per-bot desktops on the real Docker engine: separate displays, slots, the screen gateway's
//! tokens, input isolation, the screen limit.

mod common;

use botdesk_engine::*;
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;

/// An engine on its own data directory; its computers are destroyed when dropped.
struct World {
    engine: Engine,
    _dir: tempfile::TempDir,
}

impl World {
    /// The bot, resolved once (what the engine's per-bot calls take).
    async fn bot(&self, name: &str) -> botdesk_engine::BotRef {
        self.engine.bot_ref(name).await.unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        common::tear_down(self._dir.path(), &[]);
    }
}

async fn world(screen_limit: Option<u32>, bots: &[&str]) -> World {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine));
    cfg.screen_limit = screen_limit;
    let engine = Engine::open(cfg).await.unwrap();
    for b in bots {
        engine.create_bot(b, ComputerScope::Team, None, "").await.unwrap();
    }
    World { engine, _dir: dir }
}

/// Runs `script` in a computer as its screen services' user (what no bot can do).
fn as_service(computer: &str, script: &str) {
    service_says(computer, script);
}

/// [`as_service`], returning what the script printed.
fn service_says(computer: &str, script: &str) -> String {
    let docker = |args: &[&str]| std::process::Command::new("docker").args(args).output().unwrap();
    let container = String::from_utf8(docker(&["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).stdout).unwrap().trim().to_string();
    let out = docker(&["exec", "-u", "botdesk-screen", &container, "sh", "-c", script]);
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Connects to the gateway with a token; returns the stream after the gateway's answer line.
fn gateway(port: u16, token: &str) -> (String, TcpStream) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("{token}\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    (line.trim().to_string(), s)
}

/// The RFB handshake (no authentication on the token-guarded socket), then one pointer event.
fn rfb_pointer(mut s: TcpStream, x: u16, y: u16) {
    let mut version = [0u8; 12];
    s.read_exact(&mut version).unwrap();
    assert_eq!(&version, b"RFB 003.008\n");
    s.write_all(b"RFB 003.008\n").unwrap();
    let mut n = [0u8; 1];
    s.read_exact(&mut n).unwrap();
    let mut types = vec![0u8; n[0] as usize];
    s.read_exact(&mut types).unwrap();
    assert!(types.contains(&1), "security None offered: {types:?}");
    s.write_all(&[1]).unwrap();
    let mut result = [0u8; 4];
    s.read_exact(&mut result).unwrap();
    assert_eq!(result, [0, 0, 0, 0]);
    s.write_all(&[1]).unwrap(); // shared
    let mut init = [0u8; 24];
    s.read_exact(&mut init).unwrap();
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let mut name = vec![0u8; name_len as usize];
    s.read_exact(&mut name).unwrap();
    let [xh, xl] = x.to_be_bytes();
    let [yh, yl] = y.to_be_bytes();
    s.write_all(&[5, 0, xh, xl, yh, yl]).unwrap();
    s.flush().unwrap();
    std::thread::sleep(Duration::from_millis(400));
}

/// Waits (a hang guard of 90 s, polling) until the bot's active window has this title: no fixed
/// sleeps, so a slow machine only makes the test slower. (A full CI run once took over 30 s here,
/// with thirteen computers starting on two cores.)
async fn wait_for_window(e: &Engine, bot: &str, title: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let active = e.screenshot(&e.bot_ref(bot).await.unwrap(), ImageFormat::Png).await.unwrap().active_window;
        if active.as_deref() == Some(title) {
            return;
        }
        assert!(Instant::now() < deadline, "no window titled {title:?} appeared (the active window: {active:?})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn cursor(e: &Engine, bot: &str) -> (u32, u32) {
    e.screenshot(&e.bot_ref(bot).await.unwrap(), ImageFormat::Png).await.unwrap().cursor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_drive_their_own_displays_in_parallel_and_a_25_action_batch_changes_nothing() {
    let w = world(None, &["a", "b"]).await;
    let (ref_a, ref_b) = (w.bot("a").await, w.bot("b").await);
    let (da, db) = tokio::join!(w.engine.open_desktop(&ref_a), w.engine.open_desktop(&ref_b));
    let (da, db) = (da.unwrap(), db.unwrap());
    assert_ne!(da.slot, db.slot);
    assert_eq!(
        {
            let mut s = [da.slot, db.slot];
            s.sort();
            s
        },
        [1, 2],
        "lowest free slots"
    );
    let moves = |x: u32, y: u32| serde_json::json!([{"type": "move", "x": x, "y": y}]);
    let (ma, mb) = (moves(101, 102), moves(201, 202));
    let (ra, rb) = tokio::join!(w.engine.act(&ref_a, &ma, Some(0)), w.engine.act(&ref_b, &mb, Some(0)));
    ra.unwrap();
    rb.unwrap();
    assert_eq!(cursor(&w.engine, "a").await, (101, 102));
    assert_eq!(cursor(&w.engine, "b").await, (201, 202));

    // Each display admits its own bot (and the screen services) only: a reaches its own screen,
    // never b's (X checks the connecting uid; Team bots are users of their own).
    let probe = |display: u32| {
        format!("DISPLAY=:{display} xdpyinfo >/dev/null 2>&1 && echo in || echo out; DISPLAY=:{display} xdotool getmouselocation 2>&1 | head -1")
    };
    let (_, own) = w.engine.shell(&w.bot("a").await, &probe(da.slot)).await.unwrap();
    assert!(own.starts_with("in\nx:101 y:102"), "{own}");
    let (_, other) = w.engine.shell(&w.bot("a").await, &probe(db.slot)).await.unwrap();
    assert!(other.starts_with("out\n") && !other.contains("x:201"), "a reached b's display: {other}");
    // Nor b's browser: its DevTools port is refused to a (before any browser listens there), and
    // its profile (cookies, saved logins) is b's folder alone.
    let devtools = |display: u32| {
        format!(
            "python3 -c 'import socket\ntry: socket.create_connection((\"127.0.0.1\", {}), timeout=2)\nexcept OSError as e: print(e.strerror)'",
            9221 + display
        )
    };
    let (_, own) = w.engine.shell(&w.bot("a").await, &devtools(da.slot)).await.unwrap();
    assert_eq!(own.trim(), "Connection refused", "a's own DevTools port (no browser yet)");
    let (_, other) = w.engine.shell(&w.bot("a").await, &devtools(db.slot)).await.unwrap();
    assert_eq!(other.trim(), "Permission denied", "b's DevTools port");
    let (_, profiles) = w
        .engine
        .shell(&w.bot("a").await, "for p in /home/botdesk/.browser-profiles/*; do ls \"$p\" >/dev/null 2>&1 && echo open || echo closed; done | sort")
        .await
        .unwrap();
    assert_eq!(profiles, "closed\nopen\n", "a opens its own profile only");
    // Nor can a pose as a display, or as b's browser: every display's abstract X name is the
    // services', and a listener a puts on b's DevTools port gets no answer out to the gateway.
    let (_, squat) = w
        .engine
        .shell(&w.bot("a").await, "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(b\"\\0/tmp/.X11-unix/X200\")' 2>&1 | tail -1")
        .await
        .unwrap();
    assert!(squat.contains("Address already in use"), "{squat}");
    let port = 9221 + db.slot;
    let listen =
        format!("(setsid python3 -c 'import socket, time; s = socket.create_server((\"127.0.0.1\", {port})); time.sleep(20)' >/dev/null 2>&1 &); sleep 0.5");
    w.engine.shell(&w.bot("a").await, &listen).await.unwrap();
    let computer = w.engine.bot("a").await.unwrap().computer.id;
    let reached = service_says(computer.as_str(), &format!("python3 -c 'import socket\ntry: socket.create_connection((\"127.0.0.1\", {port}), timeout=2); print(\"answered\")\nexcept OSError as e: print(\"no answer\")'"));
    assert_eq!(reached.trim(), "no answer", "a's listener on b's DevTools port answered the services");

    // 25 actions: refused before anything reaches the screen.
    let before = w.engine.screenshot(&w.bot("a").await, ImageFormat::Png).await.unwrap();
    let batch: Vec<_> = (0..25).map(|i| serde_json::json!({"type": "move", "x": 500 + i, "y": 500})).collect();
    let e = w.engine.act(&w.bot("a").await, &serde_json::json!(batch), Some(0)).await.unwrap_err();
    assert!(e.message.contains("at most 24 actions"), "{}", e.message);
    let after = w.engine.screenshot(&w.bot("a").await, ImageFormat::Png).await.unwrap();
    assert_eq!((after.cursor, after.frame_id), (before.cursor, before.frame_id), "the screen changed");

    // An unchanged screen keeps its frame id (the run's conversation then sends no image again);
    // a change gives another.
    let still = wait_still(&w.engine, "a").await;
    w.engine
        .exec(
            &w.bot("a").await,
            vec!["sh".into(), "-c".into(), format!("DISPLAY=:{} xterm -T changed -geometry 40x10+50+50 -e sleep 600 >/dev/null 2>&1 &", da.slot)],
            None,
            None,
            None,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    wait_for_window(&w.engine, "a", "changed").await;
    let changed = w.engine.screenshot(&w.bot("a").await, ImageFormat::Png).await.unwrap();
    assert_ne!(changed.frame_id, still, "a changed screen has a new frame id");
    assert!(changed.image.clone().unwrap().starts_with(b"\x89PNG"));
    // The JPEG option: same frame id (it names the pixels, not the encoding), a JPEG image.
    let jpeg = w.engine.screenshot(&w.bot("a").await, ImageFormat::Jpeg { quality: 70 }).await.unwrap();
    assert_eq!((jpeg.frame_id, jpeg.format), (changed.frame_id, ImageFormat::Jpeg { quality: 70 }));
    assert!(jpeg.image.unwrap().starts_with(&[0xFF, 0xD8, 0xFF]), "a JPEG");
    // A zoom (Claude's close look): the region around the (still) terminal, enlarged twice by
    // whole pixels (tokens in proportion to the region), beside a screenshot taken just before.
    let reference = w.engine.screenshot(&w.bot("a").await, ImageFormat::Png).await.unwrap();
    let (region, size, png) = w.engine.zoom(&w.bot("a").await, [40, 40, 360, 240], action::CoordSpace::Pixels).await.unwrap();
    assert_eq!((region.width(), region.height(), size), (320, 200, (640, 400)));
    let (_, _, zoomed) = botdesk_core::screenshot::decode_png(&png, (1280, 800)).unwrap();
    let (sw, _, shot) = botdesk_core::screenshot::decode_png(&reference.image.unwrap(), (1280, 800)).unwrap();
    let mut differing = 0;
    for (x, y) in (0..320).step_by(7).flat_map(|x| (0..200).step_by(5).map(move |y| (x, y))) {
        let z = &zoomed[((y * 2 + 1) * 640 + x * 2 + 1) * 3..][..3];
        let o = &shot[((40 + y) * sw as usize + 40 + x) * 3..][..3];
        differing += usize::from(z != o);
    }
    assert_eq!(differing, 0, "the zoom shows the screen's own pixels");
    let e = w.engine.zoom(&w.bot("a").await, [0, 0, 1281, 10], action::CoordSpace::Pixels).await.unwrap_err();
    assert!(e.message.contains("right 1281 is outside the screen"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_display_that_died_under_the_engine_comes_back_on_the_next_observe() {
    let w = world(None, &["d"]).await;
    let d = w.engine.open_desktop(&w.bot("d").await).await.unwrap();
    w.engine.screenshot(&w.bot("d").await, ImageFormat::Png).await.unwrap();
    // Kill the display behind the engine's back (as a restarted computer would).
    let computer = w.engine.list_computers().await.unwrap().remove(0).id;
    as_service(computer.as_str(), &format!("botdesk-display down {}", d.slot));
    let shot = w.engine.screenshot(&w.bot("d").await, ImageFormat::Png).await.unwrap();
    assert_eq!((shot.width, shot.height), (1280, 800));
    assert_eq!(w.engine.open_desktop(&w.bot("d").await).await.unwrap().slot, d.slot, "same slot, brought up again");
    // Another process (a CLI call) takes an open desktop to be up for a screenshot; when it died,
    // the screenshot brings it up and still comes.
    as_service(computer.as_str(), &format!("botdesk-display down {}", d.slot));
    let other = Engine::open(EngineConfig::new(w._dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let shot = other.screenshot(&other.bot_ref("d").await.unwrap(), ImageFormat::Png).await.unwrap();
    assert!(shot.image.is_some() && shot.width == 1280);
    // A program launched on the display opens there; one that does not exist is said so.
    let said = w.engine.launch_app(&w.bot("d").await, "xterm -T launched -e sleep 600").await.unwrap();
    assert!(said.starts_with("Started \"xterm -T launched -e sleep 600\" on your desktop"), "{said}");
    wait_for_window(&w.engine, "d", "launched").await;
    let e = w.engine.launch_app(&w.bot("d").await, "no-such-program --flag").await.unwrap_err();
    assert_eq!(e.message, "there is no program named no-such-program on this computer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_any_unicode_reaches_the_app() {
    let w = world(None, &["u"]).await;
    let d = w.engine.open_desktop(&w.bot("u").await).await.unwrap();
    let cmd = format!("DISPLAY=:{} xterm -u8 -T typing -geometry 60x10+0+0 -e sh -c 'cat > typed.txt' >/dev/null 2>&1 &", d.slot);
    w.engine.exec(&w.bot("u").await, vec!["sh".into(), "-c".into(), cmd], None, None, None, CancellationToken::new()).await.unwrap();
    wait_for_window(&w.engine, "u", "typing").await;
    let text = "Ωμέγα 世界 ✓ — naïve";
    let actions = serde_json::json!([
        {"type": "click", "x": 100, "y": 60},
        {"type": "type", "text": text},
        {"type": "key", "key": "Return"},
        {"type": "key", "key": "d", "modifiers": ["ctrl"]}
    ]);
    // The batch waits for the screen: it changed (the text, then the window closing) and then
    // stayed still for the settle time.
    let (n, settled) = w.engine.act(&w.bot("u").await, &actions, Some(500)).await.unwrap();
    assert_eq!(n, 4);
    assert!(matches!(settled, action::Settled::Still { ms } if ms >= 500), "{settled:?}");
    let typed = w.engine.files_read(&w.bot("u").await, "typed.txt", 1000).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&typed), format!("{text}\n"));
    // Once the screen is still (the xterm's window may still be going), a batch that changes
    // nothing visible is said so after the cap. (The pointer is drawn into the screen: a move
    // counts as a change.) A settle time of 0 watches nothing.
    wait_still(&w.engine, "u").await;
    let (_, settled) = w.engine.act(&w.bot("u").await, &serde_json::json!([{"type": "wait", "ms": 10}]), None).await.unwrap();
    assert!(matches!(settled, action::Settled::Unchanged { ms } if ms >= action::SETTLE_CAP_MS), "{settled:?}");
    assert_eq!(
        settled.describe(),
        format!(
            "No visible change after {} ms.",
            match settled {
                action::Settled::Unchanged { ms } => ms,
                _ => 0,
            }
        )
    );
    let (_, settled) = w.engine.act(&w.bot("u").await, &serde_json::json!([{"type": "move", "x": 10, "y": 10}]), Some(0)).await.unwrap();
    assert_eq!(settled, action::Settled::Unwatched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recycled_slots_refuse_old_tokens_and_revocation_drops_open_connections() {
    let w = world(None, &["a", "b", "c"]).await;
    let da = w.engine.open_desktop(&w.bot("a").await).await.unwrap();
    let db = w.engine.open_desktop(&w.bot("b").await).await.unwrap();
    assert_eq!((da.slot, db.slot), (1, 2));
    // A view connection through the gateway speaks RFB.
    let (answer, mut open_b) = gateway(db.port, &db.view_token);
    assert_eq!(answer, "OK");
    let mut banner = [0u8; 12];
    open_b.read_exact(&mut banner).unwrap();
    assert_eq!(&banner, b"RFB 003.008\n");
    // Slot reuse: A releases, C gets slot 1; A's token is refused, C's accepted.
    assert!(w.engine.release_desktop(&w.bot("a").await).await.unwrap());
    let dc = w.engine.open_desktop(&w.bot("c").await).await.unwrap();
    assert_eq!(dc.slot, 1, "the lowest free slot is reused after a verified teardown");
    assert_ne!(dc.view_token, da.view_token);
    assert_eq!(gateway(da.port, &da.view_token).0, "ERR unknown or revoked token");
    assert_eq!(gateway(dc.port, &dc.view_token).0, "OK");
    assert_eq!(gateway(dc.port, "0123456789abcdef0123456789abcdef").0, "ERR unknown or revoked token");
    // Revocation drops an already-open connection (how fast is measured by `cargo xtask bench`;
    // the bound here only keeps a broken revocation from hanging the test).
    open_b.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    assert!(w.engine.release_desktop(&w.bot("b").await).await.unwrap());
    let mut buf = [0u8; 4096];
    loop {
        match open_b.read(&mut buf) {
            Ok(0) => break,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => panic!("the revoked connection stayed open"),
            Err(_) => break,
            Ok(_) => continue,
        }
    }
    assert_eq!(gateway(db.port, &db.view_token).0, "ERR unknown or revoked token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_the_screen_limit_graphical_calls_fail_and_exec_still_works() {
    let w = world(Some(1), &["one", "two"]).await;
    w.engine.open_desktop(&w.bot("one").await).await.unwrap();
    let e = w.engine.open_desktop(&w.bot("two").await).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::MultiScreenUnavailable);
    assert!(e.message.starts_with("MULTI_SCREEN_UNAVAILABLE"), "{}", e.message);
    assert_eq!(
        w.engine.act(&w.bot("two").await, &serde_json::json!([{"type": "move", "x": 1, "y": 1}]), Some(0)).await.unwrap_err().code,
        ErrorCode::MultiScreenUnavailable
    );
    let exit = w.engine.exec(&w.bot("two").await, vec!["true".into()], None, None, None, CancellationToken::new()).await.unwrap();
    assert_eq!(exit.code, 0, "shell keeps working");
    w.engine.release_desktop(&w.bot("one").await).await.unwrap();
    w.engine.open_desktop(&w.bot("two").await).await.expect("the freed slot is usable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_through_a_control_capability_reaches_only_that_bots_display() {
    let w = world(None, &["a", "b"]).await;
    let da = w.engine.open_desktop(&w.bot("a").await).await.unwrap();
    w.engine.open_desktop(&w.bot("b").await).await.unwrap();
    let b_before = cursor(&w.engine, "b").await;
    // The view capability is view-only: pointer events are ignored.
    let (ok, s) = gateway(da.port, &da.view_token);
    assert_eq!(ok, "OK");
    rfb_pointer(s, 33, 44);
    assert_ne!(cursor(&w.engine, "a").await, (33, 44), "a view token moved the pointer");
    // Control of A moves A's pointer and never B's.
    let ctl = w.engine.take_control_screen(&w.engine.bot_ref("a").await.unwrap().id).await.unwrap();
    let (ok, s) = gateway(ctl.port, &ctl.control_token);
    assert_eq!(ok, "OK");
    rfb_pointer(s, 77, 88);
    assert_eq!(cursor(&w.engine, "a").await, (77, 88));
    assert_eq!(cursor(&w.engine, "b").await, b_before);
    // Release revokes the control capability.
    w.engine.release_control(&w.engine.bot_ref("a").await.unwrap().id, &ctl.lease.lease_id, TakeoverResult::Finished, None).await.unwrap();
    assert_eq!(gateway(ctl.port, &ctl.control_token).0, "ERR unknown or revoked token");
}

const SET_COOKIE: &str = r#"<!doctype html><title>Set</title><script>document.cookie = "login=" + new URLSearchParams(location.search).get("user") + "; max-age=86400; path=/";</script><p>cookie set</p>"#;
const SHOW: &str = r#"<!doctype html><title>Show</title><p id=c></p><script>document.getElementById('c').textContent = 'cookie: ' + (document.cookie || '(none)');</script>
<form onsubmit="document.getElementById('r').textContent = 'hello ' + this.who.value; return false"><label>Name <input name=who></label><input type=password name=pw value=secret><button>Greet</button></form><p id=r></p>"#;

fn text(snapshot: &serde_json::Value) -> &str {
    snapshot["text"].as_str().unwrap()
}

/// Serves the test pages from inside the computer (its loopback; no network needed).
async fn serve_pages(e: &Engine, bot: &str) -> String {
    e.files_write(&e.bot_ref(bot).await.unwrap(), "shared/site/set.html", SET_COOKIE.into(), false).await.unwrap();
    e.files_write(&e.bot_ref(bot).await.unwrap(), "shared/site/show.html", SHOW.into(), false).await.unwrap();
    let serve = "cd /home/botdesk/shared/site && (setsid python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 0.5";
    e.exec(&e.bot_ref(bot).await.unwrap(), vec!["sh".into(), "-c".into(), serve.into()], None, None, None, CancellationToken::new()).await.unwrap();
    "http://127.0.0.1:8123".into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_keep_per_bot_profiles_across_kills_releases_and_slots() {
    let w = world(None, &["a", "b", "c"]).await;
    let site = serve_pages(&w.engine, "a").await;
    // Two bots browse at once; a cookie set in A's browser is never visible in B's.
    let (set, show) = (format!("{site}/set.html?user=alice"), format!("{site}/show.html"));
    let (ref_a, ref_b) = (w.bot("a").await, w.bot("b").await);
    let (sa, sb) = tokio::join!(w.engine.browser_navigate(&ref_a, &set), w.engine.browser_navigate(&ref_b, &show));
    assert!(text(&sa.unwrap()).contains("cookie set"));
    assert!(text(&sb.unwrap()).contains("cookie: (none)"));
    assert!(text(&w.engine.browser_navigate(&w.bot("a").await, &format!("{site}/show.html")).await.unwrap()).contains("cookie: login=alice"));
    // Snapshot: refs, values, passwords masked; act by ref fills and clicks.
    let snap = w.engine.browser_snapshot(&w.bot("b").await).await.unwrap();
    let elements = snap["elements"].as_array().unwrap();
    assert_eq!(elements.iter().map(|e| e["ref"].as_str().unwrap()).collect::<Vec<_>>(), ["e1", "e2", "e3"]);
    assert_eq!(elements[1]["value"], "********", "passwords are masked");
    assert!(!snap.to_string().contains("secret"));
    let after = w
        .engine
        .browser_act(&w.bot("b").await, &serde_json::json!([{"action": "fill", "ref": "e1", "text": "Bob"}, {"action": "click", "ref": "e3"}]))
        .await
        .unwrap();
    assert!(text(&after).contains("hello Bob"), "{}", text(&after));
    // Bad input: clear errors, nothing done.
    assert!(w.engine.browser_navigate(&w.bot("a").await, "file:///etc/passwd").await.unwrap_err().message.contains("only http and https"));
    assert!(w.engine.browser_navigate(&w.bot("a").await, "http://user:pw@127.0.0.1:8123/").await.unwrap_err().message.contains("credentials"));
    let missing = w.engine.browser_act(&w.bot("a").await, &serde_json::json!([{"action": "click", "ref": "e99"}])).await.unwrap_err();
    assert!(missing.message.contains("computer_act"), "the error suggests the fallback: {}", missing.message);

    // Release A (graceful close), let C take slot 1, reopen A on another slot: login still there.
    let slot_a = w.engine.open_desktop(&w.bot("a").await).await.unwrap().slot;
    assert!(w.engine.release_desktop(&w.bot("a").await).await.unwrap());
    assert_eq!(w.engine.open_desktop(&w.bot("c").await).await.unwrap().slot, slot_a, "C reuses A's old slot");
    let new_slot = w.engine.open_desktop(&w.bot("a").await).await.unwrap().slot;
    assert_ne!(new_slot, slot_a);
    assert!(text(&w.engine.browser_navigate(&w.bot("a").await, &format!("{site}/show.html")).await.unwrap()).contains("cookie: login=alice"));
    // The new occupant of the recycled slot has its own clean profile.
    assert!(text(&w.engine.browser_navigate(&w.bot("c").await, &format!("{site}/show.html")).await.unwrap()).contains("cookie: (none)"));
    // A hard kill of A's Chromium: the next use restarts it on the same profile, no restore bubble.
    let bot_a = w.engine.bot("a").await.unwrap();
    let profile = botdesk_core::browser::profile_name(&bot_a.id);
    let kill = vec!["pkill".into(), "-9".into(), "-f".into(), format!("user-data-dir=.*{profile}")];
    w.engine.exec(&w.bot("a").await, kill, None, None, None, CancellationToken::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(text(&w.engine.browser_navigate(&w.bot("a").await, &format!("{site}/show.html")).await.unwrap()).contains("cookie: login=alice"));
    let shot = w.engine.screenshot(&w.bot("a").await, ImageFormat::Png).await.unwrap();
    assert_eq!(shot.active_window.as_deref(), Some("Show - Chromium"));
    // Chromium's DevTools ports listen on the computer's loopback only, and nothing but the
    // gateway is published on the host.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    w.engine.exec(&w.bot("a").await, vec!["cat".into(), "/proc/net/tcp".into()], None, None, Some(tx), CancellationToken::new()).await.unwrap();
    let mut tcp = String::new();
    while let Ok(c) = rx.try_recv() {
        tcp.push_str(&String::from_utf8_lossy(&c.data));
    }
    let devtools: Vec<(String, u32)> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ip, port) = f.get(1)?.split_once(':')?;
            (f.get(3) == Some(&"0A")).then(|| (ip.to_string(), u32::from_str_radix(port, 16).unwrap()))
        })
        .filter(|(_, port)| (9222..9400).contains(port))
        .collect();
    assert_eq!(devtools.len(), 3, "one DevTools port per browsing bot: {devtools:?}");
    assert!(devtools.iter().all(|(ip, _)| ip == "0100007F"), "DevTools must listen on 127.0.0.1 only: {devtools:?}");
    let computer = w.engine.list_computers().await.unwrap()[0].id.clone();
    let ids = std::process::Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    let ports = std::process::Command::new("docker").arg("port").arg(String::from_utf8_lossy(&ids.stdout).trim()).output().unwrap();
    let ports = String::from_utf8_lossy(&ports.stdout);
    assert!(ports.lines().all(|l| l.starts_with("7900/tcp -> 127.0.0.1:")) && ports.lines().count() >= 1, "published: {ports}");
    // Profiles are keyed by bot: one folder per bot that browsed.
    let (_, profiles) = w.engine.files_list(&w.bot("a").await, "/home/botdesk/.browser-profiles").await.unwrap();
    assert_eq!(profiles.len(), 3);
    assert!(profiles.iter().any(|p| p.path.as_str().ends_with(&profile)));
}

/// The screen services run as their own user (botdesk-screen): a bot can neither stop, kill nor
/// replace the gateway, nor read or rewrite its framebuffers, tokens, sockets or environment.
/// Should a service break anyway (here its own user breaks it, as a flaw in it might: a rewritten
/// framebuffer header, a stopped gateway, an impostor claiming a 1 PB screenshot), each call fails
/// with one clear error within its bound, nothing aborts, Stop finishes, and after a restart the
/// computer is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_cannot_touch_the_screen_services_and_a_broken_gateway_fails_calls_cleanly() {
    let w = world(None, &["h"]).await;
    let d = w.engine.open_desktop(&w.bot("h").await).await.unwrap();
    w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap();
    // (exit code, stdout and stderr) of a command the bot runs.
    let bot = |script: String| {
        let e = w.engine.clone();
        async move { e.shell(&e.bot_ref("h").await.unwrap(), &script).await.unwrap() }
    };
    let computer = w.engine.list_computers().await.unwrap().remove(0).id;
    let as_service = |script: &str| as_service(computer.as_str(), script);
    let header = |field: usize, value: u32| {
        format!(
            "python3 -c \"import struct; f=open('/dev/shm/botdesk-fb/{}/Xvfb_screen0','r+b'); f.seek({}); f.write(struct.pack('>I',{value}))\"",
            d.slot,
            field * 4
        )
    };

    // What the bot tries, as itself: every one refused by the kernel.
    let gateway_pid = "$(pgrep -u botdesk-screen -f '[b]otdesk-gateway' | head -n 1)";
    for attempt in [
        format!("kill -STOP {gateway_pid}"),
        format!("kill -KILL {gateway_pid}"),
        format!("cat /proc/{gateway_pid}/environ"),
        header(12, 0),
        "ls /tmp/botdesk-gw/tokens".into(),
        "ls /tmp/botdesk-vnc".into(),
        "echo impostor > /usr/local/bin/botdesk-gateway".into(),
        "touch /tmp/.X11-unix/X77".into(),
    ] {
        let (code, out) = bot(format!("test -n \"{gateway_pid}\" || exit 99; {attempt}")).await;
        assert!(code != 0 && code != 99, "the bot could: {attempt}");
        assert!(out.contains("ermission denied") || out.contains("not permitted"), "{attempt}: {out}");
    }
    w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap();

    // A header claiming 0 bytes per line (it passed the old size check) and one claiming a
    // screen far larger than the data.
    for (field, value) in [(12, 0u32), (5, 60_000)] {
        as_service(&header(field, value));
        let e = w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap_err();
        assert!(e.message.contains("bad screenshot from the computer"), "{}", e.message);
    }

    // A stopped gateway: the call gives up within its bound, with its own code.
    // ([b]: the pattern must not match this shell's own command line.)
    as_service("pkill -STOP -f '[b]otdesk-gateway'");
    let e = w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TimedOut, "{e}");
    assert!(e.message.contains("did not answer"), "{e}");

    // An impostor on the gateway's port (one that knows the agent token, as the services' user
    // does: it passes the handshake) claims a 1 PB body. (Its text must not name the gateway, or
    // the pkill before it would end the shell that starts it.)
    let impostor = r#"
import hashlib, hmac, os, socket
t = os.environ["BOTDESK_AGENT_TOKEN"].encode()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7900)); s.listen()
while True:
    c, _ = s.accept(); f = c.makefile("rb")
    e, g = f.readline().split()[1].decode(), "0" * 32
    c.sendall(("PROOF %s %s\n" % (g, hmac.new(t, ("botdesk-" "gateway %s %s" % (e, g)).encode(), hashlib.sha256).hexdigest())).encode())
    f.readline(); c.sendall(b"OK\n")
    while f.readline():
        c.sendall(b"{\"ok\": true, \"len\": 1000000000000000}\n")
"#;
    assert!(!impostor.contains('\''), "it goes in single quotes");
    as_service(&format!("pkill -KILL -f '[b]otdesk-gateway'; sleep 0.5; setsid python3 -c '{impostor}' >/dev/null 2>&1 < /dev/null & sleep 1"));
    let e = w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap_err();
    assert!(e.message.contains("bad answer from the computer's screen gateway") && e.message.contains("1000000000000000"), "{}", e.message);

    // A `.pth` file in the user site runs in every Python that reads it: the computer's own
    // services start isolated (`-I`) and never read it.
    let (code, out) = bot("d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && echo \"import os; open('/tmp/planted', 'w')\" > \"$d/plant.pth\"".into()).await;
    assert_eq!(code, 0, "{out}");

    // Stop finishes with the impostor stopped too.
    as_service("pkill -STOP -f '[s]ocket.socket'");
    tokio::time::timeout(Duration::from_secs(180), w.engine.stop_computer(&computer)).await.expect("stop finishes").unwrap();

    // Started again, the computer has its own gateway and a whole framebuffer, and the plant
    // (kept by the checkpoint, as a bot's file) ran nowhere.
    let shot = w.engine.screenshot(&w.bot("h").await, ImageFormat::Png).await.unwrap();
    assert_eq!((shot.width, shot.height), (1280, 800));
    w.engine.files_list(&w.bot("h").await, "").await.unwrap();
    let (code, out) = bot("test ! -e /tmp/planted && test -n \"$(find ~/.local -name plant.pth)\"".into()).await;
    assert_eq!(code, 0, "{out}");
}

/// The person's shells end with their control, in whichever process sees it end: a shell opened
/// by one engine (standing for an app that was killed) is stopped when another process on the same
/// data directory, after the control lapsed, opens the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shells_of_a_lapsed_control_are_stopped_by_whichever_process_sees_it() {
    let w = world(None, &["p"]).await;
    w.engine.take_control(&w.engine.bot_ref("p").await.unwrap().id).await.unwrap();
    // ([s]: the patterns must not match the probe's own command line.)
    let running = |pattern: &'static str| {
        let e = w.engine.clone();
        async move { e.shell(&e.bot_ref("p").await.unwrap(), &format!("pgrep -f '{pattern}' || true")).await.unwrap().1.trim().to_string() }
    };
    let started = |pattern: &'static str| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while running(pattern).await.is_empty() {
            assert!(std::time::Instant::now() < deadline, "the shell's command never started");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    // The person's shell runs no startup file: a bot can write every one of the home's.
    let planted = w.engine.shell(&w.bot("p").await, "echo 'echo PLANTED-IN-RC' >> ~/.bashrc; echo 'echo PLANTED-IN-PROFILE' >> ~/.profile").await.unwrap();
    assert_eq!(planted.0, 0, "{}", planted.1);
    let mut t = w.engine.open_terminal(&w.bot("p").await, 80, 24).await.unwrap();
    w.engine.terminal_input(&t.id, bytes::Bytes::from_static(b"echo shell-$((6*7))\n")).await.unwrap();
    let mut said = String::new();
    while !said.contains("shell-42") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), t.output.recv()).await.expect("the shell answers").expect("the shell is open");
        said.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!said.contains("PLANTED"), "a planted startup file ran in the person's shell: {said}");
    // A shell closed ends everything it started, also a daemon with its own session and an
    // empty environment.
    w.engine.terminal_input(&t.id, bytes::Bytes::from_static(b"setsid env -i sleep 7771 </dev/null >/dev/null 2>&1 &\n")).await.unwrap();
    started("[s]leep 7771").await;
    w.engine.close_terminal(&t.id);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !running("[s]leep 7771").await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "the closed shell's daemon lives on");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let t = w.engine.open_terminal(&w.bot("p").await, 80, 24).await.unwrap();
    w.engine.terminal_input(&t.id, bytes::Bytes::from_static(b"sleep 777\n")).await.unwrap();
    let sleeping = || running("[s]leep 777");
    started("[s]leep 777").await;
    // Another process, a minute after the control's end.
    let mut cfg = EngineConfig::new(w._dir.path(), ProviderChoice::Machine(botdesk_docker::machine));
    cfg.clock = std::sync::Arc::new(OffsetClock(Policy::default().control_ttl + 60_000));
    let later = Engine::open(cfg).await.unwrap();
    assert!(later.control_of(&later.bot_ref("p").await.unwrap().id).await.unwrap().is_none());
    assert_eq!(sleeping().await, "", "the lapsed control's shell left its command running");
}

/// Every command and shell of a bot runs with its own display: on a Team computer the bot on
/// slot 2 that starts `xterm` from its shell gets the window on display :2, not on the first
/// bot's; a bot with no desktop gets no display at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_a_bot_starts_from_its_shell_opens_on_its_own_display() {
    let w = world(None, &["first", "second", "blind"]).await;
    assert_eq!(w.engine.open_desktop(&w.bot("first").await).await.unwrap().slot, 1);
    assert_eq!(w.engine.open_desktop(&w.bot("second").await).await.unwrap().slot, 2);
    let (code, out) =
        w.engine.shell(&w.bot("second").await, "echo \"[$DISPLAY]\"; setsid xterm -T from-second -e sleep 600 >/dev/null 2>&1 < /dev/null &").await.unwrap();
    assert_eq!((code, out.trim()), (0, "[:2]"));
    let windows = |bot: &'static str| {
        let e = w.engine.clone();
        async move { e.shell(&e.bot_ref(bot).await.unwrap(), "xdotool search --name '^from-second$' || true").await.unwrap().1.trim().to_string() }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while windows("second").await.is_empty() {
        assert!(Instant::now() < deadline, "the xterm never appeared on display :2");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(windows("first").await, "", "the second bot's xterm is on the first bot's display");
    let (code, out) = w.engine.shell(&w.bot("blind").await, "echo \"[${DISPLAY-unset}]\"; xdotool getmouselocation 2>&1; true").await.unwrap();
    assert_eq!(code, 0);
    assert!(out.starts_with("[unset]\n") && out.contains("Can't open display"), "{out}");
    // A Team bot removed takes with it what it left running, also a daemon with its own session
    // and an empty environment; the other bots' processes stay.
    w.engine.shell(&w.bot("blind").await, "setsid env -i sleep 7773 </dev/null >/dev/null 2>&1 &").await.unwrap();
    w.engine.remove_bot(&w.engine.bot_ref("blind").await.unwrap().id).await.unwrap();
    let (_, left) = w.engine.shell(&w.bot("first").await, "pgrep -af '[s]leep 7773|[f]rom-second' || true").await.unwrap();
    assert!(!left.contains("7773") && left.contains("from-second"), "{left}");
}

/// A bot on one Private computer cannot connect to another computer's gateway or to a server the
/// other bot started, not even while networks are being made (when Docker's own isolation between
/// networks lapses for a moment): its network policy (`open`) refuses each TCP connection with its
/// page, and the fence refuses anything else at once. Nor does it reach a service of the host
/// (through its gateway or at the host's addresses), nor anything over IPv6, and it can take down
/// neither the fence nor the policy's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_computer_cannot_reach_another_computers_gateway_or_servers() {
    let w = world(None, &[]).await;
    for b in ["near", "far"] {
        w.engine.create_bot(b, ComputerScope::Private, None, "").await.unwrap();
    }
    let sh = |bot: &'static str, script: String| {
        let e = w.engine.clone();
        async move {
            let (code, out) = e.shell(&e.bot_ref(bot).await.unwrap(), &script).await.unwrap();
            assert_eq!(code, 0, "{bot}: {script}\n{out}");
            out.trim().to_string()
        }
    };
    let far_ip = sh("far", "python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'".into()).await;
    sh("far", "setsid python3 -m http.server 8000 >/dev/null 2>&1 < /dev/null & sleep 1".into()).await;
    // Something comes back from both ports inside far itself (so the probe below can tell).
    let answers = |ip: &str, port: u16| {
        format!("python3 -c 'import socket; s = socket.create_connection((\"{ip}\", {port}), timeout=5); s.sendall(b\"GET / HTTP/1.0\\r\\n\\n\"); assert s.recv(64)'")
    };
    for port in [8000, 7900] {
        sh("far", answers(&far_ip, port)).await;
    }

    // Networks come and go beside the probe, as when any program on the machine makes one.
    let churning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let churn = std::thread::spawn({
        let churning = churning.clone();
        move || {
            let label = std::env::var("BOTDESK_TEST_RUN").map(|r| format!("botdesk.test-run={r}")).unwrap_or_else(|_| "botdesk.test-churn=1".into());
            let mut made = 0;
            while churning.load(std::sync::atomic::Ordering::Relaxed) {
                let name = format!("botdesk-churn-{}-{made}", std::process::id());
                let ok = std::process::Command::new("docker").args(["network", "create", "--label", &label, &name]).output().unwrap().status.success();
                let _ = std::process::Command::new("docker").args(["network", "rm", &name]).output();
                made += ok as u32;
            }
            made
        }
    });
    let probe = format!(
        r#"python3 - <<'EOF'
{REFUSED}
tried, end = 0, time.time() + 15
while time.time() < end:
    for port in (8000, 7900):
        refused("{far_ip}", port)
        tried += 1
    time.sleep(0.01)
print(tried)
EOF"#
    );
    let tried = sh("near", probe).await;
    churning.store(false, std::sync::atomic::Ordering::Relaxed);
    let made = churn.join().unwrap();
    assert!(made > 0, "no network was made during the probe");
    assert!(tried.parse::<u32>().unwrap() > 100, "{tried}");

    // The host: a service listening on all its interfaces is refused through near's gateway and
    // at each of the host's own addresses; IPv6 is off.
    let host = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let addresses = botdesk_docker::spec::host_addresses();
    assert!(!addresses.is_empty(), "this machine has an address besides loopback");
    let probe = format!(
        r#"python3 - <<'EOF'
{REFUSED}
import subprocess
gw = subprocess.check_output(["ip", "-4", "route", "show", "default"]).split()[2].decode()
for ip in [gw] + "{addresses}".split():
    refused(ip, {port})
try:
    socket.create_connection(("::1", 7900), timeout=3)
    sys.exit("IPv6 works")
except OSError:
    pass
print(open("/proc/sys/net/ipv6/conf/all/disable_ipv6").read().strip(), gw)
EOF"#,
        addresses = addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
    );
    let got = sh("near", probe).await;
    assert!(got.starts_with("1 "), "{got}");
    host.set_nonblocking(true).unwrap();
    assert!(host.accept().is_err(), "nothing reached the listener");

    // A bot holds no capability and can lift neither the fence nor the policy's rules.
    let caps =
        sh("near", "grep -E '^Cap(Eff|Prm)' /proc/self/status; ip rule del priority 100 2>&1 || true; iptables -t nat -F OUTPUT 2>&1 | tail -1 || true".into())
            .await;
    assert!(caps.starts_with("CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nRTNETLINK answers: Operation not permitted\n"), "{caps}");
    assert!(caps.contains("Permission denied (you must be root)"), "{caps}");
}

/// A probe's check that a TCP connection from a bot to `ip`:`port` is refused by its network
/// policy (`open`: a private address) and never reaches what listens there, and that UDP to it is
/// refused by the fence at once.
const REFUSED: &str = r#"import errno, socket, sys, time
def refused(ip, port):
    s = socket.create_connection((ip, port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + ip.encode() + b"\r\n\r\n")
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    s.close()
    if not (got.startswith(b"HTTP/1.1 403 Forbidden") and b"Botdesk blocked this page" in got and b"a private address" in got):
        sys.exit(f"{ip}:{port} answered, not the network policy: {got[:200]!r}")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.connect((ip, port))
        sys.exit(f"{ip}:{port} over UDP not refused by the fence")
    except OSError as e:
        if e.errno != errno.EACCES:
            sys.exit(f"{ip}:{port} over UDP not refused by the fence: {e!r}")
"#;

/// Each computer is alone on its own network, a bridge with traffic between its containers off,
/// removed with the computer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_computer_is_alone_on_its_own_network_which_goes_with_it() {
    let w = world(None, &[]).await;
    for b in ["near", "far"] {
        w.engine.create_bot(b, ComputerScope::Private, None, "").await.unwrap();
        w.engine.shell(&w.bot(b).await, "true").await.unwrap();
    }
    let docker = |args: &[&str]| String::from_utf8_lossy(&std::process::Command::new("docker").args(args).output().unwrap().stdout).trim().to_string();
    let mut networks = vec![];
    for c in w.engine.list_computers().await.unwrap() {
        let container = docker(&["ps", "-q", "--filter", &format!("label=botdesk.computer={}", c.id)]);
        let network = docker(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &container]);
        assert!(network.starts_with("botdesk-") && network.ends_with(c.id.as_str()), "{network}");
        assert_eq!(docker(&["inspect", "-f", "{{len .NetworkSettings.Networks}}", &container]), "1", "on no other network");
        assert_eq!(
            docker(&["network", "inspect", "-f", "{{index .Options \"com.docker.network.bridge.enable_icc\"}} {{len .Containers}}", &network]),
            "false 1"
        );
        networks.push((c.id, network));
    }
    assert_ne!(networks[0].1, networks[1].1);
    for (id, network) in networks {
        w.engine.destroy_computer(&id).await.unwrap();
        assert_eq!(docker(&["network", "ls", "-q", "--filter", &format!("name=^{network}$")]), "", "{network} went with its computer");
    }
}

/// The clipboard both ways as UTF-8 (RFB's cut text is Latin-1 only): the person's text reaches
/// the bot's display whole (another program there, an xterm, pastes it) and the bot's comes back
/// whole; only while the person controls the screen, at most 64 KiB, refusals change nothing.
/// And no token or clipboard text is ever in a process list.
#[tokio::test]
async fn clipboard_text_goes_both_ways_whole_and_only_under_control_and_no_secret_is_in_a_process_list() {
    let w = world(None, &["clip"]).await;
    let d = w.engine.open_desktop(&w.bot("clip").await).await.unwrap();
    let text = "héllo wörld — 世界 € ß";
    assert_eq!(w.engine.set_clipboard(&w.bot("clip").await, text).await.unwrap_err().code, ErrorCode::Stale, "refused without control");
    assert_eq!(w.engine.clipboard_text(&w.bot("clip").await).await.unwrap(), "", "nothing was set");
    let lease = w.engine.take_control(&w.engine.bot_ref("clip").await.unwrap().id).await.unwrap();
    let big = "x".repeat(MAX_CLIPBOARD + 1);
    assert_eq!(w.engine.set_clipboard(&w.bot("clip").await, &big).await.unwrap_err().code, ErrorCode::Invalid);
    w.engine.set_clipboard(&w.bot("clip").await, text).await.unwrap();
    assert_eq!(w.engine.clipboard_text(&w.bot("clip").await).await.unwrap(), text);
    // An xterm on the bot's display pastes it (Shift+Insert: the PRIMARY selection).
    let (code, out) = w
        .engine
        .shell(&w.bot("clip").await, &format!("export DISPLAY=:{}; (setsid xterm -u8 -T paste -geometry 60x8+100+100 -e sh -c 'cat > pasted.txt' >/dev/null 2>&1 &); sleep 1.5; xdotool search --name '^paste$' windowactivate --sync; xdotool key shift+Insert Return", d.slot))
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let t0 = Instant::now();
    loop {
        let pasted = String::from_utf8_lossy(&w.engine.stored_read(&w.bot("clip").await, "pasted.txt", 1000).await.unwrap_or_default()).into_owned();
        if pasted == format!("{text}\n") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "the xterm pasted {pasted:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A new text replaces it; the old owner lets go (one owner left, nothing piles up).
    w.engine.set_clipboard(&w.bot("clip").await, "second").await.unwrap();
    assert_eq!(w.engine.clipboard_text(&w.bot("clip").await).await.unwrap(), "second");
    let t0 = Instant::now();
    loop {
        let (_, owners) = w.engine.shell(&w.bot("clip").await, "pgrep -fc '[X]lib import X, Xatom' || true").await.unwrap();
        if owners.trim() == "1" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "one program holds the clipboard, not {owners:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // No secret in a process list: with a view and a control transport up, the person's text on
    // the clipboard and a command that timed out (its processes stopped by their tag), no
    // command line or environment that the bot (inside) or another user of this machine (the
    // test's own user, outside) can read holds a screen token, the agent token or the text.
    let secret_text = "pässwörd-7f3e1c";
    w.engine.set_clipboard(&w.bot("clip").await, secret_text).await.unwrap();
    let view = w.engine.screen_target(&w.bot("clip").await).await.unwrap();
    let control = w.engine.take_control_screen(&w.engine.bot_ref("clip").await.unwrap().id).await.unwrap();
    let (cancel, (tx, _rx)) = (tokio_util::sync::CancellationToken::new(), tokio::sync::mpsc::unbounded_channel());
    let timed_out = w.engine.exec(&w.bot("clip").await, vec!["sleep".into(), "30".into()], None, Some(Duration::from_secs(1)), Some(tx), cancel).await.unwrap();
    assert_eq!(timed_out.outcome, botdesk_core::ExecOutcome::TimedOut, "{timed_out:?}");
    let computer = w.engine.list_computers().await.unwrap().remove(0).id;
    let inspect = std::process::Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    let container = String::from_utf8(inspect.stdout).unwrap().trim().to_string();
    let env = std::process::Command::new("docker").args(["inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", &container]).output().unwrap();
    let agent_token = String::from_utf8(env.stdout).unwrap().lines().find_map(|l| l.strip_prefix("BOTDESK_AGENT_TOKEN=")).unwrap().to_string();
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(secret_text)
    };
    let secrets = [
        ("view token", view.token.as_str()),
        ("control token", control.control_token.as_str()),
        ("agent token", agent_token.as_str()),
        ("clipboard", secret_text),
        ("clipboard, in base64", encoded.as_str()),
    ];
    assert!(secrets.iter().all(|(_, s)| s.len() >= 15), "{secrets:?}");
    let (code, out) = w
        .engine
        .shell(
            &w.bot("clip").await,
            "o=$PWD/procs.txt; cd /proc && for p in [0-9]*; do tr '\\0' '\\n' < $p/cmdline; tr '\\0' '\\n' < $p/environ; done > $o 2>/dev/null; wc -l < $o",
        )
        .await
        .unwrap();
    assert!(code == 0 && out.trim().parse::<u64>().unwrap() > 50, "the bot read its processes: {out}");
    let inside = String::from_utf8_lossy(&w.engine.files_read(&w.bot("clip").await, "procs.txt", 16 << 20).await.unwrap()).into_owned();
    assert!(inside.contains("x11vnc") && inside.contains("BOTDESK_BOT_ID="), "the scan saw the transports and the bot's own environment");
    let mut outside = String::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        for f in ["cmdline", "environ"] {
            if let Ok(b) = std::fs::read(e.path().join(f)) {
                outside.push_str(&String::from_utf8_lossy(&b).replace('\0', "\n"));
            }
        }
    }
    assert!(outside.contains("x11vnc"), "the host sees the computer's processes");
    for (what, secret) in secrets {
        assert!(!inside.contains(secret), "the bot reads the {what} in a process list");
        assert!(!outside.contains(secret), "another user of this machine reads the {what} in a process list");
    }
    w.engine.release_control(&w.engine.bot_ref("clip").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, None).await.unwrap();
}

/// After its computer restarted from another process (its gateway now on a new port), the engine
/// that cached the old port meets whatever took it: that listener gets a random hello and nothing
/// else (no token), and the engine finds the gateway again.
#[tokio::test]
async fn a_listener_on_the_gateways_old_port_gets_no_secret() {
    let w = world(None, &["moved"]).await;
    w.engine.open_desktop(&w.bot("moved").await).await.unwrap();
    w.engine.screenshot(&w.bot("moved").await, ImageFormat::Png).await.unwrap();
    let computer = w.engine.list_computers().await.unwrap().remove(0).id;
    let docker = |args: &[&str]| String::from_utf8(std::process::Command::new("docker").args(args).output().unwrap().stdout).unwrap().trim().to_string();
    let container = docker(&["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]);
    let port = || docker(&["port", &container, "7900/tcp"]);
    let old = port();
    let agent_token = docker(&["inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", &container])
        .lines()
        .find_map(|l| l.strip_prefix("BOTDESK_AGENT_TOKEN=").map(str::to_string))
        .unwrap();
    // Another process restarts the computer; a local program takes the old port.
    docker(&["restart", "-t", "1", &container]);
    assert_ne!(port(), old, "the gateway moved");
    let listener = std::net::TcpListener::bind(old.as_str()).unwrap();
    let taker = std::thread::spawn(move || {
        let mut seen = vec![];
        listener.set_nonblocking(false).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        seen.extend(line.as_bytes());
        // What it would say if it could.
        let _ = s.write_all(format!("PROOF {} {}\n", "1".repeat(32), "2".repeat(64)).as_bytes());
        let _ = r.read_to_end(&mut seen);
        seen
    });
    let t0 = Instant::now();
    while w.engine.screenshot(&w.bot("moved").await, ImageFormat::Png).await.is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the engine did not find the gateway again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seen = String::from_utf8_lossy(&taker.join().unwrap()).into_owned();
    assert!(seen.starts_with("HELLO ") && seen.lines().count() == 1, "{seen:?}");
    assert!(!seen.contains(&agent_token), "the agent token reached the listener");
}

/// Looks at the bot's screen until two looks half a second apart see the same frame (the
/// pointer and windows are still); returns that frame's id.
async fn wait_still(engine: &botdesk_engine::Engine, bot: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = engine.screenshot(&engine.bot_ref(bot).await.unwrap(), ImageFormat::Png).await.unwrap().frame_id;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = engine.screenshot(&engine.bot_ref(bot).await.unwrap(), ImageFormat::Png).await.unwrap().frame_id;
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the screen never settled");
        last = now;
    }
}

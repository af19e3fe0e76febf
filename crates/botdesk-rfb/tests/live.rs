//! The viewer against a real computer: frames arrive through the gateway, view-only input goes
//! nowhere, control input reaches the display, a revoked transport turns into "reconnecting" and
//! comes back, and the WebSocket transport serves the same pixels.

use botdesk_engine::*;
use botdesk_rfb::*;
use futures::{SinkExt, StreamExt};
use std::{sync::Arc, time::Duration};

struct World {
    engine: Engine,
    _dir: tempfile::TempDir,
}

impl Drop for World {
    fn drop(&mut self) {
        let engine = self.engine.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                for c in engine.list_computers().await.unwrap_or_default() {
                    let _ = engine.destroy_computer(&c.id).await;
                }
            })
        })
        .join();
    }
}

async fn world(bot: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine));
    cfg.policy.control_ttl = 3_000; // short, so expiry can be seen
    let engine = Engine::open(cfg).await.unwrap();
    engine.create_bot(bot, ComputerScope::Team, None, "").await.unwrap();
    World { engine, _dir: dir }
}

/// Where the session connects: control when the person holds it, the view otherwise.
fn resolver(engine: Engine, bot: &'static str) -> Resolve {
    Arc::new(move || {
        let engine = engine.clone();
        Box::pin(async move {
            let t = engine.screen_target(&engine.bot_ref(bot).await.unwrap()).await.map_err(|e| e.message)?;
            Ok(Target { port: t.port, token: t.token, control: t.control, compressed: t.compressed })
        })
    })
}

async fn sh(e: &Engine, bot: &str, cmd: &str) -> String {
    let (code, out) = e.shell(&e.bot_ref(bot).await.unwrap(), cmd).await.unwrap();
    assert_eq!(code, 0, "{cmd}: {out}");
    out
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the bot's pointer is at `at` (input sent through the viewer arrived).
async fn pointer_reaches(e: &Engine, display: u32, at: (u32, u32), what: &str) {
    let t = std::time::Instant::now();
    loop {
        let loc = sh(e, "v", &format!("DISPLAY=:{display} xdotool getmouselocation --shell")).await;
        if loc.contains(&format!("X={}\n", at.0)) && loc.contains(&format!("Y={}\n", at.1)) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{what} never arrived: {loc}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pixel(s: &Session, x: usize, y: usize) -> [u8; 3] {
    s.shared.fb.lock().unwrap().rgb(x as u16, y as u16)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_input_control_and_reconnect() {
    let w = world("v").await;
    let d = w.engine.open_desktop(&w.engine.bot_ref("v").await.unwrap()).await.unwrap();
    let s = Session::spawn_with(resolver(w.engine.clone(), "v"), Duration::from_millis(500));
    let watching = s.subscribe(); // a session nobody watches asks for no updates
    until("connected view-only", || s.state() == ConnState::Connected { control: false }).await;
    until("the first frame", || s.shared.fb.lock().unwrap().width == 1280).await;

    // A known colour drawn on the bot's display shows up in the viewer's framebuffer (away from the
    // pointer, which the screen draws into its frames).
    sh(&w.engine, "v", &format!("DISPLAY=:{} xsetroot -solid '#123456'", d.slot)).await;
    until("the root colour", || pixel(&s, 900, 200) == [0x12, 0x34, 0x56]).await;

    // View-only: a click does not reach the display.
    sh(&w.engine, "v", &format!("DISPLAY=:{} xdotool mousemove 5 5", d.slot)).await;
    assert!(s.send(Input::Pointer { x: 300, y: 301, buttons: 0 }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loc = sh(&w.engine, "v", &format!("DISPLAY=:{} xdotool getmouselocation --shell", d.slot)).await;
    assert!(loc.contains("X=5\n") && loc.contains("Y=5\n"), "view-only input moved the pointer: {loc}");

    // Take control: the session follows, and input arrives.
    let c = w.engine.take_control_screen(&w.engine.bot_ref("v").await.unwrap().id).await.unwrap();
    s.retarget();
    until("connected with control", || s.state() == ConnState::Connected { control: true }).await;
    assert!(s.send(Input::Pointer { x: 300, y: 301, buttons: 0 }));
    pointer_reaches(&w.engine, d.slot, (300, 301), "control input").await;

    // The WebSocket transport serves the same pixels to a viewer with the secret, nobody else.
    let registry: Registry = Default::default();
    let s = Arc::new(s);
    registry.lock().unwrap().insert("v".into(), s.clone());
    let server = FrameServer::start(registry.clone(), "sekrit".into()).await.unwrap();
    let wrong = format!("ws://127.0.0.1:{}/screen/v?s=nope", server.port);
    assert!(tokio_tungstenite::connect_async(wrong).await.is_err(), "a wrong secret is refused");
    let (mut ws, _) = tokio_tungstenite::connect_async(server.url("v")).await.unwrap();
    let (mut size, mut colour) = (None, None);
    while size.is_none() || colour.is_none() {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap();
        if let tokio_tungstenite::tungstenite::Message::Binary(b) = m {
            match b[0] {
                2 => size = Some((u16::from_le_bytes([b[1], b[2]]), u16::from_le_bytes([b[3], b[4]]))),
                1 => {
                    // Rectangles (bands of rows): find the one holding pixel (640, 400).
                    let n = u16::from_le_bytes([b[1], b[2]]);
                    let mut at = 3usize;
                    for _ in 0..n {
                        let f = |i: usize| u16::from_le_bytes([b[at + i], b[at + i + 1]]) as usize;
                        let (x, y, w, h) = (f(0), f(2), f(4), f(6));
                        at += 8;
                        if (x..x + w).contains(&640) && (y..y + h).contains(&400) {
                            let i = at + ((400 - y) * w + (640 - x)) * 4;
                            colour = Some([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                        }
                        at += w * h * 4;
                    }
                    assert!(b.len() <= 3 + botdesk_rfb::ws::MAX_MESSAGE + 8 * n as usize + 1280 * 4, "messages stay within their bound");
                }
                _ => {}
            }
        }
    }
    assert_eq!(size, Some((1280, 800)));
    assert_eq!(colour, Some([0x12, 0x34, 0x56, 255]));
    // A viewer that gives its size in the URL gets even the first frame at that size.
    let (mut small, _) = tokio_tungstenite::connect_async(format!("{}&w=640&h=400", server.url("v"))).await.unwrap();
    let first_size = loop {
        let m = tokio::time::timeout(Duration::from_secs(10), small.next()).await.unwrap().unwrap().unwrap();
        if let tokio_tungstenite::tungstenite::Message::Binary(b) = m {
            if b[0] == 2 {
                break (u16::from_le_bytes([b[1], b[2]]), u16::from_le_bytes([b[3], b[4]]));
            }
        }
    };
    assert_eq!(first_size, (640, 400));
    drop(small);
    // Bad input over the socket is ignored; good input still arrives.
    ws.send("not json".into()).await.unwrap();
    ws.send(r#"{"t":"p","x":12.4,"y":13.6,"b":0}"#.into()).await.unwrap();
    pointer_reaches(&w.engine, d.slot, (12, 14), "input over the WebSocket").await;

    // Release: the control transport is revoked, the session reconnects view-only by itself.
    w.engine.release_control(&w.engine.bot_ref("v").await.unwrap().id, &c.lease.lease_id, TakeoverResult::Finished, None).await.unwrap();
    until("view-only again", || s.state() == ConnState::Connected { control: false }).await;

    // Control that expires turns the session view-only by itself (no retarget from anyone).
    w.engine.take_control_screen(&w.engine.bot_ref("v").await.unwrap().id).await.unwrap();
    s.retarget();
    until("control again", || s.state() == ConnState::Connected { control: true }).await;
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let (revoked, _) = w.engine.expire().await.unwrap();
    assert_eq!(revoked.len(), 1);
    until("view-only after expiry", || s.state() == ConnState::Connected { control: false }).await;

    // The computer stops: the session says it is reconnecting; it comes back when the screen does.
    // (Every state change is broadcast; watch them all, the reconnecting phase may be short.)
    let mut states = s.subscribe();
    let comp = w.engine.list_computers().await.unwrap()[0].id.clone();
    w.engine.stop_computer(&comp).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match states.recv().await {
                Ok(Update::State(ConnState::Reconnecting { error, .. })) => return error,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("session updates ended: {e}"),
            }
        }
    })
    .await
    .expect("the session never said it was reconnecting");
    assert!(!seen.is_empty(), "a reconnecting state carries its reason");
    w.engine.open_desktop(&w.engine.bot_ref("v").await.unwrap()).await.unwrap();
    until("connected again", || s.state() == ConnState::Connected { control: false }).await;

    // Nobody watches any more (the socket closed, the subscribers are gone): soon after its idle
    // delay the session lets the connection and its pixels go; a new viewer brings it back.
    drop((ws, watching, states));
    until("idle", || s.state() == ConnState::Idle).await;
    assert_eq!(s.shared.fb.lock().unwrap().pixels.len(), 0, "an idle session holds no pixels");
    let _watching = s.subscribe();
    until("connected for the new viewer", || s.state() == ConnState::Connected { control: false }).await;
    sh(&w.engine, "v", &format!("DISPLAY=:{} xsetroot -solid '#654321'", d.slot)).await;
    until("its live picture", || {
        let width = s.shared.fb.lock().unwrap().width;
        width == 1280 && pixel(&s, 900, 200) == [0x65, 0x43, 0x21]
    })
    .await;
    registry.lock().unwrap().clear();
}

/// A computer on another machine (the second Docker engine `cargo xtask test` starts): its screen
/// comes through the relay, compressed, and control input goes back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screen_on_another_machine_comes_compressed() {
    let url = std::env::var("BOTDESK_TEST_REMOTE_URL").expect("BOTDESK_TEST_REMOTE_URL is unset: run the tests with `cargo xtask test`");
    let tls = std::path::PathBuf::from(std::env::var("BOTDESK_TEST_REMOTE_TLS").expect("BOTDESK_TEST_REMOTE_TLS is unset")).join("good");
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let w = World { engine: engine.clone(), _dir: dir };
    engine.add_host("far", &url, &tls).await.unwrap();
    engine.send_image("far", &|_| {}).await.unwrap();
    engine.create_bot_on("r", ComputerScope::Private, "far", None, "").await.unwrap();
    let d = engine.open_desktop(&engine.bot_ref("r").await.unwrap()).await.unwrap();
    assert!(engine.screen_target(&engine.bot_ref("r").await.unwrap()).await.unwrap().compressed, "a screen across a network asks for compression");
    sh(&engine, "r", &format!("DISPLAY=:{} xsetroot -solid '#123456'", d.slot)).await;

    let s = Session::spawn_with(resolver(engine.clone(), "r"), Duration::from_millis(500));
    let _watching = s.subscribe();
    until("connected view-only", || s.state() == ConnState::Connected { control: false }).await;
    until("the root colour", || s.shared.fb.lock().unwrap().width == 1280 && pixel(&s, 900, 200) == [0x12, 0x34, 0x56]).await;
    let bytes = s.shared.bytes_in.load(std::sync::atomic::Ordering::Relaxed);
    // Raw, the first whole screen alone would be 1280×800×4 = 4,096,000 bytes.
    assert!(bytes < 1_000_000, "the whole screen came compressed: {bytes} bytes");

    engine.take_control_screen(&engine.bot_ref("r").await.unwrap().id).await.unwrap();
    s.retarget();
    until("connected with control", || s.state() == ConnState::Connected { control: true }).await;
    assert!(s.send(Input::Pointer { x: 321, y: 123, buttons: 0 }));
    let t = std::time::Instant::now();
    loop {
        let loc = sh(&engine, "r", &format!("DISPLAY=:{} xdotool getmouselocation --shell", d.slot)).await;
        if loc.contains("X=321\n") && loc.contains("Y=123\n") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "control input never arrived: {loc}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(s);
    drop(w);
}

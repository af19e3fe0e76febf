//! Taking control, done well, in the real app under Xvfb against the real Docker engine and a
//! scripted model: a screen tab in focus mode (chat and dock hidden, Esc returns) and at actual
//! size (scrolling), the same screen live in a window of its own, and pause-and-take during a
//! run: the run finishes its step and waits, the person types into an xterm through the viewer,
//! Release with a note resumes it and the model is told; Stop during a pause ends the run. The
//! pointer is drawn into the frames, so watchers see where the bot moves it.
//! Screenshots of each state land in target/e2e/.

mod webdriver;

use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_engine::*;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};
use webdriver::*;

/// The engine beside the app, on the same data directory (as the CLI would be).
struct Side {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    model: String,
}

impl Side {
    /// A command in the bot's folder, bounded: a test never waits on a computer without a limit.
    fn sh(&self, bot: &str, cmd: &str) -> (i32, String) {
        let ran =
            self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), self.engine.shell(&self.engine.bot_ref(bot).await.unwrap(), cmd)).await });
        ran.unwrap_or_else(|_| panic!("`{cmd}` did not end within 60 s")).unwrap()
    }

    fn shell_running(&self, bot: &str) -> bool {
        self.rt
            .block_on(self.engine.activity(&self.rt.block_on(self.engine.bot_ref(bot)).unwrap(), 0, 20))
            .unwrap()
            .iter()
            .any(|a| a.kind == "shell" && a.status == botdesk_core::ActivityStatus::Running)
    }
}

impl Drop for Side {
    /// Stops what a failed test left running (a run waiting at its gate), then removes it all;
    /// bounded, so a failure is reported rather than hidden behind a hang.
    fn drop(&mut self) {
        let cleanup = async {
            for b in self.engine.list_bots().await.unwrap_or_default() {
                let _ = self.engine.stop_bot(&b.id).await;
            }
            for c in self.engine.list_computers().await.unwrap_or_default() {
                let _ = self.engine.destroy_computer(&c.id).await;
            }
            for b in self.engine.list_bots().await.unwrap_or_default() {
                let _ = self.engine.remove_bot(&b.id).await;
            }
            let _ = self.engine.remove_model(&self.model).await;
        };
        if self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(120), cleanup).await }).is_err() {
            eprintln!("take test: cleaning up took over 120 s; left as it was");
        }
    }
}

const VIEW: &str = "window.__botdesk.viewers.find((v) => v.el.classList.contains('interactive'))";

fn wait(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The X window of the screen in a window of its own, by its title.
fn own_window(title: &str) -> Option<String> {
    let out = Command::new("xdotool").args(["search", "--onlyvisible", "--name", title]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().next().map(str::to_string)
}

/// "r,g,b" at the centre of an X window, as the X server shows it.
fn window_centre(id: &str) -> String {
    let png = e2e_dir().join("own-window-probe.png");
    assert!(Command::new("import").args(["-window", id]).arg(&png).status().unwrap().success());
    let out = Command::new("identify").args(["-format", "%w %h"]).arg(&png).output().unwrap();
    let wh: Vec<i64> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(|n| n.parse().unwrap()).collect();
    pixel(&png, wh[0] / 2, wh[1] / 2 + 40)
}

#[test]
fn a_big_screen_and_pause_and_take_during_a_run() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        // Each command waits for the test to open its gate (a file in the bot's folder): the app learns
        // of this process's run from its once-a-second look, so a fixed-length command could end
        // before the app offers to pause it on a loaded machine.
        Step::reply(Reply::call("shell", json!({"command": format!("{GATE}; echo first-step-done")}))),
        Step::check(
            |s| {
                let body = s.body["messages"].to_string();
                match body.contains("first-step-done") && body.contains("took control of the screen for") && body.contains("typed it for you") {
                    true => Ok(()),
                    false => Err(format!("no handback with the note: {body}")),
                }
            },
            Reply::text("Thanks, I see what you typed."),
        ),
        Step::reply(Reply::call("shell", json!({"command": GATE}))),
    ]));
    let model = format!("take-e2e-{}", std::process::id());
    let new = NewModel {
        id: model.clone(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    rt.block_on(engine.add_model(new, None)).unwrap();
    rt.block_on(engine.create_bot("worker", ComputerScope::Team, Some(&model), "")).unwrap();
    let side = Side { rt, engine, model };
    let display = side.rt.block_on(side.engine.open_desktop(&side.rt.block_on(side.engine.bot_ref("worker")).unwrap())).unwrap().slot;
    let (code, out) = side.sh("worker", &format!("DISPLAY=:{display} xsetroot -solid '#13579b'; (DISPLAY=:{display} setsid xterm -u8 -T typing -geometry 60x8+100+100 -e sh -c 'cat > typed.txt' >/dev/null 2>&1 &) ; sleep 1"));
    assert_eq!(code, 0, "{out}");

    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap())]);
    d.click(".bot");
    d.click("#open-desktop");
    d.wait_js("the screen connected", &format!("return {VIEW}?.el.dataset.state === 'connected'"), Duration::from_secs(90));
    d.wait_js("the root colour", &format!("const v = {VIEW}, c = v.canvas, p = c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2), 1, 1).data; return p[2] === 0x9b"), Duration::from_secs(20));
    // The pointer is drawn into the frames: where the bot moves it shows in the view-only tab.
    let marks_near = |x: u32, y: u32| {
        d.js(&format!(
            "const v = {VIEW}, c = v.canvas, sx = c.width / v.screenW, sy = c.height / v.screenH; \
             const p = c.getContext('2d').getImageData(Math.floor({x} * sx), Math.floor({y} * sy), Math.ceil(10 * sx), Math.ceil(10 * sy)).data; \
             let n = 0; for (let i = 0; i < p.length; i += 4) if (p[i] !== 0x13 || p[i + 1] !== 0x57 || p[i + 2] !== 0x9b) n++; return n;"
        ))
        .as_i64()
        .unwrap()
    };
    side.sh("worker", &format!("DISPLAY=:{display} xdotool mousemove 640 400"));
    wait("the pointer drawn where the bot put it", || marks_near(640, 400) > 0);
    side.sh("worker", &format!("DISPLAY=:{display} xdotool mousemove 200 600"));
    wait("the pointer drawn where it moved", || marks_near(640, 400) == 0 && marks_near(200, 600) > 0);
    let width = || d.js(&format!("const v = {VIEW}; return [Math.round(v.canvas.getBoundingClientRect().width), v.canvas.width]"));
    let in_tab = width();

    // Focus mode: the chat, the dock and the sidebar go; the screen takes the window; Esc returns.
    d.click("#screen-focus");
    d.wait_js("focus mode", "return document.querySelector('#app').classList.contains('focus')", Duration::from_secs(5));
    d.wait_js("the canvas grown", &format!("const v = {VIEW}; return v.canvas.width > {} * 1.5", in_tab[1]), Duration::from_secs(10));
    let focused = width();
    assert!(focused[0].as_i64().unwrap() >= 1100, "the screen is as large as the window allows: {focused}");
    assert_eq!(d.js("return [...document.querySelectorAll('.chat, .dock, .sidebar')].filter(e => e.offsetParent !== null).length"), 0);
    std::thread::sleep(Duration::from_millis(500));
    screenshot("15-focus-mode.png");
    xdotool(&["key", "Escape"]);
    d.wait_js(
        "focus mode left with Esc",
        "return !document.querySelector('#app').classList.contains('focus') && !!document.querySelector('.chat')",
        Duration::from_secs(5),
    );
    d.wait_js("the canvas back in its tab", &format!("const v = {VIEW}; return v.canvas.width === {}", in_tab[1]), Duration::from_secs(10));

    // Actual size: one screen pixel per device pixel, the viewer scrolls.
    d.click("#screen-scale");
    d.wait_js(
        "actual size",
        &format!(
            "const v = {VIEW}; return v.canvas.width === v.screenW && Math.round(v.canvas.getBoundingClientRect().width * devicePixelRatio) === v.screenW"
        ),
        Duration::from_secs(10),
    );
    let scrolled = d.js(&format!("const v = {VIEW}, e = v.el; const before = v.canvas.getBoundingClientRect().left; e.scrollLeft = 300; e.scrollTop = 200; const r = v.canvas.getBoundingClientRect(); return [e.scrollWidth > e.clientWidth, Math.round(before - r.left), e.scrollTop]"));
    assert_eq!(scrolled, json!([true, 300, 200]), "the screen scrolls at actual size");
    d.wait_js(
        "frames at actual size",
        &format!("const v = {VIEW}, p = v.canvas.getContext('2d').getImageData(1000, 700, 1, 1).data; return p[2] === 0x9b"),
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_millis(500));
    screenshot("16-actual-size.png");
    d.click("#screen-scale");
    d.wait_js("fit again", &format!("const v = {VIEW}; return v.canvas.width === {}", in_tab[1]), Duration::from_secs(10));

    // Its own window: only that screen, large, with control; it stays live.
    d.click("#screen-window");
    let mut win = None;
    wait("the screen's own window", || {
        win = own_window("worker — Botdesk");
        win.is_some()
    });
    let win = win.unwrap();
    let geometry = String::from_utf8_lossy(&Command::new("xdotool").args(["getwindowgeometry", &win]).output().unwrap().stdout).to_string();
    let size: Vec<i64> = geometry.split("Geometry: ").nth(1).unwrap_or("").trim().split('x').map(|n| n.parse().unwrap_or(0)).collect();
    assert!(size.len() == 2 && size[0] >= 1200 && size[1] >= 780, "a window as large as the display allows: {geometry}");
    // Bigger than in the tab: the screen spans nearly the whole window's width. (WebKit paints
    // a moment after the layout, and not all at once: each capture is looked at whole.)
    let probe = e2e_dir().join("own-window-probe.png");
    let edges = || (pixel(&probe, size[0] / 2 - 520, size[1] / 2 + 40), pixel(&probe, size[0] / 2 + 520, size[1] / 2 + 40));
    let wide = || window_centre(&win) == "19,87,155" && edges() == ("19,87,155".to_string(), "19,87,155".to_string());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !wide() {
        assert!(Instant::now() < deadline, "the screen is over 1040 px wide in its own window (in the tab: {} px); its edges: {:?}", in_tab[0], edges());
        std::thread::sleep(Duration::from_millis(200));
    }
    // What the person sees on the display (the window sits at the top left; it paints a moment later).
    wait("the own window on the display", || pixel(&screenshot("17-own-window.png"), size[0] / 2, size[1] / 2 + 40) == "19,87,155");
    side.sh("worker", &format!("DISPLAY=:{display} xsetroot -solid '#2f9e44'"));
    wait("the own window live", || window_centre(&win) == "47,158,68");
    // Out of the way of the main window for what follows.
    xdotool(&["windowunmap", &win]);

    // Pause and take during a run.
    let engine = side.engine.clone();
    let run = side.rt.spawn(async move { engine.run_task(&engine.bot_ref("worker").await.unwrap().id, "type something for me").await });
    wait("the run's command", || side.shell_running("worker"));
    pause_offered(&d, &side);
    d.click("#control-button");
    open_gate(&side, &d);
    d.wait_js(
        "control once the step ended",
        &format!("return {VIEW}?.el.dataset.control === 'true' && document.querySelector('#screen-mode')?.textContent === 'You have control'"),
        Duration::from_secs(60),
    );
    assert!(!side.shell_running("worker"), "the command ended before the person got the screen");
    assert_eq!(server.requests().len(), 1, "the model waits while the person has the screen");
    d.wait_js(
        "the pause in the chat",
        "return [...document.querySelectorAll('.msg.system')].some(m => m.textContent.startsWith('Paused:'))",
        Duration::from_secs(10),
    );
    // Type into the xterm through the viewer.
    let at = d.js(&format!("const v = {VIEW}, r = v.canvas.getBoundingClientRect(); return [Math.round(r.left + 300 * r.width / v.screenW), Math.round(r.top + 150 * r.height / v.screenH)]"));
    xdotool(&["mousemove", &at[0].to_string(), &at[1].to_string(), "click", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    xdotool(&["type", "--delay", "40", "typed while paused"]);
    xdotool(&["key", "Return"]);
    wait("the typing in the bot's xterm", || side.sh("worker", "cat typed.txt").1 == "typed while paused\n");
    d.type_into("#handback-note", "typed it for you");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("18-paused-and-took-control.png");
    d.click("#control-button");
    let done = side.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), run).await }).expect("the run ended").unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    d.wait_js("the resume in the chat", "return [...document.querySelectorAll('.msg.system')].some(m => m.textContent.startsWith('Resumed: you had the screen for') && m.textContent.includes('typed it for you'))", Duration::from_secs(10));
    d.wait_js(
        "the bot's answer",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent === 'Thanks, I see what you typed.')",
        Duration::from_secs(10),
    );
    d.wait_js("the screen live after the handback", &format!("const v = {VIEW}, c = v.canvas, p = c.getContext('2d').getImageData(Math.floor(c.width / 2), Math.floor(c.height / 2), 1, 1).data; return v.el.dataset.state === 'connected' && p[0] === 0x2f && p[1] === 0x9e && p[2] === 0x44"), Duration::from_secs(30));
    // And on the X display: what the person sees (the webview paints a moment later).
    let centre = d.js(&format!("const r = {VIEW}.canvas.getBoundingClientRect(); return [Math.round(r.left + r.width / 2), Math.round(r.top + r.height / 2)]"));
    let (cx, cy) = (centre[0].as_i64().unwrap(), centre[1].as_i64().unwrap());
    wait("the handed-back screen painted", || pixel(&screenshot("19-resumed-after-handback.png"), cx, cy) == "47,158,68");

    // Stop during a pause ends the run; the person keeps the screen until they release it.
    let engine = side.engine.clone();
    let run = side.rt.spawn(async move { engine.run_task(&engine.bot_ref("worker").await.unwrap().id, "wait a little").await });
    wait("the second run's command", || side.shell_running("worker"));
    pause_offered(&d, &side);
    d.click("#control-button");
    open_gate(&side, &d);
    d.wait_js("control", &format!("return {VIEW}?.el.dataset.control === 'true'"), Duration::from_secs(60));
    d.click("#stop-bot");
    let stopped = side.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), run).await }).expect("the run ended").unwrap().unwrap();
    assert_eq!(stopped.status, RunStatus::Cancelled, "{stopped:?}");
    assert_eq!(server.requests().len(), 3, "no model call after the stop");
    d.wait_js(
        "release offered, no stop",
        "return document.querySelector('#control-button')?.dataset.control === 'release' && !document.querySelector('#stop-bot')",
        Duration::from_secs(20),
    );
    d.click("#control-button");
    d.wait_js(
        "idle, view only",
        &format!("return document.querySelector('.bot.selected')?.dataset.status === 'idle' && {VIEW}?.el.dataset.control === 'false'"),
        Duration::from_secs(20),
    );

    // An MCP client drives the bot (the session `botdesk mcp` opens for it, here from the engine
    // beside the app): the sidebar and the header say who, until the session lets go.
    let session =
        side.rt.block_on(async { side.engine.open_client_session(&side.engine.bot_ref("worker").await.unwrap().id, "MCP: claude-code").await }).unwrap();
    let out = side.rt.block_on(session.call("shell", json!({"command": "echo driven from outside"}), &Default::default()));
    assert!(!out.is_error && out.text.contains("driven from outside"), "{}", out.text);
    d.wait_js(
        "the driver in the sidebar and the header",
        "return document.querySelector('.bot.selected .bot-sub')?.textContent === 'Driven by MCP: claude-code' && document.querySelector('#bot-status')?.textContent === 'Driven by MCP: claude-code'",
        Duration::from_secs(20),
    );
    screenshot("20-driven-over-mcp.png");
    side.rt.block_on(session.close());
    d.wait_js("idle again", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(20));
}

/// What a run's command in this test does: wait until [`open_gate`] lets it end, or 3 minutes
/// (so a failed test never leaves a run waiting for good).
const GATE: &str = "i=0; until [ -e gate ] || [ $i -ge 1800 ]; do sleep 0.1; i=$((i+1)); done; rm -f gate";

/// Once the app shows the pause asked for, lets the run's command end (the run then pauses).
fn open_gate(side: &Side, d: &Driver) {
    d.wait_js("the pause asked for", "return document.querySelector('.bot.selected')?.dataset.status === 'pausing'", Duration::from_secs(60));
    assert_eq!(side.sh("worker", "touch gate").0, 0);
}

/// Waits until the app offers "Pause and take control". A hang guard: the app learns of another
/// process's run from its once-a-second status check, which shares the machine with everything
/// else. On giving up it says what the app showed.
fn pause_offered(d: &Driver, side: &Side) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.js("return document.querySelector('#control-button')?.dataset.control ?? 'none'") != "pause" {
        let shown = d.js(
            "return (document.querySelector('#control-button')?.dataset.control ?? 'none') + ' / ' + (document.querySelector('.bot-list')?.textContent ?? '') + ' / bots-changed: ' + window.__botdesk.botsChanged",
        );
        if Instant::now() > deadline {
            let here = side.rt.block_on(side.engine.bot_rows()).map(|rows| rows.iter().map(|r| format!("{} {:?}", r.bot.name, r.state)).collect::<Vec<_>>());
            panic!("pause was not offered during the run within 60 s; the app showed: {shown}; this process reads: {here:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! The app end to end, under Xvfb, driven through WebKitWebDriver against the real
//! Docker engine: create a bot, open its desktop, see its real screen in the tab, take control,
//! type into an xterm on the bot's display and read it back through exec, release (view-only
//! again, typing goes nowhere), and a run holding the bot offers "Pause and take control" beside
//! Stop. Screenshots of every step land in target/e2e/.

mod webdriver;

use botdesk_engine::*;
use std::time::Duration;
use webdriver::*;

/// The engine beside the app, on the same data directory (as the CLI would be).
struct Side {
    rt: tokio::runtime::Runtime,
    engine: Engine,
}

impl Side {
    fn sh(&self, bot: &str, cmd: &str) -> (i32, String) {
        self.rt.block_on(self.engine.shell(&self.rt.block_on(self.engine.bot_ref(bot)).unwrap(), cmd)).unwrap()
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.rt.block_on(async {
            for c in self.engine.list_computers().await.unwrap_or_default() {
                let _ = self.engine.destroy_computer(&c.id).await;
            }
        });
    }
}

const VIEWER: &str = "document.querySelector('.viewer.interactive')";
/// The tab's viewer object (its canvas holds the screen scaled to fit; `screenW/H` is the screen).
const VIEW: &str = "window.__botdesk.viewers.find((v) => v.el.classList.contains('interactive'))";

/// JavaScript for the RGB of screen pixel (x, y) as the tab's canvas holds it.
fn canvas_rgb_js(x: u32, y: u32) -> String {
    format!("const v = {VIEW}, c = v.canvas; const p = c.getContext('2d').getImageData(Math.floor({x} * c.width / v.screenW), Math.floor({y} * c.height / v.screenH), 1, 1).data;")
}

/// The colour of framebuffer pixel (x, y) as the tab's canvas holds it.
fn canvas_pixel(d: &Driver, x: u32, y: u32) -> String {
    d.js(&format!("{} return p[0] + ',' + p[1] + ',' + p[2];", canvas_rgb_js(x, y))).as_str().unwrap().to_string()
}

/// Where framebuffer pixel (x, y) is on the X display (the window sits at 0,0 without a window manager).
fn screen_point(d: &Driver, x: u32, y: u32) -> (i64, i64) {
    let v = d.js(&format!(
        "const v = {VIEW}, r = v.canvas.getBoundingClientRect(); \
         return [Math.round(r.left + ({x} + 0.5) * r.width / v.screenW), Math.round(r.top + ({y} + 0.5) * r.height / v.screenH)];"
    ));
    (v[0].as_i64().unwrap(), v[1].as_i64().unwrap())
}

#[test]
fn a_bots_screen_in_its_tab_with_take_control_and_release() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    // A bot is made with a model (the form offers none without one); this one is never called.
    let local = NewModel {
        id: "local".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "llava".into(),
        base_url: Some("http://127.0.0.1:9/v1".into()),
        coordinates: None,
    };
    rt.block_on(engine.add_model(local, None)).unwrap();
    let side = Side { rt, engine };
    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap())]);
    d.find(".bot-list");

    // Create a bot in the UI.
    d.click("#new-bot");
    d.wait_js("the model in the form", "return !document.querySelector('#new-bot-form button[type=submit]').disabled", Duration::from_secs(10));
    d.type_into("#new-bot-name", "tester");
    d.click("#new-bot-form button[type=submit]");
    d.wait_js(
        "the new bot in the sidebar",
        "return [...document.querySelectorAll('.bot .bot-name')].some(e => e.textContent === 'tester')",
        Duration::from_secs(20),
    );
    assert_eq!(side.rt.block_on(side.engine.list_bots()).unwrap()[0].name, "tester", "the engine has it");
    screenshot("02-bot-created.png");

    // Open its desktop: the tab connects view-only and shows the real screen.
    d.click("#open-desktop");
    d.wait_js("the screen connected", &format!("return {VIEWER}?.dataset.state === 'connected'"), Duration::from_secs(90));
    assert_eq!(d.text("#screen-mode"), "View only");
    let display = side.rt.block_on(side.engine.open_desktop(&side.rt.block_on(side.engine.bot_ref("tester")).unwrap())).unwrap().slot;
    // A known pattern on the bot's display: the root in one colour, an xterm in another.
    let (code, out) = side.sh("tester", &format!("DISPLAY=:{display} xsetroot -solid '#13579b' && (DISPLAY=:{display} setsid xterm -T pattern -bg '#f0a020' -geometry 40x12+800+450 >/dev/null 2>&1 &) && sleep 1"));
    assert_eq!(code, 0, "{out}");
    d.wait_js(
        "the root colour in the tab",
        &format!("{} return p[0] === 0x13 && p[1] === 0x57 && p[2] === 0x9b", canvas_rgb_js(300, 300)),
        Duration::from_secs(15),
    );
    d.wait_js(
        "the xterm colour in the tab",
        &format!("{} return p[0] === 0xf0 && p[1] === 0xa0 && p[2] === 0x20", canvas_rgb_js(900, 600)),
        Duration::from_secs(15),
    );
    // Scale to fit happens in the app: the canvas holds no more pixels than the tab shows.
    let sizes =
        d.js(&format!("const v = {VIEW}, r = v.canvas.getBoundingClientRect(); return [v.canvas.width, Math.round(r.width * devicePixelRatio), v.screenW];"));
    assert_eq!(sizes[0], sizes[1], "canvas pixels = on-screen pixels: {sizes}");
    assert_eq!(sizes[2], 1280);
    assert_eq!(canvas_pixel(&d, 300, 300), "19,87,155");
    // And on the real screen: the pixels the person sees.
    std::thread::sleep(Duration::from_millis(300));
    let shot = screenshot("03-desktop-view-only.png");
    let (sx, sy) = screen_point(&d, 300, 300);
    assert_eq!(pixel(&shot, sx, sy), "19,87,155", "the root colour is on the app's screen at ({sx},{sy})");
    let (sx, sy) = screen_point(&d, 900, 600);
    assert_eq!(pixel(&shot, sx, sy), "240,160,32", "the xterm colour is on the app's screen");

    // An xterm that writes what it receives to a file in the bot's folder.
    let (code, _) = side.sh(
        "tester",
        &format!("(DISPLAY=:{display} setsid xterm -u8 -T typing -geometry 60x8+100+100 -e sh -c 'cat > typed.txt' >/dev/null 2>&1 &) ; sleep 1"),
    );
    assert_eq!(code, 0);
    let typing_at = |d: &Driver| screen_point(d, 300, 150);

    // View-only: clicks and keys go nowhere.
    let (x, y) = typing_at(&d);
    xdotool(&["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
    xdotool(&["type", "--delay", "30", "nope"]);
    xdotool(&["key", "Return"]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(side.sh("tester", "cat typed.txt").1, "", "view-only input reached the bot");

    // Take control: the tab says so, and typing reaches the xterm on the bot's display.
    d.click("#control-button");
    d.wait_js(
        "control in the tab",
        &format!("return {VIEWER}?.dataset.control === 'true' && document.querySelector('#screen-mode')?.textContent === 'You have control'"),
        Duration::from_secs(20),
    );
    let (x, y) = typing_at(&d);
    xdotool(&["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    xdotool(&["type", "--delay", "40", "hello botdesk é世界"]);
    xdotool(&["key", "Return"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, typed) = side.sh("tester", "cat typed.txt");
        if typed == "hello botdesk é世界\n" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "typed text never arrived: {typed:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    screenshot("04-took-control-and-typed.png");

    // The person's keyboard layout is theirs: with a German, then a French layout on their side,
    // what they type (AltGr included) arrives as those characters.
    let mut want = String::from("hello botdesk é世界\n");
    for (layout, text) in [("de", "ß@€é"), ("fr", "é@€ç")] {
        assert!(std::process::Command::new("setxkbmap").arg(layout).status().unwrap().success(), "setxkbmap {layout}");
        xdotool(&["type", "--delay", "60", text]);
        xdotool(&["key", "Return"]);
        want.push_str(text);
        want.push('\n');
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let (_, typed) = side.sh("tester", "cat typed.txt");
            if typed == want {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "with the {layout} layout, typed {typed:?}, not {want:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert!(std::process::Command::new("setxkbmap").arg("us").status().unwrap().success());

    // The clipboard both ways, non-Latin text whole: the person's (what "Send clipboard" and
    // Ctrl+V send) reaches the bot's, and what the bot copies reaches the person's.
    d.js(&format!("{VIEW}.sendClipboard('from the person: ¿qué? 世界 €'); return true"));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while side.rt.block_on(side.engine.clipboard_text(&side.rt.block_on(side.engine.bot_ref("tester")).unwrap())).unwrap() != "from the person: ¿qué? 世界 €"
    {
        assert!(std::time::Instant::now() < deadline, "the person's clipboard never reached the bot");
        std::thread::sleep(Duration::from_millis(200));
    }
    // What the bot copies on its own waits for the person: the bar's button says so, and their
    // clipboard is untouched until they press it.
    side.rt.block_on(side.engine.set_clipboard(&side.rt.block_on(side.engine.bot_ref("tester")).unwrap(), "from the bot: Grüße 你好")).unwrap();
    d.wait_js("the bot's clipboard waiting", "return !!document.querySelector('#copy-bot-clipboard.waiting')", Duration::from_secs(15));
    assert_eq!(d.js("return window.__botdesk.clipboard.last"), serde_json::Value::Null, "the bot's clipboard went to the person's unasked");
    screenshot("04c-bot-clipboard-waiting.png");
    d.click("#copy-bot-clipboard");
    d.wait_js("the bot's clipboard on the person's", "return window.__botdesk.clipboard.last === 'from the bot: Grüße 你好'", Duration::from_secs(15));
    // On the desktop's own clipboard, as another program reads it, and nothing refused.
    let x_clipboard = || {
        let out = std::process::Command::new("xclip").args(["-o", "-selection", "clipboard"]).output().expect("xclip runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(x_clipboard(), "from the bot: Grüße 你好");
    assert_eq!(d.js("return document.querySelector('#control-notice')?.textContent ?? ''"), "", "a notice after the copy");
    // Ctrl+X (or Ctrl+C) on the bot's screen asks at once (the xterm takes ^X as a character).
    let (x, y) = typing_at(&d);
    xdotool(&["mousemove", &x.to_string(), &y.to_string(), "click", "1", "key", "ctrl+x"]);
    side.rt.block_on(side.engine.set_clipboard(&side.rt.block_on(side.engine.bot_ref("tester")).unwrap(), "cut by the person: ¿sí?")).unwrap();
    d.wait_js("a cut on the person's clipboard", "return window.__botdesk.clipboard.last === 'cut by the person: ¿sí?'", Duration::from_secs(15));
    assert_eq!(x_clipboard(), "cut by the person: ¿sí?");

    // In control, the Terminal pane offers a real shell on the bot's computer, in its folder.
    d.click(".dock-button[data-pane=terminal]");
    d.click("[data-term-tab=shell]");
    d.wait_js("a shell prompt", "return (document.querySelector('#shell-host .xterm-rows')?.textContent ?? '').includes('$')", Duration::from_secs(20));
    let host = d.js("const r = document.querySelector('#shell-host').getBoundingClientRect(); return [Math.round(r.left + 40), Math.round(r.top + 20)]");
    let (hx, hy) = (host[0].as_i64().unwrap(), host[1].as_i64().unwrap());
    xdotool(&["mousemove", &hx.to_string(), &hy.to_string(), "click", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    xdotool(&["type", "--delay", "20", "echo pty-$((6*7)) in $(basename $PWD); sleep 4321 &"]);
    xdotool(&["key", "Return"]);
    let shell_text = || d.js("return document.querySelector('#shell-host .xterm-rows')?.textContent ?? 'no shell'").as_str().unwrap_or("").to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !shell_text().contains("pty-42 in") {
        if std::time::Instant::now() > deadline {
            screenshot("04b-shell-failed.png");
            panic!("the shell shows: {:?}", shell_text());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // (The echo can arrive a moment before bash has started the background job.)
    let running = || side.sh("tester", "pgrep -fc 'slee[p] 4321'").1.trim().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running() != "1" {
        assert!(std::time::Instant::now() < deadline, "the shell started it on the bot's computer: {} running", running());
        std::thread::sleep(Duration::from_millis(100));
    }
    screenshot("04b-shell-in-control.png");

    d.wait_js("the sidebar says so", "return document.querySelector('.bot.selected')?.dataset.status === 'you_have_control'", Duration::from_secs(10));

    // Release: view-only again; typing goes nowhere.
    d.click("#control-button");
    d.wait_js("view-only again", &format!("return {VIEWER}?.dataset.control === 'false' && {VIEWER}?.dataset.state === 'connected' && document.querySelector('#screen-mode')?.textContent === 'View only'"), Duration::from_secs(20));
    assert!(side.rt.block_on(async { side.engine.control_of(&side.engine.bot_ref("tester").await.unwrap().id).await }).unwrap().is_none(), "the lease is gone");
    // Release killed the shell and what it started.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while side.sh("tester", "pgrep -fc 'slee[p] 4321'").1.trim() != "0" {
        assert!(std::time::Instant::now() < deadline, "the shell's processes outlived the release");
        std::thread::sleep(Duration::from_millis(100));
    }
    d.wait_js("the shell tab disabled", "return document.querySelector('[data-term-tab=shell]')?.disabled === true", Duration::from_secs(10));
    xdotool(&["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
    xdotool(&["type", "--delay", "30", "after"]);
    xdotool(&["key", "Return"]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(side.sh("tester", "cat typed.txt").1, want, "input after release reached the bot");
    screenshot("05-released-view-only.png");

    // A run holds the bot: the header offers to pause it and take control (tested with a real
    // run in take.rs), and Stop, which ends the run.
    let run = side.rt.block_on(async {
        let run = side.engine.create_run(&side.engine.bot_ref("tester").await.unwrap().id, "a task").await.unwrap();
        side.engine.lease_run(&run.id).await.unwrap();
        run
    });
    d.wait_js("the sidebar shows it running", "return document.querySelector('.bot.selected')?.dataset.status === 'running'", Duration::from_secs(10));
    d.wait_js(
        "pause offered",
        "const b = document.querySelector('#control-button'); return b?.dataset.control === 'pause' && b.textContent === 'Pause and take control'",
        Duration::from_secs(10),
    );
    assert_eq!(d.js(&format!("return {VIEWER}?.dataset.control")), "false", "still view-only");
    screenshot("06-running-pause-offered.png");
    d.click("#stop-bot");
    d.wait_js("stopped", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(20));
    assert_eq!(side.rt.block_on(side.engine.run_status(&run.id)).unwrap().status, RunStatus::Cancelled);
}

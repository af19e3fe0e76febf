//! The Browser pane in the real app under Xvfb, against the bot's own Chromium in its real
//! computer: the page the bot navigated to (address, title, tabs, and its text as the bot's
//! snapshot sees it), driven by the person only while they hold control (an address, back,
//! forward, reload), and seen by the bot afterwards. Screenshot in target/e2e/20-browser-pane.png.

mod webdriver;

use botdesk_engine::*;
use std::time::Duration;
use webdriver::*;

struct Side {
    rt: tokio::runtime::Runtime,
    engine: Engine,
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

const TITLE: &str = "return document.querySelector('#browser-title')?.textContent";

#[test]
fn the_browser_pane_shows_the_bots_page_and_the_person_drives_it_in_control() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let side = Side { rt, engine };
    side.rt.block_on(side.engine.create_bot("surfer", ComputerScope::Team, None, "")).unwrap();
    // Two pages served inside the computer; the bot opens the first in its own browser.
    let (code, out) = side
        .rt
        .block_on(side.engine.shell(
            &side.rt.block_on(side.engine.bot_ref("surfer")).unwrap(),
            "printf '<title>Page one</title><p>first page words</p><a href=two.html>next</a>' > one.html && \
             printf '<title>Page two</title><p>second page words</p>' > two.html && \
             (setsid python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null &) && sleep 1",
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let surfer = side.rt.block_on(side.engine.bot_ref("surfer")).unwrap();
    let page = side.rt.block_on(side.engine.browser_navigate(&surfer, "http://127.0.0.1:8765/one.html")).unwrap();
    assert_eq!(page["title"], "Page one");

    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap())]);
    d.click(".bot");
    d.click(".dock-button[data-pane=browser]");
    d.wait_js("the bot's page in the pane", &format!("{TITLE} === 'Page one'"), Duration::from_secs(30));
    let shown = d.js("return [document.querySelector('#browser-address').value, document.querySelector('#browser-text').textContent, document.querySelectorAll('#browser-tabs li.current').length, document.querySelector('#browser-address').disabled, document.querySelector('#browser-back').disabled]");
    assert_eq!(shown, serde_json::json!(["http://127.0.0.1:8765/one.html", "first page words\n\nnext", 1, true, true]), "view only: shown, not driven");

    // In control, the person drives it: an address, back, reload.
    d.click("#control-button");
    d.wait_js("the pane drivable", "return document.querySelector('#browser-address')?.disabled === false", Duration::from_secs(20));
    // Typed (an input event, as keys make), so a redraw of the pane meanwhile keeps it.
    d.js("const a = document.querySelector('#browser-address'); a.value = 'http://127.0.0.1:8765/two.html'; a.dispatchEvent(new Event('input')); return true");
    // A redraw of the pane (a new look at the page) keeps what the person typed.
    d.click("#browser-look");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        d.js("return document.querySelector('#browser-address').value"),
        serde_json::json!("http://127.0.0.1:8765/two.html"),
        "the typed address survived the redraw"
    );
    d.click("#browser-go");
    // (A hang guard; if it gives up, it says what the pane showed.)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while d.js(TITLE) != serde_json::json!("Page two") {
        let pane = d.js("return [document.querySelector('#browser-title')?.textContent, document.querySelector('#browser-address')?.value, document.querySelector('#browser-error')?.textContent, document.querySelector('#browser-pane')?.textContent?.slice(0, 300)]");
        assert!(std::time::Instant::now() < deadline, "the second page never showed; the pane: {pane}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(side.rt.block_on(side.engine.browser_snapshot(&surfer)).unwrap()["title"], "Page two", "the bot sees where the person went");
    d.click("#browser-back");
    d.wait_js(
        "back to the first page",
        &format!("{TITLE} === 'Page one' && document.querySelector('#browser-address').value.endsWith('/one.html')"),
        Duration::from_secs(30),
    );
    d.click("#browser-forward");
    d.wait_js("forward to the second page", &format!("{TITLE} === 'Page two'"), Duration::from_secs(30));
    d.click("#browser-back");
    d.wait_js("back again", &format!("{TITLE} === 'Page one'"), Duration::from_secs(30));
    d.click("#browser-reload");
    d.wait_js(
        "reloaded",
        &format!("{TITLE} === 'Page one' && !document.querySelector('#browser-error') && document.querySelector('#browser-reload')?.disabled === false"),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("20-browser-pane.png");

    // Released: view only again, and the engine refuses driving without control.
    d.click("#control-button");
    d.wait_js("view only again", "return document.querySelector('#browser-address')?.disabled === true", Duration::from_secs(20));
    let refused = side.rt.block_on(side.engine.browser_go(&surfer, BrowserGo::Reload)).unwrap_err();
    assert_eq!(refused.code, ErrorCode::Stale, "{refused:?}");
}

//! The first hour, as a new person goes through it in the real app under Xvfb: an empty data
//! directory; the first page's checklist (Docker, the computer image, a model, the first bot);
//! a model added right there and tested, first with a key the provider refuses (its error shown),
//! then with a good one (its answer shown); the first bot made from the checklist and given one of
//! its chat's example tasks, which runs on its real computer against the scripted model. Then the
//! person quits: the app says what keeps running, and once it is gone the computer is suspended by
//! the watcher it left, within the idle time plus a minute. Screenshots 30–34 in target/e2e/.

mod webdriver;

use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_engine::*;
use serde_json::json;
use std::time::{Duration, Instant};
use webdriver::*;

const GOOD: &str = "sk-ant-first-hour-good-key";
/// WebDriver's keys.
const ENTER: &str = "\u{E007}";
const ARROW_RIGHT: &str = "\u{E014}";

#[test]
fn a_new_person_goes_from_an_empty_app_to_a_task_done_and_quits() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    // Idle computers are suspended after half a minute (the least the setting takes).
    std::fs::write(data.path().join("settings.json"), json!({"spare_computer": false, "idle_minutes": 0.5}).to_string()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key_is = |want: &'static str| {
        move |s: &botdesk_agent::scripted::Seen| {
            if s.headers.get("x-api-key").map(String::as_str) == Some(want) {
                Ok(())
            } else {
                Err(format!("key {:?}", s.headers.get("x-api-key")))
            }
        }
    };
    let server = rt.block_on(ScriptedServer::start(vec![
        // The Test of the first model: the provider refuses its key, as Anthropic does.
        Step::reply(Reply::Status {
            status: 401,
            retry_after: None,
            body: r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#.into(),
        }),
        // The Test of the second: answered.
        Step::check(key_is(GOOD), Reply::text("Hello! I am ready.")),
        // The example task.
        Step::check(key_is(GOOD), Reply::call("shell", json!({"command": "ls -la > report.md && echo written"}))),
        Step::check(key_is(GOOD), Reply::text("I wrote a short report of your folder to report.md.")),
    ]));
    let url = server.base_url(botdesk_agent::Wire::Anthropic);

    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", dir)]);
    // The checklist, with the state of each step.
    d.wait_js("the checklist", "return document.querySelector('#main h1')?.textContent === 'Welcome to Botdesk'", Duration::from_secs(60));
    d.wait_js(
        "Docker and the image checked",
        "return ['welcome-docker', 'welcome-image'].every(id => document.getElementById(id)?.classList.contains('done'))",
        Duration::from_secs(60),
    );
    d.wait_js(
        "the model step to do, with its form",
        "return document.getElementById('welcome-model')?.classList.contains('todo') && !!document.getElementById('welcome-model-id')",
        Duration::from_secs(20),
    );
    d.click("#new-bot");
    d.wait_js(
        "the new-bot form refuses without a model",
        "return !document.getElementById('new-bot-form').hidden && !document.getElementById('new-bot-no-model').hidden && document.querySelector('#new-bot-form button[type=submit]').disabled",
        Duration::from_secs(10),
    );
    d.click("#new-bot-cancel");
    screenshot("30-first-run-checklist.png");

    // A model with a key the provider refuses: Test shows the provider's word and what to do.
    let add = |id: &str, key: &str| {
        d.js("for (const f of ['welcome-model-id', 'welcome-model-name', 'welcome-model-url', 'welcome-model-key']) document.getElementById(f).value = ''");
        d.type_into("#welcome-model-id", id);
        d.type_into("#welcome-model-name", "claude-sonnet-4-5");
        d.type_into("#welcome-model-url", &url);
        d.type_into("#welcome-model-key", key);
        d.click("#welcome-models .model-form button[type=submit]");
        d.wait_js("the model listed", &format!("return !!document.querySelector('#welcome-models [data-model=\"{id}\"]')"), Duration::from_secs(20));
    };
    // Test: what it shows once it is done (`ok` or `error`).
    let test = |id: &str, outcome: &str| {
        d.click(&format!("#welcome-models [data-test-model={id}]"));
        let shown = format!("#welcome-models [data-model-check={id}]");
        d.wait_js(
            &format!("{id}'s test: {outcome}"),
            &format!("return document.querySelector('{shown}')?.classList.contains('{outcome}')"),
            Duration::from_secs(60),
        );
        d.text(&shown)
    };
    add("first", "sk-ant-mistyped");
    let said = test("first", "error");
    assert!(said.contains("invalid x-api-key") && said.to_lowercase().contains("key"), "the refusal shown: {said}");
    d.wait_js("the model step still to do", "return document.getElementById('welcome-model')?.classList.contains('todo')", Duration::from_secs(10));
    screenshot("31-model-test-bad-key.png");

    // The good key: its answer, with how long it took.
    add("claude", GOOD);
    let said = test("claude", "ok");
    assert!(said.starts_with("Answered in ") && said.contains("Hello! I am ready."), "the answer shown: {said}");
    d.js("[...document.querySelectorAll('#welcome-models [data-model=first] button')].find(b => b.textContent === 'Remove').click()");
    d.wait_js("the first model removed", "return !document.querySelector('#welcome-models [data-model=first]')", Duration::from_secs(10));
    d.wait_js("the model step done", "return document.getElementById('welcome-model')?.classList.contains('done')", Duration::from_secs(10));
    screenshot("32-model-test-answered.png");

    // The first bot, from the checklist; its chat offers tasks to start from.
    d.click("#welcome-new-bot");
    d.wait_js("the model offered", "return [...document.querySelectorAll('#new-bot-model option')].some(o => o.value === 'claude')", Duration::from_secs(10));
    d.type_into("#new-bot-name", "helper");
    d.click("#new-bot-form button[type=submit]");
    d.wait_js("the bot's example tasks", "return document.querySelectorAll('#example-tasks .example').length === 3", Duration::from_secs(30));
    d.js("[...document.querySelectorAll('#example-tasks .example')].find(b => b.textContent.includes('report.md')).click()");
    d.wait_js("the task in the composer", "return document.getElementById('task-input').value.includes('report.md')", Duration::from_secs(5));
    // Sent with the keyboard: Enter in the composer.
    d.type_into("#task-input", ENTER);
    d.wait_js(
        "the task done",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent.includes('wrote a short report'))",
        Duration::from_secs(180),
    );
    assert_eq!(server.failures(), Vec::<String>::new(), "the scripted model refused a request");
    assert_eq!(server.remaining(), 0);
    screenshot("33-first-task-done.png");

    // Keyboard and screen readers. Each control has a role and a name in WebKit's accessibility
    // tree (what a screen reader announces).
    for (css, role, name) in [
        ("#new-bot", "button", "New bot"),
        (".bot[data-bot]", "button", "helper: "),
        ("#task-input", "textbox", "Task"),
        ("#send-task", "button", "Send"),
        ("#control-button", "button", "Take control"),
        (".tab[data-tab=overview]", "tab", "Overview"),
        ("#chat-edge", "separator", "Chat width"),
    ] {
        let (r, n) = d.accessible(css);
        assert!(r == role && n.starts_with(name), "{css}: role {r:?}, name {n:?}; want {role:?}, {name:?}…");
    }
    // Every action by keyboard: a new bot's form opens and closes, control is taken (its screen
    // opens in a tab) and released with Enter, the screen's tabs switch with Enter and the
    // arrows, the chat's edge moves with the arrows (and is remembered); where the keyboard is,
    // an outline shows.
    d.type_into("#new-bot", ENTER);
    d.wait_js("the new-bot form open", "return !document.getElementById('new-bot-form').hidden", Duration::from_secs(5));
    d.type_into("#new-bot-cancel", ENTER);
    d.wait_js("the new-bot form closed", "return document.getElementById('new-bot-form').hidden", Duration::from_secs(5));
    d.type_into("#control-button", ENTER);
    d.wait_js("control taken", "return document.getElementById('control-button')?.dataset.control === 'release'", Duration::from_secs(30));
    d.type_into("#control-button", ENTER);
    d.wait_js("control released", "return document.getElementById('control-button')?.dataset.control === 'take'", Duration::from_secs(30));
    d.type_into(".tab[data-tab=overview]", ENTER);
    d.wait_js("the overview tab", "return document.querySelector('.tab.active')?.dataset.tab === 'overview'", Duration::from_secs(5));
    d.type_into(".tab[data-tab=overview]", ARROW_RIGHT);
    d.wait_js(
        "the bot's screen tab, focused",
        "const t = document.querySelector('.tab.active'); return t && t.dataset.tab !== 'overview' && document.activeElement === t",
        Duration::from_secs(10),
    );
    d.type_into("#chat-edge", &format!("{ARROW_RIGHT}{ARROW_RIGHT}"));
    d.wait_js(
        "a wider chat",
        "return getComputedStyle(document.getElementById('app')).getPropertyValue('--chat-width').trim() === '340px'",
        Duration::from_secs(5),
    );
    let outline = d.js(&format!(
        "const e = document.activeElement; return [e.id, getComputedStyle(e).outlineStyle, JSON.parse(localStorage.getItem('botdesk.layout:' + {})).chat]",
        json!(dir)
    ));
    assert_eq!(outline, json!(["chat-edge", "solid", 340]), "the focused edge shows an outline and its width is remembered");
    screenshot("33b-keyboard-focus.png");

    // Quitting: Ctrl+Q on the window says what keeps running.
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let computer = rt.block_on(engine.list_computers()).unwrap().into_iter().next().expect("the bot's computer");
    assert_eq!(computer.state, botdesk_core::ComputerState::Running);
    let window = std::process::Command::new("xdotool").args(["search", "--name", "^Botdesk$"]).output().unwrap();
    let window = String::from_utf8_lossy(&window.stdout).lines().next().expect("the app's window").to_string();
    xdotool(&["windowfocus", "--sync", &window, "key", "ctrl+q"]);
    d.wait_js("the quit dialog", "return !!document.querySelector('#quit-list li strong')", Duration::from_secs(20));
    assert_eq!(d.text("#quit-list li strong"), "helper");
    screenshot("34-quit-dialog.png");
    d.click("#quit-leave");

    // Gone; the computer keeps running until its idle time has passed, then the watcher the app
    // left suspends it (a hang guard of the promise: idle time plus a minute).
    let quit = Instant::now();
    let deadline = quit + Duration::from_secs(30 + 60);
    while std::process::Command::new("pgrep").args(["-f", env!("CARGO_BIN_EXE_botdesk-app")]).status().is_ok_and(|s| s.success()) {
        assert!(Instant::now() < deadline, "the app did not quit");
        std::thread::sleep(Duration::from_millis(200));
    }
    loop {
        let state = rt.block_on(engine.list_computers()).unwrap().into_iter().find(|c| c.id == computer.id).map(|c| c.state);
        if state == Some(botdesk_core::ComputerState::Suspended) {
            break;
        }
        assert!(Instant::now() < deadline, "the computer was not suspended within its idle time plus a minute after the app quit: {state:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(data.path().join("idle-watch.log")).unwrap_or_default();
    // With nothing left running, the watcher ends.
    while std::process::Command::new("pgrep").args(["-f", &format!("{dir} computer idle-watch")]).status().is_ok_and(|s| s.success()) {
        assert!(Instant::now() < deadline + Duration::from_secs(30), "the idle watcher did not end:\n{log}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(d);
    rt.block_on(engine.destroy_computer(&computer.id)).unwrap();
}

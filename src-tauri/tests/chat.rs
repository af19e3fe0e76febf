//! The chat in the real app under Xvfb: a bot created with a model in the UI, a task sent from
//! the composer, the scripted model (OpenAI-compatible wire format, the real client) answering
//! with tool calls on the bot's real computer; the chat shows the streamed reply, compact tool
//! calls with their results and a screenshot thumbnail. Screenshot in target/e2e/07-chat.png.

mod webdriver;

use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_engine::*;
use serde_json::json;
use std::time::Duration;
use webdriver::*;

#[test]
fn a_task_sent_in_the_chat_runs_and_its_tool_calls_show_up() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::check(
            |s| (s.body["messages"].to_string().contains("Check the machine and take notes")).then_some(()).ok_or("the task is not in the request".into()),
            Reply::Turn { text: "Let me look at my screen first.".into(), calls: vec![("computer_observe".into(), "{}".into())] },
        ),
        Step::reply(Reply::call("shell", json!({"command": "echo hello from the chat && uname -s"}))),
        Step::reply(Reply::call("write_file", json!({"path": "notes.md", "content": "# Notes\nThe machine runs Linux.\n"}))),
        Step::reply(Reply::text("All done: the machine runs Linux and my notes are in notes.md.")),
    ]));
    let model_id = format!("chat-e2e-{}", std::process::id());
    let new = NewModel {
        id: model_id.clone(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    rt.block_on(engine.add_model(new, None)).unwrap();
    // The desktop's notification service, as the app finds it on the session bus.
    let notifications = Notifications::serve();

    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap())]);
    d.find(".bot-list");
    d.click("#new-bot");
    d.wait_js(
        "the model in the new-bot form",
        &format!("return [...document.querySelectorAll('#new-bot-model option')].some(o => o.value === '{model_id}')"),
        Duration::from_secs(10),
    );
    d.type_into("#new-bot-name", "writer");
    d.click("#new-bot-form button[type=submit]");
    d.wait_js(
        "the bot selected with its model",
        &format!("return document.querySelector('.chat h2')?.textContent === 'Chat · {model_id}'"),
        Duration::from_secs(20),
    );

    // The Terminal pane is open while the bot works: its command shows up live.
    d.click(".dock-button[data-pane=terminal]");
    d.wait_js("the empty terminal", "return document.querySelector('#terminal-pane')?.textContent.includes('Nothing yet')", Duration::from_secs(10));
    d.type_into("#task-input", "Check the machine and take notes");
    d.click("#send-task");
    d.wait_js(
        "the final reply in the chat",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent.startsWith('All done'))",
        Duration::from_secs(120),
    );
    // What the run cost, once, under its last message (the scripted server reports usage).
    d.wait_js(
        "the run's tokens under its last message",
        "const u = [...document.querySelectorAll('.msg .usage')]; return u.length === 1 && /^[0-9,]+ in( \\([0-9,]+ from cache\\))?, [0-9,]+ out tokens$/.test(u[0].textContent) && u[0].closest('.msg').querySelector('.text')?.textContent.startsWith('All done')",
        Duration::from_secs(20),
    );
    // And what all its runs cost, in the chat's header.
    d.wait_js(
        "the bot's runs' tokens in the chat header",
        "return /· all runs [0-9.]+k? in, [0-9.]+k? out$/.test(document.querySelector('.chat h2 .spent')?.textContent ?? '')",
        Duration::from_secs(20),
    );
    d.wait_js(
        "the screenshot thumbnail",
        "const i = document.querySelector('img.thumb'); return !!i && i.complete && i.naturalWidth === 1280",
        Duration::from_secs(20),
    );
    assert_eq!(server.failures(), Vec::<String>::new());
    // The task, the replies and three compact tool calls, all done.
    assert_eq!(d.text(".msg.user .text"), "Check the machine and take notes");
    let calls = d.js("return [...document.querySelectorAll('.call')].map(c => c.querySelector('code').textContent + ':' + c.className)");
    assert_eq!(calls, json!(["computer_observe:call done", "shell:call done", "write_file:call done"]));
    let shell = d.js("return document.querySelectorAll('.call')[1].querySelector('pre.result').textContent");
    assert!(shell.as_str().unwrap().contains("hello from the chat\nLinux"), "{shell}");
    // The bot's screen tab appeared when it first used a graphical tool, and shows its desktop.
    d.wait_js("the bot's screen in its tab", "return document.querySelector('.viewer.interactive')?.dataset.state === 'connected'", Duration::from_secs(30));
    d.wait_js("the bot idle again", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    // Open the shell call to show its output in the screenshot.
    d.js("document.querySelectorAll('.call')[1].open = true; return true");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("07-chat.png");
    // The run wrote one file, so its last message offers to undo that (the run-end checkpoint
    // counted what changed in the bot's folder).
    d.wait_js(
        "the offer to undo the run's file changes",
        "const r = document.querySelector('.msg .undo-run'); return !!r && r.querySelector('[data-undo-run]') && r.textContent.endsWith('1 file changed')",
        Duration::from_secs(20),
    );
    // The run's last message with what the run cost, and the bot's totals in the header.
    d.js("document.querySelector('.msg .usage').scrollIntoView(); return true");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("07b-chat-run-cost.png");
    // The Terminal pane got the command, its output and exit code live, and the file written.
    let terminal = || d.js("return document.querySelector('#terminal-pane')?.innerText ?? 'no pane'").as_str().unwrap_or("").to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(terminal().contains("notes.md") && terminal().contains("exit 0")) {
        assert!(std::time::Instant::now() < deadline, "the terminal pane shows: {}", terminal());
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = terminal();
    assert!(t.contains("echo hello from the chat && uname -s") && t.contains("hello from the chat\nLinux"), "{t}");
    screenshot("08-terminal-pane.png");
    // The Files pane previews the file the bot wrote, also with the computer stopped.
    let computer = rt.block_on(engine.bot("writer")).unwrap().computer.id;
    rt.block_on(engine.stop_computer(&computer)).unwrap();
    d.click(".dock-button[data-pane=files]");
    d.wait_js("notes.md listed", "return !!document.querySelector('.file[data-path$=\"notes.md\"]')", Duration::from_secs(10));
    // (Clicked from script: the list may re-render between finding the element and clicking it.)
    d.js("document.querySelector('.file[data-path$=\"notes.md\"]').click(); return true");
    let preview = || d.js("return document.querySelector('#files-pane')?.innerText ?? 'no pane'").as_str().unwrap_or("").to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !preview().contains("The machine runs Linux.") {
        assert!(std::time::Instant::now() < deadline, "the files pane shows: {}", preview());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.js("return document.querySelector('.preview-text').textContent"), json!("# Notes\nThe machine runs Linux.\n"));
    assert_eq!(d.js("return document.querySelector('#files-path').textContent"), json!(rt.block_on(engine.bot("writer")).unwrap().folder));
    screenshot("09-files-pane-computer-stopped.png");
    // Undo the run's file changes from its message, with the computer still stopped: notes.md
    // goes (the folder had none before the run), and the pane follows.
    d.js("document.querySelector('[data-undo-run]').click(); return true");
    d.wait_js(
        "the undo said",
        "return /^Undone: the folder is back to version [0-9]+\\. What the run left is version [0-9]+ \\(Files → History\\)\\.$/.test(document.querySelector('.msg .undone')?.textContent ?? '')",
        Duration::from_secs(20),
    );
    d.wait_js("notes.md gone from the pane", "return !document.querySelector('.file[data-path$=\"notes.md\"]')", Duration::from_secs(10));
    assert!(rt.block_on(engine.stored_read(&rt.block_on(engine.bot_ref("writer")).unwrap(), "notes.md", 1000)).is_err(), "the undo removed notes.md");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("09b-run-undone.png");
    // The pane follows what the bot writes: the computer starts again (the pane now reads it live)
    // and a file written there shows up (inotify inside the computer; the host walks nothing).
    let (code, _) = rt.block_on(engine.shell(&rt.block_on(engine.bot_ref("writer")).unwrap(), "echo 'written later' > later.txt")).unwrap();
    assert_eq!(code, 0);
    d.wait_js("the new file listed", "return !!document.querySelector('.file[data-path$=\"later.txt\"]')", Duration::from_secs(20));
    let (code, _) = rt.block_on(engine.shell(&rt.block_on(engine.bot_ref("writer")).unwrap(), "sleep 1; echo live > live.txt")).unwrap();
    assert_eq!(code, 0);
    d.wait_js("a file written while it runs listed", "return !!document.querySelector('.file[data-path$=\"live.txt\"]')", Duration::from_secs(20));
    // Move the bot to a Private computer from its header: the pane then shows its new home, where
    // its files came along (the Team home keeps its folder).
    d.js("document.querySelector('#switch-computer').click(); return true");
    d.wait_js(
        "the move reported",
        "return (document.querySelector('#switch-note')?.textContent ?? '').includes('now works on its Private computer private-writer')",
        Duration::from_secs(60),
    );
    d.wait_js(
        "the header on the Private computer",
        "return (document.querySelector('.bot-header .title p')?.textContent ?? '').startsWith('Private computer private-writer')",
        Duration::from_secs(10),
    );
    d.wait_js(
        "its files at the root of its Private home",
        "return !!document.querySelector('.file[data-path=\"live.txt\"]') && !!document.querySelector('.file[data-path=\"later.txt\"]')",
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("12-moved-to-private.png");
    let (code, out) = rt.block_on(engine.shell(&rt.block_on(engine.bot_ref("writer")).unwrap(), "ls")).unwrap();
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l == "bots") && out.lines().any(|l| l == "later.txt"), "the Private home holds the bot's work at its root: {out}");
    // Settings → Models: this model has no prices; the person gives it some, and the engine
    // costs later calls with them.
    d.click("#open-settings");
    // Settings shows the Docker hosts too: this machine's engine first.
    d.wait_js("the hosts in Settings", "return document.querySelector('#hosts li')?.dataset.host === 'local'", Duration::from_secs(10));
    // The spare computer setting shows what the file says (off here: see `webdriver::no_spare`).
    d.wait_js("the spare computer setting, off", "return document.querySelector('#set-spare')?.checked === false", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    screenshot("13b-settings-hosts.png");
    let row = format!("#models li[data-model=\"{model_id}\"]");
    d.wait_js(
        "the model in Settings without prices",
        &format!("return (document.querySelector('{row} .model-prices')?.textContent ?? '').startsWith('no prices')"),
        Duration::from_secs(10),
    );
    d.click(&format!("{row} button[data-edit-prices]"));
    for (name, value) in [("input", "3"), ("output", "15"), ("cache_read", "0.3"), ("cache_write", "3.75")] {
        d.type_into(&format!("{row} .prices-form input[name={name}]"), value);
    }
    d.click(&format!("{row} .prices-form button[type=submit]"));
    d.wait_js(
        "the prices saved",
        &format!("return (document.querySelector('{row} .model-prices')?.textContent ?? '') === '$3 in / $15 out per million tokens'"),
        Duration::from_secs(10),
    );
    assert_eq!(
        rt.block_on(engine.model_prices(&model_id)).unwrap(),
        Some(botdesk_engine::Prices { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 })
    );
    d.click(&format!("{row} button[data-edit-prices]"));
    std::thread::sleep(Duration::from_millis(300));
    screenshot("14-settings-model-prices.png");
    // Limits and coordinates, edited in the same list: the engine's next run uses them.
    d.click(&format!("{row} button[data-edit-limits]"));
    for (name, value) in [("context_window", "8192"), ("max_output", "2048")] {
        let field = format!("{row} .limits-form input[name={name}]");
        d.js(&format!("document.querySelector('{field}').value = ''; return true"));
        d.type_into(&field, value);
    }
    d.js(&format!("const s = document.querySelector('{row} .limits-form select[name=coordinates]'); s.value = '0-1000'; return true"));
    d.click(&format!("{row} .limits-form button[type=submit]"));
    d.wait_js("the limits saved", &format!("return (document.querySelector('{row} .model-limits')?.textContent ?? '') === '8,192-token window, up to 2,048 out per call' && (document.querySelector('{row} .model-about > span')?.textContent ?? '').endsWith('coordinates 0-1000')"), Duration::from_secs(10));
    assert_eq!(rt.block_on(engine.model_limits(&model_id)).unwrap(), botdesk_engine::Limits { context_window: 8192, max_output: 2048, thinking: None });
    assert_eq!(rt.block_on(engine.model(&model_id)).unwrap().coordinates, botdesk_engine::action::CoordSpace::Thousandths);
    // A window smaller than the output per call is refused with the rule, and nothing changes.
    d.click(&format!("{row} button[data-edit-limits]"));
    let field = format!("{row} .limits-form input[name=max_output]");
    d.js(&format!("document.querySelector('{field}').value = ''; return true"));
    d.type_into(&field, "9000");
    d.click(&format!("{row} .limits-form button[type=submit]"));
    d.wait_js(
        "the limits refused",
        &format!("return (document.querySelector('{row} .limits-form p.error')?.textContent ?? '').includes('output per call is less than it')"),
        Duration::from_secs(10),
    );
    assert_eq!(rt.block_on(engine.model_limits(&model_id)).unwrap().max_output, 2048);
    std::thread::sleep(Duration::from_millis(300));
    screenshot("21-settings-model-limits.png");
    d.click(&format!("{row} .limits-form button.ghost"));
    d.wait_js(
        "back to the family's defaults",
        &format!("return (document.querySelector('{row} .model-about > span')?.textContent ?? '').endsWith('coordinates pixels')"),
        Duration::from_secs(10),
    );
    assert_eq!(rt.block_on(engine.model_limits(&model_id)).unwrap(), botdesk_engine::Limits::default_for("openai-compatible", "scripted"));
    // Test: one tiny request, its answer and how long it took; then a key the provider refuses.
    server.push(Step::reply(Reply::text("OK")));
    server.push(Step::reply(Reply::Status { status: 401, retry_after: None, body: r#"{"error":{"message":"invalid api key"}}"#.into() }));
    d.click(&format!("{row} button[data-test-model]"));
    d.wait_js(
        "the model's answer",
        &format!("return /^Answered in [0-9.]+ s(, \\$[0-9.]+)?: “OK”$/.test(document.querySelector('{row} .model-check.ok')?.textContent ?? '')"),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("21b-settings-model-test.png");
    d.click(&format!("{row} button[data-test-model]"));
    d.wait_js(
        "the refusal with its fix",
        &format!("return (document.querySelector('{row} .model-check.error')?.textContent ?? '').includes('refused the API key')"),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("21c-settings-model-test-refused.png");
    d.click(".modal-close");
    // The bot's budget per run, from the chat's header.
    d.click("#bot-menu summary");
    d.click("#edit-budget");
    d.wait_js("the budget form with the default", "return document.querySelector('#budget-tokens')?.value === '2000000'", Duration::from_secs(10));
    d.js("document.querySelector('#budget-tokens').value = ''; return true");
    d.type_into("#budget-tokens", "50000");
    d.type_into("#budget-usd", "0.5");
    d.click(".budget-form button[type=submit]");
    d.wait_js(
        "the budget saved",
        "return (document.querySelector('#budget-message')?.textContent ?? '').startsWith('Saved: each run of writer may spend 50,000 tokens or $0.50')",
        Duration::from_secs(10),
    );
    assert_eq!(
        rt.block_on(engine.bot_budget(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap(),
        botdesk_engine::Budget { tokens: 50_000, usd: Some(0.5) }
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("22-bot-budget.png");
    d.click(".modal-close");
    // Where the bot may connect, from the chat's header: a bad entry is refused with the rule,
    // then an allowlist is saved.
    d.click("#bot-menu summary");
    d.click("#edit-network");
    d.wait_js(
        "the network form, open",
        "return document.querySelector('#net-open')?.checked === true && document.querySelector('#net-list').disabled",
        Duration::from_secs(10),
    );
    d.click("#net-allow-choice");
    for (list, want) in [("exa_mple.org", "is not a domain"), ("example.org\\n10.0.0.5", "Saved: writer may connect only to example.org, 10.0.0.5.")] {
        d.js(&format!("const m = document.querySelector('#net-message'); m.className = 'muted'; m.textContent = ''; document.querySelector('#net-list').value = '{list}'; return true"));
        d.click(".network-form button[type=submit]");
        d.wait_js("the network policy's answer", "return ['ok', 'error'].includes(document.querySelector('#net-message')?.className)", Duration::from_secs(10));
        let said = d.js("return document.querySelector('#net-message').textContent");
        assert!(said.as_str().unwrap_or("").contains(want), "{list}: {said}");
    }
    assert_eq!(
        rt.block_on(engine.bot_network(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap(),
        botdesk_engine::NetPolicy::allow(["example.org", "10.0.0.5"]).unwrap()
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("22b-bot-network.png");
    d.click(".modal-close");
    // What the bot must ask first, from the chat's header: downloads, and forms on the test
    // site (the run below asks about one there).
    let site = std::env::var("BOTDESK_TEST_SITE_PUBLIC").expect("`cargo xtask test` serves the tests' web site (BOTDESK_TEST_SITE_PUBLIC)");
    rt.block_on(engine.set_bot_network(&rt.block_on(engine.bot_ref("writer")).unwrap(), botdesk_engine::NetPolicy::Open)).unwrap();
    d.click("#bot-menu summary");
    d.click("#edit-approvals");
    d.wait_js("the approvals form, asking nothing", "return document.querySelector('#ask-downloads')?.checked === false", Duration::from_secs(10));
    d.click("#ask-downloads");
    d.type_into("#ask-forms", &site);
    d.type_into("#ask-commands", "git push");
    d.click(".settings button[type=submit]");
    d.wait_js("the approvals saved", "return document.querySelector('#ask-message')?.className === 'ok'", Duration::from_secs(10));
    let saved = rt.block_on(engine.bot_approvals(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap();
    assert_eq!((saved.downloads, saved.forms.clone(), saved.commands.clone()), (true, vec![site.clone()], vec!["git push".to_string()]));
    std::thread::sleep(Duration::from_millis(300));
    screenshot("22c-bot-approvals.png");
    d.click(".modal-close");
    // A login the bot may use without seeing it: saved to the keyring, listed by site and user
    // only, the password gone from the window.
    d.click("#bot-menu summary");
    d.click("#edit-logins");
    d.wait_js("the logins, none yet", "return (document.querySelector('#logins')?.textContent ?? '').includes('No logins yet')", Duration::from_secs(10));
    d.type_into("#login-site", "https://accounts.example.org/login");
    d.type_into("#login-user", "ada@example.org");
    d.type_into("#login-password", "correct horse battery");
    d.click(".modal form button[type=submit]");
    d.wait_js("the login listed", "return !!document.querySelector('#logins li[data-login=\"https://accounts.example.org\"]')", Duration::from_secs(10));
    let html = d.js("return document.documentElement.outerHTML + [...document.querySelectorAll('input')].map(i => i.value).join(' ')");
    assert!(!html.as_str().unwrap_or("").contains("correct horse"), "the password stays in the window");
    assert_eq!(rt.block_on(engine.logins(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap()[0].username, "ada@example.org");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("22d-bot-logins.png");
    d.click("#logins li button");
    d.wait_js("the login removed", "return (document.querySelector('#logins')?.textContent ?? '').includes('No logins yet')", Duration::from_secs(10));
    d.click(".modal-close");
    // The bot's MCP servers, from the chat's header: a command (quotes keep spaces) and an
    // address are added, a bad name refused with the rule, one removed.
    d.click("#bot-menu summary");
    d.click("#edit-mcp");
    d.wait_js(
        "the MCP servers, none yet",
        "return (document.querySelector('#mcp-servers')?.textContent ?? '').includes('No MCP servers yet')",
        Duration::from_secs(10),
    );
    for (name, how) in [("notes", "python3 'my server.py' --verbose"), ("docs", "https://mcp.example.org/mcp"), ("no_way", "true")] {
        d.js("document.querySelector('.mcp-form').reset(); return true");
        d.type_into("#mcp-name", name);
        d.type_into("#mcp-how", how);
        d.js("document.querySelector('.mcp-form').requestSubmit(); return true");
        if name == "no_way" {
            d.wait_js("a bad name refused", "return document.querySelector('#mcp-message')?.className === 'error'", Duration::from_secs(10));
        } else {
            d.wait_js("the server listed", &format!("return !!document.querySelector('#mcp-servers li[data-mcp-server={name}]')"), Duration::from_secs(10));
        }
    }
    let servers = rt.block_on(engine.bot_mcp_servers(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap();
    assert_eq!(
        servers.iter().map(|s| (s.name.as_str(), s.command.clone(), s.url.clone())).collect::<Vec<_>>(),
        [
            ("docs", vec![], Some("https://mcp.example.org/mcp".to_string())),
            ("notes", vec!["python3".to_string(), "my server.py".into(), "--verbose".into()], None),
        ]
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("22b-bot-mcp-servers.png");
    d.click("#mcp-servers li[data-mcp-server=docs] button");
    d.wait_js("the server removed", "return !document.querySelector('#mcp-servers li[data-mcp-server=docs]')", Duration::from_secs(10));
    assert_eq!(rt.block_on(engine.bot_mcp_servers(&rt.block_on(engine.bot_ref("writer")).unwrap())).unwrap().len(), 1);
    rt.block_on(engine.remove_bot_mcp_server(&rt.block_on(engine.bot_ref("writer")).unwrap(), "notes")).unwrap();
    d.click(".modal-close");
    // The engine has the same chat (what the CLI's `chat` shows), and the file.
    let chat = rt.block_on(engine.chat(&rt.block_on(engine.bot_ref("writer")).unwrap(), 50)).unwrap();
    assert_eq!(chat.last().unwrap().text, "All done: the machine runs Linux and my notes are in notes.md.");
    assert_eq!(&rt.block_on(engine.stored_read(&rt.block_on(engine.bot_ref("writer")).unwrap(), "later.txt", 1000)).unwrap()[..], b"written later\n");
    // A run that sends a form on a listed site pauses there: the chat asks (Allow once, Always
    // for this site, Deny with a note); denied, the model is told the note and the shop never
    // gets the form.
    server.push(Step::reply(Reply::call("browser_navigate", json!({ "url": format!("http://{site}:8080/shop") }))));
    server.push(Step::reply(Reply::Func(Box::new(|s: &botdesk_agent::scripted::Seen| {
        let text = &s.results[0].text;
        match text.lines().find(|l| l.starts_with("button \"Buy\"")).and_then(|l| l.split('[').nth(1)?.split(']').next()) {
            Some(r) => Reply::call("browser_act", json!({"actions": [{"action": "click", "ref": r}]})),
            None => Reply::text(&format!("no Buy button: {text}")),
        }
    }))));
    let denied = format!("The person denied that you submit the form on {site} (http://{site}:8080/buy). It did not happen. Their note: \"ask me tomorrow\".");
    server.push(Step::check(
        move |s| s.results.first().filter(|r| r.text.contains(&denied)).map(drop).ok_or(format!("not told of the denial: {:?}", s.results)),
        Reply::text("I did not buy it."),
    ));
    d.type_into("#task-input", "Buy the teapot");
    d.click("#send-task");
    d.wait_js(
        "the approval in the chat",
        &format!("return (document.querySelector('#question')?.textContent ?? '').includes('writer wants to submit the form on {site}') && !!document.querySelector('#question-always')"),
        Duration::from_secs(120),
    );
    // The desktop's notification service got it too.
    notifications.wait_for("writer needs you", &format!("writer wants to submit the form on {site}"));
    d.type_into("#question-note", "ask me tomorrow");
    std::thread::sleep(Duration::from_millis(300));
    screenshot("23b-approval-question.png");
    d.click("#question-deny");
    d.wait_js(
        "the run going on after Deny",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent === 'I did not buy it.') && !document.querySelector('#question')",
        Duration::from_secs(120),
    );
    d.wait_js("the writer idle again", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(30));
    assert_eq!(server.failures(), Vec::<String>::new(), "the model was told the note");
    // A run that asks the person to take its screen: a notification says so; taken and handed
    // back, the run goes on.
    server.push(Step::reply(Reply::call("request_takeover", json!({"reason": "please accept the cookies"}))));
    server.push(Step::reply(Reply::text("Thanks, going on.")));
    d.type_into("#task-input", "Read the news");
    d.click("#send-task");
    notifications.wait_for("writer needs you", "It needs you to take its screen: please accept the cookies");
    let lease = loop {
        if let Ok(l) = rt.block_on(async { engine.take_control(&engine.bot_ref("writer").await.unwrap().id).await }) {
            break l;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    rt.block_on(async { engine.release_control(&engine.bot_ref("writer").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, None).await }).unwrap();
    d.wait_js(
        "the run going on after the handback",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent === 'Thanks, going on.')",
        Duration::from_secs(60),
    );
    d.wait_js("the writer idle again", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(30));
    // A run the provider refuses the key for fails with that said, and the way to fix it under it.
    server.push(Step::reply(Reply::Status { status: 401, retry_after: None, body: r#"{"error":{"message":"invalid api key"}}"#.into() }));
    d.type_into("#task-input", "One more thing");
    d.click("#send-task");
    d.wait_js(
        "the fix under the failed run",
        "const f = document.querySelector('.msg .failure-fix[data-failure=MODEL_BAD_KEY]'); return !!f && f.closest('.msg').textContent.includes('refused the API key')",
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(300));
    screenshot("24-run-failed-fix.png");
    notifications.wait_for("writer stopped", "Its run failed: ");
    d.click(".failure-fix button");
    d.wait_js(
        "Settings, with the models",
        "return !!document.querySelector('.modal #set-memory') && document.querySelector('.modal').textContent.includes('Models')",
        Duration::from_secs(10),
    );
    d.click(".modal-close");

    // OpenAI's computer use: the provider first says to wait (the chat says for how long), then
    // flags the model's action with a safety check: the chat asks the person, with Allow and
    // Decline, and the run waits; allowed, it goes on with the check acknowledged.
    use botdesk_agent::scripted::Answer;
    let careful = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::Status { status: 429, retry_after: Some(3), body: r#"{"error":{"message":"slow down"}}"#.into() }),
        Step::reply(Reply::Answer(Answer {
            computer: vec![(
                json!({"type": "screenshot"}),
                vec![json!({"id": "cu_sc_1", "code": "sensitive_domain", "message": "The page looks like a bank's."})],
            )],
            ..Default::default()
        })),
        Step::reply(Reply::text("Checked the statement.")),
    ]));
    let careful_model = format!("careful-e2e-{}", std::process::id());
    let new = NewModel {
        id: careful_model.clone(),
        kind: botdesk_core::ModelKind::OpenAi,
        model: "gpt-5.4".into(),
        base_url: Some(careful.base_url(botdesk_agent::Wire::Responses)),
        coordinates: None,
    };
    rt.block_on(engine.add_model(new, Some("sk-e2e-careful".into()))).unwrap();
    let bot = rt.block_on(engine.create_bot("banker", ComputerScope::Team, Some(&careful_model), "")).unwrap();
    d.wait_js("the new bot in the list", &format!("return !!document.querySelector('.bot-list [data-bot=\"{}\"]')", bot.id), Duration::from_secs(10));
    d.click(&format!(".bot-list [data-bot=\"{}\"]", bot.id));
    d.type_into("#task-input", "Check my bank statement");
    d.click("#send-task");
    d.wait_js(
        "the rate limit said",
        "return (document.querySelector('#waiting-note')?.textContent ?? '').startsWith('Waiting for the rate limit')",
        Duration::from_secs(30),
    );
    // (Painted a moment after the page changed.)
    std::thread::sleep(Duration::from_millis(500));
    screenshot("25-waiting-for-the-rate-limit.png");
    d.wait_js(
        "the question in the chat",
        "return (document.querySelector('#question')?.textContent ?? '').includes('The page looks like a bank') && !!document.querySelector('#question-allow')",
        Duration::from_secs(120),
    );
    d.wait_js("the bot waiting for you", "return document.querySelector('#bot-status')?.textContent === 'Waiting for you'", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    screenshot("26-safety-check-question.png");
    d.click("#question-allow");
    d.wait_js(
        "the run going on after Allow",
        "return [...document.querySelectorAll('.msg.assistant .text')].some(e => e.textContent === 'Checked the statement.') && !document.querySelector('#question') && !document.querySelector('.msg.needs-you')",
        Duration::from_secs(120),
    );
    assert_eq!(careful.failures(), Vec::<String>::new(), "the check went back acknowledged");
    screenshot("27-safety-check-allowed.png");
    // The run has ended (its last words come before its end: the screen recording is taken
    // first), so nothing holds the computers the test removes next.
    d.wait_js("the banker idle again", "return document.querySelector('.bot.selected')?.dataset.status === 'idle'", Duration::from_secs(30));
    // The bot's name and model, changed from the chat's header.
    d.click("#bot-menu summary");
    d.click("#edit-bot");
    d.wait_js("the bot's form", "return document.querySelector('#bot-name')?.value === 'banker'", Duration::from_secs(10));
    d.js(&format!("document.querySelector('#bot-name').value = 'banker two'; document.querySelector('#bot-model').value = '{model_id}'; return true"));
    d.click(".bot-form button[type=submit]");
    d.wait_js("the bot renamed in the list", "return document.querySelector('.bot.selected .bot-name')?.textContent === 'banker two'", Duration::from_secs(10));
    d.wait_js(
        "the chat with the new model",
        &format!("return document.querySelector('.chat h2')?.textContent.startsWith('Chat · {model_id}')"),
        Duration::from_secs(10),
    );
    assert_eq!(rt.block_on(engine.bot("banker two")).unwrap().model.as_deref(), Some(model_id.as_str()));
    std::thread::sleep(Duration::from_millis(300));
    screenshot("27b-bot-renamed.png");
    // A click on the writer's first "done" notification opens the writer, whichever bot is open.
    d.click(".modal-close");
    let done = notifications.wait_for("writer is done", "It finished its task.");
    notifications.click(done);
    d.wait_js(
        "the writer opened from its notification",
        "return document.querySelector('.bot.selected .bot-name')?.textContent === 'writer'",
        Duration::from_secs(10),
    );
    drop(d);
    rt.block_on(async {
        for c in engine.list_computers().await.unwrap_or_default() {
            let _ = engine.destroy_computer(&c.id).await;
        }
        for b in engine.list_bots().await.unwrap_or_default() {
            let _ = engine.remove_bot(&b.id).await;
        }
        let _ = engine.remove_model(&model_id).await;
        let _ = engine.remove_model(&careful_model).await;
    });
}

/// A desktop notification service on the session bus (`org.freedesktop.Notifications`, the
/// interface notification daemons implement), keeping what it was asked to show; `click` does
/// what a daemon does when the person clicks one.
struct Notifications {
    shown: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    bus: zbus::blocking::Connection,
}

struct NotificationService(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl NotificationService {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        _app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        _actions: Vec<String>,
        _hints: std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
        _expire_timeout: i32,
    ) -> u32 {
        let mut shown = self.0.lock().unwrap();
        shown.push((summary, body));
        shown.len() as u32
    }
    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".into(), "actions".into()]
    }
    fn get_server_information(&self) -> (String, String, String, String) {
        ("botdesk-test".into(), "botdesk".into(), "1".into(), "1.2".into())
    }
    fn close_notification(&self, _id: u32) {}
    #[zbus(signal)]
    async fn action_invoked(emitter: &zbus::object_server::SignalEmitter<'_>, id: u32, action_key: &str) -> zbus::Result<()>;
}

impl Notifications {
    fn serve() -> Notifications {
        let shown = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let bus = zbus::blocking::connection::Builder::session()
            .and_then(|b| b.name("org.freedesktop.Notifications"))
            .and_then(|b| b.serve_at("/org/freedesktop/Notifications", NotificationService(shown.clone())))
            .and_then(|b| b.build())
            .expect("the notification service on the session bus");
        Notifications { shown, bus }
    }
    fn shown(&self) -> Vec<(String, String)> {
        self.shown.lock().unwrap().clone()
    }
    /// Waits for a notification titled `title` whose body starts with `body`; returns its id.
    fn wait_for(&self, title: &str, body: &str) -> u32 {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(i) = self.shown().iter().position(|(t, b)| t == title && b.starts_with(body)) {
                return i as u32 + 1;
            }
            assert!(std::time::Instant::now() < deadline, "no notification {title:?} {body:?} in {:?}", self.shown());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    /// The person clicks notification `id`.
    fn click(&self, id: u32) {
        let iface = self.bus.object_server().interface::<_, NotificationService>("/org/freedesktop/Notifications").unwrap();
        zbus::block_on(NotificationService::action_invoked(iface.signal_emitter(), id, "default")).unwrap();
    }
}

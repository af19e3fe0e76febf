//! Runs end to end: the real model clients against the scripted model server (both wire
//! formats), the real Docker engine, real SQLite and the real keyring. Two bots on one Team
//! computer work at the same time, each on its own display with its own browser profile.

use std::time::{Duration, Instant};

mod common;

use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
use botdesk_agent::Wire;
use botdesk_engine::*;
use serde_json::json;
use sha2::Digest;

struct World {
    engine: Engine,
    dir: tempfile::TempDir,
    models: Vec<String>,
    _turn: Turn,
}

/// Tests share this process; the one that measures its memory runs alone.
static ALONE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

enum Turn {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'static, ()>),
}

impl World {
    /// The bot, resolved once (what the engine's per-bot calls take).
    async fn bot(&self, name: &str) -> botdesk_engine::BotRef {
        self.engine.bot_ref(name).await.unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        common::tear_down(self.dir.path(), &self.models);
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

async fn world() -> World {
    world_in(Turn::Shared(ALONE.read().await)).await
}

async fn world_in(turn: Turn) -> World {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    World { engine, dir, models: vec![], _turn: turn }
}

impl World {
    /// A model pointing at the scripted server, with a key in the keyring; returns (model id, key).
    async fn model(&mut self, server: &ScriptedServer, wire: Wire) -> (String, String) {
        self.model_in(server, wire, action::CoordSpace::Pixels).await
    }

    /// A Team bot named `name` whose model is a fresh scripted server speaking `wire`.
    async fn scripted_bot(&mut self, name: &str, wire: Wire, space: action::CoordSpace) -> (ScriptedServer, String) {
        let server = ScriptedServer::start(vec![]).await;
        let (model, _) = self.model_in(&server, wire, space).await;
        self.engine.create_bot(name, ComputerScope::Team, Some(&model), "").await.unwrap();
        (server, model)
    }

    /// A bot named `name` whose model is `model` of provider `kind` at a fresh scripted server
    /// (its family's dialect, coordinates and thinking, as a real one of that name gets).
    async fn bot_as(&mut self, name: &str, kind: botdesk_core::ModelKind, model: &str) -> ScriptedServer {
        let server = ScriptedServer::start(vec![]).await;
        let wire = match kind {
            botdesk_core::ModelKind::Anthropic => Wire::Anthropic,
            _ => Wire::OpenAi,
        };
        let id = unique("as");
        let new = NewModel { id: id.clone(), kind, model: model.into(), base_url: Some(server.base_url(wire)), coordinates: None };
        self.engine.add_model(new, Some(format!("sk-e2e-{}", uuid::Uuid::new_v4().simple()))).await.unwrap();
        self.models.push(id.clone());
        self.engine.create_bot(name, ComputerScope::Team, Some(&id), "").await.unwrap();
        server
    }

    /// [`World::model`] for a model giving coordinates in `space`.
    async fn model_in(&mut self, server: &ScriptedServer, wire: Wire, space: action::CoordSpace) -> (String, String) {
        let id = unique("scripted");
        let key = format!("sk-e2e-{}", uuid::Uuid::new_v4().simple());
        let kind = if wire == Wire::Anthropic { botdesk_core::ModelKind::Anthropic } else { botdesk_core::ModelKind::OpenAiCompatible };
        let new = NewModel { id: id.clone(), kind, model: "scripted-1".into(), base_url: Some(server.base_url(wire)), coordinates: Some(space) };
        self.engine.add_model(new, Some(key.clone())).await.unwrap();
        self.models.push(id.clone());
        (id, key)
    }
}

/// A check that the first tool result of a request is an error (or not) containing `want`.
fn first_result(error: bool, want: &'static str) -> impl Fn(&Seen) -> Result<(), String> + Send + Sync + 'static {
    move |s: &Seen| match s.results.first() {
        Some(r) if r.is_error == error && r.text.contains(want) => Ok(()),
        other => Err(format!("expected {} containing {want:?}, got {other:?}", if error { "an error" } else { "a result" })),
    }
}

/// A small site served inside the computer: a big button that records its click, a form that
/// records its submission, and a cookie naming the first bot that loaded it in this profile.
const SITE: &str = r#"
import http.server, urllib.parse, sys
LOG = sys.argv[1]
PAGE = b'''<!doctype html><html><head><title>Botdesk test page</title></head>
<body style="margin:0;font:20px sans-serif">
<button id="big" style="position:absolute;left:0;top:0;width:100%;height:60vh;font-size:40px"
  onclick="fetch('/click'+location.search).then(()=>{document.title='clicked'})">Press me</button>
<form action="/submit" method="get" style="position:absolute;top:62vh;left:20px">
<input name="who" aria-label="who"> <button type="submit">Send</button></form>
<p id="cookies" style="position:absolute;top:75vh;left:20px"></p>
<script>
const bot = new URLSearchParams(location.search).get('bot');
if (!document.cookie.includes('owner=')) document.cookie = 'owner=' + bot + '; max-age=86400; path=/';
document.getElementById('cookies').textContent = 'cookies: ' + document.cookie;
</script></body></html>'''
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path in ('/click', '/submit'):
            with open(LOG, 'a') as f:
                f.write(u.path[1:] + ' ' + ' '.join(k + '=' + v[0] for k, v in sorted(q.items())) + '\n')
        body = PAGE if u.path == '/' else b'<html><title>thanks</title><body>thanks</body></html>'
        self.send_response(200); self.send_header('content-type', 'text/html'); self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(('127.0.0.1', 8765), H).serve_forever()
"#;

async fn start_site(engine: &Engine, bot: &str) {
    engine.files_write(&engine.bot_ref(bot).await.unwrap(), "shared/site/site.py", bytes::Bytes::from_static(SITE.as_bytes()), false).await.unwrap();
    let (code, out) = engine
        .shell(&engine.bot_ref(bot).await.unwrap(), "cd ../../shared/site && (setsid -f python3 site.py events.log >server.out 2>&1 </dev/null) && for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8765/\")' 2>/dev/null && exit 0; sleep 0.1; done; cat server.out; exit 1")
        .await
        .unwrap();
    assert_eq!(code, 0, "the site did not start: {out}");
}

fn ok_result(s: &Seen, contains: &str) -> Result<(), String> {
    match s.results.first() {
        Some(r) if !r.is_error && r.text.contains(contains) => Ok(()),
        other => Err(format!("expected a result containing {contains:?}, got {other:?}")),
    }
}

/// The ref of an element from a snapshot text line `role "name" [eN]`.
fn element_ref(snapshot: &str, role: &str, name: &str) -> Option<String> {
    snapshot.lines().find(|l| l.starts_with(&format!("{role} \"{name}\""))).and_then(|l| Some(l.split('[').nth(1)?.split(']').next()?.to_string()))
}

/// The scripted task of one bot: open the page, click the big button by pixels, fill and submit
/// the form by refs (checking its cookie is its own), write a file, run a command.
fn script(bot: &'static str, other: &'static str, key: String) -> Vec<Step> {
    vec![
        Step::check(
            move |s| s.system().contains(&format!("You are {bot}")).then_some(()).ok_or("system prompt".into()),
            Reply::call("browser_navigate", json!({"url": format!("http://127.0.0.1:8765/?bot={bot}")})),
        ),
        Step::check(|s| ok_result(s, "Press me"), Reply::call("computer_act", json!({"actions": [{"type": "click", "x": 640, "y": 300}], "settle_ms": 600}))),
        Step::check(
            |s| {
                ok_result(s, "Did 1 action")?;
                s.results[0].has_image.then_some(()).ok_or("no screenshot after the click".into())
            },
            Reply::call("browser_snapshot", json!({})),
        ),
        Step::check(
            move |s| {
                let text = &s.results.first().ok_or("no result")?.text;
                if !text.contains(&format!("owner={bot}")) || text.contains(&format!("owner={other}")) {
                    return Err(format!("{bot} sees someone else's cookie: {text}"));
                }
                if !text.starts_with("clicked") {
                    return Err(format!("the click did not reach {bot}'s page: {text}"));
                }
                Ok(())
            },
            Reply::Func(Box::new(move |s: &Seen| {
                let text = &s.results[0].text;
                match (element_ref(text, "textbox", "who"), element_ref(text, "button", "Send")) {
                    (Some(field), Some(send)) => Reply::call(
                        "browser_act",
                        json!({"actions": [{"action": "fill", "ref": field, "text": format!("{bot}-form")}, {"action": "click", "ref": send}]}),
                    ),
                    _ => Reply::text(&format!("no form in the snapshot: {text}")),
                }
            })),
        ),
        Step::check(|s| ok_result(s, "thanks"), Reply::call("write_file", json!({"path": "report.txt", "content": format!("report by {bot}\n")}))),
        Step::check(
            |s| ok_result(s, "Wrote 14 bytes"),
            Reply::call("shell", json!({"command": format!("echo key={key}; cat report.txt; echo $BOTDESK_BOT_ID >&2")})),
        ),
        Step::check(|s| ok_result(s, "exit code 0"), Reply::text(&format!("{bot} is done."))),
    ]
}

#[tokio::test]
async fn two_bots_on_one_team_computer_run_tasks_at_once_in_both_wire_formats() {
    let mut w = world().await;
    let ant_server = ScriptedServer::start(vec![]).await;
    let oai_server = ScriptedServer::start(vec![]).await;
    let (ant_model, ant_key) = w.model(&ant_server, Wire::Anthropic).await;
    let (oai_model, oai_key) = w.model(&oai_server, Wire::OpenAi).await;
    let ant = w.engine.create_bot("ant", ComputerScope::Team, Some(&ant_model), "").await.unwrap();
    let oai = w.engine.create_bot("oai", ComputerScope::Team, Some(&oai_model), "").await.unwrap();
    assert_eq!(ant.computer.id, oai.computer.id, "one Team computer");
    start_site(&w.engine, "ant").await;
    for s in script("ant", "oai", ant_key.clone()) {
        ant_server.push(s);
    }
    for s in script("oai", "ant", oai_key.clone()) {
        oai_server.push(s);
    }
    let mut events = w.engine.run_events();

    let (ant, oai) = (w.bot("ant").await.id, w.bot("oai").await.id);
    let (a, o) = tokio::join!(
        w.engine.run_task(&ant, "Press the button, fill the form, write a report."),
        w.engine.run_task(&oai, "Press the button, fill the form, write a report.")
    );
    let (a, o) = (a.unwrap(), o.unwrap());
    assert_eq!(ant_server.failures(), Vec::<String>::new());
    assert_eq!(oai_server.failures(), Vec::<String>::new());
    assert_eq!((a.status, o.status), (RunStatus::Completed, RunStatus::Completed), "{a:?} {o:?}");
    assert_eq!((ant_server.remaining(), oai_server.remaining()), (0, 0));

    // Each on its own display.
    let (da, doai) = (w.engine.open_desktop(&w.bot("ant").await).await.unwrap(), w.engine.open_desktop(&w.bot("oai").await).await.unwrap());
    assert_ne!(da.slot, doai.slot);

    // The page recorded one click and one form per bot.
    let log = String::from_utf8(w.engine.files_read(&w.bot("ant").await, "shared/site/events.log", 100_000).await.unwrap().to_vec()).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["click bot=ant", "click bot=oai", "submit who=ant-form", "submit who=oai-form"], "{log}");

    for (bot, key, other_key) in [("ant", &ant_key, &oai_key), ("oai", &oai_key, &ant_key)] {
        // The file is in the bot's own folder.
        assert_eq!(&w.engine.files_read(&w.bot(bot).await, "report.txt", 1000).await.unwrap()[..], format!("report by {bot}\n").as_bytes());
        // The chat: the task, the replies, every tool call with its result, a screenshot thumbnail.
        let chat = w.engine.chat(&w.bot(bot).await, 100).await.unwrap();
        assert_eq!(chat[0].role.as_str(), "user");
        assert_eq!(chat.last().unwrap().text, format!("{bot} is done."));
        let calls: Vec<&ChatCall> = chat.iter().flat_map(|m| &m.calls).collect();
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["browser_navigate", "computer_act", "browser_snapshot", "browser_act", "write_file", "shell"]);
        assert!(calls.iter().all(|c| c.status.as_str() == "done"), "{calls:#?}");
        let shot = calls[1].image.as_ref().expect("computer_act has a screenshot");
        assert!(w.dir.path().join(shot).metadata().unwrap().len() > 1000);
        // The shell output has the key redacted, and the bot's id from its own environment.
        let shell = calls[5].text.as_deref().unwrap();
        assert!(shell.contains("key=[redacted]") && shell.contains(&format!("report by {bot}")), "{shell}");
        assert!(calls[5].arguments.contains("key=[redacted]"), "{}", calls[5].arguments);
        // Activity: write_file and shell, nothing for the reads and the browser.
        let act = w.engine.activity(&w.bot(bot).await, 0, 100).await.unwrap();
        let kinds: Vec<(&str, &str)> = act.iter().map(|a| (a.kind.as_str(), a.status.as_str())).collect();
        assert_eq!(kinds, [("write_file", "done"), ("shell", "done")], "{act:#?}");
        assert_eq!(act[1].exit_code, Some(0));
        assert!(act[1].target.contains("key=[redacted]") && act[1].output_tail.contains("key=[redacted]"), "{:?}", act[1]);
        for a in &act {
            assert!(!a.target.contains(key.as_str()) && !a.output_tail.contains(key.as_str()) && !a.output_tail.contains(other_key.as_str()));
        }
    }
    // Streaming: deltas arrived for both bots before their runs ended.
    let mut deltas = std::collections::HashSet::new();
    while let Ok(ev) = events.try_recv() {
        if let RunEvent::Delta { bot, .. } = ev {
            deltas.insert(bot);
        }
    }
    assert_eq!(deltas.len(), 2);
    // The keys went to the scripted servers in their headers and nowhere on disk.
    assert_eq!(ant_server.requests()[0].headers.get("x-api-key"), Some(&ant_key));
    assert_eq!(oai_server.requests()[0].headers.get("authorization"), Some(&format!("Bearer {oai_key}")));
    for entry in walk(w.dir.path()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        for key in [&ant_key, &oai_key] {
            assert!(!bytes.windows(key.len()).any(|win| win == key.as_bytes()), "the key is in {}", entry.display());
        }
    }
}

/// Every file under a directory (the database, its WAL, logs, screenshots, workspaces).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else if p.is_file() {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn every_refusal_reaches_the_model_as_an_error_and_the_run_goes_on() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![]).await;
    let (model, _) = w.model(&server, Wire::OpenAi).await;
    w.engine.create_bot("refuser", ComputerScope::Team, Some(&model), "").await.unwrap();
    w.engine.files_write(&w.bot("refuser").await, "big.txt", bytes::Bytes::from(vec![b'a'; 250_001]), false).await.unwrap();
    w.engine.files_write(&w.bot("refuser").await, "exact.txt", bytes::Bytes::from(vec![b'b'; 250_000]), false).await.unwrap();
    w.engine.files_write(&w.bot("refuser").await, "bin.dat", bytes::Bytes::from_static(b"\xff\xfe\x00binary"), false).await.unwrap();
    let err = |want: &'static str| {
        move |s: &Seen| match s.results.first() {
            Some(r) if r.is_error && r.text.contains(want) => Ok(()),
            other => Err(format!("expected an error with {want:?}, got {other:?}")),
        }
    };
    let batch: Vec<_> = (0..25).map(|i| json!({"type": "move", "x": 10 + i, "y": 10})).collect();
    for s in [
        Step::reply(Reply::call("computer_act", json!({ "actions": batch }))),
        Step::check(err("at most 24 actions"), Reply::call("read_file", json!({"path": "../../../etc/passwd"}))),
        Step::check(err("escapes the computer workspace"), Reply::call("write_file", json!({"path": "/etc/evil", "content": "x"}))),
        Step::check(err("escapes the computer workspace"), Reply::call("read_file", json!({"path": "big.txt"}))),
        Step::check(err("at most 250000 bytes"), Reply::call("read_file", json!({"path": "bin.dat"}))),
        Step::check(err("not UTF-8"), Reply::raw_call("shell", r#"{"command": "echo unterminated"#)),
        Step::check(err("not valid JSON"), Reply::call("format_disk", json!({}))),
        Step::check(err("no tool named \"format_disk\""), Reply::call("list_files", json!({"path": 7}))),
        Step::check(err("invalid type: integer `7`, expected a string"), Reply::call("read_file", json!({"path": "exact.txt"}))),
        Step::check(|s| ok_result(s, &"b".repeat(100)), Reply::call("shell", json!({"command": "echo still going"}))),
        Step::check(|s| ok_result(s, "still going"), Reply::text("Done despite the refusals.")),
    ] {
        server.push(s);
    }
    let run = w.engine.run_task(&w.engine.bot_ref("refuser").await.unwrap().id, "try things").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    // Nothing was written outside, and the 25-action batch never reached the screen: the bot's
    // desktop was not even opened.
    let (code, _) = w.engine.shell(&w.bot("refuser").await, "test ! -e /etc/evil").await.unwrap();
    assert_eq!(code, 0);
    let chat = w.engine.chat(&w.bot("refuser").await, 100).await.unwrap();
    let errors = chat.iter().flat_map(|m| &m.calls).filter(|c| c.status.as_str() == "error").count();
    assert_eq!(errors, 8);
}

/// Stop ends the run, its command and everything the run started: also a daemon an earlier
/// command left with its own session and an empty environment.
#[tokio::test]
async fn stop_ends_a_run_promptly_and_its_command_gets_exit_130() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", json!({"command": "setsid env -i sleep 6001 >/dev/null 2>&1 < /dev/null & echo left"}))),
        Step::check(|s| ok_result(s, "left"), Reply::call("shell", json!({"command": "echo started; setsid env -i sleep 6002 & sleep 120"}))),
    ])
    .await;
    let (model, _) = w.model(&server, Wire::Anthropic).await;
    w.engine.create_bot("sleeper", ComputerScope::Team, Some(&model), "").await.unwrap();
    let engine = w.engine.clone();
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("sleeper").await.unwrap().id, "sleep").await });
    // Wait until the command runs, then Stop.
    let t0 = Instant::now();
    loop {
        let act = w.engine.activity(&w.bot("sleeper").await, 0, 10).await.unwrap();
        if act.iter().any(|a| a.kind == "shell" && a.status.as_str() == "running" && a.target.contains("sleep 120")) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the command never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled = w.engine.stop_bot(&w.engine.bot_ref("sleeper").await.unwrap().id).await.unwrap();
    assert_eq!(cancelled.len(), 1);
    // A hang guard only: how fast Stop ends a run is measured by `cargo xtask bench`.
    let run = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the run ended").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let act = w.engine.activity(&w.bot("sleeper").await, 0, 10).await.unwrap();
    assert_eq!(act.last().unwrap().exit_code, Some(130), "{act:?}");
    // ([s]: the pattern must not match the probe's own command line.)
    let (_, left) = w.engine.shell(&w.bot("sleeper").await, "pgrep -af '[s]leep 600[12]' || true").await.unwrap();
    assert_eq!(left.trim(), "", "processes of the stopped run remain");
    let chat = w.engine.chat(&w.bot("sleeper").await, 10).await.unwrap();
    assert!(chat.iter().any(|m| m.role.as_str() == "system" && m.text.starts_with("Stopped")), "{chat:#?}");
    // The lease is free: a new run can start at once.
    server.push(Step::reply(Reply::text("fine")));
    assert_eq!(w.engine.run_task(&w.engine.bot_ref("sleeper").await.unwrap().id, "again").await.unwrap().status, RunStatus::Completed);
    // The second run was given the first one's chat.
    let seen = server.requests();
    let last = &seen.last().unwrap().body["messages"];
    assert!(last.to_string().contains("sleep"), "{last}");
}

#[tokio::test]
async fn request_takeover_waits_for_the_person_and_release_resumes_the_run() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::call("request_takeover", json!({"reason": "please log in"}))),
        Step::check(|s| ok_result(s, "finished"), Reply::text("Logged in, thanks.")),
    ])
    .await;
    let (model, _) = w.model(&server, Wire::OpenAi).await;
    w.engine.create_bot("needy", ComputerScope::Team, Some(&model), "").await.unwrap();
    let engine = w.engine.clone();
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("needy").await.unwrap().id, "log in somewhere").await });
    let t0 = Instant::now();
    let lease = loop {
        let statuses = w.engine.bot_statuses().await.unwrap();
        if statuses.iter().any(|(_, s)| *s == BotState { status: BotStatus::WaitingForYou, run: RunHold::AskedForYou }) {
            break w.engine.take_control(&w.engine.bot_ref("needy").await.unwrap().id).await.expect("control is allowed while the bot waits for the person");
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never waited: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let chat = w.engine.chat(&w.bot("needy").await, 10).await.unwrap();
    assert!(chat.iter().any(|m| m.role.as_str() == "system" && m.text == "The bot needs you: please log in"), "{chat:#?}");
    w.engine.release_control(&w.engine.bot_ref("needy").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, None).await.unwrap();
    let run = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(server.failures(), Vec::<String>::new());
}

fn container_of(computer: &str) -> String {
    let out = std::process::Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn a_computer_killed_mid_run_fails_the_run_and_the_next_task_starts_it_anew() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![Step::reply(Reply::call("shell", json!({"command": "echo kept > kept.txt; sleep 120"})))]).await;
    let (model, _) = w.model(&server, Wire::OpenAi).await;
    let bot = w.engine.create_bot("victim", ComputerScope::Team, Some(&model), "").await.unwrap();
    let engine = w.engine.clone();
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("victim").await.unwrap().id, "work").await });
    let t0 = Instant::now();
    // The command runs once its first line reached the workspace.
    while w.engine.stored_read(&w.bot("victim").await, "kept.txt", 100).await.is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the command never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = container_of(bot.computer.id.as_str());
    assert!(!id.is_empty());
    assert!(std::process::Command::new("docker").args(["kill", &id]).output().unwrap().status.success());
    let run = tokio::time::timeout(Duration::from_secs(30), run).await.expect("the run ended").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.as_deref().unwrap_or("").contains("the computer stopped during the run"), "{run:?}");
    // The next task provisions again; the workspace is all there.
    server.push(Step::reply(Reply::call("read_file", json!({"path": "kept.txt"}))));
    server.push(Step::check(|s| ok_result(s, "kept"), Reply::text("still here")));
    let again = w.engine.run_task(&w.engine.bot_ref("victim").await.unwrap().id, "is it there?").await.unwrap();
    assert_eq!(again.status, RunStatus::Completed, "{again:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_ne!(container_of(bot.computer.id.as_str()), "", "running again");
}

#[tokio::test]
async fn a_key_printed_in_halves_on_stdout_and_stderr_is_redacted_everywhere() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![]).await;
    let (model, key) = w.model(&server, Wire::Anthropic).await;
    w.engine.create_bot("leaky", ComputerScope::Team, Some(&model), "").await.unwrap();
    let half = &key[..key.len() / 2];
    // Two separate output chunks on two streams, 200 ms apart.
    let command = format!("k={key}; h=$((${{#k}} / 2)); printf %s \"$k\" | cut -c1-$h | tr -d '\\n'; sleep 0.2; printf %s \"$k\" | cut -c$((h + 1))- >&2");
    server.push(Step::reply(Reply::call("shell", json!({ "command": command }))));
    server.push(Step::check(|s| ok_result(s, "exit code 0\n[redacted]\n").map(|_| ()), Reply::text("done")));
    let mut events = w.engine.run_events();
    let run = w.engine.run_task(&w.engine.bot_ref("leaky").await.unwrap().id, "print it").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    let act = w.engine.activity(&w.bot("leaky").await, 0, 10).await.unwrap();
    assert_eq!(act[0].output_tail, "[redacted]\n");
    assert!(!act[0].target.contains(half), "{}", act[0].target);
    // Not in what the UI was sent, nor anywhere in the data directory.
    while let Ok(ev) = events.try_recv() {
        let text = serde_json::to_string(&ev).unwrap();
        assert!(!text.contains(half), "an event carried the key: {text}");
    }
    for f in walk(w.dir.path()) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(!bytes.windows(half.len()).any(|x| x == half.as_bytes()), "half the key is in {}", f.display());
    }
}

/// Starts this process's peak resident memory anew (Linux ≥ 4.0).
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// The process's peak resident memory since the last reset.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches("kB").trim().parse().unwrap();
    kb * 1024
}

/// A command that prints without end costs the app nothing: its output is drained while it runs
/// into a bounded tail, and the model and the activity get the end of it and the count. It runs
/// alone in this process, so the peak is its own.
#[tokio::test]
async fn a_command_printing_3_gb_leaves_memory_flat() {
    let mut w = world_in(Turn::Alone(ALONE.write().await)).await;
    let command = "yes | head -c 3000000000; echo; echo the end";
    let server =
        ScriptedServer::start(vec![Step::reply(Reply::call("shell", json!({"command": command, "timeout_s": 1200}))), Step::reply(Reply::text("done"))]).await;
    let (model, _) = w.model(&server, Wire::Anthropic).await;
    w.engine.create_bot("printer", ComputerScope::Team, Some(&model), "").await.unwrap();
    w.engine.shell(&w.bot("printer").await, "true").await.unwrap();
    reset_peak_rss();
    let before = peak_rss();
    let run = w.engine.run_task(&w.engine.bot_ref("printer").await.unwrap().id, "print a lot").await.unwrap();
    let growth = peak_rss() - before;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert!(growth < 64 << 20, "peak memory grew by {} MiB", growth >> 20);
    let act = w.engine.activity(&w.bot("printer").await, 0, 10).await.unwrap();
    let shell = act.iter().find(|a| a.kind == "shell").unwrap();
    assert!(
        shell.output_tail.ends_with("y\ny\n\nthe end\n") && shell.output_tail.chars().count() <= 16_000,
        "{:?}",
        &shell.output_tail[shell.output_tail.len().saturating_sub(100)..]
    );
    let seen = server.requests();
    let told = seen.last().unwrap().body["messages"].to_string();
    assert!(told.contains("of 3000000009 bytes of output") && told.contains("the end"), "{}", &told[told.len().saturating_sub(400)..]);
}

/// On a screen that no longer changes, the first `computer_observe` of every run carries an image
/// (a new run's model has not seen the screen, however unchanged it is since the last look); a
/// second observe in the same run does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_observe_of_every_run_has_an_image() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("looker", Wire::Anthropic, Default::default()).await;
    // Looked at until it is still.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = w.engine.screenshot(&w.bot("looker").await, ImageFormat::Png).await.unwrap().frame_id;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = w.engine.screenshot(&w.bot("looker").await, ImageFormat::Png).await.unwrap().frame_id;
        if now == last {
            break;
        }
        assert!(Instant::now() < deadline, "the screen never settled");
        last = now;
    }
    let image = |want: bool| {
        move |s: &Seen| match s.results.first() {
            Some(r) if !r.is_error && r.has_image == want => Ok(()),
            other => Err(format!("expected a result {} an image, got {other:?}", if want { "with" } else { "without" })),
        }
    };
    for run in 0..2 {
        server.push(Step::reply(Reply::call("computer_observe", json!({}))));
        server.push(Step::check(image(true), Reply::call("computer_observe", json!({}))));
        server.push(Step::check(image(false), Reply::text("Seen.")));
        let done = w.engine.run_task(&w.engine.bot_ref("looker").await.unwrap().id, "look at the screen").await.unwrap();
        assert_eq!(done.status, RunStatus::Completed, "run {run}: {done:?}");
        assert_eq!(server.failures(), Vec::<String>::new(), "run {run}");
    }
    // The latest run's trajectory: the task, both looks and the answer, in order; its first
    // look's screenshot is the very image the model was given.
    use base64::Engine as _;
    let t = w.engine.trajectory(&w.bot("looker").await, None).await.unwrap();
    assert_eq!((t.format, t.bot.name.as_str(), t.run.status), (TRAJECTORY_FORMAT, "looker", RunStatus::Completed));
    let kinds: Vec<String> = t.steps.iter().map(|s| serde_json::to_value(s).unwrap()["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["task", "tool", "tool", "message"], "{:?}", t.steps);
    let TrajectoryStep::Tool { tool, screenshot: Some(shot), .. } = &t.steps[1] else { panic!("no screenshot: {:?}", t.steps[1]) };
    assert_eq!(tool, "computer_observe");
    let kept = w.engine.chat_image(shot).await.unwrap();
    // Every image of the request, in order (Anthropic's `{"type": "base64", "data": …}` sources).
    fn images_in(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (Some("base64"), Some(d)) = (m.get("type").and_then(|t| t.as_str()), m.get("data").and_then(|d| d.as_str())) {
                    out.push(d.to_string());
                }
                m.values().for_each(|x| images_in(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| images_in(x, out)),
            _ => {}
        }
    }
    let mut sent = vec![];
    images_in(&server.requests()[4].body["messages"], &mut sent);
    let sent = base64::engine::general_purpose::STANDARD.decode(sent.last().expect("an image sent")).unwrap();
    assert_eq!(sent, kept, "the kept screenshot is not the one the model was given");
    assert!(w.engine.trajectory(&w.bot("looker").await, Some("no-such-run")).await.unwrap_err().message.contains("has no run"));
}

/// A write_file cut off at the output limit is answered with the limit; the bot then writes the
/// file in parts with append, and the computer holds the whole of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_cut_at_the_output_limit_is_written_in_parts() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("writer", Wire::Anthropic, Default::default()).await;
    for s in [
        Step::reply(Reply::Cut { text: String::new(), calls: vec![("write_file".into(), r#"{"path":"book.md","content":"part one, and then"#.into())] }),
        Step::check(first_result(true, "hit the output limit"), Reply::call("write_file", json!({"path": "book.md", "content": "part one\n"}))),
        Step::check(first_result(false, "Wrote 9 bytes"), Reply::call("write_file", json!({"path": "book.md", "content": "part two\n", "append": true}))),
        Step::check(first_result(false, "(now 18 bytes)"), Reply::call("write_file", json!({"path": "new/notes.md", "content": "first\n", "append": true}))),
        Step::check(first_result(false, "(now 6 bytes)"), Reply::call("write_file", json!({"path": "link.md", "content": "x", "append": true}))),
        Step::check(
            first_result(true, "escapes the computer workspace"),
            Reply::call("write_file", json!({"path": "pipe.md", "content": "x", "append": true})),
        ),
        Step::check(first_result(true, "not a regular file"), Reply::text("Written.")),
    ] {
        server.push(s);
    }
    // What the bot planted: a link out of the workspace (to a file it may write), and a FIFO.
    // Appending to either is refused; neither is followed nor opened for good.
    let (code, out) = w.engine.shell(&w.bot("writer").await, "echo keep > /tmp/outside.txt && ln -s /tmp/outside.txt link.md && mkfifo pipe.md").await.unwrap();
    assert_eq!(code, 0, "{out}");
    let run = w.engine.run_task(&w.engine.bot_ref("writer").await.unwrap().id, "write a book").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(&w.engine.files_read(&w.bot("writer").await, "book.md", 1000).await.unwrap()[..], b"part one\npart two\n");
    assert_eq!(&w.engine.files_read(&w.bot("writer").await, "new/notes.md", 1000).await.unwrap()[..], b"first\n");
    let (_, out) = w.engine.shell(&w.bot("writer").await, "cat /tmp/outside.txt; test -L link.md && test -p pipe.md && echo planted-intact").await.unwrap();
    assert_eq!(out, "keep\nplanted-intact\n");
}

/// A model that gives coordinates from 0 to 1000: its click at (500, 250) lands on pixel
/// (640, 200) of the 1280x800 screen, it is told where the cursor is in its own units, and a
/// coordinate beyond 1000 is refused with the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_to_1000_models_click_lands_on_the_right_pixel() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("scaled", Wire::OpenAi, action::CoordSpace::Thousandths).await;
    for s in [
        Step::check(
            |s| {
                let p = s.system();
                (p.contains("Coordinates are from 0 to 1000 on each axis") && p.contains("Today is 20"))
                    .then_some(())
                    .ok_or(format!("the system prompt lacks the coordinate rule or the date: {p}"))
            },
            Reply::call("computer_act", json!({"actions": [{"type": "click", "x": 500, "y": 250}]})),
        ),
        Step::check(
            first_result(false, "(coordinates from 0 to 1000 on each axis), cursor at (500, 250)"),
            Reply::call("computer_act", json!({"actions": [{"type": "move", "x": 1001, "y": 5}]})),
        ),
        Step::check(
            first_result(true, "x 1001 is not from 0 to 1000"),
            Reply::call("computer_act", json!({"actions": [{"type": "move", "x": 500, "y": 250}]})),
        ),
        Step::check(first_result(false, "cursor at (500, 250)"), Reply::text("Clicked.")),
    ] {
        server.push(s);
    }
    // What the provider sent when each model request came: the last act's cost is between the
    // last two.
    let sent = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let (engine, seen) = (w.engine.clone(), sent.clone());
    server.on_request(move || seen.lock().unwrap().push(engine.provider_requests()));
    let run = w.engine.run_task(&w.engine.bot_ref("scaled").await.unwrap().id, "click the middle of the top half").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    // A second act in a run is one request to the computer's gateway (the act brings the look
    // after it and what the network refused) and none to Docker.
    let sent = sent.lock().unwrap().clone();
    let (before, after) = (sent[sent.len() - 2], sent[sent.len() - 1]);
    assert_eq!((after.machine - before.machine, after.computers - before.computers), (0, 1), "requests at each model call: {sent:?}");
    assert_eq!(w.engine.screenshot(&w.bot("scaled").await, ImageFormat::Png).await.unwrap().cursor, (640, 200));
}

/// A run stops cleanly at its bot's budget (checked before each model call), and each call's cost
/// is kept at its model's prices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stops_at_its_budget_and_its_cost_is_kept() {
    let mut w = world().await;
    let (server, model) = w.scripted_bot("thrifty", Wire::Anthropic, Default::default()).await;
    assert_eq!(w.engine.model_prices(&model).await.unwrap(), None, "an unknown model has no prices");
    let prices = Prices { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 };
    w.engine.set_model_prices(&model, Some(prices)).await.unwrap();
    assert_eq!(w.engine.bot_budget(&w.bot("thrifty").await).await.unwrap(), Budget { tokens: Budget::DEFAULT_TOKENS, usd: None });
    // One call's prompt is about 2,000 tokens: the budget lasts two calls.
    let budget = w.engine.set_bot_budget(&w.bot("thrifty").await, Some(2_500), None).await.unwrap();
    assert_eq!(budget.tokens, 2_500);
    for _ in 0..3 {
        server.push(Step::reply(Reply::call("shell", json!({"command": "echo spending"}))));
    }
    server.push(Step::reply(Reply::text("Done.")));
    let run = w.engine.run_task(&w.engine.bot_ref("thrifty").await.unwrap().id, "spend").await.unwrap();
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert!(run.error.as_deref().unwrap_or("").contains("the run reached its budget of 2500 tokens"), "{run:?}");
    assert_eq!(run.failure, Some(botdesk_core::RunFailure::OverBudget), "{run:?}");
    assert_eq!(server.requests().len(), 2, "no model call after the budget was reached");
    let (used, usd) = w.engine.run_usage(&run.id).await.unwrap();
    assert!(used.prompt() + used.output >= 2_500, "{used:?}");
    let usd = usd.expect("a cost, the prices being known");
    assert!((usd - prices.cost(&used)).abs() < 1e-9 && usd > 0.0, "{usd} for {used:?}");
    let chat = w.engine.chat(&w.bot("thrifty").await, 100).await.unwrap();
    let last = chat.iter().rev().find(|m| m.usage.is_some()).unwrap();
    assert_eq!((last.usage, last.cost_usd), (Some(used), Some(usd)));
    assert_eq!(chat.last().unwrap().failure, Some(botdesk_core::RunFailure::OverBudget), "the failed run's last message says what it failed of");
    // Bad budgets are refused.
    assert_eq!(w.engine.set_bot_budget(&w.bot("thrifty").await, Some(0), None).await.unwrap_err().code, ErrorCode::Invalid);
    assert_eq!(w.engine.set_bot_budget(&w.bot("thrifty").await, None, Some(f64::NAN)).await.unwrap_err().code, ErrorCode::Invalid);
}

/// A follow-up task sees the earlier runs in the model's form: each task, its tool calls with
/// their results (a line each), notes such as a failure, and its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_sees_the_earlier_runs_tool_calls_and_answers() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("keeper", Wire::OpenAi, Default::default()).await;
    server.push(Step::reply(Reply::call("shell", json!({"command": "echo the-answer-is-42"}))));
    server.push(Step::reply(Reply::text("The number is 42.")));
    assert_eq!(w.engine.run_task(&w.engine.bot_ref("keeper").await.unwrap().id, "find the number").await.unwrap().status, RunStatus::Completed);
    server.push(Step::check(
        |s| {
            let body = s.body["messages"].to_string();
            let want =
                ["find the number", "- shell {\\\"command\\\":\\\"echo the-answer-is-42\\\"} → ok: exit code 0", "The number is 42.", "and now double it"];
            match want.iter().find(|w| !body.contains(*w)) {
                None => Ok(()),
                Some(missing) => Err(format!("{missing:?} is not in {body}")),
            }
        },
        Reply::text("84."),
    ));
    assert_eq!(w.engine.run_task(&w.engine.bot_ref("keeper").await.unwrap().id, "and now double it").await.unwrap().status, RunStatus::Completed);
    assert_eq!(server.failures(), Vec::<String>::new());
}

/// Waits until the bot's shell command runs (its activity says so).
async fn until_shell_runs(engine: &Engine, bot: &str) {
    let t0 = Instant::now();
    loop {
        let act = engine.activity(&engine.bot_ref(bot).await.unwrap(), 0, 10).await.unwrap();
        if act.iter().any(|a| a.kind == "shell" && a.status.as_str() == "running") {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "the command never started: {act:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn state_of(statuses: &[(String, BotState)], bot: &BotView) -> BotState {
    statuses.iter().find(|(id, _)| *id == bot.id.as_str()).map(|(_, s)| *s).unwrap()
}

/// Pause and take: the person pauses a running task. The run stops at the next step boundary
/// (the command it was running ends first), the model is not called while the person has the
/// screen, and Release resumes the run: the model is told the person had the screen, for how
/// long, and their note. A note too long is refused and the person keeps control.
#[tokio::test]
async fn pause_and_take_waits_for_the_step_and_release_resumes_with_the_note() {
    let mut w = world().await;
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", json!({"command": "sleep 2; echo step-one-done"}))),
        Step::check(
            |s| {
                ok_result(s, "step-one-done")?;
                let body = s.body.to_string();
                for want in ["The person paused you, took control of the screen for", "Their note: \\\"logged in as ada\\\"", "look at it again"] {
                    if !body.contains(want) {
                        return Err(format!("{want:?} not told: {body}"));
                    }
                }
                Ok(())
            },
            Reply::text("Done, after the person's login."),
        ),
    ])
    .await;
    let (model, _) = w.model(&server, Wire::Anthropic).await;
    let bot = w.engine.create_bot("pausable", ComputerScope::Team, Some(&model), "").await.unwrap();
    let engine = w.engine.clone();
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("pausable").await.unwrap().id, "work").await });
    until_shell_runs(&w.engine, "pausable").await;
    // Without --pause, control is refused while the bot runs.
    assert_eq!(w.engine.take_control(&w.engine.bot_ref("pausable").await.unwrap().id).await.unwrap_err().code, ErrorCode::BotRunning);
    let pausing = w.engine.clone();
    let pause = tokio::spawn(async move { pausing.pause_run(&pausing.bot_ref("pausable").await.unwrap().id, Duration::from_secs(120)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    if !pause.is_finished() {
        assert_eq!(state_of(&w.engine.bot_statuses().await.unwrap(), &bot).status, BotStatus::Pausing);
    }
    let paused = pause.await.unwrap().unwrap();
    assert!(paused.is_some(), "a run was paused");
    // The command ended before the pause, whole.
    let act = w.engine.activity(&w.bot("pausable").await, 0, 10).await.unwrap();
    let shell = act.iter().find(|a| a.kind == "shell").unwrap();
    assert_eq!((shell.status.as_str(), shell.exit_code), ("done", Some(0)), "{act:?}");
    assert_eq!(state_of(&w.engine.bot_statuses().await.unwrap(), &bot), BotState { status: BotStatus::WaitingForYou, run: RunHold::PausedForYou });
    let lease = w.engine.take_control(&w.engine.bot_ref("pausable").await.unwrap().id).await.expect("control is given once the run paused");
    assert_eq!(state_of(&w.engine.bot_statuses().await.unwrap(), &bot), BotState { status: BotStatus::YouHaveControl, run: RunHold::PausedForYou });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.requests().len(), 1, "the model is not called while the person has the screen");
    let long = "x".repeat(MAX_NOTE + 1);
    assert_eq!(
        w.engine
            .release_control(&w.engine.bot_ref("pausable").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, Some(&long))
            .await
            .unwrap_err()
            .code,
        ErrorCode::Invalid
    );
    assert!(w.engine.control_of(&w.engine.bot_ref("pausable").await.unwrap().id).await.unwrap().is_some(), "a refused release keeps control");
    let resumed = w
        .engine
        .release_control(&w.engine.bot_ref("pausable").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, Some("  logged in as ada "))
        .await
        .unwrap();
    assert_eq!(resumed, paused);
    let run = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the run ended").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    let chat = w.engine.chat(&w.bot("pausable").await, 20).await.unwrap();
    assert!(chat.iter().any(|m| m.role.as_str() == "system" && m.text.starts_with("Paused:")), "{chat:#?}");
    assert!(
        chat.iter().any(|m| m.role.as_str() == "system" && m.text.starts_with("Resumed: you had the screen for") && m.text.contains("logged in as ada")),
        "{chat:#?}"
    );
    // Nothing to pause now: the take goes ahead at once.
    assert_eq!(w.engine.pause_run(&w.engine.bot_ref("pausable").await.unwrap().id, Duration::from_secs(1)).await.unwrap(), None);
}

/// A paused run ends cleanly: Stop during the pause cancels it (the model is never called
/// again), and a pause nobody hands back ends when the person's control expires.
#[tokio::test]
async fn a_paused_run_ends_cleanly_when_stopped_or_never_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine));
    cfg.policy = Policy { control_ttl: 4_000, ..Policy::default() };
    let mut w = World { engine: Engine::open(cfg).await.unwrap(), dir, models: vec![], _turn: Turn::Shared(ALONE.read().await) };
    let server = ScriptedServer::start(vec![]).await;
    let (model, _) = w.model(&server, Wire::OpenAi).await;
    w.engine.create_bot("paused", ComputerScope::Team, Some(&model), "").await.unwrap();
    for stop in [true, false] {
        // A daemon the run leaves (its own session, no environment) ends when the run pauses:
        // nothing of the bot acts while the person has the screen.
        server.push(Step::reply(Reply::call("shell", json!({"command": "setsid env -i sleep 6003 >/dev/null 2>&1 </dev/null & sleep 1"}))));
        let before = server.requests().len();
        let engine = w.engine.clone();
        let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("paused").await.unwrap().id, "work").await });
        until_shell_runs(&w.engine, "paused").await;
        assert!(w.engine.pause_run(&w.engine.bot_ref("paused").await.unwrap().id, Duration::from_secs(120)).await.unwrap().is_some());
        let lease = w.engine.take_control(&w.engine.bot_ref("paused").await.unwrap().id).await.unwrap();
        let why = if stop {
            assert_eq!(w.engine.stop_bot(&w.engine.bot_ref("paused").await.unwrap().id).await.unwrap().len(), 1);
            "stopped by the person"
        } else {
            // The person walks away: their control lapses and the housekeeping (the app's, or
            // the paused run's own) ends the run.
            tokio::time::sleep(Duration::from_millis(4_500)).await;
            w.engine.expire().await.unwrap();
            "did not hand the screen back before their control expired"
        };
        let run = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the run ended").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
        assert!(run.error.as_deref().unwrap_or("").contains(why), "{run:?}");
        assert_eq!(server.requests().len(), before + 1, "the model was not called after the pause");
        if stop {
            // Stop ends the run, not the person's control: they release when they are done.
            assert_eq!(
                w.engine.release_control(&w.engine.bot_ref("paused").await.unwrap().id, &lease.lease_id, TakeoverResult::Finished, None).await.unwrap(),
                None
            );
        }
        assert!(w.engine.control_of(&w.engine.bot_ref("paused").await.unwrap().id).await.unwrap().is_none());
        let (_, left) = w.engine.shell(&w.bot("paused").await, "pgrep -af '[s]leep 6003' || true").await.unwrap();
        assert_eq!(left.trim(), "", "the paused run's daemon lives on");
        // The bot is free for the next task.
        server.push(Step::reply(Reply::text("ok")));
        assert_eq!(w.engine.run_task(&w.engine.bot_ref("paused").await.unwrap().id, "again").await.unwrap().status, RunStatus::Completed);
    }
    assert_eq!(server.failures(), Vec::<String>::new());
}

/// A pause that does not reach a step boundary in time is withdrawn: the person is told, and the
/// run goes on as if nobody had asked.
#[tokio::test]
async fn a_pause_not_reached_in_time_is_withdrawn_and_the_run_goes_on() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("busy", Wire::OpenAi, Default::default()).await;
    server.push(Step::reply(Reply::call("shell", json!({"command": "sleep 3"}))));
    server.push(Step::reply(Reply::text("done")));
    let engine = w.engine.clone();
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref("busy").await.unwrap().id, "work").await });
    until_shell_runs(&w.engine, "busy").await;
    let e = w.engine.pause_run(&w.engine.bot_ref("busy").await.unwrap().id, Duration::from_millis(500)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy, "{e:?}");
    assert!(e.message.contains("it goes on"), "{e:?}");
    let run = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the run ended").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(server.requests().len(), 2, "the run went on without pausing");
    let chat = w.engine.chat(&w.bot("busy").await, 20).await.unwrap();
    assert!(!chat.iter().any(|m| m.text.starts_with("Paused:")), "{chat:#?}");
}

/// A page that names in its title the last thing done to it: which button went down or up with
/// which keys held and where on the screen, double and triple clicks, the wheel's direction,
/// keys, and Shift held alone. (Event timestamps of XTEST input are not the real time here, so
/// how long a key was held is the tool's own word.)
const EVENTS_PAGE: &str = r#"<!doctype html><title>ready</title><body style="margin:0;height:3000px;width:3000px"><script>
const say = t => document.title = t;
const mods = e => (e.shiftKey ? 'shift ' : '') + (e.ctrlKey ? 'ctrl ' : '') + (e.altKey ? 'alt ' : '');
addEventListener('mousedown', e => say(`down ${e.button} ${mods(e)}at ${e.screenX},${e.screenY}`));
addEventListener('mouseup', e => say(`up ${e.button} ${mods(e)}at ${e.screenX},${e.screenY}`));
addEventListener('click', e => { if (e.detail >= 3) say(`click x${e.detail}`); });
addEventListener('dblclick', e => say('dblclick'));
addEventListener('contextmenu', e => e.preventDefault());
addEventListener('wheel', e => say(`wheel ${(e.deltaY || e.deltaX) > 0 ? 'down' : 'up'} ${mods(e)}`), { passive: true });
// Shift pressed and let go with nothing between: held (a shift-click has its click between).
let alone = false;
addEventListener('mousedown', () => { alone = false; }, true);
addEventListener('keydown', e => { alone = e.key === 'Shift'; say(`key ${e.key} ${mods(e)}`); });
addEventListener('keyup', e => { if (e.key === 'Shift' && alone) say('Shift held and let go'); alone = false; });
</script></body>"#;

/// Every action of Claude's computer tool (computer_20251124, whose actions include those of
/// computer_20250124) in the shapes Anthropic documents, sent by a scripted Claude and carried
/// out on a real desktop: none is an error, and each does what it says (read back from a page
/// that names in its title what was done to it, and from the pointer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claudes_whole_action_set_works_on_a_real_desktop() {
    let mut w = world().await;
    let server = w.bot_as("clicker", botdesk_core::ModelKind::Anthropic, "claude-opus-4-5").await;
    w.engine.files_write(&w.bot("clicker").await, "events.html", bytes::Bytes::from_static(EVENTS_PAGE.as_bytes()), false).await.unwrap();
    w.engine.open_path(&w.bot("clicker").await, "events.html").await.unwrap();
    // The computer tool's result says the active window's title: what the page saw last.
    let saw = |want: &'static str| {
        move |s: &Seen| match s.results.first() {
            Some(r) if !r.is_error && r.text.contains(&format!("active window \"{want}")) => Ok(()),
            other => Err(format!("expected the page to have seen {want:?}, got {other:?}")),
        }
    };
    let said = |want: &'static str| {
        move |s: &Seen| match s.results.first() {
            Some(r) if !r.is_error && r.text.contains(want) => Ok(()),
            other => Err(format!("expected a result saying {want:?}, got {other:?}")),
        }
    };
    let act = |v: serde_json::Value| Reply::call("computer", v);
    let steps = vec![
        Step::reply(act(json!({"action": "screenshot"}))),
        Step::check(said("Screen 1280x800"), act(json!({"action": "left_click", "coordinate": [640, 400], "key": "shift"}))),
        Step::check(saw("up 0 shift at 640,400"), act(json!({"action": "right_click", "coordinate": [650, 410]}))),
        Step::check(saw("up 2 at 650,410"), act(json!({"action": "middle_click", "coordinate": [660, 420]}))),
        Step::check(saw("up 1 at 660,420"), act(json!({"action": "double_click", "coordinate": [600, 400]}))),
        Step::check(saw("dblclick"), act(json!({"action": "triple_click", "coordinate": [600, 400]}))),
        Step::check(saw("click x3"), act(json!({"action": "mouse_move", "coordinate": [300, 200]}))),
        Step::check(said("cursor at (300, 200)"), act(json!({"action": "cursor_position"}))),
        Step::check(said("X=300,Y=200"), act(json!({"action": "left_click"}))),
        Step::check(saw("up 0 at 300,200"), act(json!({"action": "left_click", "coordinate": [640, 400], "text": "ctrl"}))),
        Step::check(saw("up 0 ctrl at 640,400"), act(json!({"action": "scroll", "coordinate": [640, 400], "scroll_direction": "down", "scroll_amount": 3}))),
        Step::check(saw("wheel down"), act(json!({"action": "scroll", "scroll_direction": "up", "scroll_amount": 2, "text": "alt"}))),
        Step::check(saw("wheel up alt"), act(json!({"action": "left_mouse_down"}))),
        Step::check(saw("down 0 at 640,400"), act(json!({"action": "left_mouse_up", "coordinate": [700, 450]}))),
        Step::check(saw("up 0 at 700,450"), act(json!({"action": "left_click_drag", "start_coordinate": [500, 300], "coordinate": [620, 380]}))),
        Step::check(saw("up 0 at 620,380"), act(json!({"action": "key", "text": "ctrl+a"}))),
        Step::check(saw("key a ctrl"), act(json!({"action": "type", "text": "hi"}))),
        Step::check(saw("key i"), act(json!({"action": "hold_key", "text": "shift", "duration": 1}))),
        Step::check(
            |s: &Seen| match s.results.first() {
                Some(r) if r.text.starts_with("Held shift for 1.0 s") && r.text.contains("active window \"Shift held and let go") => Ok(()),
                other => Err(format!("shift was not held alone: {other:?}")),
            },
            act(json!({"action": "key", "text": "x shift+y"})),
        ),
        Step::check(saw("key Y shift"), act(json!({"action": "wait", "duration": 6}))),
        Step::check(said("Waited 6.0 s"), act(json!({"action": "zoom", "region": [0, 0, 320, 200]}))),
        Step::check(said("shown enlarged at 640x400"), Reply::text("Done.")),
    ];
    for s in steps {
        server.push(s);
    }
    let run = w.engine.run_task(&w.engine.bot_ref("clicker").await.unwrap().id, "try every action").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
}

/// UI-TARS answering in its own text actions, in its own coordinates: UI-TARS-1.5 in pixels of
/// the 1288x812 image it makes of a 1280x800 screen, UI-TARS 1.0 in 0-1000; each click lands on
/// the pixel it meant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_tars_clicks_land_where_its_own_coordinates_say() {
    let mut w = world().await;
    for (bot, model, action, want) in [
        ("tars15", "ui-tars-1.5-7b", "click(start_box='(644,406)')", (640, 400)),
        ("tars10", "ui-tars-72b-dpo", "click(start_box='<|box_start|>(250,750)<|box_end|>')", (320, 600)),
    ] {
        let server = w.bot_as(bot, botdesk_core::ModelKind::OpenAiCompatible, model).await;
        server.push(Step::check(
            |s: &Seen| (s.images == 1).then_some(()).ok_or(format!("the first turn came without a screenshot ({} images)", s.images)),
            Reply::text(&format!("Thought: the button.\nAction: {action}")),
        ));
        server.push(Step::reply(Reply::text("Thought: done.\nAction: finished(content='Clicked.')")));
        let run = w.engine.run_task(&w.engine.bot_ref(bot).await.unwrap().id, "click the button").await.unwrap();
        assert_eq!(server.failures(), Vec::<String>::new(), "{model}");
        assert_eq!(run.status, RunStatus::Completed, "{model}: {run:?}");
        assert_eq!(w.engine.screenshot(&w.bot(bot).await, ImageFormat::Png).await.unwrap().cursor, want, "{model}");
        assert_eq!(w.engine.chat(&w.bot(bot).await, 1).await.unwrap()[0].text, "Thought: done.\nAction: finished(content='Clicked.')", "{model}");
    }
}

/// OpenAI's computer use (`computer-use-preview` and gpt-5.4's GA tool): a computer call with a
/// pending safety check makes the run ask the
/// person and wait (the bot shows as waiting for them); allowed, the call is carried out and the
/// check goes back acknowledged; declined with a note, the run fails as DECLINED with the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_safety_check_waits_for_the_persons_answer() {
    let mut w = world().await;
    for model in ["computer-use-preview", "gpt-5.4"] {
        safety_check_for(&mut w, model).await;
    }
}

async fn safety_check_for(w: &mut World, model: &str) {
    use botdesk_agent::scripted::Answer;
    let bot = format!("careful-{}", model.replace('.', "-"));
    let server = w.bot_as(&bot, botdesk_core::ModelKind::OpenAi, model).await;
    let check = |id: &str| json!({"id": id, "code": "sensitive_domain", "message": "The page looks like a bank."});
    let computer = |action: serde_json::Value, checks: Vec<serde_json::Value>| Reply::Answer(Answer { computer: vec![(action, checks)], ..Default::default() });
    server.push(Step::reply(computer(json!({"type": "keypress", "keys": ["CTRL", "L"]}), vec![check("cu_sc_1")])));
    server.push(Step::check(
        |s: &Seen| {
            let input = s.body["input"].as_array().cloned().unwrap_or_default();
            let out = input.iter().rfind(|i| i["type"] == "computer_call_output").cloned().unwrap_or_default();
            (out["acknowledged_safety_checks"][0]["id"] == "cu_sc_1" && out["output"]["image_url"].as_str().is_some_and(|u| u.starts_with("data:image/png")))
                .then_some(())
                .ok_or(format!("not acknowledged with a screenshot: {}", out.to_string().chars().take(300).collect::<String>()))
        },
        computer(json!({"type": "screenshot"}), vec![check("cu_sc_2")]),
    ));
    let (engine, name) = (w.engine.clone(), bot.clone());
    let run = tokio::spawn(async move { engine.run_task(&engine.bot_ref(&name).await.unwrap().id, "pay the bill").await });
    let asked = |w: &World| {
        let (engine, bot) = (w.engine.clone(), bot.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Some(q) = engine.open_question(&engine.bot_ref(&bot).await.unwrap()).await.unwrap() {
                    return q;
                }
                assert!(Instant::now() < deadline, "the run never asked");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let q = asked(w).await;
    assert!(q.question.contains("The page looks like a bank. (sensitive_domain)") && q.kind == "safety_check", "{q:?}");
    let states = w.engine.bot_statuses().await.unwrap();
    let (_, state) = states.iter().find(|(id, _)| *id == q.bot_id).unwrap();
    assert_eq!(*state, BotState { status: BotStatus::WaitingForYou, run: RunHold::AsksYou });
    w.engine.answer_question(&w.bot(&bot).await, Verdict::Allow, None).await.unwrap();
    let q2 = asked(w).await;
    assert_ne!(q2.id, q.id);
    w.engine.answer_question(&w.bot(&bot).await, Verdict::Deny, Some("not this site")).await.unwrap();
    let run = run.await.unwrap().unwrap();
    assert_eq!((run.status, run.failure), (RunStatus::Failed, Some(botdesk_core::RunFailure::Declined)), "{model}: {run:?}");
    assert!(run.error.as_deref().unwrap_or("").contains("not this site"), "{run:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    assert!(w.engine.answer_question(&w.bot(&bot).await, Verdict::Allow, None).await.unwrap_err().message.contains("nothing waiting for your answer"));
    let chat = w.engine.chat(&w.bot(&bot).await, 20).await.unwrap();
    assert!(
        chat.iter().any(|m| m.text.contains(&format!("{bot} asks you:"))) && chat.iter().any(|m| m.text.contains("You declined: not this site")),
        "{chat:?}"
    );
}

/// `model calibrate`: a scripted model that looks at the screenshot it is sent, finds the target
/// it is asked for there and clicks its centre, once in screenshot pixels and once in 0-1000:
/// the calibration says which space each points in (and nothing is set unless asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibration_tells_a_pixels_model_from_a_0_to_1000_one() {
    use base64::Engine as _;
    let mut w = world().await;
    for (space, scale) in [(action::CoordSpace::Pixels, (1.0, 1.0)), (action::CoordSpace::Thousandths, (1000.0 / 1280.0, 1000.0 / 800.0))] {
        let bot = unique("calib");
        let server = ScriptedServer::start(vec![]).await;
        // Set to pixels whatever it is: the calibration finds out.
        let (model, _) = w.model_in(&server, Wire::OpenAi, action::CoordSpace::Pixels).await;
        w.engine.create_bot(&bot, ComputerScope::Team, Some(&model), "").await.unwrap();
        for _ in 0..TARGETS.len() {
            server.push(Step::reply(Reply::Func(Box::new(move |s: &Seen| {
                let all = s.body.to_string();
                let n: usize = all.split("numbered ").nth(1).and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok()).unwrap();
                let url = all.split("data:image/png;base64,").nth(1).unwrap().split('"').next().unwrap();
                let png = base64::engine::general_purpose::STANDARD.decode(url).unwrap();
                let (w, h, rgb) = botdesk_core::screenshot::decode_png(&png, (1280, 800)).unwrap();
                let (x, y) = botdesk_engine::calibrate_targets(w, h, &rgb)[n - 1].unwrap();
                Reply::call("computer_act", json!({"actions": [{"type": "click", "x": (x as f64 * scale.0).round(), "y": (y as f64 * scale.1).round()}]}))
            }))));
        }
        let c = w.engine.calibrate(&model, &w.bot(&bot).await).await.unwrap();
        assert_eq!(server.failures(), Vec::<String>::new());
        assert_eq!(c.best, Some(space), "{c:?}");
        assert!(c.fits[0].mean_error <= 2.0, "{c:?}");
        assert_eq!(w.engine.model(&model).await.unwrap().coordinates, action::CoordSpace::Pixels, "only said, not set");
    }
}

/// A bot wipes part of its folder in a run (a mistake, or a page steering it): the run's file
/// changes are undone from the version it started from, on a Team computer, without touching
/// another bot's work nor what the person changed since (kept, and named); the undo itself can be
/// undone (the present was saved first), and one file comes back from an old version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_wipes_its_folder_is_undone_and_the_undo_too() {
    let mut w = world().await;
    let (server, _) = w.scripted_bot("wiper", Wire::Anthropic, action::CoordSpace::Pixels).await;
    let (_, _) = w.scripted_bot("bystander", Wire::Anthropic, action::CoordSpace::Pixels).await;
    let text = |b: bytes::Bytes| String::from_utf8(b.to_vec()).unwrap();
    let write = async |bot: &'static str, p: &'static str, body: &'static str| {
        w.engine.files_write(&w.bot(bot).await, p, bytes::Bytes::from_static(body.as_bytes()), false).await
    };
    write("wiper", "notes/plan.md", "# Plan\n").await.unwrap();
    write("wiper", "draft.txt", "draft 1\n").await.unwrap();
    write("bystander", "mine.txt", "before\n").await.unwrap();
    server.push(Step::reply(Reply::call("shell", json!({"command": "echo changed-by-run > draft.txt && rm -rf notes && echo wiped"}))));
    server.push(Step::check(|s: &Seen| s.body.to_string().contains("wiped").then_some(()).ok_or("no output".into()), Reply::text("Cleaned up.")));
    let run = w.engine.run_task(&w.engine.bot_ref("wiper").await.unwrap().id, "clean up").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    assert!(w.engine.files_read(&w.bot("wiper").await, "notes/plan.md", 100).await.is_err(), "the run removed it");
    // Since the run: the other bot works on, and the person edits the draft and adds a file.
    write("bystander", "mine.txt", "after\n").await.unwrap();
    write("wiper", "draft.txt", "edited by me\n").await.unwrap();
    write("wiper", "late.txt", "added later\n").await.unwrap();

    let h = w.engine.history(&w.bot("wiper").await).await.unwrap();
    let labels: Vec<&str> = h.versions.iter().map(|v| v.label.as_str()).collect();
    let short = &run.id[..8];
    assert_eq!(labels, [format!("after run {short}"), format!("before run {short}")], "{h:?}");
    assert_eq!(h.versions[0].changes, Changes { written: 1, removed: 1, bytes: 15 }, "{h:?}");
    assert!(h.versions[0].current && h.disk_bytes > 0);
    let chat = w.engine.chat(&w.bot("wiper").await, 10).await.unwrap();
    assert_eq!(chat.last().unwrap().files_changed, Some(2), "the chat offers to undo the run's 2 file changes");

    let r = w.engine.undo_run(&run.id).await.unwrap();
    assert_eq!(
        (r.from, r.saved, r.version, r.live, r.kept.clone()),
        (1, Some(3), 4, true, vec![format!("bots/{}/draft.txt", w.engine.bot("wiper").await.unwrap().id)]),
        "{r:?}"
    );
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "notes/plan.md", 100).await.unwrap()), "# Plan\n", "what the run removed is back");
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "draft.txt", 100).await.unwrap()), "edited by me\n", "what changed since is kept");
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "late.txt", 100).await.unwrap()), "added later\n");
    assert_eq!(text(w.engine.files_read(&w.bot("bystander").await, "mine.txt", 100).await.unwrap()), "after\n", "another bot's work is not touched");
    let h = w.engine.history(&w.bot("wiper").await).await.unwrap();
    assert_eq!((h.versions[0].label.as_str(), h.versions[0].changes.written), (format!("undid run {short}").as_str(), 1), "{h:?}");
    // And back: the undo undone from the version saved before it.
    w.engine.restore(&w.bot("wiper").await, r.saved.unwrap(), None).await.unwrap();
    assert!(w.engine.files_read(&w.bot("wiper").await, "notes/plan.md", 100).await.is_err());
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "late.txt", 100).await.unwrap()), "added later\n");
    // One file of an old version, browsed first.
    assert_eq!(text(w.engine.stored_read_at(&w.bot("wiper").await, "notes/plan.md", 100, Some(1)).await.unwrap()), "# Plan\n");
    w.engine.restore(&w.bot("wiper").await, 1, Some("notes/plan.md")).await.unwrap();
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "notes/plan.md", 100).await.unwrap()), "# Plan\n");
    assert_eq!(text(w.engine.files_read(&w.bot("wiper").await, "draft.txt", 100).await.unwrap()), "edited by me\n", "only that file came back");
    // The bot plants a link where a restore lands, a FIFO over its draft and a read-only folder
    // in the way: the restores replace them, and nothing is followed, on the host (the version
    // made from the present holds the link) or in the computer.
    let (code, out) = w
        .engine
        .shell(&w.bot("wiper").await, "rm -rf notes && ln -s /etc notes && rm draft.txt && mkfifo draft.txt && mkdir -p ro/in && chmod 555 ro && echo planted")
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    w.engine.restore(&w.bot("wiper").await, 1, Some("notes/plan.md")).await.unwrap();
    w.engine.restore(&w.bot("wiper").await, 1, Some("draft.txt")).await.unwrap();
    let (code, out) = w
        .engine
        .shell(&w.bot("wiper").await, "test -d notes && ! test -L notes && cat notes/plan.md draft.txt && ls /etc/plan.md 2>&1; stat -c %a ro")
        .await
        .unwrap();
    assert_eq!((code, out.as_str()), (0, "# Plan\ndraft 1\nls: cannot access '/etc/plan.md': No such file or directory\n555\n"));
    let e = w.engine.restore(&w.bot("wiper").await, 1, Some("nothing/here")).await.unwrap_err();
    assert!(e.message.contains("nothing/here is not in version 1"), "{e}");
    let e = w.engine.restore(&w.bot("wiper").await, 99, None).await.unwrap_err();
    assert!(e.message.contains("wiper has no version 99"), "{e}");
}

/// The tests' web site (served by `cargo xtask test` in a network namespace of its own): its
/// private address.
fn test_site() -> String {
    std::env::var("BOTDESK_TEST_SITE").expect("`cargo xtask test` serves the tests' web site and names it in BOTDESK_TEST_SITE")
}

/// Lines of the bot's activity that are network refusals.
async fn refusals(engine: &Engine, bot: &str) -> Vec<String> {
    engine.activity(&engine.bot_ref(bot).await.unwrap(), 0, 500).await.unwrap().into_iter().filter(|a| a.kind == NETWORK_ACTIVITY).map(|a| a.target).collect()
}

/// A bot's network policy, from the person's word to the computer: under `open` the site's
/// private address is refused to a command and to the browser (over TLS too), each with a page
/// that says why, and the run's model is told; `allow` with the address, then with a name mapped
/// to it, lets exactly that through; `offline` closes a connection already open (how soon: the
/// bench) and leaves no name server; every refusal is in the bot's activity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_network_policy_holds_for_its_commands_and_browser_and_every_refusal_is_in_its_activity() {
    let site = test_site();
    let mut w = world().await;
    let (server, _) = w.scripted_bot("wanderer", Wire::Anthropic, action::CoordSpace::Pixels).await;
    let (http, https) = (format!("http://{site}:8080/"), format!("https://{site}:8443/"));
    let told = format!("The network policy the person set for you refused: blocked: {site}:8080, a private address");
    server.push(Step::reply(Reply::call("shell", json!({"command": format!("curl -sS --max-time 20 {http}")}))));
    let nav = http.clone();
    server.push(Step::check(
        move |s| {
            ok_result(s, "Botdesk blocked this page")?;
            ok_result(s, &told)
        },
        Reply::call("browser_navigate", json!({ "url": nav })),
    ));
    server.push(Step::check(|s| ok_result(s, "Blocked by Botdesk"), Reply::call("browser_navigate", json!({ "url": https }))));
    server.push(Step::check(|s| ok_result(s, "Blocked by Botdesk"), Reply::text("Refused everywhere.")));
    let run = w.engine.run_task(&w.engine.bot_ref("wanderer").await.unwrap().id, "visit the site").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let seen = refusals(&w.engine, "wanderer").await;
    for want in [format!("blocked: {site}:8080, a private address"), format!("blocked: {site}:8443, a private address")] {
        assert!(seen.iter().any(|l| l.starts_with(&want)), "{want} not in {seen:?}");
    }
    // The run's replay has each refusal where it happened: after the command that was refused.
    let replay = w.engine.replay_view(&w.bot("wanderer").await, None).await.unwrap();
    let kinds: Vec<(ReplayKind, &str)> = replay.steps.iter().map(|s| (s.kind, s.title.as_str())).collect();
    let first = replay.steps.iter().position(|s| s.kind == ReplayKind::Network).unwrap_or_else(|| panic!("no refusal in the replay: {kinds:?}"));
    assert!(replay.steps[first].text.starts_with(&format!("blocked: {site}:8080, a private address")), "{:?}", replay.steps[first]);
    assert_eq!(replay.steps[first - 1].title, "shell", "{kinds:?}");
    assert_eq!(replay.steps.iter().filter(|s| s.kind == ReplayKind::Network).count(), 2, "{kinds:?}");

    // Allowed by its address (a private one): the command and the browser reach it.
    let policy = w.engine.set_bot_network(&w.bot("wanderer").await, NetPolicy::from_words(&["allow".into(), site.clone()]).unwrap()).await.unwrap();
    assert_eq!(w.engine.bot_network(&w.bot("wanderer").await).await.unwrap(), policy);
    let curl = |url: String| format!("curl -sS --max-time 20 {url}");
    let (code, out) = w.engine.shell(&w.bot("wanderer").await, &curl(http.clone())).await.unwrap();
    assert_eq!((code, out.contains("hello from the test site")), (0, true), "{out}");
    let page = w.engine.browser_navigate(&w.bot("wanderer").await, &http).await.unwrap();
    assert_eq!(page["title"], "Test site", "{page}");

    // Allowed by a name: that name alone (another name for the same address, or the address,
    // is refused).
    let bot = w.engine.list_bots().await.unwrap().into_iter().find(|b| b.name == "wanderer").unwrap();
    let hosts = format!("echo '{site} web.test other.test' >> /etc/hosts");
    let mapped = std::process::Command::new("docker").args(["exec", "-u", "0", &container_of(bot.computer.id.as_str()), "sh", "-c", &hosts]).output().unwrap();
    assert!(mapped.status.success(), "{mapped:?}");
    w.engine.set_bot_network(&w.bot("wanderer").await, NetPolicy::from_words(&["allow".into(), "web.test".into()]).unwrap()).await.unwrap();
    let (code, out) = w.engine.shell(&w.bot("wanderer").await, &curl("http://web.test:8080/".into())).await.unwrap();
    assert_eq!((code, out.contains("hello from the test site")), (0, true), "{out}");
    for url in ["http://other.test:8080/".to_string(), http.clone()] {
        let (_, out) = w.engine.shell(&w.bot("wanderer").await, &curl(url.clone())).await.unwrap();
        assert!(out.contains("not on the allowlist"), "{url}: {out}");
    }
    let page = w.engine.browser_navigate(&w.bot("wanderer").await, "http://web.test:8080/").await.unwrap();
    assert_eq!(page["title"], "Test site", "{page}");

    // Offline: a connection open through the allowed name is closed within seconds; nothing is
    // reached, not even the name server.
    let stream = "(curl -sSN http://web.test:8080/stream; echo ended) > stream.log 2>&1";
    let (code, _) = w.engine.shell(&w.bot("wanderer").await, &format!("setsid -f sh -c '{stream}' </dev/null >/dev/null 2>&1")).await.unwrap();
    assert_eq!(code, 0);
    let t0 = Instant::now();
    while !w
        .engine
        .files_read(&w.bot("wanderer").await, "stream.log", 1 << 20)
        .await
        .map(|b| String::from_utf8_lossy(&b).matches("tick").count() >= 2)
        .unwrap_or(false)
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "the stream never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.engine.set_bot_network(&w.bot("wanderer").await, NetPolicy::Offline).await.unwrap();
    let set = Instant::now();
    while !w.engine.files_read(&w.bot("wanderer").await, "stream.log", 1 << 20).await.map(|b| String::from_utf8_lossy(&b).contains("ended")).unwrap_or(false) {
        // How soon is measured by `cargo xtask bench` (docs/benchmarks.md); here it must end.
        assert!(set.elapsed() < Duration::from_secs(60), "the open connection was never closed after offline");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, out) = w.engine.shell(&w.bot("wanderer").await, &curl("http://web.test:8080/".into())).await.unwrap();
    assert!(out.contains("this bot is offline"), "{out}");
    let dns = "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.11\", 53))'";
    let (code, out) = w.engine.shell(&w.bot("wanderer").await, dns).await.unwrap();
    assert!(code != 0 && out.contains("Operation not permitted"), "the name server answered an offline bot: {out}");

    let seen = refusals(&w.engine, "wanderer").await;
    for want in [
        format!("blocked: {site}:8080, not on the allowlist"),
        "blocked: other.test:8080, not on the allowlist".to_string(),
        "blocked: web.test:8080, this bot is offline (an open connection was closed)".to_string(),
        "blocked: web.test:8080, this bot is offline".to_string(),
    ] {
        assert!(seen.contains(&want), "{want:?} not in {seen:?}");
    }
}

/// Every file under `dir`, as bytes, searched for each of `needles`: the ones found.
fn found_under(dir: &std::path::Path, needles: &[&str]) -> Vec<String> {
    let mut found = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let (path, kind) = (e.path(), e.file_type().unwrap());
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                for n in needles {
                    if bytes.windows(n.len()).any(|w| w == n.as_bytes()) {
                        found.push(format!("{n:?} in {}", path.display()));
                    }
                }
            }
        }
    }
    found
}

/// A login the person saved, used by a scripted run: `fill_login` on a page of another origin
/// fills nothing and says why; on the login's site it fills the user name, the password and a
/// fresh one-time code, and the page, once submitted, welcomes the user with that code. The
/// password and the seed are found nowhere: not in any request to the model, the chat, the
/// activity, the data directory (its database, recordings and checkpoints) or the computer's
/// files (the bot's browser profile among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_login_is_filled_on_its_site_only_and_its_secrets_are_found_nowhere() {
    let (site, public) = (test_site(), std::env::var("BOTDESK_TEST_SITE_PUBLIC").expect("BOTDESK_TEST_SITE_PUBLIC"));
    let mut w = world().await;
    let (server, _) = w.scripted_bot("keeper", Wire::Anthropic, action::CoordSpace::Pixels).await;
    w.engine.set_bot_network(&w.bot("keeper").await, NetPolicy::from_words(&["allow".into(), site.clone(), public.clone()]).unwrap()).await.unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let password = format!("pw-{id}");
    // 32 base32 characters (20 bytes), as an authenticator app shows a seed.
    let seed: String = id.chars().map(|c| "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".as_bytes()[c.to_digit(16).unwrap() as usize * 2] as char).collect();
    let origin = format!("http://{public}:8080");
    let new = NewLogin { site: format!("{origin}/login"), username: "ada".into(), password: password.clone(), code_seed: Some(seed.clone()) };
    let saved = w.engine.add_login(&w.bot("keeper").await, new).await.unwrap();
    assert_eq!((saved.site.as_str(), saved.has_code), (origin.as_str(), true));
    let check = hex::encode(sha2::Sha256::digest(password.as_bytes()));
    let (elsewhere, mine) = (format!("http://{site}:8080/login?check={check}"), format!("{origin}/login?check={check}"));

    let offered = origin.clone();
    server.push(Step::check(
        move |s| s.body["tools"].to_string().contains(&offered).then_some(()).ok_or("fill_login is not offered with its site".into()),
        Reply::call("browser_navigate", json!({ "url": elsewhere })),
    ));
    server.push(Step::check(|s| ok_result(s, "Log in"), Reply::call("fill_login", json!({ "site": origin }))));
    let refused = format!("not {origin}: nothing was filled");
    server.push(Step::check(
        move |s| match s.results.first() {
            Some(r) if r.is_error && r.text.contains(&refused) => Ok(()),
            other => Err(format!("fill_login on another origin: {other:?}")),
        },
        Reply::call("browser_snapshot", json!({})),
    ));
    server.push(Step::check(
        |s| {
            let text = &s.results.first().ok_or("no snapshot")?.text;
            (!text.contains("********") && !text.contains("\"ada\"")).then_some(()).ok_or(format!("the other origin's page got something: {text}"))
        },
        Reply::call("browser_navigate", json!({ "url": mine })),
    ));
    server.push(Step::check(|s| ok_result(s, "Log in"), Reply::call("fill_login", json!({ "site": origin }))));
    server.push(Step::check(|s| ok_result(s, "Filled the user name, password, one-time code on"), Reply::call("browser_snapshot", json!({}))));
    server.push(Step::check(
        |s| ok_result(s, "= \"********\""),
        Reply::Func(Box::new(|s: &Seen| match element_ref(&s.results[0].text, "button", "Log in") {
            Some(button) => Reply::call("browser_act", json!({"actions": [{"action": "click", "ref": button}]})),
            None => Reply::text(&format!("no Log in button: {}", s.results[0].text)),
        })),
    ));
    server.push(Step::check(|s| ok_result(s, "welcome ada, code "), Reply::text("Logged in.")));
    let run = w.engine.run_task(&w.engine.bot_ref("keeper").await.unwrap().id, "log in to the site").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");

    // The code the page got is the seed's code of that moment.
    let welcome = server.requests().last().unwrap().results[0].text.clone();
    let given = welcome.split("welcome ada, code ").nth(1).unwrap_or("").chars().take(6).collect::<String>();
    let seed_bytes = botdesk_core::login::totp_seed(&seed).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!((0..6).any(|k| botdesk_core::login::totp(&seed_bytes, now - k * 30) == given), "the page got {given:?}, not a code of the seed");

    // Each use is in the activity, and says what was filled, never with what.
    let activity = w.engine.activity(&w.bot("keeper").await, 0, 500).await.unwrap();
    let fills: Vec<(&str, botdesk_core::ActivityStatus)> =
        activity.iter().filter(|a| a.kind == "fill_login").map(|a| (a.output_tail.as_str(), a.status)).collect();
    assert_eq!(fills.len(), 2, "{fills:?}");
    assert!(fills[0].1 == botdesk_core::ActivityStatus::Error && fills[0].0.contains("nothing was filled"), "{fills:?}");
    assert!(fills[1].1 == botdesk_core::ActivityStatus::Done && fills[1].0.contains("user name, password, one-time code"), "{fills:?}");

    // The secrets are found nowhere.
    let secrets = [password.as_str(), seed.as_str()];
    for (i, seen) in server.requests().iter().enumerate() {
        let body = seen.body.to_string();
        assert!(!secrets.iter().any(|s| body.contains(s)), "model request {i} holds a secret");
    }
    let chat = serde_json::to_string(&w.engine.chat(&w.bot("keeper").await, 500).await.unwrap()).unwrap();
    let activity = serde_json::to_string(&activity).unwrap();
    assert!(!secrets.iter().any(|s| chat.contains(s) || activity.contains(s)), "a secret is in the chat or the activity");
    let bot = w.engine.list_bots().await.unwrap().into_iter().find(|b| b.name == "keeper").unwrap();
    // The secrets go to grep on its stdin: no process list shows them.
    let mut grep = std::process::Command::new("docker")
        .args(["exec", "-i", "-u", "0", &container_of(bot.computer.id.as_str()), "grep", "-rlF", "-f", "-", "/home", "/tmp", "/var/lib/botdesk-screen"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut grep.stdin.take().unwrap(), format!("{password}\n{seed}\n").as_bytes()).unwrap();
    let grep = grep.wait_with_output().unwrap();
    assert_eq!(grep.status.code(), Some(1), "a secret is in the computer's files: {}", String::from_utf8_lossy(&grep.stdout));
    assert_eq!(found_under(w.dir.path(), &secrets), Vec::<String>::new(), "a secret is in the data directory");

    // Removed, it is gone from the keyring too.
    w.engine.remove_login(&w.bot("keeper").await, &origin).await.unwrap();
    assert_eq!(w.engine.logins(&w.bot("keeper").await).await.unwrap(), vec![]);
    assert_eq!(w.engine.fill_login(&w.bot("keeper").await, &origin).await.unwrap_err().code, ErrorCode::NotFound);
}

//! The screen gateway's golden fixtures (`infra/sandboxes/computer/protocol.json`), replayed by
//! the Rust types here and by the gateway's own code (`botdesk_gateway.self_test`) under the
//! machine's Python: both ends speak what the fixtures write.

use botdesk_core::action::Settled;
use botdesk_core::gateway::{AgentAnswer, AgentRequest, Greeting, RefusalCode, Settle};
use botdesk_core::BrowserCommand;
use serde_json::Value;
use std::path::PathBuf;

fn computer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/sandboxes/computer")
}

fn fixtures() -> Value {
    serde_json::from_str(&std::fs::read_to_string(computer_dir().join("protocol.json")).unwrap()).unwrap()
}

fn case<'a>(fx: &'a Value, list: &str, name: &str) -> &'a Value {
    fx[list].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {list} fixture {name}"))
}

#[test]
fn requests_are_written_as_the_fixtures_say() {
    let fx = fixtures();
    let token = "0123456789abcdef0123456789abcdef";
    let navigate = BrowserCommand::Navigate { url: "https://example.org/".into() };
    let runs = vec![["mousemove", "10", "20", "click", "1"].map(String::from).to_vec(), ["type", "--delay", "12", "--", "hi"].map(String::from).to_vec()];
    let ours = [
        ("ping", AgentRequest::Ping { display: 0 }),
        ("revoke_display", AgentRequest::Revoke { display: 3, token: None }),
        ("revoke_token", AgentRequest::Revoke { display: 0, token: Some(token) }),
        ("extend", AgentRequest::Extend { display: 0, token, expires: 1_764_000_000_000 }),
        ("shot", AgentRequest::Shot { display: 1 }),
        ("info", AgentRequest::Info { display: 1 }),
        ("browser_navigate", AgentRequest::Browser { display: 2, command: &navigate }),
        ("browser_view", AgentRequest::Browser { display: 2, command: &BrowserCommand::View }),
        ("xdotool", AgentRequest::Xdotool { display: 1, runs: &runs, settle: Settle { still_ms: 300, cap_ms: 3000 } }),
    ];
    assert_eq!(ours.len(), fx["requests"].as_array().unwrap().len(), "every request fixture is built here");
    for (name, req) in ours {
        let line = req.line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "{name}: one line");
        let written: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(written, case(&fx, "requests", name)["line"], "{name}");
        assert_eq!(written["op"], req.op(), "{name}");
    }
}

#[test]
fn answers_read_as_the_fixtures_mean() {
    let fx = fixtures();
    let read = |name: &str| AgentAnswer::parse(case(&fx, "answers", name)["line"].to_string().as_bytes()).unwrap();
    assert!(read("pong").ok && read("pong").refusal().is_none());
    assert_eq!(read("revoked").removed, Some(2));
    assert_eq!(read("extended").refusal(), None);
    assert_eq!(read("not_extended").refusal().as_deref(), Some("unknown, revoked or expired token"));
    assert_eq!(read("shot").len, Some(4));
    assert_eq!(read("info").pointer(), ((10, 20), Some("xterm".into())));
    assert_eq!(read("info_no_window").pointer(), ((0, 0), None));
    assert_eq!(read("browser").result.unwrap()["title"], "Example");
    assert_eq!(read("settled").settled(), Ok(Settled::Still { ms: 420 }));
    assert_eq!(read("unwatched").settled(), Ok(Settled::Unwatched));
    let no_browser = read("no_browser");
    assert_eq!((no_browser.code, no_browser.refusal().as_deref()), (Some(RefusalCode::NoBrowser), Some("display :2 has no browser")));
    assert_eq!(read("failed").refusal().as_deref(), Some("unknown op 'teleport'"));
    assert_eq!(fx["answers"].as_array().unwrap().len(), 12, "every answer fixture is read here");
}

#[test]
fn greetings_read_as_the_fixtures_mean() {
    let fx = fixtures();
    for g in fx["greetings"].as_array().unwrap() {
        let line = g["line"].as_str().unwrap().strip_suffix('\n').unwrap();
        let expected = if g["granted"] == true { Greeting::Granted } else { Greeting::Refused(g["why"].as_str().unwrap().into()) };
        assert_eq!(Greeting::parse(line.as_bytes()), expected);
    }
}

/// The gateway's own code makes the same answers and accepts the same requests.
#[test]
fn the_gateway_replays_the_same_fixtures() {
    let dir = computer_dir();
    let out = std::process::Command::new("python3")
        .args(["-I", "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import botdesk_gateway as g; sys.exit(g.self_test(sys.argv[2]))"])
        .arg(&dir)
        .arg(dir.join("protocol.json"))
        .output()
        .expect("python3 runs (cargo xtask test installs it)");
    assert!(out.status.success(), "the gateway's self-test failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

//! Golden fixtures both sides of the computer's edge replay: the screen gateway's protocol
//! (`infra/sandboxes/computer/protocol.json`; the Rust types here, the gateway's own code in the
//! computer) and the workspace path rules (`paths.json`; `WorkspacePath` here, the helper in the
//! computer, and `botdesk-read`, its file reader in Perl). Each side in the computer runs its own
//! self-test under the machine's Python or Perl.

use botdesk_core::action::Settled;
use botdesk_core::gateway::{AgentAnswer, AgentRequest, Greeting, LookWish, NetAfter, RefusalCode, Settle};
use botdesk_core::{BrowserCommand, PathError, WorkspacePath};
use serde_json::Value;
use std::path::PathBuf;

fn computer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/sandboxes/computer")
}

fn fixtures_of(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(computer_dir().join(file)).unwrap()).unwrap()
}

fn fixtures() -> Value {
    fixtures_of("protocol.json")
}

/// Runs `module.self_test(fixtures)` from the computer's own code; its failures, if any.
fn python_self_test(module: &str, fixtures: &str) {
    python_test(module, "self_test", fixtures)
}

/// Runs `module.function(fixtures)` of the computer's Python, which returns how many cases failed.
fn python_test(module: &str, function: &str, fixtures: &str) {
    let dir = computer_dir();
    let out = std::process::Command::new("python3")
        .args([
            "-I",
            "-B",
            "-c",
            "import sys, importlib; sys.path.insert(0, sys.argv[1]); sys.exit(getattr(importlib.import_module(sys.argv[2]), sys.argv[3])(sys.argv[4]))",
        ])
        .arg(&dir)
        .arg(module)
        .arg(function)
        .arg(dir.join(fixtures))
        .output()
        .expect("python3 runs (cargo xtask test installs it)");
    assert!(out.status.success(), "{module}.{function} of {fixtures} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

fn case<'a>(fx: &'a Value, list: &str, name: &str) -> &'a Value {
    fx[list].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {list} fixture {name}"))
}

#[test]
fn requests_are_written_as_the_fixtures_say() {
    let fx = fixtures();
    let token = "0123456789abcdef0123456789abcdef";
    let navigate = BrowserCommand::Navigate { url: "https://example.org/".into() };
    let fill = BrowserCommand::FillLogin {
        origin: "https://example.org".into(),
        user: "ada".into(),
        password: botdesk_core::login::Secret::new("correct horse".into()),
        code: Some("123456".into()),
    };
    assert!(!format!("{fill:?}").contains("correct horse"), "a password never shows in Debug");
    let guard =
        botdesk_core::Approvals { downloads: true, forms: vec!["shop.example".into()], always: vec!["download files.example".into()], ..Default::default() };
    let runs = vec![["mousemove", "10", "20", "click", "1"].map(String::from).to_vec(), ["type", "--delay", "12", "--", "hi"].map(String::from).to_vec()];
    let click = vec![vec!["click".to_string(), "1".to_string()]];
    let ours = [
        ("ping", AgentRequest::Ping { display: 0 }),
        ("revoke_display", AgentRequest::Revoke { display: 3, token: None }),
        ("revoke_token", AgentRequest::Revoke { display: 0, token: Some(token) }),
        ("extend", AgentRequest::Extend { display: 0, token, expires: 1_764_000_000_000 }),
        ("look", AgentRequest::Look { display: 1, zlib: false }),
        ("look_zlib", AgentRequest::Look { display: 1, zlib: true }),
        ("browser_navigate", AgentRequest::Browser { display: 2, command: &navigate }),
        ("browser_view", AgentRequest::Browser { display: 2, command: &BrowserCommand::View }),
        ("browser_fill_login", AgentRequest::Browser { display: 2, command: &fill }),
        ("guard", AgentRequest::Guard { display: 2, policy: Some(&guard) }),
        ("guard_off", AgentRequest::Guard { display: 2, policy: None }),
        ("approve", AgentRequest::Approve { display: 2, id: 3, allow: false }),
        ("net", AgentRequest::Net { display: 0, uid: 2001, after: 7 }),
        ("xdotool", AgentRequest::Xdotool { display: 1, runs: &runs, settle: Settle { still_ms: 300, cap_ms: 3000 }, look: None, net: None }),
        (
            "xdotool_then_look_and_net",
            AgentRequest::Xdotool {
                display: 1,
                runs: &click,
                settle: Settle { still_ms: 0, cap_ms: 3000 },
                look: Some(LookWish { zlib: false }),
                net: Some(NetAfter { uid: 2001, after: 7 }),
            },
        ),
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
fn the_home_streams_limits_are_the_fixtures() {
    use botdesk_core::home_stream::{MAX_EXTENTS, MAX_FILE, MAX_HEADER, MAX_PATH};
    let limits = &fixtures_of("home_stream.json")["limits"];
    let ours = [("max_header", MAX_HEADER as u64), ("max_path", MAX_PATH as u64), ("max_extents", MAX_EXTENTS as u64), ("max_file", MAX_FILE)];
    for (name, value) in ours {
        assert_eq!(limits[name].as_u64(), Some(value), "{name}");
    }
    assert_eq!(limits.as_object().unwrap().len(), ours.len());
    python_test("botdesk_helper", "limits_test", "home_stream.json");
}

#[test]
fn the_settle_bounds_are_the_fixtures() {
    let fx = fixtures();
    let bounds = (fx["settle"]["max_still_ms"].as_u64(), fx["settle"]["max_cap_ms"].as_u64());
    assert_eq!(bounds, (Some(botdesk_core::gateway::MAX_SETTLE_STILL_MS), Some(botdesk_core::gateway::MAX_SETTLE_CAP_MS)));
    assert_eq!(Settle::after_batch(60_000), Settle { still_ms: 5_000, cap_ms: 5_000 });
    assert_eq!(Settle::after_batch(300), Settle { still_ms: 300, cap_ms: botdesk_core::action::SETTLE_CAP_MS });
}

#[test]
fn answers_read_as_the_fixtures_mean() {
    let fx = fixtures();
    let read = |name: &str| AgentAnswer::parse(case(&fx, "answers", name)["line"].to_string().as_bytes()).unwrap();
    assert!(read("pong").ok && read("pong").refusal().is_none());
    assert_eq!(read("revoked").removed, Some(2));
    assert_eq!(read("extended").refusal(), None);
    assert_eq!(read("not_extended").refusal().as_deref(), Some("unknown, revoked or expired token"));
    assert_eq!((read("look").len, read("look").zlib, read("look").pointer()), (Some(4), None, ((10, 20), Some("xterm".into()))));
    let lz = read("look_zlib_no_window");
    assert_eq!((lz.len, lz.zlib, lz.pointer()), (Some(4), Some(true), ((0, 0), None)));
    let both = read("settled_then_look_and_net");
    assert_eq!((both.settled(), both.len, both.pointer()), (Ok(Settled::Unwatched), Some(4), ((10, 20), Some("xterm".into()))));
    assert_eq!(both.refusals().map(|r| (r.boot, r.next, r.refusals.len())), Ok(("0123456789abcdef".to_string(), 9, 0)));
    assert_eq!(read("browser").result.unwrap()["title"], "Example");
    assert_eq!(read("settled").settled(), Ok(Settled::Still { ms: 420 }));
    assert_eq!(read("unwatched").settled(), Ok(Settled::Unwatched));
    let no_browser = read("no_browser");
    assert_eq!((no_browser.code, no_browser.refusal().as_deref()), (Some(RefusalCode::NoBrowser), Some("display :2 has no browser")));
    assert_eq!(read("failed").refusal().as_deref(), Some("unknown op 'teleport'"));
    let net = read("net").refusals().unwrap();
    assert_eq!((net.boot.as_str(), net.next, net.refusals[0].line()), ("0123456789abcdef", 9, "blocked: example.com:443, not on the allowlist".to_string()));
    let pending = read("guard").pending.unwrap();
    assert_eq!((pending[0].id, pending[0].kind, pending[0].host.as_str()), (3, botdesk_core::ApprovalKind::Form, "shop.example"));
    assert_eq!(read("approved").done, Some(true));
    assert_eq!(fx["answers"].as_array().unwrap().len(), 15, "every answer fixture is read here");
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

#[test]
fn proofs_are_made_as_the_fixtures_say() {
    let fx = fixtures();
    for p in fx["proofs"].as_array().unwrap() {
        assert_eq!(botdesk_core::gateway::proof(p["token"].as_str().unwrap(), p["message"].as_str().unwrap()), p["proof"].as_str().unwrap(), "{}", p["name"]);
    }
}

/// The gateway's own code makes the same answers and accepts the same requests.
#[test]
fn the_gateway_replays_the_same_fixtures() {
    python_self_test("botdesk_gateway", "protocol.json");
}

#[test]
fn paths_split_or_escape_as_the_fixtures_say() {
    for case in fixtures_of("paths.json")["paths"].as_array().unwrap() {
        let input = case["input"].as_str().unwrap();
        match WorkspacePath::parse(input) {
            Ok(p) => {
                let parts: Vec<&str> = p.components().collect();
                let want: Vec<&str> =
                    case["parts"].as_array().unwrap_or_else(|| panic!("{input:?} should escape")).iter().map(|v| v.as_str().unwrap()).collect();
                assert_eq!(parts, want, "{input:?}");
            }
            Err(PathError::Escapes(_)) => assert_eq!(case["escapes"], true, "{input:?} escaped"),
            Err(e) => panic!("{input:?}: {e}"),
        }
    }
}

#[test]
fn links_land_where_the_fixtures_say() {
    for case in fixtures_of("paths.json")["links"].as_array().unwrap() {
        let (link, target) = (case["link"].as_str().unwrap(), case["target"].as_str().unwrap());
        let lands = WorkspacePath::parse(link).unwrap().symlink_destination(target);
        assert_eq!(lands.as_ref().map(WorkspacePath::as_str), case["lands"].as_str(), "{link} -> {target}");
    }
}

/// The helper's own code splits paths and follows links the same way.
#[test]
fn the_helper_replays_the_same_fixtures() {
    python_self_test("botdesk_helper", "paths.json");
}

/// So does `botdesk-read`, the helper's `read` in Perl (it starts in a fraction of Python's time).
#[test]
fn the_reader_replays_the_same_fixtures() {
    let dir = computer_dir();
    let out = std::process::Command::new("perl")
        .arg(dir.join("botdesk-read"))
        .arg("self-test")
        .arg(dir.join("paths.json"))
        .output()
        .expect("perl runs (Debian's perl-base is always there)");
    assert!(out.status.success(), "botdesk-read's self-test of paths.json failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

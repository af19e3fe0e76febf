//! The `botdesk` binary against the real Docker engine and real SQLite, as a person would use it.

mod vnc;

use serde_json::Value;
use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output},
};

const BIN: &str = env!("CARGO_BIN_EXE_botdesk");

/// A data directory of its own; every computer in it is destroyed when the test ends.
struct Data {
    dir: tempfile::TempDir,
}

impl Data {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--data-dir").arg(self.path()).args(args);
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
    /// Adds a model pointing at the scripted server, with `key` read from stdin as a person types it.
    fn scripted_model(&self, id: &str, server: &botdesk_agent::scripted::ScriptedServer, wire: botdesk_agent::Wire, key: &str) {
        use std::io::Write;
        let kind = if wire == botdesk_agent::Wire::Anthropic { "anthropic" } else { "openai-compatible" };
        let mut child = self
            .cmd(&["model", "add", id, "--kind", kind, "--model", "scripted", "--base-url", &server.base_url(wire)])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(format!("{key}\n").as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
    }
    /// Runs, expects success, parses stdout as one JSON object.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert!(out.status.success(), "botdesk {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("botdesk {args:?} printed no JSON object ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    }
}

impl Drop for Data {
    fn drop(&mut self) {
        let out = self.run(&["--json", "computer", "ls"]);
        if let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) {
            for c in v["computers"].as_array().into_iter().flatten() {
                let _ = self.run(&["computer", "destroy", c["id"].as_str().unwrap()]);
            }
        }
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn doctor_reports_every_check() {
    let data = Data::new();
    let out = data.run(&["--json", "doctor"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = report["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["docker", "image", "image_age", "uids", "data_dir", "keyring", "display_libraries"]);
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["ok"], true, "check failed: {c}");
        if c["name"] != "uids" {
            assert_eq!(c["warn"], false, "a fresh image is not flagged: {c}");
        }
    }
    // An account of this machine with the bots' or the services' uid is named (this Docker does
    // not remap users).
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let owner = |uid: &str| passwd.lines().find(|l| l.split(':').nth(2) == Some(uid)).map(|l| l.split(':').next().unwrap().to_string());
    let uids = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "uids").unwrap();
    let detail = uids["detail"].as_str().unwrap();
    match (owner("1000"), owner("990")) {
        (None, None) => assert_eq!(uids["warn"], false, "{uids}"),
        (a, b) => {
            assert_eq!(uids["warn"], true, "{uids}");
            for name in [a, b].into_iter().flatten() {
                assert!(detail.contains(&name), "{uids}");
            }
            assert!(uids["fix"].as_str().unwrap().contains("userns-remap"), "{uids}");
        }
    }
    assert!(out.status.success());
    assert!(report["checks"][0]["detail"].as_str().unwrap().starts_with("Docker "), "the engine version is reported");

    // 31 days on, the same image is flagged (still usable) with how to refresh it.
    let later = data.cmd(&["--json", "doctor"]).env("BOTDESK_CLOCK_OFFSET_MS", (31 * 86_400_000i64).to_string()).output().unwrap();
    assert!(later.status.success(), "a warning does not fail doctor");
    let report: Value = serde_json::from_slice(&later.stdout).unwrap();
    let age = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "image_age").unwrap().clone();
    assert_eq!((age["ok"].clone(), age["warn"].clone()), (Value::Bool(true), Value::Bool(true)), "{age}");
    assert!(age["detail"].as_str().unwrap().contains("days old") && age["fix"].as_str().unwrap().contains("botdesk image build --refresh"), "{age}");
    let text = stdout(&data.cmd(&["doctor"]).env("BOTDESK_CLOCK_OFFSET_MS", (31 * 86_400_000i64).to_string()).output().unwrap());
    assert!(text.lines().any(|l| l.starts_with("warn") && l.contains("image_age")), "{text}");
}

#[test]
fn bots_exec_and_files_against_a_real_computer() {
    let data = Data::new();
    let alpha = data.json(&["bot", "create", "alpha"]);
    let gamma = data.json(&["bot", "create", "gamma", "--computer", "team"]);
    let solo = data.json(&["bot", "create", "solo", "--computer", "private"]);
    let alpha_id = alpha["id"].as_str().unwrap().to_string();
    assert_eq!(alpha["name"], "alpha");
    assert_eq!(alpha["computer"]["id"], gamma["computer"]["id"], "Team bots share one computer");
    assert_ne!(alpha["computer"]["id"], solo["computer"]["id"]);
    let listed = data.json(&["bot", "list"]);
    let names: Vec<&str> = listed["bots"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "gamma", "solo"]);

    // exec runs in the bot's own folder and passes the exit code through.
    let out = data.run(&["exec", "alpha", "--", "sh", "-c", "pwd; echo oops >&2; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(stdout(&out).trim(), format!("/home/botdesk/bots/{alpha_id}"));

    // Where a bot may connect, set and shown here, held by its running computer; each refusal is
    // in its activity, and a bad entry is one clear line.
    let site = std::env::var("BOTDESK_TEST_SITE").expect("`cargo xtask test` serves the tests' web site (BOTDESK_TEST_SITE)");
    let net = format!("{}.0/24", site.rsplit_once('.').unwrap().0);
    let set = data.json(&["bot", "network", "alpha", "allow", "Example.org", &format!("{site}/24")]);
    assert_eq!(set["network"], serde_json::json!({"mode": "allow", "allow": ["example.org", net]}));
    let curl = ["exec", "alpha", "--", "curl", "-sS", "--max-time", "20", &format!("http://{site}:8080/")];
    assert!(stdout(&data.run(&curl)).contains("hello from the test site"));
    data.json(&["bot", "network", "alpha", "offline"]);
    assert!(stdout(&data.run(&curl)).contains("this bot is offline"));
    assert_eq!(data.json(&["bot", "network", "alpha"])["network"], serde_json::json!({"mode": "offline"}));
    let shown = stdout(&data.run(&["activity", "alpha"]));
    assert!(shown.contains(&format!("network blocked: {site}:8080, this bot is offline [failed]")), "{shown}");
    let bad = data.run(&["bot", "network", "alpha", "allow", "exa_mple.org"]);
    assert!(!bad.status.success() && stderr(&bad).lines().count() == 1 && stderr(&bad).contains("is not a domain"), "{}", stderr(&bad));
    assert_eq!(data.json(&["bot", "network", "alpha", "open"])["network"], serde_json::json!({"mode": "open"}));
    assert_eq!(stderr(&out).trim(), "oops");
    let out = data.run(&["exec", "solo", "--", "pwd"]);
    assert_eq!(stdout(&out).trim(), "/home/botdesk", "a Private bot's folder is the whole home");

    // What a bot names never drives the person's terminal: a listing shows its escapes as text.
    let out = data.run(&["exec", "gamma", "--", "sh", "-c", "mkdir -p loud && touch \"loud/$(printf 'red\\033[31m\\033]0;title\\007')\""]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ls = stdout(&data.run(&["files", "ls", "gamma", "loud"]));
    assert!(!ls.contains('\u{1b}') && !ls.contains('\u{7}') && ls.contains("red\\u{1b}[31m"), "{ls:?}");

    // files: put / ls / cat / get, binary-exact, executable bit kept; relative to the bot's folder.
    let local = data.path().join("tool.bin");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(&local, &bytes).unwrap();
    std::fs::set_permissions(&local, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let put = data.json(&["files", "put", "alpha", local.to_str().unwrap(), "bin/tool.bin"]);
    assert_eq!(put["path"], format!("bots/{alpha_id}/bin/tool.bin"));
    let ls = data.json(&["files", "ls", "alpha", "bin"]);
    assert_eq!(ls["entries"][0]["path"], format!("bots/{alpha_id}/bin/tool.bin"));
    assert_eq!(ls["entries"][0]["size"], 70_000);
    assert_eq!(ls["entries"][0]["executable"], true);
    let cat = data.run(&["files", "cat", "alpha", "bin/tool.bin"]);
    assert!(cat.status.success());
    assert_eq!(cat.stdout, bytes, "cat writes the raw bytes");
    let back = data.path().join("back.bin");
    data.json(&["files", "get", "alpha", "bin/tool.bin", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), bytes);
    let out = data.run(&["exec", "alpha", "--cwd", "bin", "--", "sh", "-c", "test -x tool.bin && pwd"]);
    assert_eq!(stdout(&out).trim(), format!("/home/botdesk/bots/{alpha_id}/bin"));

    // shared/… addresses the Team root, for every bot of the computer.
    std::fs::write(data.path().join("r.txt"), b"report").unwrap();
    data.json(&["files", "put", "alpha", data.path().join("r.txt").to_str().unwrap(), "shared/report.txt"]);
    assert_eq!(data.run(&["files", "cat", "gamma", "shared/report.txt"]).stdout, b"report");

    // Team bots are users of their own: each its own uid in the bots' group, its folder its alone.
    let sh = |bot: &str, script: &str| stdout(&data.run(&["exec", bot, "--", "sh", "-c", script]));
    let (a_uid, g_uid) = (sh("alpha", "id -u; id -G"), sh("gamma", "id -u; id -G"));
    assert!(a_uid.ends_with("\n1999\n") && g_uid.ends_with("\n1999\n") && a_uid != g_uid, "{a_uid} {g_uid}");
    let a_uid: u32 = a_uid.lines().next().unwrap().parse().unwrap();
    assert!(a_uid >= 2001, "{a_uid}");
    // Named by its id (a prompt, `ls -l` and `whoami` show it), its home its folder.
    assert_eq!(sh("alpha", "whoami; echo $HOME; id -gn"), format!("{alpha_id}\n/home/botdesk/bots/{alpha_id}\nbotdesk-bots\n"));
    let team_owners = |data: &Data| {
        let got = stdout(&data.run(&["exec", "alpha", "--", "sh", "-c", "stat -c '%u %a' . bin/tool.bin; stat -c '%g %a' ../../shared"]));
        assert_eq!(got, format!("{a_uid} 700\n{a_uid} 755\n1999 2770\n"), "alpha's folder, a file in it and shared/");
        let peek = data.run(&["exec", "gamma", "--", "sh", "-c", &format!("ls ../{alpha_id} || cat ../{alpha_id}/bin/tool.bin")]);
        assert!(!peek.status.success() && stderr(&peek).contains("Permission denied"), "gamma read alpha's folder: {}", stderr(&peek));
        let peek = data.run(&["files", "cat", "gamma", &format!("bots/{alpha_id}/bin/tool.bin")]);
        assert!(!peek.status.success(), "gamma's file tools read alpha's folder");
        // shared/ is both bots': one writes, the other adds to it.
        assert_eq!(sh("gamma", "echo g >> ../../shared/both.txt && cat ../../shared/both.txt").lines().last(), Some("g"));
        assert!(sh("alpha", "echo a >> ../../shared/both.txt && cat ../../shared/both.txt").ends_with("g\na\n"));
    };
    team_owners(&data);
    // Nor may a bot signal another's processes.
    let pid = sh("alpha", "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!");
    let kill = data.run(&["exec", "gamma", "--", "kill", pid.trim()]);
    assert!(!kill.status.success() && stderr(&kill).contains("not permitted"), "{}", stderr(&kill));
    assert!(data.run(&["exec", "alpha", "--", "kill", pid.trim()]).status.success());

    // Escapes get one clear line and change nothing.
    for bad in ["../../etc/passwd", "/etc/passwd", "a/../../x", "..\\x"] {
        let out = data.run(&["files", "cat", "alpha", bad]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("escapes the computer workspace"), "{err}");
    }

    // computer ls lists every computer with its id; destroy removes the machine, never the workspace.
    let computers = data.json(&["computer", "ls"]);
    let ids: Vec<&str> = computers["computers"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    let team = alpha["computer"]["id"].as_str().unwrap();
    assert!(ids.contains(&team));
    let destroyed = data.json(&["computer", "destroy", team]);
    assert_eq!(destroyed["status"], "missing");
    let home: PathBuf = destroyed["home"].as_str().unwrap().into();
    assert_eq!(std::fs::read(home.join(format!("current/bots/{alpha_id}/bin/tool.bin"))).unwrap(), bytes, "the workspace stays, checkpointed");
    // The next use provisions a fresh machine on the same workspace, every owner and mode as
    // they were (the checkpoint keeps modes; owners come from each file's place).
    let out = data.run(&["exec", "alpha", "--", "sh", "-c", "cat ../../shared/report.txt"]);
    assert_eq!(stdout(&out), "report");
    team_owners(&data);
    // stop keeps the disk; the next use starts it again.
    assert_eq!(data.json(&["computer", "stop", "team"])["status"], "stopped");
    assert_eq!(data.run(&["exec", "alpha", "--", "true"]).status.code(), Some(0));

    // A Private bot switched to Team: its work comes along; its Private computer is kept (stopped)
    // until the bot goes.
    std::fs::write(data.path().join("s.txt"), b"solo work").unwrap();
    data.json(&["files", "put", "solo", data.path().join("s.txt").to_str().unwrap(), "s.txt"]);
    let sw = data.json(&["bot", "switch", "solo", "team"]);
    assert_eq!((sw["from"].as_str(), sw["to"].as_str()), (Some("private-solo"), Some("team")), "{sw}");
    let out = data.run(&["exec", "solo", "--", "sh", "-c", "pwd; cat s.txt; echo; [ $(stat -c %u s.txt) = $(id -u) ] && echo mine"]);
    assert_eq!(stdout(&out), format!("/home/botdesk/bots/{}\nsolo work\nmine\n", solo["id"].as_str().unwrap()));
    // And back from Team to a Private computer, where the bot is uid 1000 and owns it all.
    data.json(&["files", "put", "gamma", data.path().join("s.txt").to_str().unwrap(), "g.txt"]);
    data.json(&["bot", "switch", "gamma", "private"]);
    assert_eq!(sh("gamma", "id -u; stat -c '%u %a' g.txt"), "1000\n1000 644\n");
    data.json(&["bot", "rm", "gamma"]);
    let computers = data.json(&["computer", "ls"]);
    let kept = computers["computers"].as_array().unwrap().iter().find(|c| c["name"] == "private-solo").expect("kept");
    assert_eq!((kept["status"].as_str(), kept["bots"].as_array().unwrap().len()), (Some("stopped"), 0));
    let out = data.run(&["bot", "switch", "solo", "team"]);
    assert!(!out.status.success());
    assert_eq!(stderr(&out).lines().count(), 1);
    assert!(stderr(&out).contains("solo already works on the Team computer"), "{}", stderr(&out));

    // Removing the bot removes its Private computer, also the one it kept.
    data.json(&["bot", "rm", "solo"]);
    assert_eq!(data.json(&["computer", "ls"])["computers"].as_array().unwrap().len(), 1);
}

#[test]
fn exec_streams_json_lines_and_times_out() {
    let data = Data::new();
    data.json(&["bot", "create", "t1"]);
    let out = data.run(&["--json", "exec", "t1", "--", "sh", "-c", "echo one; echo two >&2"]);
    let lines: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.contains(&serde_json::json!({"stream": "stdout", "data": "one\n"})), "{lines:?}");
    assert!(lines.contains(&serde_json::json!({"stream": "stderr", "data": "two\n"})), "{lines:?}");
    assert_eq!(lines.last().unwrap()["exit_code"], 0);
    let out = data.run(&["exec", "--timeout", "300", "t1", "--", "sleep", "20"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(stderr(&out).contains("command timed out after 300 ms"));
    let out = data.run(&["exec", "--timeout", "0", "t1", "--", "true"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("timeout must be between 1 ms and 60 min"), "{}", stderr(&out));
    let out = data.run(&["exec", "nobody", "--", "true"]);
    assert_eq!(stderr(&out).trim(), "botdesk: bot \"nobody\" was not found");
    // A CLI call on a computer another process made ready does only its own work; a bot created
    // since (by yet another process) still finds its folder there.
    let t2 = data.json(&["bot", "create", "t2"]);
    let out = data.run(&["exec", "t2", "--", "pwd"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("/home/botdesk/bots/{}", t2["id"].as_str().unwrap()));
}

#[test]
fn docker_down_is_one_clear_line_and_nothing_panics() {
    let data = Data::new();
    data.json(&["bot", "create", "offline"]);
    let socket = data.path().join("no-docker.sock");
    let host = format!("unix://{}", socket.display());
    for args in
        [vec!["exec", "offline", "--", "true"], vec!["computer", "ls"], vec!["computer", "stop", "team"], vec!["image", "status"], vec!["image", "build"]]
    {
        let out = data.cmd(&args).env("DOCKER_HOST", &host).output().unwrap();
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} should fail without Docker");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("Docker is not reachable") && err.contains("Start the Docker engine"), "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
    // Files come from the stored workspace: they need no Docker.
    let out = data.cmd(&["files", "ls", "offline"]).env("DOCKER_HOST", &host).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = data.cmd(&["--json", "doctor"]).env("DOCKER_HOST", &host).output().unwrap();
    assert!(!out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["checks"][0]["ok"], false);
    assert!(report["checks"][0]["fix"].as_str().unwrap().contains("start the Docker engine"));
    // What needs no Docker keeps working.
    let out = data.cmd(&["bot", "list"]).env("DOCKER_HOST", &host).output().unwrap();
    assert!(out.status.success() && stdout(&out).contains("offline"));
}

#[test]
fn model_add_reads_the_key_from_stdin_and_keeps_it_out_of_everything_printed() {
    use std::io::Write;
    let data = Data::new();
    let key = format!("sk-cli-test-{}", std::process::id());
    let mut child = data
        .cmd(&["--json", "model", "add", "gpt", "--kind", "openai", "--model", "gpt-4o"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{key}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["model"]["id"].as_str(), v["model"]["has_key"].as_bool()), (Some("gpt"), Some(true)));
    let listed = data.run(&["model", "list"]);
    for o in [&out, &listed] {
        let all = [o.stdout.clone(), o.stderr.clone()].concat();
        assert!(!all.windows(key.len()).any(|w| w == key.as_bytes()), "the key was printed");
    }
    // No way to pass it on the command line.
    assert!(!data.run(&["model", "add", "x", "--kind", "openai", "--model", "m", "--key", "sk"]).status.success());
    // The app (an engine on the same data directory) reads it from the keyring.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt
        .block_on(botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(
            data.path(),
            botdesk_engine::ProviderChoice::Machine(botdesk_docker::machine),
        )))
        .unwrap();
    assert_eq!(rt.block_on(engine.model_key("gpt")).unwrap().as_deref(), Some(key.as_str()));
    // A bot picks it; the database never holds the key.
    assert!(data.run(&["bot", "create", "w", "--model", "gpt"]).status.success());
    let db = std::fs::read(data.path().join("botdesk.db")).unwrap();
    assert!(!db.windows(key.len()).any(|w| w == key.as_bytes()));
    // A login for the bot: the password and the seed from stdin, to the keyring; printed and
    // stored nowhere; a bad seed refused before anything is kept.
    let password = format!("pw-cli-{}", std::process::id());
    let seed = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP";
    let secret = |args: &[&str], stdin: String| {
        let mut child =
            data.cmd(args).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let bad = secret(&["secret", "add", "w", "--site", "example.org", "--user", "ada"], format!("{password}\nnot-base32!\n"));
    assert!(!bad.status.success() && stderr(&bad).contains("base32"), "{}", stderr(&bad));
    let added = secret(&["secret", "add", "w", "--site", "Example.org/login", "--user", "ada"], format!("{password}\n{seed}\n"));
    assert!(added.status.success(), "{}", stderr(&added));
    assert_eq!(stdout(&added).trim(), "w can log in on https://example.org as ada (with one-time codes) through fill_login; it never sees the password");
    let listed = data.run(&["secret", "ls", "w"]);
    assert_eq!(stdout(&listed).trim(), "https://example.org  ada  (one-time codes)");
    for o in [&added, &listed] {
        let all = [o.stdout.clone(), o.stderr.clone()].concat();
        assert!(![password.as_str(), seed].iter().any(|s| all.windows(s.len()).any(|w| w == s.as_bytes())), "a secret was printed");
    }
    let db = [std::fs::read(data.path().join("botdesk.db")).unwrap(), std::fs::read(data.path().join("botdesk.db-wal")).unwrap_or_default()].concat();
    assert!(![password.as_str(), seed].iter().any(|s| db.windows(s.len()).any(|w| w == s.as_bytes())), "a secret is in the database");
    assert!(data.run(&["secret", "rm", "w", "--site", "example.org"]).status.success());
    assert!(stdout(&data.run(&["secret", "ls", "w"])).contains("has no saved logins"));
    let e = data.run(&["model", "rm", "gpt"]);
    assert!(!e.status.success() && String::from_utf8_lossy(&e.stderr).contains("used by w"), "{}", String::from_utf8_lossy(&e.stderr));
    assert!(data.run(&["bot", "rm", "w"]).status.success());
    assert!(data.run(&["model", "rm", "gpt"]).status.success());
}

#[test]
fn run_streams_json_events_and_exits_0_only_when_the_run_completes() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo hi-from-run; echo sk-cli-run-key-123456 >&2"}))),
        Step::check(|s| s.results.first().filter(|r| r.text.contains("hi-from-run")).map(|_| ()).ok_or("no shell output".into()), Reply::text("Said hi.")),
        Step::reply(Reply::Status { status: 401, retry_after: None, body: r#"{"error":{"message":"invalid x-api-key"}}"#.into() }),
    ]));
    let data = Data::new();
    let id = format!("cli-run-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-run-key-123456");
    assert!(data.run(&["bot", "create", "runner", "--model", &id]).status.success());

    // Prices: none known for this model until set; then each run shows its cost.
    assert!(stdout(&data.run(&["model", "prices", &id])).contains("no prices"));
    assert!(data.run(&["model", "prices", &id, "3", "15", "0.3", "3.75"]).status.success());
    assert_eq!(data.json(&["model", "prices", &id])["prices"]["output"], 15.0);
    assert_eq!(data.run(&["model", "prices", &id, "3", "lots", "0", "0"]).status.code(), Some(1), "a price that is not a number is refused");
    // Limits: the family's defaults until set; a window smaller than the output is refused.
    assert_eq!(data.json(&["model", "limits", &id])["limits"]["context_window"], 200_000);
    assert_eq!(data.json(&["model", "limits", &id, "--context", "32768", "--max-output", "2048"])["limits"]["max_output"], 2048);
    assert_eq!(data.run(&["model", "limits", &id, "--context", "1024", "--max-output", "2048"]).status.code(), Some(1));
    assert_eq!(data.json(&["model", "limits", &id, "--default"])["limits"]["max_output"], 16384, "the Claude family's row");
    // Coordinates: the family's (pixels for this one) until set; a space not known is refused.
    assert_eq!(data.json(&["model", "coordinates", &id])["coordinates"], "pixels");
    assert_eq!(data.json(&["model", "coordinates", &id, "0-1000"])["coordinates"], "0-1000");
    assert_eq!(data.json(&["model", "list"])["models"].as_array().unwrap().iter().find(|m| m["id"] == id.as_str()).unwrap()["coordinates"], "0-1000");
    assert_eq!(data.run(&["model", "coordinates", &id, "inches"]).status.code(), Some(2), "clap refuses a space it does not know");
    assert_eq!(data.json(&["model", "coordinates", &id, "--default"])["coordinates"], "pixels");
    // A budget per run, shown with what the bot's runs cost so far.
    let budget = data.json(&["bot", "budget", "runner", "--tokens", "1,500,000", "--usd", "2.5"]);
    assert_eq!((budget["budget"]["tokens"].as_u64(), budget["budget"]["usd"].as_f64()), (Some(1_500_000), Some(2.5)), "{budget}");
    let budget = data.json(&["bot", "budget", "runner", "--tokens", "default", "--usd", "none"]);
    assert_eq!((budget["budget"]["tokens"].as_u64(), budget["budget"]["usd"].as_f64()), (Some(2_000_000), None), "{budget}");

    let out = data.run(&["--json", "run", "runner", "say hi"]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let events: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))).collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"delta") && types.contains(&"tool") && types.contains(&"activity"), "{types:?}");
    assert!(events.iter().any(|e| e["type"] == "tool" && e["call"]["name"] == "shell"));
    assert_eq!(events.last().unwrap()["status"], "completed", "{:?}", events.last());
    assert_eq!(server.failures(), Vec::<String>::new());
    // What each model call cost, and the run so far (the scripted server counts a token per 4
    // bytes of the request).
    let usage: Vec<&Value> = events.iter().filter(|e| e["type"] == "usage").collect();
    assert_eq!(usage.len(), 2, "{usage:?}");
    let n = |v: &Value| v.as_u64().unwrap();
    let prompt = |u: &Value| n(&u["input"]) + n(&u["cache_read"]) + n(&u["cache_write"]);
    assert!(prompt(&usage[0]["call"]) > 100 && prompt(&usage[1]["call"]) > prompt(&usage[0]["call"]), "{usage:?}");
    assert!(n(&usage[1]["call"]["cache_read"]) > 0, "the second call repeats the first: {usage:?}");
    for k in ["input", "output", "cache_read", "cache_write"] {
        assert_eq!(n(&usage[1]["run"][k]), n(&usage[0]["call"][k]) + n(&usage[1]["call"][k]), "{k}");
    }
    let usd = usage[1]["run_usd"].as_f64().expect("the run's cost");
    let r = &usage[1]["run"];
    let expected = (3.0 * n(&r["input"]) as f64 + 15.0 * n(&r["output"]) as f64 + 0.3 * n(&r["cache_read"]) as f64 + 3.75 * n(&r["cache_write"]) as f64) / 1e6;
    assert!((usd - expected).abs() < 1e-9, "{usd} vs {expected}");
    let spent = data.json(&["bot", "budget", "runner"]);
    assert_eq!(spent["spent"]["tokens"], usage[1]["run"], "{spent}");

    // A refused key: the run fails, the exit code says so, the reason is one clear line.
    let out = data.run(&["run", "runner", "again"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("failed (MODEL_BAD_KEY): the model provider refused the API key (401)"), "{}", stderr(&out));
    assert!(stderr(&out).contains("\n0 in, 0 out tokens"), "{}", stderr(&out));
    // The chat keeps both runs, the first with what it cost on its last message.
    let chat = data.json(&["chat", "runner"]);
    let texts: Vec<&str> = chat["messages"].as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert!(texts.contains(&"say hi") && texts.contains(&"Said hi.") && texts.contains(&"again"), "{texts:?}");
    let said = chat["messages"].as_array().unwrap().iter().find(|m| m["text"] == "Said hi.").unwrap();
    assert_eq!(said["usage"], usage[1]["run"], "{said}");
    // The failed run's last message says what it failed of, for a script to branch on.
    let last = chat["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["failure"], "MODEL_BAD_KEY", "{last}");
    assert!(said.get("failure").is_none(), "{said}");
    let human = stdout(&data.run(&["chat", "runner"]));
    assert!(human.contains(&format!(", {} out tokens, ${usd:.4})", n(&usage[1]["run"]["output"]))), "{human}");
    let act = data.run(&["activity", "runner"]);
    assert!(stdout(&act).contains("shell echo hi-from-run; echo [redacted] >&2 [done exit 0]"), "{}", stdout(&act));
    // `runs` lists both, newest first, with what each cost and how it ended.
    let runs = data.json(&["runs", "runner"]);
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(
        runs.iter().map(|r| (r["task"].as_str().unwrap(), r["status"].as_str().unwrap())).collect::<Vec<_>>(),
        [("again", "failed"), ("say hi", "completed")]
    );
    assert_eq!(runs[1]["usage"], usage[1]["run"]);
    assert_eq!(runs[0]["failure"], "MODEL_BAD_KEY");
    assert!(runs.iter().all(|r| r["ended_at"].as_i64().unwrap() >= r["started_at"].as_i64().unwrap() && r["duration_ms"].as_i64().unwrap() >= 0), "{runs:?}");
    let listed = stdout(&data.run(&["runs", "runner"]));
    let first = listed.lines().next().unwrap_or("");
    assert!(
        first.starts_with(runs[0]["id"].as_str().unwrap()) && first.contains("failed") && first.contains("again") && first.contains("refused the API key"),
        "{listed}"
    );
    assert!(listed.lines().nth(1).is_some_and(|l| l.contains(&format!("${usd:.4}"))), "{listed}");
    // `replay --out FILE.json` writes a run's trajectory: its steps in order, redacted as stored.
    let file = data.path().join("said-hi.json");
    let wrote = data.json(&["replay", "runner", "--run", runs[1]["id"].as_str().unwrap(), "--out", file.to_str().unwrap()]);
    assert_eq!((wrote["steps"].as_u64(), wrote["screenshots"].as_u64()), (Some(3), Some(0)), "{wrote}");
    let t: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(t["format"], "botdesk-trajectory/1");
    assert_eq!(t["run"]["id"], runs[1]["id"]);
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps.iter().map(|s| s["kind"].as_str().unwrap()).collect::<Vec<_>>(), ["task", "tool", "message"], "{t}");
    assert_eq!((&steps[0]["text"], &steps[2]["text"]), (&Value::from("say hi"), &Value::from("Said hi.")));
    assert_eq!(steps[1]["tool"], "shell");
    assert!(steps[1]["arguments"]["command"].as_str().unwrap().starts_with("echo hi-from-run"), "{t}");
    assert!(steps[1]["result"].as_str().unwrap().contains("hi-from-run"), "{t}");
    // The latest run by default: the failed one ends with its note. Only .json is made.
    let latest = data.json(&["replay", "runner", "--out", data.path().join("latest.json").to_str().unwrap()]);
    assert_eq!(latest["run"], runs[0]["id"]);
    let bad = data.run(&["replay", "runner", "--out", data.path().join("r.gif").to_str().unwrap()]);
    assert!(!bad.status.success() && stderr(&bad).contains("must end in .json, .html, .mp4 or .webm"), "{}", stderr(&bad));
    let bad = data.run(&["replay", "runner", "--out", data.path().join("r.mp4").to_str().unwrap()]);
    assert!(!bad.status.success() && stderr(&bad).contains("no screen recording and no screenshot"), "{}", stderr(&bad));
    // The key the CLI stored went to the model server's header, and nowhere on disk or in any
    // output: not the database (and its WAL), the logs, the screenshots, activity or chat.
    assert_eq!(server.requests()[0].headers.get("x-api-key").map(String::as_str), Some("sk-cli-run-key-123456"));
    let key = b"sk-cli-run-key-123456";
    let act_json = data.run(&["--json", "activity", "runner"]);
    for o in [&out, &act, &act_json] {
        assert!(![o.stdout.clone(), o.stderr.clone()].concat().windows(key.len()).any(|w| w == key), "the key was printed");
    }
    let mut files = vec![data.path().to_path_buf()];
    let mut searched = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else if p.is_file() {
            searched += 1;
            let bytes = std::fs::read(&p).unwrap_or_default();
            assert!(!bytes.windows(key.len()).any(|w| w == key), "the key is in {}", p.display());
        }
    }
    assert!(searched >= 3, "searched {searched} files");

    // A run whose CLI is killed (SIGKILL) mid-command: the next look at the bot ends it in its
    // chat, with its command's call closed and why, and the command stopped in the computer.
    let sleeper = rt.block_on(ScriptedServer::start(vec![Step::reply(Reply::call("shell", serde_json::json!({"command": "sleep 300"})))]));
    let sid = format!("cli-sleep-{}", std::process::id());
    data.scripted_model(&sid, &sleeper, botdesk_agent::Wire::Anthropic, "sk-cli-sleeper-key-1234");
    assert!(data.run(&["bot", "create", "sleeper", "--model", &sid]).status.success());
    let mut cli = data.cmd(&["run", "sleeper", "sleep a while"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let calls = |chat: &Value| -> Vec<Value> { chat["messages"].as_array().unwrap().iter().flat_map(|m| m["calls"].as_array().unwrap().clone()).collect() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !calls(&data.json(&["chat", "sleeper"])).iter().any(|c| c["name"] == "shell" && c["status"] == "running") {
        assert!(std::time::Instant::now() < deadline, "the shell call never started");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    cli.kill().unwrap();
    cli.wait().unwrap();
    let chat = data.json(&["chat", "sleeper"]);
    let shell = calls(&chat).into_iter().find(|c| c["name"] == "shell").unwrap();
    assert_eq!(shell["status"], "error", "{shell}");
    assert!(shell["text"].as_str().unwrap().starts_with("not finished: the run was interrupted: the app or CLI running it stopped"), "{shell}");
    let last = chat["messages"].as_array().unwrap().last().unwrap();
    assert!(
        last["text"].as_str().unwrap().starts_with(&format!("The run failed: interrupted: the app or CLI running it stopped (process {} is gone)", cli.id())),
        "{last}"
    );
    assert_eq!(last["failure"], "INTERRUPTED", "{last}");
    let left = data.run(&["exec", "sleeper", "--", "pgrep", "-a", "-f", "-x", "sleep 300"]);
    assert_eq!(left.status.code(), Some(1), "the command was stopped: {}", stdout(&left));
    assert!(data.run(&["bot", "rm", "sleeper"]).status.success());
    assert!(data.run(&["model", "rm", &sid]).status.success());

    assert!(data.run(&["bot", "rm", "runner"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// A local Ollama runs the model with a window too small for one step: `botdesk run` fails
/// without calling the model and says how to raise the window; the chat keeps the reason. With a
/// larger window, smaller than the one set, the run keeps to it and the chat says so.
#[test]
fn run_on_ollama_keeps_to_its_real_window_or_says_how_to_raise_it() {
    use botdesk_agent::scripted::{OllamaSim, Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![Step::reply(Reply::text("Looked."))]));
    server.act_as_ollama(OllamaSim { model: "scripted".into(), context: 2048, loaded: true, modelfile: None, old: false });
    let data = Data::new();
    let id = format!("cli-ollama-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::OpenAi, "");
    assert!(data.run(&["bot", "create", "local", "--model", &id]).status.success());
    let out = data.run(&["run", "local", "look at the screen"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Ollama runs scripted with a context window of 2048 tokens") && stderr(&out).contains("OLLAMA_CONTEXT_LENGTH=16384"),
        "{}",
        stderr(&out)
    );
    assert!(server.requests().is_empty(), "no model call");
    let chat = data.json(&["chat", "local"]);
    assert!(chat["messages"].as_array().unwrap().iter().any(|m| m["text"].as_str().unwrap().contains("OLLAMA_CONTEXT_LENGTH")), "{chat}");

    server.act_as_ollama(OllamaSim { model: "scripted".into(), context: 8192, loaded: true, modelfile: None, old: false });
    let out = data.run(&["run", "local", "look again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let chat = data.json(&["chat", "local"]);
    assert!(
        chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["text"].as_str().unwrap().contains("with a context window of 8192 tokens, smaller than the 32768 set")),
        "{chat}"
    );
    assert_eq!(server.failures(), Vec::<String>::new());
}

#[test]
fn a_cli_killed_mid_run_leaves_a_failed_run_and_a_reclaimable_lease() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A look first: the run's display is up and its screen recorded.
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("computer_observe", serde_json::json!({}))),
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo partial > partial.txt; sleep 120"}))),
    ]));
    let data = Data::new();
    let id = format!("cli-kill-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::OpenAi, "");
    assert!(data.run(&["bot", "create", "killme", "--model", &id]).status.success());

    let mut run = data.cmd(&["run", "killme", "work"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        // The command is running once its first line is in the workspace.
        if stdout(&data.run(&["activity", "killme"])).contains("[running]") && data.run(&["files", "cat", "killme", "partial.txt"]).status.success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // ([s]: the pattern must not match the probe's own command line.)
    let sleeping = || stdout(&data.run(&["exec", "killme", "--", "sh", "-c", "pgrep -f '[s]leep 120' || true"]));
    assert!(!sleeping().trim().is_empty(), "the run's command is running");
    run.kill().unwrap(); // SIGKILL
    run.wait().unwrap();

    // The next process recovers: the run is failed with the reason, its command is stopped, the
    // lease is free at once with the next fence, the workspace is intact, and the only container
    // is the bot's known computer.
    let held = data.json(&["lease", "hold", "killme", "--ms", "100"]);
    assert_eq!(held["fence"], 2, "{held}");
    assert_eq!(sleeping().trim(), "", "the killed run's command was stopped before the bot was handed on");
    let chat = data.json(&["chat", "killme"]);
    let run_id = chat["messages"][0]["run_id"].as_str().unwrap().to_string();
    let engine = rt
        .block_on(botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(
            data.path(),
            botdesk_engine::ProviderChoice::Machine(botdesk_docker::machine),
        )))
        .unwrap();
    let killed = rt.block_on(engine.run_status(&run_id)).unwrap();
    assert_eq!(killed.status, botdesk_engine::RunStatus::Failed);
    assert!(killed.error.as_deref().unwrap_or("").starts_with("interrupted: the app or CLI running it stopped"), "{killed:?}");
    let cat = data.run(&["files", "cat", "killme", "partial.txt"]);
    assert_eq!(stdout(&cat), "partial\n", "{}", stderr(&cat));
    // Its recorder was ended too, and what it recorded kept.
    assert!(engine.recording(&run_id).is_some(), "the killed run's recording is kept");
    let recorders = stdout(&data.run(&["exec", "killme", "--", "sh", "-c", "pgrep -x ffmpeg || true"]));
    assert_eq!(recorders.trim(), "", "no recorder is left");
    let computers = data.json(&["computer", "ls"]);
    assert_eq!(computers["computers"].as_array().unwrap().len(), 1);
    assert!(data.run(&["bot", "rm", "killme"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// Runs the CLI to its end; returns its peak resident memory, as the kernel counted it.
// The child is reaped by wait4 (for its rusage), not by std.
#[allow(clippy::zombie_processes)]
fn peak_rss_of(mut cmd: Command) -> u64 {
    let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 fills it for this child, which std never waits for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the run failed: status {status}");
    usage.ru_maxrss as u64 * 1024
}

/// A command printing 3 GB in a run leaves the CLI's memory flat: its peak stays within 64 MiB of
/// the same CLI's run of a command that prints one line.
#[test]
fn a_run_printing_3_gb_leaves_the_cli_memory_flat() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let flood = "yes | head -c 3000000000; echo; echo the end";
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo one line"}))),
        Step::reply(Reply::text("done")),
        Step::reply(Reply::call("shell", serde_json::json!({"command": flood, "timeout_s": 1200}))),
        Step::check(
            |s| s.results.first().filter(|r| r.text.contains("of 3000000009 bytes of output")).map(|_| ()).ok_or("no byte count".into()),
            Reply::text("done"),
        ),
    ]));
    let data = Data::new();
    let id = format!("cli-flood-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-flood");
    assert!(data.run(&["bot", "create", "printer", "--model", &id]).status.success());
    let one_line = peak_rss_of(data.cmd(&["run", "printer", "print a line"]));
    let three_gb = peak_rss_of(data.cmd(&["run", "printer", "print a lot"]));
    assert_eq!(server.failures(), Vec::<String>::new());
    assert!(three_gb < one_line + (64 << 20), "peak {} MiB printing 3 GB, {} MiB printing a line", three_gb >> 20, one_line >> 20);
    assert!(data.run(&["bot", "rm", "printer"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// Waits until `ready` holds (a bound only so a broken flow cannot hang the test).
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The CLI killed with SIGKILL in the middle of a checkpoint (of a stop, then of a destroy) and
/// in the middle of a destroy's deletion: the workspace stays whole, the next checkpoint works,
/// and a destroyed computer comes back complete.
#[test]
fn the_cli_killed_during_a_checkpoint_or_a_destroy_leaves_the_workspace_whole() {
    let d = Data::new();
    d.json(&["bot", "create", "k", "--computer", "private"]);
    let make = "mkdir -p work && cd work && for i in $(seq 150); do head -c 2000000 /dev/urandom > f$i; done && sha256sum f* > ../sums";
    let out = d.run(&["exec", "k", "--", "sh", "-c", make]);
    assert!(out.status.success(), "{}", stderr(&out));
    let whole = || {
        let out = d.run(&["exec", "k", "--", "sh", "-c", "cd work && sha256sum -c --quiet ../sums"]);
        assert!(out.status.success(), "the workspace is not whole: {}{}", stdout(&out), stderr(&out));
    };
    let id = d.json(&["computer", "ls"])["computers"][0]["id"].as_str().unwrap().to_string();
    let store = d.path().join("homes").join(&id);
    let partial = || std::fs::read_dir(&store).into_iter().flatten().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".partial"));
    let current = || std::fs::read_link(store.join("current")).ok();
    let kill = |args: &[&str], when: &dyn Fn() -> bool| {
        let mut child = d.cmd(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        wait_for("the moment to kill", when);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    };

    // 1. A stop killed while its checkpoint streams: the computer keeps its home; the next works.
    kill(&["computer", "stop", &id], &|| partial());
    whole();
    d.json(&["computer", "stop", &id]);
    let v1 = current().expect("a checkpoint");
    whole();

    // 2. A destroy killed while its checkpoint streams (every file changed since v1).
    let out = d.run(&["exec", "k", "--", "sh", "-c", "touch work/*"]);
    assert!(out.status.success());
    kill(&["computer", "destroy", &id], &|| partial());
    // Its reservation outlived it: the owner's Release computer frees it (its pid is gone).
    d.json(&["computer", "release", &id]);
    whole();

    // 3. A destroy killed after its checkpoint, while the computer and its volume are deleted.
    kill(&["computer", "destroy", &id], &|| current() != Some(v1.clone()));
    d.json(&["computer", "release", &id]);
    whole();
    d.json(&["computer", "destroy", &id]);
    whole();
}

/// Control taken from the CLI lapses inside the computer when its lease ends, with no app
/// running and no process of ours doing anything then: the viewer connected through it is
/// dropped and a new connection is refused.
#[test]
fn control_taken_from_the_cli_lapses_in_the_computer_with_no_app_running() {
    use std::io::Read;
    let data = Data::new();
    assert!(data.run(&["bot", "create", "ctl"]).status.success());
    // The desktop up first, so taking control is quick.
    let shot = data.run(&["screenshot", "ctl", data.path().join("s.png").to_str().unwrap()]);
    assert!(shot.status.success(), "{}", stderr(&shot));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The 15-minute lease is taken by a process whose clock is 13 min 30 s behind: by the
    // machine's clock it ends 90 s from now (room for a loaded machine to start forwarding).
    // That process stays, forwarding, and does nothing at the lease's end.
    let mut forward = data
        .cmd(&["--json", "screen", "forward", "ctl", "--control", "--port", &port.to_string()])
        .env("BOTDESK_CLOCK_OFFSET_MS", (-(15 * 60_000 - 90_000)).to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(forward.stdout.take().unwrap()), &mut said).unwrap();
    let said: Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said:?}"));
    let password = said["password"].as_str().unwrap().to_string();
    assert_eq!(password.len(), 8, "{said}");
    let connect = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return s,
                Err(e) => assert!(std::time::Instant::now() < deadline, "the forward never listened: {e}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    // A stock VNC client: refused without the password, served with it.
    let snapshot = |passwd: Option<&str>| {
        let out = data.path().join("snap.jpg");
        let _ = std::fs::remove_file(&out);
        let mut cmd = Command::new("vncsnapshot");
        cmd.args(["-quiet", "-allowblank"]).stdin(std::process::Stdio::null());
        if let Some(p) = passwd {
            let file = data.path().join("vncpasswd");
            let mut vncpasswd = Command::new("vncpasswd").arg("-f").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
            vncpasswd.stdin.take().unwrap().write_all(format!("{p}\n").as_bytes()).unwrap();
            std::fs::write(&file, vncpasswd.wait_with_output().unwrap().stdout).unwrap();
            cmd.arg("-passwd").arg(&file);
        }
        let done = cmd.arg(format!("127.0.0.1::{port}")).arg(&out).output().unwrap();
        (done.status.success(), std::fs::read(&out).unwrap_or_default(), stderr(&done))
    };
    let _ = connect();
    let (ok, jpeg, why) = snapshot(Some(&password));
    assert!(ok && jpeg.starts_with(b"\xff\xd8"), "vncsnapshot with the password: {why}");
    let (ok, jpeg, why) = snapshot(Some("guessed1"));
    assert!(!ok && jpeg.is_empty(), "a wrong password is refused: {why}");
    let (ok, jpeg, why) = snapshot(None);
    assert!(!ok && jpeg.is_empty(), "no password is refused: {why}");
    let mut viewer = connect();
    viewer.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    assert_eq!(vnc::login(&mut viewer, &password), (1280, 800), "control works before the lease ends");
    // Held open past the lease's end: the computer drops it (the bound only keeps a broken
    // build from hanging).
    viewer.set_read_timeout(Some(std::time::Duration::from_secs(180))).unwrap();
    let mut rest = vec![];
    let _ = viewer.read_to_end(&mut rest);
    let lease = data.json(&["bot", "list"]);
    let mut again = connect();
    again.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let mut got = vec![];
    let _ = again.read_to_end(&mut got);
    assert!(got.is_empty(), "a new connection after the lease's end was served: {:?}", String::from_utf8_lossy(&got));
    assert!(!lease.to_string().contains("you_have_control"), "{lease}");
    let _ = forward.kill();
    let _ = forward.wait();
}

/// Pause and take across processes: one CLI process drives a run, another pauses it with
/// `control take --pause` (which returns once the run's command ended and the run waits), and
/// `control release --note` resumes it: the model is told the note and the run completes.
#[test]
fn control_take_pause_and_release_note_from_another_process() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", serde_json::json!({"command": "sleep 2; echo first-step-done"}))),
        Step::check(
            |s| {
                let body = s.body.to_string();
                match body.contains("first-step-done") && body.contains("took control of the screen for") && body.contains("cookies accepted") {
                    true => Ok(()),
                    false => Err(format!("no handback with the note in {body}")),
                }
            },
            Reply::text("Finished."),
        ),
    ]));
    let data = Data::new();
    let id = format!("cli-pause-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-pause");
    assert!(data.run(&["bot", "create", "pauseme", "--model", &id]).status.success());
    let run = data.cmd(&["run", "pauseme", "work"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    wait_for("the command to run", || stdout(&data.run(&["activity", "pauseme"])).contains("[running]"));
    let refused = data.run(&["control", "take", "pauseme"]);
    assert!(!refused.status.success() && stderr(&refused).contains("Stop the bot first"), "{}", stderr(&refused));
    let take = data.run(&["control", "take", "pauseme", "--pause"]);
    assert!(take.status.success(), "{}", stderr(&take));
    assert!(stderr(&take).contains("finishes its current step first"), "{}", stderr(&take));
    let activity = stdout(&data.run(&["activity", "pauseme"]));
    assert!(!activity.contains("[running]"), "the command ended before the pause: {activity}");
    assert_eq!(server.requests().len(), 1);
    let release = data.run(&["control", "release", "pauseme", "--note", "cookies accepted"]);
    assert!(release.status.success(), "{}", stderr(&release));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "the run completed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.failures(), Vec::<String>::new());
    assert!(data.run(&["bot", "rm", "pauseme"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// The images of a model request's last message (base64, as the model received them).
fn last_images(body: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("base64") {
                    out.extend(o.get("data").and_then(Value::as_str).map(str::to_string));
                }
                o.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    walk(body["messages"].as_array().and_then(|m| m.last()).unwrap_or(&Value::Null), &mut out);
    out
}

/// A 20-step run on the screen, paused in the middle for the person, is recorded and replayed:
/// `runs` lists it with its recording; the .mp4 lasts as long as the run (ffprobe); the .html
/// report shows 20 steps, the clicks and the person's turn (headless Chromium); the .json
/// trajectory's screenshots are the frames the model received.
#[test]
fn a_recorded_run_with_a_takeover_exports_as_video_report_and_trajectory() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let act = |i: usize| match i {
        // Step 10 waits 3 s on the screen: the pause lands after it.
        9 => serde_json::json!({"actions": [{"type": "click", "x": 300, "y": 300}, {"type": "wait", "ms": 3000}], "settle_ms": 0}),
        i if i % 3 == 1 => serde_json::json!({"actions": [{"type": "type", "text": format!("step {i}")}], "settle_ms": 0}),
        i => serde_json::json!({"actions": [{"type": "click", "x": 100 + 50 * i, "y": 100 + 30 * i}], "settle_ms": 0}),
    };
    let mut steps: Vec<Step> = (0..20).map(|i| Step::reply(Reply::call("computer_act", act(i)))).collect();
    steps.push(Step::reply(Reply::text("Done.")));
    let server = rt.block_on(ScriptedServer::start(steps));
    let data = Data::new();
    let id = format!("cli-rec-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-rec");
    assert!(data.run(&["bot", "create", "recorded", "--model", &id]).status.success());
    let run = data
        .cmd(&["run", "recorded", "twenty steps"])
        .env("BOTDESK_LOG", "botdesk_engine=warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the tenth step", || server.requests().len() >= 10);
    let take = data.run(&["control", "take", "recorded", "--pause"]);
    assert!(take.status.success(), "{}", stderr(&take));
    std::thread::sleep(std::time::Duration::from_secs(2));
    let release = data.run(&["control", "release", "recorded", "--note", "looked around"]);
    assert!(release.status.success(), "{}", stderr(&release));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.failures(), Vec::<String>::new());

    // `runs` lists it, with its recording.
    let runs = data.json(&["runs", "recorded"]);
    let r = &runs["runs"][0];
    assert_eq!(r["status"], "completed", "{runs}");
    assert!(r["recording_bytes"].as_u64().is_some_and(|b| b > 1000), "the run was recorded: {runs}\n{}", String::from_utf8_lossy(&out.stderr));
    let listed = stdout(&data.run(&["runs", "recorded"]));
    assert!(listed.contains(r["id"].as_str().unwrap()) && listed.contains(" MB "), "{listed}");
    let duration = r["duration_ms"].as_f64().unwrap() / 1000.0;

    // The .mp4 lasts as long as the run (within 10 %).
    let mp4 = data.path().join("run.mp4");
    let made = data.json(&["replay", "recorded", "--out", mp4.to_str().unwrap()]);
    assert_eq!(made["from_recording"], true, "{made}");
    let probe = Command::new("ffprobe").args(["-v", "error", "-show_entries", "format=duration:stream=codec_name", "-of", "json"]).arg(&mp4).output().unwrap();
    assert!(probe.status.success(), "ffprobe: {}", stderr(&probe));
    let p: Value = serde_json::from_slice(&probe.stdout).unwrap();
    let seconds: f64 = p["format"]["duration"].as_str().unwrap().parse().unwrap();
    assert!((seconds - duration).abs() <= duration * 0.1, "the video lasts {seconds} s, the run {duration} s");
    assert_eq!(p["streams"][0]["codec_name"], "h264", "{p}");
    let webm = data.path().join("run.webm");
    data.json(&["replay", "recorded", "--out", webm.to_str().unwrap()]);
    let probe = Command::new("ffprobe").args(["-v", "error", "-show_entries", "stream=codec_name", "-of", "csv=p=0"]).arg(&webm).output().unwrap();
    assert_eq!(stdout(&probe).trim(), "vp9", "{}", stderr(&probe));

    // The .html report, in headless Chromium: 20 steps, their clicks, the person's turn.
    let html = data.path().join("run.html");
    data.json(&["replay", "recorded", "--out", html.to_str().unwrap()]);
    let profile = data.path().join("chromium-profile");
    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    let dom = stdout(&dom);
    assert_eq!(dom.matches(r#"class="step tool""#).count(), 20, "{}", &dom[..dom.len().min(2000)]);
    assert_eq!(dom.matches(r#"<circle class="click" data-x="300" data-y="300""#).count(), 1, "the click of step 10 is drawn");
    assert!(dom.contains(r#"class="step takeover""#) && dom.contains(r#"class="step handback""#), "the person's turn is shown");

    // The .json trajectory: 20 steps, each screenshot the frame the model received next.
    let json = data.path().join("run.json");
    data.json(&["replay", "recorded", "--out", json.to_str().unwrap()]);
    let t: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let tools: Vec<&Value> = t["steps"].as_array().unwrap().iter().filter(|s| s["kind"] == "tool").collect();
    assert_eq!(tools.len(), 20);
    assert!(t["recording"]["bytes"].as_u64().is_some(), "{}", t["recording"]);
    // A screen that did not change is not sent again: the model's frame is then the last one sent.
    let requests = server.requests();
    let mut frame = vec![];
    for (i, step) in tools.iter().enumerate() {
        assert_eq!(step["acted"]["marks"].as_array().map(Vec::len), Some(1), "step {i}: {step}");
        let shot = std::fs::read(data.path().join(step["screenshot"].as_str().unwrap())).unwrap();
        use base64::Engine as _;
        if let Some(sent) = last_images(&requests[i + 1].body).last() {
            frame = base64::engine::general_purpose::STANDARD.decode(sent).unwrap();
        }
        assert!(
            frame == shot,
            "step {i}'s screenshot is not the frame the model received: {}",
            requests[i + 1].body["messages"].as_array().unwrap().last().unwrap().to_string().chars().take(600).collect::<String>()
        );
    }
    assert!(data.run(&["bot", "rm", "recorded"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// `botdesk mcp` with a client nobody here wrote, the official MCP Python SDK: it lists the
/// tools, sees the screen, moves the pointer, runs a command, writes and reads a file; a bot a run
/// holds refuses it, saying so; Pause and take control pauses it between calls, and release hands
/// the bot back (the person's note reaches it). The chat says who drove the bot.
#[test]
fn an_mcp_client_drives_a_bot_and_yields_to_runs_and_the_person() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
    let python = std::env::var("BOTDESK_TEST_MCP_PYTHON").expect("`cargo xtask test` sets BOTDESK_TEST_MCP_PYTHON (a venv with the MCP SDK)");
    let data = Data::new();
    // The bot's own model, handed a task over MCP (`run_task`), uses the MCP server the client
    // added to the bot, which runs inside the bot's computer.
    let said = |s: &Seen, what: &str| s.results.iter().find(|r| r.text.contains(what)).map(|_| ()).ok_or(format!("no result says {what:?}: {:?}", s.results));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ScriptedServer::start(vec![
        Step::check(
            |s| {
                let tools = s.body["tools"].to_string();
                match (tools.contains("\"notes__shout\""), tools.contains("\"remote__shout\""), tools.contains("broken__")) {
                    (true, true, false) => Ok(()),
                    _ => Err(format!("the notes and remote tools (and no broken ones) are not offered: {tools}")),
                }
            },
            Reply::call("notes__shout", serde_json::json!({"text": "hello from the model"})),
        ),
        Step::check(move |s| said(s, "HELLO FROM THE MODEL!"), Reply::call("notes__flood", serde_json::json!({}))),
        Step::check(
            |s| match s.results.first() {
                Some(r) if r.text.contains("[cut: showing the first") && r.text.chars().count() <= 12_000 => Ok(()),
                r => Err(format!("the flood was not cut: {:?}", r.map(|r| r.text.len()))),
            },
            Reply::call("notes__whoami", serde_json::json!({})),
        ),
        // As the bot: the data directory's first bot, uid 2001 on the Team computer.
        Step::check(move |s| said(s, "uid=2001"), Reply::call("remote__shout", serde_json::json!({"text": "over http"}))),
        Step::check(
            move |s| {
                said(s, "OVER HTTP!")?;
                // The bridge runs now, and the remote server's address (a key could be in it) is
                // in no process's command line, which every user of the machine can read.
                let ours = Command::new("docker").args(["ps", "-q", "--filter", "label=botdesk.computer"]).output().unwrap();
                let mut bridge = false;
                for c in String::from_utf8_lossy(&ours.stdout).split_whitespace() {
                    let ps = Command::new("docker").args(["exec", c, "ps", "-eo", "args"]).output().unwrap();
                    let ps = String::from_utf8_lossy(&ps.stdout).to_string();
                    bridge |= ps.contains("botdesk-mcp-http");
                    if ps.contains("8931/mcp") {
                        return Err(format!("the remote server's address is in a command line: {ps}"));
                    }
                }
                if bridge {
                    Ok(())
                } else {
                    Err("no botdesk-mcp-http is running".into())
                }
            },
            Reply::text("The notes server answered."),
        ),
    ]));
    data.scripted_model("mcp-model", &model, botdesk_agent::Wire::Anthropic, "sk-mcp-test-key-123456");
    data.json(&["bot", "create", "driven", "--model", "mcp-model"]);
    data.json(&["bot", "create", "held"]);
    // Servers a bot cannot have are refused, saying why.
    let bad = data.run(&["bot", "mcp", "add", "driven", "no.dots", "--", "true"]);
    assert!(!bad.status.success() && stderr(&bad).contains("cannot name an MCP server"), "{}", stderr(&bad));
    let bad = data.run(&["bot", "mcp", "add", "driven", "nothing"]);
    assert!(!bad.status.success() && stderr(&bad).contains("command"), "{}", stderr(&bad));
    let script = data.path().join("client.py");
    std::fs::write(&script, MCP_CLIENT).unwrap();
    let out = Command::new(&python).arg(&script).arg(BIN).arg(data.path()).output().unwrap();
    assert!(out.status.success(), "the MCP client failed over stdio:\n{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).ends_with("all checks passed\n"), "{}", stdout(&out));
    assert_eq!(model.failures(), Vec::<String>::new());
    assert_eq!(model.requests().len(), 5);
    let listed = data.json(&["bot", "mcp", "ls", "driven"]);
    assert_eq!(listed["servers"].as_array().map(Vec::len), Some(3), "{listed}");
    // The server that could not start is said in the chat; the run went on without it.
    let chat = data.json(&["chat", "driven"]).to_string();
    assert!(chat.contains("The MCP server \\\"broken\\\" did not start") && chat.contains("no such server here"), "{chat}");
    assert!(data.run(&["bot", "mcp", "rm", "driven", "broken"]).status.success());

    // The same over streamable HTTP, on a loopback port, with the bearer token it printed (also in
    // a file only the person reads); a request without it reaches nothing.
    let mut server = data.cmd(&["--json", "mcp", "--http", "127.0.0.1:0"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.stdout.take().unwrap()), &mut said).unwrap();
    let said: Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said:?}"));
    let (url, token) = (said["url"].as_str().unwrap().to_string(), said["token"].as_str().unwrap().to_string());
    let file = data.path().join("mcp-token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions()) & 0o777, 0o600);
    let port = url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").to_string();
    let mut bare = std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    write!(bare, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut bare, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 401") && !answer.contains("screenshot"), "{answer}");
    let out = Command::new(&python).arg(&script).arg(BIN).arg(data.path()).arg(&url).arg(&token).output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "the MCP client failed over HTTP:\n{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).ends_with("all checks passed\n"), "{}", stdout(&out));
    // The MCP Inspector's CLI lists the tools too.
    let inspector = std::env::var("BOTDESK_TEST_MCP_INSPECTOR").expect("`cargo xtask test` sets BOTDESK_TEST_MCP_INSPECTOR");
    let listed = Command::new(&inspector)
        .env("HOME", data.path())
        .args(["--cli", BIN, "--data-dir", data.path().to_str().unwrap(), "mcp", "--method", "tools/list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "the MCP Inspector failed: {}", stderr(&listed));
    let tools: Value = serde_json::from_slice(&listed.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&listed)));
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for want in ["list_bots", "screenshot", "act", "shell", "read_file", "write_file", "browser_snapshot", "ask_person"] {
        assert!(names.contains(&want), "{want} is not among {names:?}");
    }
    // The chat says who drove the bot, and each call is in its activity.
    let chat = data.json(&["chat", "driven"]).to_string();
    assert!(chat.contains("Driven by MCP: botdesk-test-client"), "{chat}");
    let activity = data.run(&["--json", "activity", "driven"]);
    assert!(stdout(&activity).contains("echo hello"), "{}", stdout(&activity));
}

const MCP_CLIENT: &str = r#"
import asyncio, base64, contextlib, json, os, struct, subprocess, sys, time
import mcp
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation

BIN, DATA = sys.argv[1], sys.argv[2]
# Over stdio (the server is started here), or over HTTP: URL TOKEN.
HTTP = sys.argv[3:5]

def botdesk(*args):
    return subprocess.run([BIN, "--data-dir", DATA, *args], capture_output=True, text=True, timeout=120)

def text(r):
    return "".join(c.text for c in r.content if c.type == "text")

@contextlib.asynccontextmanager
async def transport():
    if HTTP:
        url, token = HTTP
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams[0], streams[1]
    else:
        # The SDK starts a server with a few variables only: this one needs the test's keyring.
        async with stdio_client(StdioServerParameters(command=BIN, args=["--data-dir", DATA, "mcp"], env=dict(os.environ))) as (r, w):
            yield r, w

async def main():
    async with transport() as (r, w):
        async with ClientSession(r, w, client_info=Implementation(name="botdesk-test-client", version="1")) as s:
            init = await s.initialize()
            assert init.server_info.name == "botdesk", init
            names = {t.name for t in (await s.list_tools()).tools}
            want = {"list_bots", "create_bot", "screenshot", "act", "shell", "list_files", "read_file", "write_file",
                    "browser_snapshot", "browser_act", "browser_navigate", "ask_person"}
            assert want <= names, names
            bots = json.loads(text(await s.call_tool("list_bots", {})))
            assert {b["name"] for b in bots} == {"driven", "held"}, bots

            shot = await s.call_tool("screenshot", {"bot": "driven"})
            assert not shot.is_error, text(shot)
            images = [c for c in shot.content if c.type == "image"]
            assert len(images) == 1 and images[0].mime_type == "image/png", shot.content
            png = base64.b64decode(images[0].data)
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1280, 800), png[:24]
            assert "1280x800" in text(shot), text(shot)

            moved = await s.call_tool("act", {"bot": "driven", "actions": [{"type": "move", "x": 321, "y": 234}]})
            assert not moved.is_error, text(moved)
            again = await s.call_tool("screenshot", {"bot": "driven"})
            assert "cursor at (321, 234)" in text(again), text(again)

            sh = await s.call_tool("shell", {"bot": "driven", "command": "echo hello $((6*7))"})
            assert not sh.is_error and "hello 42" in text(sh), text(sh)
            wr = await s.call_tool("write_file", {"bot": "driven", "path": "notes/mcp.txt", "content": "written over MCP ¿sí?"})
            assert not wr.is_error, text(wr)
            rd = await s.call_tool("read_file", {"bot": "driven", "path": "notes/mcp.txt"})
            assert "written over MCP ¿sí?" in text(rd), text(rd)

            # Bad input: a clear error, nothing else disturbed.
            bad = await s.call_tool("act", {"bot": "driven", "actions": [{"type": "teleport"}]})
            assert bad.is_error, text(bad)
            nobody = await s.call_tool("shell", {"bot": "nobody", "command": "true"})
            assert nobody.is_error and "no bot named" in text(nobody), text(nobody)

            # A run holds the other bot: the call is refused, saying who.
            hold = subprocess.Popen([BIN, "--data-dir", DATA, "--json", "lease", "hold", "held", "--ms", "60000"], stdout=subprocess.PIPE, text=True)
            assert hold.stdout.readline(), "the lease was not taken"
            busy = await s.call_tool("shell", {"bot": "held", "command": "true"})
            hold.kill()
            assert busy.is_error and "busy" in text(busy) and "hold the execution lease" in text(busy), text(busy)
            assert botdesk("bot", "stop", "held").returncode == 0

            # Pause and take control while the client drives: the next call is refused, saying so;
            # after release the bot is the client's again, told the person's note.
            took = botdesk("control", "take", "driven", "--pause")
            assert took.returncode == 0, took.stderr
            paused = await s.call_tool("shell", {"bot": "driven", "command": "true"})
            assert paused.is_error and "paused" in text(paused), text(paused)
            gave = botdesk("control", "release", "driven", "--note", "all yours again")
            assert gave.returncode == 0, gave.stderr
            back = await s.call_tool("shell", {"bot": "driven", "command": "echo back"})
            assert not back.is_error and "back" in text(back) and "all yours again" in text(back), text(back)

            # Resources: each bot's screen and files, read without holding it.
            uris = {str(r.uri) for r in (await s.list_resources()).resources}
            assert {"botdesk://driven/screen", "botdesk://driven/files/", "botdesk://held/screen"} <= uris, uris
            screen = (await s.read_resource("botdesk://driven/screen")).contents[0]
            assert screen.mime_type == "image/png" and base64.b64decode(screen.blob)[:4] == b"\x89PNG", screen.mime_type
            note = (await s.read_resource("botdesk://driven/files/notes/mcp.txt")).contents[0]
            assert note.text == "written over MCP ¿sí?", note
            listing = (await s.read_resource("botdesk://driven/files/notes/")).contents[0]
            assert "mcp.txt" in listing.text, listing.text
            try:
                await s.read_resource("botdesk://driven/elsewhere")
                raise AssertionError("an unknown resource was read")
            except mcp.MCPError as e:
                assert "not a Botdesk resource" in str(e), e

            if not HTTP:
                await bot_mcp_server(s)
    print("all checks passed")

# An MCP server of the bot's own, written with this SDK, run inside the bot's computer: a run the
# client hands over (run_task) is offered its tools, and it ends with the run.
SERVER = '''
import os, socket, sys
from mcp.server.mcpserver import MCPServer
server = MCPServer("notes")
@server.tool()
def shout(text: str) -> str:
    "Says the text louder."
    return text.upper() + "!"
@server.tool()
def whoami() -> str:
    "Where this server runs."
    return f"host={socket.gethostname()} uid={os.getuid()} cwd={os.getcwd()}"
@server.tool()
def flood() -> str:
    "A lot of text."
    return "blah " * 20000
if sys.argv[1:2] == ["http"]:
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
else:
    server.run()
'''

async def bot_mcp_server(s):
    bots = json.loads(botdesk("--json", "bot", "list").stdout)["bots"]
    computer = next(b["computer"]["id"] for b in bots if b["name"] == "driven")
    container = subprocess.run(["docker", "ps", "-q", "--filter", f"label=botdesk.computer={computer}"], capture_output=True, text=True).stdout.split()[0]
    # The computer cannot reach PyPI: the SDK this client runs on is copied in.
    site = os.path.dirname(os.path.dirname(mcp.__file__))
    subprocess.run(["docker", "cp", site + "/.", f"{container}:/opt/mcp-sdk"], check=True, capture_output=True)
    wr = await s.call_tool("write_file", {"bot": "driven", "path": "notes_server.py", "content": SERVER})
    assert not wr.is_error, text(wr)
    added = botdesk("bot", "mcp", "add", "driven", "notes", "--", "env", "PYTHONPATH=/opt/mcp-sdk", "python3", "notes_server.py")
    assert added.returncode == 0, added.stderr
    added = botdesk("bot", "mcp", "add", "driven", "broken", "--", "sh", "-c", "echo no such server here >&2; exit 3")
    assert added.returncode == 0, added.stderr
    # A server reached by its address, from inside the computer: here the same one on HTTP,
    # started in the computer (the only place a run's bridge can reach in this test).
    up = await s.call_tool("shell", {"bot": "driven", "command": "(setsid env PYTHONPATH=/opt/mcp-sdk python3 notes_server.py http 8931 >http.log 2>&1 </dev/null &); "
        "for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8931/mcp && exit 0; sleep 0.1; done; cat http.log; exit 1"})
    assert not up.is_error, text(up)
    added = botdesk("bot", "mcp", "add", "driven", "remote", "--url", "http://127.0.0.1:8931/mcp")
    assert added.returncode == 0, added.stderr

    steps = []
    async def progress(done, total, message):
        steps.append(message or "")
    ran = await s.call_tool("run_task", {"bot": "driven", "task": "Use your notes server."}, progress_callback=progress)
    assert not ran.is_error and "The notes server answered." in text(ran), text(ran)
    assert any(m.startswith("notes__shout") for m in steps), steps
    # It ran inside the computer, as the bot, in its folder; it ended with the run.
    hostname = subprocess.run(["docker", "inspect", "-f", "{{.Config.Hostname}}", container], capture_output=True, text=True).stdout.strip()
    activity = botdesk("--json", "activity", "driven").stdout
    assert f"host={hostname} uid=2001" in activity, activity
    for _ in range(50):
        left = subprocess.run(["docker", "exec", container, "pgrep", "-f", "^python3 notes_server.py$|botdesk-mcp-http"], capture_output=True, text=True)
        if left.returncode == 1:
            break
        time.sleep(0.2)
    assert left.returncode == 1, f"the servers outlived their run: {left.stdout}"


asyncio.run(main())
"#;

/// A bot's approvals, answered from another process: its run pauses at its first page on a new
/// site (`botdesk approve --always`: that site's pages no longer ask), at a download, at a file
/// chooser and at a form sent to a listed site; `botdesk approve` lets the download through (the
/// file lands in the bot's Downloads), `botdesk deny --note` refuses the upload and the form (the
/// shop never answers it) and the model is told each note; each question and answer is in the activity and the run's
/// trajectory.
#[test]
fn a_run_pauses_at_what_its_approvals_name_until_approve_or_deny() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
    use serde_json::json;
    let site = std::env::var("BOTDESK_TEST_SITE_PUBLIC").expect("`cargo xtask test` serves the tests' web site (BOTDESK_TEST_SITE_PUBLIC)");
    let result = |want: String| {
        move |s: &Seen| match s.results.first() {
            Some(r) if r.text.contains(&want) => Ok(()),
            other => Err(format!("expected a result containing {want:?}, got {other:?}")),
        }
    };
    let click = |role: &'static str, name: &'static str| {
        Reply::Func(Box::new(move |s: &Seen| {
            let text = &s.results[0].text;
            let line = text.lines().find(|l| l.starts_with(&format!("{role} \"{name}\"")));
            match line.and_then(|l| l.split('[').nth(1)?.split(']').next()) {
                Some(r) => Reply::call("browser_act", json!({"actions": [{"action": "click", "ref": r}]})),
                None => Reply::text(&format!("no {role} {name}: {text}")),
            }
        }))
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("browser_navigate", json!({ "url": format!("http://{site}:8080/files") }))),
        Step::check(result(format!("and the same on {site} from now on: it went on.")), Reply::call("browser_snapshot", json!({}))),
        Step::check(result("report.csv".into()), click("link", "report.csv")),
        Step::check(
            result(format!("The person allowed you to download http://{site}:8080/download: it went on.")),
            Reply::call("browser_navigate", json!({ "url": format!("http://{site}:8080/upload") })),
        ),
        Step::check(result("Upload".into()), click("textbox", "Report")),
        Step::check(
            result(format!("The person denied that you upload a file on {site}. It did not happen. Their note: \"no files today\".")),
            Reply::call("browser_navigate", json!({ "url": format!("http://{site}:8080/shop") })),
        ),
        Step::check(result("Shop".into()), click("button", "Buy")),
        Step::check(
            result(format!(
                "The person denied that you submit the form on {site} (http://{site}:8080/buy). It did not happen. Their note: \"not with my card\"."
            )),
            Reply::call("browser_snapshot", json!({})),
        ),
        Step::check(
            |s: &Seen| match s.results.first() {
                Some(r) if !r.text.contains("bought") => Ok(()),
                other => Err(format!("the shop got the form: {other:?}")),
            },
            Reply::call("shell", json!({"command": "cat ~/Downloads/report.csv"})),
        ),
        Step::check(result("a,b".into()), Reply::text("Got the report; did not buy.")),
    ]));
    let data = Data::new();
    let id = format!("cli-approve-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-approve");
    assert!(data.run(&["bot", "create", "shopper", "--model", &id]).status.success());
    let set = data.run(&["bot", "approvals", "shopper", "downloads", "uploads", "form", &site, "new-domains"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(stdout(&set).trim(), format!("shopper asks before downloads; uploads; forms on {site}; pages on new domains"));
    let run = data
        .cmd(&["run", "shopper", "get the report, then buy a teapot"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let data = &data;
    let asked = |what: String| {
        move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            stdout(&data.run(&["chat", "shopper"])).contains(&what)
        }
    };
    wait_for("the new site's question", asked(format!("shopper wants to open a page on a new site, {site} (http://{site}:8080/files)")));
    let always = data.run(&["approve", "shopper", "--always"]);
    assert!(always.status.success(), "{}", stderr(&always));
    wait_for("the download's question", asked(format!("shopper wants to download http://{site}:8080/download")));
    let approve = data.run(&["approve", "shopper"]);
    assert!(approve.status.success() && stdout(&approve).contains("allowed: shopper wants to download"), "{}{}", stdout(&approve), stderr(&approve));
    wait_for("the upload's question", asked(format!("shopper wants to upload a file on {site}")));
    let deny = data.run(&["deny", "shopper", "--note", "no files today"]);
    assert!(deny.status.success(), "{}", stderr(&deny));
    wait_for("the form's question", asked(format!("shopper wants to submit the form on {site}")));
    let deny = data.run(&["deny", "shopper", "--note", "not with my card"]);
    assert!(deny.status.success() && stdout(&deny).contains("declined: shopper wants to submit the form"), "{}{}", stdout(&deny), stderr(&deny));
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "the run completed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.failures(), Vec::<String>::new());

    // Each question and its answer, in the activity and in the run's trajectory.
    let activity = stdout(&data.run(&["activity", "shopper"]));
    assert!(activity.contains(&format!("download: download http://{site}:8080/download: allowed once")), "{activity}");
    assert!(activity.contains(&format!("form: submit the form on {site} (http://{site}:8080/buy): denied (not with my card)")), "{activity}");
    let trajectory = data.path().join("run.json");
    assert!(data.run(&["replay", "shopper", "--out", trajectory.to_str().unwrap()]).status.success());
    let t: Value = serde_json::from_slice(&std::fs::read(&trajectory).unwrap()).unwrap();
    let approvals = t["steps"].as_array().unwrap().iter().filter(|s| s["event"] == "approval").count();
    assert_eq!(approvals, 4, "{t}");
    // The "always" answer is kept with the bot's approvals.
    assert!(stdout(&data.run(&["bot", "approvals", "shopper"])).contains(&format!("(always allowed: page {site})")));
    assert!(data.run(&["bot", "rm", "shopper"]).status.success());
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// A model is checked with one tiny request (its answer and latency; a key the provider refuses
/// says so and how to fix it). A bot made without a model cannot run and says how to give it
/// one; `botdesk bot set` gives it a model and a new name (a name another bot has, or a model
/// that does not exist, is refused), and it runs.
#[test]
fn bot_set_gives_a_bot_a_model_and_a_new_name() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::check(
            |s| s.body["tools"].as_array().is_some_and(|t| !t.is_empty()).then_some(()).ok_or("the check declares the tools".into()),
            Reply::text("OK"),
        ),
        Step::reply(Reply::Status {
            status: 401,
            retry_after: None,
            body: r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#.into(),
        }),
        Step::reply(Reply::text("Hello from the new model.")),
    ]));
    let data = Data::new();
    assert!(data.run(&["bot", "create", "modelless"]).status.success());
    let refused = data.run(&["run", "modelless", "say hello"]);
    assert!(!refused.status.success() && stderr(&refused).contains("botdesk bot set modelless --model ID"), "{}", stderr(&refused));
    let id = format!("cli-set-{}", std::process::id());
    data.scripted_model(&id, &server, botdesk_agent::Wire::Anthropic, "sk-cli-set");
    let good = data.run(&["model", "test", &id]);
    assert!(
        good.status.success() && stdout(&good).starts_with(&format!("{id} answered in ")) && stdout(&good).trim().ends_with(": OK"),
        "{}{}",
        stdout(&good),
        stderr(&good)
    );
    let bad = data.run(&["model", "test", &id]);
    assert!(!bad.status.success() && stderr(&bad).contains("refused the API key") && stderr(&bad).contains("Settings → Models"), "{}", stderr(&bad));
    let set = data.run(&["bot", "set", "modelless", "--model", &id, "--name", "greeter"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(stdout(&set).trim(), format!("greeter: model {id}"));
    assert!(data.run(&["bot", "create", "other"]).status.success());
    for (args, want) in [
        (vec!["bot", "set", "greeter"], "say what to change"),
        (vec!["bot", "set", "greeter", "--name", "other"], "a bot named \"other\" already exists"),
        (vec!["bot", "set", "greeter", "--model", "no-such-model"], "no-such-model"),
        (vec!["bot", "set", "greeter", "--name", ".hidden"], "not a valid bot name"),
    ] {
        let out = data.run(&args);
        assert!(!out.status.success() && stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
    let ran = data.run(&["run", "greeter", "say hello"]);
    assert!(ran.status.success() && stdout(&ran).contains("Hello from the new model."), "{}{}", stdout(&ran), stderr(&ran));
    assert_eq!(server.failures(), Vec::<String>::new());
    for bot in ["greeter", "other"] {
        assert!(data.run(&["bot", "rm", bot]).status.success());
    }
    assert!(data.run(&["model", "rm", &id]).status.success());
}

/// The spare computer the app keeps started shows in `computer ls` as `spare`, and `computer
/// destroy` removes it (container and all).
#[test]
fn the_spare_computer_shows_in_ls_and_can_be_removed() {
    let data = Data::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt
        .block_on(botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(
            data.path(),
            botdesk_engine::ProviderChoice::Machine(botdesk_docker::machine),
        )))
        .unwrap();
    rt.block_on(engine.keep_spare()).unwrap();
    let id = rt.block_on(engine.spare_ids()).unwrap().pop().expect("a spare");
    drop(engine);
    let ls = stdout(&data.run(&["computer", "ls"]));
    let line = ls.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("no spare in {ls}"));
    assert!(line.contains("spare") && line.contains("running") && line.contains("started in advance"), "{line}");
    let rm = data.run(&["computer", "destroy", &id]);
    assert!(rm.status.success() && stdout(&rm).starts_with(&format!("removed the spare computer {id}")), "{}{}", stdout(&rm), stderr(&rm));
    let v = data.json(&["computer", "ls"]);
    assert_eq!(v["spares"], serde_json::json!([]));
    let containers = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &format!("label=botdesk.computer={id}")]).output().unwrap();
    assert!(String::from_utf8_lossy(&containers.stdout).trim().is_empty(), "the spare's container is left");
}

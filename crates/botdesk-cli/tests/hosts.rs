//! `botdesk host`: Docker engines on other machines, against a real second engine that `cargo
//! xtask test` starts in a network namespace of its own, reached over TCP with mutual TLS.

mod vnc;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_botdesk");

/// The second engine's address and the folder of test certificates (see xtask's RemoteEngine).
fn remote() -> (String, PathBuf) {
    let url = std::env::var("BOTDESK_TEST_REMOTE_URL")
        .expect("BOTDESK_TEST_REMOTE_URL is unset: run the tests with `cargo xtask test`, which starts a second Docker engine");
    let tls = std::env::var("BOTDESK_TEST_REMOTE_TLS").expect("BOTDESK_TEST_REMOTE_TLS is unset: run the tests with `cargo xtask test`");
    (url, PathBuf::from(tls))
}

fn botdesk(data: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("--data-dir").arg(data).args(args).output().unwrap()
}

fn json(data: &Path, args: &[&str]) -> Value {
    let out = botdesk(data, &[&["--json"], args].concat());
    assert!(out.status.success(), "botdesk {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Fails with exactly one line on stderr, naming the host; returns it.
fn refused(data: &Path, args: &[&str], host: &str) -> String {
    let out = botdesk(data, args);
    assert_eq!(out.status.code(), Some(1), "botdesk {args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("host {host}")), "names the host: {err}");
    err
}

#[test]
fn a_host_on_another_machine_is_added_checked_listed_and_removed() {
    let (url, tls) = remote();
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let good = tls.join("good");
    let good = good.to_str().unwrap();

    // Added only once it answered, with what its engine said of itself.
    let added = json(d, &["host", "add", "far", &url, "--tls-dir", good]);
    assert_eq!(added["host"]["name"], "far");
    assert!(added["engine"].as_str().unwrap().starts_with("Docker "), "{added}");
    let hosts = json(d, &["host", "ls"]);
    let names: Vec<&str> = hosts["hosts"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["local", "far"]);
    assert_eq!(hosts["hosts"][1]["url"], url.as_str());
    assert_eq!(hosts["hosts"][1]["tls_dir"], good);

    // The computer image goes there as one stream, with its progress; the host then has it (it
    // never pulled it from anywhere), and a second send finds it there.
    let out = botdesk(d, &["--json", "image", "send", "far"]);
    assert!(out.status.success(), "image send: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (last, progress) = lines.split_last().unwrap();
    assert_eq!(last["sent"], true, "{last}");
    let tag = last["image"].as_str().unwrap().to_string();
    let sent: Vec<u64> = progress.iter().filter(|p| p["progress"]["stage"] == "send").map(|p| p["progress"]["sent"].as_u64().unwrap()).collect();
    assert!(sent.len() > 10 && sent.windows(2).all(|w| w[0] < w[1]), "progress as it goes: {} reports", sent.len());
    assert!(*sent.last().unwrap() > 100 << 20, "the whole image went: {} bytes", sent.last().unwrap());
    let inspect = Command::new("docker")
        .args(["--tlsverify", "-H", &url])
        .arg("--tlscacert")
        .arg(Path::new(good).join("ca.pem"))
        .arg("--tlscert")
        .arg(Path::new(good).join("cert.pem"))
        .arg("--tlskey")
        .arg(Path::new(good).join("key.pem"))
        .args(["image", "inspect", "--format", "{{.Id}}", &tag])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "the host has {tag}: {}", String::from_utf8_lossy(&inspect.stderr));
    let again = json(d, &["image", "send", "far"]);
    assert_eq!(again["sent"], false, "{again}");
    assert!(String::from_utf8_lossy(&botdesk(d, &["image", "send", "nowhere"]).stderr).contains("not found"));

    // doctor checks it.
    let report: Value = serde_json::from_slice(&botdesk(d, &["--json", "doctor"]).stdout).unwrap();
    let far = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "host far").unwrap_or_else(|| panic!("no check of far: {report}"));
    assert_eq!(far["ok"], true, "{far}");
    assert!(far["detail"].as_str().unwrap().contains(&url), "{far}");

    // Each wrong set-up is one line naming the host and the fix, and nothing is added.
    let e = refused(d, &["host", "add", "untrusted", &url, "--tls-dir", tls.join("wrong-ca").to_str().unwrap()], "untrusted");
    assert!(e.contains("TLS handshake") && e.contains("signed by ca.pem"), "{e}");
    let e = refused(d, &["host", "add", "stranger", &url, "--tls-dir", tls.join("wrong-client").to_str().unwrap()], "stranger");
    assert!(e.contains("TLS handshake") && e.contains("trust cert.pem"), "{e}");
    let closed = url.rsplit_once(':').unwrap().0.to_string() + ":2399";
    let e = refused(d, &["host", "add", "closed", &closed, "--tls-dir", good], "closed");
    assert!(e.contains("nothing answers") && e.contains("--tlsverify"), "{e}");
    let e = refused(d, &["host", "add", "nowhere", "tcp://no-such-host.invalid:2376", "--tls-dir", good], "nowhere");
    assert!(e.contains("does not resolve"), "{e}");
    let e = refused(d, &["host", "add", "bare", &url, "--tls-dir", d.to_str().unwrap()], "bare");
    assert!(e.contains("ca.pem") && e.contains("--tls-dir"), "{e}");
    let e = refused(d, &["host", "add", "shell", "ssh://me@far", "--tls-dir", good], "shell");
    assert!(e.contains("use tcp://HOST:2376 with TLS"), "{e}");
    assert_eq!(json(d, &["host", "ls"])["hosts"].as_array().unwrap().len(), 2);
    let dup = botdesk(d, &["host", "add", "far", &url, "--tls-dir", good]);
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already exists"));
    let local = botdesk(d, &["host", "add", "local", &url, "--tls-dir", good]);
    assert!(String::from_utf8_lossy(&local.stderr).contains("`local` is the Docker engine on this machine"));

    // A private key other users may read is refused before anything is sent.
    let open = tempfile::tempdir().unwrap();
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(Path::new(good).join(f), open.path().join(f)).unwrap();
    }
    std::fs::set_permissions(open.path().join("key.pem"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let e = refused(d, &["host", "add", "open", &url, "--tls-dir", open.path().to_str().unwrap()], "open");
    assert!(e.contains("open to other users (mode 644)") && e.contains("chmod 600"), "{e}");

    // A host whose certificates went away fails its check in doctor, with the fix.
    let moved = tempfile::tempdir().unwrap();
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(Path::new(good).join(f), moved.path().join(f)).unwrap();
    }
    json(d, &["host", "add", "moving", &url, "--tls-dir", moved.path().to_str().unwrap()]);
    std::fs::remove_file(moved.path().join("key.pem")).unwrap();
    let out = botdesk(d, &["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "a failed check fails doctor");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let moving = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "host moving").unwrap();
    assert_eq!(moving["ok"], false);
    assert!(moving["detail"].as_str().unwrap().contains("key.pem") && moving["fix"].as_str().unwrap().contains("--tls-dir"), "{moving}");
    let text = String::from_utf8_lossy(&botdesk(d, &["doctor"]).stdout).to_string();
    assert!(text.lines().any(|l| l.starts_with("FAIL") && l.contains("host moving")), "{text}");

    // Removed, the host is gone; `local` stays.
    json(d, &["host", "rm", "moving"]);
    json(d, &["host", "rm", "far"]);
    assert_eq!(json(d, &["host", "ls"])["hosts"].as_array().unwrap().len(), 1);
    assert!(String::from_utf8_lossy(&botdesk(d, &["host", "rm", "local"]).stderr).contains("cannot be removed"));
    assert!(String::from_utf8_lossy(&botdesk(d, &["host", "rm", "far"]).stderr).contains("not found"));
}

/// Destroys every computer of a data directory when the test ends (also on a failed assertion).
struct Cleanup<'a>(&'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Ok(v) = serde_json::from_slice::<Value>(&botdesk(self.0, &["--json", "computer", "ls"]).stdout) {
            for c in v["computers"].as_array().into_iter().flatten() {
                let _ = botdesk(self.0, &["computer", "destroy", c["id"].as_str().unwrap()]);
            }
        }
    }
}

/// The containers of a computer on the second engine (found by its label there).
fn containers_there(url: &str, tls: &Path, computer: &str) -> String {
    docker_there(url, tls, &["ps", "-a", "-q", "--filter", &format!("label=botdesk.computer={computer}")])
}

/// The Docker CLI's answer from the second engine.
fn docker_there(url: &str, tls: &Path, args: &[&str]) -> String {
    let good = tls.join("good");
    let out = Command::new("docker")
        .args(["--tlsverify", "-H", url])
        .arg("--tlscacert")
        .arg(good.join("ca.pem"))
        .arg("--tlscert")
        .arg(good.join("cert.pem"))
        .arg("--tlskey")
        .arg(good.join("key.pem"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "docker {args:?} there: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_bot_works_on_a_computer_on_another_machine() {
    let (url, tls) = remote();
    // That engine remaps users (`userns-remap`, as the README suggests): everything below works
    // there too, with the bots' uid 1000 an unused host uid.
    assert!(docker_there(&url, &tls, &["info", "--format", "{{.SecurityOptions}}"]).contains("userns"), "the second engine remaps users");
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let _cleanup = Cleanup(d);
    json(d, &["host", "add", "far", &url, "--tls-dir", tls.join("good").to_str().unwrap()]);
    let sent = botdesk(d, &["image", "send", "far"]);
    assert!(sent.status.success(), "image send: {}", String::from_utf8_lossy(&sent.stderr));

    // A Private computer on that host: made there, not here.
    let bot = json(d, &["bot", "create", "farbot", "--computer", "private", "--host", "far"]);
    assert_eq!(bot["computer"]["host"], "far", "{bot}");
    let computer = bot["computer"]["id"].as_str().unwrap().to_string();
    let out = botdesk(d, &["exec", "farbot", "--", "sh", "-c", "echo hello from $(hostname); id -u"]);
    assert!(out.status.success(), "exec: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from botdesk\n1000\n");
    assert!(!containers_there(&url, &tls, &computer).is_empty(), "the computer runs on the second engine");
    let here = Command::new("docker").args(["ps", "-a", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&here.stdout).trim(), "", "and not on this machine's");

    // Files go there and come back through the Docker API.
    std::fs::write(d.join("note.txt"), b"written from the laptop").unwrap();
    json(d, &["files", "put", "farbot", d.join("note.txt").to_str().unwrap(), "notes/note.txt"]);
    assert_eq!(botdesk(d, &["files", "cat", "farbot", "notes/note.txt"]).stdout, b"written from the laptop");

    // The screen: screenshots and actions through the relay (no port opened there), and a stock
    // VNC client's handshake through a forwarded port.
    let shot = d.join("far.png");
    let s = json(d, &["screenshot", "farbot", shot.to_str().unwrap()]);
    assert_eq!((s["width"].as_u64(), s["height"].as_u64()), (Some(1280), Some(800)), "{s}");
    assert!(std::fs::read(&shot).unwrap().starts_with(b"\x89PNG"));
    let acted = json(d, &["act", "farbot", r#"[{"type":"move","x":640,"y":400}]"#]);
    assert_eq!(acted["actions"], 1, "{acted}");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut forward = Command::new(BIN)
        .arg("--data-dir")
        .arg(d)
        .args(["--json", "screen", "forward", "farbot", "--port", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(forward.stdout.take().unwrap()), &mut said).unwrap();
    let password = serde_json::from_str::<Value>(&said).unwrap()["password"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut viewer = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) => assert!(std::time::Instant::now() < deadline, "the forward never listened: {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    viewer.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    assert_eq!(vnc::login(&mut viewer, &password), (1280, 800), "ServerInit names the screen");
    drop(viewer);
    let _ = forward.kill();
    let _ = forward.wait();

    // A destroyed computer comes back on that host from its checkpoint, which is on this machine.
    let destroyed = json(d, &["computer", "destroy", &computer]);
    let home = PathBuf::from(destroyed["home"].as_str().unwrap());
    assert_eq!(std::fs::read(home.join("current/notes/note.txt")).unwrap(), b"written from the laptop", "the checkpoint is here");
    assert_eq!(containers_there(&url, &tls, &computer), "", "destroyed there");
    // (Reading a file of a computer that is not running reads its checkpoint; a command starts it.)
    assert_eq!(botdesk(d, &["files", "cat", "farbot", "notes/note.txt"]).stdout, b"written from the laptop", "browsable offline");
    assert_eq!(botdesk(d, &["exec", "farbot", "--", "cat", "notes/note.txt"]).stdout, b"written from the laptop", "restored there");
    assert!(!containers_there(&url, &tls, &computer).is_empty());

    // Each host has its own Team computer.
    let team = json(d, &["bot", "create", "farteam", "--host", "far"]);
    assert_eq!((team["computer"]["name"].as_str(), team["computer"]["host"].as_str()), (Some("team-far"), Some("far")), "{team}");
    let local = json(d, &["bot", "create", "hometeam"]);
    assert_eq!((local["computer"]["name"].as_str(), local["computer"]["host"].as_str()), (Some("team"), Some("local")), "{local}");

    // Switches between hosts: a Private computer moves whole (here and back), a bot's folder goes
    // from one host's Team computer to another's, and from a Team computer there to a Private one
    // here.
    let sw = json(d, &["bot", "switch", "farbot", "private", "--host", "local"]);
    assert_eq!((sw["to"].as_str(), sw["host"].as_str()), (Some("private-farbot"), Some("local")), "{sw}");
    assert_eq!(containers_there(&url, &tls, &computer), "", "nothing left there");
    let out = botdesk(d, &["exec", "farbot", "--", "cat", "notes/note.txt"]);
    assert_eq!(out.stdout, b"written from the laptop", "here now: {}", String::from_utf8_lossy(&out.stderr));
    let here = Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    assert_ne!(String::from_utf8_lossy(&here.stdout).trim(), "", "running on this machine");
    let sw = json(d, &["bot", "switch", "farbot", "private", "--host", "far"]);
    assert_eq!(sw["host"], "far", "{sw}");
    assert_eq!(botdesk(d, &["exec", "farbot", "--", "cat", "notes/note.txt"]).stdout, b"written from the laptop", "and back there");
    let out = botdesk(d, &["bot", "switch", "farbot", "private", "--host", "far"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already works on a Private computer of host far"), "{}", String::from_utf8_lossy(&out.stderr));

    std::fs::write(d.join("plan.txt"), b"the plan").unwrap();
    json(d, &["files", "put", "hometeam", d.join("plan.txt").to_str().unwrap(), "plan.txt"]);
    let sw = json(d, &["bot", "switch", "hometeam", "team", "--host", "far"]);
    assert_eq!((sw["from"].as_str(), sw["to"].as_str(), sw["copied"].as_u64()), (Some("team"), Some("team-far"), Some(1)), "{sw}");
    assert_eq!(botdesk(d, &["exec", "hometeam", "--", "cat", "plan.txt"]).stdout, b"the plan", "on the Team computer there");
    let sw = json(d, &["bot", "switch", "hometeam", "private", "--host", "local"]);
    assert_eq!((sw["from"].as_str(), sw["to"].as_str(), sw["host"].as_str()), (Some("team-far"), Some("private-hometeam"), Some("local")), "{sw}");
    assert_eq!(botdesk(d, &["exec", "hometeam", "--", "cat", "plan.txt"]).stdout, b"the plan", "on its Private computer here");

    // A host with computers on it is not removed; an unknown host gets no bot.
    let out = botdesk(d, &["host", "rm", "far"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("still has computers") && err.contains("private-farbot") && err.contains("team-far"), "{err}");
    let out = botdesk(d, &["bot", "create", "lost", "--host", "nowhere"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("host \"nowhere\""), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP link to the second engine that the test can cut and restore: the host "dropping off the
/// network" and coming back, on the same address.
struct Link {
    port: u16,
    target: std::net::SocketAddr,
    /// Set to stop the current listener; the open connections, to cut them.
    state: std::sync::Arc<std::sync::Mutex<(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::net::TcpStream>)>>,
}

impl Link {
    fn start(url: &str) -> Link {
        let target = url.trim_start_matches("tcp://").parse().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let link = Link { port, target, state: Default::default() };
        link.up();
        link
    }

    fn up(&self) {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.state.lock().unwrap().0 = stop.clone();
        let (state, target) = (self.state.clone(), self.target);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(down) = conn else { continue };
                let Ok(up) = std::net::TcpStream::connect(target) else { continue };
                state.lock().unwrap().1.extend([down.try_clone().unwrap(), up.try_clone().unwrap()]);
                for (mut from, mut to) in [(down.try_clone().unwrap(), up.try_clone().unwrap()), (up, down)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
    }

    /// Nothing answers any more, and every open connection breaks.
    fn cut(&self) {
        let mut state = self.state.lock().unwrap();
        state.0.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port)); // wakes the listener, which then closes
        for c in state.1.drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn scripted_model(d: &Path, id: &str, server: &botdesk_agent::scripted::ScriptedServer) {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .arg("--data-dir")
        .arg(d)
        .args(["model", "add", id, "--kind", "openai-compatible", "--model", "scripted", "--base-url", &server.base_url(botdesk_agent::Wire::OpenAi)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_host_that_drops_mid_run_fails_that_run_and_the_next_use_reconnects() {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    let (url, tls) = remote();
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let _cleanup = Cleanup(d);
    let link = Link::start(&url);
    let flaky_url = format!("tcp://127.0.0.1:{}", link.port);
    json(d, &["host", "add", "flaky", &flaky_url, "--tls-dir", tls.join("good").to_str().unwrap()]);
    let sent = botdesk(d, &["image", "send", "flaky"]);
    assert!(sent.status.success(), "image send: {}", String::from_utf8_lossy(&sent.stderr));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let far = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo safe > keep.txt"}))),
        Step::reply(Reply::text("kept")),
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo started; sleep 300", "timeout_s": 600}))),
    ]));
    let near = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("shell", serde_json::json!({"command": "echo steady"}))),
        Step::reply(Reply::text("steady")),
    ]));
    scripted_model(d, "far-model", &far);
    scripted_model(d, "near-model", &near);
    json(d, &["bot", "create", "flaky", "--computer", "private", "--host", "flaky", "--model", "far-model"]);
    json(d, &["bot", "create", "steady", "--model", "near-model"]);

    // A run there completes, and its checkpoint is here.
    let out = botdesk(d, &["run", "flaky", "keep something"]);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // The next run's command is running there when the host drops off the network.
    let run = Command::new(BIN)
        .arg("--data-dir")
        .arg(d)
        .args(["run", "flaky", "wait a long time"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !String::from_utf8_lossy(&botdesk(d, &["activity", "flaky"]).stdout).contains("[running]") {
        assert!(std::time::Instant::now() < deadline, "the run's command never started");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    link.cut();
    let out = run.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "the run fails: {said}");
    assert!(said.contains("Docker host cannot be reached") && said.contains("host flaky"), "clearly, naming the host: {said}");

    // Its lease is free, its files are safe in the checkpoint here, and the other bot goes on.
    let bots = json(d, &["bot", "list"]);
    let flaky = bots["bots"].as_array().unwrap().iter().find(|b| b["name"] == "flaky").unwrap().clone();
    let computers = json(d, &["computer", "ls"]);
    let home = computers["computers"].as_array().unwrap().iter().find(|c| c["name"] == "private-flaky").unwrap()["home"].as_str().unwrap().to_string();
    assert_eq!(std::fs::read(Path::new(&home).join("current/keep.txt")).unwrap(), b"safe\n", "{flaky}");
    let held = json(d, &["lease", "hold", "flaky", "--ms", "100"]);
    assert!(held["fence"].as_u64().is_some(), "the lease was freed: {held}");
    let out = botdesk(d, &["run", "steady", "go on"]);
    assert!(out.status.success(), "the bot here goes on: {}", String::from_utf8_lossy(&out.stderr));

    // While it is gone, each use says so in one line; once it is back, the next use reconnects.
    let out = botdesk(d, &["exec", "flaky", "--", "cat", "keep.txt"]);
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert!(!out.status.success() && err.lines().count() == 1 && err.contains("host flaky"), "{err}");
    link.up();
    let out = botdesk(d, &["exec", "flaky", "--", "cat", "keep.txt"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "safe\n", "{}", String::from_utf8_lossy(&out.stderr));
}

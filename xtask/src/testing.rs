//! `cargo xtask test`: the services the tests talk to, the unprivileged user they run as, and the
//! sweep of what a test run left.

use super::*;

/// Services the tests need, stopped when this is dropped.
pub(crate) struct Services {
    children: Vec<Child>,
    pids: Vec<u32>,
}

impl Drop for Services {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in &self.pids {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

// The person: tests run as an unprivileged user whose uid is not 1000 (root only installs packages
// and starts dockerd).

pub(crate) const TEST_USER: &str = "botdesk-test";
pub(crate) const TEST_UID: &str = "1777";

/// Creates the test user (in the `docker` group) and makes the checkout reachable for it. Returns
/// the command prefix that runs a program as that user.
pub(crate) fn test_user() -> Result<Vec<String>> {
    if !is_root() {
        // Already a person: run as ourselves.
        return Ok(vec![]);
    }
    if !quiet_ok(Command::new("id").arg(TEST_USER)) {
        say(&format!("creating the test user {TEST_USER} (uid {TEST_UID}, group docker)"));
        status(Command::new("useradd").args(["--create-home", "--uid", TEST_UID, "--user-group", "--groups", "docker", "--shell", "/bin/sh", TEST_USER]))?;
    }
    status(Command::new("usermod").args(["-aG", "docker", TEST_USER]))?;
    // The test binaries live in this checkout: every folder above it must let others through.
    let mut dir = root();
    loop {
        let mode = std::fs::metadata(&dir).map(|m| m.permissions().mode()).map_err(|e| e.to_string())?;
        if mode & 0o001 == 0 {
            say(&format!("letting {TEST_USER} through {} (chmod o+x)", dir.display()));
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o001)).map_err(|e| e.to_string())?;
        }
        if !dir.pop() {
            break;
        }
    }
    Ok(vec!["runuser".into(), "-u".into(), TEST_USER.into(), "--".into()])
}

/// A folder under target/ the test user may write.
pub(crate) fn user_dir(rel: &str, as_user: &[String]) -> Result<PathBuf> {
    let dir = root().join("target").join(rel);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if !as_user.is_empty() {
        status(Command::new("chown").args(["-R", &format!("{TEST_USER}:{TEST_USER}")]).arg(&dir))?;
    }
    Ok(dir)
}

pub(crate) fn host_triple() -> Result<String> {
    let out = Command::new("rustc").arg("-vV").output().map_err(|e| format!("cannot run rustc: {e}"))?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| l.strip_prefix("host: ").map(str::to_string)).ok_or_else(|| "rustc -vV named no host".into())
}

pub(crate) fn free_display() -> u32 {
    (90..200).find(|n| !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() && !Path::new(&format!("/tmp/.X{n}-lock")).exists()).unwrap_or(99)
}

/// `as_user` prefixes the services the tests talk to as that user (the session bus only lets its
/// own user in).
pub(crate) fn start_services(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<Services> {
    let mut s = Services { children: vec![], pids: vec![] };
    // A display for the app tests.
    let n = free_display();
    let xvfb = Command::new("Xvfb")
        .args([format!(":{n}"), "-screen".into(), "0".into(), "1280x800x24".into(), "-nolisten".into(), "tcp".into()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start Xvfb: {e}"))?;
    s.children.push(xvfb);
    let display = format!(":{n}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !quiet_ok(Command::new("xdpyinfo").args(["-display", &display])) {
        if Instant::now() > deadline {
            return Err("Xvfb did not answer within 20 s".into());
        }
        sleep(Duration::from_millis(100));
    }
    envs.push(("DISPLAY".into(), display));
    envs.push(("WEBKIT_DISABLE_COMPOSITING_MODE".into(), "1".into()));
    // A session bus with an unlocked Secret Service keyring, in a home of its own.
    let keyring_home = root().join("target/test-keyring-home");
    let _ = std::fs::remove_dir_all(&keyring_home);
    std::fs::create_dir_all(keyring_home.join("data")).map_err(|e| e.to_string())?;
    user_dir("test-keyring-home", as_user)?;
    let as_user_cmd = |program: &str| -> Command {
        match as_user.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        }
    };
    let out = as_user_cmd("dbus-daemon")
        .args(["--session", "--fork", "--print-address=1", "--print-pid=1"])
        .output()
        .map_err(|e| format!("cannot start dbus-daemon: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = text.lines();
    let address = lines.next().unwrap_or("").trim().to_string();
    if let Some(pid) = lines.next().and_then(|p| p.trim().parse().ok()) {
        s.pids.push(pid);
    }
    if address.is_empty() {
        return Err(format!("dbus-daemon printed no address: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut keyring = as_user_cmd("gnome-keyring-daemon")
        .args(["--unlock", "--components=secrets", "--foreground"])
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .env("HOME", &keyring_home)
        .env("XDG_DATA_HOME", keyring_home.join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start gnome-keyring-daemon: {e}"))?;
    // The password of the new login keyring: with an empty one gnome-keyring creates no default
    // collection and every write fails.
    if let Some(mut stdin) = keyring.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"botdesk-tests");
    }
    s.children.push(keyring);
    envs.push(("DBUS_SESSION_BUS_ADDRESS".into(), address));
    sleep(Duration::from_millis(500));
    Ok(s)
}

pub(crate) fn test(extra: &[String]) -> Result {
    prepare_without_image(true)?;
    let run_id = format!("{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    let mut envs = vec![("BOTDESK_TEST_RUN".to_string(), run_id.clone())];
    lint()?;
    // One build for everything: the test build makes the app and the CLI too (with the features
    // the tests unify; a separate `cargo build` of them would compile half the tree again). The
    // package test installs those binaries' package in a clean container.
    say("building every test, the app and the CLI, and their package");
    status(cargo().args(["test", "--workspace", "--no-run", "--quiet"]))?;
    build_image(&root().join("target/debug/botdesk"))?;
    make_deb(&root().join("target/debug"))?;
    enough_disk()?;
    let as_user = test_user()?;
    let services = start_services(&mut envs, &as_user)?;
    let remote = RemoteEngine::start(&mut envs, &as_user)?;
    let site = TestSite::start(&mut envs, &as_user)?;
    user_dir("e2e", &as_user)?;
    envs.push(("BOTDESK_TEST_MCP_PYTHON".into(), mcp_python()?.display().to_string()));
    envs.push(("BOTDESK_TEST_MCP_INSPECTOR".into(), mcp_inspector()?.display().to_string()));
    let mut test = cargo();
    test.args(["test", "--workspace", "--no-fail-fast"]);
    if !as_user.is_empty() {
        // Built as root, every test program runs as the person.
        say(&format!("running every test as {TEST_USER} (uid {TEST_UID})"));
        let runner = format!("target.{}.runner={:?}", host_triple()?, as_user);
        test.args(["--config", &runner]);
    } else {
        say("running every test");
    }
    let result = status(test.args(extra).envs(envs.iter().map(|(k, v)| (k, v))));
    drop(site);
    drop(remote);
    drop(services);
    let leftovers = sweep_containers(&run_id);
    result?;
    match leftovers {
        0 => Ok(()),
        n => Err(format!("the tests left {n} container(s) behind (removed now); every test must clean up")),
    }
}

/// The tests write homes, checkpoints and containers (a few GiB), and a checkpoint refuses to run
/// with less than 2 GiB free: with too little left after the build, say so once here rather than
/// through thirty failing tests.
fn enough_disk() -> Result {
    const NEED_GIB: u64 = 4;
    let mut least: Option<(u64, PathBuf)> = None;
    for dir in [root().join("target"), std::env::temp_dir(), PathBuf::from("/var/lib/docker")] {
        let out = Command::new("df").args(["-B1", "--output=avail"]).arg(&dir).output().map_err(|e| format!("cannot run df: {e}"))?;
        let free = String::from_utf8_lossy(&out.stdout).lines().nth(1).and_then(|l| l.trim().parse::<u64>().ok());
        if let Some(free) = free.filter(|f| least.as_ref().is_none_or(|(l, _)| f < l)) {
            least = Some((free, dir));
        }
    }
    let Some((free, dir)) = least else { return Ok(()) };
    let gib = free as f64 / (1u64 << 30) as f64;
    say(&format!("{gib:.1} GiB free on the disk holding {}", dir.display()));
    if free < NEED_GIB << 30 {
        return Err(format!(
            "only {gib:.1} GiB free on the disk holding {}: the tests need {NEED_GIB} GiB (checkpoints keep 2 GiB free); free some space (an old target/ is the usual culprit) and run again",
            dir.display()
        ));
    }
    Ok(())
}

/// The official MCP Python SDK (PyPI), the client the MCP tests drive `botdesk mcp` with: a venv
/// of the system's Python under target/, made once. Returns its python.
pub(crate) fn mcp_python() -> Result<PathBuf> {
    const SDK: &str = "mcp==2.3.0";
    let venv = root().join("target/mcp-py");
    let python = venv.join("bin/python");
    let ready = || quiet_ok(Command::new(&python).args(["-c", "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'"]));
    if !ready() {
        say(&format!("installing the MCP Python SDK ({SDK}) in {}", venv.display()));
        let _ = std::fs::remove_dir_all(&venv);
        status(Command::new("/usr/bin/python3").args(["-m", "venv"]).arg(&venv))?;
        status(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "--disable-pip-version-check", SDK]))?;
    }
    Ok(python)
}

/// The MCP Inspector (npm), whose CLI the MCP tests list the tools with: installed once under
/// target/. Returns its program.
pub(crate) fn mcp_inspector() -> Result<PathBuf> {
    const PACKAGE: &str = "@modelcontextprotocol/inspector@2.12.0";
    let dir = root().join("target/mcp-inspector");
    let bin = dir.join("node_modules/.bin/mcp-inspector");
    let version = dir.join("node_modules/@modelcontextprotocol/inspector/package.json");
    let ready = std::fs::read_to_string(&version).is_ok_and(|p| p.contains("\"version\": \"2.12.0\""));
    if !ready {
        say(&format!("installing the MCP Inspector ({PACKAGE}) in {}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        status(Command::new("npm").args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"]).arg(&dir).arg(PACKAGE))?;
    }
    Ok(bin)
}

/// Removes containers labelled with this test run; returns how many there were.
pub(crate) fn sweep_containers(run_id: &str) -> usize {
    // Each leftover is named with the test program that made it, so the leak can be found.
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label=botdesk.test-run={run_id}"),
            "--format",
            "{{.ID}} {{.Names}} {{.Status}} by {{.Label \"botdesk.test-binary\"}}",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let ids: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    if !ids.is_empty() {
        for l in out.lines() {
            eprintln!("left behind: {l}");
        }
        let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).stdout(Stdio::null()).status();
    }
    // Home volumes and networks go with their containers; any left (a test that removed its
    // containers by hand) are removed too.
    for (kind, what, rm) in [("volume", "home volume(s)", &["volume", "rm", "-f"][..]), ("network", "network(s)", &["network", "rm"][..])] {
        let out = Command::new("docker")
            .args([kind, "ls", "-q", "--filter", &format!("label=botdesk.test-run={run_id}")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let left: Vec<&str> = out.split_whitespace().collect();
        if !left.is_empty() {
            say(&format!("removing {} {what} the tests left", left.len()));
            let _ = Command::new("docker").args(rm).args(&left).stdout(Stdio::null()).status();
        }
    }
    ids.len()
}

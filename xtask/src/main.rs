//! Project automation. `cargo xtask run` and `cargo xtask test` are the two set-up commands of the
//! README: on a fresh Debian/Ubuntu machine they install missing system packages, make sure a
//! Docker engine answers, build the UI and the computer image, then launch the app or run every
//! test. `cargo xtask bench` measures and rewrites docs/benchmarks.md. `cargo xtask bundle` makes
//! the `.deb` people install.
//!
//! std only, so it builds before any system package is installed.

#[cfg(test)]
mod layers;

use std::os::unix::fs::PermissionsExt;
use std::{
    env,
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

type Result<T = ()> = std::result::Result<T, String>;

/// Packages to build and run the app and its computers.
const RUN_PACKAGES: &[&str] = &[
    "build-essential",
    "pkg-config",
    "libwebkit2gtk-4.1-dev",
    "libxdo-dev",
    "libssl-dev",
    "libayatana-appindicator3-dev",
    "librsvg2-dev",
    "docker.io",
    "debootstrap",
    "ca-certificates",
];
/// Packages a command adds to the list (the benchmarks' anchors).
static EXTRA: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
/// The benchmarks' anchors beyond the test packages.
const BENCH_PACKAGES: &[&str] = &["novnc", "websockify", "chromium", "iputils-ping", "iproute2"];
/// Extra packages the tests need: a display, screenshots, a Secret Service keyring, stock VNC
/// clients, a venv for the MCP Python SDK, a reader of the X clipboard, ffmpeg (replay videos,
/// ffprobe) and Chromium (a replay's HTML report, opened as a person would).
const TEST_PACKAGES: &[&str] = &[
    "ffmpeg",
    "chromium",
    "xvfb",
    "imagemagick",
    "xdotool",
    "x11-utils",
    "x11-xkb-utils",
    "dbus",
    "dbus-x11",
    "gnome-keyring",
    "webkit2gtk-driver",
    "vncsnapshot",
    "tigervnc-tools",
    "python3-venv",
    "xclip",
];

fn main() -> ExitCode {
    std::sync::LazyLock::force(&STARTED);
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(),
        Some("test") => test(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("bundle") => bundle(&args[1..]).map(|deb| say(&format!("made {}", deb.display()))),
        Some("prepare") => prepare(true),
        Some("queries") => queries(),
        Some("types") => types(),
        _ => Err("usage: cargo xtask run | test [cargo test args] | bench | bundle [--debug] | prepare | queries | types".into()),
    };
    match result {
        Ok(()) => {
            say("done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("failed: {e}"));
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// When this xtask started: each step it announces says how far in it is.
static STARTED: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

fn say(msg: &str) {
    let t = STARTED.elapsed().as_secs();
    eprintln!("\x1b[1mxtask\x1b[0m [{}:{:02}] {msg}", t / 60, t % 60);
}

fn status(cmd: &mut Command) -> Result {
    let shown = format!("{cmd:?}");
    let st = cmd.status().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({st})"))
    }
}

fn quiet_ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

fn have(cmd: &str) -> bool {
    env::var_os("PATH")
        .map(|p| env::split_paths(&p).chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")]).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn cargo() -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

// ------------------------------------------------------------------------------------------------
// Preparation

fn prepare(for_tests: bool) -> Result {
    prepare_without_image(for_tests)?;
    build_image(&debug_cli()?)
}

/// Packages, the Docker engine and the UI: the image comes later (`cargo xtask test` builds it
/// with the CLI of its test build, so the CLI is not compiled twice with different features).
fn prepare_without_image(for_tests: bool) -> Result {
    install_packages(for_tests)?;
    ensure_docker()?;
    build_ui()
}

fn debian_like() -> bool {
    std::fs::read_to_string("/etc/os-release")
        .map(|s| s.lines().any(|l| (l.starts_with("ID=") || l.starts_with("ID_LIKE=")) && (l.contains("debian") || l.contains("ubuntu"))))
        .unwrap_or(false)
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn install_packages(for_tests: bool) -> Result {
    let mut wanted: Vec<&str> = RUN_PACKAGES.to_vec();
    wanted.extend_from_slice(EXTRA.lock().unwrap().as_slice());
    if for_tests {
        wanted.extend_from_slice(TEST_PACKAGES);
    }
    // A Docker engine that already answers (Docker Desktop, docker-ce) needs no docker.io.
    if docker_answers() {
        wanted.retain(|p| *p != "docker.io");
    }
    if !have("node") || !have("npm") {
        wanted.extend_from_slice(&["nodejs", "npm"]);
    }
    if !quiet_ok(Command::new("python3").args(["-m", "pip", "--version"])) {
        wanted.extend_from_slice(&["python3", "python3-pip"]);
    }
    if !debian_like() {
        say("not a Debian/Ubuntu system: install the equivalents of these packages yourself:");
        eprintln!("  {}", wanted.join(" "));
        return Ok(());
    }
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let apt = |args: &[&str]| -> Command {
        let mut c = if is_root() {
            Command::new("apt-get")
        } else {
            let mut s = Command::new("sudo");
            s.arg("apt-get");
            s
        };
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    if !is_root() && !have("sudo") {
        return Err(format!("missing system packages; as root run:\n  apt-get update && apt-get install -y {}", missing.join(" ")));
    }
    say(&format!("installing system packages: {}", missing.join(" ")));
    status(&mut apt(&["update", "-qq"]))?;
    let mut install = apt(&["install", "-y", "-qq", "--no-install-recommends"]);
    install.args(&missing);
    status(&mut install)
}

fn docker_answers() -> bool {
    have("docker") && quiet_ok(Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]))
}

fn ensure_docker() -> Result {
    if docker_answers() {
        return Ok(());
    }
    if env::var_os("DOCKER_HOST").is_some() {
        return Err("DOCKER_HOST is set but no Docker engine answers there: start that engine".into());
    }
    if !have("dockerd") {
        return Err("no Docker engine answers and dockerd is not installed: install Docker (Debian: apt-get install docker.io)".into());
    }
    if !is_root() {
        return Err("the Docker engine is installed but not running: start it with `sudo systemctl start docker` (or `sudo dockerd &`)".into());
    }
    say("starting the Docker engine (dockerd)");
    let log = root().join("target").join("dockerd.log");
    std::fs::create_dir_all(log.parent().unwrap()).map_err(|e| e.to_string())?;
    let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    // setsid: the engine outlives this command, as a system service would.
    Command::new("setsid")
        .arg("dockerd")
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("cannot start dockerd: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if docker_answers() {
            return Ok(());
        }
        sleep(Duration::from_millis(250));
    }
    Err(format!("dockerd did not answer within 60 s; see {}", log.display()))
}

fn build_ui() -> Result {
    let ui = root().join("ui");
    if !ui.join("node_modules").join(".package-lock.json").exists() {
        say("installing the UI's npm packages");
        status(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&ui))?;
    }
    say("building the UI");
    status(Command::new("npm").args(["run", "--silent", "build"]).current_dir(&ui))
}

fn debug_cli() -> Result<PathBuf> {
    status(cargo().args(["build", "--quiet", "-p", "botdesk-cli"]))?;
    Ok(root().join("target/debug/botdesk"))
}

/// Builds the computer image only when the image for the current recipe is missing (with a
/// progress bar). The image lives in Docker; the CLI gets a data directory of its own under
/// `target/`, so the state of the developer's own database (say, a migration edited since it was
/// applied there) never decides whether a build or a CI run passes.
fn build_image(cli: &Path) -> Result {
    let data = root().join("target").join("xtask-data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    status(Command::new(cli).args(["image", "build"]).env("BOTDESK_DATA_DIR", &data))
}

// ------------------------------------------------------------------------------------------------
// run

fn run() -> Result {
    prepare(false)?;
    say("building the app");
    status(cargo().args(["build", "-p", "botdesk-app"]))?;
    let mut app = Command::new(root().join("target/debug/botdesk-app"));
    if env::var_os("DISPLAY").is_none() && env::var_os("WAYLAND_DISPLAY").is_none() {
        return Err("no display: run this in a desktop session (or set DISPLAY)".into());
    }
    say("launching Botdesk");
    status(&mut app)
}

// ------------------------------------------------------------------------------------------------
// test

/// Services the tests need, stopped when this is dropped.
struct Services {
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

// ------------------------------------------------------------------------------------------------
// The person: tests run as an unprivileged user whose uid is not 1000 (root only installs packages
// and starts dockerd).

const TEST_USER: &str = "botdesk-test";
const TEST_UID: &str = "1777";

/// Creates the test user (in the `docker` group) and makes the checkout reachable for it. Returns
/// the command prefix that runs a program as that user.
fn test_user() -> Result<Vec<String>> {
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
fn user_dir(rel: &str, as_user: &[String]) -> Result<PathBuf> {
    let dir = root().join("target").join(rel);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if !as_user.is_empty() {
        status(Command::new("chown").args(["-R", &format!("{TEST_USER}:{TEST_USER}")]).arg(&dir))?;
    }
    Ok(dir)
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc").arg("-vV").output().map_err(|e| format!("cannot run rustc: {e}"))?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| l.strip_prefix("host: ").map(str::to_string)).ok_or_else(|| "rustc -vV named no host".into())
}

fn free_display() -> u32 {
    (90..200).find(|n| !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() && !Path::new(&format!("/tmp/.X{n}-lock")).exists()).unwrap_or(99)
}

/// `as_user` prefixes the services the tests talk to as that user (the session bus only lets its
/// own user in).
fn start_services(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<Services> {
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

fn test(extra: &[String]) -> Result {
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

/// The official MCP Python SDK (PyPI), the client the MCP tests drive `botdesk mcp` with: a venv
/// of the system's Python under target/, made once. Returns its python.
fn mcp_python() -> Result<PathBuf> {
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
fn mcp_inspector() -> Result<PathBuf> {
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

// ------------------------------------------------------------------------------------------------
// A Docker engine on "another machine": a second dockerd in a network namespace of its own (with
// a veth pair to this one), listening only on its own address with mutual TLS, with private
// `/home` and `/tmp` so nothing of this machine's can be bind-mounted by accident. It remaps
// users (`--userns-remap default`: dockerd adds the `dockremap` user and its subordinate ids), so
// the tests of other hosts also show that computers work under remapping. Everything is
// per run (names, subnet, folders), so two runs on one machine do not meet, and all of it goes
// when the tests end.

struct RemoteEngine {
    netns: String,
    veth: String,
    root: PathBuf,
    pidfile: PathBuf,
    child: Option<Child>,
}

impl RemoteEngine {
    /// Starts it and tells the tests where it is: `BOTDESK_TEST_REMOTE_URL`, and in
    /// `BOTDESK_TEST_REMOTE_TLS` a folder with `good/` (certificates it trusts), `wrong-ca/` (a CA
    /// that did not sign it) and `wrong-client/` (a client certificate it does not trust).
    fn start(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<RemoteEngine> {
        if !is_root() {
            return Err("the tests of Docker hosts on other machines start a second dockerd in a network namespace: run `cargo xtask test` as root (the tests themselves run as an unprivileged user)".into());
        }
        let pid = std::process::id();
        let k = pid % 250 + 1;
        let (here, there) = (format!("10.231.{k}.1"), format!("10.231.{k}.2"));
        let mut e = RemoteEngine {
            netns: format!("botdesk-remote-{pid}"),
            veth: format!("bdr{}", pid % 100_000),
            // Outside /tmp and /home, which the engine sees as empty folders of its own.
            root: PathBuf::from(format!("/var/lib/botdesk-remote-{pid}")),
            pidfile: PathBuf::from(format!("/run/botdesk-remote-{pid}.pid")),
            child: None,
        };
        say(&format!("starting a second Docker engine at tcp://{there}:2376 (network namespace {})", e.netns));
        joined_netns(&e.netns, &e.veth, &[(here.as_str(), there.as_str())])?;
        status(Command::new("nsenter").arg(format!("--net=/run/netns/{}", e.netns)).args(["ip", "route", "add", "default", "via", &here]))?;
        // Certificates: the engine's (naming its address) under its root; the clients' where the
        // test user reads them.
        let server = e.root.join("tls");
        std::fs::create_dir_all(&server).map_err(|err| err.to_string())?;
        let clients = root().join("target/remote-tls");
        let _ = std::fs::remove_dir_all(&clients);
        make_certificates(&server, &clients, &there)?;
        user_dir("remote-tls", as_user)?;
        let script = format!(
            "mount -t tmpfs none /home && mount -t tmpfs none /tmp && exec dockerd --data-root {root}/data --exec-root {root}/exec \
             --userns-remap default --pidfile {pidfile} -H tcp://{there}:2376 --tlsverify --tlscacert {tls}/ca.pem --tlscert {tls}/server-cert.pem --tlskey {tls}/server-key.pem",
            root = e.root.display(),
            pidfile = e.pidfile.display(),
            tls = server.display(),
        );
        let log = std::fs::File::create(root().join("target/remote-dockerd.log")).map_err(|err| err.to_string())?;
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", e.netns))
            .args(["unshare", "-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(log.try_clone().map_err(|err| err.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|err| format!("cannot start the second dockerd: {err}"))?;
        e.child = Some(child);
        let good = clients.join("good");
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("tcp://{there}:2376");
        while !quiet_ok(
            Command::new("docker")
                .args(["--tlsverify", "-H", &url])
                .arg("--tlscacert")
                .arg(good.join("ca.pem"))
                .arg("--tlscert")
                .arg(good.join("cert.pem"))
                .arg("--tlskey")
                .arg(good.join("key.pem"))
                .arg("version"),
        ) {
            if Instant::now() > deadline {
                return Err("the second dockerd did not answer within 60 s; see target/remote-dockerd.log".into());
            }
            sleep(Duration::from_millis(200));
        }
        envs.push(("BOTDESK_TEST_REMOTE_URL".into(), url));
        envs.push(("BOTDESK_TEST_REMOTE_TLS".into(), clients.display().to_string()));
        Ok(e)
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["link", "del", &self.veth]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

// ------------------------------------------------------------------------------------------------
// The tests' web site (xtask/web/site.py): a network namespace of its own, joined to this one by a
// veth pair, with a private address (10.232.K.2, in a /24 of this run's) and one outside every
// private range (198.51.100.2, of the documentation range TEST-NET-2), serving port 8080 as the
// test user. What a bot's network policy refuses or lets through is reached there and nowhere
// else. Tests find it in BOTDESK_TEST_SITE and BOTDESK_TEST_SITE_PUBLIC.

struct TestSite {
    netns: String,
    veth: String,
    child: Option<Child>,
}

impl TestSite {
    fn start(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<TestSite> {
        if !is_root() {
            return Err("the network tests serve their site in a network namespace: run `cargo xtask test` as root".into());
        }
        let pid = std::process::id();
        let k = pid % 250 + 1;
        let (here, there) = (format!("10.232.{k}.1"), format!("10.232.{k}.2"));
        let (public_here, public_there) = ("198.51.100.1", "198.51.100.2");
        let mut site = TestSite { netns: format!("botdesk-site-{pid}"), veth: format!("bds{}", pid % 100_000), child: None };
        say(&format!("serving the tests' web site at http://{there}:8080 and http://{public_there}:8080 (network namespace {})", site.netns));
        joined_netns(&site.netns, &site.veth, &[(here.as_str(), there.as_str()), (public_here, public_there)])?;
        let mut serve = Command::new("nsenter");
        serve.arg(format!("--net=/run/netns/{}", site.netns)).args(as_user).arg("python3").arg(root().join("xtask/web/site.py")).arg("8080");
        site.child = Some(serve.stdin(Stdio::null()).spawn().map_err(|e| format!("cannot start the tests' web site: {e}"))?);
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr: std::net::SocketAddr = format!("{there}:8080").parse().map_err(|e| format!("{e}"))?;
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            if Instant::now() > deadline {
                return Err("the tests' web site did not answer within 20 s".into());
            }
            sleep(Duration::from_millis(100));
        }
        envs.push(("BOTDESK_TEST_SITE".into(), there));
        envs.push(("BOTDESK_TEST_SITE_PUBLIC".into(), public_there.into()));
        Ok(site)
    }
}

impl Drop for TestSite {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The server runs as the test user under runuser: whatever is left in the namespace goes.
        let _ = Command::new("ip").args(["netns", "pids", &self.netns]).output().map(|o| {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").arg(pid).status();
            }
        });
        let _ = Command::new("ip").args(["link", "del", &self.veth]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).stderr(Stdio::null()).status();
    }
}

/// Makes the network namespace `netns`, joined to this one by a veth pair (`veth` here, `veth`p
/// there) whose ends get the /24 addresses of each (here, there) pair; both ends and its loopback up.
fn joined_netns(netns: &str, veth: &str, addresses: &[(&str, &str)]) -> Result {
    let ip = |args: &[&str]| status(Command::new("ip").args(args));
    let inside = |args: &[&str]| status(Command::new("nsenter").arg(format!("--net=/run/netns/{netns}")).args(args));
    let peer = format!("{veth}p");
    ip(&["netns", "add", netns])?;
    ip(&["link", "add", veth, "type", "veth", "peer", "name", &peer])?;
    ip(&["link", "set", &peer, "netns", netns])?;
    for (here, there) in addresses {
        ip(&["addr", "add", &format!("{here}/24"), "dev", veth])?;
        inside(&["ip", "addr", "add", &format!("{there}/24"), "dev", &peer])?;
    }
    ip(&["link", "set", veth, "up"])?;
    inside(&["ip", "link", "set", &peer, "up"])?;
    inside(&["ip", "link", "set", "lo", "up"])
}

/// A test CA with a server certificate for `address` (in `server`) and, in `clients`: `good/`
/// (that CA and a client certificate it signed), `wrong-ca/` (another CA, so the server is not
/// trusted) and `wrong-client/` (a client certificate of another CA, which the server refuses).
fn make_certificates(server: &Path, clients: &Path, address: &str) -> Result {
    let openssl = |dir: &Path, args: &[&str]| status(Command::new("openssl").current_dir(dir).args(args).stderr(Stdio::null()));
    let ca = |dir: &Path, name: &str| {
        openssl(
            dir,
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", &format!("/CN={name}")],
        )
    };
    let sign = |dir: &Path, ca_dir: &Path, key: &str, cert: &str, subject: &str, ext: &str| -> Result {
        std::fs::write(dir.join("ext.cnf"), ext).map_err(|e| e.to_string())?;
        openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", "req.csr", "-subj", subject])?;
        let (ca_cert, ca_key) = (ca_dir.join("ca.pem"), ca_dir.join("ca-key.pem"));
        status(
            Command::new("openssl")
                .current_dir(dir)
                .args(["x509", "-req", "-in", "req.csr", "-CA"])
                .arg(&ca_cert)
                .arg("-CAkey")
                .arg(&ca_key)
                .args(["-CAcreateserial", "-out", cert, "-days", "2", "-extfile", "ext.cnf"])
                .stderr(Stdio::null()),
        )
    };
    let (good, wrong_ca, wrong_client, other) = (clients.join("good"), clients.join("wrong-ca"), clients.join("wrong-client"), clients.join("other-ca"));
    for d in [&good, &wrong_ca, &wrong_client, &other] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    ca(server, "botdesk test CA")?;
    sign(
        server,
        server,
        "server-key.pem",
        "server-cert.pem",
        &format!("/CN={address}"),
        // 127.0.0.1 too: a test reaches it through a relay of its own that it can cut.
        &format!("subjectAltName=IP:{address},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
    )?;
    sign(&good, server, "key.pem", "cert.pem", "/CN=botdesk test client", "extendedKeyUsage=clientAuth\n")?;
    std::fs::copy(server.join("ca.pem"), good.join("ca.pem")).map_err(|e| e.to_string())?;
    ca(&other, "another CA")?;
    sign(&wrong_client, &other, "key.pem", "cert.pem", "/CN=a stranger", "extendedKeyUsage=clientAuth\n")?;
    std::fs::copy(server.join("ca.pem"), wrong_client.join("ca.pem")).map_err(|e| e.to_string())?;
    std::fs::copy(other.join("ca.pem"), wrong_ca.join("ca.pem")).map_err(|e| e.to_string())?;
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(good.join(f), wrong_ca.join(f)).map_err(|e| e.to_string())?;
    }
    // The other CA's key is no one's business after signing.
    std::fs::remove_dir_all(&other).map_err(|e| e.to_string())?;
    Ok(())
}

/// The style is enforced (rustfmt's layout, no clippy warning), and the committed `.sqlx/` query
/// cache must match the queries and the migrations. One compile does both: clippy checks every
/// query against a database made from the migrations and writes what it learned into
/// `target/sqlx-check/`, which must equal `.sqlx/` (what `cargo sqlx prepare --check` does, without
/// a second compile of the workspace).
fn lint() -> Result {
    say("checking the layout (cargo fmt --check), the lints (cargo clippy -D warnings) and the .sqlx query cache");
    status(cargo().args(["fmt", "--all", "--check"])).map_err(|e| format!("{e}: run `cargo fmt --all`"))?;
    let fresh = root().join("target/sqlx-check");
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--quiet", "--", "-D", "warnings"]);
    compile_queries(&mut clippy, &fresh)?;
    let differs = |what: &str| format!(".sqlx/ {what}: run `cargo xtask queries` and commit .sqlx/");
    let committed = query_files(&root().join(".sqlx"))?;
    let learned = query_files(&fresh)?;
    if let Some(name) = learned.keys().find(|n| !committed.contains_key(*n)) {
        return Err(differs(&format!("lacks {name} (a query was added or changed)")));
    }
    for (name, text) in &committed {
        match learned.get(name) {
            None => return Err(differs(&format!("holds {name}, which no query uses any more"))),
            Some(t) if t != text => return Err(differs(&format!("has an outdated {name} (not what its query gives against the migrations)"))),
            Some(_) => {}
        }
    }
    Ok(())
}

/// `cargo xtask types`: rewrites `ui/src/types.ts` from the engine's front-end types
/// (`crates/botdesk-engine/src/dto.rs`); a test of `cargo xtask test` fails while it is stale.
fn types() -> Result {
    let mut write = cargo();
    write.args(["test", "--quiet", "-p", "botdesk-engine", "--lib", "dto::tests::"]).env("BOTDESK_WRITE_TYPES", "1");
    status(&mut write)?;
    say("wrote ui/src/types.ts");
    Ok(())
}

/// `cargo xtask queries`: rewrites `.sqlx/` from the queries and the migrations (only once they
/// all compiled: a failed compile leaves `.sqlx/` as it was).
fn queries() -> Result {
    let (fresh, dir) = (root().join("target/sqlx-queries"), root().join(".sqlx"));
    let mut check = cargo();
    check.args(["check", "--workspace", "--all-targets", "--quiet"]);
    compile_queries(&mut check, &fresh)?;
    let learned = query_files(&fresh)?;
    for name in query_files(&dir)?.keys() {
        std::fs::remove_file(dir.join(name)).map_err(|e| io(name, e))?;
    }
    for (name, text) in &learned {
        std::fs::write(dir.join(name), text).map_err(|e| io(name, e))?;
    }
    say(&format!("wrote {} query files to .sqlx/", learned.len()));
    Ok(())
}

fn io(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

/// Runs `compile` (a check of the workspace) with the query macros online against a database
/// made from the migrations, saving each query's description into `out` (emptied first).
fn compile_queries(compile: &mut Command, out: &Path) -> Result {
    let target = root().join("target");
    for name in query_files(out)?.keys() {
        std::fs::remove_file(out.join(name)).map_err(|e| io(name, e))?;
    }
    std::fs::create_dir_all(out).map_err(|e| io("the query folder", e))?;
    let tmp = target.join("sqlx-tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| io("target/sqlx-tmp", e))?;
    let db = target.join("sqlx-check.db");
    let _ = std::fs::remove_file(&db);
    // The schema is the migrations applied in order (their file names sort by version).
    let apply = "import sqlite3, sys, pathlib\n\
                 c = sqlite3.connect(sys.argv[1])\n\
                 for f in sorted(pathlib.Path(sys.argv[2]).glob('*.sql')):\n    c.executescript(f.read_text())\n\
                 c.commit()\n";
    status(Command::new("python3").args(["-c", apply]).arg(&db).arg(root().join("crates/botdesk-store/migrations")))?;
    // The macros run only when their crate compiles: touching its sources makes it compile. Every
    // query is in botdesk-store (a query elsewhere would be missed on a warm machine). Their times
    // are put back afterwards, so the test build does not compile the crates above it again.
    let src = root().join("crates/botdesk-store/src");
    let mut touched = vec![];
    for entry in std::fs::read_dir(&src).map_err(|e| io("crates/botdesk-store/src", e))? {
        let path = entry.map_err(|e| io("crates/botdesk-store/src", e))?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            let f = std::fs::File::options().append(true).open(&path).map_err(|e| io(&path.display().to_string(), e))?;
            let was = f.metadata().and_then(|m| m.modified()).map_err(|e| io(&path.display().to_string(), e))?;
            f.set_modified(std::time::SystemTime::now()).map_err(|e| io(&path.display().to_string(), e))?;
            touched.push((f, was));
        }
    }
    let compiled = status(
        compile.env("SQLX_OFFLINE", "false").env("SQLX_OFFLINE_DIR", out).env("SQLX_TMP", &tmp).env("DATABASE_URL", format!("sqlite://{}", db.display())),
    );
    for (f, was) in touched {
        let _ = f.set_modified(was);
    }
    compiled
}

/// The query files (`query-<hash>.json`) in `dir` by name, with their text.
fn query_files(dir: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let mut files = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(files) };
    for entry in entries {
        let path = entry.map_err(|e| io(&dir.display().to_string(), e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with("query-") && name.ends_with(".json") {
            files.insert(name, std::fs::read_to_string(&path).map_err(|e| io(&path.display().to_string(), e))?);
        }
    }
    Ok(files)
}

/// Removes containers labelled with this test run; returns how many there were.
fn sweep_containers(run_id: &str) -> usize {
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

// ------------------------------------------------------------------------------------------------
// bundle

/// What the package recommends beside what its programs link: the engine its computers run on,
/// debootstrap (the base image where none can be pulled), a Secret Service for the keys, and
/// ffmpeg (a run's replay decodes its recording, and its videos are made, on this machine).
const DEB_RECOMMENDS: &str = "docker.io | docker-ce, debootstrap, gnome-keyring | keepassxc, ffmpeg";

/// Makes `target/<profile>/bundle/deb/botdesk_<version>_<arch>.deb`: the app, the `botdesk` CLI,
/// the icons and a desktop entry, with `Depends` computed by `dpkg-shlibdeps` from the libraries
/// the two programs link (WebKitGTK among them), so `apt-get install ./botdesk_*.deb` pulls them.
/// The programs need nothing else from this tree: the UI and the computer image's recipe are
/// compiled into them. `--debug` packages the test build (stripped), which the package test
/// installs; the release package is what people get.
fn bundle(args: &[String]) -> Result<PathBuf> {
    let debug = args.iter().any(|a| a == "--debug");
    if let Some(other) = args.iter().find(|a| *a != "--debug") {
        return Err(format!("bundle takes only --debug, not {other:?}"));
    }
    install_packages(false)?;
    build_ui()?;
    let profile = if debug { "debug" } else { "release" };
    say(&format!("building the app and the CLI ({profile})"));
    let mut build = cargo();
    build.args(["build", "-p", "botdesk-app", "-p", "botdesk-cli"]);
    if !debug {
        build.arg("--release");
    }
    status(&mut build)?;
    make_deb(&root().join("target").join(profile))
}

fn make_deb(out: &Path) -> Result<PathBuf> {
    let version = workspace_version()?;
    let arch = String::from_utf8_lossy(&Command::new("dpkg").arg("--print-architecture").output().map_err(|e| io("dpkg", e))?.stdout).trim().to_string();
    let bundle = out.join("bundle/deb");
    let tree = bundle.join(format!("botdesk_{version}_{arch}"));
    let _ = std::fs::remove_dir_all(&tree);
    // Where a file of the package goes (its folders made); modes are set once at the end.
    let place = |rel: &str| -> Result<PathBuf> {
        let p = tree.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).map_err(|e| io(rel, e))?;
        Ok(p)
    };
    // The programs, stripped of symbols (the release profile keeps them; a package need not).
    for bin in ["botdesk-app", "botdesk"] {
        let dest = place(&format!("usr/bin/{bin}"))?;
        status(Command::new("strip").arg("-o").arg(&dest).arg(out.join(bin)))?;
    }
    for (size, icon) in [("32x32", "32x32.png"), ("128x128", "128x128.png"), ("512x512", "icon.png")] {
        let dest = place(&format!("usr/share/icons/hicolor/{size}/apps/botdesk.png"))?;
        std::fs::copy(root().join("icons").join(icon), dest).map_err(|e| io(icon, e))?;
    }
    let entry = place("usr/share/applications/botdesk.desktop")?;
    std::fs::write(
        entry,
        "[Desktop Entry]\nType=Application\nName=Botdesk\nGenericName=AI bots on their own desktops\n\
         Comment=Run AI bots on your own laptop, each on its own Linux desktop\nExec=botdesk-app\nIcon=botdesk\n\
         Terminal=false\nCategories=Development;Utility;\nStartupWMClass=botdesk-app\n",
    )
    .map_err(|e| io("desktop entry", e))?;
    let copyright = place("usr/share/doc/botdesk/copyright")?;
    std::fs::write(copyright, "Botdesk\nLicense: MIT OR Apache-2.0\n").map_err(|e| io("copyright", e))?;
    // Depends: what the programs link, as Debian names it.
    let depends = shlib_depends(&[tree.join("usr/bin/botdesk-app"), tree.join("usr/bin/botdesk")])?;
    let size_kib = du_kib(&tree);
    let control = place("DEBIAN/control")?;
    std::fs::write(
        control,
        format!(
            "Package: botdesk\nVersion: {version}\nArchitecture: {arch}\nMaintainer: Botdesk developers <botdesk@localhost>\n\
             Installed-Size: {size_kib}\nDepends: {depends}\nRecommends: {DEB_RECOMMENDS}\nSection: utils\nPriority: optional\n\
             Description: Run AI bots on your own laptop, each on its own Linux desktop\n \
             Every bot gets its own X display, Chromium profile and workspace inside a Docker\n \
             container. Watch their screens, open their terminals and files, take control.\n \
             Includes the desktop app (botdesk-app) and the command line (botdesk).\n"
        ),
    )
    .map_err(|e| io("control", e))?;
    status(Command::new("chmod").args(["-R", "u=rwX,go=rX"]).arg(&tree))?;
    status(Command::new("chmod").arg("755").arg(tree.join("usr/bin/botdesk-app")).arg(tree.join("usr/bin/botdesk")))?;
    let deb = bundle.join(format!("botdesk_{version}_{arch}.deb"));
    // gzip: xz would take a minute over the test build for a few MB saved.
    status(Command::new("dpkg-deb").args(["--root-owner-group", "-Zgzip", "--build"]).arg(&tree).arg(&deb).stdout(Stdio::null()))?;
    Ok(deb)
}

fn workspace_version() -> Result<String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let after = toml.split("[workspace.package]").nth(1).ok_or("no [workspace.package] in Cargo.toml")?;
    after
        .lines()
        .find_map(|l| l.trim().strip_prefix("version").map(|v| v.trim().trim_start_matches('=').trim().trim_matches('"').to_string()))
        .ok_or_else(|| "no version in [workspace.package]".into())
}

/// `dpkg-shlibdeps` of the programs: it wants a `debian/control` where it runs.
fn shlib_depends(bins: &[PathBuf]) -> Result<String> {
    let dir = root().join("target/shlibdeps");
    std::fs::create_dir_all(dir.join("debian")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("debian/control"), "Source: botdesk\n\nPackage: botdesk\nArchitecture: any\n").map_err(|e| e.to_string())?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.arg("-O").current_dir(&dir);
    for b in bins {
        cmd.arg(format!("-e{}", b.display()));
    }
    let out = cmd.output().map_err(|e| format!("cannot run dpkg-shlibdeps (package dpkg-dev): {e}"))?;
    if !out.status.success() {
        return Err(format!("dpkg-shlibdeps failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends=").map(str::to_string))
        .ok_or_else(|| "dpkg-shlibdeps named no dependencies".into())
}

fn du_kib(dir: &Path) -> u64 {
    let out = Command::new("du").args(["-sk", "--apparent-size"]).arg(dir).output();
    out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().next().and_then(|n| n.parse().ok())).unwrap_or(0)
}

// ------------------------------------------------------------------------------------------------
// bench

fn bench(extra: &[String]) -> Result {
    prepare(true)?;
    // The viewer's anchor: noVNC in headless Chromium through websockify.
    EXTRA.lock().unwrap().extend_from_slice(BENCH_PACKAGES);
    install_packages(true)?;
    say("building the app, the CLI and the benchmarks (release)");
    status(cargo().args(["build", "--release", "-p", "botdesk-app", "-p", "botdesk-bench", "-p", "botdesk-cli"]))?;
    let mut envs = vec![];
    let services = start_services(&mut envs, &[])?;
    // A computer on another machine: the second engine, over a link the bench shapes.
    let remote = RemoteEngine::start(&mut envs, &[])?;
    envs.push(("BOTDESK_BENCH_LINK_VETH".into(), remote.veth.clone()));
    envs.push(("BOTDESK_BENCH_LINK_NETNS".into(), remote.netns.clone()));
    let site = TestSite::start(&mut envs, &[])?;
    say("running the benchmarks");
    // `--only SECTION` prints one section and writes nothing; otherwise the whole table is written.
    let mut bench = Command::new(root().join("target/release/botdesk-bench"));
    if extra.first().map(String::as_str) != Some("--only") {
        bench.arg(root().join("docs/benchmarks.md"));
    }
    let result = status(bench.args(extra).envs(envs.iter().map(|(k, v)| (k, v))));
    drop(site);
    drop(remote);
    drop(services);
    result
}

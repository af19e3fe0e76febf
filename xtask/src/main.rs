//! Project automation. `cargo xtask run` and `cargo xtask test` are the two set-up commands of the
//! README: on a fresh Debian/Ubuntu machine they install missing system packages, make sure a
//! Docker engine answers, build the UI and the computer image, then launch the app or run every
//! test. `cargo xtask bench` measures and rewrites docs/benchmarks.md. `cargo xtask bundle` makes
//! the `.deb` people install.
//!
//! std only, so it builds before any system package is installed.

mod bench;
mod bundle;
mod checks;
#[cfg(test)]
mod layers;
mod prepare;
mod remote;
mod site;
mod testing;

use bench::*;
use bundle::*;
use checks::*;
use prepare::*;
use remote::*;
use site::*;
use testing::*;

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

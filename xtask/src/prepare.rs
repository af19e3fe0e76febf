//! Preparing a machine: system packages, a Docker engine that answers, the UI, the computer image.

use super::*;

pub(crate) fn prepare(for_tests: bool) -> Result {
    prepare_without_image(for_tests)?;
    build_image(&debug_cli()?)
}

/// Packages, the Docker engine and the UI: the image comes later (`cargo xtask test` builds it
/// with the CLI of its test build, so the CLI is not compiled twice with different features).
pub(crate) fn prepare_without_image(for_tests: bool) -> Result {
    install_packages(for_tests)?;
    ensure_docker()?;
    build_ui()
}

pub(crate) fn debian_like() -> bool {
    std::fs::read_to_string("/etc/os-release")
        .map(|s| s.lines().any(|l| (l.starts_with("ID=") || l.starts_with("ID_LIKE=")) && (l.contains("debian") || l.contains("ubuntu"))))
        .unwrap_or(false)
}

pub(crate) fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

pub(crate) fn install_packages(for_tests: bool) -> Result {
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

pub(crate) fn docker_answers() -> bool {
    have("docker") && quiet_ok(Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]))
}

pub(crate) fn ensure_docker() -> Result {
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

pub(crate) fn build_ui() -> Result {
    let ui = root().join("ui");
    if !ui.join("node_modules").join(".package-lock.json").exists() {
        say("installing the UI's npm packages");
        status(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&ui))?;
    }
    say("building the UI");
    status(Command::new("npm").args(["run", "--silent", "build"]).current_dir(&ui))
}

pub(crate) fn debug_cli() -> Result<PathBuf> {
    status(cargo().args(["build", "--quiet", "-p", "botdesk-cli"]))?;
    Ok(root().join("target/debug/botdesk"))
}

/// Builds the computer image only when the image for the current recipe is missing (with a
/// progress bar). The image lives in Docker; the CLI gets a data directory of its own under
/// `target/`, so the state of the developer's own database (say, a migration edited since it was
/// applied there) never decides whether a build or a CI run passes.
pub(crate) fn build_image(cli: &Path) -> Result {
    let data = root().join("target").join("xtask-data");
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    status(Command::new(cli).args(["image", "build"]).env("BOTDESK_DATA_DIR", &data))
}

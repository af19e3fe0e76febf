//! The package, installed where nothing else is: a clean Debian container made from the same
//! offline base as the computers gets the `.deb` (`cargo xtask test` makes it with
//! `cargo xtask bundle --debug`) through `apt-get install`, which must pull every library the
//! programs need from the package's own `Depends`. Then, as an unprivileged user and away from any
//! source tree: `botdesk doctor` finds the engine and the computer image (the recipe is inside the
//! program), and the app, launched under Xvfb, shows its first-run screen, not an error.
//!
//! The container reaches the test machine's Docker engine through its socket (a person's app
//! reaches their engine the same way) and nothing else of the host.

mod webdriver;

use serde_json::Value;
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};
use webdriver::*;

/// Test tools, fetched (not installed) in a layer kept between runs so each run downloads only
/// what changed; the package's own install below still starts from a system without WebKitGTK.
const TOOLS: &str = "xvfb x11-apps webkit2gtk-driver";

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().expect("the docker CLI")
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(out.status.success(), "docker {args:?} failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The package `cargo xtask test` made.
fn package() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/bundle/deb");
    std::fs::read_dir(&dir)
        .ok()
        .and_then(|d| d.filter_map(|e| e.ok().map(|e| e.path())).find(|p| p.extension().is_some_and(|x| x == "deb")))
        .unwrap_or_else(|| panic!("no .deb in {}: run the tests through `cargo xtask test`, which makes it", dir.display()))
}

/// The Debian base the computer image was made from: pulled, or made with debootstrap.
fn base_image() -> &'static str {
    ["debian:bookworm-slim", "botdesk/base:bookworm"]
        .into_iter()
        .find(|i| docker(&["image", "inspect", i]).status.success())
        .expect("no Debian bookworm base image: `cargo xtask test` makes one while building the computer image")
}

/// Removes the container and the installed image however the test ends.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.container]);
        let _ = docker(&["rmi", "-f", &self.image]);
    }
}

#[test]
fn the_installed_package_runs_its_first_run_screen() {
    let deb = package();
    let run = std::env::var("BOTDESK_TEST_RUN").unwrap_or_else(|_| "local".into());
    let ctx = tempfile::tempdir().unwrap();
    std::fs::copy(&deb, ctx.path().join("botdesk.deb")).unwrap();
    // The prefetch layer first, kept between runs; then the install, checked to start from a
    // system without WebKitGTK (with fresh package lists: what Debian has replaced since the
    // prefetch is fetched anew); then the test tools and the person.
    let base = base_image();
    let recipe = format!(
        "FROM {base}\nENV DEBIAN_FRONTEND=noninteractive\n\
         RUN apt-get update -qq && apt-get install -y -qq --download-only --no-install-recommends libwebkit2gtk-4.1-0 {TOOLS}\n"
    );
    // Tagged by its recipe: a changed recipe fetches anew.
    let prefetch = format!("botdesk-test/package-base:{:016x}", {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        recipe.hash(&mut h);
        h.finish()
    });
    std::fs::write(ctx.path().join("Dockerfile.base"), recipe).unwrap();
    docker_ok(&["build", "-q", "-t", &prefetch, "-f", &ctx.path().join("Dockerfile.base").to_string_lossy(), &ctx.path().to_string_lossy()]);
    let image = format!("botdesk-test/package:{run}");
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM {prefetch}\n\
             RUN ! dpkg -s libwebkit2gtk-4.1-0 >/dev/null 2>&1\n\
             COPY botdesk.deb /tmp/botdesk.deb\n\
             RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/botdesk.deb && rm /tmp/botdesk.deb\n\
             RUN apt-get install -y -qq --no-install-recommends {TOOLS}\n\
             RUN useradd -m -u 1777 -s /bin/bash person\n"
        ),
    )
    .unwrap();
    let cleanup = Cleanup { container: format!("botdesk-package-{run}"), image: image.clone() };
    docker_ok(&["build", "-q", "-t", &image, &ctx.path().to_string_lossy()]);

    // Installed where a person finds them.
    let listing = docker_ok(&["run", "--rm", &image, "dpkg", "-L", "botdesk"]);
    for path in ["/usr/bin/botdesk-app", "/usr/bin/botdesk", "/usr/share/applications/botdesk.desktop", "/usr/share/icons/hicolor/128x128/apps/botdesk.png"] {
        assert!(listing.lines().any(|l| l == path), "the package has no {path}:\n{listing}");
    }

    // The person: not root, not uid 1000, allowed on the engine's socket as on their laptop.
    let sock = "/var/run/docker.sock";
    let gid = std::fs::metadata(sock).expect("the Docker engine's socket").gid().to_string();
    let label = format!("botdesk.test-run={run}");
    docker_ok(&[
        "run", "-d", "--name", &cleanup.container, "--label", &label, "--user", "1777:1777", "--group-add", &gid, "-e", "HOME=/home/person",
        "-v", &format!("{sock}:{sock}"), "-p", "127.0.0.1::4444", "--shm-size", "256m", &image,
        "sh", "-c", "Xvfb :1 -screen 0 1280x800x24 -nolisten tcp & export DISPLAY=:1 WEBKIT_DISABLE_COMPOSITING_MODE=1 TAURI_WEBVIEW_AUTOMATION=true; cd \"$HOME\"; exec WebKitWebDriver --port=4444 --host=all",
    ]);

    // doctor, from the installed program: the engine, the image its embedded recipe names, the
    // display libraries the package pulled.
    let doctor = docker(&["exec", &cleanup.container, "botdesk", "doctor", "--json"]);
    let report: Value =
        serde_json::from_slice(&doctor.stdout).unwrap_or_else(|e| panic!("doctor said no JSON ({e}): {}", String::from_utf8_lossy(&doctor.stderr)));
    let checks = report["checks"].as_array().expect("doctor's checks");
    for name in ["docker", "image", "data_dir", "display_libraries"] {
        let c = checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("doctor has no {name} check: {report}"));
        assert_eq!(c["ok"], true, "installed doctor: {name} failed: {report}");
    }
    // No Secret Service in this container: doctor names the store keys go to instead.
    let keyring = checks.iter().find(|c| c["name"] == "keyring").expect("a keyring check");
    assert!(keyring["ok"] == true && keyring["detail"].as_str().is_some_and(|d| d.contains("keys.vault")), "{keyring}");
    a_key_in_the_vault_runs_a_task(&image, &run, &gid);

    // The app would keep a spare computer on the engine it shares with this machine, outliving
    // the test: off in the person's settings (the data directory doctor just made).
    docker_ok(&[
        "exec",
        &cleanup.container,
        "sh",
        "-c",
        r#"d="$HOME/.local/share/botdesk" && mkdir -p "$d" && printf '{"spare_computer": false}' > "$d/settings.json""#,
    ]);
    // The app, started by the container's WebKitWebDriver as the person.
    let port = docker_ok(&["port", &cleanup.container, "4444/tcp"]);
    let port = port.lines().next().and_then(|l| l.rsplit(':').next()).expect("the published port").trim().to_string();
    let d = Driver::attach(&format!("http://127.0.0.1:{port}"), "/usr/bin/botdesk-app", Duration::from_secs(60));
    // Hang guards, not timing bounds: the UI comes from inside the program.
    d.wait_js("the first-run screen", "return document.querySelector('#main h1')?.textContent === 'Welcome to Botdesk'", Duration::from_secs(90));
    d.wait_js("doctor's checks in the footer", "return document.querySelectorAll('.check').length >= 4", Duration::from_secs(60));
    let bad: Vec<String> = serde_json::from_value(d.js("return [...document.querySelectorAll('.check.bad')].map(c => c.textContent)")).unwrap();
    assert!(bad.iter().all(|c| c.contains("Keyring") || c.contains("keyring")), "the installed app flags more than the missing keyring: {bad:?}");
    let errors = d.js("return [...document.querySelectorAll('.error')].map(e => e.textContent).filter(t => t.trim())");
    assert_eq!(errors, serde_json::json!([]), "the first-run screen shows an error");

    // What the person sees, from the container's own display.
    let mut painted = false;
    for _ in 0..60 {
        // WebKit paints after layout: the heading's area is no longer the empty background.
        if distinct_colours(&screen_of(&cleanup.container, "23-installed-first-run")) > 16 {
            painted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(painted, "the installed app's window never painted: see target/e2e/23-installed-first-run.png");
    let log = docker_ok(&["logs", &cleanup.container]);
    assert!(log.contains("botdesk-app: ui ready, 0 bots listed"), "the app never reported its UI ready:\n{log}");

    // A model added on the first page: with no Secret Service, the app asks over the form for a
    // passphrase to keep keys with, then keeps the model; the key is in the vault, encrypted.
    const KEY: &str = "sk-ant-installed-app-key-77";
    d.type_into("#welcome-model-id", "claude");
    d.type_into("#welcome-model-name", "claude-sonnet-4-5");
    d.type_into("#welcome-model-key", KEY);
    d.click("#welcome-models .model-form button[type=submit]");
    d.wait_js("the passphrase asked", "return !!document.getElementById('unlock-again')", Duration::from_secs(30));
    d.type_into("#unlock-passphrase", "the installed app's passphrase");
    d.type_into("#unlock-again", "the installed app's passphrase");
    screen_of(&cleanup.container, "23b-installed-key-vault");
    d.click("#unlock-submit");
    d.wait_js(
        "the model kept",
        "return !!document.querySelector('#welcome-models [data-model=claude]') && !document.getElementById('unlock')",
        Duration::from_secs(30),
    );
    let mut grep = Command::new("docker")
        .args(["exec", "-i", &cleanup.container, "sh", "-c", r#"d="$HOME/.local/share/botdesk"; test -s "$d/keys.vault" && ! grep -rqF -f /dev/stdin "$d""#])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut grep.stdin.take().unwrap(), format!("{KEY}\n").as_bytes()).unwrap();
    assert!(grep.wait().unwrap().success(), "no key vault, or the key in the data directory in the clear");
    drop(d);
}

/// The container's screen as target/e2e/NAME.png.
fn screen_of(container: &str, name: &str) -> PathBuf {
    let (shot, xwd) = (e2e_dir().join(format!("{name}.png")), e2e_dir().join(format!("{name}.xwd")));
    docker_ok(&["exec", container, "xwd", "-root", "-display", ":1", "-out", "/tmp/screen.xwd"]);
    docker_ok(&["cp", &format!("{container}:/tmp/screen.xwd"), &xwd.to_string_lossy()]);
    let st = Command::new("convert").arg(format!("xwd:{}", xwd.display())).arg(&shot).status().expect("ImageMagick's convert");
    assert!(st.success(), "converting the container's screen capture");
    let _ = std::fs::remove_file(&xwd);
    shot
}

/// Without a Secret Service, the installed CLI keeps a model's key in the encrypted vault (its
/// passphrase from a file descriptor, as a script gives it) and a run reads it back: the scripted
/// model gets the key, and the key is in no file of the data directory in the clear. In a
/// container of its own on the host's network, where the scripted model and the computers'
/// published ports are.
fn a_key_in_the_vault_runs_a_task(image: &str, run: &str, gid: &str) {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    const KEY: &str = "sk-ant-package-vault-key-4242";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ScriptedServer::start(vec![Step::check(
        |s| {
            if s.headers.get("x-api-key").map(String::as_str) == Some(KEY) {
                Ok(())
            } else {
                Err(format!("the run sent the key {:?}", s.headers.get("x-api-key")))
            }
        },
        Reply::text("Hello from the vault."),
    )]));
    let url = server.base_url(botdesk_agent::Wire::Anthropic);
    // The passphrase and the key reach the programs on a descriptor and stdin, never as arguments.
    let script = format!(
        r#"set -e
d="$HOME/.local/share/botdesk"; mkdir -p "$d"; printf '{{"spare_computer": false}}' > "$d/settings.json"
printf '%s\n' {KEY} | BOTDESK_PASSPHRASE_FD=3 botdesk model add m --kind anthropic --model claude-sonnet-4-5 --base-url {url} 3<<'P'
a passphrase for the package test
P
botdesk doctor --json > /tmp/doctor.json || true
botdesk bot create b --model m
trap 'botdesk bot rm b >/dev/null' EXIT
BOTDESK_PASSPHRASE_FD=3 botdesk run b "say hello" 3<<'P'
a passphrase for the package test
P
echo "--- wrong passphrase"
BOTDESK_PASSPHRASE_FD=3 botdesk run b "say hello again" 3<<'P' || echo "refused: $?"
not the passphrase
P
echo "--- doctor"; cat /tmp/doctor.json
echo "--- clear text"; grep -rlF -f /dev/stdin "$d" <<'K' || echo "nowhere"
{KEY}
K
"#
    );
    let mut child = Command::new("docker")
        .args(["run", "--rm", "-i", "--network", "host", "--user", "1777:1777", "--group-add", gid, "-e", "HOME=/home/person"])
        .args(["-e", &format!("BOTDESK_TEST_RUN={run}"), "--label", &format!("botdesk.test-run={run}"), "-v", "/var/run/docker.sock:/var/run/docker.sock"])
        .args([image, "sh", "-s"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker run");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the CLI in the package's container failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Hello from the vault."), "the run did not finish with the model's answer:\n{stdout}\n{stderr}");
    assert_eq!(server.failures(), Vec::<String>::new(), "the scripted model refused a request");
    assert!(stdout.contains("refused: ") && stderr.contains("wrong passphrase"), "a wrong passphrase was not refused:\n{stdout}\n{stderr}");
    let doctor = stdout.split("--- doctor").nth(1).and_then(|t| t.split("--- clear text").next()).unwrap_or_default();
    assert!(doctor.contains("keys are kept in the encrypted file /home/person/.local/share/botdesk/keys.vault"), "{doctor}");
    assert!(stdout.trim_end().ends_with("nowhere"), "the key is in the data directory in the clear:\n{stdout}");
}

/// How many colours a PNG holds (ImageMagick): a blank or unpainted screen has one or two.
fn distinct_colours(png: &Path) -> usize {
    let out = Command::new("identify").args(["-format", "%k"]).arg(png).output().expect("ImageMagick's identify");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

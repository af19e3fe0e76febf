//! A small WebDriver client for the real app: WebKitWebDriver (Debian's `webkit2gtk-driver`, the
//! driver tauri-driver would only proxy to) starts `botdesk-app` and we drive its window over the
//! W3C protocol. Screenshots come from the X server (`import -window root`): WebDriver's own
//! screenshot hangs with compositing disabled.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, Once},
    time::{Duration, Instant},
};

/// The longest an app test binary may run. Past it the watchdog prints what the test last asked
/// of the app and the app's log, and ends the binary: a hang would otherwise hold the whole suite
/// until CI's own limit with nothing printed (libtest shows a test's output only when it ends).
const WATCHDOG: Duration = Duration::from_secs(10 * 60);

/// What the watchdog reports: the last WebDriver request and when it was sent, the app's log, and
/// the drivers to stop.
struct Watched {
    last: Option<(Instant, String)>,
    log: Option<PathBuf>,
    drivers: Vec<u32>,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched { last: None, log: None, drivers: vec![] });

fn watched() -> std::sync::MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the watchdog (once per test binary).
fn watch(app: &Path) {
    static STARTED: Once = Once::new();
    let app = app.to_path_buf();
    STARTED.call_once(move || {
        std::thread::spawn(move || {
            std::thread::sleep(WATCHDOG);
            let w = watched();
            // Straight to stderr: libtest captures only print!/eprint!, and this test never ends.
            let mut err = std::io::stderr().lock();
            let last = w.last.as_ref().map(|(at, what)| format!("{what} ({} s ago)", at.elapsed().as_secs())).unwrap_or_else(|| "none".into());
            let _ = writeln!(err, "\nwatchdog: this app test ran for over {} s; its last WebDriver request: {last}", WATCHDOG.as_secs());
            if let Some(log) = &w.log {
                let _ = err.write_all(log_tail(log).as_bytes());
            }
            for pid in &w.drivers {
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            }
            let _ = Command::new("pkill").arg("-KILL").arg("-f").arg(&app).status();
            let _ = err.flush();
            std::process::exit(101);
        });
    });
}

/// The end of the app's log, headed with its path, for a failure's output.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(60).collect();
    let mut out = format!("--- the app's log ({}), last {} lines ---\n", log.display(), tail.len());
    tail.iter().rev().for_each(|l| out.extend([*l, "\n"]));
    out
}

pub struct Driver {
    base: String,
    session: String,
    /// WebKitWebDriver, when this started it; `None` for a driver that runs elsewhere (a container).
    child: Option<Child>,
    app: PathBuf,
    /// The app's own log (its stderr, through the driver), printed when a test fails.
    log: Option<PathBuf>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let (true, Some(log)) = (std::thread::panicking(), &self.log) {
            eprint!("{}", log_tail(log));
        }
        let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).timeout(Duration::from_secs(10)).call();
        let Some(child) = &mut self.child else { return };
        let _ = child.kill();
        let _ = child.wait();
        // WebKitWebDriver leaves the app running when its driver dies: make sure it is gone.
        // Wait until it is: a dying app could still reconnect a screen and so start a computer
        // the test has just destroyed.
        let _ = Command::new("pkill").arg("-f").arg(&self.app).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Command::new("pgrep").arg("-f").arg(&self.app).stdout(Stdio::null()).status().is_ok_and(|s| s.success()) {
            if Instant::now() > deadline {
                let _ = Command::new("pkill").arg("-KILL").arg("-f").arg(&self.app).status();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Turns the spare computer off in a data directory's settings (kept otherwise).
pub fn no_spare(data_dir: &Path) {
    let path = data_dir.join("settings.json");
    let mut settings: serde_json::Value = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_else(|| serde_json::json!({}));
    settings["spare_computer"] = false.into();
    std::fs::write(&path, settings.to_string()).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Driver {
    /// Starts WebKitWebDriver and a session on the app (retried: a driver sometimes drops one).
    pub fn start(app: &Path, envs: &[(&str, &str)]) -> Driver {
        assert!(std::env::var_os("DISPLAY").is_some(), "no DISPLAY: run the app tests through `cargo xtask test`, which starts Xvfb");
        watch(app);
        // The app's spare computer would outlive the test: off, unless a test asks for it.
        if let Some((_, dir)) = envs.iter().find(|(k, _)| *k == "BOTDESK_DATA_DIR") {
            no_spare(Path::new(dir));
        }
        let mut last = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let mut cmd = Command::new("WebKitWebDriver");
            let log = e2e_dir().join(format!("app-{}-{port}.log", std::process::id()));
            let file = std::fs::File::create(&log).unwrap();
            cmd.arg(format!("--port={port}")).stdout(file.try_clone().unwrap()).stderr(file);
            // What tauri-driver would set: the app's webview accepts automation only with these.
            cmd.env("WEBKIT_DISABLE_COMPOSITING_MODE", "1").env("TAURI_AUTOMATION", "true").env("TAURI_WEBVIEW_AUTOMATION", "true");
            if std::env::var_os("BOTDESK_LOG").is_none() {
                cmd.env("BOTDESK_LOG", "info,botdesk_app=debug");
            }
            for (k, v) in envs {
                cmd.env(k, v);
            }
            let child = cmd.spawn().expect("WebKitWebDriver (package webkit2gtk-driver; cargo xtask test installs it)");
            let mut w = watched();
            w.drivers.push(child.id());
            w.log = Some(log.clone());
            drop(w);
            let base = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while ureq::get(&format!("{base}/status")).call().is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let caps = json!({"capabilities": {"alwaysMatch": {"webkitgtk:browserOptions": {"binary": app, "args": []}}}});
            match ureq::post(&format!("{base}/session")).timeout(Duration::from_secs(60)).send_json(caps) {
                Ok(r) => {
                    let v: Value = r.into_json().unwrap();
                    let session = v["value"]["sessionId"].as_str().unwrap().to_string();
                    return Driver { base, session, child: Some(child), app: app.to_path_buf(), log: Some(log) };
                }
                Err(e) => {
                    last = e.to_string();
                    let mut child = child;
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = Command::new("pkill").arg("-f").arg(app).status();
                }
            }
        }
        panic!("no WebDriver session after 3 attempts: {last}");
    }

    /// A session on a WebKitWebDriver already listening at `base` (in a container), which starts
    /// `app` (a path where that driver runs). Waits up to `timeout` for the driver to answer.
    pub fn attach(base: &str, app: &str, timeout: Duration) -> Driver {
        watch(Path::new(app));
        let deadline = Instant::now() + timeout;
        let caps = json!({"capabilities": {"alwaysMatch": {"webkitgtk:browserOptions": {"binary": app, "args": []}}}});
        loop {
            let last = match ureq::post(&format!("{base}/session")).timeout(Duration::from_secs(60)).send_json(caps.clone()) {
                Ok(r) => {
                    let v: Value = r.into_json().unwrap();
                    let session = v["value"]["sessionId"].as_str().unwrap().to_string();
                    return Driver { base: base.to_string(), session, child: None, app: PathBuf::from(app), log: None };
                }
                Err(e) => e.to_string(),
            };
            assert!(Instant::now() < deadline, "no WebDriver session at {base} within {timeout:?}: {last}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let what: String = format!("{method} {path} {}", body.as_ref().map(|b| b.to_string()).unwrap_or_default()).chars().take(300).collect();
        watched().last = Some((Instant::now(), what));
        let req = ureq::request(method, &url).timeout(Duration::from_secs(30));
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        match res {
            Ok(r) => Ok(r.into_json::<Value>().map_err(|e| e.to_string())?["value"].clone()),
            Err(ureq::Error::Status(_, r)) => Err(r.into_string().unwrap_or_default()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs JavaScript in the page and returns its result.
    pub fn js(&self, script: &str) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": []}))).unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs an asynchronous script (it calls `arguments[arguments.length - 1]` with its result).
    pub fn js_async(&self, script: &str) -> Value {
        self.call("POST", "/execute/async", Some(json!({"script": script, "args": []}))).unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until the script returns true.
    pub fn wait_js(&self, what: &str, script: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.call("POST", "/execute/sync", Some(json!({"script": script, "args": []}))).ok() == Some(Value::Bool(true)) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The element for a CSS selector, waiting for it to appear.
    pub fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(v) = self.call("POST", "/element", Some(json!({"using": "css selector", "value": css}))) {
                if let Some(id) = v.as_object().and_then(|o| o.values().next()).and_then(|v| v.as_str()) {
                    return id.to_string();
                }
            }
            assert!(Instant::now() < deadline, "no element {css}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An element action, found again when the UI re-rendered it in between (live views re-render
    /// as events arrive).
    fn on_element(&self, css: &str, what: &str, method: &str, suffix: &str, body: Option<Value>) -> Value {
        let mut last = String::new();
        for _ in 0..5 {
            let id = self.find(css);
            match self.call(method, &format!("/element/{id}/{suffix}"), body.clone()) {
                Ok(v) => return v,
                Err(e) if e.contains("stale element reference") => last = e,
                Err(e) => panic!("{what} {css}: {e}"),
            }
        }
        panic!("{what} {css}: {last}");
    }

    pub fn click(&self, css: &str) {
        self.on_element(css, "click", "POST", "click", Some(json!({})));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        self.on_element(css, "type into", "POST", "value", Some(json!({"text": text})));
    }

    pub fn text(&self, css: &str) -> String {
        self.on_element(css, "text of", "GET", "text", None).as_str().unwrap_or("").to_string()
    }

    /// The element's role and accessible name as WebKit's accessibility tree computes them for
    /// screen readers (WebDriver's computed role and label).
    pub fn accessible(&self, css: &str) -> (String, String) {
        let role = self.on_element(css, "role of", "GET", "computedrole", None).as_str().unwrap_or("").to_string();
        let label = self.on_element(css, "label of", "GET", "computedlabel", None).as_str().unwrap_or("").to_string();
        (role, label)
    }
}

pub fn e2e_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/e2e");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A screenshot of the whole X display, saved under target/e2e/.
pub fn screenshot(name: &str) -> PathBuf {
    let path = e2e_dir().join(name);
    let st = Command::new("import").args(["-window", "root"]).arg(&path).status().unwrap();
    assert!(st.success(), "screenshot failed");
    path
}

/// One pixel of a PNG as "r,g,b" (ImageMagick).
pub fn pixel(png: &Path, x: i64, y: i64) -> String {
    let out = Command::new("convert")
        .arg(png)
        .args(["-format", &format!("%[fx:int(255*p{{{x},{y}}}.r)],%[fx:int(255*p{{{x},{y}}}.g)],%[fx:int(255*p{{{x},{y}}}.b)]"), "info:"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Real input on the app's X display.
pub fn xdotool(args: &[&str]) {
    let st = Command::new("xdotool").args(args).status().unwrap();
    assert!(st.success(), "xdotool {args:?}");
}

//! Viewer figures: the real app (release build, under the bench's X display, driven through
//! WebKitWebDriver) against noVNC 1.3 (Debian's `novnc`) in headless Chromium, both on the same
//! x11vnc transports of the same computer, in the same run.
//!   * throughput: whole screens drawn per second (pixels drawn ÷ the canvas's area, so partial
//!     updates count for their share; the app draws at the tab's size, noVNC at full size and
//!     lets the browser scale) while a program on the bot's display repaints the whole
//!     screen from four server-side stripe pixmaps, ~200 times a second at most;
//!   * input → pixel: a key press sent by the viewer until the viewer has drawn the echoed
//!     character of an xterm (median of 30);
//!   * idle: CPU and memory (PSS, the process and all its children) with four screens open, and
//!     with the visible one also in a window of its own.

use std::{
    io::{Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ProviderChoice};

#[path = "../../../src-tauri/tests/webdriver/mod.rs"]
mod webdriver;

pub struct Figures {
    pub fps_ours: f64,
    pub fps_anchor: f64,
    pub source_fps_ours: f64,
    pub source_fps_anchor: f64,
    pub latency_ours: f64,
    pub latency_anchor: f64,
    pub idle_cpu_ours: f64,
    pub idle_mem_ours: f64,
    pub idle_cpu_anchor: f64,
    pub idle_mem_anchor: f64,
    /// Four tabs, the visible screen also in a window of its own; beside the same four tabs
    /// without it, measured just before (after the latency run, so both with its xterm).
    pub window_cpu: f64,
    pub window_mem: f64,
    pub tabs_cpu: f64,
    pub tabs_mem: f64,
}

/// Repaints the whole screen with four stripe patterns in turn for ARGV[1] seconds, then writes
/// its own frames per second to ARGV[2].
const GENERATOR: &str = r#"
import sys, time
from Xlib import X, display
secs, out = float(sys.argv[1]), sys.argv[2]
d = display.Display(); s = d.screen()
W, H = 1280, 800
w = s.root.create_window(0, 0, W, H, 0, s.root_depth, X.InputOutput, X.CopyFromParent, override_redirect=1, background_pixel=0)
w.map(); d.sync()
gc = w.create_gc()
pixmaps = []
for k in range(4):
    p = w.create_pixmap(W, H, s.root_depth)
    f = bytes(((x * 2 + k * 64) & 255) for x in range(W * 4)) * H
    for y in range(0, H, 40):
        p.put_image(gc, 0, y, W, 40, X.ZPixmap, 24, 0, f[y * W * 4:(y + 40) * W * 4])
    pixmaps.append(p)
d.sync()
n, t = 0, time.time()
while time.time() - t < secs:
    w.copy_area(gc, pixmaps[n % 4], 0, 0, W, H, 0, 0)
    d.sync(); n += 1
    time.sleep(0.004)
open(out, "w").write(str(n / (time.time() - t)))
w.destroy(); d.sync()
"#;

/// The noVNC harness: connects to every websockify port in `ports`, then measures per `mode`
/// and posts the result to the bench's listener.
const HARNESS: &str = r#"<!doctype html><meta charset="utf-8"><body style="margin:0">
<script type="module">
import RFB from './core/rfb.js';
const q = new URLSearchParams(location.search);
const ports = q.get('ports').split(','), mode = q.get('mode'), report = q.get('report');
const post = (r) => fetch(`http://127.0.0.1:${report}/result`, {method: 'POST', mode: 'no-cors', body: JSON.stringify(r)});
let flips = 0, lastFlip = 0, pixels = 0;
const rfbs = ports.map((p) => {
  const div = document.createElement('div'); div.style.cssText = 'width:640px;height:400px;display:inline-block';
  document.body.append(div);
  const rfb = new RFB(div, `ws://127.0.0.1:${p}/`, {shared: true});
  rfb.scaleViewport = true;
  const d = rfb._display, orig = d.flip.bind(d);
  d.flip = (fromQueue) => {
    const real = d._renderQ.length === 0 || fromQueue, b = d._damageBounds;
    if (real) pixels += Math.max(0, b.right - b.left) * Math.max(0, b.bottom - b.top);
    orig(fromQueue);
    if (real) { flips++; lastFlip = performance.now(); }
  };
  return new Promise((ok) => rfb.addEventListener('connect', () => ok(rfb)));
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const all = await Promise.all(rfbs);
await sleep(1000);
if (mode === 'idle') { post({ready: true}); }
if (mode === 'throughput') {
  await post({ready: true});
  await sleep(1500);
  const p1 = pixels; await sleep(5000);
  post({fps: (pixels - p1) / (1280 * 800) / 5});
}
if (mode === 'latency') {
  const rfb = all[0]; const out = [];
  for (let i = 0; i < 30; i++) {
    await sleep(150);
    const f0 = flips, t0 = performance.now();
    rfb.sendKey(0x78, 'KeyX');
    while (flips === f0 && performance.now() - t0 < 1000) await sleep(0);
    out.push(lastFlip - t0);
  }
  post({latencies: out});
}
</script>"#;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn sh(e: &Engine, bot: &str, cmd: &str) -> String {
    let (code, out) = e.shell(&e.bot_ref(bot).await.unwrap(), cmd).await.unwrap();
    assert_eq!(code, 0, "{cmd}: {out}");
    out
}

/// Starts the generator on the bot's display; returns the file its frame rate lands in.
async fn generate(e: &Engine, bot: &str, display: u32, secs: u32, tag: &str) -> String {
    let out = format!("/home/botdesk/shared/bench/gen-{tag}.txt");
    sh(e, bot, &format!("rm -f {out}; (DISPLAY=:{display} setsid python3 /home/botdesk/shared/bench/gen.py {secs} {out} >/dev/null 2>&1 &)")).await;
    out
}

async fn generated_fps(e: &Engine, bot: &str, out: &str) -> f64 {
    for _ in 0..100 {
        if let Ok(v) = sh(e, bot, &format!("cat {out} 2>/dev/null || true")).await.trim().parse() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the generator never reported");
}

/// CPU (percent of one core over `secs`) and memory (PSS, MiB) of a process and its descendants.
fn cpu_and_memory(root: u32, secs: f64) -> (f64, f64) {
    fn tree(root: u32) -> Vec<u32> {
        let mut all = vec![root];
        let mut i = 0;
        while i < all.len() {
            let parent = all[i];
            for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
                let after = &stat[stat.rfind(')').unwrap_or(0) + 2..];
                if after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) && !all.contains(&pid) {
                    all.push(pid);
                }
            }
            i += 1;
        }
        all
    }
    fn ticks(pids: &[u32]) -> u64 {
        pids.iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
            .map(|s| {
                let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split_whitespace().collect();
                f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
            })
            .sum()
    }
    let pids = tree(root);
    let t0 = ticks(&pids);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let t1 = ticks(&pids);
    let hz = 100.0; // USER_HZ on Linux
    let cpu = (t1 - t0) as f64 / hz / secs * 100.0;
    if std::env::var_os("BOTDESK_BENCH_VERBOSE").is_some() {
        for p in &pids {
            let name = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let pss = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).unwrap_or_default();
            let line = |k: &str| pss.lines().find(|l| l.starts_with(k)).map(|l| l.to_string()).unwrap_or_default();
            eprintln!("{p} {} {} | {} | {}", name.trim(), line("Pss:"), line("Pss_Anon"), line("Rss:"));
            // Its biggest mappings by PSS, to see where the memory goes.
            let smaps = std::fs::read_to_string(format!("/proc/{p}/smaps")).unwrap_or_default();
            let mut maps: Vec<(u64, String)> = vec![];
            let mut current = String::new();
            for l in smaps.lines() {
                if l.split_whitespace().next().is_some_and(|f| f.contains('-') && !f.ends_with(':')) {
                    current = l.split_whitespace().nth(5).unwrap_or("[anon]").to_string();
                } else if let Some(v) = l.strip_prefix("Pss:") {
                    let kib: u64 = v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0);
                    match maps.iter_mut().find(|(_, n)| *n == current) {
                        Some(m) => m.0 += kib,
                        None => maps.push((kib, current.clone())),
                    }
                }
            }
            maps.sort_by_key(|m| std::cmp::Reverse(m.0));
            for (kib, n) in maps.iter().take(10) {
                eprintln!("      {kib:>7} kB {n}");
            }
        }
    }
    let pss_kib: u64 = pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| s.lines().find(|l| l.starts_with("Pss:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    (cpu, pss_kib as f64 / 1024.0)
}

fn pid_of(pattern: &str) -> u32 {
    let out = Command::new("pgrep").args(["-o", "-f", pattern]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("no process {pattern}"))
}

/// One HTTP POST from the harness; returns its body.
fn receive(listener: &std::net::TcpListener) -> serde_json::Value {
    listener.set_nonblocking(false).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![];
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap_or(0);
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(at) = text.find("\r\n\r\n") {
            let len: usize =
                text.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0);
            if buf.len() >= at + 4 + len {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: 0\r\n\r\n");
                return serde_json::from_slice(&buf[at + 4..at + 4 + len]).unwrap();
            }
        }
        if n == 0 {
            panic!("the harness sent no result");
        }
    }
}

struct Kill(Vec<Child>);
impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A loopback port that presents `token` to the gateway, then relays bytes (what
/// `botdesk screen forward` does), for websockify.
async fn forward(port: u16, token: String) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let token = token.clone();
            tokio::spawn(async move {
                let mut up = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                botdesk_core::gateway::present(&mut up, &token).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
            });
        }
    });
    local
}

pub async fn run(dir: &Path, app: &Path) -> Figures {
    let data = dir.join("viewer");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    run_with(&engine, &data, dir, app, None).await
}

/// The viewer figures with the bots' computer on `host` (None: this machine). On another host
/// only throughput and input → pixel are measured, on one screen (idle figures are zero).
pub async fn run_with(engine: &Engine, data: &Path, dir: &Path, app: &Path, host: Option<&str>) -> Figures {
    let engine = engine.clone();
    let bots: Vec<String> = (0..if host.is_some() { 1 } else { 4 }).map(|i| format!("screen{i}")).collect();
    let mut displays = vec![];
    for b in &bots {
        engine.create_bot_on(b, ComputerScope::Team, host.unwrap_or("local"), None, "").await.unwrap();
        displays.push(engine.open_desktop(&engine.bot_ref(b).await.unwrap()).await.unwrap().slot);
    }
    let script = GENERATOR.bytes().map(|b| format!("\\0{b:03o}")).collect::<String>();
    sh(&engine, &bots[0], &format!("mkdir -p /home/botdesk/shared/bench && printf '%b' '{script}' > /home/botdesk/shared/bench/gen.py")).await;
    let ids: Vec<String> = futures_ids(&engine, &bots).await;

    // ---- ours: the app ------------------------------------------------------------------------
    let d = webdriver::Driver::start(app, &[("BOTDESK_DATA_DIR", data.to_str().unwrap())]);
    for id in ids.iter().rev() {
        d.click(&format!(".bot[data-bot='{id}']"));
        d.click("#open-desktop");
        d.wait_js("the screen", &format!("return document.querySelector('.viewer.interactive')?.dataset.state === 'connected' && document.querySelector('.tab.active')?.dataset.tab === '{id}'"), Duration::from_secs(60));
    }
    // The first bot's tab is the visible one now. Idle first: four tabs, nothing moving.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let app_pid = pid_of(&app.display().to_string());
    let (idle_cpu_ours, idle_mem_ours) = if host.is_none() { cpu_and_memory(app_pid, 10.0) } else { (0.0, 0.0) };

    // Throughput.
    let out = generate(&engine, &bots[0], displays[0], 9, "ours").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let p1 = d.js("return window.__botdesk.stats.screensDrawn").as_f64().unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p2 = d.js("return window.__botdesk.stats.screensDrawn").as_f64().unwrap();
    let fps_ours = (p2 - p1) / 5.0;
    let source_fps_ours = generated_fps(&engine, &bots[0], &out).await;

    // Input → pixel, in control of an xterm that echoes what is typed.
    d.click("#control-button");
    d.wait_js("control", "return document.querySelector('.viewer.interactive')?.dataset.control === 'true'", Duration::from_secs(20));
    sh(&engine, &bots[0], &format!("(DISPLAY=:{} setsid xterm -T echo -geometry 80x24+0+0 -e cat >/dev/null 2>&1 &); sleep 1.5", displays[0])).await;
    let lat = d.js_async(&format!(
        "const done = arguments[arguments.length - 1];
         const v = window.__botdesk.viewers.find((v) => v.bot === '{id}' && v.el.classList.contains('interactive'));
         const st = window.__botdesk.stats, out = [], sleep = (ms) => new Promise((r) => setTimeout(r, ms));
         (async () => {{
           v.send({{t: 'p', x: 200, y: 150, b: 1}}); v.send({{t: 'p', x: 200, y: 150, b: 0}});
           await sleep(500);
           for (let i = 0; i < 30; i++) {{
             await sleep(150);
             const f0 = st.framesDrawn, t0 = performance.now();
             v.send({{t: 'k', s: 0x78, d: true}}); v.send({{t: 'k', s: 0x78, d: false}});
             while (st.framesDrawn === f0 && performance.now() - t0 < 1000) await sleep(0);
             out.push(st.lastDrawAt - t0);
           }}
           done(out);
         }})();",
        id = ids[0]
    ));
    let latency_ours = median(lat.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect());
    d.click("#control-button"); // release

    // A second window: the visible screen also in a window of its own, against the same four
    // tabs without it, measured in turn.
    let ((tabs_cpu, tabs_mem), (window_cpu, window_mem)) = if host.is_none() {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let tabs = cpu_and_memory(app_pid, 60.0);
        d.click("#screen-window");
        let title = format!("{} — Botdesk", bots[0]);
        let t0 = std::time::Instant::now();
        while !Command::new("xdotool").args(["search", "--onlyvisible", "--name", &title]).stdout(Stdio::null()).status().is_ok_and(|s| s.success()) {
            assert!(t0.elapsed() < Duration::from_secs(30), "the screen's own window never opened");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        (tabs, cpu_and_memory(app_pid, 60.0))
    } else {
        ((0.0, 0.0), (0.0, 0.0))
    };
    drop(d);
    sh(&engine, &bots[0], "pkill -f '^xterm -T echo' || true").await;

    // ---- anchor: noVNC in headless Chromium -------------------------------------------------
    let web = dir.join("novnc-web");
    std::fs::create_dir_all(&web).unwrap();
    for sub in ["core", "vendor"] {
        let _ = std::os::unix::fs::symlink(Path::new("/usr/share/novnc").join(sub), web.join(sub));
    }
    std::fs::write(web.join("harness.html"), HARNESS).unwrap();
    let mut ws_ports = vec![];
    let mut children = Kill(vec![]);
    for b in &bots {
        let v = engine.open_desktop(&engine.bot_ref(b).await.unwrap()).await.unwrap();
        let fwd = forward(v.port, v.view_token).await;
        let wsp = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        children.0.push(
            Command::new("websockify")
                .args(["--web", web.to_str().unwrap(), &wsp.to_string(), &format!("127.0.0.1:{fwd}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("websockify (apt install websockify novnc)"),
        );
        ws_ports.push(wsp);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let report = listener.local_addr().unwrap().port();
    let chromium = |ports: &[u16], mode: &str| -> Child {
        let profile = dir.join(format!("chromium-{mode}"));
        let list: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        let url = format!("http://127.0.0.1:{}/harness.html?ports={}&mode={mode}&report={report}", ports[0], list.join(","));
        Command::new("chromium")
            .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", &format!("--user-data-dir={}", profile.display()), &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium (apt install chromium)")
    };

    // Idle with four screens.
    let (idle_cpu_anchor, idle_mem_anchor) = if host.is_none() {
        let mut c = chromium(&ws_ports, "idle");
        receive(&listener);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let idle = cpu_and_memory(c.id(), 10.0);
        let _ = c.kill();
        let _ = c.wait();
        idle
    } else {
        (0.0, 0.0)
    };

    // Throughput on one screen.
    let mut c = chromium(&ws_ports[..1], "throughput");
    receive(&listener);
    let out = generate(&engine, &bots[0], displays[0], 9, "anchor").await;
    let fps_anchor = receive(&listener)["fps"].as_f64().unwrap();
    let source_fps_anchor = generated_fps(&engine, &bots[0], &out).await;
    let _ = c.kill();
    let _ = c.wait();

    // Input → pixel through the control transport.
    let ctl = engine.take_control_screen(&engine.bot_ref(&bots[0]).await.unwrap().id).await.unwrap();
    let fwd = forward(ctl.port, ctl.control_token.clone()).await;
    let wsp = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    children.0.push(
        Command::new("websockify")
            .args(["--web", web.to_str().unwrap(), &wsp.to_string(), &format!("127.0.0.1:{fwd}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    sh(
        &engine,
        &bots[0],
        &format!(
            "(DISPLAY=:{} setsid xterm -T echo -geometry 80x24+0+0 -e cat >/dev/null 2>&1 &); sleep 1.5; DISPLAY=:{} xdotool mousemove 200 150 click 1",
            displays[0], displays[0]
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut c = chromium(&[wsp], "latency");
    let lat = receive(&listener);
    let latency_anchor = median(lat["latencies"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect());
    let _ = c.kill();
    let _ = c.wait();
    engine.release_control(&engine.bot_ref(&bots[0]).await.unwrap().id, &ctl.lease.lease_id, botdesk_engine::TakeoverResult::Finished, None).await.unwrap();
    drop(children);

    for c in engine.list_computers().await.unwrap() {
        engine.destroy_computer(&c.id).await.unwrap();
    }
    Figures {
        fps_ours,
        fps_anchor,
        source_fps_ours,
        source_fps_anchor,
        latency_ours,
        latency_anchor,
        idle_cpu_ours,
        idle_mem_ours,
        idle_cpu_anchor,
        idle_mem_anchor,
        window_cpu,
        window_mem,
        tabs_cpu,
        tabs_mem,
    }
}

async fn futures_ids(engine: &Engine, names: &[String]) -> Vec<String> {
    let mut ids = vec![];
    for n in names {
        ids.push(engine.bot(n).await.unwrap().id.to_string());
    }
    ids
}

pub fn app_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/botdesk-app")
}

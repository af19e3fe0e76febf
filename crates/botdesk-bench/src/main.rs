//! `cargo xtask bench` runs this: every figure is a median beside an anchor measured in the same
//! run on the same machine, and the table replaces docs/benchmarks.md.
//! Usage: botdesk-bench OUT.md | botdesk-bench --only viewer|remote|checkpoint|memory|agent|desktops|cli|start|recording|network (prints
//! that section, writes nothing)

use botdesk_core::{CallCtx, ComputerId, ComputerProvider, ComputerRef, ComputerScope, ComputerSpec, ExecRequest, Resources};
use botdesk_docker::{image::image_tag, DockerConfig, DockerProvider};
use std::{
    process::Command,
    time::{Duration, Instant},
};

/// Anchors run their commands in the computer as the bots do, like ours.
pub const BOT: &str = "1000:1000";

mod agent;
mod checkpoint;
mod cli;
mod desktops;
mod leases;
mod network;
mod recording;
mod remote;
mod viewer;

pub(crate) struct Row {
    pub(crate) what: &'static str,
    pub(crate) ours: Duration,
    pub(crate) anchor_name: &'static str,
    pub(crate) anchor: Duration,
    pub(crate) n: usize,
}

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub(crate) fn time_cmd(args: &[&str]) -> Duration {
    let t = Instant::now();
    let st = Command::new("docker").args(args).status().expect("docker CLI");
    assert!(st.success(), "docker {args:?} failed");
    t.elapsed()
}

/// One row, for a section run on its own.
fn say(r: &Row) {
    println!("{}: {} vs {} {} ({:.2}×)", r.what, ms(r.ours), r.anchor_name, ms(r.anchor), r.ours.as_secs_f64() / r.anchor.as_secs_f64());
}

/// A line of a table `| what | ours (median) | anchor | anchor (median) | ratio | n |`.
pub(crate) fn table_row(r: &Row) -> String {
    format!("| {} | {} | {} | {} | {:.2} | {} |\n", r.what, ms(r.ours), r.anchor_name, ms(r.anchor), r.ours.as_secs_f64() / r.anchor.as_secs_f64(), r.n)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Lease figures: (one-process ops/s, anchor updates/s, two-process ops/s and full cycles/s, violations in each).
async fn lease_bench(dir: &std::path::Path) -> (f64, f64, f64, f64, u64, u64) {
    const SECS: f64 = 3.0;
    let db = dir.join("leases.db");
    let (store, c, bots) = leases::setup(&db).await;
    let one = leases::contend(store, c, bots, 1, SECS, "solo").await;
    let anchor = leases::anchor_updates(&dir.join("anchor.db"), SECS).await;
    // Two processes × 32 tasks on one database.
    let me = std::env::current_exe().unwrap();
    let spawn =
        |tag: &str| std::process::Command::new(&me).args(["--lease-worker", db.to_str().unwrap(), tag]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let (a, b) = (spawn("p1"), spawn("p2"));
    let (mut ops, mut cycles, mut violations, mut secs) = (0.0, 0.0, 0, 0f64);
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "lease worker failed");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        ops += v["ops"].as_f64().unwrap();
        cycles += v["cycles"].as_f64().unwrap();
        violations += v["violations"].as_u64().unwrap();
        secs = secs.max(v["secs"].as_f64().unwrap());
    }
    (one.ops as f64 / one.secs, anchor, ops / secs, cycles / secs, one.violations, violations)
}

/// Computer cold start: create + start until the desktop reports ready.
async fn cold_start(provider: &DockerProvider, image: &str, spec: &dyn Fn(usize) -> ComputerSpec) -> Row {
    const STARTS: usize = 5;
    let ctx = CallCtx::default();
    let mut ours = vec![];
    let mut anchor = vec![];
    for i in 0..STARTS {
        let s = spec(i);
        let t = Instant::now();
        let p = provider.provision(&s, &ctx).await.expect("provision");
        ours.push(t.elapsed());
        assert!(p.fresh);
        provider.destroy(&ComputerRef::from(&s), &ctx).await.unwrap();
        anchor.push(time_cmd(&["run", "--rm", "--user", "1000:1000", image, "true"]));
    }
    Row {
        what: "computer cold start, no spare (create + start until ready)",
        ours: median(ours),
        anchor_name: "`docker run --rm IMAGE true`",
        anchor: median(anchor),
        n: STARTS,
    }
}

/// A new bot's computer when a spare waits (what the app keeps): from creating the bot until its
/// computer is ready, through the engine, beside the same anchor.
async fn new_computer_with_spare(dir: &std::path::Path, image: &str) -> Row {
    const STARTS: usize = 5;
    let engine =
        botdesk_engine::Engine::open(botdesk_engine::EngineConfig::new(dir.join("spare"), botdesk_engine::ProviderChoice::Machine(botdesk_docker::machine)))
            .await
            .unwrap();
    let mut ours = vec![];
    let mut anchor = vec![];
    for i in 0..STARTS {
        engine.keep_spare().await.expect("a spare computer"); // made and started beforehand, as the app does
        let t = Instant::now();
        let bot = engine.create_bot(&format!("new{i}"), ComputerScope::Private, None, "").await.unwrap();
        engine.start_bot_computer(&engine.bot_ref(bot.id.as_str()).await.unwrap()).await.unwrap();
        ours.push(t.elapsed());
        engine.destroy_computer(&bot.computer.id).await.unwrap();
        anchor.push(time_cmd(&["run", "--rm", "--user", "1000:1000", image, "true"]));
    }
    engine.drop_spares().await.unwrap();
    Row {
        what: "new computer, a spare waiting (create the bot until its computer is ready)",
        ours: median(ours),
        anchor_name: "`docker run --rm IMAGE true`",
        anchor: median(anchor),
        n: STARTS,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--lease-worker") {
        let (store, c, bots) = leases::open(std::path::Path::new(&args[2])).await;
        let r = leases::contend(store, c, bots, 32, 3.0, &args[3]).await;
        println!("{}", serde_json::json!({"ops": r.ops, "cycles": r.cycles, "violations": r.violations, "secs": r.secs}));
        return;
    }
    let out = std::env::args().nth(1).expect("usage: botdesk-bench OUT.md | --only desktops");
    let dir = tempfile::tempdir().unwrap();
    if out == "--only" {
        match args.get(2).map(String::as_str) {
            Some("viewer") => {
                let f = viewer::run(dir.path(), &viewer::app_binary()).await;
                println!(
                    "throughput: {:.1} fps drawn (source {:.1}) vs noVNC {:.1} (source {:.1})",
                    f.fps_ours, f.source_fps_ours, f.fps_anchor, f.source_fps_anchor
                );
                println!("input → pixel: {:.1} ms vs noVNC {:.1} ms", f.latency_ours, f.latency_anchor);
                println!(
                    "idle, four screens: {:.2} % CPU, {:.0} MiB vs noVNC {:.2} %, {:.0} MiB",
                    f.idle_cpu_ours, f.idle_mem_ours, f.idle_cpu_anchor, f.idle_mem_anchor
                );
                println!(
                    "idle, four screens and one in its own window: {:.2} % CPU, {:.0} MiB vs without the window {:.2} %, {:.0} MiB",
                    f.window_cpu, f.window_mem, f.tabs_cpu, f.tabs_mem
                );
            }
            Some("remote") => {
                let f = remote::run(dir.path(), &viewer::app_binary()).await;
                print!("{}", remote::section(&f));
            }
            Some("checkpoint") => {
                let f = checkpoint::run(dir.path()).await;
                println!("{} files, {} MiB", f.files, f.bytes >> 20);
                println!("checkpoint: {} vs cp -a {}, tar over exec {}", ms(f.full), ms(f.cp_full), ms(f.tar_full));
                println!("checkpoint after one changed file: {}", ms(f.one_changed));
                println!("restore: {} vs tar over exec {}", ms(f.restore), ms(f.tar_restore));
                println!("restore of version 1: {} vs tar over exec {}", ms(f.version_restore), ms(f.tar_restore));
                println!("{}", checkpoint::disk_line(&f));
            }
            Some("memory") => {
                let n = std::env::var("BOTDESK_BENCH_ENTRIES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000_000);
                println!("{}", checkpoint::memory_line(&checkpoint::memory(dir.path(), n).await));
            }
            Some("agent") => {
                let (ours, anchor) = agent::run().await;
                print!("{}", agent::section(&ours, &anchor));
            }
            Some("start") => {
                let image = image_tag();
                let provider = DockerProvider::new(DockerConfig::new(&image, format!("bench{}", uuid::Uuid::new_v4().simple())));
                let label = provider.config().data_dir_label.clone();
                let spec = |i: usize| ComputerSpec {
                    id: ComputerId::new(format!("bench-{i}")),
                    name: format!("bench-{i}"),
                    scope: ComputerScope::Team,
                    home_volume: format!("{label}-home-{i}"),
                    resources: Resources::default(),
                    host: botdesk_core::HostName::local(),
                };
                say(&cold_start(&provider, &image, &spec).await);
                say(&new_computer_with_spare(dir.path(), &image).await);
            }
            Some("recording") => {
                print!("{}", recording::section(&recording::run(dir.path()).await));
            }
            Some("network") => {
                print!("{}", network::section(&network::run().await));
            }
            Some("cli") => {
                for r in cli::run(dir.path()).await {
                    say(&r);
                }
            }
            Some("desktops") => {
                let (rows, density) = desktops::run(dir.path()).await;
                for r in rows {
                    println!("{}: {} vs {} {}", r.what, ms(r.ours), r.anchor_name, ms(r.anchor));
                }
                println!(
                    "density: {} desktops, {:.0} MiB each, beside the idle computer's {:.0} MiB",
                    density.desktops, density.per_desktop_mib, density.base_mib
                );
            }
            other => panic!("unknown section {other:?}"),
        }
        return;
    }
    let image = image_tag();
    let provider = DockerProvider::new(DockerConfig::new(&image, format!("bench{}", uuid::Uuid::new_v4().simple())));
    let version = provider.engine_version().await.expect("Docker must answer");
    assert!(provider.image_present(&image).await.unwrap(), "{image} is missing: run `botdesk image build`");
    let ctx = CallCtx::default();
    let spec = |i: usize| ComputerSpec {
        id: ComputerId::new(format!("bench-{i}")),
        name: format!("bench-{i}"),
        scope: ComputerScope::Team,
        home_volume: format!("{}-home-{i}", provider.config().data_dir_label),
        resources: Resources::default(),
        host: botdesk_core::HostName::local(),
    };
    let mut rows = vec![];

    rows.push(cold_start(&provider, &image, &spec).await);
    rows.push(new_computer_with_spare(dir.path(), &image).await);

    // Exec round trip of `true` on a running computer.
    const EXECS: usize = 50;
    let s = spec(100);
    let p = provider.provision(&s, &ctx).await.unwrap();
    let c = ComputerRef::from(&s);
    let (mut ours, mut anchor) = (vec![], vec![]);
    for _ in 0..EXECS {
        let t = Instant::now();
        let exit = provider.exec(&c, ExecRequest::new(["true"]), None, &ctx).await.unwrap();
        ours.push(t.elapsed());
        assert_eq!(exit.code, 0);
        anchor.push(time_cmd(&["exec", "-u", BOT, &p.provider_ref, "true"]));
    }
    rows.push(Row { what: "exec round trip (`true`)", ours: median(ours), anchor_name: "`docker exec CONTAINER true`", anchor: median(anchor), n: EXECS });
    provider.destroy(&c, &ctx).await.unwrap();

    let (desktop_rows, density) = desktops::run(dir.path()).await;
    rows.extend(desktop_rows);
    rows.extend(cli::run(dir.path()).await);

    let v = viewer::run(dir.path(), &viewer::app_binary()).await;
    let rec = recording::run(dir.path()).await;
    let net = network::run().await;

    let ck = checkpoint::run(dir.path()).await;
    let mib_s = |d: Duration| (ck.bytes as f64 / 1_048_576.0) / d.as_secs_f64();
    rows.push(Row {
        what: "workspace checkpoint out of the computer, 1 GiB incl. 10,000 small files",
        ours: ck.full,
        anchor_name: "`cp -a` of the checkpoint on the host",
        anchor: ck.cp_full,
        n: 1,
    });
    rows.push(Row { what: "the same checkpoint", ours: ck.full, anchor_name: "`tar` over `docker exec` of the same home", anchor: ck.tar_full, n: 1 });
    rows.push(Row {
        what: "checkpoint after one changed file (same workspace; target ≤ 300 ms)",
        ours: ck.one_changed,
        anchor_name: "`tar` over `docker exec` of the same home",
        anchor: ck.tar_full,
        n: 5,
    });
    rows.push(Row {
        what: "workspace restore into the computer, 1 GiB incl. 10,000 small files (target ≤ 1.2× anchor)",
        ours: ck.restore,
        anchor_name: "`tar` over `docker exec` into the same computer",
        anchor: ck.tar_restore,
        n: 3,
    });
    rows.push(Row {
        what: "restore of a version, whole (`botdesk restore --version 1`: the present saved first; target ≤ 1.2× anchor)",
        ours: ck.version_restore,
        anchor_name: "`tar` over `docker exec` into the same computer",
        anchor: ck.tar_restore,
        n: 3,
    });

    let mem = checkpoint::memory(dir.path(), 2_000_000).await;

    let far = remote::run(dir.path(), &viewer::app_binary()).await;

    let (one_ops, anchor_ups, two_ops, two_cycles, one_violations, violations) = lease_bench(dir.path()).await;
    let (agent_ours, agent_anchor) = agent::run().await;

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    let mut md = String::from(
        "# Benchmarks\n\nWritten by `cargo xtask bench` (crate `botdesk-bench`). Every figure is a median, beside an anchor \
         measured in the same run on the same machine; the ratio is ours ÷ anchor (below 1 means faster than the anchor).\n\n",
    );
    md.push_str(&format!(
        "Machine: {} cores, {cpu}; Docker {version}; image `{image}`.\n\n| what | ours (median) | anchor | anchor (median) | ratio | n |\n|---|---|---|---|---|---|\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    ));
    for r in &rows {
        md.push_str(&table_row(r));
    }
    md.push_str(&format!(
        "\n## Density\n\n{} desktops, each with Chromium open on a page, in one computer with the default 2 GiB limit (the run \
         stops at 16 desktops or 1.9 GiB): {:.0} MiB per extra desktop, beside the anchor of the idle computer itself, {:.0} MiB. \
         Targets: at least 10 desktops, at most 180 MiB each.\n",
        density.desktops, density.per_desktop_mib, density.base_mib
    ));
    md.push_str(&format!(
        "\n## Viewer (the app, release build, under Xvfb)\n\nAnchor: noVNC 1.3 (Debian's `novnc`) in headless Chromium through websockify, \
         on the same x11vnc transports of the same computer, measured right after the app.\n\n\
         | what | ours | anchor (noVNC) | ratio | target |\n|---|---|---|---|---|\n\
         | throughput, whole 1280×800 screens drawn per second, at the tab's size (source repainting at {:.0} / {:.0} frames/s) | {:.1} | {:.1} | {:.2} | ≥ 60 |\n\
         | input → pixel, key press until the echoed change is drawn (median of 30) | {:.1} ms | {:.1} ms | {:.2} | ≤ 20 ms |\n\
         | idle CPU, four open tabs (one visible), % of one core over 10 s | {:.2} % | {:.2} % | {:.2} | < 2 % |\n\
         | memory, four open tabs: PSS of the app with its WebKit processes | {:.0} MiB | {:.0} MiB | {:.2} | ≤ 250 MiB |\n\
         \n| a second window (the visible screen also in a window of its own, four tabs) | with it | anchor: without it, just before | ratio | target |\n|---|---|---|---|---|\n\
         | idle CPU, % of one core over 60 s | {:.2} % | {:.2} % | {:.2} | ≤ 1.10 |\n\
         | memory, PSS of the app with its WebKit processes | {:.0} MiB | {:.0} MiB | {:.2} | ≤ 1.10 |\n",
        v.source_fps_ours, v.source_fps_anchor,
        v.fps_ours, v.fps_anchor, v.fps_ours / v.fps_anchor,
        v.latency_ours, v.latency_anchor, v.latency_ours / v.latency_anchor,
        v.idle_cpu_ours, v.idle_cpu_anchor, v.idle_cpu_ours / v.idle_cpu_anchor.max(0.01),
        v.idle_mem_ours, v.idle_mem_anchor, v.idle_mem_ours / v.idle_mem_anchor,
        v.window_cpu, v.tabs_cpu, v.window_cpu / v.tabs_cpu.max(0.01),
        v.window_mem, v.tabs_mem, v.window_mem / v.tabs_mem,
    ));
    md.push_str(&remote::section(&far));
    md.push_str(&recording::section(&rec));
    md.push_str(&network::section(&net));
    md.push_str(&format!(
        "\n## Leases (SQLite, WAL)\n\n| what | ours | anchor | anchor | ratio | violations |\n|---|---|---|---|---|---|\n\
         | lease ops/s, one process, one task (claim, check, renew, release) | {one_ops:.0} | plain one-row `UPDATE`s/s, one task | {anchor_ups:.0} | {:.2} | {one_violations} |\n\
         | lease ops/s, two processes × 32 tasks contending for {} bots | {two_ops:.0} ({two_cycles:.0} full cycles/s) | same anchor | {anchor_ups:.0} | {:.2} | {violations} |\n\
         \nTarget: ≥ 5,000 lease ops/s on this machine, zero violations (a violation: a fence that did not grow, a claim that another \
         holder could see through, or a held lease that could not be renewed and released).\n",
        one_ops / anchor_ups,
        leases::BOTS,
        two_ops / anchor_ups,
    ));
    assert_eq!(one_violations + violations, 0, "lease invariants were violated");
    md.push_str(&agent::section(&agent_ours, &agent_anchor));
    md.push_str(
        "\nNotes:\n- Cold start includes making the computer's network and home volume, creating the container, starting it, and \
         waiting until start.sh prints that it is ready: Xvfb answering on display `:1` with fluxbox started, and the screen \
         gateway's port taken (the anchor starts nothing and exits at once).\n- Observe reads the display's framebuffer from shared memory \
         (Xvfb `-fbdir`) through the gateway on a kept-open connection, and hashes and compresses on two cores at once; \
         cursor and window title come from a kept-open X connection. Target: ≤ 25 ms and ≥ 8× faster than the anchor.\n- The exec anchor runs the Docker CLI, so it also pays a \
         process start; ours keeps one API connection.\n",
    );
    md.push_str(&format!(
        "- Checkpoints stream the home out of the computer (`botdesk-helper save` over `docker exec`) into the person's own \
         store: {:.0} MiB/s for the first, {:.0} MiB/s restore (streamed back in through `botdesk-helper load`; restore and \
         its anchor are the median of three rounds, taken in turn). A checkpoint after one changed file sends the manifest \
         of the previous version in (read from that version's index, not walked) and, while the computer starts and walks \
         its home, makes the new version as hard links to the previous one (versions are never modified); it then gets that \
         one file and a `same` record for each of the {} others, writes the one file and swaps `current` with one rename; \
         the version before stays (every version is kept 48 hours). Each includes a final `syncfs`; the \
         anchors are each followed by `sync`, timed. A restore of a version first checkpoints the present, then makes the \
         new version from the old one by hard links and puts it into the computer (`botdesk-helper load`, `put`).\n- {}.\n",
        mib_s(ck.full),
        mib_s(ck.restore),
        ck.files - 1,
        checkpoint::disk_line(&ck),
    ));
    md.push_str(&format!("- {}.\n", checkpoint::memory_line(&mem)));
    md.push_str(&format!(
        "- Viewer: with the screen repainting, the 2 cores are the limit: the app's session receives about as many screen \
         updates per second as the webview draws, and none are dropped on the way. The screen comes as raw pixels in the X \
         server's own layout (x11vnc neither translates nor compresses them) through the gateway's in-kernel relay; the app \
         stores them with a plain copy, scales frames to the tab's size (a separable box filter that also makes them RGBA, so \
         the webview never carries more pixels than it shows) and sends each as one WebSocket message, drawn on a canvas \
         placed on whole device pixels (off them, WebKit may resample every frame as it paints). WebKit's web process is the \
         largest share (about 0.6 of a core: receiving and drawing the frames), then the app (about 0.3), x11vnc (about \
         0.25), the X server, the source program and Docker's port proxy. Throughput {} its target. Memory {} its target; \
         about 40 MiB of it is Mesa's LLVM, which WebKitGTK maps even with compositing off. A hidden tab hands its pixels and \
         socket back to the webview at once; its session in the app stops asking for updates and after 2 s lets its \
         connection and pixels go.\n",
        if v.fps_ours >= 60.0 { "meets" } else { "misses" },
        if v.idle_mem_ours <= 250.0 { "meets" } else { "misses" },
    ));
    std::fs::write(&out, &md).expect("write the benchmarks table");
    print!("{md}");
}

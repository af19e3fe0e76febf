//! Screen recording: what it costs a run (observe and act with it on and off, the recorder's CPU
//! while the screen changes), what it keeps (bytes per hour of a GUI run), and how fast a 10-minute
//! run becomes an .mp4 (`botdesk replay --out run.mp4`, the whole process).

use botdesk_core::{
    BotId, CallCtx, ComputerId, ComputerProvider, ComputerRef, ComputerScope, ComputerSpec, ExecRequest, ImageFormat, RecordingSpec, Resources,
};
use botdesk_docker::{image::image_tag, DockerConfig, DockerProvider};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::median;

pub struct Figures {
    /// One act (a key typed into a terminal) and the observe after it, recording off and on.
    pub cycle_off: Duration,
    pub cycle_on: Duration,
    /// % of one core while the screen changes: our recorder, and ffmpeg as one would start it.
    pub cpu_ours: f64,
    pub cpu_anchor: f64,
    /// Bytes an hour of the scripted GUI run keeps: its recording, and its step screenshots.
    pub recording_mb_hour: f64,
    pub shots_mb_hour: f64,
    /// `botdesk replay --out run.mp4` of a 10-minute run, and plain ffmpeg re-encoding it.
    pub export: Duration,
    pub transcode: Duration,
    pub export_minutes: f64,
}

const SLOT: u32 = 1;

/// CPU seconds so far of the processes named `comm` in `container` (host /proc).
fn cpu_seconds(container: &str, comm: &str) -> f64 {
    let out = Command::new("docker").args(["top", container, "-eo", "pid,comm"]).output().unwrap();
    let tick = 100.0; // USER_HZ on Linux
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(1) == Some(comm))
        .filter_map(|l| std::fs::read_to_string(format!("/proc/{}/stat", l.split_whitespace().next()?)).ok())
        .map(|stat| {
            let f: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            (f[11].parse::<f64>().unwrap_or(0.0) + f[12].parse::<f64>().unwrap_or(0.0)) / tick
        })
        .sum()
}

/// % of one core `comm` uses over `secs`.
fn cpu_percent(container: &str, comm: &str, secs: u64) -> f64 {
    let before = cpu_seconds(container, comm);
    std::thread::sleep(Duration::from_secs(secs));
    (cpu_seconds(container, comm) - before) / secs as f64 * 100.0
}

async fn sh(provider: &DockerProvider, c: &ComputerRef, script: &str) {
    let req = ExecRequest::new(["sh", "-c", script]).env("DISPLAY", format!(":{SLOT}"));
    let exit = provider.exec(c, req, None, &CallCtx::default()).await.unwrap();
    assert_eq!(exit.code, 0, "{script}");
}

pub async fn run(dir: &Path) -> Figures {
    let image = image_tag();
    let provider = DockerProvider::new(DockerConfig::new(&image, format!("benchrec{}", uuid::Uuid::new_v4().simple())));
    let ctx = CallCtx::default();
    let id = format!("bench-rec-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let spec = ComputerSpec {
        id: ComputerId::new(&id),
        name: id.clone(),
        scope: ComputerScope::Private,
        home_volume: format!("{}-home-rec", provider.config().data_dir_label),
        resources: Resources::default(),
        host: botdesk_core::HostName::local(),
    };
    provider.provision(&spec, &ctx).await.unwrap();
    let c = ComputerRef::from(&spec);
    let box_id = crate::desktops::container_of(&id);
    provider.open_desktop(&c, &BotId::new("bench"), SLOT, &botdesk_engine::new_token(), &ctx).await.unwrap();
    sh(&provider, &c, "(setsid xterm -geometry 120x40+40+40 >/dev/null 2>&1 &) && sleep 1").await;
    let rec = |key: &str| RecordingSpec { key: key.into(), fps: 4, max_bytes: 200 << 20 };

    // 1. Act and observe, recording off and on, in alternating rounds.
    let (mut off, mut on) = (vec![], vec![]);
    let key = |k: char| [botdesk_core::action::Action::Type { text: k.to_string() }];
    for round in 0..8 {
        let recording = round % 2 == 1;
        if recording {
            provider.start_recording(&c, SLOT, &rec("cycle")).await.unwrap();
        }
        for i in 0..10 {
            let t = Instant::now();
            provider.act(&c, SLOT, &key((b'a' + i as u8) as char), 0, &Default::default(), &ctx).await.unwrap();
            provider.observe(&c, SLOT, ImageFormat::Png, &ctx).await.unwrap();
            if recording { &mut on } else { &mut off }.push(t.elapsed());
        }
        if recording {
            let mut r = provider.take_recording(&c, SLOT, "cycle").await.unwrap();
            tokio::io::copy(&mut r.data, &mut tokio::io::sink()).await.unwrap();
        }
    }

    // 2. The recorder's CPU while the screen changes (a terminal scrolling text all the time),
    // beside ffmpeg recording the same screen as its manual's example does (defaults: 29.97
    // frames a second, libx264 at its medium preset).
    sh(&provider, &c, "(setsid xterm -geometry 160x48+0+0 -e sh -c 'while :; do ls -l /usr/lib | head -60; sleep 0.1; done' >/dev/null 2>&1 &) && sleep 1")
        .await;
    provider.start_recording(&c, SLOT, &rec("cpu")).await.unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let cpu_ours = cpu_percent(&box_id, "ffmpeg", 10);
    let mut r = provider.take_recording(&c, SLOT, "cpu").await.unwrap();
    tokio::io::copy(&mut r.data, &mut tokio::io::sink()).await.unwrap();
    let anchor =
        format!("(BOTDESK_DISPLAY={SLOT} setsid ffmpeg -nostdin -loglevel error -f x11grab -i :{SLOT} -y /tmp/anchor.mp4 >/dev/null 2>&1 &) ; sleep 2");
    assert!(Command::new("docker").args(["exec", "-u", "botdesk-screen", &box_id, "sh", "-c", &anchor]).status().unwrap().success());
    let cpu_anchor = cpu_percent(&box_id, "ffmpeg", 10);
    let _ = Command::new("docker").args(["exec", "-u", "botdesk-screen", &box_id, "pkill", "-INT", "-x", "ffmpeg"]).status();
    sh(&provider, &c, "pkill -f 'ls -l /usr/li[b]'; pkill -x xterm; (setsid xterm -geometry 100x30+100+100 >/dev/null 2>&1 &) && sleep 1").await;

    // 3. A scripted GUI run for 60 s, as a model works (a step every 1.5 s: a line typed into the
    // terminal and run, a click, a look), recorded; beside the screenshots its steps keep.
    provider.start_recording(&c, SLOT, &rec("gui")).await.unwrap();
    let started = Instant::now();
    let mut shots = 0u64;
    let mut step = 0;
    use botdesk_core::action::{Action, Button};
    while started.elapsed() < Duration::from_secs(60) {
        let t = Instant::now();
        let actions = [
            Action::Click { x: 300 + (step % 7) * 40, y: 200 + (step % 5) * 30, button: Button::Left },
            Action::Type { text: format!("echo step {step}; ls /usr/share | head -{}\n", 3 + step % 10) },
        ];
        provider.act(&c, SLOT, &actions, 300, &Default::default(), &ctx).await.unwrap();
        shots += provider.observe(&c, SLOT, ImageFormat::Png, &ctx).await.unwrap().image.map_or(0, |i| i.len() as u64);
        step += 1;
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(t.elapsed())).await;
    }
    let ran = started.elapsed().as_secs_f64();
    let gui = dir.join("gui.mkv");
    let mut r = provider.take_recording(&c, SLOT, "gui").await.unwrap();
    let mut f = tokio::fs::File::create(&gui).await.unwrap();
    let bytes = tokio::io::copy(&mut r.data, &mut f).await.unwrap();
    drop(f);
    let per_hour = |b: u64| b as f64 / 1e6 * 3600.0 / ran;
    provider.destroy(&c, &ctx).await.unwrap();

    // 4. A 10-minute run, exported: ten of the GUI minute one after the other, with the steps of
    // a scripted run of that length (the fake computer; the clock moves 15 s a step).
    let (export, transcode, export_minutes) = export(dir, &gui).await;
    Figures {
        cycle_off: median(off),
        cycle_on: median(on),
        cpu_ours,
        cpu_anchor,
        recording_mb_hour: per_hour(bytes),
        shots_mb_hour: per_hour(shots),
        export,
        transcode,
        export_minutes,
    }
}

struct StepClock(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl botdesk_engine::Clock for StepClock {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

async fn export(dir: &Path, minute: &Path) -> (Duration, Duration, f64) {
    use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
    const STEPS: usize = 40;
    let now = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1_800_000_000_000));
    let steps: Vec<Step> = (0..STEPS)
        .map(|i| {
            let clock = now.clone();
            let reply = if i + 1 == STEPS {
                Reply::text("Done.")
            } else {
                Reply::call(
                    "computer_act",
                    serde_json::json!({"actions": [{"type": "click", "x": 100 + 20 * i, "y": 300}, {"type": "type", "text": format!("step {i}")}]}),
                )
            };
            Step::check(
                move |_| {
                    clock.fetch_add(15_000, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                },
                reply,
            )
        })
        .collect();
    let server = ScriptedServer::start(steps).await;
    let data = dir.join("export");
    let mut cfg = botdesk_engine::EngineConfig::new(&data, botdesk_engine::ProviderChoice::Custom(std::sync::Arc::new(botdesk_fake::FakeProvider::new())));
    cfg.clock = std::sync::Arc::new(StepClock(now.clone()));
    let engine = botdesk_engine::Engine::open(cfg).await.unwrap();
    let model = botdesk_engine::NewModel {
        id: "bench-export".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    engine.add_model(model, None).await.unwrap();
    engine.save_settings(&botdesk_engine::Settings { record_screen: false, ..Default::default() }).unwrap();
    engine.create_bot("exporter", ComputerScope::Private, Some("bench-export"), "").await.unwrap();
    let run = engine.run_task(&engine.bot_ref("exporter").await.unwrap().id, "work for ten minutes").await.unwrap();
    assert_eq!(server.failures(), Vec::<String>::new());
    let s = engine.runs_of(&engine.bot_ref("exporter").await.unwrap(), 1).await.unwrap().remove(0);
    let minutes = s.duration_ms as f64 / 60_000.0;
    // Its recording: the GUI minute, ten times over.
    let folder = data.join("recordings").join(&run.id);
    std::fs::create_dir_all(&folder).unwrap();
    let looped = folder.join("screen.mkv");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-stream_loop", "9", "-i"])
        .arg(minute)
        .args(["-c", "copy"])
        .arg(&looped)
        .status()
        .unwrap();
    assert!(st.success());
    let meta = serde_json::json!({"run_id": run.id, "started_at": s.started_at + 1000, "ended_at": s.started_at + s.duration_ms, "bytes": std::fs::metadata(&looped).unwrap().len(), "fps": 4, "capped": false});
    std::fs::write(folder.join("recording.json"), meta.to_string()).unwrap();
    drop(engine);
    let out = dir.join("run.mp4");
    let t = Instant::now();
    let st = Command::new(crate::cli::cli_binary())
        .arg("--data-dir")
        .arg(&data)
        .args(["replay", "exporter", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    let export = t.elapsed();
    assert!(st.success(), "botdesk replay --out run.mp4 failed");
    let t = Instant::now();
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(&looped)
        .args(["-c:v", "libx264", "-preset", "veryfast", "-crf", "28"])
        .arg(dir.join("plain.mp4"))
        .status()
        .unwrap();
    assert!(st.success());
    (export, t.elapsed(), minutes)
}

/// The section of docs/benchmarks.md.
pub fn section(f: &Figures) -> String {
    let ratio = f.cycle_on.as_secs_f64() / f.cycle_off.as_secs_f64();
    format!(
        "\n## Screen recording\n\n\
         A run's screen is recorded in its computer by ffmpeg (x11grab, libx264 `veryfast`, CRF 30, 4 frames a second, a \
         keyframe every 10 s) as the screen services; the engine takes the file when the run ends. Figures on one computer \
         with a terminal on its display.\n\n\
         | what | ours | anchor | anchor's figure | ratio | target |\n|---|---|---|---|---|---|\n\
         | act (a key into the terminal) and observe, recording on | {:.1} ms | the same, recording off (alternate rounds) | {:.1} ms | {ratio:.2} | ≤ 1.05 |\n\
         | the recorder's CPU while the screen changes all the time (a terminal scrolling), % of one core over 10 s | {:.1} % | ffmpeg as its manual records a screen (`-f x11grab -i :1 out.mp4`: 29.97 frames/s, preset medium) | {:.1} % | {:.2} | ≤ 10 % |\n\
         | kept per hour of a scripted GUI run (a step every 1.5 s: a click, a line typed and run, a look; 60 s, scaled) | {:.1} MB | the PNG screenshots of its steps | {:.1} MB | {:.2} | ≤ 60 MB |\n\
         | `botdesk replay --out run.mp4` of a {:.0}-minute run (its recording ten of that GUI minute, 40 steps drawn in), whole process | {:.1} s | `ffmpeg -i screen.mkv -c:v libx264 -preset veryfast` of the same recording, nothing drawn | {:.1} s | {:.2} | ≤ 30 s |\n",
        f.cycle_on.as_secs_f64() * 1000.0,
        f.cycle_off.as_secs_f64() * 1000.0,
        f.cpu_ours,
        f.cpu_anchor,
        f.cpu_ours / f.cpu_anchor.max(0.01),
        f.recording_mb_hour,
        f.shots_mb_hour,
        f.recording_mb_hour / f.shots_mb_hour.max(0.01),
        f.export_minutes,
        f.export.as_secs_f64(),
        f.transcode.as_secs_f64(),
        f.export.as_secs_f64() / f.transcode.as_secs_f64(),
    )
}

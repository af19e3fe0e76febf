//! Desktop figures through the engine, each beside an anchor measured in the same run.

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ImageFormat, ProviderChoice};
use std::time::{Duration, Instant};

use crate::{median, time_cmd, Row, BOT};

pub(crate) fn container_of(computer: &str) -> String {
    let out = std::process::Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Memory the container uses now, in MiB (from `docker stats`).
fn mem_mib(container: &str) -> f64 {
    let out = std::process::Command::new("docker").args(["stats", "--no-stream", "--format", "{{.MemUsage}}", container]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let used = text.split('/').next().unwrap_or("").trim();
    let (num, unit) = used.split_at(used.find(|c: char| c.is_alphabetic()).unwrap_or(used.len()));
    let n: f64 = num.trim().parse().unwrap_or(0.0);
    match unit {
        "GiB" => n * 1024.0,
        "KiB" => n / 1024.0,
        "B" => n / 1048576.0,
        _ => n,
    }
}

pub struct Density {
    pub desktops: usize,
    pub base_mib: f64,
    pub per_desktop_mib: f64,
}

pub async fn run(dir: &std::path::Path) -> (Vec<Row>, Density) {
    let engine = Engine::open(EngineConfig::new(dir.join("desktops"), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let mut rows = vec![];
    const N: usize = 5;
    let names: Vec<String> = (0..16).map(|i| format!("bench{i}")).collect();
    let mut bots = vec![];
    for n in &names {
        engine.create_bot(n, ComputerScope::Team, None, "").await.unwrap();
        bots.push(engine.bot_ref(n).await.unwrap());
    }
    engine.exec(&engine.bot_ref(&names[0]).await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let computer = engine.list_computers().await.unwrap()[0].id.clone();
    let container = container_of(computer.as_str());
    // The anchors on bench0's display run as bench0: a Team bot's display admits its uid alone.
    let (_, uid) = engine.shell(&engine.bot_ref(&names[0]).await.unwrap(), "id -u; id -g").await.unwrap();
    let owner = uid.split_whitespace().collect::<Vec<_>>().join(":");

    // Desktop open → first full frame (a cold display: Xvfb, fluxbox, view transport).
    let (mut ours, mut anchor) = (vec![], vec![]);
    for _ in 0..N {
        let t = Instant::now();
        engine.open_desktop(&bots[1]).await.unwrap();
        let obs = engine.screenshot(&bots[1], ImageFormat::Png).await.unwrap();
        ours.push(t.elapsed());
        assert!(obs.image.is_some());
        engine.release_desktop(&bots[1]).await.unwrap();
        anchor.push(time_cmd(&["exec", "-u", BOT, &container, "true"]));
    }
    rows.push(Row { what: "desktop open → first full frame", ours: median(ours), anchor_name: "`docker exec CONTAINER true`", anchor: median(anchor), n: N });

    // Browser ready: a cold Chromium on a fresh profile until its DevTools answer.
    let site = "cd /home/botdesk && mkdir -p shared/site && echo '<title>bench</title><p>hello' > shared/site/index.html && cd shared/site && (setsid python3 -m http.server 8124 --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 0.3";
    engine.exec(&engine.bot_ref(&names[0]).await.unwrap(), vec!["sh".into(), "-c".into(), site.into()], None, None, None, Default::default()).await.unwrap();
    let (mut ours, mut anchor) = (vec![], vec![]);
    for i in 0..N {
        let bot = &names[2 + i];
        engine.open_desktop(&engine.bot_ref(bot).await.unwrap()).await.unwrap();
        let t = Instant::now();
        engine.browser_snapshot(&engine.bot_ref(bot).await.unwrap()).await.unwrap();
        ours.push(t.elapsed());
        engine.release_desktop(&engine.bot_ref(bot).await.unwrap()).await.unwrap();
        anchor.push(time_cmd(&[
            "exec",
            "-u",
            BOT,
            &container,
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--user-data-dir=/tmp/bench-anchor",
            "--dump-dom",
            "about:blank",
        ]));
    }
    rows.push(Row {
        what: "browser ready (cold Chromium, DevTools answering)",
        ours: median(ours),
        anchor_name: "`docker exec … chromium --headless --dump-dom about:blank`",
        anchor: median(anchor),
        n: N,
    });

    // Observe latency on a busy screen (a page in Chromium).
    engine.browser_navigate(&bots[0], "http://127.0.0.1:8124/").await.unwrap();
    let slot = engine.open_desktop(&bots[0]).await.unwrap().slot;
    let (mut ours, mut anchor) = (vec![], vec![]);
    for _ in 0..20 {
        let t = Instant::now();
        engine.screenshot(&bots[0], ImageFormat::Png).await.unwrap();
        ours.push(t.elapsed());
        anchor.push(time_cmd(&["exec", "-u", &owner, &container, "sh", "-c", &format!("DISPLAY=:{slot} import -window root png:- > /dev/null")]));
    }
    rows.push(Row {
        what: "observe (PNG, frame id, cursor, window title)",
        ours: median(ours),
        anchor_name: "`docker exec … import -window root png:-`",
        anchor: median(anchor),
        n: 20,
    });

    // Per-action overhead of a 24-action batch vs one docker exec of xdotool per action.
    let batch: Vec<_> = (0..24).map(|i| serde_json::json!({"type": "move", "x": 100 + i * 10, "y": 100 + i})).collect();
    let batch = serde_json::json!(batch);
    let (mut ours, mut anchor) = (vec![], vec![]);
    for _ in 0..N {
        let t = Instant::now();
        engine.act(&bots[0], &batch, Some(0)).await.unwrap();
        ours.push(t.elapsed() / 24);
        let t = Instant::now();
        for i in 0..24 {
            let st = std::process::Command::new("docker")
                .args(["exec", "-u", &owner, "-e", &format!("DISPLAY=:{slot}"), &container, "xdotool", "mousemove", &(100 + i * 10).to_string(), "300"])
                .status()
                .unwrap();
            assert!(st.success());
        }
        anchor.push(t.elapsed() / 24);
    }
    rows.push(Row {
        what: "per action, in a 24-action batch",
        ours: median(ours),
        anchor_name: "one `docker exec … xdotool` per action",
        anchor: median(anchor),
        n: N,
    });

    // Revocation: from Release to the drop of an open view connection, while the other desktop
    // shows a page and a busy loop keeps the computer's CPUs working.
    let busy = "(setsid sh -c 'timeout 120 sh -c \"yes >/dev/null & yes >/dev/null & wait\"' >/dev/null 2>&1 &)";
    engine.exec(&engine.bot_ref(&names[0]).await.unwrap(), vec!["sh".into(), "-c".into(), busy.into()], None, None, None, Default::default()).await.unwrap();
    let (mut ours, mut anchor) = (vec![], vec![]);
    for _ in 0..N {
        let d = engine.open_desktop(&bots[1]).await.unwrap();
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
        use std::io::{Read, Write};
        conn.write_all(&botdesk_core::gateway::hello(&d.view_token)).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        assert!(conn.read(&mut buf).unwrap() > 0, "the gateway answers");
        let t = Instant::now();
        let release = engine.release_desktop(&bots[1]);
        let drop_seen = tokio::task::spawn_blocking(move || loop {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break Instant::now(),
                Ok(_) => continue,
            }
        });
        release.await.unwrap();
        ours.push(drop_seen.await.unwrap().duration_since(t));
        anchor.push(time_cmd(&["exec", "-u", BOT, &container, "true"]));
    }
    let worst = *ours.iter().max().unwrap();
    rows.push(Row {
        what: "token revocation → open connection dropped, median (target ≤ 1 s)",
        ours: median(ours),
        anchor_name: "`docker exec CONTAINER true`",
        anchor: median(anchor.clone()),
        n: N,
    });
    rows.push(Row {
        what: "token revocation → open connection dropped, worst of 5",
        ours: worst,
        anchor_name: "`docker exec CONTAINER true`",
        anchor: median(anchor),
        n: N,
    });
    engine
        .exec(&engine.bot_ref(&names[0]).await.unwrap(), vec!["sh".into(), "-c".into(), "pkill -x yes; true".into()], None, None, None, Default::default())
        .await
        .unwrap();

    // Density: desktops with Chromium open on a page within the default 2 GiB.
    for n in &names[1..] {
        let _ = engine.release_desktop(&engine.bot_ref(n).await.unwrap()).await;
    }
    engine.release_desktop(&bots[0]).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let base = mem_mib(&container);
    let mut opened = 0;
    let mut last = base;
    for n in &names {
        if engine.browser_navigate(&engine.bot_ref(n).await.unwrap(), "http://127.0.0.1:8124/").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = mem_mib(&container);
        opened += 1;
        if last > 1900.0 {
            break;
        }
    }
    let density = Density { desktops: opened, base_mib: base, per_desktop_mib: (last - base) / opened.max(1) as f64 };
    for c in engine.list_computers().await.unwrap() {
        engine.destroy_computer(&c.id).await.unwrap();
    }
    (rows, density)
}

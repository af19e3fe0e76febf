//! A computer on another machine, over a link shaped like a home or cloud connection: 20 Mbit/s
//! each way and 40 ms round trip, to the second Docker engine `cargo xtask bench` starts in a
//! network namespace of its own. The rate is the kernel's (`tc tbf` on both ends of the veth
//! pair); the delay is added by a relay of the bench's own, 20 ms each way, because this machine's
//! kernel has no `netem` ("Specified qdisc kind is unknown"). Everything goes through
//! that engine's TLS connection: the viewer (the app, beside noVNC through websockify over the
//! same relay), observe and act, and a checkpoint after one changed file.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ImageFormat, ProviderChoice};

use crate::viewer;

pub struct Figures {
    /// The measured round trip of the shaped link (ping, median of 10).
    pub rtt_ms: f64,
    pub viewer: viewer::Figures,
    pub observe: Duration,
    pub observe_anchor: Duration,
    pub act: Duration,
    pub act_anchor: Duration,
    pub one_changed: Duration,
    pub one_changed_anchor: Duration,
    pub files: usize,
}

/// Where the second engine is and the link to shape: from `cargo xtask bench`.
struct Link {
    url: String,
    tls: std::path::PathBuf,
    veth: String,
    netns: String,
    there: String,
}

impl Link {
    fn from_env() -> Link {
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is unset: run the benchmarks with `cargo xtask bench`"));
        let url = var("BOTDESK_TEST_REMOTE_URL");
        let there = url.trim_start_matches("tcp://").rsplit_once(':').unwrap().0.to_string();
        Link {
            tls: Path::new(&var("BOTDESK_TEST_REMOTE_TLS")).join("good"),
            veth: var("BOTDESK_BENCH_LINK_VETH"),
            netns: var("BOTDESK_BENCH_LINK_NETNS"),
            url,
            there,
        }
    }

    /// 20 Mbit/s each way, on both ends (the delay is [`delay_line`]'s).
    fn shape(&self) {
        let qdisc = ["qdisc", "replace", "dev", "DEV", "root", "tbf", "rate", "20mbit", "burst", "32kbit", "latency", "100ms"];
        let here: Vec<&str> = qdisc.iter().map(|a| if *a == "DEV" { self.veth.as_str() } else { a }).collect();
        let peer = format!("{}p", self.veth);
        let there: Vec<&str> = qdisc.iter().map(|a| if *a == "DEV" { peer.as_str() } else { a }).collect();
        assert!(Command::new("tc").args(&here).status().unwrap().success(), "tc (apt install iproute2) on {}", self.veth);
        assert!(Command::new("nsenter").arg(format!("--net=/run/netns/{}", self.netns)).arg("tc").args(&there).status().unwrap().success());
    }

    fn unshape(&self) {
        let _ = Command::new("tc").args(["qdisc", "del", "dev", &self.veth, "root"]).status();
        let _ = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns))
            .args(["tc", "qdisc", "del", "dev", &format!("{}p", self.veth), "root"])
            .status();
    }

    /// The round trip of the veth itself (the relay adds [`DELAY`] each way on top).
    fn rtt_ms(&self) -> f64 {
        let out = Command::new("ping").args(["-c", "10", "-i", "0.2", &self.there]).output().expect("ping (apt install iputils-ping)");
        let mut rtts: Vec<f64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split("time=").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .collect();
        rtts.sort_by(f64::total_cmp);
        rtts.get(rtts.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// The Docker CLI, speaking to the second engine over the same link.
    fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.args(["--tlsverify", "-H", &self.url])
            .arg("--tlscacert")
            .arg(self.tls.join("ca.pem"))
            .arg("--tlscert")
            .arg(self.tls.join("cert.pem"))
            .arg("--tlskey")
            .arg(self.tls.join("key.pem"));
        c
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn timed(mut c: Command) -> Duration {
    let t = Instant::now();
    let out = c.output().unwrap();
    assert!(out.status.success(), "{c:?}: {}", String::from_utf8_lossy(&out.stderr));
    t.elapsed()
}

/// Added each way by [`delay_line`].
const DELAY: Duration = Duration::from_millis(20);

/// A loopback port relaying to `target` with [`DELAY`] added each way: what comes in goes out in
/// order, that much later (a delay line, not a rate limit).
async fn delay_line(target: String) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        let writer = tokio::spawn(async move {
            while let Some((at, bytes)) = rx.recv().await {
                tokio::time::sleep_until(at).await;
                if to.write_all(&bytes).await.is_err() {
                    break;
                }
            }
            let _ = to.shutdown().await;
        });
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if tx.send((tokio::time::Instant::now() + DELAY, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        drop(tx);
        let _ = writer.await;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((here, _)) = listener.accept().await {
            let Ok(there) = tokio::net::TcpStream::connect(&target).await else { continue };
            let _ = (here.set_nodelay(true), there.set_nodelay(true));
            let ((hr, hw), (tr, tw)) = (here.into_split(), there.into_split());
            tokio::spawn(pipe(hr, tw));
            tokio::spawn(pipe(tr, hw));
        }
    });
    port
}

pub async fn run(dir: &Path, app: &Path) -> Figures {
    let mut link = Link::from_env();
    link.unshape();
    let data = dir.join("remote");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    // The image goes there before the link is shaped (at 20 Mbit/s it would take minutes).
    engine.add_host("direct", &link.url, &link.tls).await.unwrap();
    engine.send_image("direct", &|_| {}).await.unwrap();
    engine.remove_host("direct").await.unwrap();
    link.shape();
    // From here on everything (the engine, the app, the Docker CLI anchors) reaches it through the
    // delay line (its certificate also names 127.0.0.1).
    let port = delay_line(link.url.trim_start_matches("tcp://").to_string()).await;
    link.url = format!("tcp://127.0.0.1:{port}");
    engine.add_host("far", &link.url, &link.tls).await.unwrap();
    let rtt_ms = link.rtt_ms() + 2.0 * DELAY.as_secs_f64() * 1000.0;

    let viewer = viewer::run_with(&engine, &data, dir, app, Some("far")).await;

    // Observe and act on a Private computer there, each beside the Docker CLI doing the same
    // over the same link.
    engine.create_bot_on("look", ComputerScope::Private, "far", None, "").await.unwrap();
    let look = engine.bot_ref("look").await.unwrap();
    let d = engine.open_desktop(&look).await.unwrap();
    let container = {
        let c = engine.list_computers().await.unwrap().into_iter().find(|c| c.name == "private-look").unwrap();
        let out = link.docker().args(["ps", "-q", "--filter", &format!("label=botdesk.computer={}", c.id)]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    engine.screenshot(&look, ImageFormat::Png).await.unwrap();
    let (mut observe, mut observe_anchor, mut act, mut act_anchor) = (vec![], vec![], vec![], vec![]);
    for i in 0..10u32 {
        let t = Instant::now();
        engine.screenshot(&look, ImageFormat::Png).await.unwrap();
        observe.push(t.elapsed());
        let mut c = link.docker();
        c.args(["exec", "-u", "1000", "-e", &format!("DISPLAY=:{}", d.slot), &container, "import", "-window", "root", "png:-"]);
        observe_anchor.push(timed(c));
        let x = 100 + i * 10;
        let t = Instant::now();
        engine.act(&look, &serde_json::json!([{"type": "move", "x": x, "y": 200}]), Some(0)).await.unwrap();
        act.push(t.elapsed());
        let mut c = link.docker();
        c.args(["exec", "-u", "1000", "-e", &format!("DISPLAY=:{}", d.slot), &container, "xdotool", "mousemove", &x.to_string(), "300"]);
        act_anchor.push(timed(c));
    }

    // A checkpoint after one changed file, in a home of 1,000 small files (10 MiB).
    const FILES: usize = 1000;
    let (code, out) =
        engine.shell(&look, &format!("mkdir -p work && for i in $(seq 1 {FILES}); do head -c 10240 /dev/urandom > work/f$i; done && echo made")).await.unwrap();
    assert_eq!(code, 0, "{out}");
    let c = engine.list_computers().await.unwrap().into_iter().find(|c| c.name == "private-look").unwrap();
    engine.checkpoint(&c.id).await.unwrap();
    let mut one = vec![];
    for i in 0..5 {
        let (code, _) = engine.shell(&engine.bot_ref("look").await.unwrap(), &format!("echo change {i} > work/f1")).await.unwrap();
        assert_eq!(code, 0);
        let t = Instant::now();
        engine.checkpoint(&c.id).await.unwrap();
        one.push(t.elapsed());
    }
    let mut anchor = vec![];
    for _ in 0..3 {
        let mut c = link.docker();
        c.args(["exec", "-u", "1000", &container, "tar", "-C", "/home/botdesk", "-cf", "-", "."]);
        anchor.push(timed(c));
    }
    for c in engine.list_computers().await.unwrap() {
        engine.destroy_computer(&c.id).await.unwrap();
    }
    link.unshape();
    Figures {
        rtt_ms,
        viewer,
        observe: median(observe),
        observe_anchor: median(observe_anchor),
        act: median(act),
        act_anchor: median(act_anchor),
        one_changed: median(one),
        one_changed_anchor: median(anchor),
        files: FILES,
    }
}

pub fn section(f: &Figures) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let v = &f.viewer;
    format!(
        "\n## A computer on another machine (20 Mbit/s, 40 ms round trip)\n\n\
         The second Docker engine of `cargo xtask bench`, in a network namespace of its own, reached over TCP with mutual TLS \
         through a veth pair limited to 20 Mbit/s each way (`tc tbf` on both ends) and a relay adding 20 ms each way (this \
         machine's kernel has no `netem`): {:.1} ms round trip with the veth's own. The screen goes through the app's loopback relay over a Docker exec (no port opened there), ZRLE-encoded; \
         noVNC reaches it through websockify and the same relay.\n\n\
         | what | ours | anchor | anchor | ratio | target |\n|---|---|---|---|---|---|\n\
         | viewer throughput, whole screens drawn per second while the screen repaints (source {:.0} / {:.0} frames/s) | {:.1} | noVNC through websockify | {:.1} | {:.2} | ≥ 15 |\n\
         | viewer input → pixel (median of 30) | {:.1} ms | noVNC through websockify | {:.1} ms | {:.2} | ≤ round trip + 25 ms ({:.0} ms) |\n\
         | observe (PNG, frame id, cursor, window title) | {:.1} ms | `docker exec … import -window root png:-` | {:.1} ms | {:.2} | |\n\
         | act (one pointer move) | {:.1} ms | `docker exec … xdotool mousemove` | {:.1} ms | {:.2} | |\n\
         | checkpoint after one changed file ({} files, 10 MiB) | {:.1} ms | `tar` of the home over `docker exec` | {:.1} ms | {:.2} | |\n",
        f.rtt_ms,
        v.source_fps_ours,
        v.source_fps_anchor,
        v.fps_ours,
        v.fps_anchor,
        v.fps_ours / v.fps_anchor,
        v.latency_ours,
        v.latency_anchor,
        v.latency_ours / v.latency_anchor,
        f.rtt_ms + 25.0,
        ms(f.observe),
        ms(f.observe_anchor),
        ms(f.observe) / ms(f.observe_anchor),
        ms(f.act),
        ms(f.act_anchor),
        ms(f.act) / ms(f.act_anchor),
        f.files,
        ms(f.one_changed),
        ms(f.one_changed_anchor),
        ms(f.one_changed) / ms(f.one_changed_anchor),
    )
}

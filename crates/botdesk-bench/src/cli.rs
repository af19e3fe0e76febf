//! The CLI as a process, as scripts and people meet it: each command, run whole (process start,
//! engine open, its work, exit), beside the `docker` CLI doing the same work in the same computer.

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ImageFormat, ProviderChoice};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{median, Row, BOT};

pub fn cli_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/botdesk")
}

/// One whole run of a command (its output thrown away), which must succeed.
fn time_process(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let status = cmd.stdout(Stdio::null()).status().expect("run the command");
    let took = t.elapsed();
    assert!(status.success(), "{cmd:?} failed");
    took
}

fn time_cli(data: &Path, args: &[&str]) -> Duration {
    time_process(Command::new(cli_binary()).arg("--data-dir").arg(data).args(args))
}

fn time_docker(args: &[&str]) -> Duration {
    time_process(Command::new("docker").args(args))
}

pub async fn run(dir: &Path) -> Vec<Row> {
    let data = dir.join("cli");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Docker)).await.unwrap();
    engine.create_bot("clibench", ComputerScope::Private, None, "").await.unwrap();
    engine.exec("clibench", vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let display = engine.open_desktop("clibench").await.unwrap().display;
    engine.screenshot("clibench", ImageFormat::Png).await.unwrap();
    engine.files_write("clibench", "small.txt", bytes::Bytes::from_static(b"a small file\n"), false).await.unwrap();
    let computer = engine.list_computers().await.unwrap()[0].id.clone();
    engine.checkpoint(computer.as_str()).await.unwrap();
    let container = crate::desktops::container_of(computer.as_str());
    drop(engine);

    // 30 of each, interleaved: one process varies by 10 ms or more on this machine.
    const N: usize = 30;
    let shot = dir.join("shot.png");
    let shot = shot.to_str().unwrap();
    let display = format!("DISPLAY=:{display}");
    let cases: [(&str, Vec<&str>, &str, Vec<&str>); 3] = [
        (
            "`botdesk exec BOT -- true`, whole process (target ≤ 1.0×)",
            vec!["exec", "clibench", "--", "true"],
            "`docker exec CONTAINER true`",
            vec!["exec", "-u", BOT, &container, "true"],
        ),
        (
            "`botdesk screenshot BOT out.png`, whole process (target ≤ 0.5×)",
            vec!["screenshot", "clibench", shot],
            "`docker exec CONTAINER import -window root png:-`",
            vec!["exec", "-u", BOT, "-e", &display, &container, "import", "-window", "root", "png:-"],
        ),
        (
            "`botdesk files cat BOT small.txt`, whole process (target ≤ 1.0×)",
            vec!["files", "cat", "clibench", "small.txt"],
            "`docker exec CONTAINER cat FILE`",
            vec!["exec", "-u", BOT, &container, "cat", "/home/botdesk/small.txt"],
        ),
    ];
    let mut rows = vec![];
    for (what, ours_args, anchor_name, anchor_args) in cases {
        // One of each first, unmeasured (page cache, the Docker CLI's config).
        time_cli(&data, &ours_args);
        time_docker(&anchor_args);
        let (mut ours, mut anchor) = (vec![], vec![]);
        for _ in 0..N {
            ours.push(time_cli(&data, &ours_args));
            anchor.push(time_docker(&anchor_args));
        }
        rows.push(Row { what, ours: median(ours), anchor_name, anchor: median(anchor), n: N });
    }
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Docker)).await.unwrap();
    engine.destroy_computer(computer.as_str()).await.unwrap();
    rows
}

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
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    engine.create_bot("clibench", ComputerScope::Private, None, "").await.unwrap();
    engine.exec(&engine.bot_ref("clibench").await.unwrap(), vec!["true".into()], None, None, None, Default::default()).await.unwrap();
    let bot = engine.bot_ref("clibench").await.unwrap();
    let display = engine.open_desktop(&bot).await.unwrap().slot;
    engine.screenshot(&bot, ImageFormat::Png).await.unwrap();
    engine.files_write(&engine.bot_ref("clibench").await.unwrap(), "small.txt", bytes::Bytes::from_static(b"a small file\n"), false).await.unwrap();
    let computer = engine.list_computers().await.unwrap()[0].id.clone();
    engine.checkpoint(&computer).await.unwrap();
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
    rows.extend(mcp(&data, shot).await);
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    engine.destroy_computer(&computer).await.unwrap();
    rows
}

/// `botdesk mcp` already running (a client started it and initialized): a `screenshot` call's
/// round trip beside `botdesk screenshot` as a whole process, and one click's (`act`) beside one
/// `botdesk act` process. The client is the official Rust SDK's, over the server's stdin and stdout.
async fn mcp(data: &Path, shot: &str) -> Vec<Row> {
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::ServiceExt;
    const N: usize = 30;
    let server = tokio::process::Command::new(cli_binary()).configure(|c| {
        c.arg("--data-dir").arg(data).arg("mcp");
    });
    let client = ().serve(TokioChildProcess::new(server).expect("start botdesk mcp")).await.expect("MCP initialize");
    let call = |name: &'static str, args: serde_json::Value| {
        let client = &client;
        async move {
            let t = Instant::now();
            let r = client.call_tool(CallToolRequestParams::new(name).with_arguments(args.as_object().unwrap().clone())).await.expect("MCP call");
            assert_ne!(r.is_error, Some(true), "{name}: {:?}", r.content);
            t.elapsed()
        }
    };
    // Clicks alternate between two points, so each one moves the pointer and changes the screen;
    // the settle time is 0 on both sides (the CLI's act waits for the screen otherwise).
    let click = |i: usize| serde_json::json!([{"type": "click", "x": 100 + 200 * (i % 2), "y": 100}]);
    call("screenshot", serde_json::json!({"bot": "clibench"})).await;
    time_cli(data, &["screenshot", "clibench", shot]);
    let (mut shots, mut shot_anchor, mut clicks, mut click_anchor) = (vec![], vec![], vec![], vec![]);
    for _ in 0..N {
        shots.push(call("screenshot", serde_json::json!({"bot": "clibench"})).await);
        shot_anchor.push(time_cli(data, &["screenshot", "clibench", shot]));
    }
    for i in 0..N {
        clicks.push(call("act", serde_json::json!({"bot": "clibench", "actions": click(i), "settle_ms": 0})).await);
        click_anchor.push(time_cli(data, &["act", "clibench", &click(i + 1).to_string(), "--settle-ms", "0"]));
    }
    let _ = client.cancel().await;
    vec![
        Row {
            what: "MCP `screenshot`, round trip over stdio, the server running (target ≤ 0.5×)",
            ours: median(shots),
            anchor_name: "`botdesk screenshot BOT out.png`, whole process",
            anchor: median(shot_anchor),
            n: N,
        },
        Row {
            what: "MCP `act` (one click, no settle; it answers with the screen after), round trip over stdio",
            ours: median(clicks),
            anchor_name: "`botdesk act BOT '[click]' --settle-ms 0`, whole process",
            anchor: median(click_anchor),
            n: N,
        },
    ]
}

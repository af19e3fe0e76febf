//! Makes an upgrade fixture: a data directory as this version leaves it (a Team and a Private bot,
//! chats with tool calls and screenshots, activity, checkpoints of both homes with a browser
//! profile, settings, a model with prices), for `tests/upgrade.rs` to open with later versions.
//! Each release adds its own: `cargo run -p botdesk-engine --example make_fixture -- DIR`
//! (needs Docker and the computer image; the computers it starts are destroyed at the end, their
//! homes kept only as checkpoints).

use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_engine::{ComputerScope, Engine, EngineConfig, NewModel, ProviderChoice, Settings};
use serde_json::json;

#[tokio::main]
async fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: make_fixture DIR"));
    assert!(!out.exists(), "{} exists", out.display());
    let engine = Engine::open(EngineConfig::new(&out, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    engine.save_settings(&Settings { memory_mib: 1536, cpus: 1.5, screen_limit: Some(4), ..Settings::default() }).unwrap();
    let server = ScriptedServer::start(vec![
        // The Team bot: a file, a page in its browser (its profile), a look at its screen.
        Step::reply(Reply::call("shell", json!({"command": "mkdir -p site && echo '<title>Fixture page</title><p>kept' > site/index.html && (cd site && setsid python3 -m http.server 8125 --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 0.5 && echo served"}))),
        Step::reply(Reply::call("write_file", json!({"path": "notes.md", "content": "# Notes\nThe fixture's Team bot wrote this.\n"}))),
        Step::reply(Reply::call("browser_navigate", json!({"url": "http://127.0.0.1:8125/"}))),
        Step::reply(Reply::call("computer_observe", json!({}))),
        Step::reply(Reply::text("Done: notes.md written and the page opened.")),
        // The Private bot.
        Step::reply(Reply::call("write_file", json!({"path": "solo.txt", "content": "the Private bot's file\n"}))),
        Step::reply(Reply::text("Wrote solo.txt.")),
    ])
    .await;
    let new = NewModel {
        id: "scripted".into(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    engine.add_model(new, None).await.unwrap();
    engine.set_model_prices("scripted", Some(botdesk_engine::Prices { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 })).await.unwrap();
    engine.create_bot("teamie", ComputerScope::Team, Some("scripted"), "Keep notes.").await.unwrap();
    engine.create_bot("solo", ComputerScope::Private, Some("scripted"), "").await.unwrap();
    let run = engine.run_task(&engine.bot_ref("teamie").await.unwrap().id, "Write notes and open the page").await.unwrap();
    assert_eq!(run.error, None, "{run:?}");
    let run = engine.run_task(&engine.bot_ref("solo").await.unwrap().id, "Write a file").await.unwrap();
    assert_eq!(run.error, None, "{run:?}");
    assert_eq!(server.failures(), Vec::<String>::new());
    for c in engine.list_computers().await.unwrap() {
        engine.destroy_computer(&c.id).await.unwrap();
    }
    engine.settle().await;
    println!("fixture written to {}", out.display());
}

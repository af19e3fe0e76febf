//! Model providers against the real OS keyring (Secret Service; `cargo xtask test` runs
//! gnome-keyring on a session bus of its own) and real SQLite: the key lives in the keyring only.

use botdesk_engine::*;

fn new(id: &str, kind: &str, model: &str, base_url: Option<&str>) -> NewModel {
    NewModel {
        id: id.into(),
        kind: botdesk_core::ModelKind::parse(kind).unwrap(),
        model: model.into(),
        base_url: base_url.map(str::to_string),
        coordinates: None,
    }
}

/// Every file of the data directory, as bytes (the database, its WAL, settings).
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_file() {
            out.extend(std::fs::read(e.path()).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn a_key_goes_to_the_keyring_only_and_another_process_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let id = format!("claude-{}", uuid_like());
    let key = format!("sk-ant-test-{}", uuid_like());
    let m = engine.add_model(new(&id, "anthropic", "claude-sonnet-4-5", None), Some(format!("  {key}\n"))).await.unwrap();
    assert!(m.has_key);
    assert_eq!(engine.model_key(&id).await.unwrap().as_deref(), Some(key.as_str()), "trimmed, readable");

    // "The app": another engine on the same data directory reads the same key.
    let app = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    assert_eq!(app.list_models().await.unwrap(), vec![m.clone()]);
    assert_eq!(app.model_key(&id).await.unwrap().as_deref(), Some(key.as_str()));
    drop(app);

    // Never in the data directory (database, WAL, settings), byte for byte.
    let bytes = all_bytes(dir.path());
    assert!(!bytes.windows(key.len()).any(|w| w == key.as_bytes()), "the key is in the data directory");

    // A bot names it; while it does, the model cannot be removed.
    engine.create_bot("writer", ComputerScope::Team, Some(&id), "").await.unwrap();
    assert_eq!(engine.remove_model(&id).await.unwrap_err().code, ErrorCode::Conflict);
    engine.remove_bot(&engine.bot_ref("writer").await.unwrap().id).await.unwrap();
    engine.remove_model(&id).await.unwrap();
    assert_eq!(engine.model_key(&id).await.unwrap_err().code, ErrorCode::NotFound);
    // The keyring entry went with it: adding the id again starts from nothing.
    engine.add_model(new(&id, "openai-compatible", "llama3.1", Some("http://localhost:11434/v1")), None).await.unwrap();
    assert_eq!(engine.model_key(&id).await.unwrap(), None, "a keyless local server");
    engine.remove_model(&id).await.unwrap();
}

#[tokio::test]
async fn bad_model_settings_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let k = || Some("sk-x".to_string());
    // An unknown kind never becomes a `NewModel`: the CLI's and the app's arguments refuse it.
    assert_eq!(botdesk_core::ModelKind::parse("gemini"), None);
    assert!(serde_json::from_str::<botdesk_core::ModelKind>("\"gemini\"").is_err());
    for (m, key, why) in [
        (new("bad id!", "openai", "gpt-4o", None), k(), "model id"),
        (new("x", "openai", " ", None), k(), "name the model"),
        (new("x", "openai-compatible", "llama", None), None, "needs --base-url"),
        (new("x", "openai-compatible", "llama", Some("ftp://host")), None, "http:// or https://"),
        (new("x", "openai-compatible", "llama", Some("http://user:pw@host/v1")), None, "credentials"),
        (new("x", "anthropic", "claude", None), None, "needs an API key"),
    ] {
        let e = engine.add_model(m, key).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid, "{why}: {}", e.message);
        assert!(e.message.contains(why), "{why}: {}", e.message);
    }
    assert!(engine.list_models().await.unwrap().is_empty());
    engine.add_model(new("local", "openai-compatible", "llama3.1", Some("http://127.0.0.1:11434/v1")), None).await.unwrap();
    assert_eq!(engine.add_model(new("local", "openai-compatible", "other", Some("http://h/v1")), None).await.unwrap_err().code, ErrorCode::Conflict);
    assert_eq!(engine.create_bot("b", ComputerScope::Team, Some("nope"), "").await.unwrap_err().code, ErrorCode::NotFound);
    engine.remove_model("local").await.unwrap();
}

fn uuid_like() -> String {
    botdesk_engine::new_token()[..12].to_string()
}

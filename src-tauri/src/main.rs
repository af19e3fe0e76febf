//! The Botdesk app: the only crate that knows Tauri. Commands are a few lines each, calling the
//! engine; the engine does not know Tauri exists.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

use botdesk_engine::{BotView, ComputerScope, DoctorReport, Engine, EngineConfig, EngineError, ProviderChoice};
use tauri::{Manager, State};

#[tauri::command]
async fn list_bots(engine: State<'_, Engine>) -> Result<Vec<BotView>, EngineError> {
    engine.list_bots().await
}

#[tauri::command]
async fn create_bot(engine: State<'_, Engine>, name: String, scope: ComputerScope) -> Result<BotView, EngineError> {
    engine.create_bot(&name, scope, None, "").await
}

#[tauri::command]
async fn doctor(engine: State<'_, Engine>) -> Result<DoctorReport, EngineError> {
    Ok(engine.doctor().await)
}

/// The UI reports that its first render is done (app tests wait for this line).
#[tauri::command]
fn ui_ready(bots: usize) {
    println!("botdesk-app: ui ready, {bots} bots listed");
}

fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_env("BOTDESK_LOG")).init();
    let data_dir = botdesk_engine::DataDir::default_location();
    let engine = match tauri::async_runtime::block_on(Engine::open(EngineConfig::new(&data_dir, ProviderChoice::Docker))) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("botdesk-app: cannot open the data directory {}: {e}", data_dir.display());
            std::process::exit(1);
        }
    };
    tauri::Builder::default()
        .setup(|app| {
            let engine = app.state::<Engine>().inner().clone();
            // Adopt or remove containers a crash left behind; Docker being down is not fatal here.
            tauri::async_runtime::spawn(async move {
                match engine.reconcile().await {
                    Ok(r) => tracing::info!(adopted = r.adopted.len(), removed = r.removed.len(), "reconciled containers"),
                    Err(e) => tracing::warn!("reconcile skipped: {e}"),
                }
            });
            Ok(())
        })
        .manage(engine)
        .invoke_handler(tauri::generate_handler![list_bots, create_bot, doctor, ui_ready])
        .run(tauri::generate_context!())
        .expect("the Botdesk window could not start");
}

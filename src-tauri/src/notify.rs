//! Desktop notifications, through Tauri's notification plugin (on Linux the desktop's
//! notification service over D-Bus): a run of this app that waits for the person's answer (an
//! approval, a safety check) says so even when the window is not in front.

use botdesk_engine::Engine;
use tauri::AppHandle;
use tauri_plugin_notification::NotificationExt;

/// A run of bot `bot` asks the person `question` (of `kind`).
pub async fn asked(app: &AppHandle, engine: &Engine, bot: &str, kind: &str, question: &str) {
    let name = engine.bot(bot).await.map(|b| b.name).unwrap_or_else(|_| "A bot".into());
    // An approval names the bot and what it wants; a safety check is the bot asking.
    let body = if kind == "safety_check" { format!("{name} asks you: {question}") } else { question.to_string() };
    let shown = app.notification().builder().title(format!("{name} needs your answer")).body(body).show();
    if let Err(e) = shown {
        tracing::warn!("the desktop notification for {name}'s question failed: {e}");
    }
}

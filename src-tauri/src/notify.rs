//! Desktop notifications, through Tauri's notification plugin (on Linux the desktop's
//! notification service over D-Bus): a run of this app that finishes, fails or waits for the
//! person (to take its screen, an approval, a safety check) says so even when the window is not
//! in front; a click on one opens that bot. Each kind can be turned off in Settings.

use botdesk_engine::{Engine, RunEvent, RunStatus};
use tauri::{AppHandle, Emitter, Manager};
use tauri_plugin_notification::NotificationExt;

/// What a run says to the person, by kind; None: nothing to say (or turned off).
fn said(engine: &Engine, ev: &RunEvent) -> Option<(&'static str, String)> {
    let settings = engine.settings().unwrap_or_default();
    match ev {
        RunEvent::Question { kind, question, .. } if settings.notify_asks => {
            Some(("asks", if kind == "safety_check" { format!("It asks you: {question}") } else { question.clone() }))
        }
        RunEvent::Status { status: RunStatus::WaitingTakeover, error: Some(why), .. } if settings.notify_asks && why != botdesk_engine::PAUSED_FOR_YOU => {
            Some(("asks", format!("It needs you to take its screen: {why}")))
        }
        RunEvent::Status { status: RunStatus::Completed, .. } if settings.notify_finished => Some(("finished", "It finished its task.".into())),
        RunEvent::Status { status: RunStatus::Failed, error, .. } if settings.notify_failed => {
            Some(("failed", format!("Its run failed: {}", error.as_deref().unwrap_or("see the chat"))))
        }
        _ => None,
    }
}

/// Raises the notification a run's event calls for, if any.
pub async fn on_run_event(app: &AppHandle, engine: &Engine, ev: &RunEvent) {
    let Some((kind, body)) = said(engine, ev) else { return };
    let bot = ev.bot();
    let name = engine.bot(bot).await.map(|b| b.name).unwrap_or_else(|_| "A bot".into());
    let title = match kind {
        "asks" => format!("{name} needs you"),
        "finished" => format!("{name} is done"),
        _ => format!("{name} stopped"),
    };
    let shown = app.notification().builder().title(title).body(body).extra("bot", bot).show();
    if let Err(e) = shown {
        tracing::warn!("the desktop notification for {name} failed: {e}");
    }
}

/// A click on a notification brings the window to the front with that bot open.
pub fn on_click(app: &AppHandle) {
    let to_ui = app.clone();
    let handled = app.notification().on_action(move |a| {
        let Some(bot) = a.notification().and_then(|n| n.extra().get("bot")).and_then(|b| b.as_str()) else { return };
        if let Some(w) = to_ui.get_webview_window("main") {
            let _ = w.unminimize();
            let _ = w.show();
            let _ = w.set_focus();
        }
        let _ = to_ui.emit("open-bot", bot);
    });
    if let Err(e) = handled {
        tracing::warn!("clicks on notifications will not open their bot: {e}");
    }
}

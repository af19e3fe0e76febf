//! The one place that turns engine state into UI events. Every second: expire control whose
//! lease ran out (the tab turns view-only by itself), renew control while the person is using the
//! screen, and tell the UI when any bot's status changed, also when another process (the CLI)
//! changed it on the same data directory.

use std::{sync::Arc, time::Duration};

use botdesk_engine::{BotState, BotStatus, Engine};
use tauri::{AppHandle, Emitter};

use crate::screens::Screens;

/// Control is renewed while the person's input reached the screen within this window.
const ACTIVE: Duration = Duration::from_secs(60);

pub fn spawn(app: AppHandle, engine: Engine, screens: Arc<Screens>) {
    // Runs of this process stream to the chat as they happen.
    let mut runs = engine.run_events();
    let to_ui = app.clone();
    tauri::async_runtime::spawn(async move {
        loop {
            match runs.recv().await {
                Ok(ev) => drop(to_ui.emit("run-event", &ev)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => tracing::warn!("the UI missed {n} run events"),
                Err(_) => return,
            }
        }
    });
    tauri::async_runtime::spawn(async move {
        let mut last: Option<Vec<(String, BotState)>> = None;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n = 0u64;
        loop {
            tick.tick().await;
            n += 1;
            match engine.expire().await {
                Ok((revoked, _)) => {
                    for control in revoked {
                        screens.retarget(control.bot_id.as_str());
                    }
                }
                Err(e) => tracing::warn!("expiring leases: {e}"),
            }
            if n.is_multiple_of(30) {
                // Idle computers are suspended (checkpointed first; never when that fails).
                match engine.suspend_idle_computers().await {
                    Ok(done) => done.iter().for_each(|(c, o)| tracing::info!(computer = %c, outcome = ?o, "idle suspend")),
                    Err(e) => tracing::warn!("idle suspend: {e}"),
                }
            }
            if n.is_multiple_of(10) {
                crate::malloc::trim();
                for bot in screens.recently_used(ACTIVE) {
                    if let Ok(Some(lease)) = engine.control_of(&bot).await {
                        if let Err(e) = engine.renew_control(&bot, &lease.lease_id).await {
                            tracing::warn!("renewing control of {bot}: {e}");
                        }
                    }
                }
            }
            let Ok(now) = engine.bot_statuses().await else { continue };
            if last.as_ref() != Some(&now) {
                // Control that appeared or vanished elsewhere (the CLI) moves the session too.
                for (bot, state) in &now {
                    screens.follow_control(bot, state.status == BotStatus::YouHaveControl);
                }
                let _ = app.emit("bots-changed", &now);
                last = Some(now);
            }
        }
    });
}

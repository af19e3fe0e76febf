//! The one place that turns engine state into UI events. Every second, in one task: expire
//! control whose lease ran out (the tab turns view-only by itself), renew control while the person
//! is using the screen, suspend idle computers. In another, so upkeep never holds it up: send the
//! UI every bot with its state when any of them changed (a bot made, moved, or its status), also
//! when another process (the CLI) changed it on the same data directory; [`BotsFeed`] numbers
//! what it sends, and a window's own reads go through it too.

use std::{sync::Arc, time::Duration};

use botdesk_engine::{dto::BotList, BotStatus, Engine, EngineError, RunEvent};
use tauri::{AppHandle, Emitter, Manager};

use crate::screens::Screens;

/// Control is renewed while the person's input reached the screen within this window.
const ACTIVE: Duration = Duration::from_secs(60);

pub fn spawn(app: AppHandle, engine: Engine, screens: Arc<Screens>, feed: Arc<BotsFeed>) {
    // Runs of this process stream to the chat as they happen; a run that ends has the bots
    // looked at again at once (its bot's state changed), not at the next second.
    let mut runs = engine.run_events();
    let to_ui = app.clone();
    let asker = engine.clone();
    let run_ended = Arc::new(tokio::sync::Notify::new());
    let look_now = run_ended.clone();
    tauri::async_runtime::spawn(async move {
        loop {
            match runs.recv().await {
                Ok(ev) => {
                    let _ = to_ui.emit("run-event", &ev);
                    if matches!(ev, RunEvent::Status { .. }) {
                        run_ended.notify_one();
                    }
                    crate::notify::on_run_event(&to_ui, &asker, &ev).await;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => tracing::warn!("the UI missed {n} run events"),
                Err(_) => return,
            }
        }
    });
    // Upkeep (expiry, renewal, idle suspend) can wait on a computer; the bots' states are looked
    // at in a task of their own, so a slow suspend never holds up what the sidebar shows.
    let upkeep = (engine.clone(), screens.clone());
    tauri::async_runtime::spawn(async move {
        let (engine, screens) = upkeep;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for n in 1u64.. {
            tick.tick().await;
            every_second(&engine, &screens, n).await;
        }
    });
    tauri::async_runtime::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = look_now.notified() => {}
            }
            if let Err(e) = feed.look().await {
                tracing::warn!("reading the bots' states: {e}");
            }
        }
    });
}

/// The bots with their states as the windows get them. Every read goes through here in turn,
/// the once-a-second look's and a window's own (`list_bots`), and a read that differs from the
/// last one sent goes to every window, numbered. So what the next look compares with is what the
/// windows last got, whichever way it came: a window's own read that saw a passing state (between
/// two runs) is followed by the current one at the next look, never left standing; and a window
/// keeps the highest number it got, so a list that arrives late never replaces a newer one.
pub struct BotsFeed {
    app: AppHandle,
    engine: Engine,
    screens: Arc<Screens>,
    sent: tokio::sync::Mutex<BotList>,
}

impl BotsFeed {
    pub fn new(app: AppHandle, engine: Engine, screens: Arc<Screens>) -> BotsFeed {
        BotsFeed { app, engine, screens, sent: tokio::sync::Mutex::new(BotList { seq: 0, bots: vec![] }) }
    }

    /// Reads the bots' states and sends them to every window when they changed.
    pub async fn look(&self) -> Result<BotList, EngineError> {
        let mut sent = self.sent.lock().await;
        let now = self.engine.bot_rows().await?;
        if sent.seq == 0 || sent.bots != now {
            // Control that appeared or vanished elsewhere (the CLI) moves the session too.
            for row in &now {
                self.screens.follow_control(row.bot.id.as_str(), row.state.status == BotStatus::YouHaveControl);
            }
            *sent = BotList { seq: sent.seq + 1, bots: now };
            tracing::debug!(seq = sent.seq, states = ?sent.bots.iter().map(|r| (r.bot.name.as_str(), r.state.status)).collect::<Vec<_>>(), "bots changed");
            if let Err(e) = self.app.emit("bots-changed", &*sent) {
                tracing::warn!("telling the windows the bots changed: {e}");
            }
            // The window's badge: how many bots wait for the person.
            let waiting = sent.bots.iter().filter(|r| r.state.status == BotStatus::WaitingForYou).count() as i64;
            if let Some(w) = self.app.get_webview_window("main") {
                // (Desktops without a launcher badge say so; nothing else depends on it.)
                let _ = w.set_badge_count((waiting > 0).then_some(waiting));
            }
        }
        Ok(sent.clone())
    }
}

/// Expires control whose lease ran out (the tab turns view-only by itself); every 5 s ends runs
/// whose process is gone; every 10 s renews the control the person is using and gives memory
/// back; every 30 s suspends idle computers.
async fn every_second(engine: &Engine, screens: &Screens, n: u64) {
    match engine.expire().await {
        Ok((revoked, _)) => {
            for control in revoked {
                screens.retarget(control.bot_id.as_str());
            }
        }
        Err(e) => tracing::warn!("expiring leases: {e}"),
    }
    if n.is_multiple_of(5) {
        // A run whose process died (a CLI killed mid-command) ends in its chat.
        if let Err(e) = engine.recover_runs().await {
            tracing::warn!("ending runs whose process is gone: {e}");
        }
    }
    if n.is_multiple_of(30) {
        // Idle computers are suspended (checkpointed first), each in a task of its own: a slow
        // one never holds up this loop.
        if let Err(e) = engine.start_idle_suspends().await {
            tracing::warn!("idle suspend: {e}");
        }
    }
    if n.is_multiple_of(10) {
        crate::malloc::trim();
        for bot in screens.recently_used(ACTIVE) {
            let bot = botdesk_engine::BotId::new(bot);
            if let Ok(Some(lease)) = engine.control_of(&bot).await {
                if let Err(e) = engine.renew_control(&bot, &lease.lease_id).await {
                    tracing::warn!("renewing control of {bot}: {e}");
                }
            }
        }
    }
}

//! The Botdesk app: the only crate that knows Tauri. Commands are a few lines each, calling the
//! engine; `screens` owns the VNC sessions and their frame transport; `events` is the one place
//! that turns engine state into UI events. The engine does not know Tauri exists.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod events;
mod files;
mod notify;
mod screens;

use std::sync::Arc;

use botdesk_engine::dto::{
    BotList, BotSpend, BotView, BuildProgress, ChatItem, ComputerScope, ControlLease, DoctorReport, EngineError, HostView, ModelKind, ModelView, Settings,
    SettingsView, SwitchReport,
};
use botdesk_engine::{Engine, EngineConfig, KeyStore, LeftRunning, NewModel, ProviderChoice, TakeoverResult};
use screens::Screens;
use std::os::unix::process::CommandExt;
use tauri::{ipc::Channel, Manager, State};

type Res<T> = Result<T, EngineError>;

/// The bots with their states, numbered with the `bots-changed` events (see [`events::BotsFeed`]).
#[tauri::command]
async fn list_bots(feed: State<'_, Arc<events::BotsFeed>>) -> Res<BotList> {
    feed.look().await
}

#[tauri::command]
async fn create_bot(engine: State<'_, Engine>, name: String, scope: ComputerScope, model: Option<String>, host: Option<String>) -> Res<BotView> {
    engine.create_bot_on(&name, scope, host.as_deref().unwrap_or("local"), model.as_deref().filter(|m| !m.is_empty()), "").await
}

#[tauri::command]
async fn switch_bot(engine: State<'_, Engine>, bot: String, scope: ComputerScope) -> Res<SwitchReport> {
    engine.switch_bot(&engine.bot_ref(&bot).await?, scope).await
}

#[tauri::command]
async fn chat(engine: State<'_, Engine>, bot: String) -> Res<Vec<ChatItem>> {
    engine.chat(&engine.bot_ref(&bot).await?, 200).await
}

/// The question a bot's run waits on (a safety check), if any.
#[tauri::command]
async fn open_question(engine: State<'_, Engine>, bot: String) -> Res<Option<botdesk_engine::Question>> {
    engine.open_question(&engine.bot_ref(&bot).await?).await
}

/// The person's answer to it: allow, always (for that site) or deny.
#[tauri::command]
async fn answer_question(engine: State<'_, Engine>, bot: String, verdict: botdesk_engine::Verdict, note: Option<String>) -> Res<botdesk_engine::Question> {
    engine.answer_question(&engine.bot_ref(&bot).await?, verdict, note.as_deref()).await
}

/// A model's prices in dollars per million tokens, when known.
#[tauri::command]
async fn model_prices(engine: State<'_, Engine>, id: String) -> Res<Option<botdesk_engine::Prices>> {
    engine.model_prices(&id).await
}

/// Sets (or with null, forgets) a model's prices.
#[tauri::command]
async fn set_model_prices(engine: State<'_, Engine>, id: String, prices: Option<botdesk_engine::Prices>) -> Res<()> {
    engine.set_model_prices(&id, prices).await
}

/// A model's context window and output tokens per call: as set, or its family's defaults.
#[tauri::command]
async fn model_limits(engine: State<'_, Engine>, id: String) -> Res<botdesk_engine::Limits> {
    engine.model_limits(&id).await
}

/// Sets (or with null, goes back to the family's defaults) a model's limits.
#[tauri::command]
async fn set_model_limits(engine: State<'_, Engine>, id: String, limits: Option<botdesk_engine::Limits>) -> Res<botdesk_engine::Limits> {
    engine.set_model_limits(&id, limits).await
}

/// Sets (or with null, goes back to what its family was trained on) how a model gives coordinates.
#[tauri::command]
async fn set_model_coordinates(
    engine: State<'_, Engine>,
    id: String,
    coordinates: Option<botdesk_engine::action::CoordSpace>,
) -> Res<botdesk_engine::ModelView> {
    engine.set_model_coordinates(&id, coordinates).await
}

/// Sets what each of a bot's runs may spend: tokens (null: the default) and dollars (null: no limit).
#[tauri::command]
async fn set_bot_budget(engine: State<'_, Engine>, bot: String, tokens: Option<u64>, usd: Option<f64>) -> Res<botdesk_engine::Budget> {
    engine.set_bot_budget(&engine.bot_ref(&bot).await?, tokens, usd).await
}

/// Where a bot may connect.
#[tauri::command]
async fn bot_network(engine: State<'_, Engine>, bot: String) -> Res<botdesk_engine::NetPolicy> {
    engine.bot_network(&engine.bot_ref(&bot).await?).await
}

/// Sets where a bot may connect: `mode` open, offline or allow (with `allow`: domains and addresses).
#[tauri::command]
async fn set_bot_network(engine: State<'_, Engine>, bot: String, mode: String, allow: Vec<String>) -> Res<botdesk_engine::NetPolicy> {
    let policy = match mode.as_str() {
        "allow" => botdesk_engine::NetPolicy::allow(allow.iter().map(String::as_str)),
        _ => botdesk_engine::NetPolicy::from_words(&[mode]),
    };
    engine.set_bot_network(&engine.bot_ref(&bot).await?, policy.map_err(botdesk_engine::EngineError::invalid)?).await
}

/// One tiny request to a stored model: its answer, latency and cost, or the provider's refusal.
#[tauri::command]
async fn test_model(engine: State<'_, Engine>, id: String) -> Res<botdesk_engine::ModelCheck> {
    engine.test_model(&id).await
}

/// Changes a bot's name or model.
#[tauri::command]
async fn set_bot(engine: State<'_, Engine>, bot: String, name: Option<String>, model: Option<String>) -> Res<botdesk_engine::BotView> {
    engine.set_bot(&engine.bot_ref(&bot).await?, name.as_deref(), model.as_deref()).await
}

/// What a bot must ask the person before doing.
#[tauri::command]
async fn bot_approvals(engine: State<'_, Engine>, bot: String) -> Res<botdesk_engine::Approvals> {
    engine.bot_approvals(&engine.bot_ref(&bot).await?).await
}

#[tauri::command]
async fn set_bot_approvals(engine: State<'_, Engine>, bot: String, approvals: botdesk_engine::Approvals) -> Res<botdesk_engine::Approvals> {
    engine.set_bot_approvals(&engine.bot_ref(&bot).await?, approvals).await
}

/// A bot's saved logins (sites and user names, never their secrets).
#[tauri::command]
async fn bot_logins(engine: State<'_, Engine>, bot: String) -> Res<Vec<botdesk_engine::BotLogin>> {
    engine.logins(&engine.bot_ref(&bot).await?).await
}

/// Saves a bot's login for a site: the password and the one-time-code seed go to the keyring.
#[tauri::command]
async fn add_bot_login(
    engine: State<'_, Engine>,
    bot: String,
    site: String,
    user: String,
    password: String,
    code_seed: Option<String>,
) -> Res<botdesk_engine::BotLogin> {
    engine.add_login(&engine.bot_ref(&bot).await?, botdesk_engine::NewLogin { site, username: user, password, code_seed }).await
}

#[tauri::command]
async fn remove_bot_login(engine: State<'_, Engine>, bot: String, site: String) -> Res<()> {
    engine.remove_login(&engine.bot_ref(&bot).await?, &site).await
}

/// A bot's MCP servers (started in its computer for each of its runs).
#[tauri::command]
async fn bot_mcp_servers(engine: State<'_, Engine>, bot: String) -> Res<Vec<botdesk_engine::BotMcpServer>> {
    engine.bot_mcp_servers(&engine.bot_ref(&bot).await?).await
}

/// Adds an MCP server to a bot: a command (program and arguments) or a remote server's address.
#[tauri::command]
async fn add_bot_mcp_server(
    engine: State<'_, Engine>,
    bot: String,
    name: String,
    command: Vec<String>,
    url: Option<String>,
) -> Res<botdesk_engine::BotMcpServer> {
    engine.add_bot_mcp_server(&engine.bot_ref(&bot).await?, &name, command, url).await
}

#[tauri::command]
async fn remove_bot_mcp_server(engine: State<'_, Engine>, bot: String, name: String) -> Res<()> {
    engine.remove_bot_mcp_server(&engine.bot_ref(&bot).await?, &name).await
}

#[tauri::command]
async fn bot_spend(engine: State<'_, Engine>, bot: String) -> Res<BotSpend> {
    let me = engine.bot_ref(&bot).await?;
    let (tokens, usd, unpriced_calls) = engine.bot_usage(&me).await?;
    Ok(BotSpend { tokens, usd, unpriced_calls, budget: engine.bot_budget(&me).await? })
}

/// Send: starts a run of the task; its events follow as `run-event`.
#[tauri::command]
async fn send_task(engine: State<'_, Engine>, bot: String, task: String) -> Res<String> {
    engine.start_run(&engine.bot_ref(&bot).await?.id, &task).await
}

/// A screenshot from the chat, as a data URL.
#[tauri::command]
async fn shot(engine: State<'_, Engine>, path: String) -> Res<String> {
    let png = engine.chat_image(&path).await?;
    Ok(format!("data:image/png;base64,{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, png)))
}

/// A bot's latest runs, newest first.
#[tauri::command]
async fn runs(engine: State<'_, Engine>, bot: String) -> Res<Vec<botdesk_engine::RunSummary>> {
    engine.runs_of(&engine.bot_ref(&bot).await?, 50).await
}

/// One run for the replay view: its steps, and its recording if it has one.
#[tauri::command]
async fn replay(engine: State<'_, Engine>, bot: String, run: String) -> Res<botdesk_engine::ReplayView> {
    engine.replay_view(&engine.bot_ref(&bot).await?, Some(&run)).await
}

/// Frames of a run's recording from `from_ms` after its first, as JPEG data URLs.
#[tauri::command]
async fn replay_frames(engine: State<'_, Engine>, run: String, from_ms: i64, count: u32) -> Res<Vec<String>> {
    let frames = engine.replay_frames(&run, from_ms, count).await?;
    Ok(frames.into_iter().map(|j| format!("data:image/jpeg;base64,{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, j))).collect())
}

#[tauri::command]
async fn doctor(engine: State<'_, Engine>) -> Res<DoctorReport> {
    Ok(engine.doctor().await)
}

#[tauri::command]
async fn get_settings(engine: State<'_, Engine>) -> Res<SettingsView> {
    Ok(SettingsView { settings: engine.settings()?, data_dir: engine.data_dir().root().display().to_string(), image: engine.image_tag() })
}

#[tauri::command]
async fn save_settings(engine: State<'_, Engine>, settings: Settings) -> Res<Settings> {
    engine.save_settings(&settings)
}

#[tauri::command]
async fn list_hosts(engine: State<'_, Engine>) -> Res<Vec<HostView>> {
    engine.list_hosts().await
}

#[tauri::command]
async fn list_models(engine: State<'_, Engine>) -> Res<Vec<ModelView>> {
    engine.list_models().await
}

/// Which store keeps the keys (the Secret Service, or the encrypted vault and whether it is locked).
#[tauri::command]
async fn key_store(engine: State<'_, Engine>) -> Res<KeyStore> {
    Ok(engine.key_store().await)
}

/// Gives the key vault its passphrase for this app's session (chooses it for a new vault).
#[tauri::command]
async fn unlock_keys(engine: State<'_, Engine>, passphrase: String) -> Res<()> {
    engine.unlock_keys(passphrase).await
}

/// Adds a model provider; the key goes to the OS keyring only.
#[tauri::command]
async fn add_model(engine: State<'_, Engine>, id: String, kind: ModelKind, model: String, base_url: Option<String>, key: Option<String>) -> Res<ModelView> {
    engine.add_model(NewModel { id, kind, model, base_url: base_url.filter(|u| !u.trim().is_empty()), coordinates: None }, key).await
}

#[tauri::command]
async fn remove_model(engine: State<'_, Engine>, id: String) -> Res<()> {
    engine.remove_model(&id).await
}

/// Builds the computer image, streaming its real stages to the first-run screen.
#[tauri::command]
async fn build_image(engine: State<'_, Engine>, refresh: bool, progress: Channel<BuildProgress>) -> Res<String> {
    engine.build_image(refresh, &move |p| drop(progress.send(p))).await
}

/// Opens the bot's screen: the desktop starts if needed; returns the viewer's WebSocket URL.
#[tauri::command]
async fn open_screen(engine: State<'_, Engine>, screens: State<'_, Arc<Screens>>, bot: String) -> Res<String> {
    // Opening is the person asking for the desktop: it starts the computer if it is stopped.
    let bot = engine.bot_ref(&bot).await?;
    engine.open_desktop(&bot).await?;
    Ok(screens.open(&bot))
}

#[tauri::command]
async fn close_screen(screens: State<'_, Arc<Screens>>, bot: String) -> Res<()> {
    screens.close(&bot);
    Ok(())
}

/// The Browser pane: the page the bot's Chromium shows, and its tabs (starts nothing).
#[tauri::command]
async fn browser_view(engine: State<'_, Engine>, bot: String) -> Res<botdesk_engine::BrowserView> {
    engine.browser_view(&engine.bot_ref(&bot).await?).await
}

/// The Browser pane's address bar, back, forward and reload (only while the person has control).
#[tauri::command]
async fn browser_go(engine: State<'_, Engine>, bot: String, go: botdesk_engine::BrowserGo) -> Res<serde_json::Value> {
    engine.browser_go(&engine.bot_ref(&bot).await?, go).await
}

/// The person's clipboard text to the bot's (only while they control its screen).
#[tauri::command]
async fn set_clipboard(engine: State<'_, Engine>, bot: String, text: String) -> Res<()> {
    engine.set_clipboard(&engine.bot_ref(&bot).await?, &text).await
}

/// The bot's clipboard text onto the person's clipboard, when they asked (Ctrl+C on its screen,
/// or Copy from bot); returns it. The shell writes it: the webview may write the clipboard only
/// in the moment of a click, and the text comes from the computer after that moment.
#[tauri::command]
async fn copy_bot_clipboard(app: tauri::AppHandle, engine: State<'_, Engine>, bot: String) -> Res<String> {
    let text = engine.clipboard_text(&engine.bot_ref(&bot).await?).await?;
    if !text.is_empty() {
        let copy = text.clone();
        app.run_on_main_thread(move || gtk::Clipboard::get(&gtk::gdk::SELECTION_CLIPBOARD).set_text(&copy))
            .map_err(|e| EngineError::new(botdesk_engine::ErrorCode::Internal, format!("could not reach your clipboard: {e}")))?;
    }
    Ok(text)
}

/// A bot's screen in a window of its own (several at once, one per bot): the same app page
/// showing only that screen and its control. Asked again, the window comes forward.
#[tauri::command]
async fn open_screen_window(app: tauri::AppHandle, engine: State<'_, Engine>, bot: String) -> Res<()> {
    let b = engine.bot(&bot).await?;
    let label = format!("screen-{}", b.id);
    if let Some(w) = app.get_webview_window(&label) {
        let _ = w.unminimize();
        let _ = w.set_focus();
        return Ok(());
    }
    // Room for the whole screen at actual size and the bars above it, within the monitor.
    let (mut w, mut h): (f64, f64) = (1296.0, 900.0);
    if let Ok(Some(m)) = app.primary_monitor() {
        let size = m.size().to_logical::<f64>(m.scale_factor());
        (w, h) = (w.min(size.width), h.min(size.height));
    }
    let failed = |e: String| EngineError::new(botdesk_engine::ErrorCode::Internal, format!("could not open a window for {}'s screen: {e}", b.name));
    let main = app.get_webview_window("main").ok_or_else(|| failed("the main window is gone".into()))?;
    // Built beside the main window's webview, sharing its web process (a process of its own
    // would cost about 50 MiB more; measured by `cargo xtask bench`).
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (url, title) = (tauri::WebviewUrl::App(format!("index.html?screen={}", b.id).into()), format!("{} — Botdesk", b.name));
    let handle = app.clone();
    main.with_webview(move |main| {
        let built = tauri::WebviewWindowBuilder::new(&handle, &label, url)
            .title(title)
            .inner_size(w, h)
            .min_inner_size(480.0, 360.0)
            .with_related_view(main.inner().clone())
            .build();
        let _ = tx.send(built.map(drop).map_err(|e| e.to_string()));
    })
    .map_err(|e| failed(e.to_string()))?;
    rx.await.map_err(|_| failed("the window was never built".into()))?.map_err(failed)
}

/// Take control: refused with BOT_RUNNING ("Stop the bot first") while a run holds the bot,
/// unless `pause` asks the run to pause at its next step boundary first (this waits for it).
#[tauri::command]
async fn take_control(engine: State<'_, Engine>, screens: State<'_, Arc<Screens>>, bot: String, pause: Option<bool>) -> Res<ControlLease> {
    let bot = engine.bot_ref(&bot).await?.id;
    if pause.unwrap_or(false) {
        engine.pause_run(&bot, botdesk_engine::PAUSE_WAIT).await?;
    }
    let c = engine.take_control_screen(&bot).await?;
    screens.retarget(bot.as_str());
    Ok(c.lease)
}

/// Release hands the screen back; a run waiting for the person resumes with `finished`, or with
/// `skipped` when the person did not do what it asked.
#[tauri::command]
async fn release_control(engine: State<'_, Engine>, screens: State<'_, Arc<Screens>>, bot: String, skipped: Option<bool>, note: Option<String>) -> Res<()> {
    let result = if skipped.unwrap_or(false) { TakeoverResult::Skipped } else { TakeoverResult::Finished };
    let bot = engine.bot_ref(&bot).await?.id;
    if let Some(lease) = engine.control_of(&bot).await? {
        engine.release_control(&bot, &lease.lease_id, result, note.as_deref()).await?;
    }
    screens.retarget(bot.as_str());
    Ok(())
}

#[tauri::command]
async fn stop_bot(engine: State<'_, Engine>, screens: State<'_, Arc<Screens>>, bot: String) -> Res<Vec<String>> {
    let bot = engine.bot_ref(&bot).await?.id;
    let cancelled = engine.stop_bot(&bot).await?;
    screens.retarget(bot.as_str());
    Ok(cancelled)
}

/// Set once the person chose how to quit: the main window's close then goes through.
static QUITTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What keeps running when the app quits (the quit dialog lists it).
#[tauri::command]
async fn left_running(engine: State<'_, Engine>) -> Res<LeftRunning> {
    engine.left_running().await
}

/// Quits. With `suspend`, running computers nobody works on are saved and suspended and the
/// spares removed first. Whatever still runs is left to `botdesk computer idle-watch`, started
/// here, which suspends each once idle for the set time (the app is no longer there to).
#[tauri::command]
async fn quit_app(app: tauri::AppHandle, engine: State<'_, Engine>, suspend: bool) -> Res<()> {
    QUITTING.store(true, std::sync::atomic::Ordering::SeqCst);
    if suspend {
        for (computer, outcome) in engine.suspend_all().await? {
            tracing::info!(%computer, ?outcome, "suspended on quit");
        }
    }
    let left = engine.left_running().await?;
    if !left.computers.is_empty() || left.spares > 0 {
        start_idle_watch(&engine);
    }
    app.exit(0);
    Ok(())
}

/// Starts the CLI beside this program as `botdesk computer idle-watch` on this data directory, in
/// a process group of its own so it outlives the app; its log goes to `idle-watch.log` there.
fn start_idle_watch(engine: &Engine) {
    // The watcher stands down while an app holds the mark: this one is quitting.
    engine.release_app_mark();
    let root = engine.data_dir().root().to_path_buf();
    let started = std::env::current_exe().and_then(|exe| {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(root.join("idle-watch.log"))?;
        std::process::Command::new(exe.with_file_name("botdesk"))
            .arg("--data-dir")
            .arg(&root)
            .args(["computer", "idle-watch"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
    });
    match started {
        Ok(child) => tracing::info!(pid = child.id(), "left the idle watcher to suspend computers once idle"),
        Err(e) => tracing::warn!("the idle watcher did not start (computers stay running until the app runs again): {e}"),
    }
}

/// The UI reports that its first render is done (app tests wait for this line).
#[tauri::command]
fn ui_ready(bots: usize) {
    println!("botdesk-app: ui ready, {bots} bots listed");
}

/// Memory: few malloc arenas, and freed frame buffers handed back to the system now and then
/// (glibc keeps them otherwise; a 4 MB full frame per viewer adds up).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod malloc {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
        fn malloc_trim(pad: usize) -> i32;
    }
    const M_ARENA_MAX: i32 = -8;
    pub fn limit_arenas() {
        unsafe { mallopt(M_ARENA_MAX, 2) };
    }
    pub fn trim() {
        unsafe { malloc_trim(0) };
    }
}
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod malloc {
    pub fn limit_arenas() {}
    pub fn trim() {}
}

/// The app's keeper of the spare computer (see `Engine::keep_spare`): a pass now, after each new
/// computer or settings change made here, and every 5 s for those another process made (the CLI);
/// a pass with nothing to do is a settings read, a query and one container lookup. It ends with
/// the app. A failure (Docker down, the image not built yet) is logged once until it changes.
async fn keep_spare(engine: Engine) {
    let mut last_error = None;
    loop {
        match engine.keep_spare().await {
            Ok(()) => last_error = None,
            Err(e) => {
                let e = e.to_string();
                if last_error.as_ref() != Some(&e) {
                    tracing::warn!("spare computer: {e}");
                }
                last_error = Some(e);
            }
        }
        tokio::select! {
            () = engine.spare_wanted() => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
        }
    }
}

fn main() {
    malloc::limit_arenas();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BOTDESK_LOG"))
        .init();
    let data_dir = botdesk_engine::DataDir::default_location();
    let opened = tauri::async_runtime::block_on(async {
        let mut config = EngineConfig::new(&data_dir, ProviderChoice::Machine(botdesk_docker::machine));
        // Shifted only by BOTDESK_CLOCK_OFFSET_MS (tests), as the CLI's.
        config.clock = Arc::new(botdesk_engine::OffsetClock::from_env());
        let engine = Engine::open(config).await?;
        let screens = Screens::start(engine.clone()).await.map_err(|e| EngineError::invalid(format!("cannot start the screen transport: {e}")))?;
        Ok::<_, EngineError>((engine, Arc::new(screens)))
    });
    let (engine, screens) = match opened {
        Ok(x) => x,
        Err(e) => {
            eprintln!("botdesk-app: cannot open the data directory {}: {e}", data_dir.display());
            std::process::exit(1);
        }
    };
    tauri::Builder::default()
        .plugin(tauri_plugin_notification::init())
        .setup(|app| {
            notify::on_click(app.handle());
            // A desktop app, not a browser: WebKit keeps no page or resource caches.
            #[cfg(target_os = "linux")]
            if let Some(w) = app.get_webview_window("main") {
                let _ = w.with_webview(|w| {
                    use webkit2gtk::{WebContextExt, WebViewExt};
                    if let Some(ctx) = w.inner().context() {
                        ctx.set_cache_model(webkit2gtk::CacheModel::DocumentViewer);
                    }
                });
            }
            let engine = app.state::<Engine>().inner().clone();
            // While this runs, an idle watcher left by an earlier quit stands down.
            engine.hold_app_mark();
            let screens = app.state::<Arc<Screens>>().inner().clone();
            let feed = Arc::new(events::BotsFeed::new(app.handle().clone(), engine.clone(), screens.clone()));
            app.manage(feed.clone());
            events::spawn(app.handle().clone(), engine.clone(), screens, feed);
            // Adopt or remove containers a crash left behind; Docker being down is not fatal here.
            tauri::async_runtime::spawn(async move {
                match engine.reconcile().await {
                    Ok(r) => tracing::info!(adopted = r.adopted.len(), removed = r.removed.len(), "reconciled containers"),
                    Err(e) => tracing::warn!("reconcile skipped: {e}"),
                }
                keep_spare(engine).await;
            });
            Ok(())
        })
        .manage(engine)
        .manage(screens)
        .manage(files::FileWatch::default())
        .on_window_event(|window, event| {
            // Closing the main window asks first what to do with the computers left running.
            if let tauri::WindowEvent::CloseRequested { api, .. } = event {
                if window.label() == "main" && !QUITTING.load(std::sync::atomic::Ordering::SeqCst) {
                    api.prevent_close();
                    let _ = tauri::Emitter::emit(window, "quit-requested", ());
                }
            }
        })
        .invoke_handler(tauri::generate_handler![
            left_running,
            quit_app,
            key_store,
            unlock_keys,
            list_bots,
            create_bot,
            switch_bot,
            chat,
            runs,
            replay,
            replay_frames,
            open_question,
            answer_question,
            bot_spend,
            model_prices,
            set_model_prices,
            model_limits,
            set_model_limits,
            set_model_coordinates,
            set_bot_budget,
            bot_network,
            set_bot_network,
            bot_logins,
            set_bot,
            test_model,
            bot_approvals,
            set_bot_approvals,
            add_bot_login,
            remove_bot_login,
            bot_mcp_servers,
            add_bot_mcp_server,
            remove_bot_mcp_server,
            send_task,
            shot,
            files::activity,
            files::list_files,
            files::preview_file,
            files::download_file,
            files::history,
            files::restore_version,
            files::undo_run,
            files::upload_file,
            files::watch_files,
            files::terminal_open,
            files::terminal_input,
            files::terminal_resize,
            files::terminal_close,
            doctor,
            get_settings,
            save_settings,
            list_hosts,
            list_models,
            add_model,
            remove_model,
            build_image,
            open_screen,
            close_screen,
            open_screen_window,
            set_clipboard,
            copy_bot_clipboard,
            browser_view,
            browser_go,
            take_control,
            release_control,
            stop_bot,
            ui_ready
        ])
        .run(tauri::generate_context!())
        .expect("the Botdesk window could not start");
}

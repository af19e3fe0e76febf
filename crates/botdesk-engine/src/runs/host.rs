//! A run's host: carries out the model's tool calls on the bot's computer and records the
//! run's messages, tool calls and activity (redacted), broadcasting each as it happens.

use super::*;

pub(super) struct RunHost {
    pub(super) engine: Engine,
    pub(super) bot: botdesk_store::Bot,
    /// The bot, resolved once for the run: what its engine calls take.
    pub(super) me: crate::BotRef,
    pub(super) run: Run,
    pub(super) lease: Arc<tokio::sync::Mutex<ExecLease>>,
    pub(super) redactor: Redactor,
    /// Calls whose result is stored.
    pub(super) finished: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Set when the run cannot go on (its computer stopped under it, the person declined a safety
    /// check); the run then fails with it.
    pub(super) fatal: std::sync::Mutex<Option<(RunFailure, String)>>,
    pub(super) stop: CancellationToken,
    /// What the run's model calls cost so far.
    pub(super) usage: std::sync::Mutex<Usage>,
    /// How the model gives screen coordinates (and is told where the cursor is).
    pub(super) coords: action::CoordSpace,
    /// The model's prices, when known: each call's cost is stored beside its tokens.
    pub(super) prices: Option<botdesk_core::Prices>,
    /// Each look says the address of the page when the bot's browser is in front (OpenAI's
    /// computer use checks it).
    pub(super) page_urls: bool,
    /// The bot's MCP servers, started for this run.
    pub(super) mcp: crate::mcp_servers::RunMcp,
    /// The run's screen recording.
    pub(super) recorder: crate::recording::Recorder,
    /// What each screen-acting call did, by call id, until its result is stored.
    pub(super) acted: std::sync::Mutex<std::collections::HashMap<String, crate::replay::Acted>>,
    /// The person was asked about the run's spend (once a run).
    pub(super) spend_asked: std::sync::atomic::AtomicBool,
    /// The computer watches the bot's browser for its approvals (stopped at the run's end).
    pub(super) watching: std::sync::atomic::AtomicBool,
    /// The bot's desktop, resolved at the first screen tool and kept (dropped when a call through
    /// it fails): each later look or act is one call to the computer.
    pub(super) desk: tokio::sync::Mutex<Option<crate::desktop::Desk>>,
}

impl RunHost {
    pub(super) fn bot_id(&self) -> String {
        self.bot.id.to_string()
    }

    /// The bot's desktop, resolved once for the run (and checked, with one read of the store,
    /// to still be the bot's).
    async fn desk(&self) -> Result<crate::desktop::Desk> {
        let mut kept = self.desk.lock().await;
        if let Some(desk) = &*kept {
            if self.engine.desk_holds(desk).await? {
                return Ok(desk.clone());
            }
        }
        let desk = self.engine.desk(&self.bot.id).await?;
        *kept = Some(desk.clone());
        Ok(desk)
    }

    /// A screenshot of the bot's screen. When it fails (not by a timeout: a gateway that does not
    /// answer would only make the run wait twice), the desktop is resolved again, set up again if
    /// it died with a restarted computer, and the look tried once more.
    async fn look(&self) -> Result<botdesk_core::Observation> {
        let desk = self.desk().await?;
        match self.engine.observe_at(&desk, ImageFormat::Png).await {
            Err(e) if e.code != ErrorCode::TimedOut => {
                *self.desk.lock().await = None;
                self.engine.observe_at(&self.desk().await?, ImageFormat::Png).await
            }
            r => r,
        }
    }

    /// A batch in the model's coordinates on the bot's screen (never repeated: part of it may have
    /// happened); a failure drops the desktop, resolved again by the next screen tool.
    async fn act(&self, mut batch: Vec<action::Action>, settle_ms: Option<u64>) -> Result<(usize, action::Settled)> {
        action::place(&mut batch, self.coords, action::SCREEN).map_err(|e| EngineError::invalid(e.to_string()))?;
        let desk = self.desk().await?;
        match self.engine.act_at(&desk, &batch, settle_ms, &ActThen::default()).await {
            Ok(acted) => Ok((batch.len(), acted.settled)),
            Err(e) => {
                *self.desk.lock().await = None;
                Err(e)
            }
        }
    }

    /// [`Self::act`], then the look and the refusals the model is told of, in the same request
    /// to the computer. Returns how many actions, how the screen settled, what it shows (None:
    /// the look did not come with the answer) and the refusals' lines.
    async fn act_and_look(&self, mut batch: Vec<action::Action>, settle_ms: Option<u64>) -> Result<(usize, action::Settled, Option<Observation>, Vec<String>)> {
        action::place(&mut batch, self.coords, action::SCREEN).map_err(|e| EngineError::invalid(e.to_string()))?;
        let desk = self.desk().await?;
        match self.engine.act_and_look(&desk, &self.bot, &self.run.id, &batch, settle_ms).await {
            Ok((settled, look, refused)) => Ok((batch.len(), settled, look, refused)),
            Err(e) => {
                *self.desk.lock().await = None;
                Err(e)
            }
        }
    }

    pub(super) async fn message(&self, role: MessageRole, text: &str) -> i64 {
        let text = self.redactor.redact(text);
        let content = json!({ "text": text }).to_string();
        let now = self.engine.now();
        match self.engine.inner.store.add_message(&self.run.id, role, &content, now).await {
            Ok(id) => {
                let item = ChatItem {
                    id,
                    run_id: self.run.id.clone(),
                    role,
                    text,
                    calls: vec![],
                    created_at: now,
                    usage: None,
                    cost_usd: None,
                    files_changed: None,
                    failure: None,
                };
                self.engine.emit(RunEvent::Message { bot: self.bot_id(), item });
                id
            }
            Err(e) => {
                tracing::error!(run = %self.run.id, "could not store a chat message: {e}");
                0
            }
        }
    }

    /// Starts an activity entry; losing it never fails the tool.
    pub(super) async fn activity(&self, tool: ToolKind, target: &str, status: ActivityStatus) -> Option<i64> {
        self.activity_named(tool.name(), target, status).await
    }

    /// [`Self::activity`] of a tool by name (an MCP server's).
    pub(super) async fn activity_named(&self, tool: &str, target: &str, status: ActivityStatus) -> Option<i64> {
        let target = self.redactor.redact(target);
        match self.engine.inner.store.add_activity(&self.bot.id, Some(&self.run.id), tool, &target, status, self.engine.now()).await {
            Ok(id) => {
                self.push_activity(id).await;
                Some(id)
            }
            Err(e) => {
                tracing::warn!("activity entry lost: {e}");
                None
            }
        }
    }

    pub(super) async fn finish_activity(&self, id: Option<i64>, status: ActivityStatus, exit: Option<i64>, output: &str) {
        let Some(id) = id else { return };
        let output = tail(&self.redactor.redact(output), OUTPUT_TAIL);
        if let Err(e) = self.engine.inner.store.finish_activity(id, status, exit, &output, self.engine.now()).await {
            tracing::warn!("activity update lost: {e}");
        }
        self.push_activity(id).await;
    }

    /// A one-line entry (write_file, attach_file, open_path, launch_app).
    pub(super) async fn line(&self, tool: ToolKind, target: &str, result: &std::result::Result<String, String>) {
        let id = self.activity(tool, target, ActivityStatus::Running).await;
        match result {
            Ok(detail) => self.finish_activity(id, ActivityStatus::Done, None, detail).await,
            Err(e) => self.finish_activity(id, ActivityStatus::Error, None, e).await,
        }
    }

    pub(super) async fn push_activity(&self, id: i64) {
        if let Ok(rows) = self.engine.inner.store.activity_of(&self.bot.id, id - 1, 1).await {
            for entry in rows {
                self.engine.emit(RunEvent::Activity { bot: self.bot_id(), entry });
            }
        }
    }

    pub(super) fn err(&self, e: EngineError) -> ToolOutput {
        let mut text = e.message;
        if e.code == ErrorCode::MultiScreenUnavailable {
            text.push_str(". Your shell and files still work.");
        }
        ToolOutput::error(text)
    }

    /// After a failed tool: if the computer itself stopped under the run (killed, crashed), or
    /// its Docker host cannot be reached (a host on another machine dropped), the run cannot go
    /// on; it fails with that reason instead of quietly starting a new machine.
    pub(super) async fn check_computer(&self) {
        let Ok(cref) = self.engine.cref_of(&self.bot.computer_id).await else { return };
        let why = match self.engine.inner.provider.status(&cref).await {
            Ok(botdesk_core::MachineStatus::Running) => return,
            Ok(status) => format!(
                "the computer stopped during the run (it is {} now; was it killed?). Send the task again to start it anew: the workspace is kept",
                status.as_str()
            ),
            Err(botdesk_core::ComputerError::Unavailable(line)) => format!(
                "the computer's Docker host cannot be reached: {line}. The run stopped; the files are safe as of the last checkpoint, and the next use reconnects once the host answers"
            ),
            Err(_) => return,
        };
        *self.fatal.lock().unwrap() = Some((RunFailure::ComputerStopped, why));
        self.stop.cancel();
    }

    /// Saves a screenshot for the chat; returns its path relative to the data directory.
    pub(super) async fn save_shot(&self, call_id: &str, png: &[u8]) -> Option<String> {
        let rel = format!("shots/{}/{}.png", self.run.id, sanitize(call_id));
        let path = self.engine.data_dir().root().join(&rel);
        tokio::fs::create_dir_all(path.parent()?).await.ok()?;
        tokio::fs::write(&path, png).await.ok()?;
        Some(rel)
    }

    /// A look at the screen: its size, the cursor (in the model's coordinates), the active window,
    /// and the screenshot with its frame (the run's conversation decides whether it is sent).
    pub(super) async fn observe(&self) -> ToolOutput {
        match self.look().await {
            Ok(o) => self.shown(o).await,
            Err(e) => self.err(e),
        }
    }

    /// What a look shows the model.
    async fn shown(&self, o: Observation) -> ToolOutput {
        // The display is up: the recording starts (once).
        self.recorder.ensure().await;
        let window = o.active_window.as_deref().map(|w| format!(", active window {w:?}")).unwrap_or_default();
        let (x, y) = self.coords.from_pixel(o.cursor, (o.width, o.height));
        let units = match self.coords {
            action::CoordSpace::Pixels => String::new(),
            action::CoordSpace::Thousandths => " (coordinates from 0 to 1000 on each axis)".into(),
            action::CoordSpace::SmartResize => {
                let (w, h) = self.coords.extent((o.width, o.height));
                format!(" (coordinates in pixels of the {w}x{h} image you see)")
            }
        };
        let text = format!("Screen {}x{}{units}, cursor at ({x}, {y}){window}.", o.width, o.height);
        let browser_in_front = o.active_window.as_deref().is_some_and(|w| w.ends_with("Chromium"));
        let page_url = match self.page_urls && browser_in_front {
            true => self.engine.browser_snapshot(&self.me).await.ok().and_then(|s| s["url"].as_str().map(str::to_string)),
            false => None,
        };
        ToolOutput { text, image: o.image.map(|png| Image::screenshot(png, &o.frame_id)), is_error: false, page_url }
    }

    /// Waits `ms` (or until the run is stopped), then looks.
    pub(super) async fn wait(&self, ms: u64, cancel: &CancellationToken) -> ToolOutput {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = cancel.cancelled() => return ToolOutput::error("the run was stopped during the wait"),
        }
        let mut o = self.observe().await;
        o.text = format!("Waited {:.1} s. {}", ms as f64 / 1000.0, o.text);
        o
    }

    /// Holds `keys` down for `ms`, then lets them go (also when the run is stopped meanwhile, so
    /// no key stays down) and looks.
    pub(super) async fn hold_keys(&self, keys: Vec<String>, ms: u64, cancel: &CancellationToken) -> ToolOutput {
        let down: Vec<action::Action> = keys.iter().map(|k| action::Action::KeyDown { key: k.clone() }).collect();
        let up: Vec<action::Action> = keys.iter().rev().map(|k| action::Action::KeyUp { key: k.clone() }).collect();
        if let Err(e) = self.act(down, Some(0)).await {
            return self.err(e);
        }
        let stopped = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => false,
            _ = cancel.cancelled() => true,
        };
        if let Err(e) = self.act(up, None).await {
            return self.err(e);
        }
        if stopped {
            return ToolOutput::error("the run was stopped while the keys were held (they were let go)");
        }
        let mut o = self.observe().await;
        o.text = format!("Held {} for {:.1} s. {}", keys.join("+"), ms as f64 / 1000.0, o.text);
        o
    }

    /// Where the pointer is, in the model's coordinates (no screenshot).
    pub(super) async fn cursor_position(&self) -> ToolOutput {
        match self.look().await {
            Ok(o) => {
                let (x, y) = self.coords.from_pixel(o.cursor, (o.width, o.height));
                ToolOutput::ok(format!("X={x},Y={y}"))
            }
            Err(e) => self.err(e),
        }
    }

    pub(super) async fn shell(&self, command: &str, cwd: Option<&str>, timeout_s: u64, cancel: &CancellationToken) -> ToolOutput {
        let entry = self.activity(ToolKind::Shell, command, ActivityStatus::Running).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let argv = vec!["sh".into(), "-c".into(), command.into()];
        let exec = self.engine.exec_for(&self.bot.id, Some(&self.run.id), argv, None, cwd, Some(Duration::from_secs(timeout_s)), Some(tx), cancel.clone());
        // Drained while the command runs, into a bounded tail: `yes` for half an hour costs nothing.
        let drain = async {
            let mut out = OutputTail::default();
            while let Some(o) = rx.recv().await {
                out.push(&o.data);
            }
            out
        };
        let (result, out) = tokio::join!(exec, drain);
        let output = out.text(&self.redactor);
        match result {
            Ok(exit) => {
                let status = if exit.code == 0 { ActivityStatus::Done } else { ActivityStatus::Failed };
                self.finish_activity(entry, status, Some(exit.code as i64), &output).await;
                let note = exit.message.map(|m| format!(" ({m})")).unwrap_or_default();
                let shown = if out.total > out.kept.len() as u64 || output.chars().count() > botdesk_agent::conversation::MAX_TOOL_TEXT - 200 {
                    format!("[cut: showing the last 11800 characters of {} bytes of output]\n{}", out.total, tail(&output, 11_800))
                } else {
                    output
                };
                let shown = if shown.trim().is_empty() { "(no output)".to_string() } else { shown };
                let text = format!("exit code {}{note}\n{shown}", exit.code);
                if exit.code == 0 {
                    ToolOutput::ok(text)
                } else {
                    ToolOutput::error(text)
                }
            }
            Err(e) => {
                self.finish_activity(entry, ActivityStatus::Error, None, &e.message).await;
                self.err(e)
            }
        }
    }

    pub(super) async fn read_file(&self, path: &str) -> ToolOutput {
        let max = botdesk_agent::tools::MAX_READ_BYTES;
        match self.engine.files_read(&self.me, path, max).await {
            Ok(bytes) if bytes.is_empty() => ToolOutput::ok(format!("{path} is an empty file (0 bytes).")),
            Ok(bytes) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) if text.trim().is_empty() => ToolOutput::ok(format!("{path} holds only whitespace ({} bytes): {text:?}", text.len())),
                Ok(text) => ToolOutput::ok(self.redactor.redact(&text)),
                Err(_) => ToolOutput::error(format!(
                    "{path} is not UTF-8 text; read_file only returns text. Use shell (e.g. `file`, `xxd | head`) to look at binary files"
                )),
            },
            Err(e) if e.code == ErrorCode::TooLarge => ToolOutput::error(format!(
                "{}. read_file returns at most {max} bytes; use shell (e.g. `head -c`, `grep`, `sed -n`) to read parts of it",
                e.message
            )),
            Err(e) => self.err(e),
        }
    }

    pub(super) async fn attach(&self, path: &str) -> std::result::Result<(String, u64), String> {
        let (parent, name) = match path.trim_end_matches('/').rsplit_once('/') {
            Some((p, n)) => (if p.is_empty() { "/" } else { p }, n),
            None => (".", path),
        };
        let (dir, entries) = self.engine.files_list(&self.me, parent).await.map_err(|e| e.message)?;
        let file = entries.into_iter().find(|e| e.path.file_name() == Some(name)).ok_or_else(|| format!("{path} does not exist"))?;
        if file.kind != botdesk_core::FileKind::File {
            return Err(format!("{path} is not a file"));
        }
        let full = if dir.is_empty() || dir == "." { name.to_string() } else { format!("{}/{name}", dir.trim_end_matches('/')) };
        Ok((full, file.size))
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

#[async_trait]
impl Host for RunHost {
    async fn execute(&self, call_id: &str, tool: Tool, cancel: &CancellationToken) -> ToolOutput {
        let me = &self.me;
        let e = &self.engine;
        let watched = self.watch_before(&tool).await;
        // The refusals the tool's own request brought (an action batch's), else read after it.
        let mut refusals_read = None;
        let mut out = match tool {
            Tool::Observe => self.observe().await,
            Tool::Zoom { region } => match self.look().await.and_then(|shot| crate::desktop::zoom_into(shot, region, self.coords)) {
                Ok((r, (w, h), png)) => ToolOutput {
                    page_url: None,
                    text: format!(
                        "The region from ({}, {}) to ({}, {}) of the screen ({}x{} pixels), shown enlarged at {w}x{h}.",
                        region[0],
                        region[1],
                        region[2],
                        region[3],
                        r.width(),
                        r.height()
                    ),
                    image: Some(Image::png(png)),
                    is_error: false,
                },
                Err(e) => self.err(e),
            },
            Tool::Act { actions, settle_ms } => match self.acting(call_id, &actions, self.act_and_look(actions.clone(), settle_ms)).await {
                Ok((n, settled, look, refused)) => {
                    refusals_read = Some(refused);
                    // A look that did not come with the batch's answer is taken on its own.
                    let mut o = match look {
                        Some(look) => self.shown(look).await,
                        None => self.observe().await,
                    };
                    o.text = format!("Did {n} action{}. {} {}", if n == 1 { "" } else { "s" }, settled.describe(), o.text);
                    o
                }
                Err(err) => self.err(err),
            },
            Tool::SafetyChecked { checks, then } => return self.safety_checked(call_id, &checks, *then, cancel).await,
            Tool::Wait { ms } => self.wait(ms, cancel).await,
            Tool::HoldKey { keys, ms } => self.hold_keys(keys, ms, cancel).await,
            Tool::CursorPosition => self.cursor_position().await,
            Tool::Shell { command, cwd, timeout_s } => match self.approve_command(&command, cancel).await {
                Some(refused) => refused,
                None => self.shell(&command, cwd.as_deref(), timeout_s, cancel).await,
            },
            Tool::ListFiles { path } => match e.files_list(me, &path).await {
                Ok((dir, entries)) => ToolOutput::ok(crate::workspace::listing_text(&dir, &entries)),
                Err(err) => self.err(err),
            },
            Tool::ReadFile { path } => self.read_file(&path).await,
            Tool::WriteFile { path, content, append } => {
                let size = content.len();
                let r = self.write_file(&path, content, append).await;
                let did = if append { "appended" } else { "written" };
                self.line(ToolKind::WriteFile, &path, &r.as_ref().map(|(p, _)| format!("{size} bytes {did} to {p}")).map_err(Clone::clone)).await;
                r.map_or_else(ToolOutput::error, |(p, total)| {
                    ToolOutput::ok(if append { format!("Appended {size} bytes to {p} (now {total} bytes).") } else { format!("Wrote {size} bytes to {p}.") })
                })
            }
            Tool::AttachFile { path, note } => {
                let r = self.attach(&path).await;
                self.line(ToolKind::AttachFile, &path, &r.as_ref().map(|(p, s)| format!("{p} ({s} bytes) attached")).map_err(Clone::clone)).await;
                match r {
                    Ok((p, size)) => {
                        let mut o = ToolOutput::ok(format!("Attached {p} ({size} bytes) to the chat."));
                        if let Some(n) = note {
                            o.text.push_str(&format!(" Note: {n}"));
                        }
                        return self.finish(call_id, o, None, Some(p)).await;
                    }
                    Err(m) => ToolOutput::error(m),
                }
            }
            Tool::OpenPath { target } => {
                let r = e.open_path(me, &target).await.map_err(|err| err.message);
                self.line(ToolKind::OpenPath, &target, &r).await;
                r.map_or_else(ToolOutput::error, ToolOutput::ok)
            }
            Tool::LaunchApp { command } => {
                let r = e.launch_app(me, &command).await.map_err(|err| err.message);
                self.line(ToolKind::LaunchApp, &command, &r).await;
                r.map_or_else(ToolOutput::error, ToolOutput::ok)
            }
            Tool::RequestTakeover { reason } => self.takeover(&reason, cancel).await,
            Tool::BrowserNavigate { url } => match e.browser_navigate(me, &url).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
            Tool::BrowserSnapshot => match e.browser_snapshot(me).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
            Tool::BrowserAct { actions } => match e.browser_act_batch(&me.id, actions).await {
                Ok(s) => ToolOutput::ok(crate::desktop::snapshot_text(&s)),
                Err(err) => self.err(err),
            },
            Tool::FillLogin { site } => {
                let r = e.fill_login(me, &site).await.map_err(|err| err.message);
                self.line(ToolKind::FillLogin, &site, &r).await;
                r.map_or_else(ToolOutput::error, ToolOutput::ok)
            }
            Tool::Mcp { name, arguments } => {
                let target: String = serde_json::Value::Object(arguments.clone()).to_string().chars().take(500).collect();
                let entry = self.activity_named(&name, &target, ActivityStatus::Running).await;
                let out = self.mcp.call(&name, arguments, cancel).await;
                let status = if out.is_error { ActivityStatus::Error } else { ActivityStatus::Done };
                self.finish_activity(entry, status, None, &out.text).await;
                out
            }
        };
        // What the browser held for the person's answer meanwhile (a download, a form): asked
        // now, and the model told.
        if let Some(approvals) = watched {
            let told = self.settle_browser(approvals, cancel).await;
            if !told.is_empty() {
                out.text.push_str(&format!("\n\n{} Look again to see where the page is now.", told.join(" ")));
            }
        }
        // The model learns what the bot's network policy refused meanwhile (a page that did not
        // load, a command that could not connect), as the activity shows it.
        let refused = match refusals_read {
            Some(refused) => refused,
            None => self.engine.take_run_refusals(&self.bot, &self.run.id).await,
        };
        if !refused.is_empty() {
            out.text.push_str(&format!("\n\nThe network policy the person set for you refused: {}.", refused.join("; ")));
        }
        out.text = self.redactor.redact(&out.text);
        if out.is_error {
            self.check_computer().await;
        }
        let shot = match &out.image {
            Some(img) => self.save_shot(call_id, &img.data).await,
            None => None,
        };
        self.finish(call_id, out, shot, None).await
    }

    fn text_delta(&self, text: &str) {
        self.engine.emit(RunEvent::Delta { bot: self.bot_id(), run_id: self.run.id.clone(), text: self.redactor.redact(text) });
    }

    fn restart(&self, why: &str) {
        self.engine.emit(RunEvent::Restart { bot: self.bot_id(), run_id: self.run.id.clone(), why: self.redactor.redact(why) });
    }

    fn waiting(&self, wait: Duration, why: &str) {
        let seconds = (wait.as_secs_f64().round() as u64).max(1);
        self.engine.emit(RunEvent::Waiting { bot: self.bot_id(), run_id: self.run.id.clone(), seconds, why: why.to_string() });
    }

    async fn note(&self, text: &str) {
        self.message(MessageRole::System, text).await;
    }

    async fn between_steps(&self, cancel: &CancellationToken) -> Option<String> {
        let spend = self.approve_spend(cancel).await;
        let paused = self.pause_if_asked(cancel).await;
        match (spend, paused) {
            (Some(s), Some(p)) => Some(format!("{s} {p}")),
            (s, p) => s.or(p),
        }
    }

    async fn assistant(&self, text: &str, calls: &[ToolCall]) {
        let id = self.message(MessageRole::Assistant, text).await;
        for c in calls {
            let args = self.redactor.redact(&c.raw);
            let cid = format!("{}:{}", self.run.id, c.id);
            if let Err(e) = self.engine.inner.store.add_tool_call(&cid, &self.run.id, id, &c.name, &args, self.engine.now()).await {
                tracing::error!("could not store a tool call: {e}");
            }
            let call = ChatCall {
                id: cid,
                name: c.name.clone(),
                graphical: graphical(&c.name),
                arguments: args,
                status: CallStatus::Running,
                text: None,
                image: None,
                attachment: None,
                acted: None,
            };
            self.engine.emit(RunEvent::Tool { bot: self.bot_id(), run_id: self.run.id.clone(), call });
        }
    }

    async fn usage(&self, call: &Usage) {
        let cost = self.prices.map(|p| p.cost(call));
        if let Err(e) = self.engine.inner.store.add_model_call(&self.run.id, call, cost, self.engine.now()).await {
            tracing::warn!(run = %self.run.id, "a model call's usage was not stored: {e}");
        }
        let run = {
            let mut total = self.usage.lock().unwrap();
            total.add(call);
            *total
        };
        let run_usd = self.prices.map(|p| p.cost(&run));
        self.engine.emit(RunEvent::Usage { bot: self.bot_id(), run_id: self.run.id.clone(), call: *call, run, run_usd });
    }

    async fn tool_result(&self, call: &ToolCall, r: &ToolResult) {
        // Results the host produced were stored by `finish`; calls refused before reaching the host
        // (malformed, unknown tool) are stored here.
        if !self.finished.lock().unwrap().contains(&call.id) {
            let out = ToolOutput { text: self.redactor.redact(&r.text), image: None, is_error: r.is_error, page_url: None };
            self.finish(&call.id, out, None, None).await;
        }
    }
}

impl RunHost {
    /// `write_file`: replaces the file, or adds to its end (the file may grow to
    /// `MAX_WRITE_BYTES` this way; it is read and written whole). Returns the path and the size.
    pub(super) async fn write_file(&self, path: &str, content: String, append: bool) -> std::result::Result<(String, usize), String> {
        let (bot, max) = (&self.me, botdesk_agent::tools::MAX_WRITE_BYTES);
        let mut data = Vec::new();
        if append {
            match self.engine.files_read(bot, path, max as u64).await {
                Ok(old) => data.extend_from_slice(&old),
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) if e.code == ErrorCode::TooLarge => {
                    return Err(format!("{path} is over {max} bytes: append to it with shell (e.g. cat >> {path}) instead. Nothing was written"))
                }
                Err(e) => return Err(e.message),
            }
            if data.len() + content.len() > max {
                return Err(format!(
                    "appending {} bytes would make {path} larger than {max} bytes: append to it with shell (e.g. cat >> {path}) instead. Nothing was written",
                    content.len()
                ));
            }
        }
        data.extend_from_slice(content.as_bytes());
        let total = data.len();
        let p = self.engine.files_write(bot, path, bytes::Bytes::from(data), false).await.map_err(|e| e.message)?;
        Ok((p, total))
    }

    /// Runs `act` (a batch on the screen) and keeps, once it worked, where its actions landed
    /// for the replay.
    async fn acting<T>(&self, call_id: &str, batch: &[action::Action], act: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let mut placed = batch.to_vec();
        let marks = action::place(&mut placed, self.coords, action::SCREEN).ok().map(|()| crate::replay::marks_of(&placed, |t| self.redactor.redact(t)));
        let at = self.engine.now();
        let r = act.await;
        if let (Ok(_), Some(marks)) = (&r, marks) {
            self.acted.lock().unwrap().insert(call_id.to_string(), crate::replay::Acted { at, marks });
        }
        r
    }

    /// Stores and broadcasts a tool call's result, and hands it back for the model.
    pub(super) async fn finish(&self, call_id: &str, out: ToolOutput, image: Option<String>, attachment: Option<String>) -> ToolOutput {
        self.finished.lock().unwrap().insert(call_id.to_string());
        let cid = format!("{}:{}", self.run.id, call_id);
        let acted = self.acted.lock().unwrap().remove(call_id);
        let mut result = json!({ "text": out.text });
        if let Some(a) = &acted {
            result["acted"] = json!(a);
        }
        if let Some(i) = &image {
            result["image"] = json!(i);
        }
        if let Some(a) = &attachment {
            result["attachment"] = json!(a);
        }
        if let Err(e) = self.engine.inner.store.finish_tool_call(&cid, &result.to_string(), out.is_error, self.engine.now()).await {
            tracing::error!("could not store a tool result: {e}");
        }
        let call = ChatCall {
            id: cid,
            name: String::new(),
            graphical: false,
            arguments: String::new(),
            status: if out.is_error { CallStatus::Error } else { CallStatus::Done },
            text: Some(out.text.clone()),
            image,
            attachment,
            acted,
        };
        self.engine.emit(RunEvent::Tool { bot: self.bot_id(), run_id: self.run.id.clone(), call });
        out
    }
}

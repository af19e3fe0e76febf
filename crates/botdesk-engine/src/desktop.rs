//! Per-bot desktops: slots from the store, displays from the provider, observe and act.

use botdesk_core::{action, browser, *};
use serde::Serialize;

use crate::{BotRef, Engine, EngineError, ErrorCode, Result};

#[derive(Debug, Clone, Serialize)]
pub struct DesktopView {
    /// The bot's name and id.
    pub bot: String,
    pub bot_id: String,
    pub computer: String,
    /// The display's number (`:slot` in the computer).
    pub slot: u32,
    /// The gateway's host port (127.0.0.1) and this screen's view token.
    pub port: u16,
    pub view_token: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ControlView {
    pub lease: botdesk_store::ControlLease,
    pub port: u16,
    pub control_token: String,
}

/// A screen capability for a VNC client: the gateway's loopback port, a token, whether it is a
/// control token, and whether the screen is across a network (its computer is on a host on
/// another machine: ask for a compressed encoding).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScreenTarget {
    pub port: u16,
    pub token: String,
    pub control: bool,
    pub compressed: bool,
}

/// The region (given in `space`) of a PNG screenshot, enlarged by whole pixels as far as the
/// screen's size allows: the region in screen pixels and the PNG with its size.
pub(crate) fn zoom_into(shot: Observation, region: [u32; 4], space: action::CoordSpace) -> Result<(action::Region, (u32, u32), bytes::Bytes)> {
    let r = action::Region::place(region, space, action::SCREEN).map_err(|e| EngineError::invalid(e.to_string()))?;
    let png = shot.image.ok_or_else(|| EngineError::new(ErrorCode::Internal, "the screenshot came without an image"))?;
    let (w, h, rgb) = botdesk_core::screenshot::decode_png(&png, action::SCREEN).map_err(EngineError::from)?;
    let (zw, zh, z) =
        action::zoom_rgb(w, h, &rgb, r, action::SCREEN).ok_or_else(|| EngineError::invalid(format!("the region is outside the {w}x{h} screen")))?;
    let out = botdesk_core::screenshot::encode_png(zw, zh, &z).map_err(EngineError::from)?;
    Ok((r, (zw, zh), out))
}

/// A new random capability token (128 bits, hex).
pub fn new_token() -> String {
    botdesk_core::gateway::new_token()
}

/// A bot's desktop resolved once, for a run (or this process's computer handle) to keep: where
/// its computer's calls go, its display and whom it acts as. A look or an act through it is one
/// provider call, with no Docker call or gateway check around it, once [`Engine::desk_holds`]
/// (one read of the store) says the bot still has that display; a call that fails drops it and
/// the next resolves it again (the computer may have restarted).
#[derive(Debug, Clone)]
pub(crate) struct Desk {
    bot: BotId,
    computer: ComputerId,
    cref: ComputerRef,
    slot: u32,
    view_token: String,
    ctx: CallCtx,
}

impl Desk {
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }
    pub(crate) fn bot(&self) -> &BotId {
        &self.bot
    }
}

impl Engine {
    /// Resolves the bot's desktop (opened if needed) into a [`Desk`].
    pub(crate) async fn desk(&self, bot: &BotId) -> Result<Desk> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        self.desktop_of(&bot, &computer, Reuse::Trusted).await?;
        self.handle(&computer.id).desk(&bot.id).ok_or_else(|| EngineError::new(ErrorCode::Stale, "the desktop was released meanwhile"))
    }

    /// Whether the bot still has the desktop the desk names (another process may have released
    /// it, or the computer stopped and its displays are gone): one read of the store.
    pub(crate) async fn desk_holds(&self, desk: &Desk) -> Result<bool> {
        let d = self.inner.store.desktop_of(&desk.computer, &desk.bot).await?;
        Ok(d.is_some_and(|d| d.state == botdesk_core::state::DesktopState::Assigned && d.slot == desk.slot && d.view_token == desk.view_token))
    }

    /// A screenshot through a resolved desktop. A failure (not a timeout) forgets that the
    /// display is up, so the next [`Engine::desk`] sets it up again.
    pub(crate) async fn observe_at(&self, desk: &Desk, format: ImageFormat) -> Result<Observation> {
        self.inner.provider.observe(&desk.cref, desk.slot, format, &desk.ctx).await.map_err(|e| self.lost(desk, e))
    }

    /// A batch (already placed in screen pixels) through a resolved desktop, with what `then`
    /// asks in the same request.
    pub(crate) async fn act_at(&self, desk: &Desk, batch: &[action::Action], settle_ms: Option<u64>, then: &ActThen) -> Result<ActAnswer> {
        self.inner.provider.act(&desk.cref, desk.slot, batch, action::settle_ms(settle_ms), then, &desk.ctx).await.map_err(|e| self.lost(desk, e))
    }

    /// An action batch's answer with its look, and the bot's refusals since its cursor taken
    /// into its activity (for `run`): the batch, the look and the refusals in one request. The
    /// look is None when it did not come with the answer (the caller looks again).
    pub(crate) async fn act_and_look(
        &self,
        desk: &Desk,
        bot: &botdesk_store::Bot,
        run: &str,
        batch: &[action::Action],
        settle_ms: Option<u64>,
    ) -> Result<(action::Settled, Option<Observation>, Vec<String>)> {
        let cursor = self.inner.store.net_cursor(&bot.id).await?;
        let then = ActThen { look: Some(ImageFormat::Png), refusals: Some((desk.ctx.user, cursor.1)) };
        let acted = self.act_at(desk, batch, settle_ms, &then).await?;
        let taken = match acted.refusals {
            Some(answer) => self.refusals_answered(&bot.id, (&desk.cref, desk.ctx.user), cursor, answer).await,
            None => Ok(vec![]),
        };
        Ok((acted.settled, acted.look, self.record_refusals(bot, Some(run), taken).await))
    }

    fn lost(&self, desk: &Desk, e: ComputerError) -> EngineError {
        if !matches!(e, ComputerError::TimedOut(_)) {
            self.forget_display(&desk.computer, desk.slot);
        }
        e.into()
    }

    /// Opens the bot's desktop (lazily: display, window manager and view transport start now).
    pub async fn open_desktop(&self, bot: &BotRef) -> Result<DesktopView> {
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        self.open_desktop_of(&bot, &computer).await
    }

    /// The display the bot's desktop has, if one is assigned (its commands and shells draw there).
    pub(crate) async fn display_of(&self, computer: &ComputerId, bot: &BotId) -> Result<Option<u32>> {
        Ok(self.inner.store.desktop_of(computer, bot).await?.filter(|d| d.state == botdesk_core::state::DesktopState::Assigned).map(|d| d.slot))
    }

    /// The bot's desktop, opened if needed (everything graphical goes through here once).
    pub(crate) async fn open_desktop_of(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer) -> Result<DesktopView> {
        self.desktop_of(bot, computer, Reuse::Checked).await
    }

    async fn desktop_of(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, reuse: Reuse) -> Result<DesktopView> {
        let (cref, up) = self.bring_up(computer).await?;
        let limit = self.screen_limit();
        let (d, assigned_now) = self.inner.store.assign_desktop(&computer.id, &bot.id, &new_token(), limit, self.now()).await?;
        let ctx = crate::bot_ctx(bot, computer);
        let handle = self.handle(&computer.id);
        // For a look at the screen, a desktop opened before on a computer running since (by
        // another process, say the app beside this CLI) is taken to be up, as this process's own
        // would be: if it is not, the look fails and is tried again once it is brought up.
        if reuse == Reuse::Trusted && !assigned_now && up == crate::Up::Already {
            handle.add_display(d.slot, &d.view_token);
        }
        let desk =
            Desk { bot: bot.id.clone(), computer: computer.id.clone(), cref: cref.clone(), slot: d.slot, view_token: d.view_token.clone(), ctx: ctx.clone() };
        if !handle.has_display(d.slot, &d.view_token) {
            if let Err(e) = self.inner.provider.open_desktop(&cref, &bot.id, d.slot, &d.view_token, &ctx).await {
                // Tear down whatever started; the slot is freed only if that is verified.
                let verified = self.inner.provider.release_desktop(&cref, d.slot, &ctx).await.is_ok();
                if self.inner.store.begin_release_desktop(&computer.id, &bot.id).await?.is_some() {
                    self.inner.store.finish_release_desktop(&computer.id, d.slot, verified).await?;
                }
                return Err(EngineError::from(e).context(format!("opening {}'s desktop", bot.name)));
            }
            handle.add_display(d.slot, &d.view_token);
        }
        handle.keep_desk(desk);
        let screen = self.inner.provider.screen(&cref, &d.view_token, false).await?;
        Ok(DesktopView {
            bot: bot.name.clone(),
            bot_id: bot.id.to_string(),
            computer: computer.id.to_string(),
            slot: d.slot,
            port: screen.port,
            view_token: d.view_token,
        })
    }

    /// Forgets that this process brought the display up, so the next call sets it up again
    /// (after a failure that may mean the display died under us).
    fn forget_display(&self, computer: &ComputerId, slot: u32) {
        self.handle(computer).forget_display(slot);
    }

    /// A screenshot of the bot's display; when it fails, the display is set up again once (it may
    /// have died with a restarted computer) and the screenshot retried. Not after a timeout: a
    /// gateway that does not answer would only make the caller wait twice.
    async fn observe_of(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, format: ImageFormat) -> Result<Observation> {
        let ctx = crate::bot_ctx(bot, computer);
        let cref = computer.cref();
        let view = self.desktop_of(bot, computer, Reuse::Trusted).await?;
        match self.inner.provider.observe(&cref, view.slot, format, &ctx).await {
            Ok(obs) => Ok(obs),
            Err(e @ botdesk_core::ComputerError::TimedOut(_)) => Err(e.into()),
            Err(_) => {
                self.forget_display(&computer.id, view.slot);
                let view = self.open_desktop_of(bot, computer).await?;
                Ok(self.inner.provider.observe(&cref, view.slot, format, &ctx).await?)
            }
        }
    }

    /// Releases the bot's desktop: tokens revoked, transports, browser, window manager and X
    /// stopped and verified gone, then the slot is free. A failed teardown keeps it reserved.
    pub async fn release_desktop(&self, bot: &BotRef) -> Result<bool> {
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        let Some(d) = self.inner.store.begin_release_desktop(&computer.id, &bot.id).await? else { return Ok(false) };
        self.forget_display(&computer.id, d.slot);
        let cref = computer.cref();
        let result = self.inner.provider.release_desktop(&cref, d.slot, &crate::bot_ctx(&bot, &computer)).await;
        self.inner.store.finish_release_desktop(&computer.id, d.slot, result.is_ok()).await?;
        result.map_err(|e| EngineError::from(e).context(format!("releasing {}'s desktop (its slot stays reserved)", bot.name)))?;
        Ok(true)
    }

    /// A screenshot of the bot's desktop (opened if needed), with the id of its frame (equal ids,
    /// equal pixels: a run's conversation decides from it whether the model has seen it).
    pub async fn screenshot(&self, bot: &BotRef, format: ImageFormat) -> Result<Observation> {
        // The desktop this process resolved before, while the bot still has it: one call.
        if let Some(desk) = self.handle(&bot.computer).desk(&bot.id) {
            if self.desk_holds(&desk).await? {
                match self.observe_at(&desk, format).await {
                    Err(e) if e.code != ErrorCode::TimedOut => {}
                    r => return r,
                }
            }
        }
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        self.observe_of(&bot, &computer, format).await
    }

    /// A close look at part of the bot's screen (Claude's `zoom`): the region, given in `space`,
    /// cut from a fresh screenshot and enlarged by whole pixels as far as the screen's size allows.
    /// Returns the region in screen pixels and the PNG with its size.
    pub async fn zoom(&self, bot: &BotRef, region: [u32; 4], space: action::CoordSpace) -> Result<(action::Region, (u32, u32), bytes::Bytes)> {
        action::Region::place(region, space, action::SCREEN).map_err(|e| EngineError::invalid(e.to_string()))?;
        zoom_into(self.screenshot(bot, ImageFormat::Png).await?, region, space)
    }

    /// Performs a batch of actions (a JSON array) on the bot's desktop, then waits until the
    /// screen changed and stayed still for `settle_ms` (default 300, at most 5000; 0: no wait), at
    /// most 3 s, and says what it saw. An invalid or oversized batch is refused before anything
    /// reaches the screen.
    pub async fn act(&self, bot: &BotRef, actions: &serde_json::Value, settle_ms: Option<u64>) -> Result<(usize, action::Settled)> {
        self.act_in(bot, actions, settle_ms, action::CoordSpace::Pixels).await
    }

    /// [`Engine::act`] with coordinates given in `space` (a model's own); a coordinate outside
    /// the screen refuses the batch.
    pub async fn act_in(
        &self,
        bot: &BotRef,
        actions: &serde_json::Value,
        settle_ms: Option<u64>,
        space: action::CoordSpace,
    ) -> Result<(usize, action::Settled)> {
        let batch = action::parse_batch(actions).map_err(|e| EngineError::invalid(e.to_string()))?;
        self.act_batch(&bot.id, batch, settle_ms, space).await
    }

    /// [`Engine::act_in`] with a batch already parsed and checked by `action::parse_batch` (a
    /// model's `computer_act`).
    pub(crate) async fn act_batch(
        &self,
        bot: &BotId,
        mut batch: Vec<action::Action>,
        settle_ms: Option<u64>,
        space: action::CoordSpace,
    ) -> Result<(usize, action::Settled)> {
        action::place(&mut batch, space, action::SCREEN).map_err(|e| EngineError::invalid(e.to_string()))?;
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let view = self.open_desktop_of(&bot, &computer).await?;
        let then = ActThen::default();
        match self.inner.provider.act(&computer.cref(), view.slot, &batch, action::settle_ms(settle_ms), &then, &crate::bot_ctx(&bot, &computer)).await {
            Ok(acted) => Ok((batch.len(), acted.settled)),
            Err(e) => {
                self.forget_display(&computer.id, view.slot);
                Err(e.into())
            }
        }
    }

    /// Take control with a screen: the control lease, plus a control transport on the bot's
    /// display reachable through the gateway with its own token.
    pub async fn take_control_screen(&self, bot: &BotId) -> Result<ControlView> {
        let lease = self.take_control(bot).await?;
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let view = self.open_desktop_of(&bot, &computer).await?;
        let cref = computer.cref();
        let d = self.inner.store.desktop_of(&computer.id, &bot.id).await?.ok_or_else(|| EngineError::new(ErrorCode::Stale, "the desktop was released"))?;
        let token = match d.control_token {
            Some(t) => t,
            None => {
                let t = new_token();
                self.inner.provider.control_transport(&cref, view.slot, &t, &crate::bot_ctx(&bot, &computer)).await?;
                self.inner.store.set_control_token(&computer.id, view.slot, Some(&t)).await?;
                t
            }
        };
        // The token lapses with the lease inside the computer too (renewals move both).
        self.inner.provider.expire_token_at(&cref, &token, lease.expires_at).await?;
        Ok(ControlView { lease, port: view.port, control_token: token })
    }

    /// Where a viewer of the bot's screen connects now: the control transport while the person
    /// holds control of this bot, the view transport otherwise (the desktop opens if needed).
    pub async fn screen_target(&self, bot: &BotRef) -> Result<ScreenTarget> {
        // Watching never boots a computer the person (or idle suspend) stopped.
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        if !matches!(self.stored_state(&computer.id).await?, ComputerState::Running | ComputerState::Booting) {
            return Err(EngineError::new(ErrorCode::NotRunning, format!("{}'s computer is stopped; open the desktop to start it", b.name)));
        }
        if self.control_of(&bot.id).await?.is_some() {
            let c = self.take_control_screen(&bot.id).await?;
            return Ok(ScreenTarget { port: c.port, token: c.control_token, control: true, compressed: !computer.host.is_local() });
        }
        let v = self.open_desktop(bot).await?;
        Ok(ScreenTarget { port: v.port, token: v.view_token, control: false, compressed: !computer.host.is_local() })
    }

    /// Revokes the control transport of the bot's screen (on release or expiry of control).
    pub(crate) async fn revoke_control_transport(&self, bot: &BotId, computer: &ComputerId) -> Result<()> {
        if let Some(d) = self.inner.store.desktop_of(computer, bot).await? {
            if let Some(t) = d.control_token {
                self.inner.store.set_control_token(computer, d.slot, None).await?;
                match self.inner.provider.revoke_token(&self.cref_of(computer).await?, &t, &CallCtx { bot: Some(bot.clone()), ..CallCtx::default() }).await {
                    Ok(()) | Err(ComputerError::Unsupported { .. }) | Err(ComputerError::NotRunning(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}

impl Engine {
    pub(crate) async fn browser(&self, bot: &BotId, command: BrowserCommand) -> Result<serde_json::Value> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        self.browser_of(&bot, &computer, command).await
    }

    /// [`Engine::browser`] for a bot already resolved.
    pub(crate) async fn browser_of(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, command: BrowserCommand) -> Result<serde_json::Value> {
        let view = self.open_desktop_of(bot, computer).await?;
        let profile = browser::profile_name(&bot.id);
        let mut page = self.inner.provider.page_browser(&computer.cref(), view.slot, &profile, &command, &crate::bot_ctx(bot, computer)).await?;
        bound_page(&mut page);
        Ok(page)
    }

    /// Opens an http(s) URL in the bot's own Chromium (started on first use with its profile);
    /// returns the page snapshot.
    pub async fn browser_navigate(&self, bot: &BotRef, url: &str) -> Result<serde_json::Value> {
        browser::check_url(url).map_err(EngineError::invalid)?;
        self.browser(&bot.id, BrowserCommand::Navigate { url: url.to_string() }).await
    }

    /// Page text plus up to 80 visible interactive elements with refs (passwords masked).
    pub async fn browser_snapshot(&self, bot: &BotRef) -> Result<serde_json::Value> {
        self.browser(&bot.id, BrowserCommand::Snapshot).await
    }

    /// What the person's Browser pane shows: the page of the bot's Chromium as the bot's own
    /// snapshot sees it, and its tabs. Starts nothing: a bot without a desktop or a running
    /// browser shows as closed.
    pub async fn browser_view(&self, bot: &BotRef) -> Result<BrowserView> {
        let closed = BrowserView { closed: true, page: None, tabs: vec![] };
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        if self.display_of(&computer.id, &b.id).await?.is_none() {
            return Ok(closed);
        }
        let mut v = self.browser_of(&b, &computer, BrowserCommand::View).await?;
        if v["closed"] == true {
            return Ok(closed);
        }
        let mut page = v["page"].take();
        bound_page(&mut page);
        let page = PageSnapshot::of(&page);
        // Cut as the page's own values are: the computer says what its tabs are.
        let cut = |v: &serde_json::Value, max: usize| v.as_str().unwrap_or("").chars().take(max).collect::<String>();
        let tabs = v["tabs"]
            .as_array()
            .into_iter()
            .flatten()
            .take(50)
            .map(|t| BrowserTab { title: cut(&t["title"], 300), url: cut(&t["url"], 2_000), current: t["current"] == true })
            .collect();
        Ok(BrowserView { closed: false, page: Some(page), tabs })
    }

    /// The person drives the bot's browser from the Browser pane: only while they hold control
    /// of its screen. Returns the new page snapshot.
    pub async fn browser_go(&self, bot: &BotRef, go: BrowserGo) -> Result<serde_json::Value> {
        let id = &bot.id;
        if self.control_of(id).await?.is_none() {
            return Err(EngineError::new(ErrorCode::Stale, "take control of the screen to drive the bot's browser"));
        }
        match go {
            BrowserGo::Navigate { url } => self.browser_navigate(bot, &url).await,
            BrowserGo::Back => self.browser(id, BrowserCommand::History { step: -1 }).await,
            BrowserGo::Forward => self.browser(id, BrowserCommand::History { step: 1 }).await,
            BrowserGo::Reload => self.browser(id, BrowserCommand::Reload).await,
        }
    }

    /// Opens an http(s) URL or a workspace file on the bot's desktop, in the bot's own browser
    /// (a file as a file:// page, so HTML, images, PDFs and text show there).
    pub async fn open_path(&self, bot: &BotRef, target: &str) -> Result<String> {
        if target.contains("://") {
            self.browser_navigate(bot, target).await?;
            return Ok(format!("Opened {target} in your browser."));
        }
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let path = self.resolve(&b, &computer, target)?;
        let inside = path.in_computer();
        let cref = self.ensure_running(&computer).await?;
        let exists = ExecRequest::new(["test", "-e", inside.as_str()]).cwd(WorkspacePath::root());
        if self.inner.provider.exec(&cref, exists, None, &crate::bot_ctx(&b, &computer)).await?.code != 0 {
            return Err(EngineError::new(ErrorCode::NotFound, format!("{target} does not exist")));
        }
        let url = format!("file://{}", inside.split('/').map(percent).collect::<Vec<_>>().join("/"));
        self.browser_of(&b, &computer, BrowserCommand::Navigate { url }).await?;
        Ok(format!("Opened {path} in your browser."))
    }

    /// Starts a graphical program on the bot's display and returns once it started.
    pub async fn launch_app(&self, bot: &BotRef, command: &str) -> Result<String> {
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let view = self.open_desktop_of(&b, &computer).await?;
        let cref = computer.cref();
        let script = r#"cmd="$1"; set -- $1; command -v "$1" >/dev/null 2>&1 || { echo "there is no program named $1 on this computer" >&2; exit 127; }; setsid -f sh -c "$cmd" >/dev/null 2>&1 </dev/null"#;
        let folder = self.resolve(&b, &computer, "")?;
        let req = ExecRequest::new(["sh", "-c", script, "sh", command])
            .cwd(folder)
            .env("DISPLAY", format!(":{}", view.slot))
            .timeout(std::time::Duration::from_secs(20));
        // What it says is read as it comes and kept to its first 4 KiB (the rest is dropped, so
        // nothing piles up whatever the command prints).
        const KEPT: usize = 4096;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<botdesk_core::ExecOutput>();
        let said = tokio::spawn(async move {
            let mut said = Vec::new();
            while let Some(o) = rx.recv().await {
                let room = KEPT.saturating_sub(said.len());
                said.extend_from_slice(&o.data[..o.data.len().min(room)]);
            }
            said
        });
        let exit = self.inner.provider.exec(&cref, req, Some(tx), &crate::bot_ctx(&b, &computer)).await;
        // (The sender goes with the exec; a provider that kept it would cost 2 s, not a hang.)
        let said = tokio::time::timeout(std::time::Duration::from_secs(2), said).await.ok().and_then(|r| r.ok()).unwrap_or_default();
        if exit?.code != 0 {
            return Err(EngineError::invalid(String::from_utf8_lossy(&said).trim().to_string()));
        }
        Ok(format!("Started {command:?} on your desktop (display :{}).", view.slot))
    }

    /// Click / fill / type by ref (at most 24); returns the new snapshot.
    pub async fn browser_act(&self, bot: &BotRef, actions: &serde_json::Value) -> Result<serde_json::Value> {
        let actions = browser::parse_actions(actions).map_err(EngineError::invalid)?;
        self.browser_act_batch(&bot.id, actions).await
    }

    /// [`Engine::browser_act`] with the actions already parsed and checked by
    /// `browser::parse_actions` (a model's `browser_act`).
    pub(crate) async fn browser_act_batch(&self, bot: &BotId, actions: Vec<browser::BrowserAction>) -> Result<serde_json::Value> {
        self.browser(bot, BrowserCommand::Act { actions }).await
    }
}

/// What the person's Browser pane shows.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct BrowserView {
    /// The bot's browser is not running (looking starts nothing).
    pub closed: bool,
    /// The page as the bot's `browser_snapshot` sees it.
    pub page: Option<PageSnapshot>,
    /// At most 50; the one the bot works in is `current`.
    pub tabs: Vec<BrowserTab>,
}

/// A page as the bot's `browser_snapshot` sees it, cut as [`bound_page`] cuts it. What the
/// computer sent in another shape reads as empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct PageSnapshot {
    pub url: String,
    pub title: String,
    pub text: String,
    pub elements: Vec<PageElement>,
}

/// An element the bot can act on: `ref` is what `browser_act` names it by (`e12`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct PageElement {
    #[serde(rename = "ref")]
    #[ts(rename = "ref")]
    pub reference: String,
    pub role: String,
    pub name: String,
    pub value: Option<String>,
}

impl PageSnapshot {
    fn of(page: &serde_json::Value) -> Self {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
        let elements = page["elements"].as_array().into_iter().flatten();
        PageSnapshot {
            url: s(&page["url"]),
            title: s(&page["title"]),
            text: s(&page["text"]),
            elements: elements
                .map(|e| PageElement { reference: s(&e["ref"]), role: s(&e["role"]), name: s(&e["name"]), value: e["value"].as_str().map(str::to_string) })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct BrowserTab {
    pub title: String,
    pub url: String,
    pub current: bool,
}

/// Where the person sends the bot's browser from the Browser pane.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, ts_rs::TS)]
#[serde(tag = "go", rename_all = "snake_case")]
pub enum BrowserGo {
    Navigate { url: String },
    Back,
    Forward,
    Reload,
}

fn percent(segment: &str) -> String {
    segment.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// The snapshot as text: `role "name" [eN]` lines after the page text.
/// Cuts what a page (a bot's, or one steering it) put in a snapshot before it is stored or shown:
/// the title, address and each element's name and value to 2,000 characters, the text to
/// 12,000, at most 200 elements.
pub(crate) fn bound_page(page: &mut serde_json::Value) {
    fn cut(v: &mut serde_json::Value, max: usize) {
        if let Some(s) = v.as_str() {
            if s.chars().count() > max {
                *v = serde_json::Value::String(format!("{}…", s.chars().take(max).collect::<String>()));
            }
        }
    }
    for (field, max) in [("title", 2_000), ("url", 2_000), ("text", 12_000)] {
        if let Some(v) = page.get_mut(field) {
            cut(v, max);
        }
    }
    if let Some(elements) = page.get_mut("elements").and_then(|e| e.as_array_mut()) {
        elements.truncate(200);
        for e in elements {
            for field in ["role", "name", "value", "ref"] {
                if let Some(v) = e.get_mut(field) {
                    cut(v, 2_000);
                }
            }
        }
    }
}

pub fn snapshot_text(s: &serde_json::Value) -> String {
    let text = s["text"].as_str().unwrap_or("").trim();
    let text = if text.is_empty() { "(the page shows no text)" } else { text };
    let title = s["title"].as_str().filter(|t| !t.trim().is_empty()).unwrap_or("(no title)");
    let url = s["url"].as_str().filter(|u| !u.trim().is_empty()).unwrap_or("(no address)");
    let mut out = format!("{title} — {url}\n\n{text}\n\n");
    if s["elements"].as_array().is_none_or(Vec::is_empty) {
        out.push_str("(no interactive elements)\n");
    }
    for e in s["elements"].as_array().into_iter().flatten() {
        let value = e["value"].as_str().map(|v| format!(" = {v:?}")).unwrap_or_default();
        out.push_str(&format!("{} {:?} [{}]{}\n", e["role"].as_str().unwrap_or(""), e["name"].as_str().unwrap_or(""), e["ref"].as_str().unwrap_or(""), value));
    }
    out
}

#[cfg(test)]
mod tests {
    /// A page that puts megabytes in its title, a field's value or its elements is cut before it
    /// is stored or shown.
    #[test]
    fn huge_page_values_are_cut() {
        let big = "x".repeat(3_000_000);
        let long = "y".repeat(5_000);
        let elements: Vec<_> =
            (0..1_000).map(|i| serde_json::json!({"role": "textbox", "name": long.clone(), "value": long.clone(), "ref": i.to_string()})).collect();
        let mut page = serde_json::json!({"title": big.clone(), "url": big.clone(), "text": big.clone(), "elements": elements});
        super::bound_page(&mut page);
        assert!(page.to_string().len() < 1_000_000, "{} bytes", page.to_string().len());
        assert_eq!(page["title"].as_str().unwrap().chars().count(), 2_001);
        assert_eq!(page["elements"].as_array().unwrap().len(), 200);
    }
}

/// Whether a display this process has not brought up itself is taken to be up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// Yes, when it was opened before on a computer running since: for a screenshot, which
    /// brings the display up and tries again when it fails.
    Trusted,
    /// No: it is brought up (a no-op when it runs) before input, a browser or a program reaches it.
    Checked,
}

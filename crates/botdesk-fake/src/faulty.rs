//! Failure injection around any provider: the next call of a chosen operation fails once, or a
//! computer's provisioning waits until the test releases it. Every call is noted, for tests that
//! count what an operation of the engine costs.

use async_trait::async_trait;
use botdesk_core::*;
use bytes::Bytes;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next `provision` fails before reaching the provider.
    Provision,
    /// The next `act` is done, but its answer comes without the look asked for (as when the
    /// screen could not be read just after).
    ActWithoutLook,
}

pub struct Faulty {
    pub inner: Arc<dyn ComputerProvider>,
    armed: Mutex<Vec<Fault>>,
    holds: Mutex<HashMap<ComputerId, Arc<Hold>>>,
    /// Every call, by operation, in order (what a test counts).
    calls: Mutex<Vec<&'static str>>,
}

/// A computer's provisioning held at the door: [`Hold::entered`] returns once one has arrived,
/// and each waits until [`Hold::release`].
pub struct Hold {
    entered: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
}

impl Default for Hold {
    fn default() -> Self {
        Self { entered: tokio::sync::Notify::new(), gate: tokio::sync::Semaphore::new(0) }
    }
}

impl Hold {
    /// Waits until a provisioning of the computer has arrived (and is held).
    pub async fn entered(&self) {
        self.entered.notified().await
    }
    /// Lets every held and later provisioning of the computer go on.
    pub fn release(&self) {
        self.gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

impl Faulty {
    pub fn new(inner: Arc<dyn ComputerProvider>) -> Self {
        Self { inner, armed: Mutex::new(vec![]), holds: Mutex::default(), calls: Mutex::default() }
    }
    /// The operations called so far, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }
    fn note(&self, op: &'static str) {
        self.calls.lock().unwrap().push(op);
    }
    /// Holds the computer's provisionings until the returned hold is released.
    pub fn hold(&self, computer: ComputerId) -> Arc<Hold> {
        self.holds.lock().unwrap().entry(computer).or_default().clone()
    }
    pub fn arm(&self, fault: Fault) {
        self.armed.lock().unwrap().push(fault);
    }
    fn take(&self, pred: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let mut armed = self.armed.lock().unwrap();
        let i = armed.iter().position(pred)?;
        Some(armed.remove(i))
    }
}

#[async_trait]
impl ComputerProvider for Faulty {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn requests(&self) -> Requests {
        self.inner.requests()
    }
    async fn provision(&self, spec: &ComputerSpec, ctx: &CallCtx) -> Result<Provisioned> {
        self.note("provision");
        if self.take(|f| *f == Fault::Provision).is_some() {
            return Err(ComputerError::Injected("provision"));
        }
        let hold = self.holds.lock().unwrap().get(&spec.id).cloned();
        if let Some(hold) = hold {
            hold.entered.notify_one();
            let _ = hold.gate.acquire().await.map_err(|_| ComputerError::Injected("provision hold"))?;
        }
        self.inner.provision(spec, ctx).await
    }
    async fn prepare(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        self.note("prepare");
        self.inner.prepare(c, ctx).await
    }
    async fn status(&self, c: &ComputerRef) -> Result<MachineStatus> {
        self.note("status");
        self.inner.status(c).await
    }
    async fn stop(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        self.note("stop");
        self.inner.stop(c, ctx).await
    }
    async fn destroy(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        self.note("destroy");
        self.inner.destroy(c, ctx).await
    }
    async fn exec(&self, c: &ComputerRef, req: ExecRequest, out: OutputSink, ctx: &CallCtx) -> Result<ExecExit> {
        self.note("exec");
        self.inner.exec(c, req, out, ctx).await
    }
    async fn list(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<Vec<FileEntry>> {
        self.note("list");
        self.inner.list(c, dir, ctx).await
    }
    async fn create_dir(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<()> {
        self.note("create_dir");
        self.inner.create_dir(c, dir, ctx).await
    }
    async fn read(&self, c: &ComputerRef, p: &WorkspacePath, max: u64, ctx: &CallCtx) -> Result<Bytes> {
        self.note("read");
        self.inner.read(c, p, max, ctx).await
    }
    async fn write(&self, c: &ComputerRef, p: &WorkspacePath, data: Bytes, x: bool, ctx: &CallCtx) -> Result<()> {
        self.note("write");
        self.inner.write(c, p, data, x, ctx).await
    }
    async fn open_desktop(&self, c: &ComputerRef, bot: &BotId, slot: u32, view_token: &str, ctx: &CallCtx) -> Result<DesktopInfo> {
        self.note("open_desktop");
        self.inner.open_desktop(c, bot, slot, view_token, ctx).await
    }
    async fn release_desktop(&self, c: &ComputerRef, slot: u32, ctx: &CallCtx) -> Result<()> {
        self.note("release_desktop");
        self.inner.release_desktop(c, slot, ctx).await
    }
    async fn control_transport(&self, c: &ComputerRef, slot: u32, token: &str, ctx: &CallCtx) -> Result<()> {
        self.note("control_transport");
        self.inner.control_transport(c, slot, token, ctx).await
    }
    async fn expire_token_at(&self, c: &ComputerRef, token: &str, expires_ms: i64) -> Result<()> {
        self.note("expire_token_at");
        self.inner.expire_token_at(c, token, expires_ms).await
    }
    async fn revoke_token(&self, c: &ComputerRef, token: &str, ctx: &CallCtx) -> Result<()> {
        self.note("revoke_token");
        self.inner.revoke_token(c, token, ctx).await
    }
    async fn screen(&self, c: &ComputerRef, token: &str, control: bool) -> Result<ScreenAccess> {
        self.note("screen");
        self.inner.screen(c, token, control).await
    }
    async fn observe(&self, c: &ComputerRef, slot: u32, format: ImageFormat, ctx: &CallCtx) -> Result<Observation> {
        self.note("observe");
        self.inner.observe(c, slot, format, ctx).await
    }
    async fn page_browser(&self, c: &ComputerRef, slot: u32, profile: &str, command: &BrowserCommand, ctx: &CallCtx) -> Result<serde_json::Value> {
        self.note("page_browser");
        self.inner.page_browser(c, slot, profile, command, ctx).await
    }
    async fn act(&self, c: &ComputerRef, slot: u32, actions: &[action::Action], settle_ms: u64, then: &ActThen, ctx: &CallCtx) -> Result<ActAnswer> {
        self.note("act");
        let mut answer = self.inner.act(c, slot, actions, settle_ms, then, ctx).await?;
        if self.take(|f| *f == Fault::ActWithoutLook).is_some() {
            answer.look = None;
        }
        Ok(answer)
    }
    async fn open_shell(&self, c: &ComputerRef, cwd: &WorkspacePath, cols: u16, rows: u16, ctx: &CallCtx) -> Result<ShellSession> {
        self.note("open_shell");
        self.inner.open_shell(c, cwd, cols, rows, ctx).await
    }
    async fn resize_shell(&self, c: &ComputerRef, id: &str, cols: u16, rows: u16) -> Result<()> {
        self.note("resize_shell");
        self.inner.resize_shell(c, id, cols, rows).await
    }
    async fn open_pipe(&self, c: &ComputerRef, req: ExecRequest, ctx: &CallCtx) -> Result<PipeSession> {
        self.note("open_pipe");
        self.inner.open_pipe(c, req, ctx).await
    }
    async fn kill_tagged(&self, c: &ComputerRef, user: BotUser, key: &str, value: &str) -> Result<()> {
        self.note("kill_tagged");
        self.inner.kill_tagged(c, user, key, value).await
    }
    async fn set_owners(&self, c: &ComputerRef, owners: &HomeOwners, ctx: &CallCtx) -> Result<()> {
        self.note("set_owners");
        self.inner.set_owners(c, owners, ctx).await
    }
    async fn set_network(&self, c: &ComputerRef, bots: &[BotNetwork], ctx: &CallCtx) -> Result<()> {
        self.note("set_network");
        self.inner.set_network(c, bots, ctx).await
    }
    async fn network_refusals(&self, c: &ComputerRef, user: BotUser, after: u64) -> Result<NetRefusals> {
        self.note("network_refusals");
        self.inner.network_refusals(c, user, after).await
    }
    async fn watch_browser(&self, c: &ComputerRef, slot: u32, policy: Option<&botdesk_core::Approvals>) -> Result<Vec<botdesk_core::PendingApproval>> {
        self.note("watch_browser");
        self.inner.watch_browser(c, slot, policy).await
    }
    async fn answer_browser(&self, c: &ComputerRef, slot: u32, id: u64, allow: bool) -> Result<bool> {
        self.note("answer_browser");
        self.inner.answer_browser(c, slot, id, allow).await
    }
    async fn save_home(&self, c: &ComputerRef, manifest: HomeIn, ctx: &CallCtx) -> Result<HomeOut> {
        self.note("save_home");
        self.inner.save_home(c, manifest, ctx).await
    }
    async fn load_home(&self, c: &ComputerRef, mode: &home_stream::LoadMode, records: HomeIn, ctx: &CallCtx) -> Result<home_stream::LoadSummary> {
        self.note("load_home");
        self.inner.load_home(c, mode, records, ctx).await
    }
}

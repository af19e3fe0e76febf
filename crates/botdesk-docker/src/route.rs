//! Computers on several Docker hosts: one Docker provider per host, each call sent to the one
//! its computer's host names ([`ComputerRef::host`]). `local` is the engine on this machine; the
//! others come from `botdesk host add` (the engine keeps them: the router looks each up in its
//! [`HostBook`]) and are connected on first use, so a host that is down fails only the calls for
//! its own computers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use botdesk_core::action::Action;
use botdesk_core::home_stream::{LoadMode, LoadSummary};
use botdesk_core::machine::HostBook;
use botdesk_core::*;

use crate::remote::{RemoteEngine, RemoteHost};
use crate::{DockerConfig, DockerProvider};
use bytes::Bytes;

pub(crate) struct HostRouter {
    local: Arc<DockerProvider>,
    hosts: Arc<dyn HostBook>,
    /// Providers of hosts on other machines, made on first use.
    remotes: Mutex<HashMap<HostName, (RemoteHost, Arc<DockerProvider>)>>,
}

impl HostRouter {
    pub fn new(local: Arc<DockerProvider>, hosts: Arc<dyn HostBook>) -> Self {
        Self { local, hosts, remotes: Default::default() }
    }

    /// The provider of a host; a host that is not (or no longer) known is one clear line.
    async fn on(&self, host: &HostName) -> Result<Arc<DockerProvider>> {
        if host.is_local() {
            return Ok(self.local.clone());
        }
        if let Some((_, p)) = self.remotes.lock().unwrap().get(host) {
            return Ok(p.clone());
        }
        let addr = self.hosts.host(host).await.ok_or_else(|| {
            ComputerError::Unavailable(format!(
                "host {host}: not known here (was it removed?); add it again with `botdesk host add {host} tcp://HOST:2376 --tls-dir DIR`"
            ))
        })?;
        let remote = RemoteHost { name: host.clone(), engine: RemoteEngine { url: addr.url, tls_dir: addr.tls_dir } };
        let cfg = DockerConfig { remote: Some(remote.clone()), ..self.local.config().clone() };
        let p = Arc::new(DockerProvider::new(cfg));
        Ok(self.remotes.lock().unwrap().entry(host.clone()).or_insert((remote, p)).1.clone())
    }

    /// Forgets a host's connection (it was removed, or its address changed).
    pub fn forget(&self, host: &HostName) {
        self.remotes.lock().unwrap().remove(host);
    }

    /// An engine that cannot be reached is said as one line naming the host and why: the host is
    /// checked again (within its time bound) to tell a refused connection, a certificate, an
    /// unknown name and silence apart.
    async fn said(&self, host: &HostName, e: ComputerError) -> ComputerError {
        let ComputerError::Unavailable(detail) = &e else { return e };
        let Some((remote, _)) = self.remotes.lock().unwrap().get(host).cloned() else { return e };
        match remote.engine.check().await {
            Err(p) => ComputerError::Unavailable(p.line(host.as_str(), &remote.engine.url)),
            Ok(_) => ComputerError::Unavailable(format!(
                "host {host}: the connection to {} broke ({}); it answers again now, so try again",
                remote.engine.url,
                detail.chars().take(300).collect::<String>()
            )),
        }
    }
}

/// Calls `$method` on the provider of `$c`'s host, naming the host when it cannot be reached.
macro_rules! routed {
    ($self:ident, $host:expr, $method:ident($($arg:expr),*)) => {{
        let host = $host;
        let p = $self.on(host).await?;
        match p.$method($($arg),*).await {
            Ok(v) => Ok(v),
            Err(e) if host.is_local() => Err(e),
            Err(e) => Err($self.said(host, e).await),
        }
    }};
}

#[async_trait]
impl ComputerProvider for HostRouter {
    fn kind(&self) -> &'static str {
        self.local.kind()
    }
    fn requests(&self) -> Requests {
        let remotes: Vec<Requests> = self.remotes.lock().unwrap().values().map(|(_, p)| p.requests()).collect();
        remotes.into_iter().fold(self.local.requests(), |a, b| Requests { machine: a.machine + b.machine, computers: a.computers + b.computers })
    }
    async fn provision(&self, spec: &ComputerSpec, ctx: &CallCtx) -> Result<Provisioned> {
        routed!(self, &spec.host, provision(spec, ctx))
    }
    async fn prepare(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, prepare(c, ctx))
    }
    async fn status(&self, c: &ComputerRef) -> Result<MachineStatus> {
        routed!(self, &c.host, status(c))
    }
    async fn stop(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, stop(c, ctx))
    }
    async fn destroy(&self, c: &ComputerRef, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, destroy(c, ctx))
    }
    async fn open_desktop(&self, c: &ComputerRef, bot: &BotId, slot: u32, view_token: &str, ctx: &CallCtx) -> Result<DesktopInfo> {
        routed!(self, &c.host, open_desktop(c, bot, slot, view_token, ctx))
    }
    async fn release_desktop(&self, c: &ComputerRef, slot: u32, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, release_desktop(c, slot, ctx))
    }
    async fn control_transport(&self, c: &ComputerRef, slot: u32, token: &str, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, control_transport(c, slot, token, ctx))
    }
    async fn expire_token_at(&self, c: &ComputerRef, token: &str, expires_ms: i64) -> Result<()> {
        routed!(self, &c.host, expire_token_at(c, token, expires_ms))
    }
    async fn revoke_token(&self, c: &ComputerRef, token: &str, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, revoke_token(c, token, ctx))
    }
    async fn screen(&self, c: &ComputerRef, token: &str, control: bool) -> Result<ScreenAccess> {
        routed!(self, &c.host, screen(c, token, control))
    }
    async fn observe(&self, c: &ComputerRef, slot: u32, format: ImageFormat, ctx: &CallCtx) -> Result<Observation> {
        routed!(self, &c.host, observe(c, slot, format, ctx))
    }
    async fn page_browser(&self, c: &ComputerRef, slot: u32, profile: &str, command: &BrowserCommand, ctx: &CallCtx) -> Result<serde_json::Value> {
        routed!(self, &c.host, page_browser(c, slot, profile, command, ctx))
    }
    async fn act(&self, c: &ComputerRef, slot: u32, actions: &[Action], settle_ms: u64, then: &ActThen, ctx: &CallCtx) -> Result<ActAnswer> {
        routed!(self, &c.host, act(c, slot, actions, settle_ms, then, ctx))
    }
    async fn start_recording(&self, c: &ComputerRef, slot: u32, rec: &RecordingSpec) -> Result<()> {
        routed!(self, &c.host, start_recording(c, slot, rec))
    }
    async fn take_recording(&self, c: &ComputerRef, slot: u32, key: &str) -> Result<TakenRecording> {
        routed!(self, &c.host, take_recording(c, slot, key))
    }
    async fn set_network(&self, c: &ComputerRef, bots: &[BotNetwork], ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, set_network(c, bots, ctx))
    }
    async fn network_refusals(&self, c: &ComputerRef, user: BotUser, after: u64) -> Result<NetRefusals> {
        routed!(self, &c.host, network_refusals(c, user, after))
    }
    async fn watch_browser(&self, c: &ComputerRef, slot: u32, policy: Option<&botdesk_core::Approvals>) -> Result<Vec<botdesk_core::PendingApproval>> {
        routed!(self, &c.host, watch_browser(c, slot, policy))
    }
    async fn answer_browser(&self, c: &ComputerRef, slot: u32, id: u64, allow: bool) -> Result<bool> {
        routed!(self, &c.host, answer_browser(c, slot, id, allow))
    }
    async fn open_shell(&self, c: &ComputerRef, cwd: &WorkspacePath, cols: u16, rows: u16, ctx: &CallCtx) -> Result<ShellSession> {
        routed!(self, &c.host, open_shell(c, cwd, cols, rows, ctx))
    }
    async fn resize_shell(&self, c: &ComputerRef, id: &str, cols: u16, rows: u16) -> Result<()> {
        routed!(self, &c.host, resize_shell(c, id, cols, rows))
    }
    async fn open_pipe(&self, c: &ComputerRef, req: ExecRequest, ctx: &CallCtx) -> Result<PipeSession> {
        routed!(self, &c.host, open_pipe(c, req, ctx))
    }
    async fn exec(&self, c: &ComputerRef, req: ExecRequest, out: OutputSink, ctx: &CallCtx) -> Result<ExecExit> {
        routed!(self, &c.host, exec(c, req, out, ctx))
    }
    async fn kill_tagged(&self, c: &ComputerRef, user: BotUser, key: &str, value: &str) -> Result<()> {
        routed!(self, &c.host, kill_tagged(c, user, key, value))
    }
    async fn list(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<Vec<FileEntry>> {
        routed!(self, &c.host, list(c, dir, ctx))
    }
    async fn create_dir(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, create_dir(c, dir, ctx))
    }
    async fn read(&self, c: &ComputerRef, path: &WorkspacePath, max_bytes: u64, ctx: &CallCtx) -> Result<Bytes> {
        routed!(self, &c.host, read(c, path, max_bytes, ctx))
    }
    async fn write(&self, c: &ComputerRef, path: &WorkspacePath, data: Bytes, executable: bool, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, write(c, path, data, executable, ctx))
    }
    async fn save_home(&self, c: &ComputerRef, manifest: HomeIn, ctx: &CallCtx) -> Result<HomeOut> {
        routed!(self, &c.host, save_home(c, manifest, ctx))
    }
    async fn load_home(&self, c: &ComputerRef, mode: &LoadMode, records: HomeIn, ctx: &CallCtx) -> Result<LoadSummary> {
        routed!(self, &c.host, load_home(c, mode, records, ctx))
    }
    async fn set_owners(&self, c: &ComputerRef, owners: &HomeOwners, ctx: &CallCtx) -> Result<()> {
        routed!(self, &c.host, set_owners(c, owners, ctx))
    }
}

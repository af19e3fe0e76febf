//! The Docker [`ComputerProvider`]: the contract's calls, carried out by the parts of this crate
//! (the container and exec primitives of [`crate::provider`], [`crate::files`], [`crate::home`],
//! [`crate::desktop`], [`crate::network`]). This is the one module that knows them all.

use async_trait::async_trait;
use bollard::container::{CreateContainerOptions, LogOutput, StartContainerOptions, StopContainerOptions};
use botdesk_core::*;
use bytes::Bytes;
use futures::StreamExt;
use std::{collections::HashSet, time::Duration};

use crate::provider::{kill_tagged, Found};
use crate::{docker_err, spec, spec::InComputer, DockerProvider};

#[async_trait]
impl ComputerProvider for DockerProvider {
    fn kind(&self) -> &'static str {
        "docker"
    }
    fn requests(&self) -> Requests {
        use std::sync::atomic::Ordering::Relaxed;
        Requests { machine: self.sent_machine.load(Relaxed), computers: self.sent_computers.load(Relaxed) }
    }

    async fn provision(&self, spec: &ComputerSpec, ctx: &CallCtx) -> Result<Provisioned> {
        self.forget_gateway(&spec.id);
        let docker = self.client().await?;
        // Independent of each other: asked at once (a network alone takes Docker about 70 ms).
        let ((), network, mut existing) = tokio::try_join!(self.ensure_volume(spec), self.ensure_network(spec), self.find(Some(&spec.id)))?;
        let mut fresh = false;
        // A container Docker is still removing (its destroy's caller was killed) holds its name:
        // wait until it is gone, then make the computer anew.
        if existing.iter().any(|f| f.removing) {
            existing = self.wait_removed(&spec.id).await?;
        }
        let mut existing = existing.into_iter().next();
        // A container on another home volume (one whose deletion started, or from before homes were
        // volumes) or not on its own network (from before computers had one) is made anew: its
        // home is on the volume, and nothing else a bot can write outlives a restart.
        if let Some(f) = existing.take_if(|f| f.home_volume.as_deref() != Some(spec.home_volume.as_str()) || f.network.as_deref() != Some(network.as_str())) {
            self.remove_container(&f.id).await?;
        }
        let found = match existing {
            Some(f) => f,
            None => {
                let name = spec::container_name(&self.cfg.data_dir_label, spec);
                let labels = spec::labels(&self.cfg.data_dir_label, spec.id.as_str(), self.cfg.test_run.as_deref());
                // This machine's own addresses, when the computer runs here (another host's are
                // its own business: its gateway and private ranges are fenced all the same).
                let fence = if self.cfg.remote.is_none() { spec::host_addresses() } else { vec![] };
                let config = spec::container_config(&self.cfg.image, labels, spec, &botdesk_core::gateway::new_token(), &network, &fence);
                match docker.create_container(Some(CreateContainerOptions { name: name.clone(), platform: None }), config).await {
                    Ok(r) => {
                        fresh = true;
                        Found {
                            id: r.id,
                            computer: spec.id.to_string(),
                            running: false,
                            home_volume: Some(spec.home_volume.clone()),
                            network: Some(network.clone()),
                            removing: false,
                        }
                    }
                    // Someone (the CLI beside the app) created it a moment ago: reconnect.
                    Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => self
                        .find(Some(&spec.id))
                        .await?
                        .into_iter()
                        .next()
                        .ok_or_else(|| ComputerError::Provider(format!("container {name} exists but carries other labels; remove it")))?,
                    Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, message }) => {
                        return Err(ComputerError::Provider(match &self.cfg.remote {
                            Some(r) => format!(
                                "host {}: it does not have the computer image {} ({message}); send it there with `botdesk image send {}`",
                                r.name, self.cfg.image, r.name
                            ),
                            None => format!("the computer image {} is missing ({message}); build it with `botdesk image build`", self.cfg.image),
                        }))
                    }
                    Err(e) => return Err(docker_err(e)),
                }
            }
        };
        // Its output, followed from before its start: ready is the moment start.sh says so.
        let mut output = None;
        if !found.running {
            output = self.attach_output(&found.id).await;
            match docker.start_container(&found.id, None::<StartContainerOptions<String>>).await {
                Ok(()) => {}
                // Started by someone else a moment ago: its ready line may have passed already.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 304, .. }) => output = None,
                // Its removal began since we looked: once it is gone, make the computer anew.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, message }) if message.contains("removal") => {
                    self.wait_removed(&spec.id).await?;
                    return self.provision(spec, ctx).await;
                }
                Err(e) => return Err(docker_err(e)),
            }
        }
        match output {
            Some(output) => self.wait_ready_line(&found.id, output).await?,
            None => self.wait_ready(&found.id).await?,
        }
        Ok(Provisioned { fresh, provider_ref: found.id })
    }

    async fn prepare(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        let id = self.running_container(c).await?;
        self.wait_ready(&id).await
    }

    async fn status(&self, c: &ComputerRef) -> Result<MachineStatus> {
        Ok(match self.find(Some(&c.id)).await?.into_iter().next() {
            None => MachineStatus::Missing,
            Some(f) if f.running => MachineStatus::Running,
            Some(_) => MachineStatus::Stopped,
        })
    }

    async fn stop(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        self.forget_gateway(&c.id);
        let docker = self.client().await?;
        for f in self.find(Some(&c.id)).await? {
            if f.running {
                match docker.stop_container(&f.id, Some(StopContainerOptions { t: 10 })).await {
                    Ok(()) => {}
                    Err(bollard::errors::Error::DockerResponseServerError { status_code: 304 | 404, .. }) => {}
                    Err(e) => return Err(docker_err(e)),
                }
            }
        }
        Ok(())
    }

    async fn destroy(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        self.forget_gateway(&c.id);
        for f in self.find(Some(&c.id)).await? {
            self.remove_container(&f.id).await?;
        }
        for v in self.list_volumes(Some(&c.id)).await? {
            self.remove_volume(&v).await?;
        }
        self.remove_networks(Some(&c.id), &HashSet::new()).await?;
        Ok(())
    }

    async fn open_shell(&self, c: &ComputerRef, cwd: &WorkspacePath, cols: u16, rows: u16, ctx: &CallCtx) -> Result<ShellSession> {
        let container = self.running_container(c).await?;
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let tags = tags_of(&tag, ctx);
        let mut env = tags.clone();
        env.extend(["TERM=xterm-256color".into(), format!("HOME={}", spec::home_of(ctx)), r"PS1=\u@\h:\w\$ ".into()]);
        if let Some(n) = ctx.display {
            env.push(format!("DISPLAY=:{n}"));
        }
        // The person types here: no startup file runs, since a bot can write every one of the
        // home's (a `.bashrc` that logs keystrokes, say).
        let shell = ["bash", "--noprofile", "--norc", "-i"].map(String::from).to_vec();
        let argv = spec::kept(&cwd.in_computer(), ctx.user, &tags, shell);
        let (exec_id, output, input) = self.start_exec(InComputer::Root, &container, argv, env, "/", true, true).await?;
        let _ = self.resize_shell(c, &exec_id, cols, rows).await;
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Bytes>(256);
        let (in_tx, in_rx) = tokio::sync::mpsc::channel::<Bytes>(256);
        let running = Running { docker: self.client().await?.clone(), container, exec_id: exec_id.clone(), tag, user: ctx.user };
        // A terminal's output is one stream.
        running.pump(output, input, out_tx, in_rx, |o| match o {
            LogOutput::Console { message } | LogOutput::StdOut { message } | LogOutput::StdErr { message } => Some(message),
            _ => None,
        });
        Ok(ShellSession { id: exec_id, output: out_rx, input: in_tx })
    }

    async fn open_pipe(&self, c: &ComputerRef, req: ExecRequest, ctx: &CallCtx) -> Result<PipeSession> {
        req.validate()?;
        let container = self.running_container(c).await?;
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let tags = tags_of(&tag, ctx);
        let mut env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.extend(tags.iter().cloned());
        env.push(format!("HOME={}", spec::home_of(ctx)));
        if let (Some(n), false) = (ctx.display, req.env.iter().any(|(k, _)| k == "DISPLAY")) {
            env.push(format!("DISPLAY=:{n}"));
        }
        let argv = spec::kept(&req.cwd.in_computer(), ctx.user, &tags, req.argv);
        let (exec_id, output, input) = self.start_exec(InComputer::Root, &container, argv, env, "/", true, false).await?;
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<ExecOutput>(64);
        let (in_tx, in_rx) = tokio::sync::mpsc::channel::<Bytes>(64);
        let running = Running { docker: self.client().await?.clone(), container, exec_id, tag, user: ctx.user };
        running.pump(output, input, out_tx, in_rx, |o| match o {
            LogOutput::StdOut { message } => Some(ExecOutput { stream: StreamKind::Stdout, data: message }),
            LogOutput::StdErr { message } => Some(ExecOutput { stream: StreamKind::Stderr, data: message }),
            _ => None,
        });
        Ok(PipeSession { output: out_rx, input: in_tx })
    }

    async fn resize_shell(&self, _c: &ComputerRef, id: &str, cols: u16, rows: u16) -> Result<()> {
        let docker = self.client().await?;
        docker.resize_exec(id, bollard::exec::ResizeExecOptions { height: rows.max(1), width: cols.max(1) }).await.map_err(docker_err)
    }

    async fn exec(&self, c: &ComputerRef, req: ExecRequest, out: OutputSink, ctx: &CallCtx) -> Result<ExecExit> {
        req.validate()?;
        let started = tokio::time::Instant::now();
        // By name, not looked up first: the engine found it running just before, and a container
        // that stopped since refuses the exec (NotRunning).
        let container = spec::container_name_of(&self.cfg.data_dir_label, &c.id);
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let tags = tags_of(&tag, ctx);
        let mut env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.extend(tags.iter().cloned());
        if !req.env.iter().any(|(k, _)| k == "HOME") {
            env.push(format!("HOME={}", spec::home_of(ctx)));
        }
        if let (Some(n), false) = (ctx.display, req.env.iter().any(|(k, _)| k == "DISPLAY")) {
            env.push(format!("DISPLAY=:{n}"));
        }
        let deadline = tokio::time::sleep_until(started + req.timeout);
        tokio::pin!(deadline);
        // Starting is not raced against the deadline: once Docker may have started the process we
        // must know its exec id to kill its tree. An elapsed deadline fires right after.
        let argv = spec::kept(&req.cwd.in_computer(), ctx.user, &tags, req.argv.clone());
        let (exec_id, mut output, mut stdin) = self.start_exec(InComputer::Root, &container, argv, env, "/", req.stdin.is_some(), false).await?;
        // The input goes in while the output comes out (bounded by `validate`).
        let input = req.stdin.clone();
        let writing = async move {
            if let Some(data) = input {
                use tokio::io::AsyncWriteExt;
                // A command that exits without reading it is not an error.
                let _ = stdin.write_all(&data).await;
                let _ = stdin.shutdown().await;
            }
            std::future::pending::<()>().await
        };
        tokio::pin!(writing);
        let stopped = loop {
            tokio::select! {
                _ = &mut writing => unreachable!("it never ends"),
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message })) => send(&out, StreamKind::Stdout, message),
                    Some(Ok(LogOutput::StdErr { message })) => send(&out, StreamKind::Stderr, message),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(docker_err(e)),
                    None => break None,
                },
                _ = &mut deadline => break Some(ExecExit::timed_out(req.timeout)),
                _ = ctx.cancel.cancelled() => break Some(ExecExit::cancelled()),
            }
        };
        match stopped {
            None => Ok(ExecExit::exited(self.exec_exit_code(&exec_id).await?)),
            Some(exit) => {
                drop(output);
                self.kill_exec_tree(ctx.user, &container, &exec_id, &tag).await;
                Ok(exit)
            }
        }
    }

    async fn kill_tagged(&self, c: &ComputerRef, user: BotUser, key: &str, value: &str) -> Result<()> {
        let container = match self.running_container(c).await {
            Ok(id) => id,
            Err(ComputerError::NotRunning(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let entry = format!("{key}={value}");
        // As the bot: its own processes are the ones it may signal and whose tags it may read.
        self.run_checked(
            InComputer::Bot(user),
            &container,
            &["botdesk-helper", "kill-env", &entry],
            Duration::from_secs(30),
            &format!("stopping the processes tagged {entry}"),
        )
        .await
    }

    async fn open_desktop(&self, c: &ComputerRef, _bot: &BotId, slot: u32, view_token: &str, ctx: &CallCtx) -> Result<DesktopInfo> {
        self.open_desktop_impl(c, slot, view_token, ctx.user).await
    }
    async fn release_desktop(&self, c: &ComputerRef, slot: u32, ctx: &CallCtx) -> Result<()> {
        self.release_desktop_impl(c, slot, ctx.user).await
    }
    async fn control_transport(&self, c: &ComputerRef, slot: u32, token: &str, _ctx: &CallCtx) -> Result<()> {
        self.display_script(c, &["control", &slot.to_string()], Some(token)).await
    }
    async fn expire_token_at(&self, c: &ComputerRef, token: &str, expires_ms: i64) -> Result<()> {
        self.expire_token_impl(c, token, expires_ms).await
    }
    async fn revoke_token(&self, c: &ComputerRef, token: &str, _ctx: &CallCtx) -> Result<()> {
        self.revoke_token_impl(c, token).await
    }
    async fn screen(&self, c: &ComputerRef, token: &str, control: bool) -> Result<ScreenAccess> {
        self.screen_impl(c, token, control).await
    }
    async fn observe(&self, c: &ComputerRef, slot: u32, format: ImageFormat, _ctx: &CallCtx) -> Result<Observation> {
        self.observe_impl(c, slot, format).await
    }
    async fn page_browser(&self, c: &ComputerRef, slot: u32, profile: &str, command: &BrowserCommand, ctx: &CallCtx) -> Result<serde_json::Value> {
        self.browser_impl(c, slot, profile, command, ctx).await
    }
    async fn act(
        &self,
        c: &ComputerRef,
        slot: u32,
        actions: &[botdesk_core::action::Action],
        settle_ms: u64,
        then: &ActThen,
        _ctx: &CallCtx,
    ) -> Result<ActAnswer> {
        self.act_impl(c, slot, actions, settle_ms, then).await
    }
    async fn start_recording(&self, c: &ComputerRef, slot: u32, rec: &RecordingSpec) -> Result<()> {
        self.start_recording_impl(c, slot, rec).await
    }
    async fn take_recording(&self, c: &ComputerRef, slot: u32, key: &str) -> Result<TakenRecording> {
        self.take_recording_impl(c, slot, key).await
    }
    async fn set_network(&self, c: &ComputerRef, bots: &[BotNetwork], _ctx: &CallCtx) -> Result<()> {
        self.set_network_impl(c, bots).await
    }
    async fn network_refusals(&self, c: &ComputerRef, user: BotUser, after: u64) -> Result<NetRefusals> {
        self.network_refusals_impl(c, user, after).await
    }
    async fn watch_browser(&self, c: &ComputerRef, slot: u32, policy: Option<&botdesk_core::Approvals>) -> Result<Vec<botdesk_core::PendingApproval>> {
        self.watch_browser_impl(c, slot, policy).await
    }
    async fn answer_browser(&self, c: &ComputerRef, slot: u32, id: u64, allow: bool) -> Result<bool> {
        self.answer_browser_impl(c, slot, id, allow).await
    }

    async fn list(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<Vec<FileEntry>> {
        crate::files::list(self, c, ctx.user, dir).await
    }
    async fn create_dir(&self, c: &ComputerRef, dir: &WorkspacePath, ctx: &CallCtx) -> Result<()> {
        crate::files::create_dir(self, c, ctx.user, dir).await
    }
    async fn read(&self, c: &ComputerRef, path: &WorkspacePath, max_bytes: u64, ctx: &CallCtx) -> Result<Bytes> {
        crate::files::read(self, c, ctx.user, path, max_bytes).await
    }
    async fn write(&self, c: &ComputerRef, path: &WorkspacePath, data: Bytes, executable: bool, ctx: &CallCtx) -> Result<()> {
        crate::files::write(self, c, ctx.user, path, data, executable).await
    }
    async fn save_home(&self, c: &ComputerRef, manifest: HomeIn, _ctx: &CallCtx) -> Result<HomeOut> {
        crate::home::save_home(self, c, manifest).await
    }
    async fn load_home(&self, c: &ComputerRef, mode: &home_stream::LoadMode, records: HomeIn, ctx: &CallCtx) -> Result<home_stream::LoadSummary> {
        crate::home::load_home(self, c, mode, records, ctx).await
    }
    async fn set_owners(&self, c: &ComputerRef, owners: &HomeOwners, _ctx: &CallCtx) -> Result<()> {
        crate::home::set_owners(self, c, owners).await
    }
}

fn send(out: &OutputSink, stream: StreamKind, data: Bytes) {
    if let Some(tx) = out {
        let _ = tx.send(ExecOutput { stream, data });
    }
}

/// The tags of a bot's command or shell (`KEY=VALUE`): its own exec's, and those of the bot, run
/// and control it is for. Its keeper shows them and its processes carry them (see [`spec::kept`]).
fn tags_of(exec_tag: &str, ctx: &CallCtx) -> Vec<String> {
    let mut tags = vec![format!("BOTDESK_EXEC_ID={exec_tag}")];
    if let Some(bot) = &ctx.bot {
        tags.push(format!("{BOT_TAG}={bot}"));
    }
    if let Some(run) = &ctx.run {
        tags.push(format!("{RUN_TAG}={run}"));
    }
    if let Some(lease) = &ctx.control {
        tags.push(format!("{CONTROL_TAG}={lease}"));
    }
    tags
}

/// A long-lived exec (a terminal's shell, a command on pipes) and the tag of what it started.
struct Running {
    docker: bollard::Docker,
    container: String,
    exec_id: String,
    tag: String,
    user: BotUser,
}

impl Running {
    /// Carries the exec's output to `out` (each piece as `map` makes it, or left out) and `input`
    /// to its stdin, until it ends or its owner drops either end; then ends everything it started.
    fn pump<T: Send + 'static>(
        self,
        mut output: crate::provider::ExecOutputStream,
        mut stdin: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
        out: tokio::sync::mpsc::Sender<T>,
        mut input: tokio::sync::mpsc::Receiver<Bytes>,
        map: fn(LogOutput) -> Option<T>,
    ) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            loop {
                tokio::select! {
                    item = output.next() => match item {
                        Some(Ok(o)) => {
                            if let Some(piece) = map(o) {
                                if out.send(piece).await.is_err() {
                                    break;
                                }
                            }
                        }
                        Some(Err(_)) | None => break,
                    },
                    data = input.recv() => match data {
                        Some(d) => {
                            if stdin.write_all(&d).await.is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                }
            }
            // The owner let go, or the exec ended: nothing it started lives on.
            kill_tagged(&self.docker, self.user, &self.container, &self.exec_id, &self.tag).await;
        });
    }
}

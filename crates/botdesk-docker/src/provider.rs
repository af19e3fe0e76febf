use bollard::{
    container::{AttachContainerOptions, ListContainersOptions, LogOutput, LogsOptions, RemoveContainerOptions},
    exec::{CreateExecOptions, StartExecResults},
    Docker,
};
use botdesk_core::*;
use bytes::Bytes;
use futures::{stream::BoxStream, StreamExt};
use std::{collections::HashMap, time::Duration};
use tokio::{io::AsyncWrite, sync::OnceCell};

use crate::{docker_err, spec, spec::InComputer};

#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// `botdesk/computer:<recipe hash>`.
    pub image: String,
    /// Hash of the data directory: containers of other data directories are never touched.
    pub data_dir_label: String,
    /// Extra label for test runs (`botdesk.test-run`).
    pub test_run: Option<String>,
    /// How long to wait for a started computer to report ready.
    pub ready_timeout: Duration,
    /// The engine on another machine these computers run on; None: the engine on this one.
    pub remote: Option<crate::remote::RemoteHost>,
}

impl DockerConfig {
    pub fn new(image: impl Into<String>, data_dir_label: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            data_dir_label: data_dir_label.into(),
            test_run: std::env::var("BOTDESK_TEST_RUN").ok().filter(|s| !s.is_empty()),
            ready_timeout: Duration::from_secs(30),
            remote: None,
        }
    }
}

pub struct DockerProvider {
    pub(crate) cfg: DockerConfig,
    docker: OnceCell<Docker>,
    /// Gateway port, agent token and idle agent connections per computer id.
    pub(crate) gateways: std::sync::Mutex<HashMap<String, crate::gateway::Gateway>>,
    /// Requests sent: to the Docker engine (each call takes the client first) and to gateways.
    pub(crate) sent_machine: std::sync::atomic::AtomicU64,
    pub(crate) sent_computers: std::sync::atomic::AtomicU64,
}

/// A container found by its labels.
#[derive(Debug, Clone)]
pub struct Found {
    pub id: String,
    pub computer: String,
    pub running: bool,
    /// The volume mounted as its home.
    pub home_volume: Option<String>,
    /// The network it is on.
    pub network: Option<String>,
    /// Docker is removing it (a destroy whose caller was killed may leave this going on).
    pub removing: bool,
}

pub(crate) type ExecOutputStream = BoxStream<'static, Result<LogOutput, bollard::errors::Error>>;

impl DockerProvider {
    /// Never fails: the engine is contacted on first use, so a stopped Docker gives a clear error
    /// from the call that needed it instead of from start-up.
    pub fn new(cfg: DockerConfig) -> Self {
        Self { cfg, docker: OnceCell::new(), gateways: Default::default(), sent_machine: Default::default(), sent_computers: Default::default() }
    }

    pub fn config(&self) -> &DockerConfig {
        &self.cfg
    }

    pub async fn client(&self) -> Result<&Docker> {
        self.sent_machine.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.docker
            .get_or_try_init(|| async {
                if let Some(r) = &self.cfg.remote {
                    // Nothing is sent yet: a host that does not answer fails the call that needed it.
                    return r.engine.client().map_err(|p| ComputerError::Unavailable(p.line(r.name.as_str(), &r.engine.url)));
                }
                tokio::time::timeout(Duration::from_secs(5), connect())
                    .await
                    .map_err(|_| ComputerError::Unavailable(crate::unreachable_message("no answer within 5 s")))?
            })
            .await
    }

    /// The engine's version, proving it answers.
    pub async fn engine_version(&self) -> Result<String> {
        let v = self.client().await?.version().await.map_err(docker_err)?;
        Ok(v.version.unwrap_or_else(|| "unknown".into()))
    }

    /// Whether the engine runs containers' users as users of their own on its machine
    /// (user-namespace remapping, or rootless Docker): then no account there shares a uid with a
    /// bot or the screen services.
    pub async fn remaps_users(&self) -> Result<bool> {
        let info = self.client().await?.info().await.map_err(docker_err)?;
        Ok(info.security_options.unwrap_or_default().iter().any(|o| o.contains("name=userns") || o.contains("name=rootless")))
    }

    /// Every container of this data directory (for `computer ls` and reconcile).
    pub async fn list_managed(&self) -> Result<Vec<Found>> {
        self.find(None).await
    }

    pub(crate) async fn find(&self, computer: Option<&ComputerId>) -> Result<Vec<Found>> {
        let mut label = vec![format!("{}=1", spec::LABEL_MANAGED), format!("{}={}", spec::LABEL_DATA_DIR, self.cfg.data_dir_label)];
        if let Some(c) = computer {
            label.push(format!("{}={c}", spec::LABEL_COMPUTER));
        }
        let opts = ListContainersOptions { all: true, filters: HashMap::from([("label".to_string(), label)]), ..Default::default() };
        let list = self.client().await?.list_containers(Some(opts)).await.map_err(docker_err)?;
        Ok(list
            .into_iter()
            .map(|c| Found {
                id: c.id.unwrap_or_default(),
                computer: c.labels.and_then(|l| l.get(spec::LABEL_COMPUTER).cloned()).unwrap_or_default(),
                running: c.state.as_deref() == Some("running"),
                removing: c.state.as_deref() == Some("removing"),
                home_volume: c.mounts.unwrap_or_default().into_iter().find(|m| m.destination.as_deref() == Some(HOME)).and_then(|m| m.name),
                network: c.host_config.and_then(|h| h.network_mode),
            })
            .collect())
    }

    /// Waits (up to a minute) until Docker has finished removing the computer's container;
    /// returns what is left.
    pub(crate) async fn wait_removed(&self, computer: &ComputerId) -> Result<Vec<Found>> {
        for _ in 0..600 {
            let found = self.find(Some(computer)).await?;
            if !found.iter().any(|f| f.removing) {
                return Ok(found);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ComputerError::TimedOut(format!("Docker was still removing computer {computer}'s container after 60 s")))
    }

    pub(crate) async fn running_container(&self, c: &ComputerRef) -> Result<String> {
        match self.find(Some(&c.id)).await?.into_iter().next() {
            Some(f) if f.running => Ok(f.id),
            _ => Err(ComputerError::NotRunning(c.id.to_string())),
        }
    }

    /// Drops the cached gateway port of a computer (a started container gets a new port).
    pub(crate) fn forget_gateway(&self, c: &ComputerId) {
        self.gateways.lock().unwrap().remove(c.as_str());
    }

    /// Removes a container by id (used by reconcile for orphans). One whose removal another caller
    /// began (a destroy whose process was killed) is waited for until it is gone.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        let docker = self.client().await?;
        match docker.remove_container(id, Some(RemoveContainerOptions { force: true, v: true, ..Default::default() })).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, message }) if message.contains("removal") => {
                for _ in 0..600 {
                    match docker.inspect_container(id, None).await {
                        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => return Ok(()),
                        Err(e) => return Err(docker_err(e)),
                        Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                Err(ComputerError::TimedOut(format!("Docker was still removing container {id} after 60 s")))
            }
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Starts an exec of `argv` as `who` and returns its output stream and stdin. On a terminal
    /// (`tty`) stdout and stderr come as one console stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_exec(
        &self,
        who: InComputer,
        container: &str,
        argv: Vec<String>,
        env: Vec<String>,
        cwd: &str,
        stdin: bool,
        tty: bool,
    ) -> Result<(String, ExecOutputStream, std::pin::Pin<Box<dyn AsyncWrite + Send>>)> {
        let docker = self.client().await?;
        let mut env = env;
        // The gateway's agent token is the engine's capability, not the bot's.
        env.push("BOTDESK_AGENT_TOKEN=".to_string());
        let exec = docker
            .create_exec(
                container,
                CreateExecOptions {
                    cmd: Some(argv),
                    env: Some(env),
                    working_dir: Some(cwd.to_string()),
                    user: Some(who.user()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    attach_stdin: Some(stdin),
                    tty: Some(tty),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| match e {
                // Stopped (409), or gone (404): either way not running.
                bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. } => ComputerError::NotRunning(container.into()),
                e => docker_err(e),
            })?;
        match docker.start_exec(&exec.id, None).await.map_err(docker_err)? {
            StartExecResults::Attached { output, input } => Ok((exec.id, output, input)),
            StartExecResults::Detached => Err(ComputerError::Provider("Docker detached an attached exec".into())),
        }
    }

    /// The exit code of a finished exec.
    pub(crate) async fn exec_exit_code(&self, exec_id: &str) -> Result<i32> {
        wait_exit_code(self.client().await?, exec_id).await
    }

    /// Runs `argv` in `container` as `who` within `bound`, for its effect: fine when it exits 0;
    /// otherwise `{what}: ` and the last lines of its stderr (or its exit code), and a lapse is
    /// `TimedOut` naming `what`.
    pub(crate) async fn run_checked(&self, who: InComputer, container: &str, argv: &[&str], bound: Duration, what: &str) -> Result<()> {
        self.run_checked_input(who, container, argv, None, bound, what).await
    }

    /// [`Self::run_checked`], with `stdin` written to the command (then closed).
    pub(crate) async fn run_checked_input(
        &self,
        who: InComputer,
        container: &str,
        argv: &[&str],
        stdin: Option<Bytes>,
        bound: Duration,
        what: &str,
    ) -> Result<()> {
        let (code, _, err) = tokio::time::timeout(bound, self.run_quiet_max(who, container, argv, stdin, QUIET_MAX))
            .await
            .map_err(|_| ComputerError::TimedOut(format!("{what}: no end within {} s", bound.as_secs())))??;
        if code == 0 {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&err);
        let lines: Vec<&str> = err.trim().lines().collect();
        let why = if lines.is_empty() { format!("it exited with code {code}") } else { lines[lines.len().saturating_sub(20)..].join("\n") };
        Err(ComputerError::Provider(format!("{what}: {why}")))
    }

    /// Runs a short helper command to completion and returns (exit code, stdout, stderr); stdout
    /// longer than [`QUIET_MAX`] is an error (see [`Self::run_quiet_max`]).
    pub(crate) async fn run_quiet(&self, container: &str, argv: &[&str], stdin: Option<Bytes>) -> Result<(i32, Vec<u8>, Vec<u8>)> {
        self.run_quiet_max(InComputer::Bot(BotUser::PRIVATE), container, argv, stdin, QUIET_MAX).await
    }

    /// [`Self::run_quiet`] as `who`, taking at most `max_out` bytes of stdout (what comes out of a
    /// computer is never taken whole on trust).
    pub(crate) async fn run_quiet_max(
        &self,
        who: InComputer,
        container: &str,
        argv: &[&str],
        stdin: Option<Bytes>,
        max_out: u64,
    ) -> Result<(i32, Vec<u8>, Vec<u8>)> {
        use tokio::io::AsyncWriteExt;
        let argv = argv.iter().map(|s| s.to_string()).collect();
        let (exec_id, mut output, mut input) = self.start_exec(who, container, argv, vec![], HOME, stdin.is_some(), false).await?;
        let writer = async move {
            if let Some(data) = stdin {
                input.write_all(&data).await?;
                input.shutdown().await?;
            }
            Ok::<_, std::io::Error>(input)
        };
        let (w, r) = tokio::join!(writer, collect_output(&mut output, max_out));
        let (out, err) = r?;
        let _input = w.map_err(|e| ComputerError::Provider(format!("writing to the computer: {e}")))?;
        Ok((self.exec_exit_code(&exec_id).await?, out, err))
    }

    pub(crate) async fn wait_ready(&self, container: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.cfg.ready_timeout;
        loop {
            match self.run_quiet(container, &["test", "-e", "/tmp/.botdesk-ready"], None).await {
                Ok((0, _, _)) => return Ok(()),
                Ok(_) => {}
                Err(ComputerError::NotRunning(_)) => {
                    return Err(ComputerError::Provider(format!(
                        "the computer stopped while starting; last lines of its log:\n{}",
                        self.log_tail(container).await
                    )))
                }
                Err(e) => return Err(e),
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ComputerError::Provider(format!(
                    "the computer did not become ready within {} s; last lines of its log:\n{}",
                    self.cfg.ready_timeout.as_secs(),
                    self.log_tail(container).await
                )));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// A container's stdout and stderr from now on (attached before it starts); `None` if Docker
    /// refuses the attach (the caller then polls for the ready mark).
    pub(crate) async fn attach_output(&self, container: &str) -> Option<ExecOutputStream> {
        let opts = AttachContainerOptions::<String> { stdout: Some(true), stderr: Some(true), stream: Some(true), logs: Some(false), ..Default::default() };
        let attached = self.client().await.ok()?.attach_container(container, Some(opts)).await.ok()?;
        Some(attached.output)
    }

    /// Waits until a starting computer prints start.sh's ready line (no process per check, and no
    /// poll interval added to every start). Its output is only searched, never believed further:
    /// at most [`READY_OUTPUT_MAX`] of it is kept. If the stream breaks, polls instead.
    pub(crate) async fn wait_ready_line(&self, container: &str, mut output: ExecOutputStream) -> Result<()> {
        let mut seen = Vec::new();
        let watch = async {
            while let Some(chunk) = output.next().await {
                let Ok(chunk) = chunk else { return None };
                seen.extend_from_slice(&chunk.into_bytes());
                if seen.windows(READY_LINE.len()).any(|w| w == READY_LINE.as_bytes()) {
                    return Some(true);
                }
                if seen.len() > READY_OUTPUT_MAX {
                    seen.drain(..seen.len() - READY_LINE.len());
                }
            }
            Some(false)
        };
        match tokio::time::timeout(self.cfg.ready_timeout, watch).await {
            Ok(Some(true)) => Ok(()),
            Ok(Some(false)) => {
                Err(ComputerError::Provider(format!("the computer stopped while starting; last lines of its log:\n{}", self.log_tail(container).await)))
            }
            Ok(None) => self.wait_ready(container).await,
            Err(_) => Err(ComputerError::Provider(format!(
                "the computer did not become ready within {} s; last lines of its log:\n{}",
                self.cfg.ready_timeout.as_secs(),
                self.log_tail(container).await
            ))),
        }
    }

    pub(crate) async fn log_tail(&self, container: &str) -> String {
        let Ok(docker) = self.client().await else { return String::new() };
        let opts = LogsOptions::<String> { stdout: true, stderr: true, tail: "20".into(), ..Default::default() };
        let mut logs = docker.logs(container, Some(opts));
        let mut text = String::new();
        while let Some(Ok(line)) = logs.next().await {
            text.push_str(&line.to_string());
        }
        text
    }

    pub(crate) async fn kill_exec_tree(&self, user: BotUser, container: &str, exec_id: &str, tag: &str) {
        if let Ok(d) = self.client().await {
            kill_tagged(d, user, container, exec_id, tag).await;
        }
    }
}

/// The engine's socket (`DOCKER_HOST` when it names one, as bollard reads it), spoken to in the
/// newest API version both sides know. The version comes from `/_ping`'s `Api-Version` header,
/// which answers in well under a millisecond; `/version` (bollard's own negotiation) takes about
/// 7 ms, a tenth of a whole `botdesk exec`. An answer without the header falls back to it.
async fn connect() -> Result<Docker> {
    let socket = std::env::var("DOCKER_HOST").ok().and_then(|h| h.strip_prefix("unix://").map(String::from)).unwrap_or_else(|| "/var/run/docker.sock".into());
    let pinged = ping_api_version(&socket).await.map_err(|e| ComputerError::Unavailable(crate::unreachable_message(&e.to_string())))?;
    match pinged {
        Some(server) => {
            let version = if server < *bollard::API_DEFAULT_VERSION { server } else { *bollard::API_DEFAULT_VERSION };
            Docker::connect_with_unix(&socket, 120, &version).map_err(docker_err)
        }
        None => Docker::connect_with_unix(&socket, 120, bollard::API_DEFAULT_VERSION).map_err(docker_err)?.negotiate_version().await.map_err(docker_err),
    }
}

/// The `Api-Version` the engine announces on `GET /_ping` (HTTP/1.0: it closes after answering;
/// at most 8 KiB of answer is read).
async fn ping_api_version(socket: &str) -> std::io::Result<Option<bollard::ClientVersion>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await?;
    stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n").await?;
    let mut answer = Vec::with_capacity(1024);
    stream.take(8 * 1024).read_to_end(&mut answer).await?;
    Ok(api_version_header(&String::from_utf8_lossy(&answer)))
}

/// `Api-Version: MAJOR.MINOR` from an HTTP answer's head.
fn api_version_header(answer: &str) -> Option<bollard::ClientVersion> {
    let head = answer.split("\r\n\r\n").next()?;
    let value = head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("api-version")).map(|(_, v)| v.trim()))?;
    let (major, minor) = value.split_once('.')?;
    Some(bollard::ClientVersion { major_version: major.parse().ok()?, minor_version: minor.parse().ok()? })
}

/// What start.sh prints once the computer is ready (it also leaves `/tmp/.botdesk-ready`).
const READY_LINE: &str = "botdesk: computer ready";
/// How much of a starting computer's output is kept while looking for [`READY_LINE`].
const READY_OUTPUT_MAX: usize = 64 * 1024;

/// Most stdout a short helper command may answer with.
pub(crate) const QUIET_MAX: u64 = 1 << 20;
/// How much of a command's stderr is kept (for its error message).
const STDERR_KEPT: usize = 64 * 1024;

/// Reads an exec's output to its end: (stdout, stderr). Stdout over `max_out` bytes is an error;
/// stderr past its first 64 KiB is dropped.
pub(crate) async fn collect_output(output: &mut ExecOutputStream, max_out: u64) -> Result<(Vec<u8>, Vec<u8>)> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(item) = output.next().await {
        match item.map_err(docker_err)? {
            LogOutput::StdOut { message } => {
                if (out.len() + message.len()) as u64 > max_out {
                    return Err(ComputerError::Provider(format!("the computer's answer is longer than {max_out} bytes")));
                }
                out.extend_from_slice(&message)
            }
            LogOutput::StdErr { message } => err.extend_from_slice(&message[..message.len().min(STDERR_KEPT.saturating_sub(err.len()))]),
            _ => {}
        }
    }
    Ok((out, err))
}

/// The exit code of an exec that may still be running: asked until it ended, without a bound of
/// its own (its caller bounds it: a process the bot stopped never ends).
pub(crate) async fn exit_code_when_done(docker: &Docker, exec_id: &str) -> Result<i32> {
    loop {
        let info = docker.inspect_exec(exec_id).await.map_err(docker_err)?;
        if info.running != Some(true) {
            if let Some(code) = info.exit_code {
                return Ok(code as i32);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Docker sets an exec's exit code a moment after its output stream ends.
pub(crate) async fn wait_exit_code(docker: &Docker, exec_id: &str) -> Result<i32> {
    for _ in 0..400 {
        let info = docker.inspect_exec(exec_id).await.map_err(docker_err)?;
        if info.running != Some(true) {
            if let Some(code) = info.exit_code {
                return Ok(code as i32);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(ComputerError::Provider(format!("exec {exec_id} never reported an exit code")))
}

/// Kills every process carrying an exec's tag (its whole tree), repeating until Docker says the
/// exec's own process is gone (the first kill can race its start), then once more for stragglers.
pub(crate) async fn kill_tagged(docker: &Docker, user: BotUser, container: &str, exec_id: &str, tag: &str) {
    let once = || async {
        let opts = CreateExecOptions {
            cmd: Some(vec!["botdesk-helper".to_string(), "kill".into(), tag.to_string()]),
            // The gateway's agent token is the engine's capability, not the bot's (every exec).
            env: Some(vec!["BOTDESK_AGENT_TOKEN=".to_string()]),
            user: Some(InComputer::Bot(user).user()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        if let Ok(exec) = docker.create_exec(container, opts).await {
            if let Ok(StartExecResults::Attached { mut output, .. }) = docker.start_exec(&exec.id, None).await {
                while output.next().await.is_some() {}
            }
        }
    };
    for _ in 0..100 {
        once().await;
        match docker.inspect_exec(exec_id).await {
            Ok(info) if info.running == Some(true) => {}
            _ => break,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    once().await;
}

#[cfg(test)]
mod tests {
    use super::api_version_header;

    #[test]
    fn the_api_version_comes_from_the_ping_header_only() {
        let v = api_version_header("HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\nOK").unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(api_version_header("HTTP/1.1 200 OK\r\napi-version:1.47\r\n\r\n").is_some_and(|v| v.minor_version == 47));
        // Absent, malformed, or only in the body: none (the client then negotiates through /version).
        for answer in ["HTTP/1.1 200 OK\r\n\r\nOK", "HTTP/1.1 200 OK\r\nApi-Version: one.two\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\nApi-Version: 1.41", ""] {
            assert!(api_version_header(answer).is_none(), "{answer:?}");
        }
    }
}

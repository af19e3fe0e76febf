//! `botdesk`: the command line, a second front end of the same engine as the app.
//! Every command takes `--json` (one JSON object, or JSON lines for streams). Errors are one clear
//! line on stderr and a non-zero exit.

use botdesk_engine::{BuildProgress, ComputerScope, Engine, EngineConfig, EngineError, ProviderChoice, StreamKind, Verdict};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use serde_json::json;
use std::{io::Write, path::PathBuf, process::ExitCode, time::Duration};

mod commands;
mod forward;
mod mcp;

#[derive(Parser)]
#[command(name = "botdesk", version, about = "Run AI bots on their own Linux desktops, on your laptop.")]
struct Cli {
    /// Print one JSON object (JSON lines for streams) instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Data directory (default: $BOTDESK_DATA_DIR, else the platform data dir).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check Docker, the computer image, the data directory, the keyring and display libraries.
    Doctor,
    /// The computer image.
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
    /// Create, list and remove bots.
    Bot {
        #[command(subcommand)]
        cmd: BotCmd,
    },
    /// Logins a bot may use without seeing them: its `fill_login` tool fills them into a page on
    /// their site only. The password and a one-time-code seed go to the OS keyring, read from
    /// stdin or hidden prompts (never argv).
    Secret {
        #[command(subcommand)]
        cmd: SecretCmd,
    },
    /// Model providers. Keys go to the OS keyring, read from stdin or a hidden prompt (never argv).
    Model {
        #[command(subcommand)]
        cmd: ModelCmd,
    },
    /// Docker hosts: this machine's engine (`local`) and engines on other machines, reached over
    /// TCP with mutual TLS.
    Host {
        #[command(subcommand)]
        cmd: HostCmd,
    },
    /// The computers bots run on.
    Computer {
        #[command(subcommand)]
        cmd: ComputerCmd,
    },
    /// Run a command on a bot's computer, in the bot's folder; its exit code is passed through.
    Exec {
        bot: String,
        /// Working directory, relative to the bot's folder (`shared/…` and `bots/…` address the Team root).
        #[arg(long)]
        cwd: Option<String>,
        /// Timeout in milliseconds (1 to 3,600,000; default 300,000).
        #[arg(long, value_name = "MS")]
        timeout: Option<u64>,
        #[arg(last = true, required = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// Files in a bot's workspace (paths relative to the bot's folder).
    Files {
        #[command(subcommand)]
        cmd: FilesCmd,
    },
    /// Take control of a bot's screen, or hand it back.
    Control {
        #[command(subcommand)]
        cmd: ControlCmd,
    },
    /// A bot's desktop (its own X display, window manager and screen transport).
    Desktop {
        #[command(subcommand)]
        cmd: DesktopCmd,
    },
    /// Save a screenshot of the bot's desktop: PNG, or JPEG when OUT ends in .jpg or .jpeg.
    Screenshot {
        bot: String,
        out: PathBuf,
        /// JPEG quality, 1 to 100.
        #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(1..=100))]
        quality: u8,
    },
    /// Perform a JSON array of actions on a bot's desktop (the model's computer_act format).
    Act {
        bot: String,
        /// e.g. '[{"type":"click","x":100,"y":200},{"type":"type","text":"hello"}]'
        actions: String,
        /// Wait this long after the batch (0 to 5000 ms; default 350).
        #[arg(long)]
        settle_ms: Option<u64>,
    },
    /// DOM-level control of the bot's own Chromium (its profile, its logins).
    Browser {
        #[command(subcommand)]
        cmd: BrowserCmd,
    },
    /// A loopback port a stock VNC viewer (TigerVNC, Remmina) can open: view-only unless you take
    /// control with --control (refused while the bot runs).
    Screen {
        #[command(subcommand)]
        cmd: ScreenCmd,
    },
    /// An MCP server on stdin and stdout (for Claude Desktop, Claude Code, Cursor, …): the bots'
    /// screens, shells, files and browsers as tools. A call on a bot holds it for the client, as a
    /// run does, until the client leaves or a minute without calls.
    Mcp {
        /// Streamable HTTP at http://ADDR/mcp instead (a loopback address, e.g. 127.0.0.1:8765),
        /// behind a bearer token drawn at start, printed once and kept in DATA_DIR/mcp-token (0600).
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
    },
    /// Give a bot a task and follow it: text, tool calls and results stream as they happen
    /// (`--json`: one JSON event per line). Exits 0 only when the run completes; Ctrl-C stops it.
    /// When the run asks you something (a safety check), a terminal asks you right there.
    Run { bot: String, task: String },
    /// Allow what a bot's run waits for your answer on (something its approvals name, or a
    /// safety check its model's provider put on an action).
    Approve {
        bot: String,
        /// And the same on this site from now on (a download, an upload, a form, a new domain).
        #[arg(long)]
        always: bool,
    },
    /// Decline it, with a note the model is told: that action does not happen (a declined safety
    /// check stops the run).
    Deny {
        bot: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// The versions of a bot's folder (the kept checkpoints of its computer), newest first, with
    /// what changed in its folder in each.
    History { bot: String },
    /// Put a bot's folder, or one path in it, back as it was in a version (what is there now is
    /// saved as a version first, so this can be undone). Works with Docker off too.
    Restore {
        bot: String,
        /// The version (see `botdesk history BOT`).
        #[arg(long, required_unless_present = "before_run", conflicts_with = "before_run")]
        version: Option<u64>,
        /// The version a run started from: undoes that run's file changes.
        #[arg(long, value_name = "RUN")]
        before_run: Option<String>,
        /// One file or folder, relative to the bot's folder (default: all of it).
        #[arg(long, conflicts_with = "before_run")]
        path: Option<String>,
    },
    /// A bot's chat: tasks, replies, tool calls and their results.
    Chat {
        bot: String,
        /// The latest N messages.
        #[arg(long, default_value_t = 50)]
        last: i64,
    },
    /// Write one of a bot's runs to FILE, as its extension says: .json, the trajectory (its
    /// steps: task, the model's words, each tool call with its arguments, result, screenshot and
    /// where it acted, the notes), screenshots in FILE.shots/ beside it (docs/trajectory.md);
    /// .html, one self-contained report (steps, frames, actions drawn); .mp4 or .webm, the screen
    /// recording with the actions drawn in (needs ffmpeg).
    Replay {
        bot: String,
        /// The run's id (see `botdesk runs`); default: the latest.
        #[arg(long)]
        run: Option<String>,
        #[arg(long)]
        out: PathBuf,
    },
    /// A bot's runs, newest first: id, start (UTC), duration, status, tokens, cost, the size of
    /// its screen recording and its task.
    Runs {
        bot: String,
        /// The latest N runs.
        #[arg(long, default_value_t = 20)]
        last: u32,
    },
    /// What a bot did on its computer (commands with exit codes and output tails, files written).
    Activity {
        bot: String,
        /// Keep printing new entries.
        #[arg(long)]
        follow: bool,
    },
    /// Diagnostics for the lease database.
    Lease {
        #[command(subcommand)]
        cmd: LeaseCmd,
    },
}

#[derive(Subcommand)]
enum BrowserCmd {
    /// Open an http(s) URL; prints the page snapshot.
    Navigate { bot: String, url: String },
    /// The page text and up to 80 interactive elements as `role "name" [eN]`.
    Snapshot { bot: String },
    /// Click / fill / type by ref: '[{"action":"fill","ref":"e2","text":"alice"},{"action":"click","ref":"e3"}]'
    Act { bot: String, actions: String },
}

#[derive(Subcommand)]
enum ScreenCmd {
    Forward {
        bot: String,
        /// Local port (default: a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long)]
        control: bool,
    },
}

#[derive(Subcommand)]
enum DesktopCmd {
    /// Start the bot's desktop (lazily started otherwise by its first graphical tool).
    Open { bot: String },
    /// Stop it: tokens revoked, display torn down and verified gone, slot freed.
    Release { bot: String },
}

#[derive(Subcommand)]
enum ControlCmd {
    /// Refused with "Stop the bot first" while the bot runs (unless it waits for you), or pause
    /// the run first with --pause.
    Take {
        bot: String,
        /// Pause the bot's run at its next step boundary (it finishes its current action or
        /// command first), then take control; Release resumes the run.
        #[arg(long)]
        pause: bool,
    },
    /// Hand the screen back; a run waiting for you, or paused, resumes.
    Release {
        bot: String,
        /// Tell the waiting run you skipped what it asked for (default: finished).
        #[arg(long)]
        skipped: bool,
        /// What the resumed run is told, e.g. "logged in; the cart is yours to check out".
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Subcommand)]
enum LeaseCmd {
    /// Start a run for BOT and hold its execution lease, heartbeating, for MS milliseconds
    /// (prints the lease as one JSON line when it is held). Exits 1 with "busy" if another run holds it.
    Hold {
        bot: String,
        #[arg(long, default_value_t = 3_600_000)]
        ms: u64,
    },
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Build the computer image if it is missing (or always, with --force).
    Build {
        #[arg(long)]
        force: bool,
        /// Rebuild every layer with current packages (a newer Chromium); `doctor` says when.
        #[arg(long)]
        refresh: bool,
    },
    /// Show the image tag and whether it is present.
    Status,
    /// Send the computer image to a Docker host on another machine, as one stream (the host never
    /// pulls from a registry); nothing is sent when it has the image already.
    Send { host: String },
}

#[derive(Subcommand)]
enum HostCmd {
    /// Add a Docker engine on another machine, once it answers: `botdesk host add NAME
    /// tcp://HOST:2376 --tls-dir DIR` (DIR holds ca.pem, cert.pem and key.pem, as DOCKER_CERT_PATH).
    Add {
        name: String,
        url: String,
        #[arg(long)]
        tls_dir: std::path::PathBuf,
    },
    /// The hosts, `local` first.
    Ls,
    /// Forget a host (its certificates stay where they are).
    Rm { name: String },
}

#[derive(Subcommand)]
enum ModelCmd {
    /// Add a model provider: `echo $KEY | botdesk model add ID --kind anthropic --model NAME`.
    Add {
        id: String,
        #[arg(long, value_parser = ["anthropic", "openai", "openai-compatible"])]
        kind: String,
        /// The model's name at the provider, e.g. claude-sonnet-4-5, gpt-4o, llama3.1.
        #[arg(long)]
        model: String,
        /// For openai-compatible servers (Ollama, vLLM, LM Studio, OpenRouter, xAI), e.g. http://localhost:11434/v1.
        #[arg(long)]
        base_url: Option<String>,
        /// How the model gives screen coordinates: pixels of the screenshot, 0-1000 on each
        /// axis, or pixels of the image as its own processor resized it (smart-resize) (default:
        /// what its family was trained on, e.g. smart-resize for Qwen2.5-VL and UI-TARS-1.5,
        /// 0-1000 for Qwen3-VL; `botdesk model calibrate` finds out).
        #[arg(long, value_parser = ["pixels", "0-1000", "smart-resize"])]
        coordinates: Option<String>,
    },
    List,
    /// Send a model one tiny request, as a run would: its answer, how long it took and what it
    /// cost, or the provider's refusal and how to fix it.
    Test {
        id: String,
    },
    /// Show or set a model's prices in dollars per million tokens (known models get list prices
    /// when added): `model prices ID INPUT OUTPUT CACHE_READ CACHE_WRITE`, or `none`.
    Prices {
        id: String,
        #[arg(num_args = 0..=4)]
        prices: Vec<String>,
    },
    /// Show or set a model's context window and output tokens per call (defaults by family; a
    /// local server may run a model with a smaller window than it could take).
    Limits {
        id: String,
        #[arg(long)]
        context: Option<u64>,
        #[arg(long)]
        max_output: Option<u64>,
        /// Claude's extended thinking per turn: a budget in tokens (1024 or more) or `off`
        /// (models with adaptive thinking decide for themselves).
        #[arg(long)]
        thinking: Option<String>,
        /// Back to the family's defaults.
        #[arg(long, conflicts_with_all = ["context", "max_output", "thinking"])]
        default: bool,
    },
    /// Show or set how a model gives screen coordinates: pixels of the screenshot, 0-1000 on
    /// each axis, or pixels of its own resized image (smart-resize).
    Coordinates {
        id: String,
        #[arg(value_parser = ["pixels", "0-1000", "smart-resize"])]
        space: Option<String>,
        /// Back to what its family was trained on.
        #[arg(long, conflicts_with = "space")]
        default: bool,
    },
    /// Find out how a model points: numbered targets are shown on a bot's desktop, the model is
    /// asked to click a few, and each coordinate space is scored by how near its clicks land.
    Calibrate {
        id: String,
        /// The bot whose desktop shows the targets (its browser opens a page of them).
        #[arg(long)]
        bot: String,
        /// Set the space that fits (else it is only said).
        #[arg(long)]
        set: bool,
    },
    /// Remove a model no bot uses (and its key from the keyring).
    Rm {
        id: String,
    },
}

#[derive(Subcommand)]
enum SecretCmd {
    /// Save (or replace) a bot's login for a site. Stdin: the password on the first line and,
    /// optionally, the one-time-code (TOTP) seed in base32 on the second; on a terminal, hidden
    /// prompts ask for them.
    Add {
        bot: String,
        /// The site: a domain (https), or an origin such as http://10.0.0.2:8080. Only a page on
        /// exactly this origin gets the login.
        #[arg(long)]
        site: String,
        #[arg(long)]
        user: String,
    },
    /// A bot's saved logins (sites and user names; never the secrets).
    Ls { bot: String },
    /// Forget a bot's login for a site (from the keyring too).
    Rm {
        bot: String,
        #[arg(long)]
        site: String,
    },
}

#[derive(Subcommand)]
enum BotCmd {
    Create {
        name: String,
        /// team (shared with the workspace's other bots) or private (a whole computer of its own).
        #[arg(long, default_value = "team", value_parser = ["team", "private"])]
        computer: String,
        /// The Docker host its computer runs on (see `botdesk host ls`); `local` is this machine.
        #[arg(long, default_value = "local")]
        host: String,
        /// Model id (see `botdesk model list`).
        #[arg(long)]
        model: Option<String>,
        #[arg(long, default_value = "")]
        instructions: String,
    },
    List,
    Rm {
        name: String,
    },
    /// Change a bot: its model (its next run uses it) or its name. Its budget: `botdesk bot budget`.
    Set {
        name: String,
        /// Model id (see `botdesk model list`).
        #[arg(long)]
        model: Option<String>,
        /// Its new name.
        #[arg(long = "name")]
        new_name: Option<String>,
    },
    /// Stop a bot: cancel its runs, end its leases, release its desktop.
    Stop {
        name: String,
    },
    /// Move a bot to the Team computer or to its own Private computer. Both homes are kept; its
    /// files and browser profile come along, and nothing newer is overwritten.
    Switch {
        name: String,
        #[arg(value_parser = ["team", "private"])]
        to: String,
        /// Onto a computer of this Docker host (default: the host the bot is on).
        #[arg(long)]
        host: Option<String>,
    },
    /// Show or set what each of a bot's runs may spend (a run stops cleanly at its budget), and
    /// what its runs have cost so far.
    Budget {
        name: String,
        /// Tokens per run (prompt, cached or not, and output); "default" for the default.
        #[arg(long)]
        tokens: Option<String>,
        /// Dollars per run (when its model's prices are known); "none" for no dollar limit.
        #[arg(long)]
        usd: Option<String>,
    },
    /// Show or set where a bot may connect: `open` (the internet; never this machine, the LAN,
    /// link-local or cloud metadata addresses, or other computers), `offline`, or
    /// `allow DOMAIN|ADDRESS…` (only those: a domain with its subdomains, an address or a.b.c.d/n
    /// even in a private range), for its browser and every command. Its computer enforces it,
    /// out of the bot's reach; on a running computer within a second, open connections too.
    /// Each refused connection is in the bot's activity.
    Network {
        name: String,
        /// open | offline | allow DOMAIN|ADDRESS… (none: show it)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        policy: Vec<String>,
    },
    /// Show or set what a bot must ask you before doing: `downloads`, `uploads` (a page's file
    /// chooser), `form DOMAIN` (submitting a form there; `*`: anywhere), `command PATTERN` (a
    /// shell command containing it; `*` stands for any characters), `spend USD` (a run spending
    /// more), `new-domains` (opening a page on a site not yet allowed), or `none`. Its runs pause
    /// at that action until you answer (`botdesk approve|deny`, or the app). Your "always"
    /// answers are kept when you change them, and cleared by `none`.
    Approvals {
        name: String,
        /// none | downloads uploads new-domains form DOMAIN command PATTERN spend USD (none: show)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        policy: Vec<String>,
    },
    /// The MCP servers a bot uses: each starts inside the bot's computer, as the bot, when one of
    /// its runs starts, and ends with the run; its tools are offered to the model as SERVER__TOOL.
    Mcp {
        #[command(subcommand)]
        cmd: BotMcpCmd,
    },
}

#[derive(Subcommand)]
enum BotMcpCmd {
    /// Add a server: `botdesk bot mcp add BOT NAME -- COMMAND ARGS…` (run on stdio inside the
    /// computer, in the bot's folder) or `botdesk bot mcp add BOT NAME --url URL` (a remote server,
    /// called from inside the computer). Put no secret in the command: every process in the
    /// computer can read it; keep secrets in a file of the bot's folder.
    Add {
        bot: String,
        /// Letters, digits and -, at most 20.
        name: String,
        /// A remote MCP server's address (streamable HTTP).
        #[arg(long)]
        url: Option<String>,
        /// The command and its arguments, after --.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// List a bot's servers.
    Ls { bot: String },
    /// Remove one of a bot's servers (from its next run on).
    Rm { bot: String, name: String },
}

#[derive(Subcommand)]
enum ComputerCmd {
    Ls,
    /// Stop a computer; its disk is kept.
    Stop {
        id: String,
    },
    /// Remove a computer's machine; its stored workspace is kept.
    Destroy {
        id: String,
        /// Destroy it even when its workspace cannot be saved first (what changed since its last
        /// saved version is lost).
        #[arg(long)]
        unsaved: bool,
    },
    /// Adopt or remove containers left by a crash (also runs at every app start).
    Reconcile,
    /// Suspend running computers once idle for the set time while no app runs (the app starts
    /// this when it quits with computers left running); returns when none runs or an app starts.
    IdleWatch,
    /// Save a running computer's workspace now (a new checkpoint version on this machine).
    Checkpoint {
        id: String,
    },
    /// The owner's Release computer: free a reservation whose worker is gone.
    Release {
        id: String,
        /// Confirm that no worker or provider call is still running (needed when that cannot be proven).
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(Subcommand)]
enum FilesCmd {
    /// List a folder (from the stored workspace: works with the computer stopped or Docker off).
    Ls {
        bot: String,
        path: Option<String>,
        /// In this version of the folder (see `botdesk history BOT`).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Write a file's raw bytes to stdout (from the stored workspace, also offline).
    Cat {
        bot: String,
        path: String,
        #[arg(long, default_value_t = 512 << 20)]
        max_bytes: u64,
        /// From this version of the folder.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Copy a local file into the workspace.
    Put {
        bot: String,
        local: PathBuf,
        path: String,
        /// Mark executable (default: as the local file is).
        #[arg(long)]
        executable: Option<bool>,
    },
    /// Copy a workspace file to a local path (from the stored workspace, also offline).
    Get {
        bot: String,
        path: String,
        local: PathBuf,
        #[arg(long, default_value_t = 512 << 20)]
        max_bytes: u64,
        /// From this version of the folder.
        #[arg(long)]
        version: Option<u64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_env("BOTDESK_LOG")).with_writer(std::io::stderr).init();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let code = match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("botdesk: {}", sanitize(&e.to_string()));
            ExitCode::from(1)
        }
    };
    // The engine has settled (see `run`): what is left are idle threads; the process does not wait for them.
    rt.shutdown_background();
    code
}

/// `botdesk replay`: `.json` is the trajectory, its screenshots copied beside it (`FILE.shots/`,
/// named by step) and named from the file (a screenshot gone from the data directory is left out
/// and counted); `.html`, `.mp4` and `.webm` are made by the engine.
async fn replay(engine: &Engine, json: bool, bot: &str, run: Option<&str>, out: &std::path::Path) -> Result<ExitCode, EngineError> {
    use botdesk_engine::TrajectoryStep;
    if out.extension().and_then(|e| e.to_str()) != Some("json") {
        let e = engine.export_replay(&engine.bot_ref(bot).await?, run, out).await?;
        print(json, json!(e), || {
            let source = match e.from_recording {
                Some(true) => ", from the screen recording",
                Some(false) => ", from the model's screenshots (the run has no screen recording)",
                None => "",
            };
            format!("wrote run {} ({} steps{source}) to {} ({} bytes)", e.run, e.steps, e.path.display(), e.bytes)
        });
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = engine.trajectory(&engine.bot_ref(bot).await?, run).await?;
    let failed = |e: std::io::Error, p: &std::path::Path| EngineError::invalid(format!("cannot write {}: {e}", p.display()));
    let shots = out.with_extension("shots");
    let folder = shots.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let (mut copied, mut missing) = (0, 0);
    for (i, step) in t.steps.iter_mut().enumerate() {
        let TrajectoryStep::Tool { screenshot: Some(rel), .. } = step else { continue };
        match engine.chat_image(rel).await {
            Ok(png) => {
                std::fs::create_dir_all(&shots).map_err(|e| failed(e, &shots))?;
                let name = format!("{:04}.png", i + 1);
                std::fs::write(shots.join(&name), png).map_err(|e| failed(e, &shots.join(&name)))?;
                *rel = format!("{folder}/{name}");
                copied += 1;
            }
            Err(_) => {
                if let TrajectoryStep::Tool { screenshot, .. } = step {
                    *screenshot = None;
                }
                missing += 1;
            }
        }
    }
    let body = serde_json::to_vec_pretty(&t).map_err(|e| EngineError::invalid(e.to_string()))?;
    std::fs::write(out, body).map_err(|e| failed(e, out))?;
    print(json, json!({"path": out, "run": t.run.id, "steps": t.steps.len(), "screenshots": copied, "screenshots_missing": missing}), || {
        let gone = if missing > 0 { format!(" ({missing} screenshots no longer kept)") } else { String::new() };
        format!("wrote run {} ({} steps, {copied} screenshots in {folder}/) to {}{gone}", t.run.id, t.steps.len(), out.display())
    });
    Ok(ExitCode::SUCCESS)
}

/// One run for `botdesk runs`: what a bot or a page wrote (its task, its error) is escaped.
fn run_line(r: &botdesk_engine::RunSummary) -> String {
    let (y, mo, d) = botdesk_core::civil::civil_from_days(r.started_at.div_euclid(86_400_000));
    let ms = r.started_at.rem_euclid(86_400_000);
    let start = format!("{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    let secs = r.duration_ms / 1000;
    let duration = if secs >= 3600 { format!("{}h{:02}m", secs / 3600, secs / 60 % 60) } else { format!("{}m{:02}s", secs / 60, secs % 60) };
    let tokens = r.usage.prompt() + r.usage.output;
    let cost = r.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_else(|| "-".into());
    let task: String = sanitize(&r.task).chars().take(60).collect();
    let why = match &r.error {
        Some(e) if r.status != botdesk_engine::RunStatus::Completed => format!("  ({})", sanitize(e).chars().take(80).collect::<String>()),
        _ => String::new(),
    };
    let screen = r.recording_bytes.map(|b| format!("{:.1} MB", b as f64 / 1e6)).unwrap_or_else(|| "-".into());
    format!("{}  {start}  {duration:>6}  {:<16}  {tokens:>9} tokens  {cost:>8}  {screen:>8}  {task}{why}", r.id, r.status.to_string())
}

/// `text` with its control characters (a terminal's escape sequences among them) shown as escapes,
/// but for new lines and tabs: what a bot or a web page wrote (file names, titles, messages, a
/// command's output tail) never drives the person's terminal.
fn sanitize(text: &str) -> String {
    text.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// The API key: a hidden prompt on a terminal, else all of stdin (trimmed). Empty means none (fine
/// for a local OpenAI-compatible server; the engine says when a key is required).
fn read_key(id: &str) -> Result<Option<String>, EngineError> {
    use std::io::{IsTerminal, Read};
    let key = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("API key for {id} (hidden; empty for none): "))
            .map_err(|e| EngineError::invalid(format!("cannot read the key: {e}")))?
    } else {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| EngineError::invalid(format!("cannot read the key from stdin: {e}")))?;
        s
    };
    let key = key.trim().to_string();
    Ok((!key.is_empty()).then_some(key))
}

/// The key vault's passphrase (used only when no Secret Service answers): the first line of the
/// file descriptor `BOTDESK_PASSPHRASE_FD` names (as gpg's `--passphrase-fd`; never an argument
/// or a variable holding the passphrase), else a hidden prompt on the terminal, twice when it is
/// being chosen. None without either.
fn ask_passphrase(creating: bool) -> Option<String> {
    use std::io::BufRead;
    if let Some(fd) = std::env::var("BOTDESK_PASSPHRASE_FD").ok().and_then(|v| v.trim().parse::<i32>().ok()).filter(|fd| *fd > 2) {
        static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        // SAFETY: the person handed this process that descriptor to read the passphrase from; it
        // is taken once (above), read and closed.
        let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut line = String::new();
        std::io::BufReader::new(file).read_line(&mut line).ok()?;
        return Some(line.trim_end_matches(['\r', '\n']).to_string()).filter(|p| !p.is_empty());
    }
    let first = if creating {
        "No Secret Service answers: choose a passphrase for Botdesk's key vault (hidden): "
    } else {
        "Passphrase of Botdesk's key vault (hidden): "
    };
    let passphrase = rpassword::prompt_password(first).ok()?;
    if creating && rpassword::prompt_password("The same passphrase again: ").ok()? != passphrase {
        eprintln!("botdesk: the two passphrases differ");
        return None;
    }
    Some(passphrase).filter(|p| !p.is_empty())
}

/// A login's password and optional one-time-code seed: hidden prompts on a terminal, else the
/// first two lines of stdin.
fn read_login(site: &str) -> Result<(String, Option<String>), EngineError> {
    use std::io::{IsTerminal, Read};
    let bad = |e: std::io::Error| EngineError::invalid(format!("cannot read the password: {e}"));
    let (password, seed) = if std::io::stdin().is_terminal() {
        let password = rpassword::prompt_password(format!("Password for {site} (hidden): ")).map_err(bad)?;
        let seed = rpassword::prompt_password("One-time-code seed, base32 (hidden; empty for none): ").map_err(bad)?;
        (password, seed)
    } else {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(bad)?;
        let mut lines = s.lines();
        (lines.next().unwrap_or("").to_string(), lines.next().unwrap_or("").to_string())
    };
    let seed = seed.trim().to_string();
    Ok((password.trim_end_matches(['\r', '\n']).to_string(), (!seed.is_empty()).then_some(seed)))
}

/// `2026-12-04 15:02 UTC` for ms since the epoch.
fn utc_minute(ms: i64) -> String {
    let (days, min) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000) / 60_000);
    let (y, m, d) = botdesk_core::civil::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", min / 60, min % 60)
}

fn bytes_text(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn history_text(h: &botdesk_engine::History) -> String {
    let whose = if h.folder.is_empty() { format!("{}'s home", h.computer) } else { format!("{}'s folder", h.bot) };
    let mut out = vec![format!(
        "{} versions of {whose} ({} on disk; every version kept {} hours, then one a day for {} days)",
        h.versions.len(),
        bytes_text(h.disk_bytes),
        h.keep.all_hours,
        h.keep.daily_days
    )];
    for v in &h.versions {
        let c = v.changes;
        let changed = if c.none() {
            "no changes".to_string()
        } else {
            let removed = if c.removed > 0 { format!(", {} removed", c.removed) } else { String::new() };
            format!("{} written ({}){removed}", c.written, bytes_text(c.bytes))
        };
        let current = if v.current { "  (latest)" } else { "" };
        out.push(format!("v{:<5} {}  {:<32} {changed}{current}", v.version, utc_minute(v.at), v.label));
    }
    if h.versions.is_empty() {
        out.push("nothing saved yet: a version is made when a run ends, and when its computer stops".into());
    }
    out.join("\n")
}

fn print(json: bool, value: serde_json::Value, text: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        let t = text();
        if !t.is_empty() {
            println!("{}", sanitize(&t));
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, EngineError> {
    let data_dir = cli.data_dir.clone().unwrap_or_else(botdesk_engine::DataDir::default_location);
    let mut config = EngineConfig::new(data_dir, ProviderChoice::Machine(botdesk_docker::machine));
    config.clock = std::sync::Arc::new(botdesk_engine::OffsetClock::from_env());
    config.ask_passphrase = Some(std::sync::Arc::new(ask_passphrase));
    let engine = Engine::open(config).await?;
    let result = command(&engine, cli).await;
    engine.settle().await;
    // Not closed: closing the database's last connection copies its write-ahead log into it
    // (10 to 40 ms, a quarter of a whole `botdesk exec`). Everything is committed; the next process
    // (or SQLite's own automatic checkpoint) carries on from the log.
    std::mem::forget(engine);
    result
}

async fn command(engine: &Engine, cli: Cli) -> Result<ExitCode, EngineError> {
    let json = cli.json;
    match cli.cmd {
        Cmd::Image { cmd } => return commands::image(engine, json, cmd).await,
        Cmd::Bot { cmd } => return commands::bot(engine, json, cmd).await,
        Cmd::Model { cmd } => return commands::model(engine, json, cmd).await,
        Cmd::Host { cmd } => return commands::host(engine, json, cmd).await,
        Cmd::Computer { cmd } => return commands::computer(engine, json, cmd).await,
        Cmd::Control { cmd } => return commands::control(engine, json, cmd).await,
        Cmd::Desktop { cmd } => return commands::desktop(engine, json, cmd).await,
        Cmd::Doctor => {
            let report = engine.doctor().await;
            print(json, serde_json::to_value(&report).unwrap(), || {
                report
                    .checks
                    .iter()
                    .map(|c| {
                        let fix = c.fix.as_ref().map(|f| format!("\n      fix: {f}")).unwrap_or_default();
                        format!(
                            "{} {:<18} {}{fix}",
                            if !c.ok {
                                "FAIL"
                            } else if c.warn {
                                "warn"
                            } else {
                                "ok  "
                            },
                            c.name,
                            c.detail
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            return Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        Cmd::Lease { cmd: LeaseCmd::Hold { bot, ms } } => return hold_lease(engine, &bot, ms).await,
        Cmd::Browser { cmd } => {
            let snap = match cmd {
                BrowserCmd::Navigate { bot, url } => engine.browser_navigate(&engine.bot_ref(&bot).await?, &url).await?,
                BrowserCmd::Snapshot { bot } => engine.browser_snapshot(&engine.bot_ref(&bot).await?).await?,
                BrowserCmd::Act { bot, actions } => {
                    let value: serde_json::Value =
                        serde_json::from_str(&actions).map_err(|e| EngineError::invalid(format!("the actions are not valid JSON: {e}")))?;
                    engine.browser_act(&engine.bot_ref(&bot).await?, &value).await?
                }
            };
            print(json, snap.clone(), || botdesk_engine::snapshot_text(&snap));
        }
        Cmd::Screen { cmd: ScreenCmd::Forward { bot, port, control } } => return screen_forward(engine, json, &bot, port, control).await,
        Cmd::Mcp { http: None } => mcp::serve_stdio(engine.clone()).await.map_err(EngineError::invalid)?,
        Cmd::Mcp { http: Some(addr) } => {
            let token = {
                let mut random = [0u8; 32];
                urandom(&mut random);
                random.iter().map(|b| format!("{b:02x}")).collect::<String>()
            };
            let file = engine.data_dir().root().join("mcp-token");
            write_private(&file, token.as_bytes()).map_err(|e| EngineError::invalid(format!("{}: {e}", file.display())))?;
            let said = |at: std::net::SocketAddr| {
                let url = format!("http://{at}/mcp");
                print(json, json!({"url": url, "token": token, "token_file": file}), || {
                    format!("MCP over HTTP at {url}; send `Authorization: Bearer {token}` (kept in {}). Ctrl-C stops.", file.display())
                });
                let _ = std::io::stdout().flush();
            };
            mcp::serve_http(engine.clone(), addr, token.clone(), said).await.map_err(EngineError::invalid)?;
        }
        Cmd::Screenshot { bot, out, quality } => {
            let jpeg = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"));
            let format = if jpeg { botdesk_core::ImageFormat::Jpeg { quality } } else { botdesk_core::ImageFormat::Png };
            let obs = engine.screenshot(&engine.bot_ref(&bot).await?, format).await?;
            let png = obs.image.clone().unwrap_or_default();
            std::fs::write(&out, &png).map_err(|e| EngineError::invalid(format!("cannot write {}: {e}", out.display())))?;
            print(
                json,
                json!({"path": out, "frame_id": obs.frame_id, "width": obs.width, "height": obs.height, "cursor": obs.cursor, "active_window": obs.active_window, "bytes": png.len()}),
                || format!("saved {}x{} screenshot to {}", obs.width, obs.height, out.display()),
            );
        }
        Cmd::Act { bot, actions, settle_ms } => {
            let value: serde_json::Value = serde_json::from_str(&actions).map_err(|e| EngineError::invalid(format!("the actions are not valid JSON: {e}")))?;
            let (n, settled) = engine.act(&engine.bot_ref(&bot).await?, &value, settle_ms).await?;
            print(json, json!({"bot": bot, "actions": n, "screen": settled}), || format!("performed {n} action(s). {}", settled.describe()));
        }
        Cmd::Exec { bot, cwd, timeout, argv } => return exec(engine, json, &bot, cwd, timeout, argv).await,
        Cmd::Files { cmd } => files(engine, json, cmd).await?,
        Cmd::Run { bot, task } => return run_task(engine, json, &bot, &task).await,
        Cmd::Secret { cmd } => match cmd {
            SecretCmd::Add { bot, site, user } => {
                let (password, code_seed) = read_login(&site)?;
                let saved = engine.add_login(&engine.bot_ref(&bot).await?, botdesk_engine::NewLogin { site, username: user, password, code_seed }).await?;
                let code = if saved.has_code { " (with one-time codes)" } else { "" };
                print(json, json!({ "login": saved }), || {
                    format!("{bot} can log in on {} as {}{code} through fill_login; it never sees the password", saved.site, sanitize(&saved.username))
                });
            }
            SecretCmd::Ls { bot } => {
                let logins = engine.logins(&engine.bot_ref(&bot).await?).await?;
                print(json, json!({ "logins": logins }), || {
                    if logins.is_empty() {
                        return format!("{bot} has no saved logins: botdesk secret add {bot} --site SITE --user NAME");
                    }
                    logins
                        .iter()
                        .map(|l| format!("{}  {}{}", l.site, sanitize(&l.username), if l.has_code { "  (one-time codes)" } else { "" }))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            SecretCmd::Rm { bot, site } => {
                engine.remove_login(&engine.bot_ref(&bot).await?, &site).await?;
                print(json, json!({ "removed": site }), || format!("{bot}'s login for {site} is forgotten"));
            }
        },
        Cmd::Approve { bot, always } => {
            let q = engine.answer_question(&engine.bot_ref(&bot).await?, if always { Verdict::Always } else { Verdict::Allow }, None).await?;
            print(json, json!({ "question": q }), || format!("allowed: {}", sanitize(&q.question)));
        }
        Cmd::Deny { bot, note } => {
            let q = engine.answer_question(&engine.bot_ref(&bot).await?, Verdict::Deny, note.as_deref()).await?;
            print(json, json!({ "question": q }), || format!("declined: {}", sanitize(&q.question)));
        }
        Cmd::Chat { bot, last } => {
            let items = engine.chat(&engine.bot_ref(&bot).await?, last).await?;
            print(json, json!({ "messages": items }), || items.iter().map(chat_line).collect::<Vec<_>>().join("\n"));
        }
        Cmd::Replay { bot, run, out } => return replay(engine, json, &bot, run.as_deref(), &out).await,
        Cmd::Runs { bot, last } => {
            let runs = engine.runs_of(&engine.bot_ref(&bot).await?, last).await?;
            print(json, json!({ "runs": runs }), || {
                if runs.is_empty() {
                    return format!("{bot} has no runs yet: botdesk run {bot} \"a task\"");
                }
                runs.iter().map(run_line).collect::<Vec<_>>().join("\n")
            });
        }
        Cmd::Activity { bot, follow } => return activity(engine, json, &bot, follow).await,
        Cmd::History { bot } => {
            let h = engine.history(&engine.bot_ref(&bot).await?).await?;
            print(json, json!(h), || history_text(&h));
        }
        Cmd::Restore { bot, version, before_run, path } => {
            let r = match (version, before_run) {
                (_, Some(run)) => engine.undo_run(&run).await?,
                (Some(v), None) => engine.restore(&engine.bot_ref(&bot).await?, v, path.as_deref()).await?,
                (None, None) => unreachable!("clap requires one"),
            };
            print(json, json!(r), || {
                let what = if r.path.is_empty() { format!("{bot}'s folder") } else { r.path.clone() };
                let undo = r.saved.map(|v| format!("; what was there is version {v} (`botdesk restore {bot} --version {v}` undoes this)")).unwrap_or_default();
                format!("restored {what} from version {} as version {}{undo}", r.from, r.version)
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Holds a run's execution lease with heartbeats (a diagnostic, and the multi-process test's driver).
async fn hold_lease(engine: &Engine, bot: &str, ms: u64) -> Result<ExitCode, EngineError> {
    let run = engine.create_run(&engine.bot_ref(bot).await?.id, "hold the execution lease").await?;
    let (run, mut lease) = match engine.lease_run(&run.id).await {
        Ok(x) => x,
        Err(e) => {
            // The queued run never got the lease: record that instead of leaving it queued.
            let _ = engine.fail_queued_run(&run.id, &e.message).await;
            return Err(e);
        }
    };
    let run = engine.begin_run(&run).await?;
    println!("{}", json!({"run_id": run.id, "fence": lease.fence, "screen_lease": lease.screen_lease_id(), "expires_at": lease.expires_at}));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    let beat = Duration::from_millis(engine.policy().run_heartbeat as u64);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(beat.min(deadline - tokio::time::Instant::now())).await;
        lease = engine.heartbeat_run(&run, &lease).await?;
    }
    engine.finish_run(&run, &lease, botdesk_engine::RunStatus::Completed, None, None).await?;
    Ok(ExitCode::SUCCESS)
}

/// Forwards a loopback port to the bot's screen through the computer's gateway, presenting the
/// view (or control) token for each connection. A viewer must answer VNC authentication with the
/// password printed here, drawn anew for each forward (see `forward`).
async fn screen_forward(engine: &Engine, json: bool, bot: &str, port: u16, control: bool) -> Result<ExitCode, EngineError> {
    let name = bot;
    let bot = engine.bot_ref(name).await?;
    let (gateway, token) = if control {
        let c = engine.take_control_screen(&bot.id).await?;
        (c.port, c.control_token)
    } else {
        let d = engine.open_desktop(&bot).await?;
        (d.port, d.view_token)
    };
    let io = |e: std::io::Error| EngineError::invalid(format!("screen forward: {e}"));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.map_err(io)?;
    let local = listener.local_addr().map_err(io)?;
    let password = std::sync::Arc::new(forward::Password::new());
    print(json, json!({"bot": name, "listen": local.to_string(), "control": control, "password": password.as_str()}), || {
        format!(
            "{name}'s screen ({}) is on {local}: open it with `vncviewer 127.0.0.1::{}` and the password {}. Ctrl-C stops.",
            if control { "control" } else { "view only" },
            local.port(),
            password.as_str()
        )
    });
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
            accepted = listener.accept() => {
                let (viewer, _) = accepted.map_err(io)?;
                let (token, password) = (token.clone(), password.clone());
                tokio::spawn(async move {
                    let served = match tokio::net::TcpStream::connect(("127.0.0.1", gateway)).await {
                        Ok(upstream) => forward::serve(viewer, upstream, &token, &password).await,
                        Err(e) => Err(format!("the screen gateway: {e}")),
                    };
                    if let Err(e) = served {
                        eprintln!("botdesk: {}", sanitize(&e));
                    }
                });
            }
        }
    }
}

/// A progress bar for an image's build or its sending (JSON lines with --json).
fn image_progress(json: bool) -> (indicatif::ProgressBar, impl Fn(BuildProgress) + Send + Sync) {
    let bar = indicatif::ProgressBar::new(0);
    if json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    } else {
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} {wide_msg}").unwrap().progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    let b = bar.clone();
    let progress = move |p: BuildProgress| {
        if json {
            println!("{}", json!({ "progress": p }));
            return;
        }
        match p {
            BuildProgress::FetchUv { message } | BuildProgress::Base { message } => b.set_message(message),
            BuildProgress::Step { step, total, message } => {
                b.set_length(total as u64);
                b.set_position(step as u64);
                b.set_message(message.chars().take(100).collect::<String>());
            }
            BuildProgress::Send { host, sent, total } => {
                b.set_length(total);
                b.set_position(sent);
                b.set_message(format!("sending to {host}: {} of {} MiB", sent >> 20, total >> 20));
            }
            BuildProgress::Done { image } => b.set_message(format!("done: {image}")),
        }
    };
    (bar, progress)
}

async fn build_image(engine: &Engine, json: bool, refresh: bool) -> Result<String, EngineError> {
    let (bar, progress) = image_progress(json);
    let result = engine.build_image(refresh, &progress).await;
    bar.finish_and_clear();
    result
}

async fn exec(engine: &Engine, json: bool, bot: &str, cwd: Option<String>, timeout: Option<u64>, argv: Vec<String>) -> Result<ExitCode, EngineError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<botdesk_engine::ExecOutput>();
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let printer = tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            if json {
                println!("{}", json!({"stream": chunk.stream, "data": String::from_utf8_lossy(&chunk.data)}));
            } else {
                let _ = match chunk.stream {
                    StreamKind::Stdout => std::io::stdout().write_all(&chunk.data).and_then(|_| std::io::stdout().flush()),
                    StreamKind::Stderr => std::io::stderr().write_all(&chunk.data),
                };
            }
        }
    });
    let exit = engine.exec(&engine.bot_ref(bot).await?, argv, cwd.as_deref(), timeout.map(Duration::from_millis), Some(tx), cancel).await;
    let _ = printer.await;
    let exit = exit?;
    if json {
        println!("{}", json!({"exit_code": exit.code, "outcome": exit.outcome, "message": exit.message}));
    } else if let Some(m) = &exit.message {
        eprintln!("botdesk: {m}");
    }
    Ok(ExitCode::from(exit.code.clamp(0, 255) as u8))
}

async fn files(engine: &Engine, json: bool, cmd: FilesCmd) -> Result<(), EngineError> {
    match cmd {
        FilesCmd::Ls { bot, path, version } => {
            // From the stored workspace on this machine: works with the computer stopped or Docker off.
            let (dir, entries) = engine.stored_list_at(&engine.bot_ref(&bot).await?, path.as_deref().unwrap_or(""), version).await?;
            print(json, json!({"path": dir, "entries": entries}), || {
                entries
                    .iter()
                    .map(|e| {
                        let kind = match e.kind {
                            botdesk_engine::FileKind::Dir => "dir ",
                            botdesk_engine::FileKind::Symlink => "link",
                            botdesk_engine::FileKind::File if e.executable => "exec",
                            botdesk_engine::FileKind::File => "file",
                        };
                        format!("{kind} {:>12} {}", e.size, e.path)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        FilesCmd::Cat { bot, path, max_bytes, version } => {
            let bytes = engine.stored_read_at(&engine.bot_ref(&bot).await?, &path, max_bytes, version).await?;
            std::io::stdout().write_all(&bytes).and_then(|_| std::io::stdout().flush()).map_err(|e| EngineError::invalid(format!("writing to stdout: {e}")))?;
        }
        FilesCmd::Put { bot, local, path, executable } => {
            let meta = std::fs::metadata(&local).map_err(|e| EngineError::invalid(format!("cannot read {}: {e}", local.display())))?;
            if !meta.is_file() {
                return Err(EngineError::invalid(format!("{} is not a regular file", local.display())));
            }
            let data = std::fs::read(&local).map_err(|e| EngineError::invalid(format!("cannot read {}: {e}", local.display())))?;
            let exec = executable.unwrap_or_else(|| std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o100 != 0);
            let size = data.len();
            let written = engine.files_write(&engine.bot_ref(&bot).await?, &path, Bytes::from(data), exec).await?;
            print(json, json!({"path": written, "size": size, "executable": exec}), || format!("wrote {size} bytes to {written}"));
        }
        FilesCmd::Get { bot, path, local, max_bytes, version } => {
            let bytes = engine.stored_read_at(&engine.bot_ref(&bot).await?, &path, max_bytes, version).await?;
            let tmp = local.with_extension("botdesk-partial");
            std::fs::write(&tmp, &bytes)
                .and_then(|_| std::fs::rename(&tmp, &local))
                .map_err(|e| EngineError::invalid(format!("cannot write {}: {e}", local.display())))?;
            print(json, json!({"path": path, "local": local, "size": bytes.len()}), || format!("saved {} bytes to {}", bytes.len(), local.display()));
        }
    }
    Ok(())
}

fn chat_line(item: &botdesk_engine::ChatItem) -> String {
    let mut out = format!("{}: {}", item.role, item.text);
    for c in &item.calls {
        out.push_str(&format!("\n  → {} {}", c.name, c.arguments));
        if let Some(t) = &c.text {
            out.push_str(&format!("\n    ← [{}] {}", c.status, t.lines().next().unwrap_or("")));
        }
    }
    if let Some(u) = &item.usage {
        let usd = item.cost_usd.map(|d| format!(", ${d:.4}")).unwrap_or_default();
        out.push_str(&format!("\n  (run {}: {u} tokens{usd})", item.run_id));
    }
    out
}

/// Runs a task and streams its events until it ends.
async fn run_task(engine: &Engine, json: bool, bot: &str, task: &str) -> Result<ExitCode, EngineError> {
    let me = engine.bot_ref(bot).await?;
    let mut events = engine.run_events();
    let runner = engine.clone();
    let (b, t) = (me.id.clone(), task.to_string());
    let mut handle = tokio::spawn(async move { runner.run_task(&b, &t).await });
    let mut names = std::collections::HashMap::new();
    let mut stopping = false;
    let ask_here = !json && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let finished = loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(ev) if ev.bot() == me.id.as_str() => {
                    print_event(json, &ev, &mut names);
                    if let (true, botdesk_engine::RunEvent::Question { .. }) = (ask_here, &ev) {
                        answer_here(engine, bot);
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => eprintln!("({n} events skipped)"),
                Err(_) => {}
            },
            r = &mut handle => break r.map_err(|e| EngineError::new(botdesk_engine::ErrorCode::Internal, e.to_string()))??,
            _ = tokio::signal::ctrl_c(), if !stopping => {
                stopping = true;
                eprintln!("stopping {bot}…");
                engine.stop_bot(&me.id).await?;
            }
        }
    };
    while let Ok(ev) = events.try_recv() {
        if ev.bot() == me.id.as_str() {
            print_event(json, &ev, &mut names);
        }
    }
    if !json {
        let code = finished.failure.map(|f| format!(" ({f})")).unwrap_or_default();
        match &finished.error {
            Some(e) => eprintln!("\nrun {} {}{code}: {}", finished.id, finished.status, sanitize(e)),
            None => eprintln!("\nrun {} {}{code}", finished.id, finished.status),
        }
        match engine.run_usage(&finished.id).await {
            Ok((u, usd)) => eprintln!("{u} tokens{}", usd.map(|d| format!(", ${d:.4}")).unwrap_or_default()),
            Err(e) => eprintln!("tokens: unknown ({e})"),
        }
    }
    Ok(match finished.status {
        botdesk_engine::RunStatus::Completed => ExitCode::SUCCESS,
        botdesk_engine::RunStatus::Cancelled => ExitCode::from(130),
        _ => ExitCode::FAILURE,
    })
}

/// Asks the person at the terminal for the answer to the run's question (the app or another
/// terminal may answer first: then this answer is too late and says so).
fn answer_here(engine: &Engine, bot: &str) {
    let (engine, bot) = (engine.clone(), bot.to_string());
    tokio::spawn(async move {
        eprint!("Allow it? [y (once), a (always for this site), N, or a note to decline with] ");
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await;
        let Ok(Ok(line)) = line else { return };
        let line = line.trim();
        let verdict = match line.to_ascii_lowercase().as_str() {
            "y" | "yes" => Verdict::Allow,
            "a" | "always" => Verdict::Always,
            _ => Verdict::Deny,
        };
        let note = (verdict == Verdict::Deny && !line.is_empty() && !matches!(line.to_ascii_lowercase().as_str(), "n" | "no")).then_some(line);
        let answered = match engine.bot_ref(&bot).await {
            Ok(bot) => engine.answer_question(&bot, verdict, note).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = answered {
            eprintln!("(not answered: {e})");
        }
    });
}

fn print_event(json: bool, ev: &botdesk_engine::RunEvent, names: &mut std::collections::HashMap<String, String>) {
    use botdesk_engine::RunEvent as E;
    use std::io::Write;
    if json {
        println!("{}", serde_json::to_string(ev).unwrap_or_default());
        return;
    }
    match ev {
        E::Delta { text, .. } => {
            print!("{}", sanitize(text));
            let _ = std::io::stdout().flush();
        }
        E::Message { item, .. } if item.role == botdesk_core::MessageRole::System => println!("\n[{}]", sanitize(&item.text)),
        E::Message { item, .. } if item.role == botdesk_core::MessageRole::Assistant && !item.text.is_empty() => println!(),
        E::Message { .. } => {}
        E::Tool { call, .. } if call.status == botdesk_core::CallStatus::Running => {
            names.insert(call.id.clone(), call.name.clone());
            println!("→ {} {}", sanitize(&call.name), sanitize(&call.arguments.to_string()));
        }
        E::Tool { call, .. } => {
            let first = call.text.as_deref().unwrap_or("").lines().next().unwrap_or("").to_string();
            let shot = call.image.as_deref().map(|i| format!(" (screenshot {i})")).unwrap_or_default();
            println!("  ← {} {}: {}{shot}", sanitize(names.get(&call.id).map(String::as_str).unwrap_or("")), call.status, sanitize(&first));
        }
        E::Activity { .. } | E::Usage { .. } => {}
        E::Restart { why, .. } => println!("\n[the reply broke off ({}); asking the model again]", sanitize(why)),
        E::Waiting { seconds, why, .. } => println!("[waiting for {why}, {seconds} s]"),
        E::Question { question, .. } => {
            println!("\n[the bot asks you: {}]\n[answer here, in the app, or with `botdesk approve BOT` / `botdesk deny BOT --note TEXT`]", sanitize(question))
        }
        E::Answered { .. } => {}
        E::Saved { bot, run_id, files_changed } if *files_changed > 0 => {
            let files = if *files_changed == 1 { "1 file".to_string() } else { format!("{files_changed} files") };
            println!("\n[the run changed {files} in the bot's folder; `botdesk restore {bot} --before-run {run_id}` undoes that]")
        }
        E::Saved { .. } => {}
        E::Status { status, error, .. } => {
            if *status == botdesk_engine::RunStatus::WaitingTakeover {
                println!("[the bot needs you: {}; take control of its screen, then release it]", sanitize(error.as_deref().unwrap_or("")));
            }
        }
    }
}

fn activity_line(a: &botdesk_engine::ActivityRow) -> String {
    let exit = a.exit_code.map(|c| format!(" exit {c}")).unwrap_or_default();
    let mut line = format!("#{} {} {} [{}{exit}]", a.id, a.kind, a.target, a.status);
    if !a.output_tail.is_empty() {
        line.push('\n');
        line.push_str(&a.output_tail.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"));
    }
    line
}

/// Prints a bot's activity; with --follow keeps printing new and changed entries.
async fn activity(engine: &Engine, json: bool, bot: &str, follow: bool) -> Result<ExitCode, EngineError> {
    use botdesk_core::ActivityStatus;
    let show = |a: &botdesk_engine::ActivityRow| {
        if json {
            println!("{}", serde_json::to_string(a).unwrap_or_default())
        } else {
            println!("{}", sanitize(&activity_line(a)))
        }
    };
    let mut open: std::collections::BTreeSet<i64> = Default::default();
    let mut after = 0;
    loop {
        for a in engine.activity(&engine.bot_ref(bot).await?, after, 1000).await? {
            after = a.id;
            show(&a);
            if a.status == ActivityStatus::Running {
                open.insert(a.id);
            }
        }
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        // Entries still running are shown again when they end.
        for id in open.clone() {
            if let Some(a) = engine.activity(&engine.bot_ref(bot).await?, id - 1, 1).await?.into_iter().next() {
                if a.status != ActivityStatus::Running {
                    show(&a);
                    open.remove(&id);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Writes a file only its owner may read (0600), whatever was there before.
fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(data)
}

/// Random bytes from the OS (passwords, challenges, tokens).
fn urandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf)).expect("/dev/urandom is readable");
}

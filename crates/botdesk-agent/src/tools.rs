//! The tools a bot sees, each defined once ([`ToolKind`]: its name, what the model is told, its
//! arguments' schema, an example, whether it works on the screen), and the parse of a call into a
//! checked, typed [`Tool`]. A malformed call (bad JSON, unknown tool, wrong types, a limit
//! exceeded) becomes a clear error for the model; nothing reaches the computer.

use serde::Deserialize;
use serde_json::{json, Value};

use botdesk_core::action::{self, Action};
use botdesk_core::browser::{self, BrowserAction};

use crate::conversation::ToolCall;

/// `read_file` returns UTF-8 text up to this size.
pub const MAX_READ_BYTES: u64 = 250_000;
/// `write_file` content limit.
pub const MAX_WRITE_BYTES: usize = 10 << 20;
pub const DEFAULT_SHELL_TIMEOUT_S: u64 = 120;
/// The longest `wait` and `hold_key` of Claude's computer tool (the reference allows 100 s).
pub const MAX_WAIT_S: f64 = 100.0;
pub const MAX_SHELL_TIMEOUT_S: u64 = 1800;

/// A checked tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
    Observe,
    /// A close look at part of the screen, `[left, top, right, bottom]` in the model's coordinates
    /// (Claude's `zoom`).
    Zoom {
        region: [u32; 4],
    },
    /// A checked batch, coordinates still in the model's space.
    Act {
        actions: Vec<Action>,
        settle_ms: Option<u64>,
    },
    /// Wait, then look (Claude's `wait`, up to [`MAX_WAIT_S`] seconds).
    Wait {
        ms: u64,
    },
    /// Hold keys down for a while, then release them and look (Claude's `hold_key`).
    HoldKey {
        keys: Vec<String>,
        ms: u64,
    },
    /// Where the pointer is, in the model's coordinates, as text (Claude's `cursor_position`).
    CursorPosition,
    /// A call the model's provider flagged (OpenAI's `pending_safety_checks`): carried out only
    /// once the person acknowledged the checks; when they decline, the run stops.
    SafetyChecked {
        checks: Vec<SafetyCheck>,
        then: Box<Tool>,
    },
    Shell {
        command: String,
        cwd: Option<String>,
        timeout_s: u64,
    },
    ListFiles {
        path: String,
    },
    ReadFile {
        path: String,
    },
    /// `append`: add to the end of the file (made if missing) instead of replacing it.
    WriteFile {
        path: String,
        content: String,
        append: bool,
    },
    AttachFile {
        path: String,
        note: Option<String>,
    },
    OpenPath {
        target: String,
    },
    LaunchApp {
        command: String,
    },
    RequestTakeover {
        reason: String,
    },
    BrowserNavigate {
        url: String,
    },
    BrowserSnapshot,
    BrowserAct {
        actions: Vec<BrowserAction>,
    },
    /// Fill the page's login form with the login the person saved for `site` (the model never
    /// sees its secrets).
    FillLogin {
        site: String,
    },
    /// A tool of one of the bot's MCP servers, by the name the model was given
    /// (`SERVER__TOOL`), with its arguments as sent (the server checks them).
    Mcp {
        name: String,
        arguments: serde_json::Map<String, Value>,
    },
}

/// A safety check OpenAI's computer use put on a call (computer use guide, "Acknowledge safety
/// checks"): `malicious_instructions`, `irrelevant_domain`, `sensitive_domain`, or another.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SafetyCheck {
    pub id: String,
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// One tool as the model sees it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub kind: ToolKind,
    /// The kind's name, or an MCP tool's `SERVER__TOOL`.
    pub name: String,
    pub description: String,
    pub schema: Value,
}

impl ToolSpec {
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Every tool a bot has. Each one's name, description, schema, example and whether it works on
/// the screen are exhaustive matches on this enum, so a tool added here does not compile until
/// each is written; it is declared to models once it is in [`ToolKind::DECLARED`] (a test checks
/// that every declared tool has a spec that parses its own example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// Claude's own computer tool, declared by its dialect (see `crate::client::Dialect`) in
    /// place of [`ToolKind::ComputerObserve`] and [`ToolKind::ComputerAct`]; its actions become
    /// observe, zoom and act.
    ClaudeComputer,
    /// OpenAI's computer calls (its dialect declares the tool): each one's actions become one
    /// act, a screenshot or a wait, after the person acknowledged its safety checks.
    OpenAiComputer,
    ComputerObserve,
    ComputerAct,
    Shell,
    ListFiles,
    ReadFile,
    WriteFile,
    AttachFile,
    OpenPath,
    LaunchApp,
    RequestTakeover,
    BrowserNavigate,
    BrowserSnapshot,
    BrowserAct,
    /// Offered only to a bot with saved logins (see [`login_spec`]); never in
    /// [`ToolKind::DECLARED`].
    FillLogin,
    /// A tool of one of the bot's MCP servers (its spec comes from the server, see
    /// [`ToolSpec`]); never in [`ToolKind::DECLARED`].
    Mcp,
}

impl ToolKind {
    /// The tools we declare to every model, in the order it sees them.
    pub const DECLARED: [ToolKind; 13] = [
        ToolKind::ComputerObserve,
        ToolKind::ComputerAct,
        ToolKind::Shell,
        ToolKind::ListFiles,
        ToolKind::ReadFile,
        ToolKind::WriteFile,
        ToolKind::AttachFile,
        ToolKind::OpenPath,
        ToolKind::LaunchApp,
        ToolKind::RequestTakeover,
        ToolKind::BrowserNavigate,
        ToolKind::BrowserSnapshot,
        ToolKind::BrowserAct,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ToolKind::ClaudeComputer => "computer",
            ToolKind::OpenAiComputer => "computer_call",
            ToolKind::ComputerObserve => "computer_observe",
            ToolKind::ComputerAct => "computer_act",
            ToolKind::Shell => "shell",
            ToolKind::ListFiles => "list_files",
            ToolKind::ReadFile => "read_file",
            ToolKind::WriteFile => "write_file",
            ToolKind::AttachFile => "attach_file",
            ToolKind::OpenPath => "open_path",
            ToolKind::LaunchApp => "launch_app",
            ToolKind::RequestTakeover => "request_takeover",
            ToolKind::BrowserNavigate => "browser_navigate",
            ToolKind::BrowserSnapshot => "browser_snapshot",
            ToolKind::BrowserAct => "browser_act",
            ToolKind::FillLogin => "fill_login",
            ToolKind::Mcp => "mcp",
        }
    }

    /// The tool a model called by this name, if there is one.
    pub fn named(name: &str) -> Option<ToolKind> {
        [ToolKind::ClaudeComputer, ToolKind::OpenAiComputer, ToolKind::FillLogin].into_iter().chain(ToolKind::DECLARED).find(|k| k.name() == name)
    }

    /// Works on the bot's screen or its browser (the app shows the bot's screen while one runs).
    pub const fn graphical(self) -> bool {
        match self {
            ToolKind::ClaudeComputer
            | ToolKind::OpenAiComputer
            | ToolKind::ComputerObserve
            | ToolKind::ComputerAct
            | ToolKind::OpenPath
            | ToolKind::LaunchApp
            | ToolKind::RequestTakeover
            | ToolKind::BrowserNavigate
            | ToolKind::BrowserSnapshot
            | ToolKind::BrowserAct
            | ToolKind::FillLogin => true,
            ToolKind::Shell | ToolKind::ListFiles | ToolKind::ReadFile | ToolKind::WriteFile | ToolKind::AttachFile | ToolKind::Mcp => false,
        }
    }

    /// The model's own computer tool (Claude's, OpenAI's) stands for this one when it has one.
    pub const fn replaced_by_own_computer(self) -> bool {
        matches!(self, ToolKind::ComputerObserve | ToolKind::ComputerAct)
    }

    /// A good call's arguments, shown with an error about a bad one.
    pub const fn example(self) -> &'static str {
        match self {
            ToolKind::ClaudeComputer => r#"{"action":"screenshot"}"#,
            ToolKind::OpenAiComputer => r#"{"action":{"type":"screenshot"},"pending_safety_checks":[]}"#,
            ToolKind::ComputerObserve | ToolKind::BrowserSnapshot | ToolKind::Mcp => "{}",
            ToolKind::ComputerAct => r#"{"actions":[{"type":"click","x":100,"y":200}]}"#,
            ToolKind::Shell => r#"{"command":"ls -la"}"#,
            ToolKind::ListFiles => r#"{"path":"."}"#,
            ToolKind::ReadFile | ToolKind::AttachFile => r#"{"path":"notes.txt"}"#,
            ToolKind::WriteFile => r#"{"path":"notes.txt","content":"hello"}"#,
            ToolKind::OpenPath => r#"{"target":"report.html"}"#,
            ToolKind::LaunchApp => r#"{"command":"xterm"}"#,
            ToolKind::RequestTakeover => r#"{"reason":"please log in to the site"}"#,
            ToolKind::BrowserNavigate => r#"{"url":"https://example.org/"}"#,
            ToolKind::BrowserAct => r#"{"actions":[{"action":"click","ref":"e3"}]}"#,
            ToolKind::FillLogin => r#"{"site":"https://example.org"}"#,
        }
    }

    /// What the model is told about the tool, and its arguments' schema (none for Claude's
    /// computer tool: its dialect declares it); coordinates are said in the model's space.
    pub fn spec(self, coords: action::CoordSpace) -> Option<ToolSpec> {
        let path = |d: &str| json!({"type": "string", "description": d});
        let (description, schema) = match self {
            ToolKind::ClaudeComputer | ToolKind::OpenAiComputer | ToolKind::Mcp => return None,
            ToolKind::FillLogin => return Some(login_spec(&[])),
            ToolKind::ComputerObserve => (
                "Take a screenshot of your desktop. Returns the screen size, the cursor position, the active window and the screenshot; when nothing changed since your last look, no image is sent.",
                schema(json!({}), &[]),
            ),
            ToolKind::ComputerAct => (
                "(said by act_description)",
                schema(
                    json!({
                        "actions": {"type": "array", "maxItems": 24, "items": {"type": "object", "properties": {"type": {"type": "string", "enum": ["click", "double_click", "move", "down", "up", "drag", "type", "key", "scroll", "wait"]}}, "required": ["type"]}},
                        "settle_ms": {"type": "integer", "minimum": 0, "maximum": 5000}
                    }),
                    &["actions"],
                ),
            ),
            ToolKind::Shell => (
                "Run a shell command (sh -c) on your computer, in your folder unless cwd says otherwise. Returns the exit code and the output (stdout and stderr, the last 12,000 characters).",
                schema(json!({"command": {"type": "string"}, "cwd": path("working directory, relative to your folder"), "timeout_s": {"type": "integer", "minimum": 1, "maximum": 1800}}), &["command"]),
            ),
            ToolKind::ListFiles => (
                "List a folder of your workspace (relative paths are in your folder; shared/ is shared with the other bots of this computer).",
                schema(json!({"path": path("folder, default .")}), &[]),
            ),
            ToolKind::ReadFile => ("Read a UTF-8 text file of at most 250,000 bytes from your workspace.", schema(json!({"path": path("file")}), &["path"])),
            ToolKind::WriteFile => (
                "Write a text file in your workspace (folders are created; an existing file is replaced, or with append: true added to). Write a long file in parts: the first, then the rest with append: true.",
                schema(json!({"path": path("file"), "content": {"type": "string"}, "append": {"type": "boolean"}}), &["path", "content"]),
            ),
            ToolKind::AttachFile => (
                "Show a file of your workspace to the person in the chat, e.g. your final report.",
                schema(json!({"path": path("file"), "note": {"type": "string"}}), &["path"]),
            ),
            ToolKind::OpenPath => (
                "Open a file of your workspace or an http(s) URL on your desktop (URLs open in your browser).",
                schema(json!({"target": path("file path or URL")}), &["target"]),
            ),
            ToolKind::LaunchApp => ("Start a graphical program on your desktop (e.g. xterm) and return at once.", schema(json!({"command": {"type": "string"}}), &["command"])),
            ToolKind::RequestTakeover => (
                "Ask the person to take control of your screen (e.g. to log in or solve a captcha). Waits until they hand it back; returns finished or skipped.",
                schema(json!({"reason": {"type": "string", "description": "what you need the person to do"}}), &["reason"]),
            ),
            ToolKind::BrowserNavigate => ("Open an http(s) URL in your browser (on your desktop).", schema(json!({"url": {"type": "string"}}), &["url"])),
            ToolKind::BrowserSnapshot => (
                "The page in your browser as text, with up to 80 interactive elements and their refs (e1, e2, ...); passwords are masked.",
                schema(json!({}), &[]),
            ),
            ToolKind::BrowserAct => (
                "Click, fill or type into elements of the page by the refs of your latest browser_snapshot, e.g. [{\"action\":\"fill\",\"ref\":\"e3\",\"text\":\"hello\"},{\"action\":\"click\",\"ref\":\"e4\"}].",
                schema(
                    json!({"actions": {"type": "array", "maxItems": 24, "items": {"type": "object", "properties": {"action": {"type": "string", "enum": ["click", "fill", "type"]}, "ref": {"type": "string"}, "text": {"type": "string"}}, "required": ["action", "ref"]}}}),
                    &["actions"],
                ),
            ),
        };
        let description = if self == ToolKind::ComputerAct { act_description(coords) } else { description.to_string() };
        Some(ToolSpec { kind: self, name: self.name().to_string(), description, schema })
    }
}

/// `fill_login`, offered to a bot for which the person saved logins on `sites`.
pub fn login_spec(sites: &[String]) -> ToolSpec {
    let saved = if sites.is_empty() { String::new() } else { format!(" Saved logins: {}.", sites.join(", ")) };
    let description = format!(
        "Log in with a login the person saved for you: fills the user name, the password and (when the page asks) a fresh one-time code into the login form of the page in your browser, only when that page is on the login's site. You never see the password. Open the site's login page first, then submit the form yourself.{saved}"
    );
    let schema = schema(json!({"site": {"type": "string", "description": "the login's site, as saved (e.g. https://example.org)"}}), &["site"]);
    ToolSpec { kind: ToolKind::FillLogin, name: ToolKind::FillLogin.name().to_string(), description, schema }
}

/// What `computer_act` says, with coordinates in the model's own space.
fn act_description(coords: action::CoordSpace) -> String {
    format!(
        "Perform up to 24 mouse and keyboard actions on your desktop, then wait until the screen changed and stayed still for settle_ms (default 300; at most 3 s in all), say what it saw and return a new screenshot. {} Each action is an object with a `type`: click, double_click (x, y, button left|right|middle, modifiers held such as [\"shift\"]), move, down, up (x, y, button), drag (x, y, to_x, to_y), type (text), key (key, modifiers such as [\"ctrl\"]), scroll (x, y, direction up|down|left|right, amount 1-20, modifiers), wait (ms 0-5000).",
        coords.describe()
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteArgs {
    site: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActArgs {
    actions: Value,
    #[serde(default)]
    settle_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    timeout_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    #[serde(default)]
    append: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachArgs {
    path: String,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetArgs {
    target: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandArgs {
    command: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonArgs {
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UrlArgs {
    url: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BrowserActArgs {
    actions: Value,
}

fn args<T: for<'de> Deserialize<'de>>(call: &ToolCall, kind: ToolKind) -> Result<T, String> {
    args_of(call, kind.name(), kind.example())
}

fn args_of<T: for<'de> Deserialize<'de>>(call: &ToolCall, name: &str, example: &str) -> Result<T, String> {
    let raw = call.raw.trim();
    let value: Value = if raw.is_empty() {
        json!({})
    } else {
        serde_json::from_str(raw).map_err(|e| format!("the arguments of {name} are not valid JSON ({e}). Send one JSON object, e.g. {example}"))?
    };
    if !value.is_object() {
        return Err(format!("the arguments of {name} must be a JSON object, e.g. {example}"));
    }
    serde_json::from_value(value).map_err(|e| format!("bad arguments for {name}: {e}. Expected e.g. {example}"))
}

fn nonempty(what: &str, s: String) -> Result<String, String> {
    if s.trim().is_empty() {
        Err(format!("{what} must not be empty"))
    } else {
        Ok(s)
    }
}

/// Parses and checks one call.
pub fn parse(call: &ToolCall) -> Result<Tool, String> {
    parse_among(call, &[])
}

/// Parses and checks one call of the declared tools or of `extra` (the bot's MCP tools, whose
/// arguments only need to be a JSON object: their server checks them against its schema).
pub fn parse_among(call: &ToolCall, extra: &[ToolSpec]) -> Result<Tool, String> {
    let Some(kind) = ToolKind::named(&call.name) else {
        if extra.iter().any(|t| t.name == call.name) {
            let arguments = args_of(call, &call.name, "{}")?;
            return Ok(Tool::Mcp { name: call.name.clone(), arguments });
        }
        let names: Vec<&str> = ToolKind::DECLARED.iter().map(|k| k.name()).chain(extra.iter().map(|t| t.name())).collect();
        return Err(format!("there is no tool named {:?}. The tools are: {}", call.name, names.join(", ")));
    };
    let batch = |actions: &Value| action::parse_batch(actions).map_err(|e| e.to_string());
    Ok(match kind {
        ToolKind::ClaudeComputer => claude_computer(&serde_json::from_str::<Value>(&call.raw).map_err(|e| format!("the arguments are not valid JSON ({e})"))?)?,
        ToolKind::OpenAiComputer => {
            openai_computer(&serde_json::from_str::<Value>(&call.raw).map_err(|e| format!("the computer call is not valid JSON ({e})"))?)?
        }
        ToolKind::ComputerObserve => {
            args::<Empty>(call, kind)?;
            Tool::Observe
        }
        ToolKind::ComputerAct => {
            let a: ActArgs = args(call, kind)?;
            let actions = batch(&a.actions)?;
            if a.settle_ms.is_some_and(|s| s > action::MAX_WAIT_MS) {
                return Err(format!("settle_ms is at most {}. Nothing was done", action::MAX_WAIT_MS));
            }
            Tool::Act { actions, settle_ms: a.settle_ms }
        }
        ToolKind::Shell => {
            let a: ShellArgs = args(call, kind)?;
            let timeout_s = a.timeout_s.unwrap_or(DEFAULT_SHELL_TIMEOUT_S);
            if timeout_s == 0 || timeout_s > MAX_SHELL_TIMEOUT_S {
                return Err(format!("timeout_s is 1 to {MAX_SHELL_TIMEOUT_S} seconds"));
            }
            Tool::Shell { command: nonempty("command", a.command)?, cwd: a.cwd, timeout_s }
        }
        ToolKind::ListFiles => Tool::ListFiles { path: args::<PathArgs>(call, kind)?.path.unwrap_or_else(|| ".".into()) },
        ToolKind::ReadFile => Tool::ReadFile { path: nonempty("path", args::<PathArgs>(call, kind)?.path.unwrap_or_default())? },
        ToolKind::WriteFile => {
            let a: WriteArgs = args(call, kind)?;
            if a.content.len() > MAX_WRITE_BYTES {
                return Err(format!("write_file takes at most {MAX_WRITE_BYTES} bytes; this content has {}. Nothing was written", a.content.len()));
            }
            Tool::WriteFile { path: nonempty("path", a.path)?, content: a.content, append: a.append }
        }
        ToolKind::AttachFile => {
            let a: AttachArgs = args(call, kind)?;
            Tool::AttachFile { path: nonempty("path", a.path)?, note: a.note }
        }
        ToolKind::OpenPath => Tool::OpenPath { target: nonempty("target", args::<TargetArgs>(call, kind)?.target)? },
        ToolKind::LaunchApp => Tool::LaunchApp { command: nonempty("command", args::<CommandArgs>(call, kind)?.command)? },
        ToolKind::RequestTakeover => Tool::RequestTakeover { reason: nonempty("reason", args::<ReasonArgs>(call, kind)?.reason)? },
        ToolKind::BrowserNavigate => {
            let url = args::<UrlArgs>(call, kind)?.url;
            browser::check_url(&url)?;
            Tool::BrowserNavigate { url }
        }
        ToolKind::BrowserSnapshot => {
            args::<Empty>(call, kind)?;
            Tool::BrowserSnapshot
        }
        ToolKind::BrowserAct => Tool::BrowserAct { actions: browser::parse_actions(&args::<BrowserActArgs>(call, kind)?.actions)? },
        ToolKind::FillLogin => Tool::FillLogin { site: nonempty("site", args::<SiteArgs>(call, kind)?.site)? },
        ToolKind::Mcp => return Err(format!("there is no tool named {:?}", call.name)),
    })
}

fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// The actions of Claude's `computer` tool (computer_20241022, computer_20250124 and
/// computer_20251124, as Anthropic's reference implementation carries them out), as our tools:
/// a screenshot is an observe, a zoom a close look, `wait` and `hold_key` wait on our side, and
/// everything else is one `computer_act` batch, checked like any other.
///
/// As in the reference: a click without a coordinate clicks where the pointer is; a click holds
/// the keys of its `key` (or `text`) while it clicks, a scroll those of its `text`; `key` takes
/// xdotool's form (`ctrl+shift+t`, several separated by spaces); `wait` and `hold_key` last up to
/// 100 s; `cursor_position` answers with the pointer's position in text.
fn claude_computer(input: &Value) -> Result<Tool, String> {
    let action = input["action"].as_str().ok_or("the computer tool needs an action")?;
    let given = |key: &str| input.get(key).filter(|v| !v.is_null());
    let point = |key: &str| -> Result<Option<(Value, Value)>, String> {
        match given(key).map(|v| v.as_array().map(Vec::as_slice)) {
            None => Ok(None),
            Some(Some([x, y])) if x.is_number() && y.is_number() => Ok(Some((x.clone(), y.clone()))),
            Some(_) => Err(format!("{action} needs {key} as [x, y]")),
        }
    };
    let need = |key: &str| point(key)?.ok_or(format!("{action} needs {key} as [x, y]"));
    let text = || given("text").and_then(Value::as_str).filter(|t| !t.is_empty()).ok_or(format!("{action} needs text"));
    // Keys held: "shift", "ctrl+shift" (xdotool's form).
    let keys = |field: &str| -> Vec<String> {
        given(field).and_then(Value::as_str).map(|k| k.split(['+', ' ']).filter(|p| !p.is_empty()).map(str::to_string).collect()).unwrap_or_default()
    };
    let seconds = || -> Result<u64, String> {
        let s = given("duration").and_then(Value::as_f64).ok_or(format!("{action} needs a duration in seconds"))?;
        if !(0.0..=MAX_WAIT_S).contains(&s) {
            return Err(format!("{action}'s duration is 0 to {MAX_WAIT_S} seconds, not {s}"));
        }
        Ok((s * 1000.0).round() as u64)
    };
    let checked = |v: Value| action::parse_batch(&v).map_err(|e| e.to_string());
    let actions = match action {
        "screenshot" => return Ok(Tool::Observe),
        "cursor_position" => return Ok(Tool::CursorPosition),
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            let button = match action {
                "right_click" => "right",
                "middle_click" => "middle",
                _ => "left",
            };
            let times = match action {
                "double_click" => 2,
                "triple_click" => 3,
                _ => 1,
            };
            let held = if given("key").is_some() { keys("key") } else { keys("text") };
            let clicks = match point("coordinate")? {
                Some((x, y)) => Value::Array(vec![json!({"type": "click", "x": x, "y": y, "button": button}); times]),
                // At the pointer: a press and a release where it is.
                None => Value::Array((0..times).flat_map(|_| [json!({"type": "down", "button": button}), json!({"type": "up", "button": button})]).collect()),
            };
            action::holding(&held, checked(clicks)?)
        }
        "mouse_move" => {
            let (x, y) = need("coordinate")?;
            checked(json!([{"type": "move", "x": x, "y": y}]))?
        }
        "left_click_drag" => {
            let ((x, y), (to_x, to_y)) = (need("start_coordinate")?, need("coordinate")?);
            checked(json!([{"type": "drag", "x": x, "y": y, "to_x": to_x, "to_y": to_y}]))?
        }
        "left_mouse_down" | "left_mouse_up" => {
            let kind = if action == "left_mouse_down" { "down" } else { "up" };
            match point("coordinate")? {
                Some((x, y)) => checked(json!([{"type": kind, "x": x, "y": y}]))?,
                None => checked(json!([{"type": kind}]))?,
            }
        }
        "type" => checked(json!([{"type": "type", "text": text()?}]))?,
        "key" => {
            // xdotool's form: combos joined by '+', several separated by spaces.
            let combos = text()?;
            let mut batch = vec![];
            for combo in combos.split_whitespace() {
                let mut parts: Vec<&str> = combo.split('+').collect();
                let key = parts.pop().filter(|k| !k.is_empty()).ok_or(format!("key {combo:?} names no key"))?;
                batch.push(json!({"type": "key", "key": key, "modifiers": parts}));
            }
            checked(Value::Array(batch))?
        }
        "scroll" => {
            let direction = given("scroll_direction").and_then(Value::as_str).ok_or("scroll needs scroll_direction (up, down, left or right)")?;
            let amount = match given("scroll_amount") {
                None => 3,
                Some(v) => v.as_u64().ok_or("scroll_amount is a whole number of wheel clicks")?,
            };
            if amount > 20 * action::MAX_BATCH as u64 / 2 {
                return Err(format!("scroll_amount is at most {}", 20 * action::MAX_BATCH / 2));
            }
            let at = point("coordinate")?;
            let mut batch: Vec<Value> = vec![];
            if let Some((x, y)) = &at {
                batch.push(json!({"type": "move", "x": x, "y": y}));
            }
            // A long scroll is several turns of the wheel of at most 20 clicks each.
            let mut left = amount;
            while left > 0 {
                let n = left.min(20);
                batch.push(json!({"type": "scroll", "direction": direction, "amount": n}));
                left -= n;
            }
            action::holding(&keys("text"), checked(Value::Array(batch))?)
        }
        "hold_key" => {
            let held = keys("text");
            if held.is_empty() {
                return Err("hold_key needs text: the key to hold, e.g. \"shift\"".into());
            }
            return Ok(Tool::HoldKey { keys: held, ms: seconds()? });
        }
        "wait" => return Ok(Tool::Wait { ms: seconds()? }),
        "zoom" => {
            let region = match given("region").and_then(Value::as_array).map(Vec::as_slice) {
                Some([a, b, c, d]) => [a, b, c, d].map(|v| v.as_u64().filter(|&v| v as f64 <= action::MAX_COORD).map(|v| v as u32)),
                _ => [None; 4],
            };
            return match region {
                [Some(a), Some(b), Some(c), Some(d)] => Ok(Tool::Zoom { region: [a, b, c, d] }),
                _ => Err("zoom needs region as [left, top, right, bottom], whole numbers of the screen".into()),
            };
        }
        other => return Err(format!("the computer tool has no action {other:?}")),
    };
    Ok(Tool::Act { actions, settle_ms: None })
}

/// A computer call of OpenAI's computer use (Responses API reference, `computer_call`): its
/// `action` (or the GA tool's `actions`, carried out in order) as our tools, behind the safety
/// checks pending on it. Coordinates are screenshot pixels. Keys come in the sample app's names
/// (`CTRL`, `ENTER`, `ARROWLEFT`); a scroll is in pixels (a wheel click is about 100).
fn openai_computer(input: &Value) -> Result<Tool, String> {
    let checks: Vec<SafetyCheck> = match input.get("pending_safety_checks").filter(|c| !c.is_null()) {
        Some(c) => serde_json::from_value(c.clone()).map_err(|e| format!("unreadable pending_safety_checks ({e})"))?,
        None => vec![],
    };
    let actions: Vec<Value> = match (input.get("actions").and_then(Value::as_array), input.get("action").filter(|a| a.is_object())) {
        (Some(list), _) if !list.is_empty() => list.clone(),
        (_, Some(one)) => vec![one.clone()],
        _ => return Err("the computer call has no action".into()),
    };
    let mut batch: Vec<Action> = vec![];
    let mut then_wait = None;
    let num = |a: &Value, k: &str| a.get(k).and_then(Value::as_f64).ok_or(format!("{} needs {k}", a["type"].as_str().unwrap_or("an action")));
    for a in &actions {
        let held: Vec<String> = a["keys"].as_array().map(|k| k.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect()).unwrap_or_default();
        let raw = match a["type"].as_str().unwrap_or("") {
            "screenshot" => continue,
            "wait" => {
                then_wait = Some(2000);
                continue;
            }
            "click" => {
                let (x, y) = (num(a, "x")?, num(a, "y")?);
                match a["button"].as_str().unwrap_or("left") {
                    // The mouse's back and forward buttons: the browser's history.
                    "back" => json!([{"type": "key", "key": "Left", "modifiers": ["alt"]}]),
                    "forward" => json!([{"type": "key", "key": "Right", "modifiers": ["alt"]}]),
                    "wheel" => json!([{"type": "click", "x": x, "y": y, "button": "middle", "modifiers": held}]),
                    b @ ("left" | "right") => json!([{"type": "click", "x": x, "y": y, "button": b, "modifiers": held}]),
                    other => return Err(format!("click has no button {other:?}")),
                }
            }
            "double_click" => json!([{"type": "double_click", "x": num(a, "x")?, "y": num(a, "y")?, "modifiers": held}]),
            "move" => json!([{"type": "move", "x": num(a, "x")?, "y": num(a, "y")?}]),
            "drag" => {
                let path = a["path"].as_array().filter(|p| p.len() >= 2).ok_or("drag needs a path of at least two points")?;
                let point = |p: &Value| -> Result<(f64, f64), String> {
                    match (p.get("x").and_then(Value::as_f64), p.get("y").and_then(Value::as_f64), p.as_array()) {
                        (Some(x), Some(y), _) => Ok((x, y)),
                        (_, _, Some(xy)) if xy.len() == 2 => Ok((xy[0].as_f64().unwrap_or(-1.0), xy[1].as_f64().unwrap_or(-1.0))),
                        _ => Err("a drag path is made of {x, y} points".into()),
                    }
                };
                let (x0, y0) = point(&path[0])?;
                let mut steps = vec![json!({"type": "down", "x": x0, "y": y0})];
                for p in &path[1..path.len() - 1] {
                    let (x, y) = point(p)?;
                    steps.push(json!({"type": "move", "x": x, "y": y}));
                }
                let (x1, y1) = point(&path[path.len() - 1])?;
                steps.push(json!({"type": "up", "x": x1, "y": y1}));
                let mut b = action::parse_batch(&Value::Array(steps)).map_err(|e| e.to_string())?;
                if !held.is_empty() {
                    b = action::holding(&held, b);
                }
                batch.extend(b);
                continue;
            }
            "keypress" => {
                let keys: Vec<String> =
                    a["keys"].as_array().map(|k| k.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect()).unwrap_or_default();
                let (key, mods) = keys.split_last().ok_or("keypress needs keys")?;
                json!([{"type": "key", "key": key, "modifiers": mods}])
            }
            "type" => json!([{"type": "type", "text": a["text"].as_str().filter(|t| !t.is_empty()).ok_or("type needs text")?}]),
            "scroll" => {
                let (x, y) = (num(a, "x")?, num(a, "y")?);
                let (sx, sy) = (a["scroll_x"].as_f64().unwrap_or(0.0), a["scroll_y"].as_f64().unwrap_or(0.0));
                let clicks = |px: f64| ((px.abs() / 100.0).ceil() as u32).clamp(1, 20);
                let mut steps = vec![json!({"type": "move", "x": x, "y": y})];
                if sy != 0.0 {
                    steps.push(json!({"type": "scroll", "direction": if sy > 0.0 { "down" } else { "up" }, "amount": clicks(sy), "modifiers": held}));
                }
                if sx != 0.0 {
                    steps.push(json!({"type": "scroll", "direction": if sx > 0.0 { "right" } else { "left" }, "amount": clicks(sx), "modifiers": held}));
                }
                Value::Array(steps)
            }
            other => return Err(format!("the computer call has no action {other:?}")),
        };
        batch.extend(action::parse_batch(&raw).map_err(|e| e.to_string())?);
    }
    if batch.len() > action::MAX_BATCH {
        return Err(action::ActionError::TooMany(batch.len()).to_string());
    }
    let tool = match (batch.is_empty(), then_wait) {
        (true, None) => Tool::Observe,
        (true, Some(ms)) => Tool::Wait { ms },
        (false, wait) => {
            if let Some(ms) = wait {
                batch.push(Action::Wait { ms });
            }
            Tool::Act { actions: batch, settle_ms: None }
        }
    };
    Ok(if checks.is_empty() { tool } else { Tool::SafetyChecked { checks, then: Box::new(tool) } })
}

/// Every tool we declare, as a model that points in `coords` sees it.
pub fn specs(coords: action::CoordSpace) -> Vec<ToolSpec> {
    ToolKind::DECLARED.iter().filter_map(|k| k.spec(coords)).collect()
}

/// Where a reply first points on the screen, in the model's own coordinates, whatever its dialect:
/// the first click (or move) of a `computer_act`, of Claude's computer tool, of an OpenAI computer
/// call, or of UI-TARS's text actions. For `botdesk model calibrate`.
pub fn pointed_at(text: &str, calls: &[crate::conversation::ToolCall]) -> Option<(f64, f64)> {
    let from_actions = |actions: &Value| -> Option<(f64, f64)> {
        actions.as_array()?.iter().find_map(|a| match a["type"].as_str()? {
            "click" | "double_click" | "move" => Some((a["x"].as_f64()?, a["y"].as_f64()?)),
            _ => None,
        })
    };
    for c in calls {
        let input: Value = serde_json::from_str(&c.raw).ok()?;
        let found = match ToolKind::named(&c.name)? {
            ToolKind::ComputerAct => from_actions(&input["actions"]),
            ToolKind::ClaudeComputer => input["coordinate"].as_array().and_then(|p| Some((p.first()?.as_f64()?, p.get(1)?.as_f64()?))),
            ToolKind::OpenAiComputer => {
                let a = if input["action"].is_object() { input["action"].clone() } else { input["actions"][0].clone() };
                Some((a["x"].as_f64()?, a["y"].as_f64()?))
            }
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    match crate::uitars::actions(text) {
        Some(Ok(crate::uitars::Actions::Calls(calls))) => calls.iter().find_map(|(_, args)| from_actions(&args["actions"])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, raw: &str) -> ToolCall {
        ToolCall::new("c1".into(), name.into(), raw.into())
    }

    /// A call of one of the bot's MCP tools keeps its arguments for the server; only a JSON
    /// object passes, and an unknown name lists the MCP tools beside ours.
    #[test]
    fn mcp_tools_parse_among_ours() {
        let extra = [ToolSpec { kind: ToolKind::Mcp, name: "notes__add".into(), description: "adds".into(), schema: json!({"type": "object"}) }];
        let got = parse_among(&call("notes__add", r#"{"text":"hi","n":2}"#), &extra).unwrap();
        assert_eq!(got, Tool::Mcp { name: "notes__add".into(), arguments: json!({"text": "hi", "n": 2}).as_object().unwrap().clone() });
        assert_eq!(parse_among(&call("notes__add", ""), &extra).unwrap(), Tool::Mcp { name: "notes__add".into(), arguments: Default::default() });
        let e = parse_among(&call("notes__add", "[1]"), &extra).unwrap_err();
        assert!(e.contains("notes__add must be a JSON object"), "{e}");
        let e = parse_among(&call("notes__del", "{}"), &extra).unwrap_err();
        assert!(e.contains("there is no tool named \"notes__del\"") && e.contains("browser_act, notes__add"), "{e}");
        assert!(parse(&call("notes__add", "{}")).is_err(), "not without the bot's servers");
        assert!(parse(&call("mcp", "{}")).is_err(), "the kind's own name is no tool");
    }

    #[test]
    fn good_calls_parse() {
        assert_eq!(parse(&call("computer_observe", "")).unwrap(), Tool::Observe);
        assert_eq!(parse(&call("shell", r#"{"command":"ls"}"#)).unwrap(), Tool::Shell { command: "ls".into(), cwd: None, timeout_s: DEFAULT_SHELL_TIMEOUT_S });
        assert_eq!(parse(&call("list_files", "{}")).unwrap(), Tool::ListFiles { path: ".".into() });
        assert!(matches!(parse(&call("computer_act", r#"{"actions":[{"type":"click","x":1,"y":2}]}"#)).unwrap(), Tool::Act { .. }));
        assert!(matches!(parse(&call("browser_act", r#"{"actions":[{"action":"fill","ref":"e2","text":"x"}]}"#)).unwrap(), Tool::BrowserAct { .. }));
    }

    #[test]
    fn malformed_calls_get_clear_errors() {
        let e = parse(&call("shell", "{\"command\": ")).unwrap_err();
        assert!(e.contains("not valid JSON") && e.contains(r#"{"command":"ls -la"}"#), "{e}");
        let e = parse(&call("teleport", "{}")).unwrap_err();
        assert!(e.contains("no tool named \"teleport\"") && e.contains("computer_act"), "{e}");
        let e = parse(&call("shell", r#"{"command": 5}"#)).unwrap_err();
        assert!(e.contains("bad arguments for shell") && e.contains("expected a string"), "{e}");
        let e = parse(&call("read_file", r#"["a"]"#)).unwrap_err();
        assert!(e.contains("must be a JSON object"), "{e}");
        let e = parse(&call("shell", r#"{"command":"ls","sudo":true}"#)).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let batch: Vec<Value> = (0..25).map(|i| json!({"type": "move", "x": i, "y": i})).collect();
        let e = parse(&call("computer_act", &json!({ "actions": batch }).to_string())).unwrap_err();
        assert!(e.contains("at most 24 actions") && e.contains("Nothing was done"), "{e}");
        assert!(parse(&call("browser_navigate", r#"{"url":"file:///etc/passwd"}"#)).unwrap_err().contains("only http and https"));
        assert!(parse(&call("shell", r#"{"command":"  "}"#)).unwrap_err().contains("must not be empty"));
    }

    #[test]
    fn every_spec_is_an_object_schema_and_parses_its_example() {
        for s in specs(Default::default()) {
            assert_eq!(s.schema["type"], "object", "{}", s.name());
            assert_eq!(ToolKind::named(s.name()), Some(s.kind));
            parse(&call(s.name(), s.kind.example())).unwrap_or_else(|e| panic!("{}: {e}", s.name()));
        }
        assert_eq!(specs(Default::default()).len(), 13);
        let claude = ToolKind::ClaudeComputer;
        assert!(claude.spec(Default::default()).is_none() && claude.graphical() && ToolKind::named("computer") == Some(claude));
        assert_eq!(parse(&call("computer", claude.example())).unwrap(), Tool::Observe);
        assert!(!ToolKind::Shell.graphical() && ToolKind::BrowserAct.graphical() && ToolKind::RequestTakeover.graphical());
    }
}

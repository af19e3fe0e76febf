//! The tools a bot sees: their specs for the model, and the parse of a call into a
//! checked [`Tool`]. A malformed call (bad JSON, unknown tool, wrong types, a limit exceeded)
//! becomes a clear error for the model; nothing reaches the computer.

use serde::Deserialize;
use serde_json::{json, Value};

use botdesk_core::{action, browser};

use crate::conversation::{ToolCall, ToolSpec};

/// `read_file` returns UTF-8 text up to this size.
pub const MAX_READ_BYTES: u64 = 250_000;
/// `write_file` content limit.
pub const MAX_WRITE_BYTES: usize = 10 << 20;
pub const DEFAULT_SHELL_TIMEOUT_S: u64 = 120;
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
    Act {
        actions: Value,
        settle_ms: Option<u64>,
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
        actions: Value,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

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

fn args<T: for<'de> Deserialize<'de>>(call: &ToolCall) -> Result<T, String> {
    let raw = call.raw.trim();
    let value: Value = if raw.is_empty() {
        json!({})
    } else {
        serde_json::from_str(raw)
            .map_err(|e| format!("the arguments of {} are not valid JSON ({e}). Send one JSON object, e.g. {}", call.name, example(&call.name)))?
    };
    if !value.is_object() {
        return Err(format!("the arguments of {} must be a JSON object, e.g. {}", call.name, example(&call.name)));
    }
    serde_json::from_value(value).map_err(|e| format!("bad arguments for {}: {e}. Expected e.g. {}", call.name, example(&call.name)))
}

fn example(name: &str) -> &'static str {
    match name {
        "computer_act" => r#"{"actions":[{"type":"click","x":100,"y":200}]}"#,
        "shell" => r#"{"command":"ls -la"}"#,
        "list_files" => r#"{"path":"."}"#,
        "read_file" | "attach_file" => r#"{"path":"notes.txt"}"#,
        "write_file" => r#"{"path":"notes.txt","content":"hello"}"#,
        "open_path" => r#"{"target":"report.html"}"#,
        "launch_app" => r#"{"command":"xterm"}"#,
        "request_takeover" => r#"{"reason":"please log in to the site"}"#,
        "browser_navigate" => r#"{"url":"https://example.org/"}"#,
        "browser_act" => r#"{"actions":[{"action":"click","ref":"e3"}]}"#,
        _ => "{}",
    }
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
    Ok(match call.name.as_str() {
        // Claude's own computer-use tool (see `crate::client::Dialect`).
        "computer" => claude_computer(&serde_json::from_str::<Value>(&call.raw).map_err(|e| format!("the arguments are not valid JSON ({e})"))?)?,
        "computer_observe" => {
            args::<Empty>(call)?;
            Tool::Observe
        }
        "computer_act" => {
            let a: ActArgs = args(call)?;
            action::parse_batch(&a.actions).map_err(|e| e.to_string())?;
            if a.settle_ms.is_some_and(|s| s > action::MAX_WAIT_MS) {
                return Err(format!("settle_ms is at most {}. Nothing was done", action::MAX_WAIT_MS));
            }
            Tool::Act { actions: a.actions, settle_ms: a.settle_ms }
        }
        "shell" => {
            let a: ShellArgs = args(call)?;
            let timeout_s = a.timeout_s.unwrap_or(DEFAULT_SHELL_TIMEOUT_S);
            if timeout_s == 0 || timeout_s > MAX_SHELL_TIMEOUT_S {
                return Err(format!("timeout_s is 1 to {MAX_SHELL_TIMEOUT_S} seconds"));
            }
            Tool::Shell { command: nonempty("command", a.command)?, cwd: a.cwd, timeout_s }
        }
        "list_files" => Tool::ListFiles { path: args::<PathArgs>(call)?.path.unwrap_or_else(|| ".".into()) },
        "read_file" => Tool::ReadFile { path: nonempty("path", args::<PathArgs>(call)?.path.unwrap_or_default())? },
        "write_file" => {
            let a: WriteArgs = args(call)?;
            if a.content.len() > MAX_WRITE_BYTES {
                return Err(format!("write_file takes at most {MAX_WRITE_BYTES} bytes; this content has {}. Nothing was written", a.content.len()));
            }
            Tool::WriteFile { path: nonempty("path", a.path)?, content: a.content, append: a.append }
        }
        "attach_file" => {
            let a: AttachArgs = args(call)?;
            Tool::AttachFile { path: nonempty("path", a.path)?, note: a.note }
        }
        "open_path" => Tool::OpenPath { target: nonempty("target", args::<TargetArgs>(call)?.target)? },
        "launch_app" => Tool::LaunchApp { command: nonempty("command", args::<CommandArgs>(call)?.command)? },
        "request_takeover" => Tool::RequestTakeover { reason: nonempty("reason", args::<ReasonArgs>(call)?.reason)? },
        "browser_navigate" => {
            let url = args::<UrlArgs>(call)?.url;
            browser::check_url(&url)?;
            Tool::BrowserNavigate { url }
        }
        "browser_snapshot" => {
            args::<Empty>(call)?;
            Tool::BrowserSnapshot
        }
        "browser_act" => {
            let a: BrowserActArgs = args(call)?;
            browser::parse_actions(&a.actions)?;
            Tool::BrowserAct { actions: a.actions }
        }
        other => {
            let names: Vec<&str> = specs().iter().map(|s| s.name).collect();
            return Err(format!("there is no tool named {other:?}. The tools are: {}", names.join(", ")));
        }
    })
}

fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// Every tool, as the model sees it.
/// The actions of Claude's `computer` tool (computer_20250124, and computer_20251124's `zoom`), as
/// our tools: a screenshot is an observe, a zoom a close look, everything else one `computer_act`
/// batch, checked like any other.
fn claude_computer(input: &Value) -> Result<Tool, String> {
    let action = input["action"].as_str().ok_or("the computer tool needs an action")?;
    let point = |key: &str| -> Result<(Value, Value), String> {
        match input[key].as_array().map(Vec::as_slice) {
            Some([x, y]) => Ok((x.clone(), y.clone())),
            _ => Err(format!("{action} needs {key} as [x, y]")),
        }
    };
    let text = || input["text"].as_str().filter(|t| !t.is_empty()).ok_or(format!("{action} needs text"));
    let actions = match action {
        "screenshot" | "cursor_position" => return Ok(Tool::Observe),
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            if input.get("text").is_some_and(|t| !t.is_null()) {
                return Err(format!("{action} with keys held is not supported here: use left_mouse_down/up with key, or the keyboard"));
            }
            let (x, y) = point("coordinate")?;
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
            Value::Array(vec![json!({"type": "click", "x": x, "y": y, "button": button}); times])
        }
        "mouse_move" => {
            let (x, y) = point("coordinate")?;
            json!([{"type": "move", "x": x, "y": y}])
        }
        "left_click_drag" => {
            let ((x, y), (to_x, to_y)) = (point("start_coordinate")?, point("coordinate")?);
            json!([{"type": "drag", "x": x, "y": y, "to_x": to_x, "to_y": to_y}])
        }
        "left_mouse_down" | "left_mouse_up" => {
            let kind = if action == "left_mouse_down" { "down" } else { "up" };
            match input.get("coordinate").filter(|c| !c.is_null()) {
                Some(_) => {
                    let (x, y) = point("coordinate")?;
                    json!([{"type": kind, "x": x, "y": y}])
                }
                None => json!([{"type": kind}]),
            }
        }
        "type" => json!([{"type": "type", "text": text()?}]),
        "key" => {
            // xdotool's form, e.g. "ctrl+shift+t" or "Return".
            let combo = text()?;
            let mut parts: Vec<&str> = combo.split('+').collect();
            let key = parts.pop().filter(|k| !k.is_empty()).ok_or(format!("key {combo:?} names no key"))?;
            json!([{"type": "key", "key": key, "modifiers": parts}])
        }
        "scroll" => {
            let (x, y) = point("coordinate")?;
            let direction = input["scroll_direction"].as_str().ok_or("scroll needs scroll_direction")?;
            json!([{"type": "scroll", "x": x, "y": y, "direction": direction, "amount": input["scroll_amount"].as_u64().unwrap_or(3)}])
        }
        "wait" => {
            let s = input["duration"].as_f64().filter(|s| s.is_finite() && *s >= 0.0).ok_or("wait needs a duration in seconds")?;
            json!([{"type": "wait", "ms": (s * 1000.0).round().min(u64::MAX as f64) as u64}])
        }
        "zoom" => {
            let region = match input["region"].as_array().map(Vec::as_slice) {
                Some([a, b, c, d]) => [a, b, c, d].map(|v| v.as_u64().filter(|&v| v as f64 <= action::MAX_COORD).map(|v| v as u32)),
                _ => [None; 4],
            };
            return match region {
                [Some(a), Some(b), Some(c), Some(d)] => Ok(Tool::Zoom { region: [a, b, c, d] }),
                _ => Err("zoom needs region as [left, top, right, bottom], whole numbers of the screen".into()),
            };
        }
        "hold_key" => return Err("hold_key is not supported here: use key with modifiers (e.g. ctrl+c)".into()),
        other => return Err(format!("the computer tool has no action {other:?}")),
    };
    action::parse_batch(&actions).map_err(|e| e.to_string())?;
    Ok(Tool::Act { actions, settle_ms: None })
}

pub fn specs() -> Vec<ToolSpec> {
    let path = |d: &str| json!({"type": "string", "description": d});
    vec![
        ToolSpec {
            name: "computer_observe",
            description: "Take a screenshot of your desktop. Returns the screen size, the cursor position, the active window and the screenshot; when nothing changed since your last look, no image is sent.",
            schema: schema(json!({}), &[]),
        },
        ToolSpec {
            name: "computer_act",
            description: "Perform up to 24 mouse and keyboard actions on your desktop, then wait until the screen changed and stayed still for settle_ms (default 300; at most 3 s in all), say what it saw and return a new screenshot. Coordinates are absolute screen pixels. Each action is an object with a `type`: click, double_click, move, down, up (x, y, button left|right|middle), drag (x, y, to_x, to_y), type (text), key (key, modifiers such as [\"ctrl\"]), scroll (x, y, direction up|down|left|right, amount 1-20), wait (ms 0-5000).",
            schema: schema(
                json!({
                    "actions": {"type": "array", "maxItems": 24, "items": {"type": "object", "properties": {"type": {"type": "string", "enum": ["click", "double_click", "move", "down", "up", "drag", "type", "key", "scroll", "wait"]}}, "required": ["type"]}},
                    "settle_ms": {"type": "integer", "minimum": 0, "maximum": 5000}
                }),
                &["actions"],
            ),
        },
        ToolSpec {
            name: "shell",
            description: "Run a shell command (sh -c) on your computer, in your folder unless cwd says otherwise. Returns the exit code and the output (stdout and stderr, the last 12,000 characters).",
            schema: schema(json!({"command": {"type": "string"}, "cwd": path("working directory, relative to your folder"), "timeout_s": {"type": "integer", "minimum": 1, "maximum": 1800}}), &["command"]),
        },
        ToolSpec { name: "list_files", description: "List a folder of your workspace (relative paths are in your folder; shared/ is shared with the other bots of this computer).", schema: schema(json!({"path": path("folder, default .")}), &[]) },
        ToolSpec { name: "read_file", description: "Read a UTF-8 text file of at most 250,000 bytes from your workspace.", schema: schema(json!({"path": path("file")}), &["path"]) },
        ToolSpec {
            name: "write_file",
            description: "Write a text file in your workspace (folders are created; an existing file is replaced, or with append: true added to). Write a long file in parts: the first, then the rest with append: true.",
            schema: schema(json!({"path": path("file"), "content": {"type": "string"}, "append": {"type": "boolean"}}), &["path", "content"]),
        },
        ToolSpec { name: "attach_file", description: "Show a file of your workspace to the person in the chat, e.g. your final report.", schema: schema(json!({"path": path("file"), "note": {"type": "string"}}), &["path"]) },
        ToolSpec { name: "open_path", description: "Open a file of your workspace or an http(s) URL on your desktop (URLs open in your browser).", schema: schema(json!({"target": path("file path or URL")}), &["target"]) },
        ToolSpec { name: "launch_app", description: "Start a graphical program on your desktop (e.g. xterm) and return at once.", schema: schema(json!({"command": {"type": "string"}}), &["command"]) },
        ToolSpec {
            name: "request_takeover",
            description: "Ask the person to take control of your screen (e.g. to log in or solve a captcha). Waits until they hand it back; returns finished or skipped.",
            schema: schema(json!({"reason": {"type": "string", "description": "what you need the person to do"}}), &["reason"]),
        },
        ToolSpec { name: "browser_navigate", description: "Open an http(s) URL in your browser (on your desktop).", schema: schema(json!({"url": {"type": "string"}}), &["url"]) },
        ToolSpec { name: "browser_snapshot", description: "The page in your browser as text, with up to 80 interactive elements and their refs (e1, e2, ...); passwords are masked.", schema: schema(json!({}), &[]) },
        ToolSpec {
            name: "browser_act",
            description: "Click, fill or type into elements of the page by the refs of your latest browser_snapshot, e.g. [{\"action\":\"fill\",\"ref\":\"e3\",\"text\":\"hello\"},{\"action\":\"click\",\"ref\":\"e4\"}].",
            schema: schema(
                json!({"actions": {"type": "array", "maxItems": 24, "items": {"type": "object", "properties": {"action": {"type": "string", "enum": ["click", "fill", "type"]}, "ref": {"type": "string"}, "text": {"type": "string"}}, "required": ["action", "ref"]}}}),
                &["actions"],
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, raw: &str) -> ToolCall {
        ToolCall::new("c1".into(), name.into(), raw.into())
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
        for s in specs() {
            assert_eq!(s.schema["type"], "object", "{}", s.name);
            let ex = example(s.name);
            parse(&call(s.name, ex)).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
        assert_eq!(specs().len(), 13);
    }
}

//! UI-TARS's own text actions. Served without a tool-call parser (vLLM, Ollama), UI-TARS answers
//! in text, as it was trained (UI-TARS README and its computer-use prompt):
//!
//! ```text
//! Thought: The search box is at the top.
//! Action: click(start_box='<|box_start|>(644,406)<|box_end|>')
//! ```
//!
//! This reads such a reply into our tools: clicks (`click`, `left_single`, `left_double`,
//! `right_single`, `hover`), `drag`/`select`, `hotkey`, `type`, `scroll`, `wait`, `call_user`
//! (the person is asked) and `finished` (the run's answer). Points come as `(x,y)` or
//! `<point>x y</point>`, boxes as `(x1,y1,x2,y2)` (their centre); they stay in the model's own
//! coordinates (UI-TARS-1.5: pixels of its smart-resized image; 1.0: 0-1000), which the engine
//! places on the screen like any other call of the model.

use serde_json::{json, Value};

/// What a text reply of UI-TARS asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Actions {
    /// Tool calls, `(name, arguments)` in order.
    Calls(Vec<(String, Value)>),
    /// The task is done: its answer.
    Finished(String),
}

/// How UI-TARS is told to answer when its server does not make tool calls (appended to the
/// system prompt).
pub const ACTION_SPACE: &str = "\n\nYou may also answer in text, one action per reply, as:\nThought: what you see and will do next\nAction: one of\n\
click(start_box='(x,y)')\nleft_double(start_box='(x,y)')\nright_single(start_box='(x,y)')\ndrag(start_box='(x1,y1)', end_box='(x2,y2)')\n\
hotkey(key='ctrl c')\ntype(content='text')   (end with \\n to press Enter)\nscroll(start_box='(x,y)', direction='down')   (up, down, left or right)\n\
wait()   (5 seconds, then a new screenshot)\ncall_user()   (when you need the person: a login, a captcha, a decision)\nfinished(content='your answer')";

/// The actions in a reply, if it holds any (`Action:` lines); None: plain text.
pub fn actions(reply: &str) -> Option<Result<Actions, String>> {
    let lines: Vec<&str> = reply.lines().filter_map(|l| l.trim().strip_prefix("Action:")).map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    let thought = reply.lines().find_map(|l| l.trim().strip_prefix("Thought:")).map(str::trim).unwrap_or("").to_string();
    let mut calls = vec![];
    // An action line may hold several, separated by blank lines in the model's own format.
    for line in lines.iter().flat_map(|l| l.split(")\n\n")) {
        match one(line, &thought) {
            Ok(Step::Call(name, args)) => calls.push((name.to_string(), args)),
            Ok(Step::Finished(content)) => return Some(Ok(Actions::Finished(content))),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(Actions::Calls(calls)))
}

enum Step {
    Call(&'static str, Value),
    Finished(String),
}

fn one(action: &str, thought: &str) -> Result<Step, String> {
    let (name, rest) = action.split_once('(').ok_or_else(|| format!("the action {action:?} is not name(arguments)"))?;
    let args = rest.trim_end().strip_suffix(')').ok_or_else(|| format!("the action {action:?} is not closed with ')'"))?;
    let arg = |key: &str| named(args, key);
    let point = |keys: &[&str]| -> Result<(f64, f64), String> {
        let v = keys.iter().find_map(|k| arg(k)).ok_or_else(|| format!("{name} needs {}", keys[0]))?;
        centre(&v).ok_or_else(|| format!("{name}'s {} is not a point: {v:?}", keys[0]))
    };
    let act = |actions: Value| Ok(Step::Call("computer_act", json!({ "actions": actions })));
    match name.trim() {
        "click" | "left_single" => {
            let (x, y) = point(&["start_box", "point"])?;
            act(json!([{"type": "click", "x": x, "y": y}]))
        }
        "left_double" => {
            let (x, y) = point(&["start_box", "point"])?;
            act(json!([{"type": "double_click", "x": x, "y": y}]))
        }
        "right_single" => {
            let (x, y) = point(&["start_box", "point"])?;
            act(json!([{"type": "click", "x": x, "y": y, "button": "right"}]))
        }
        "hover" => {
            let (x, y) = point(&["start_box", "point"])?;
            act(json!([{"type": "move", "x": x, "y": y}]))
        }
        "drag" | "select" => {
            let (x, y) = point(&["start_box", "start_point"])?;
            let (to_x, to_y) = point(&["end_box", "end_point"])?;
            act(json!([{"type": "drag", "x": x, "y": y, "to_x": to_x, "to_y": to_y}]))
        }
        "hotkey" => {
            let keys = arg("key").or_else(|| arg("hotkey")).ok_or("hotkey needs key, e.g. key='ctrl c'")?;
            let mut parts: Vec<&str> = keys.split_whitespace().collect();
            let key = parts.pop().ok_or("hotkey's key is empty")?;
            act(json!([{"type": "key", "key": key, "modifiers": parts}]))
        }
        "type" => {
            let content = arg("content").ok_or("type needs content")?;
            // A trailing newline submits: typed as Enter.
            match content.strip_suffix('\n') {
                Some("") => act(json!([{"type": "key", "key": "Return"}])),
                Some(text) => act(json!([{"type": "type", "text": text}, {"type": "key", "key": "Return"}])),
                None => act(json!([{"type": "type", "text": content}])),
            }
        }
        "scroll" => {
            let direction = arg("direction").unwrap_or_else(|| "down".into());
            let direction = direction.trim().to_ascii_lowercase();
            if !matches!(direction.as_str(), "up" | "down" | "left" | "right") {
                return Err(format!("scroll's direction is up, down, left or right, not {direction:?}"));
            }
            match point(&["start_box", "point"]) {
                Ok((x, y)) => act(json!([{"type": "scroll", "x": x, "y": y, "direction": direction, "amount": 5}])),
                Err(_) => act(json!([{"type": "scroll", "direction": direction, "amount": 5}])),
            }
        }
        "wait" => act(json!([{"type": "wait", "ms": 5000}])),
        "call_user" => Ok(Step::Call(
            "request_takeover",
            json!({ "reason": if thought.is_empty() { "UI-TARS needs you to do something on the screen" } else { thought } }),
        )),
        "finished" => Ok(Step::Finished(arg("content").unwrap_or_else(|| thought.to_string()))),
        other => Err(format!("UI-TARS has no action {other:?} here")),
    }
}

/// The value of `key='…'` (or `"…"`) in an action's arguments, with Python's escapes read.
fn named(args: &str, key: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = args[from..].find(key) {
        let start = from + at;
        from = start + key.len();
        // A whole argument name: not the end of another one (`start_box` in `xstart_box`).
        if args[..start].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = args[from..].trim_start().strip_prefix('=')?.trim_start();
        let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let mut out = String::new();
        let mut chars = rest[1..].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    other => out.push(other),
                },
                c if c == quote => return Some(out),
                c => out.push(c),
            }
        }
        return None;
    }
    None
}

/// The point a box or point names: `(x,y)`, `(x1,y1,x2,y2)` (its centre), `<point>x y</point>`,
/// `<|box_start|>(x,y)<|box_end|>`, `[x, y]`.
fn centre(v: &str) -> Option<(f64, f64)> {
    let nums: Vec<f64> =
        v.split(|c: char| !(c.is_ascii_digit() || c == '.')).filter(|s| !s.is_empty() && *s != ".").map(|s| s.parse::<f64>()).collect::<Result<_, _>>().ok()?;
    match nums.as_slice() {
        [x, y] => Some((*x, *y)),
        [x1, y1, x2, y2] => Some(((x1 + x2) / 2.0, (y1 + y2) / 2.0)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(reply: &str) -> Vec<(String, Value)> {
        match actions(reply) {
            Some(Ok(Actions::Calls(c))) => c,
            other => panic!("{reply:?}: {other:?}"),
        }
    }

    #[test]
    fn every_trained_form_of_an_action_is_read() {
        let click = |x: f64, y: f64| ("computer_act".to_string(), json!({"actions": [{"type": "click", "x": x, "y": y}]}));
        assert_eq!(calls("Thought: the button.\nAction: click(start_box='(644,406)')"), [click(644.0, 406.0)]);
        assert_eq!(calls("Action: click(start_box='<|box_start|>(644,406)<|box_end|>')"), [click(644.0, 406.0)]);
        assert_eq!(calls("Action: click(point='<point>644 406</point>')"), [click(644.0, 406.0)]);
        assert_eq!(calls("Action: click(start_box='(640,400,648,412)')"), [click(644.0, 406.0)], "a box's centre");
        assert_eq!(calls("Action: left_double(start_box='(1,2)')")[0].1["actions"][0]["type"], "double_click");
        assert_eq!(calls("Action: right_single(start_box='(1,2)')")[0].1["actions"][0]["button"], "right");
        let drag = calls("Action: drag(start_box='(1,2)', end_box='(30,40)')");
        assert_eq!(drag[0].1, json!({"actions": [{"type": "drag", "x": 1.0, "y": 2.0, "to_x": 30.0, "to_y": 40.0}]}));
        assert_eq!(calls("Action: hotkey(key='ctrl c')")[0].1, json!({"actions": [{"type": "key", "key": "c", "modifiers": ["ctrl"]}]}));
        assert_eq!(
            calls("Action: type(content='hello \\'you\\'\\n')")[0].1,
            json!({"actions": [{"type": "type", "text": "hello 'you'"}, {"type": "key", "key": "Return"}]})
        );
        assert_eq!(calls("Action: scroll(start_box='(5,6)', direction='up')")[0].1["actions"][0]["direction"], "up");
        assert_eq!(calls("Action: wait()")[0].1, json!({"actions": [{"type": "wait", "ms": 5000}]}));
        assert_eq!(calls("Thought: I need a login.\nAction: call_user()"), [("request_takeover".to_string(), json!({"reason": "I need a login."}))]);
        assert_eq!(actions("Thought: done\nAction: finished(content='It is 42.')"), Some(Ok(Actions::Finished("It is 42.".into()))));
        // Every call parses as our tools do.
        for reply in ["Action: click(start_box='(1,2)')", "Action: hotkey(key='enter')", "Action: scroll(direction='down')", "Action: call_user()"] {
            for (name, args) in calls(reply) {
                crate::tools::parse(&crate::conversation::ToolCall::new("t".into(), name, args.to_string())).unwrap_or_else(|e| panic!("{reply}: {e}"));
            }
        }
    }

    #[test]
    fn plain_text_and_nonsense_are_told_apart() {
        assert_eq!(actions("The answer is 42."), None);
        assert!(matches!(actions("Action: teleport(start_box='(1,2)')"), Some(Err(e)) if e.contains("no action \"teleport\"")));
        assert!(matches!(actions("Action: click(start_box='nowhere')"), Some(Err(e)) if e.contains("not a point")));
        assert!(matches!(actions("Action: click(start_box='(1,2)'"), Some(Err(_))), "unclosed");
    }
}

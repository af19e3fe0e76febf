//! OpenAI Responses (`POST /v1/responses`), for OpenAI's reasoning models: request body and
//! stream folding. Used statelessly (`store: false`): each turn's output items, its reasoning
//! with the encrypted content (`include: ["reasoning.encrypted_content"]`) among them, are kept
//! in the conversation ([`Block::Items`]) and sent back as they came, so the model keeps its
//! reasoning between tool calls (on Chat Completions it would think each step afresh).

use serde_json::{json, Value};

use crate::conversation::{Block, Message, Role, StopReason, ToolCall, Turn};
use crate::conversation::{Shown, ToolResult};
use crate::model::{protocol, Attempt, Dialect, Fold as FoldTrait, ModelConfig, ModelError, OpenAiTool, Request, ToolChoice};
use crate::sse::Event;

/// Output items of one turn at most (reasoning, messages, calls): more is not a reply we can use.
const MAX_ITEMS: usize = 256;

pub(crate) fn body(c: &ModelConfig, req: &Request<'_>) -> Value {
    // OpenAI's own computer tool stands for ours (computer use guide).
    let own = c.dialect.own_computer_tool();
    let mut tools: Vec<Value> = match c.dialect {
        Dialect::OpenAiComputer(OpenAiTool::Preview) => {
            let (w, h) = botdesk_core::action::SCREEN;
            vec![json!({"type": "computer_use_preview", "display_width": w, "display_height": h, "environment": "linux"})]
        }
        Dialect::OpenAiComputer(OpenAiTool::Computer) => vec![json!({"type": "computer"})],
        _ => vec![],
    };
    // Flat function tools; not strict, as our schemas allow optional properties.
    tools.extend(
        req.tools
            .iter()
            .filter(|t| !(own && t.kind.replaced_by_own_computer()))
            .map(|t| json!({"type": "function", "name": t.name(), "description": t.description, "parameters": t.schema, "strict": false})),
    );
    let mut body = json!({
        "model": c.model,
        "instructions": req.system,
        "input": input(req.messages),
        "tools": tools,
        "stream": true,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": c.max_tokens,
        // One call per turn: several acts planned from one screenshot would act on a stale screen.
        "parallel_tool_calls": false,
    });
    if req.tool_choice == ToolChoice::None {
        body["tool_choice"] = json!("none");
    }
    if own {
        // The API drops the oldest items itself when a long run outgrows the window (required
        // with the preview tool).
        body["truncation"] = json!("auto");
    }
    body
}

/// A 1x1 PNG: what a computer call's output shows when its screenshot was removed from the
/// context (the output must carry an image).
static BLANK_PNG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use base64::Engine as _;
    let mut png = vec![];
    let mut enc = ::png::Encoder::new(&mut png, 1, 1);
    enc.set_color(::png::ColorType::Rgb);
    enc.write_header().and_then(|mut w| w.write_image_data(&[255, 255, 255])).expect("a 1x1 PNG in memory");
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png))
});

/// The answer to a computer call: its screenshot (one is always sent: the API wants an image;
/// an "unchanged" screen is sent again, one removed from the context is a blank), the safety
/// checks it had (the run only gets here once the person acknowledged them), and the page's
/// address when the bot's browser was in front. What the tool said goes in a message after it
/// when it failed (the output carries no text).
fn computer_output(r: &ToolResult, checks: &Value, out: &mut Vec<Value>) {
    let url = match r.sent_image().or(r.image.as_ref().filter(|i| !i.data.is_empty() && r.shown == Shown::Unchanged)) {
        Some(img) => format!("data:{};base64,{}", img.media_type, img.base64()),
        None => BLANK_PNG.clone(),
    };
    let mut output = json!({"type": "computer_screenshot", "image_url": url});
    if let Some(page) = &r.page_url {
        output["current_url"] = json!(page);
    }
    out.push(json!({"type": "computer_call_output", "call_id": r.call_id, "acknowledged_safety_checks": checks, "output": output}));
    if r.is_error {
        out.push(json!({"role": "user", "content": [{"type": "input_text", "text": format!("Error: {}", r.sent_text())}]}));
    }
}

/// The conversation as input items. An assistant turn of this format goes back as the items it
/// came as; one from elsewhere (an earlier run's history) as a message and function calls.
pub(crate) fn input(ms: &[Message]) -> Vec<Value> {
    let mut out = vec![];
    // The safety checks of each computer call, by its call id.
    let mut computer_calls = std::collections::HashMap::new();
    for m in ms {
        match m.role {
            Role::Assistant => {
                if let Some(items) = m.blocks.iter().find_map(|b| if let Block::Items(i) = b { Some(i) } else { None }) {
                    for i in items.iter().filter(|i| i["type"] == "computer_call") {
                        computer_calls.insert(i["call_id"].as_str().unwrap_or("").to_string(), i["pending_safety_checks"].clone());
                    }
                    out.extend(items.iter().cloned());
                    continue;
                }
                let text = m.text();
                if !text.is_empty() {
                    out.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                }
                out.extend(m.tool_calls().map(|c| json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.raw})));
            }
            Role::User => {
                let mut texts = vec![];
                for b in &m.blocks {
                    match b {
                        Block::Text(t) if t.trim().is_empty() => {}
                        Block::Text(t) => texts.push(json!({"type": "input_text", "text": t})),
                        Block::ToolResult(r) if computer_calls.contains_key(&r.call_id) => {
                            let checks = computer_calls[&r.call_id].as_array().cloned().unwrap_or_default();
                            computer_output(r, &Value::Array(checks), &mut out);
                        }
                        Block::ToolResult(r) => {
                            let text = if r.is_error { format!("Error: {}", r.sent_text()) } else { r.sent_text() };
                            let output = match r.sent_image() {
                                None => Value::String(text),
                                Some(img) => {
                                    json!([{"type": "input_text", "text": text}, {"type": "input_image", "image_url": format!("data:{};base64,{}", img.media_type, img.base64())}])
                                }
                            };
                            out.push(json!({"type": "function_call_output", "call_id": r.call_id, "output": output}));
                        }
                        Block::ToolCall(_) | Block::Items(_) | Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
                    }
                }
                if !texts.is_empty() {
                    out.push(json!({"role": "user", "content": texts}));
                }
            }
        }
    }
    out
}

/// A function call being streamed (by output index), until its item is done.
struct Pending {
    index: u64,
    /// The item's own id (`fc_…`), which a reasoning item before it is paired with.
    id: String,
    call_id: String,
    name: String,
    args: String,
}

#[derive(Default)]
pub(crate) struct Fold {
    text: String,
    calls: Vec<ToolCall>,
    items: Vec<Value>,
    pending: Vec<Pending>,
    stop: Option<(StopReason, Option<String>)>,
    usage: botdesk_core::Usage,
}

impl Fold {
    fn item(&mut self, item: Value) -> Result<(), Attempt> {
        if self.items.len() >= MAX_ITEMS {
            return Err(protocol(format!("a reply of more than {MAX_ITEMS} output items")));
        }
        self.items.push(item);
        Ok(())
    }

    /// The end of the response (`completed` or `incomplete`): its usage, and why it stopped.
    fn end(&mut self, response: &Value, stop: StopReason, detail: Option<String>) -> Result<(), Attempt> {
        let u = &response["usage"];
        let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let cached = n("/input_tokens_details/cached_tokens");
        self.usage = botdesk_core::Usage { input: n("/input_tokens").saturating_sub(cached), output: n("/output_tokens"), cache_read: cached, cache_write: 0 };
        // Calls cut off by the output limit: kept with what arrived of their arguments (and as
        // items, so their answers have a call to answer), for the run to answer them.
        for p in std::mem::take(&mut self.pending) {
            // A call never named (no call_id) cannot be answered; one already done is not taken twice.
            if p.call_id.is_empty() || self.calls.iter().any(|c| c.id == p.call_id) {
                continue;
            }
            let mut item = json!({"type": "function_call", "call_id": p.call_id, "name": p.name, "arguments": p.args});
            if !p.id.is_empty() {
                item["id"] = json!(p.id);
            }
            self.item(item)?;
            self.calls.push(ToolCall::new(p.call_id, p.name, p.args));
        }
        self.stop = Some((if stop == StopReason::EndTurn && !self.calls.is_empty() { StopReason::ToolUse } else { stop }, detail));
        Ok(())
    }
}

/// An error the server reported in the stream (`error`, or `response.failed`'s `response.error`).
fn failure(e: &Value) -> Attempt {
    let code = e["code"].as_str().or(e["type"].as_str()).unwrap_or("");
    let message = e["message"].as_str().unwrap_or("unknown error").to_string();
    if matches!(code, "server_error" | "rate_limit_exceeded" | "overloaded" | "internal_error") {
        Attempt::Retry { error: ModelError::Unavailable { status: 500, attempts: 0, message }, wait: None }
    } else {
        Attempt::Fatal(ModelError::Rejected { status: 200, message: format!("{code}: {message}") })
    }
}

impl FoldTrait for Fold {
    fn event(&mut self, ev: &Event, on_text: &mut (dyn FnMut(&str) + Send)) -> Result<bool, Attempt> {
        let data: Value = serde_json::from_str(&ev.data).map_err(|e| protocol(format!("bad event data ({e})")))?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(ev.name.as_str());
        match kind {
            "response.output_text.delta" => {
                if let Some(t) = data["delta"].as_str() {
                    self.text.push_str(t);
                    on_text(t);
                }
            }
            "response.output_item.added" if data["item"]["type"] == "function_call" => {
                if self.pending.len() >= MAX_ITEMS {
                    return Err(protocol(format!("a reply of more than {MAX_ITEMS} function calls")));
                }
                let item = &data["item"];
                let s = |k: &str| item[k].as_str().unwrap_or("").to_string();
                self.pending.push(Pending {
                    index: data["output_index"].as_u64().unwrap_or(u64::MAX),
                    id: s("id"),
                    call_id: s("call_id"),
                    name: s("name"),
                    args: String::new(),
                });
            }
            "response.function_call_arguments.delta" => {
                let index = data["output_index"].as_u64();
                if let (Some(p), Some(d)) = (self.pending.iter_mut().find(|p| Some(p.index) == index), data["delta"].as_str()) {
                    p.args.push_str(d);
                }
            }
            "response.output_item.done" => {
                let item = data["item"].clone();
                if item["type"] == "function_call" {
                    let index = data["output_index"].as_u64();
                    let s = |k: &str| item[k].as_str().unwrap_or("").to_string();
                    let call_id = s("call_id");
                    if call_id.is_empty() {
                        return Err(protocol("a function call without a call_id"));
                    }
                    if self.calls.iter().any(|c| c.id == call_id) {
                        return Err(protocol(format!("the function call {call_id} came twice")));
                    }
                    self.pending.retain(|p| Some(p.index) != index && p.call_id != call_id);
                    self.calls.push(ToolCall::new(call_id, s("name"), s("arguments")));
                }
                if item["type"] == "computer_call" {
                    let call_id = item["call_id"].as_str().unwrap_or("").to_string();
                    if call_id.is_empty() || self.calls.iter().any(|c| c.id == call_id) {
                        return Err(protocol("a computer call without a call_id, or twice"));
                    }
                    // Its action(s) and the checks pending on it, read by `tools::parse`.
                    let args = json!({"action": item["action"], "actions": item["actions"], "pending_safety_checks": item["pending_safety_checks"]});
                    self.calls.push(ToolCall::new(call_id, crate::tools::ToolKind::OpenAiComputer.name().into(), args.to_string()));
                }
                self.item(item)?;
            }
            "response.completed" => {
                self.end(&data["response"], StopReason::EndTurn, None)?;
                return Ok(true);
            }
            "response.incomplete" => {
                // Responses API reference, "incomplete_details.reason".
                let why = data.pointer("/response/incomplete_details/reason").and_then(Value::as_str);
                let (stop, detail) = match why {
                    Some("max_output_tokens") => (StopReason::MaxTokens, None),
                    Some("content_filter") => (StopReason::ContentFilter, None),
                    other => (StopReason::Incomplete, Some(other.unwrap_or("not said").to_string())),
                };
                self.end(&data["response"], stop, detail)?;
                return Ok(true);
            }
            "response.failed" => return Err(failure(&data["response"]["error"])),
            "error" => return Err(failure(data.get("error").unwrap_or(&data))),
            _ => {}
        }
        Ok(false)
    }

    fn finish(&mut self) -> Result<Turn, ModelError> {
        let Some((stop, detail)) = self.stop.clone() else {
            return Err(ModelError::Protocol("the stream ended before the reply did".into()));
        };
        // Reasoning that nothing followed (the output limit cut the reply while the model was
        // thinking) cannot be sent back: the API wants each reasoning item's following item.
        while self.items.last().is_some_and(|i| i["type"] == "reasoning") {
            self.items.pop();
        }
        Ok(Turn {
            detail,
            items: std::mem::take(&mut self.items),
            ..Turn::new(std::mem::take(&mut self.text), std::mem::take(&mut self.calls), stop, self.usage)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fold_all;

    #[test]
    fn a_turn_keeps_its_items_and_reads_usage_with_the_cached_part() {
        let reasoning =
            r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}}"#;
        let t = fold_all(
            Fold::default(),
            &[
                ("", r#"{"type":"response.created","response":{"id":"resp_1"}}"#),
                ("", reasoning),
                ("", r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":""}}"#),
                ("", r#"{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"command\""}"#),
                ("", r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":\"ls\"}","status":"completed"}}"#),
                ("", r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":4096},"output_tokens":90,"output_tokens_details":{"reasoning_tokens":64}}}}"#),
            ],
        )
        .unwrap();
        assert_eq!((t.stop, t.calls.len(), t.calls[0].input.clone()), (StopReason::ToolUse, 1, json!({"command": "ls"})));
        assert_eq!(t.usage, botdesk_core::Usage { input: 904, output: 90, cache_read: 4096, cache_write: 0 });
        assert_eq!(t.items.len(), 2);
        assert_eq!(t.items[0]["encrypted_content"], "gAAA");
        // Sent back as they came, with the call's answer after them.
        let mut m = t.into_message();
        m.blocks.push(Block::Text("ignored here".into()));
        let res = Message { role: Role::User, blocks: vec![Block::ToolResult(crate::conversation::ToolResult::ok("call_1", "a b"))] };
        let items = input(&[Message::user("task"), m, res]);
        assert_eq!(items[1]["id"], "rs_1");
        assert_eq!((items[2]["type"].as_str(), items[2]["call_id"].as_str()), (Some("function_call"), Some("call_1")));
        assert_eq!(items[3], json!({"type": "function_call_output", "call_id": "call_1", "output": "a b"}));
    }

    #[test]
    fn a_reply_cut_by_the_output_limit_keeps_the_cut_call() {
        let t = fold_all(
            Fold::default(),
            &[
                ("", r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_9","call_id":"call_9","name":"write_file","arguments":""}}"#),
                ("", r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"{\"path\":\"a\",\"content\":\"xx"}"#),
                ("", r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":10,"output_tokens":5}}}"#),
            ],
        )
        .unwrap();
        assert_eq!(t.stop, StopReason::MaxTokens);
        assert_eq!(t.calls[0].raw, r#"{"path":"a","content":"xx"#);
        assert_eq!(
            (t.items[0]["call_id"].as_str(), t.items[0]["id"].as_str()),
            (Some("call_9"), Some("fc_9")),
            "the cut call is an item, so its answer has a call"
        );
    }

    #[test]
    fn reasoning_that_nothing_followed_is_not_kept() {
        let t = fold_all(
            Fold::default(),
            &[
                ("", r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}}"#),
                ("", r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":10,"output_tokens":5}}}"#),
            ],
        )
        .unwrap();
        assert_eq!((t.stop, t.items.len(), t.text.as_str()), (StopReason::MaxTokens, 0, ""));
        // A call whose done event lost its index is still taken once.
        let t = fold_all(
            Fold::default(),
            &[
                ("", r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":""}}"#),
                ("", r#"{"type":"response.output_item.done","item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{}"}}"#),
                ("", r#"{"type":"response.completed","response":{"usage":{}}}"#),
            ],
        )
        .unwrap();
        assert_eq!((t.calls.len(), t.items.len()), (1, 1));
    }

    #[test]
    fn a_computer_calls_answer_carries_its_screenshot_its_checks_and_the_page() {
        let call = json!({"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {"type": "screenshot"}, "pending_safety_checks": [{"id": "sc_1", "code": "irrelevant_domain", "message": "m"}]});
        let turn = Message { role: Role::Assistant, blocks: vec![Block::Items(vec![call])] };
        let mut r = crate::conversation::ToolResult::ok("c1", "seen");
        r.image = Some(crate::conversation::Image::png(bytes::Bytes::from_static(b"png")));
        r.page_url = Some("https://example.org/".into());
        let removed = crate::conversation::ToolResult { shown: Shown::Removed, ..r.clone() };
        for (result, shot) in [(r, "data:image/png;base64,cG5n"), (removed, BLANK_PNG.as_str())] {
            let items = input(&[Message::user("task"), turn.clone(), Message { role: Role::User, blocks: vec![Block::ToolResult(result)] }]);
            let out = &items[2];
            assert_eq!(out["type"], "computer_call_output");
            assert_eq!(out["acknowledged_safety_checks"][0]["id"], "sc_1");
            assert_eq!(out["output"]["type"], "computer_screenshot");
            assert_eq!(out["output"]["image_url"], shot, "a removed screenshot is a blank (the output must have one)");
            assert_eq!(out["output"]["current_url"], "https://example.org/");
        }
    }

    #[test]
    fn failures_in_the_stream_are_retried_or_said() {
        let retry =
            fold_all(Fold::default(), &[("", r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"oops"}}}"#)]).unwrap_err();
        assert!(matches!(retry, ModelError::Unavailable { .. }), "{retry:?}");
        let said = fold_all(Fold::default(), &[("", r#"{"type":"error","code":"invalid_prompt","message":"no"}"#)]).unwrap_err();
        assert!(said.to_string().contains("invalid_prompt: no"), "{said}");
        assert!(fold_all(Fold::default(), &[("", r#"{"type":"response.output_text.delta","delta":"hi"}"#)]).is_err(), "no end");
    }
}

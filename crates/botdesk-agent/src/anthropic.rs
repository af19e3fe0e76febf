//! Anthropic Messages: request body and stream folding. Screenshots go inside the tool result.

use serde_json::{json, Value};

use crate::conversation::{Block, ContextPolicy, Message, Role, StopReason, ToolCall, Turn};
use crate::model::{protocol, stream_error, Attempt, Fold as FoldTrait, ModelConfig, ModelError, Request, ToolChoice};
use crate::sse::Event;
use botdesk_core::models::Thinking;

/// Prompt caching: breakpoints after the tools, after the system prompt and on the last block of
/// the conversation. Each request repeats the previous one and adds to its end (screenshots are
/// pruned in steps, see `prune_images`), so everything up to the previous breakpoint is read from
/// the cache and only the new turn is written.
pub(crate) fn body(c: &ModelConfig, req: &Request<'_>) -> Value {
    let mut tools: Vec<Value> = vec![];
    // Claude's own computer tool stands for ours (`tools::parse` maps its actions back).
    if let Some((tool, _)) = c.dialect.computer_tool(botdesk_core::action::SCREEN) {
        tools.push(tool);
    }
    let ours = req.tools.iter().filter(|t| !(c.dialect.claude_computer() && t.kind.replaced_by_own_computer()));
    tools.extend(ours.map(|t| json!({"name": t.name(), "description": t.description, "input_schema": t.schema})));
    let mut messages = messages(req.messages);
    let mut system = json!([{"type": "text", "text": req.system}]);
    let point = json!({"type": "ephemeral"});
    match c.context {
        ContextPolicy::Botdesk => {
            // The system prompt (the tools come before it), just before where pruning screenshots
            // changed the prompt last and will change it next (what comes before stays cached
            // through the change), and the last block.
            for id in crate::conversation::prune_points(req.messages) {
                if let Some((i, j)) = before_result(&messages, &id) {
                    messages[i]["content"][j]["cache_control"] = point.clone();
                }
            }
            let last_block = messages.last_mut().and_then(|m| m["content"].as_array_mut()).and_then(|c| c.last_mut());
            for at in [Some(&mut system[0]), last_block].into_iter().flatten() {
                at["cache_control"] = point.clone();
            }
        }
        ContextPolicy::AnthropicDemo => {
            system[0]["cache_control"] = point.clone();
            for m in messages.iter_mut().rev().filter(|m| m["role"] == "user").take(3) {
                if let Some(last) = m["content"].as_array_mut().and_then(|c| c.last_mut()) {
                    last["cache_control"] = point.clone();
                }
            }
        }
    }
    let mut body = json!({
        "model": c.model,
        "max_tokens": c.max_tokens,
        "stream": true,
        "system": system,
        "tools": tools,
        "messages": messages,
    });
    // Thinking docs: an extended budget is at least 1,024 tokens and below max_tokens (raised to
    // hold the thinking and the answer after it); adaptive models decide how much themselves.
    match c.thinking {
        Thinking::None => {}
        Thinking::Extended(budget) => {
            let budget = budget.max(1024);
            body["max_tokens"] = json!(c.max_tokens.max(budget.saturating_add(crate::model::ANSWER_TOKENS)));
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        Thinking::Adaptive => body["thinking"] = json!({"type": "adaptive"}),
    }
    if c.thinking_binding && c.thinking != Thinking::None {
        body["thinking"]["block_binding"] = json!({"prefix_mismatch_behavior": "drop_block"});
    }
    if req.tool_choice == ToolChoice::None {
        body["tool_choice"] = json!({"type": "none"});
    }
    body
}

/// The block just before the tool result answering `call_id` (message, block), when that result
/// is not in the last message (the last block has its breakpoint anyway).
fn before_result(messages: &[Value], call_id: &str) -> Option<(usize, usize)> {
    let answers = |b: &Value| b["type"] == "tool_result" && b["tool_use_id"] == call_id;
    let (i, j) = messages.iter().enumerate().find_map(|(i, m)| m["content"].as_array()?.iter().position(answers).map(|j| (i, j)))?;
    if i + 1 >= messages.len() {
        return None;
    }
    match j {
        0 => (i > 0).then(|| (i - 1, messages[i - 1]["content"].as_array().map_or(0, |c| c.len().saturating_sub(1)))),
        j => Some((i, j - 1)),
    }
}

/// Consecutive messages of one role are merged (the API combines them anyway). Text that is
/// empty or only whitespace is left out: the API refuses such blocks.
pub(crate) fn messages(ms: &[Message]) -> Vec<Value> {
    let mut out: Vec<(Role, Vec<Value>)> = vec![];
    for m in ms {
        let mut content: Vec<Value> = m.blocks.iter().filter_map(block).collect();
        if content.is_empty() {
            content.push(json!({"type": "text", "text": "(empty)"}));
        }
        match out.last_mut() {
            Some((role, c)) if *role == m.role => c.extend(content),
            _ => out.push((m.role, content)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

fn block(b: &Block) -> Option<Value> {
    Some(match b {
        Block::Text(t) if t.trim().is_empty() => return None,
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::ToolCall(c) => json!({"type": "tool_use", "id": c.id, "name": c.name, "input": if c.input.is_object() { c.input.clone() } else { json!({}) }}),
        Block::ToolResult(r) => {
            let mut content = vec![json!({"type": "text", "text": r.sent_text()})];
            if let Some(img) = r.sent_image() {
                content.push(json!({"type": "image", "source": {"type": "base64", "media_type": img.media_type, "data": img.base64()}}));
            }
            json!({"type": "tool_result", "tool_use_id": r.call_id, "is_error": r.is_error, "content": content})
        }
        Block::Thinking { thinking, signature } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
        Block::Items(_) => return None,
    })
}

enum Part {
    Text(String),
    Tool { id: String, name: String, json: String },
    Thinking { thinking: String, signature: String },
    Redacted(String),
}

#[derive(Default)]
pub(crate) struct Fold {
    parts: Vec<Part>,
    stop: Option<(StopReason, Option<String>)>,
    usage: botdesk_core::Usage,
}

/// Anthropic's stop reasons (Messages API reference, "stop_reason").
fn stop_reason(s: &str) -> (StopReason, Option<String>) {
    match s {
        "end_turn" | "stop_sequence" => (StopReason::EndTurn, None),
        "tool_use" => (StopReason::ToolUse, None),
        "max_tokens" => (StopReason::MaxTokens, None),
        "refusal" => (StopReason::Refusal, None),
        "model_context_window_exceeded" => (StopReason::ContextFull, None),
        other => (StopReason::Incomplete, Some(other.to_string())),
    }
}

/// A usage object of `message_start` or `message_delta`: the fields it has replace ours (the
/// output count in `message_delta` is the running total).
fn read_usage(u: &Value, into: &mut botdesk_core::Usage) {
    let field = |k: &str| u.get(k).and_then(Value::as_u64);
    for (k, slot) in [
        ("input_tokens", &mut into.input),
        ("output_tokens", &mut into.output),
        ("cache_read_input_tokens", &mut into.cache_read),
        ("cache_creation_input_tokens", &mut into.cache_write),
    ] {
        if let Some(v) = field(k) {
            *slot = v;
        }
    }
}

impl FoldTrait for Fold {
    fn event(&mut self, ev: &Event, on_text: &mut (dyn FnMut(&str) + Send)) -> Result<bool, Attempt> {
        let data: Value = serde_json::from_str(&ev.data).map_err(|e| protocol(format!("bad event data ({e})")))?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(ev.name.as_str());
        match kind {
            "message_start" => read_usage(&data["message"]["usage"], &mut self.usage),
            "content_block_start" => {
                let b = &data["content_block"];
                let part = match b["type"].as_str() {
                    Some("tool_use") => Part::Tool { id: str_of(b, "id")?, name: str_of(b, "name")?, json: String::new() },
                    Some("thinking") => Part::Thinking {
                        thinking: b["thinking"].as_str().unwrap_or("").to_string(),
                        signature: b["signature"].as_str().unwrap_or("").to_string(),
                    },
                    Some("redacted_thinking") => Part::Redacted(b["data"].as_str().unwrap_or("").to_string()),
                    _ => Part::Text(String::new()),
                };
                self.parts.push(part);
            }
            "content_block_delta" => {
                let d = &data["delta"];
                match (d["type"].as_str(), self.parts.last_mut()) {
                    (Some("text_delta"), Some(Part::Text(t))) => {
                        let piece = d["text"].as_str().unwrap_or("");
                        t.push_str(piece);
                        on_text(piece);
                    }
                    (Some("input_json_delta"), Some(Part::Tool { json, .. })) => json.push_str(d["partial_json"].as_str().unwrap_or("")),
                    (Some("thinking_delta"), Some(Part::Thinking { thinking, .. })) => thinking.push_str(d["thinking"].as_str().unwrap_or("")),
                    (Some("signature_delta"), Some(Part::Thinking { signature, .. })) => signature.push_str(d["signature"].as_str().unwrap_or("")),
                    (Some("text_delta" | "input_json_delta" | "thinking_delta" | "signature_delta"), _) => {
                        return Err(protocol("a delta arrived for a block that was not started"))
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                read_usage(&data["usage"], &mut self.usage);
                if let Some(s) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop_reason(s));
                }
            }
            "message_stop" => return Ok(true),
            "error" => return Err(stream_error(&data)),
            _ => {}
        }
        Ok(false)
    }

    fn finish(&mut self) -> Result<Turn, ModelError> {
        let Some((stop, detail)) = self.stop.clone() else {
            return Err(ModelError::Protocol("the stream ended before the message did".into()));
        };
        let mut text = String::new();
        let mut calls = vec![];
        let mut thinking = vec![];
        for p in std::mem::take(&mut self.parts) {
            match p {
                Part::Text(t) => text.push_str(&t),
                Part::Tool { id, name, json } => calls.push(ToolCall::new(id, name, json)),
                Part::Thinking { thinking: t, signature } => thinking.push(Block::Thinking { thinking: t, signature }),
                Part::Redacted(data) => thinking.push(Block::RedactedThinking { data }),
            }
        }
        Ok(Turn { text, calls, stop, detail, usage: self.usage, items: vec![], thinking })
    }
}

fn str_of(v: &Value, key: &str) -> Result<String, Attempt> {
    v[key].as_str().map(str::to_string).ok_or_else(|| protocol(format!("a tool_use block without {key}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_with_the_cache_is_read_from_start_and_delta() {
        let t = crate::model::fold_all(
            Fold::default(),
            &[
                ("message_start", r#"{"type":"message_start","message":{"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":1}}}"#),
                ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":57}}"#),
                // A count that is not a number is not believed; the others stand.
                ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":"lots","input_tokens":-5}}"#),
            ],
        )
        .unwrap();
        assert_eq!(t.usage, botdesk_core::Usage { input: 12, output: 57, cache_read: 4000, cache_write: 300 });
    }
}

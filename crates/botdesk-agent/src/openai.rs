//! OpenAI chat completions (and compatible servers): request body and stream folding.
//! A tool message carries text only, so screenshots follow in a user message.

use serde_json::{json, Value};

use crate::conversation::{Block, Message, Role, StopReason, ToolCall, Turn};
use crate::model::{protocol, stream_error, Attempt, Fold as FoldTrait, ModelConfig, ModelError, Request, ToolChoice};
use crate::sse::Event;

pub(crate) fn body(c: &ModelConfig, req: &Request<'_>) -> Value {
    let tools: Vec<Value> =
        req.tools.iter().map(|t| json!({"type": "function", "function": {"name": t.name(), "description": t.description, "parameters": t.schema}})).collect();
    let mut ms = vec![json!({"role": "system", "content": req.system})];
    ms.extend(messages(req.messages));
    // include_usage: the last chunk says what the call cost (servers that do not know it ignore it).
    // One call per turn: several acts planned from one screenshot would act on a stale screen.
    let mut body =
        json!({"model": c.model, "stream": true, "stream_options": {"include_usage": true}, "parallel_tool_calls": false, "messages": ms, "tools": tools});
    body[if c.openai_native { "max_completion_tokens" } else { "max_tokens" }] = json!(c.max_tokens);
    if req.tool_choice == ToolChoice::None {
        body["tool_choice"] = json!("none");
    }
    body
}

/// Calls read from the model's text (UI-TARS's actions) go back as the text they came in, and
/// their results as user messages.
pub(crate) fn messages(ms: &[Message]) -> Vec<Value> {
    let mut out = vec![];
    let mut from_text = std::collections::HashSet::new();
    for m in ms {
        match m.role {
            Role::Assistant => {
                let text = m.text();
                from_text.extend(m.tool_calls().filter(|c| c.from_text).map(|c| c.id.clone()));
                let calls: Vec<Value> = m
                    .tool_calls()
                    .filter(|c| !c.from_text)
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}}))
                    .collect();
                if calls.is_empty() && text.trim().is_empty() && m.tool_calls().next().is_some() {
                    // Only calls of our own making (the first look): nothing the model said.
                    continue;
                }
                let mut v = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    v["tool_calls"] = Value::Array(calls);
                }
                out.push(v);
            }
            Role::User => {
                let mut images = vec![];
                let mut texts = vec![];
                for b in &m.blocks {
                    match b {
                        Block::Text(t) => texts.push(t.clone()),
                        Block::ToolResult(r) if from_text.contains(&r.call_id) => {
                            let text = r.sent_text();
                            images.push(json!({"type": "text", "text": if r.is_error { format!("Error: {text}") } else { text }}));
                            if let Some(img) = r.sent_image() {
                                images.push(json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", img.media_type, img.base64())}}));
                            }
                        }
                        Block::ToolResult(r) => {
                            let text = r.sent_text();
                            let content = if r.is_error { format!("Error: {text}") } else { text };
                            out.push(json!({"role": "tool", "tool_call_id": r.call_id, "content": content}));
                            if let Some(img) = r.sent_image() {
                                images.push(json!({"type": "text", "text": format!("The screenshot from tool call {}:", r.call_id)}));
                                images.push(json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", img.media_type, img.base64())}}));
                            }
                        }
                        Block::ToolCall(_) | Block::Items(_) | Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
                    }
                }
                if !images.is_empty() {
                    out.push(json!({"role": "user", "content": images}));
                }
                texts.retain(|t| !t.trim().is_empty());
                if !texts.is_empty() {
                    out.push(json!({"role": "user", "content": texts.join("\n")}));
                }
            }
        }
    }
    out
}

#[derive(Default)]
struct Call {
    id: String,
    name: String,
    args: String,
}

#[derive(Default)]
pub(crate) struct Fold {
    text: String,
    calls: Vec<Call>,
    stop: Option<(StopReason, Option<String>)>,
    usage: botdesk_core::Usage,
}

impl FoldTrait for Fold {
    fn event(&mut self, ev: &Event, on_text: &mut (dyn FnMut(&str) + Send)) -> Result<bool, Attempt> {
        if ev.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let data: Value = serde_json::from_str(&ev.data).map_err(|e| protocol(format!("bad chunk ({e})")))?;
        if data.get("error").is_some() {
            return Err(stream_error(&data));
        }
        // The usage chunk (often with no choices): prompt tokens include the cached ones.
        if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
            let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("/prompt_tokens_details/cached_tokens");
            self.usage =
                botdesk_core::Usage { input: n("/prompt_tokens").saturating_sub(cached), output: n("/completion_tokens"), cache_read: cached, cache_write: 0 };
        }
        let Some(choice) = data.pointer("/choices/0") else { return Ok(false) };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            self.text.push_str(t);
            on_text(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = tc["index"].as_u64().unwrap_or(self.calls.len().saturating_sub(1) as u64) as usize;
            if index > 128 {
                return Err(protocol("a tool call index beyond 128"));
            }
            while self.calls.len() <= index {
                self.calls.push(Call::default());
            }
            let call = &mut self.calls[index];
            if let Some(id) = tc["id"].as_str() {
                call.id = id.to_string();
            }
            if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                call.name.push_str(n);
            }
            if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                call.args.push_str(a);
            }
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            // Chat Completions API reference, "finish_reason".
            self.stop = Some(match r {
                "stop" => (StopReason::EndTurn, None),
                "tool_calls" | "function_call" => (StopReason::ToolUse, None),
                "length" => (StopReason::MaxTokens, None),
                "content_filter" => (StopReason::ContentFilter, None),
                other => (StopReason::Incomplete, Some(other.to_string())),
            });
        }
        Ok(false)
    }

    fn finish(&mut self) -> Result<Turn, ModelError> {
        let calls: Vec<ToolCall> = std::mem::take(&mut self.calls)
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall::new(if c.id.is_empty() { format!("call_{i}") } else { c.id }, c.name, c.args))
            .collect();
        // Every server ends a choice with a finish reason; a stream without one was cut short.
        let Some((stop, detail)) = self.stop.clone() else {
            return Err(ModelError::Protocol("the stream ended before the reply did".into()));
        };
        Ok(Turn { detail, ..Turn::new(std::mem::take(&mut self.text), calls, stop, self.usage) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_comes_in_a_last_chunk_without_choices() {
        let t = crate::model::fold_all(
            Fold::default(),
            &[
                ("", r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#),
                ("", r#"{"choices":[],"usage":{"prompt_tokens":5000,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":4096}}}"#),
            ],
        )
        .unwrap();
        assert_eq!(t.usage, botdesk_core::Usage { input: 904, output: 9, cache_read: 4096, cache_write: 0 });
    }
}

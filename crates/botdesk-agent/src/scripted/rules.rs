//! What the real APIs refuse, by their documented rules, so the scripted server refuses it too:
//! a request the client would have had refused by Anthropic or OpenAI fails every agent test.
//!
//! Each rule cites where the vendor documents it (or the error its API gives); the message a
//! refusal carries is the vendor's own wording where it is known. The rules cover what Botdesk
//! sends: text, tool calls and results, images, prompt-cache breakpoints, the computer tools and
//! their beta headers, extended thinking, and on OpenAI's side tool-call pairing, image placement,
//! reasoning items and computer-use safety checks.

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use serde_json::Value;

use crate::client::Wire;

/// Why the real API would refuse a request: its HTTP status, its error type and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

impl Refusal {
    fn bad(message: impl Into<String>) -> Self {
        Refusal { status: 400, kind: "invalid_request_error", message: message.into() }
    }

    /// The error body in the vendor's own shape.
    pub fn body(&self, wire: Wire) -> String {
        match wire {
            Wire::Anthropic => serde_json::json!({"type": "error", "error": {"type": self.kind, "message": self.message}}).to_string(),
            Wire::OpenAi | Wire::Responses => {
                serde_json::json!({"error": {"message": self.message, "type": self.kind, "param": null, "code": null}}).to_string()
            }
        }
    }
}

type Checked = Result<(), Refusal>;

/// A content block where it was sent: its message's index, its own index there, the block.
type Placed = (usize, usize, Value);

/// Images already decoded (by a hash of their bytes): a run sends each screenshot many times.
#[derive(Default)]
pub struct ImageMemo(HashMap<u64, Result<(u32, u32), String>>);

impl ImageMemo {
    /// The width and height of an image of this media type, or why it does not decode.
    pub fn size(&mut self, media_type: &str, data: &[u8]) -> Result<(u32, u32), String> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (media_type, data).hash(&mut h);
        self.0.entry(h.finish()).or_insert_with(|| image_size(media_type, data)).clone()
    }
}

/// Checks a request as the vendor's API would; `Ok` when it would be accepted.
pub fn check(wire: Wire, headers: &HashMap<String, String>, body: &Value, memo: &mut ImageMemo) -> Checked {
    if !body.is_object() {
        return Err(Refusal::bad("The request body is not valid JSON"));
    }
    match wire {
        Wire::Anthropic => anthropic(headers, body, memo),
        Wire::OpenAi => openai_chat(body, memo),
        Wire::Responses => responses(body, memo),
    }
}

// ------------------------------------------------------------------------------------------------
// Anthropic Messages (docs.anthropic.com: Messages API reference, tool use, prompt caching,
// vision, computer use, extended thinking).

/// The beta header each computer tool version needs (computer use docs, "Model compatibility").
pub fn computer_beta(tool_type: &str) -> Option<&'static str> {
    match tool_type {
        "computer_20241022" => Some("computer-use-2024-10-22"),
        "computer_20250124" => Some("computer-use-2025-01-24"),
        "computer_20251124" => Some("computer-use-2025-11-24"),
        _ => None,
    }
}

/// Tool names: `^[a-zA-Z0-9_-]{1,64}$` (tool use docs, "Specifying client tools"; OpenAI's
/// function names have the same pattern and length).
fn tool_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The secret the scripted server signs its thinking blocks with.
const THINKING_KEY: &str = "botdesk-scripted-thinking";

/// The signature the scripted server gives a thinking block (the real one is opaque; it checks
/// that the block comes back unchanged, and so does this). For a model that binds its thinking to
/// the conversation (see `botdesk_core::models::ModelInfo::thinking_binding`), `bound_to` is the
/// conversation before the block ([`conversation_before`]): the signature holds only while that
/// stays the same.
pub fn thinking_signature(thinking: &str) -> String {
    signature(thinking, "")
}

fn signature(thinking: &str, bound_to: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(THINKING_KEY.as_bytes());
    h.update(thinking.as_bytes());
    h.update(bound_to.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// The signature of a block of `model`'s thinking answering a request: bound to the request's
/// whole conversation for the models that bind.
pub fn thinking_signature_for(model: &str, request: &Value, thinking: &str) -> String {
    let n = request["messages"].as_array().map_or(0, Vec::len);
    match binds(model) {
        true => signature(thinking, &conversation_before(request, n)),
        false => thinking_signature(thinking),
    }
}

fn binds(model: &str) -> bool {
    botdesk_core::models::lookup(model).info.thinking_binding
}

/// What a thinking block in `messages[upto]` is bound to: the tools, the system prompt and the
/// messages before it, breakpoints aside (a digest).
pub fn conversation_before(request: &Value, upto: usize) -> String {
    use sha2::Digest;
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().filter(|(k, _)| *k != "cache_control").map(|(k, v)| (k.clone(), strip(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            v => v.clone(),
        }
    }
    let messages: Vec<Value> = request["messages"].as_array().map(|m| m.iter().take(upto).map(strip).collect()).unwrap_or_default();
    let mut h = sha2::Sha256::new();
    h.update(strip(&request["tools"]).to_string());
    h.update(strip(&request["system"]).to_string());
    h.update(Value::Array(messages).to_string());
    hex::encode(h.finalize())
}

fn anthropic(headers: &HashMap<String, String>, body: &Value, memo: &mut ImageMemo) -> Checked {
    if !headers.contains_key("x-api-key") {
        return Err(Refusal { status: 401, kind: "authentication_error", message: "x-api-key header is required".into() });
    }
    if !headers.contains_key("anthropic-version") {
        return Err(Refusal::bad("anthropic-version: header is required"));
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(Refusal::bad("model: Field required"));
    }
    let Some(max_tokens) = body["max_tokens"].as_u64().filter(|&n| n >= 1) else {
        return Err(Refusal::bad("max_tokens: Field required (an integer of at least 1)"));
    };
    let betas: Vec<&str> = headers.get("anthropic-beta").map(|b| b.split(',').map(str::trim).collect()).unwrap_or_default();

    // Tools: unique names of the documented pattern; a computer tool needs its beta header.
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let mut names = HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let name = t["name"].as_str().unwrap_or("");
        match t["type"].as_str() {
            Some(kind) if kind.starts_with("computer_") => {
                let beta = computer_beta(kind).ok_or_else(|| Refusal::bad(format!("tools.{i}: unknown tool type {kind:?}")))?;
                if !betas.contains(&beta) {
                    return Err(Refusal::bad(format!(
                        "tools.{i}: Input tag '{kind}' found using 'type' does not match any of the expected tags (the '{beta}' beta header is required)"
                    )));
                }
                if t["display_width_px"].as_u64().is_none() || t["display_height_px"].as_u64().is_none() {
                    return Err(Refusal::bad(format!("tools.{i}.{kind}.display_width_px: Field required")));
                }
                if name != "computer" {
                    return Err(Refusal::bad(format!("tools.{i}.{kind}.name: Input should be 'computer'")));
                }
            }
            None | Some("custom") => {
                if !tool_name_ok(name) {
                    return Err(Refusal::bad(format!("tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")));
                }
                if !t["input_schema"].is_object() {
                    return Err(Refusal::bad(format!("tools.{i}.custom.input_schema: Field required")));
                }
            }
            Some(other) => return Err(Refusal::bad(format!("tools.{i}: unknown tool type {other:?}"))),
        }
        if !names.insert(name.to_string()) {
            return Err(Refusal::bad("tools: Tool names must be unique."));
        }
    }
    let choice = body.get("tool_choice").filter(|c| !c.is_null());
    if let Some(c) = choice {
        if tools.is_empty() {
            return Err(Refusal::bad("tool_choice: tool_choice may only be specified while providing tools."));
        }
        if !matches!(c["type"].as_str(), Some("auto" | "any" | "tool" | "none")) {
            return Err(Refusal::bad("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'"));
        }
    }

    // Prompt caching: "A maximum of 4 blocks with cache_control may be provided."
    let breakpoints = count_key(body, "cache_control");
    if breakpoints > 4 {
        return Err(Refusal::bad(format!("A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}.")));
    }

    // The system prompt: a string or text blocks, none empty.
    if let Some(blocks) = body["system"].as_array() {
        for (i, b) in blocks.iter().enumerate() {
            text_block(&format!("system.{i}"), b)?;
        }
    }

    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Err(Refusal::bad("messages: at least one message is required"));
    }
    // Consecutive turns of one role are combined into one (Messages API reference).
    let mut turns: Vec<(String, Vec<Placed>)> = vec![];
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(Refusal::bad(format!("messages.{i}.role: Input should be 'user' or 'assistant'")));
        }
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(a) => a.clone(),
            _ => return Err(Refusal::bad(format!("messages.{i}.content: Field required"))),
        };
        let tagged = blocks.into_iter().enumerate().map(|(j, b)| (i, j, b));
        match turns.last_mut() {
            Some((r, bs)) if r == role => bs.extend(tagged),
            _ => turns.push((role.to_string(), tagged.collect())),
        }
    }
    if turns[0].0 != "user" {
        return Err(Refusal::bad("messages: first message must use the \"user\" role"));
    }

    let thinking = matches!(body["thinking"]["type"].as_str(), Some("enabled" | "adaptive"));
    if thinking {
        // Extended thinking docs: the budget is at least 1,024 tokens and below max_tokens;
        // tool_choice may be auto or none only.
        if body["thinking"]["type"] == "enabled" {
            let budget = body["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
            if budget < 1024 {
                return Err(Refusal::bad("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"));
            }
            if budget >= max_tokens {
                return Err(Refusal::bad("`max_tokens` must be greater than `thinking.budget_tokens`"));
            }
        }
        if choice.is_some_and(|c| matches!(c["type"].as_str(), Some("any" | "tool"))) {
            return Err(Refusal::bad("Thinking may not be enabled when tool_choice forces tool use."));
        }
        if body["thinking"].get("block_binding").is_some() && !betas.contains(&"thinking-binding-controls-2026-08-01") {
            return Err(Refusal::bad("thinking.block_binding: this field needs the 'thinking-binding-controls-2026-08-01' beta header"));
        }
        if body.get("temperature").is_some_and(|t| t.as_f64() != Some(1.0)) {
            return Err(Refusal::bad("`temperature` may only be set to 1 when thinking is enabled."));
        }
    }

    let mut images = vec![];
    for (t, (role, blocks)) in turns.iter().enumerate() {
        for (i, j, b) in blocks {
            let at = format!("messages.{i}.content.{j}");
            match b["type"].as_str().unwrap_or("") {
                "text" => text_block(&at, b)?,
                "image" => images.push((at, b.clone())),
                "tool_use" if role == "assistant" => {
                    if b["id"].as_str().is_none_or(str::is_empty) || !b["input"].is_object() || b["name"].as_str().is_none() {
                        return Err(Refusal::bad(format!("{at}.tool_use: id, name and an object input are required")));
                    }
                }
                "tool_result" if role == "user" => match &b["content"] {
                    Value::Array(parts) => {
                        for (k, p) in parts.iter().enumerate() {
                            match p["type"].as_str().unwrap_or("") {
                                "text" => text_block(&format!("{at}.content.{k}"), p)?,
                                "image" => images.push((format!("{at}.content.{k}"), p.clone())),
                                other => return Err(Refusal::bad(format!("{at}.content.{k}.type: unexpected {other:?} in a tool_result"))),
                            }
                        }
                    }
                    Value::String(_) | Value::Null => {}
                    _ => return Err(Refusal::bad(format!("{at}.content: Input should be a valid string or list"))),
                },
                "thinking" if role == "assistant" => {
                    let text = b["thinking"].as_str().unwrap_or("");
                    let model = body["model"].as_str().unwrap_or("");
                    let want = if binds(model) { signature(text, &conversation_before(body, *i)) } else { thinking_signature(text) };
                    if b["signature"].as_str() != Some(want.as_str()) {
                        // A bound block whose conversation changed: dropped when the request says
                        // so (the binding beta), refused otherwise (thinking docs, "binding").
                        let dropped = binds(model) && body["thinking"]["block_binding"]["prefix_mismatch_behavior"] == "drop_block";
                        if !dropped {
                            return Err(Refusal::bad(format!(
                                "{at}: Invalid `signature` in `thinking` block{}",
                                if binds(model) { " (it is bound to the conversation before it, which changed)" } else { "" }
                            )));
                        }
                    }
                }
                "redacted_thinking" if role == "assistant" => {
                    if b["data"].as_str().is_none_or(str::is_empty) {
                        return Err(Refusal::bad(format!("{at}.data: Field required")));
                    }
                }
                other => return Err(Refusal::bad(format!("{at}.type: a {other:?} block is not allowed in a {role} message"))),
            }
        }
        // Tool use docs: every tool_use has its tool_result in the very next message, where the
        // results come first; a result answers a tool_use of the message just before it.
        let uses: Vec<&str> = blocks.iter().filter(|(_, _, b)| b["type"] == "tool_use").filter_map(|(_, _, b)| b["id"].as_str()).collect();
        if role == "assistant" && !uses.is_empty() {
            let next = turns.get(t + 1).map(|(_, bs)| bs.as_slice()).unwrap_or(&[]);
            let leading: HashSet<&str> =
                next.iter().take_while(|(_, _, b)| b["type"] == "tool_result").filter_map(|(_, _, b)| b["tool_use_id"].as_str()).collect();
            let missing: Vec<&str> = uses.iter().copied().filter(|id| !leading.contains(id)).collect();
            if !missing.is_empty() {
                let i = blocks[0].0;
                return Err(Refusal::bad(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                )));
            }
        }
        if role == "user" {
            let before: HashSet<&str> = if t == 0 {
                HashSet::new()
            } else {
                turns[t - 1].1.iter().filter(|(_, _, b)| b["type"] == "tool_use").filter_map(|(_, _, b)| b["id"].as_str()).collect()
            };
            for (i, j, b) in blocks.iter().filter(|(_, _, b)| b["type"] == "tool_result") {
                let id = b["tool_use_id"].as_str().unwrap_or("");
                if !before.contains(id) {
                    return Err(Refusal::bad(format!(
                        "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )));
                }
            }
        }
    }

    // Extended thinking with tool use: the last assistant turn, when the request continues its
    // tool use (it ends with the results), starts with its thinking block.
    if thinking {
        if let Some(t) = turns.iter().rposition(|(r, _)| r == "assistant") {
            let (_, blocks) = &turns[t];
            let uses_tools = blocks.iter().any(|(_, _, b)| b["type"] == "tool_use");
            let first = blocks.first().map(|(_, _, b)| b["type"].as_str().unwrap_or("")).unwrap_or("");
            if uses_tools && t + 1 == turns.len() - 1 && first != "thinking" && first != "redacted_thinking" {
                let i = blocks[0].0;
                return Err(Refusal::bad(format!(
                    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`."
                )));
            }
        }
    }

    // Vision docs: at most 100 images a request; each at most 5 MB and 8000 px a side, 2000 px
    // when the request holds more than 20; the bytes must be an image of the media type given.
    if images.len() > 100 {
        return Err(Refusal::bad(format!("Too many images: a request may contain at most 100 images, this one has {}", images.len())));
    }
    let many = images.len() > 20;
    for (at, img) in &images {
        let src = &img["source"];
        if src["type"] != "base64" {
            return Err(Refusal::bad(format!("{at}.source.type: Input should be 'base64' or 'url'")));
        }
        let media = src["media_type"].as_str().unwrap_or("");
        if !matches!(media, "image/jpeg" | "image/png" | "image/gif" | "image/webp") {
            return Err(Refusal::bad(format!("{at}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'")));
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(src["data"].as_str().unwrap_or(""))
            .map_err(|_| Refusal::bad(format!("{at}.source.base64.data: The image data is not valid base64")))?;
        if data.len() > 5 * 1024 * 1024 {
            return Err(Refusal::bad(format!("{at}.source.base64: image exceeds 5 MB maximum: {} bytes > 5242880 bytes", data.len())));
        }
        match sniff(&data) {
            Some(actual) if actual == media => {}
            Some(actual) => {
                return Err(Refusal::bad(format!("{at}.source.base64.data: Image does not match the provided media type {media} (it is {actual})")))
            }
            None => return Err(Refusal::bad(format!("{at}.source.base64.data: Could not process image"))),
        }
        let (w, h) = memo.size(media, &data).map_err(|why| Refusal::bad(format!("{at}.source.base64.data: Could not process image ({why})")))?;
        let limit = if many { 2000 } else { 8000 };
        if w > limit || h > limit {
            return Err(Refusal::bad(if many {
                format!("{at}: At least one of the image dimensions exceed max allowed size for many-image requests: 2000 pixels")
            } else {
                format!("{at}: image dimensions exceed max allowed size: 8000 pixels")
            }));
        }
    }
    Ok(())
}

fn text_block(at: &str, b: &Value) -> Checked {
    let Some(text) = b["text"].as_str() else { return Err(Refusal::bad(format!("{at}.text: Field required"))) };
    if text.is_empty() {
        return Err(Refusal::bad(format!("{at}: text content blocks must be non-empty")));
    }
    if text.trim().is_empty() {
        return Err(Refusal::bad(format!("{at}: text content blocks must contain non-whitespace text")));
    }
    Ok(())
}

/// How many objects anywhere in `v` carry `key`.
fn count_key(v: &Value, key: &str) -> usize {
    match v {
        Value::Object(m) => usize::from(m.contains_key(key)) + m.values().map(|v| count_key(v, key)).sum::<usize>(),
        Value::Array(a) => a.iter().map(|v| count_key(v, key)).sum(),
        _ => 0,
    }
}

// ------------------------------------------------------------------------------------------------
// OpenAI Chat Completions (platform.openai.com: Chat Completions API reference, function calling,
// vision).

fn openai_tools(tools: Option<&Value>, field: &str) -> Result<usize, Refusal> {
    let Some(tools) = tools.filter(|t| !t.is_null()) else { return Ok(0) };
    let tools = tools.as_array().ok_or_else(|| Refusal::bad(format!("Invalid type for '{field}': expected an array")))?;
    let mut names = HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        match t["type"].as_str() {
            Some("function") => {
                // Chat nests the function; Responses keeps it flat.
                let f = if t.get("function").is_some() { &t["function"] } else { t };
                let name = f["name"].as_str().unwrap_or("");
                if !tool_name_ok(name) {
                    return Err(Refusal::bad(format!(
                        "Invalid '{field}[{i}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
                    )));
                }
                if !names.insert(name.to_string()) {
                    return Err(Refusal::bad(format!("Duplicate function name {name:?} in '{field}'")));
                }
                if f.get("parameters").is_some_and(|p| !p.is_object()) {
                    return Err(Refusal::bad(format!("Invalid '{field}[{i}].function.parameters': expected an object")));
                }
            }
            // Responses' built-in computer tool (GA) takes no fields.
            Some("computer") if t.get("function").is_none() => {}
            Some("computer_use_preview") if field == "tools" && t.get("function").is_none() => {
                for k in ["display_width", "display_height", "environment"] {
                    if t[k].is_null() {
                        return Err(Refusal::bad(format!("Missing required parameter: '{field}[{i}].{k}'.")));
                    }
                }
            }
            other => return Err(Refusal::bad(format!("Invalid value for '{field}[{i}].type': {other:?} is not a supported tool type"))),
        }
    }
    Ok(tools.len())
}

fn data_url(at: &str, url: &str, memo: &mut ImageMemo) -> Checked {
    let bad = || Refusal::bad(format!("Invalid '{at}'. You uploaded an unsupported image. Please make sure your image is valid."));
    let Some(rest) = url.strip_prefix("data:") else {
        // A web address: the API fetches it; nothing to check here.
        return if url.starts_with("https://") || url.starts_with("http://") { Ok(()) } else { Err(bad()) };
    };
    let (media, data) = rest.split_once(";base64,").ok_or_else(bad)?;
    let data = base64::engine::general_purpose::STANDARD.decode(data).map_err(|_| bad())?;
    if data.len() > 20 * 1024 * 1024 {
        return Err(Refusal::bad(format!("Invalid '{at}': the image is larger than 20 MB")));
    }
    if !matches!(media, "image/jpeg" | "image/png" | "image/gif" | "image/webp") || sniff(&data).is_none() {
        return Err(bad());
    }
    memo.size(sniff(&data).unwrap_or(media), &data).map_err(|_| bad())?;
    Ok(())
}

fn openai_chat(body: &Value, memo: &mut ImageMemo) -> Checked {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(Refusal::bad("you must provide a model parameter"));
    }
    let tools = openai_tools(body.get("tools"), "tools")?;
    let stream = body["stream"] == true;
    if body.get("stream_options").is_some_and(|o| !o.is_null()) && !stream {
        return Err(Refusal::bad("The 'stream_options' parameter is only allowed when 'stream' is enabled."));
    }
    if body.get("parallel_tool_calls").is_some_and(|p| !p.is_null()) && tools == 0 {
        return Err(Refusal::bad("Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified."));
    }
    if body.get("tool_choice").is_some_and(|c| !c.is_null()) && tools == 0 {
        return Err(Refusal::bad("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."));
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Err(Refusal::bad("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."));
    }
    // Calls of the last assistant turn that no tool message answered yet.
    let mut open: Vec<String> = vec![];
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "tool" && !open.is_empty() {
            return Err(Refusal::bad(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                open.join(", ")
            )));
        }
        let parts: Vec<Value> = m["content"].as_array().cloned().unwrap_or_default();
        for (j, p) in parts.iter().enumerate() {
            match p["type"].as_str().unwrap_or("") {
                "text" => {}
                "image_url" if role == "user" => data_url(&format!("messages[{i}].content[{j}].image_url"), p["image_url"]["url"].as_str().unwrap_or(""), memo)?,
                "image_url" => {
                    return Err(Refusal::bad(format!(
                        "Invalid 'messages[{i}].content[{j}]': Image URLs are only allowed for messages with role 'user', but this message with role '{role}' contains an image URL."
                    )))
                }
                other => return Err(Refusal::bad(format!("Invalid value: '{other}'. Supported values are: 'text' and 'image_url'."))),
            }
        }
        match role {
            "system" | "developer" | "user" => {
                if !(m["content"].is_string() || m["content"].is_array()) {
                    return Err(Refusal::bad(format!("Invalid type for 'messages[{i}].content': expected one of a string or array of objects")));
                }
            }
            "assistant" => {
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                if m["content"].is_null() && calls.is_empty() {
                    return Err(Refusal::bad(format!("Invalid value for 'messages[{i}].content': expected a string, got null.")));
                }
                for (k, c) in calls.iter().enumerate() {
                    let id = c["id"].as_str().unwrap_or("");
                    if id.is_empty() || c["function"]["name"].as_str().is_none() || c["function"]["arguments"].as_str().is_none() {
                        return Err(Refusal::bad(format!(
                            "Missing required parameter: 'messages[{i}].tool_calls[{k}]' (id, function.name and function.arguments)."
                        )));
                    }
                    open.push(id.to_string());
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let Some(at) = open.iter().position(|o| o == id) else {
                    return Err(Refusal::bad(format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (no call {id:?} is open at messages[{i}])."
                    )));
                };
                open.remove(at);
            }
            other => {
                return Err(Refusal::bad(format!("Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'tool', and 'developer'.")))
            }
        }
    }
    if !open.is_empty() {
        return Err(Refusal::bad(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            open.join(", ")
        )));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// OpenAI Responses (platform.openai.com: Responses API reference, reasoning items with
// `store: false`, function calling, the computer use guide).

fn responses(body: &Value, memo: &mut ImageMemo) -> Checked {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(Refusal::bad("Missing required parameter: 'model'."));
    }
    let tools = openai_tools(body.get("tools"), "tools")?;
    let computer = body["tools"].as_array().into_iter().flatten().any(|t| t["type"] == "computer_use_preview");
    // (Only the preview tool requires it; the GA `computer` tool does not.)
    if computer && body["truncation"] != "auto" {
        return Err(Refusal::bad("The 'computer-use-preview' model requires that the 'truncation' parameter be set to 'auto'."));
    }
    if body.get("tool_choice").is_some_and(|c| !c.is_null()) && tools == 0 {
        return Err(Refusal::bad("Tool choices other than 'auto' are only supported with tools."));
    }
    let stored = body["store"] != false;
    let items: Vec<Value> = match &body["input"] {
        Value::String(_) => return Ok(()),
        Value::Array(a) => a.clone(),
        _ => return Err(Refusal::bad("Missing required parameter: 'input'.")),
    };
    // Calls made, with the safety checks pending on each computer call.
    let mut calls: HashMap<String, (&str, Vec<String>)> = HashMap::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or(if item.get("role").is_some() { "message" } else { "" });
        match kind {
            "reasoning" => {
                if !stored && item["encrypted_content"].as_str().is_none() {
                    let id = item["id"].as_str().unwrap_or("");
                    return Err(Refusal::bad(format!(
                        "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
                    )));
                }
                let next = items.get(i + 1).and_then(|n| n["type"].as_str().or(n.get("role").map(|_| "message")));
                if !matches!(next, Some("message" | "function_call" | "computer_call")) {
                    let id = item["id"].as_str().unwrap_or("");
                    return Err(Refusal::bad(format!("Item '{id}' of type 'reasoning' was provided without its required following item.")));
                }
            }
            "message" => {
                let role = item["role"].as_str().unwrap_or("");
                for (j, p) in item["content"].as_array().into_iter().flatten().enumerate() {
                    match (role, p["type"].as_str().unwrap_or("")) {
                        ("user" | "system" | "developer", "input_text") | ("assistant", "output_text" | "refusal") => {}
                        ("user", "input_image") => data_url(&format!("input[{i}].content[{j}].image_url"), p["image_url"].as_str().unwrap_or(""), memo)?,
                        (_, other) => {
                            return Err(Refusal::bad(format!("Invalid value: '{other}' is not a content type of a {role} message (input[{i}].content[{j}]).")))
                        }
                    }
                }
            }
            "function_call" | "computer_call" => {
                let id = item["call_id"].as_str().unwrap_or("").to_string();
                if id.is_empty() {
                    return Err(Refusal::bad(format!("Missing required parameter: 'input[{i}].call_id'.")));
                }
                let checks = item["pending_safety_checks"].as_array().into_iter().flatten().filter_map(|c| c["id"].as_str().map(str::to_string)).collect();
                calls.insert(id, (if kind == "function_call" { "function_call" } else { "computer_call" }, checks));
            }
            "function_call_output" | "computer_call_output" => {
                let id = item["call_id"].as_str().unwrap_or("");
                let want = if kind == "function_call_output" { "function_call" } else { "computer_call" };
                match calls.get(id) {
                    Some((k, checks)) if *k == want => {
                        if kind == "computer_call_output" {
                            let acked: HashSet<&str> =
                                item["acknowledged_safety_checks"].as_array().into_iter().flatten().filter_map(|c| c["id"].as_str()).collect();
                            let missing: Vec<&str> = checks.iter().map(String::as_str).filter(|c| !acked.contains(c)).collect();
                            if !missing.is_empty() {
                                return Err(Refusal::bad(format!(
                                    "The safety checks pending on computer call {id} were not acknowledged: {}. Pass them back in acknowledged_safety_checks to proceed.",
                                    missing.join(", ")
                                )));
                            }
                            let out = &item["output"];
                            if !matches!(out["type"].as_str(), Some("input_image" | "computer_screenshot")) {
                                return Err(Refusal::bad(format!("Invalid 'input[{i}].output.type': expected 'computer_screenshot'.")));
                            }
                            data_url(&format!("input[{i}].output.image_url"), out["image_url"].as_str().unwrap_or(""), memo)?;
                        } else if let Some(parts) = item["output"].as_array() {
                            for (j, p) in parts.iter().enumerate() {
                                match p["type"].as_str().unwrap_or("") {
                                    "input_text" => {}
                                    "input_image" => data_url(&format!("input[{i}].output[{j}].image_url"), p["image_url"].as_str().unwrap_or(""), memo)?,
                                    other => return Err(Refusal::bad(format!("Invalid value: '{other}' in input[{i}].output[{j}]."))),
                                }
                            }
                        } else if !item["output"].is_string() {
                            return Err(Refusal::bad(format!("Invalid type for 'input[{i}].output': expected a string or an array.")));
                        }
                        answered.insert(id.to_string());
                    }
                    _ => {
                        let what = if kind == "function_call_output" { "function call" } else { "computer call" };
                        return Err(Refusal::bad(format!("No tool call found for {what} output with call_id {id}.")));
                    }
                }
            }
            other => return Err(Refusal::bad(format!("Invalid value: '{other}' is not an input item type (input[{i}])."))),
        }
    }
    if let Some(id) = calls.keys().find(|id| !answered.contains(*id)) {
        return Err(Refusal::bad(format!("No tool output found for function call {id}.")));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Images

/// The media type the bytes are, by their signature.
fn sniff(data: &[u8]) -> Option<&'static str> {
    match data {
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

/// Width and height of an image: a PNG is decoded whole; the others by their headers.
fn image_size(media_type: &str, data: &[u8]) -> Result<(u32, u32), String> {
    match media_type {
        "image/png" => {
            let mut dec = png::Decoder::new(std::io::Cursor::new(data));
            dec.set_transformations(png::Transformations::IDENTITY);
            let mut reader = dec.read_info().map_err(|e| e.to_string())?;
            let (w, h) = (reader.info().width, reader.info().height);
            if w > 8000 || h > 8000 {
                return Ok((w, h));
            }
            let mut buf = vec![0; reader.output_buffer_size()];
            reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
            Ok((w, h))
        }
        "image/jpeg" => {
            let mut at = 2;
            while at + 9 < data.len() {
                if data[at] != 0xff {
                    return Err("a broken JPEG marker".into());
                }
                let marker = data[at + 1];
                let len = u16::from_be_bytes([data[at + 2], data[at + 3]]) as usize;
                if matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                    let h = u16::from_be_bytes([data[at + 5], data[at + 6]]) as u32;
                    let w = u16::from_be_bytes([data[at + 7], data[at + 8]]) as u32;
                    return if w > 0 && h > 0 { Ok((w, h)) } else { Err("a JPEG without a size".into()) };
                }
                at += 2 + len;
            }
            Err("a JPEG without a frame".into())
        }
        "image/gif" if data.len() >= 10 => Ok((u16::from_le_bytes([data[6], data[7]]) as u32, u16::from_le_bytes([data[8], data[9]]) as u32)),
        "image/webp" if data.len() >= 30 => match &data[12..16] {
            b"VP8X" => Ok((1 + u32::from_le_bytes([data[24], data[25], data[26], 0]), 1 + u32::from_le_bytes([data[27], data[28], data[29], 0]))),
            b"VP8L" => {
                let b = u32::from_le_bytes([data[21], data[22], data[23], data[24]]);
                Ok((1 + (b & 0x3fff), 1 + ((b >> 14) & 0x3fff)))
            }
            b"VP8 " => Ok((u16::from_le_bytes([data[26], data[27]]) as u32 & 0x3fff, u16::from_le_bytes([data[28], data[29]]) as u32 & 0x3fff)),
            _ => Err("an unknown WebP chunk".into()),
        },
        _ => Err("too short".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut out = vec![];
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header().unwrap().write_image_data(&vec![90; (w * h * 3) as usize]).unwrap();
        out
    }

    fn b64(d: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(d)
    }

    fn headers(beta: Option<&str>) -> HashMap<String, String> {
        let mut h: HashMap<String, String> = [("x-api-key", "k"), ("anthropic-version", "2023-06-01")].map(|(k, v)| (k.into(), v.into())).into();
        if let Some(b) = beta {
            h.insert("anthropic-beta".into(), b.into());
        }
        h
    }

    /// A valid Anthropic request: a task, a tool call and its result with a screenshot.
    fn claude() -> Value {
        json!({
            "model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": true,
            "system": [{"type": "text", "text": "You are a bot.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "shell", "description": "run", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "task"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, {"type": "tool_use", "id": "t1", "name": "shell", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png(8, 4))}}
                ]}]}
            ]
        })
    }

    fn refused(wire: Wire, h: &HashMap<String, String>, body: &Value) -> String {
        match check(wire, h, body, &mut ImageMemo::default()) {
            Ok(()) => panic!("accepted: {body}"),
            Err(r) => r.message,
        }
    }

    fn accepted(wire: Wire, h: &HashMap<String, String>, body: &Value) {
        if let Err(r) = check(wire, h, body, &mut ImageMemo::default()) {
            panic!("refused ({}): {body}", r.message)
        }
    }

    #[test]
    fn anthropic_text_blocks_are_never_empty() {
        accepted(Wire::Anthropic, &headers(None), &claude());
        for (text, why) in [("", "must be non-empty"), ("  \n", "must contain non-whitespace text")] {
            let mut b = claude();
            b["messages"][0]["content"][0]["text"] = json!(text);
            assert!(refused(Wire::Anthropic, &headers(None), &b).contains(why));
            let mut b = claude();
            b["messages"][2]["content"][0]["content"][0]["text"] = json!(text);
            assert!(refused(Wire::Anthropic, &headers(None), &b).contains(why), "inside a tool result too");
            let mut b = claude();
            b["system"][0]["text"] = json!(text);
            assert!(refused(Wire::Anthropic, &headers(None), &b).contains(why), "in the system prompt too");
        }
    }

    #[test]
    fn anthropic_each_tool_use_is_answered_first_in_the_next_message() {
        let mut b = claude();
        b["messages"].as_array_mut().unwrap().pop();
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("`tool_use` ids were found without `tool_result` blocks immediately after: t1"));
        let mut b = claude();
        b["messages"][2]["content"][0]["tool_use_id"] = json!("t9");
        let m = refused(Wire::Anthropic, &headers(None), &b);
        assert!(m.contains("without `tool_result`") || m.contains("unexpected `tool_use_id`"), "{m}");
        // Text before the results.
        let mut b = claude();
        b["messages"][2]["content"].as_array_mut().unwrap().insert(0, json!({"type": "text", "text": "note"}));
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("without `tool_result` blocks immediately after"));
        // A result with no tool_use before it.
        let mut b = claude();
        b["messages"][1]["content"].as_array_mut().unwrap().pop();
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("unexpected `tool_use_id`"));
        // Two user messages in a row are one turn: the results may come in the first.
        let mut b = claude();
        b["messages"].as_array_mut().unwrap().push(json!({"role": "user", "content": "and then"}));
        accepted(Wire::Anthropic, &headers(None), &b);
    }

    #[test]
    fn anthropic_allows_four_cache_breakpoints() {
        let mut b = claude();
        b["tools"][0]["cache_control"] = json!({"type": "ephemeral"});
        b["messages"][0]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        b["messages"][2]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        accepted(Wire::Anthropic, &headers(None), &b);
        b["messages"][1]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        assert_eq!(refused(Wire::Anthropic, &headers(None), &b), "A maximum of 4 blocks with cache_control may be provided. Found 5.");
    }

    #[test]
    fn anthropic_images_decode_match_their_type_and_size() {
        let shot = |b: &mut Value, media: &str, data: &[u8]| {
            b["messages"][2]["content"][0]["content"][1]["source"] = json!({"type": "base64", "media_type": media, "data": b64(data)})
        };
        let mut b = claude();
        shot(&mut b, "image/jpeg", &png(4, 4));
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("does not match the provided media type image/jpeg"));
        let mut broken = png(4, 4);
        broken.truncate(40);
        shot(&mut b, "image/png", &broken);
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("Could not process image"));
        shot(&mut b, "image/png", &png(8001, 1));
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("8000 pixels"));
        // More than 20 images: each at most 2000 pixels a side.
        let mut b = claude();
        let img = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png(2001, 2))}});
        b["messages"][0]["content"] = json!((0..21).map(|_| img.clone()).chain([json!({"type": "text", "text": "t"})]).collect::<Vec<_>>());
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("many-image requests: 2000 pixels"));
        let small = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png(2, 2))}});
        b["messages"][0]["content"] = json!((0..101).map(|_| small.clone()).collect::<Vec<_>>());
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("at most 100 images"));
    }

    #[test]
    fn anthropic_computer_tools_need_their_beta_header() {
        let mut b = claude();
        b["tools"].as_array_mut().unwrap().push(json!({"type": "computer_20250124", "name": "computer", "display_width_px": 1280, "display_height_px": 800}));
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("'computer-use-2025-01-24' beta header is required"));
        assert!(refused(Wire::Anthropic, &headers(Some("computer-use-2025-11-24")), &b).contains("beta header is required"));
        accepted(Wire::Anthropic, &headers(Some("computer-use-2025-01-24")), &b);
        let mut bad = b.clone();
        bad["tools"][0]["name"] = json!("mcp.fetch");
        assert!(refused(Wire::Anthropic, &headers(Some("computer-use-2025-01-24")), &bad).contains("should match pattern"));
    }

    #[test]
    fn anthropic_thinking_blocks_come_back_unchanged_and_first() {
        let mut b = claude();
        b["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("must start with a thinking block"));
        let thought = "I should list the files.";
        b["messages"][1]["content"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type": "thinking", "thinking": thought, "signature": thinking_signature(thought)}));
        accepted(Wire::Anthropic, &headers(None), &b);
        let mut changed = b.clone();
        changed["messages"][1]["content"][0]["thinking"] = json!("I should list the files!");
        assert!(refused(Wire::Anthropic, &headers(None), &changed).contains("Invalid `signature`"));
        let mut low = b.clone();
        low["thinking"]["budget_tokens"] = json!(512);
        assert!(refused(Wire::Anthropic, &headers(None), &low).contains("greater than or equal to 1024"));
        let mut over = b.clone();
        over["max_tokens"] = json!(1024);
        assert!(refused(Wire::Anthropic, &headers(None), &over).contains("must be greater than `thinking.budget_tokens`"));
        let mut forced = b.clone();
        forced["tool_choice"] = json!({"type": "any"});
        assert!(refused(Wire::Anthropic, &headers(None), &forced).contains("forces tool use"));
        let mut none = b;
        none["tool_choice"] = json!({"type": "none"});
        accepted(Wire::Anthropic, &headers(None), &none);
    }

    #[test]
    fn a_bound_thinking_block_is_dropped_or_refused_once_the_conversation_before_it_changed() {
        let mut b = claude();
        b["model"] = json!("claude-opus-5-5");
        b["thinking"] = json!({"type": "adaptive"});
        let thought = "Looking first.";
        let first = {
            let mut r = b.clone();
            r["messages"].as_array_mut().unwrap().truncate(1);
            r
        };
        let sig = thinking_signature_for("claude-opus-5-5", &first, thought);
        b["messages"][1]["content"].as_array_mut().unwrap().insert(0, json!({"type": "thinking", "thinking": thought, "signature": sig}));
        accepted(Wire::Anthropic, &headers(None), &b);
        // The task changed (say, a screenshot pruned before the block): refused...
        b["messages"][0]["content"][0]["text"] = json!("another task");
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("bound to the conversation before it"));
        // ...unless the request asks for such blocks to be dropped, with the beta.
        b["thinking"]["block_binding"] = json!({"prefix_mismatch_behavior": "drop_block"});
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("beta header"));
        accepted(Wire::Anthropic, &headers(Some("thinking-binding-controls-2026-08-01")), &b);
    }

    #[test]
    fn anthropic_headers_and_basics() {
        let mut h = headers(None);
        h.remove("anthropic-version");
        assert!(refused(Wire::Anthropic, &h, &claude()).contains("anthropic-version"));
        let mut b = claude();
        b["messages"] = json!([]);
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("at least one message"));
        let mut b = claude();
        b.as_object_mut().unwrap().remove("tools");
        b["messages"] = json!([{"role": "user", "content": "hi"}]);
        b["tool_choice"] = json!({"type": "none"});
        assert!(refused(Wire::Anthropic, &headers(None), &b).contains("tool_choice may only be specified while providing tools"));
    }

    fn chat() -> Value {
        json!({
            "model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true}, "parallel_tool_calls": false,
            "tools": [{"type": "function", "function": {"name": "shell", "description": "run", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "system", "content": "You are a bot."},
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "The screenshot:"}, {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png(4, 4)))}}]}
            ]
        })
    }

    #[test]
    fn openai_chat_every_call_is_answered_before_the_next_message() {
        let none = HashMap::new();
        accepted(Wire::OpenAi, &none, &chat());
        let mut b = chat();
        b["messages"].as_array_mut().unwrap().remove(3);
        assert!(refused(Wire::OpenAi, &none, &b).contains("did not have response messages: c1"));
        let mut b = chat();
        b["messages"][3]["tool_call_id"] = json!("c2");
        assert!(refused(Wire::OpenAi, &none, &b).contains("must be a response to a preceeding message with 'tool_calls'"));
        let mut b = chat();
        b["messages"][2]["tool_calls"] = json!([]);
        assert!(refused(Wire::OpenAi, &none, &b).contains("expected a string, got null"));
    }

    #[test]
    fn openai_chat_images_only_in_user_messages_and_valid() {
        let none = HashMap::new();
        let mut b = chat();
        let img = b["messages"][4]["content"][1].clone();
        b["messages"][3]["content"] = json!([{"type": "text", "text": "ok"}, img]);
        assert!(refused(Wire::OpenAi, &none, &b).contains("Image URLs are only allowed for messages with role 'user'"));
        let mut b = chat();
        b["messages"][4]["content"][1]["image_url"]["url"] = json!("data:image/png;base64,AAAA");
        assert!(refused(Wire::OpenAi, &none, &b).contains("unsupported image"));
        let mut b = chat();
        b.as_object_mut().unwrap().remove("tools");
        b["messages"] = json!([{"role": "user", "content": "hi"}]);
        assert!(refused(Wire::OpenAi, &none, &b).contains("'parallel_tool_calls' is only allowed when 'tools' are specified"));
        b.as_object_mut().unwrap().remove("parallel_tool_calls");
        b["stream"] = json!(false);
        assert!(refused(Wire::OpenAi, &none, &b).contains("'stream_options' parameter is only allowed when 'stream' is enabled"));
    }

    fn resp() -> Value {
        json!({
            "model": "gpt-5", "store": false, "stream": true, "include": ["reasoning.encrypted_content"],
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": false}],
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "task"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "shell", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"}
            ]
        })
    }

    #[test]
    fn responses_reasoning_is_followed_and_calls_are_matched() {
        let none = HashMap::new();
        accepted(Wire::Responses, &none, &resp());
        let mut b = resp();
        b["input"].as_array_mut().unwrap().remove(2);
        let m = refused(Wire::Responses, &none, &b);
        assert!(m.contains("without its required following item"), "{m}");
        let mut b = resp();
        b["input"][3]["call_id"] = json!("c9");
        assert!(refused(Wire::Responses, &none, &b).contains("No tool call found for function call output with call_id c9"));
        let mut b = resp();
        b["input"].as_array_mut().unwrap().pop();
        assert!(refused(Wire::Responses, &none, &b).contains("No tool output found for function call c1"));
        let mut b = resp();
        b["input"][1].as_object_mut().unwrap().remove("encrypted_content");
        assert!(refused(Wire::Responses, &none, &b).contains("Items are not persisted when `store` is set to false"));
    }

    #[test]
    fn responses_computer_calls_carry_their_acknowledged_safety_checks() {
        let none = HashMap::new();
        let shot = format!("data:image/png;base64,{}", b64(&png(4, 4)));
        let mut b = json!({
            "model": "computer-use-preview", "store": false, "truncation": "auto",
            "tools": [{"type": "computer_use_preview", "display_width": 1280, "display_height": 800, "environment": "linux"}],
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "task"}]},
                {"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {"type": "screenshot"},
                 "pending_safety_checks": [{"id": "sc_1", "code": "malicious_instructions", "message": "m"}]},
                {"type": "computer_call_output", "call_id": "c1", "acknowledged_safety_checks": [{"id": "sc_1", "code": "malicious_instructions", "message": "m"}],
                 "output": {"type": "computer_screenshot", "image_url": shot}}
            ]
        });
        accepted(Wire::Responses, &none, &b);
        let mut unacked = b.clone();
        unacked["input"][2]["acknowledged_safety_checks"] = json!([]);
        assert!(refused(Wire::Responses, &none, &unacked).contains("were not acknowledged: sc_1"));
        b.as_object_mut().unwrap().remove("truncation");
        assert!(refused(Wire::Responses, &none, &b).contains("'truncation' parameter be set to 'auto'"));
    }
}

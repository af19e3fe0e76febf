//! The conversation in a vendor-neutral form. Each client turns it into its own wire format.

use bytes::Bytes;
use serde::Serialize;

/// At most this many screenshots stay in the model's context; older ones become a short note.
pub const MAX_IMAGES_IN_CONTEXT: usize = 3;
/// When there are more, all but this many newest go at once: the start of the conversation (what
/// providers cache) then changes once every few screenshots, not at each one.
pub const IMAGES_AFTER_PRUNE: usize = 1;
/// Tool result text is cut here, with a note saying so.
pub const MAX_TOOL_TEXT: usize = 12_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// A PNG or JPEG screenshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub media_type: &'static str,
    pub data: Bytes,
}

impl Image {
    pub fn png(data: Bytes) -> Self {
        Self { media_type: "image/png", data }
    }
    pub fn base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }
}

/// A tool call as the model sent it. `raw` is the arguments text exactly as received, so a
/// malformed call can be answered with a precise error; `input` is its parse (`{}` when it does
/// not parse).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub raw: String,
    pub input: serde_json::Value,
}

impl ToolCall {
    pub fn new(id: String, name: String, raw: String) -> Self {
        let input = serde_json::from_str(if raw.trim().is_empty() { "{}" } else { &raw }).unwrap_or_else(|_| serde_json::json!({}));
        Self { id, name, raw, input }
    }
}

/// What a tool gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    pub text: String,
    pub image: Option<Image>,
    pub is_error: bool,
}

impl ToolResult {
    pub fn ok(call_id: &str, text: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), text: cut(text.into()), image: None, is_error: false }
    }
    pub fn error(call_id: &str, text: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), text: cut(text.into()), image: None, is_error: true }
    }
}

/// Cuts text at [`MAX_TOOL_TEXT`] characters (on a character boundary) and says so.
pub fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_TOOL_TEXT) {
        None => text,
        Some((at, _)) => {
            let total = text.chars().count();
            format!("{}\n[cut: showing the first {MAX_TOOL_TEXT} of {total} characters]", &text[..at])
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolCall(ToolCall),
    ToolResult(ToolResult),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub blocks: Vec<Block>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: Role::User, blocks: vec![Block::Text(text.into())] }
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self { role: Role::Assistant, blocks: vec![Block::Text(text.into())] }
    }
    pub fn text(&self) -> String {
        self.blocks.iter().filter_map(|b| if let Block::Text(t) = b { Some(t.as_str()) } else { None }).collect::<Vec<_>>().join("")
    }
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.blocks.iter().filter_map(|b| if let Block::ToolCall(c) = b { Some(c) } else { None })
    }
}

/// Beyond [`MAX_IMAGES_IN_CONTEXT`] screenshots, drops all but the latest [`IMAGES_AFTER_PRUNE`],
/// leaving a note in their place. Between two such steps the conversation only grows at its end,
/// so each request repeats the previous one byte for byte and the provider's cache serves it.
pub fn prune_images(messages: &mut [Message]) {
    let results = || messages.iter().flat_map(|m| &m.blocks).filter(|b| matches!(b, Block::ToolResult(r) if r.image.is_some()));
    if results().count() <= MAX_IMAGES_IN_CONTEXT {
        return;
    }
    let mut kept = 0;
    for m in messages.iter_mut().rev() {
        for b in m.blocks.iter_mut().rev() {
            if let Block::ToolResult(r) = b {
                if r.image.is_some() {
                    if kept < IMAGES_AFTER_PRUNE {
                        kept += 1;
                    } else {
                        r.image = None;
                        r.text.push_str("\n[an older screenshot was removed from the context]");
                    }
                }
            }
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other,
}

/// One assistant turn as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub stop: StopReason,
    /// What the call cost, as the provider counted it (zeros when it did not say).
    pub usage: botdesk_core::Usage,
}

impl Turn {
    pub fn into_message(self) -> Message {
        let mut blocks = vec![];
        if !self.text.is_empty() {
            blocks.push(Block::Text(self.text));
        }
        blocks.extend(self.calls.into_iter().map(Block::ToolCall));
        Message { role: Role::Assistant, blocks }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_long_text() {
        assert_eq!(cut("abc".into()), "abc");
        let long = "é".repeat(MAX_TOOL_TEXT + 5);
        let c = cut(long);
        assert!(c.starts_with(&"é".repeat(MAX_TOOL_TEXT)));
        assert!(c.ends_with(&format!("[cut: showing the first {MAX_TOOL_TEXT} of {} characters]", MAX_TOOL_TEXT + 5)));
        assert_eq!(cut("x".repeat(MAX_TOOL_TEXT)).len(), MAX_TOOL_TEXT);
    }

    #[test]
    fn screenshots_are_pruned_in_steps() {
        let shot = |id: &str| Message {
            role: Role::User,
            blocks: vec![Block::ToolResult(ToolResult { image: Some(Image::png(Bytes::from_static(b"png"))), ..ToolResult::ok(id, "seen") })],
        };
        let has = |m: &Message| matches!(&m.blocks[0], Block::ToolResult(r) if r.image.is_some());
        let mut ms = vec![shot("a"), Message::assistant("x"), shot("b"), shot("c")];
        prune_images(&mut ms);
        assert!(has(&ms[0]) && has(&ms[2]) && has(&ms[3]), "three stay as they are");
        ms.push(shot("d"));
        prune_images(&mut ms);
        assert_eq!(ms.iter().filter(|m| has(m)).count(), 1, "the fourth leaves only itself");
        assert!(has(&ms[4]));
        assert!(matches!(&ms[0].blocks[0], Block::ToolResult(r) if r.text.contains("removed")));
    }

    #[test]
    fn bad_arguments_parse_to_an_empty_object_and_keep_the_raw_text() {
        let c = ToolCall::new("1".into(), "shell".into(), "{not json".into());
        assert_eq!(c.input, serde_json::json!({}));
        assert_eq!(c.raw, "{not json");
        assert_eq!(ToolCall::new("1".into(), "x".into(), "".into()).input, serde_json::json!({}));
    }
}

//! The conversation in a vendor-neutral form. Each client turns it into its own wire format.

use bytes::Bytes;
use serde::Serialize;

/// At most this many screenshots stay in the model's context; older ones become a short note.
/// (With the values below, a 60-step GUI run reads 85.6 % of its prompt from Anthropic's cache
/// and is billed 0.78× what the computer-use demo's way costs: `cargo xtask bench`.)
pub const MAX_IMAGES_IN_CONTEXT: usize = 9;
/// When there are more, all but this many newest go at once: the prompt changes once every few
/// screenshots, not at each one, and only after the oldest one removed (which a cache breakpoint
/// marks), so what comes before stays cached.
pub const IMAGES_AFTER_PRUNE: usize = 1;
/// Tool result text is cut here, with a note saying so.
pub const MAX_TOOL_TEXT: usize = 12_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// A PNG or JPEG image: a screenshot, or a part of the screen (a zoom).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub media_type: &'static str,
    pub data: Bytes,
    /// The screen frame a screenshot shows (equal ids: equal pixels); None for anything else.
    pub frame: Option<std::sync::Arc<str>>,
}

impl Image {
    pub fn png(data: Bytes) -> Self {
        Self { media_type: "image/png", data, frame: None }
    }
    /// A screenshot of the screen frame `frame`.
    pub fn screenshot(data: Bytes, frame: &str) -> Self {
        Self { media_type: "image/png", data, frame: Some(frame.into()) }
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
    /// Read from the model's text (UI-TARS's actions), not made as a tool call: it goes back to
    /// the model as text, and its result as a user message.
    pub from_text: bool,
}

impl ToolCall {
    pub fn new(id: String, name: String, raw: String) -> Self {
        let input = serde_json::from_str(if raw.trim().is_empty() { "{}" } else { &raw }).unwrap_or_else(|_| serde_json::json!({}));
        Self { id, name, raw, input, from_text: false }
    }

    /// A call read from the model's text.
    pub fn from_text(id: String, name: String, raw: String) -> Self {
        Self { from_text: true, ..Self::new(id, name, raw) }
    }
}

/// What a tool gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    pub text: String,
    /// The image the tool gave, kept even when it is not sent (see [`Shown`]).
    pub image: Option<Image>,
    pub is_error: bool,
    /// Whether the model is sent the image, told the screen has not changed, or told the image
    /// was removed (set before each request by [`prune_images`]).
    pub shown: Shown,
    /// The address of the page in front, when the bot's browser was (OpenAI's computer use
    /// checks it).
    pub page_url: Option<String>,
    /// Which pruning removed its image (1, 2, … in order; 0: none): the prompt changes first at
    /// the oldest image of the latest pruning, where a cache breakpoint keeps what is before.
    pub pruned: u32,
}

/// How a result's image appears in the model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shown {
    /// The image is sent.
    #[default]
    Image,
    /// The screen is the frame of a screenshot still in the context, just before: not sent again.
    Unchanged,
    /// It was removed from the context (older screenshots go in steps).
    Removed,
}

/// What the model reads in place of a screenshot of a screen it has in its context already.
pub const UNCHANGED: &str = "The screen has not changed since your last look (no new screenshot).";
/// What the model reads in place of a screenshot removed from its context.
pub const REMOVED: &str = "[an older screenshot was removed from the context]";

impl ToolResult {
    pub fn ok(call_id: &str, text: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), text: cut(text.into()), image: None, is_error: false, shown: Shown::Image, page_url: None, pruned: 0 }
    }
    pub fn error(call_id: &str, text: impl Into<String>) -> Self {
        Self { is_error: true, ..Self::ok(call_id, text) }
    }

    /// The image the model is sent, if any.
    pub fn sent_image(&self) -> Option<&Image> {
        self.image.as_ref().filter(|_| self.shown == Shown::Image)
    }

    /// The text the model is sent: never empty (the APIs refuse empty text), with a word on an
    /// image it is not sent.
    pub fn sent_text(&self) -> String {
        let note = match (&self.image, self.shown) {
            (Some(_), Shown::Unchanged) => Some(UNCHANGED),
            (Some(_), Shown::Removed) => Some(REMOVED),
            _ => None,
        };
        let text = &self.text;
        match (text.trim().is_empty(), note) {
            (true, Some(n)) => n.to_string(),
            (true, None) if self.is_error => "the tool failed without saying why".into(),
            (true, None) => "done (no output)".into(),
            (false, Some(n)) => format!("{} {n}", text.trim_end()),
            (false, None) => text.clone(),
        }
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
    /// A Responses API turn's output items as received (reasoning with its encrypted content,
    /// messages, function calls), sent back as they are so a reasoning model keeps its reasoning
    /// between calls. Only that format reads them; the turn's text and calls are also blocks.
    Items(Vec<serde_json::Value>),
    /// Claude's extended thinking, sent back exactly as received (its signature proves it), at
    /// the start of its turn. Only the Anthropic format reads it.
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Thinking the provider encrypted (safety), sent back as received.
    RedactedThinking {
        data: String,
    },
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

/// Decides how each result's image appears (see [`Shown`]) and returns where the images sent
/// are. A screenshot of the same frame as the screenshot just before it (zooms aside) is not sent
/// again while that one is sent; once that one is removed, the next look at the frame is sent.
/// So the model is told "unchanged" only while its context holds an image of the screen.
fn settle_images(messages: &mut [Message]) -> Vec<(usize, usize)> {
    let mut sent = vec![];
    let mut last_frame: Option<std::sync::Arc<str>> = None;
    let mut frame_in_context = false;
    for (i, m) in messages.iter_mut().enumerate() {
        for (j, b) in m.blocks.iter_mut().enumerate() {
            let Block::ToolResult(r) = b else { continue };
            let Some(img) = &r.image else { continue };
            let same = img.frame.is_some() && img.frame == last_frame;
            if r.shown == Shown::Removed {
                if img.frame.is_some() {
                    (last_frame, frame_in_context) = (img.frame.clone(), false);
                }
            } else if same && frame_in_context {
                r.shown = Shown::Unchanged;
            } else {
                r.shown = Shown::Image;
                sent.push((i, j));
                if img.frame.is_some() {
                    (last_frame, frame_in_context) = (img.frame.clone(), true);
                }
            }
        }
    }
    sent
}

/// How a run keeps its context: which screenshots and steps stay, and where Anthropic's prompt
/// cache breakpoints go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContextPolicy {
    /// Botdesk's: screenshots pruned in steps ([`prune_images`]), old steps collapsed
    /// ([`collapse_steps`]), breakpoints after the tools, the system prompt and the last block.
    #[default]
    Botdesk,
    /// Anthropic's computer-use demo (`computer_use_demo/loop.py`), the bench's anchor: every step
    /// kept, the three most recent screenshots kept (older ones removed ten at a time, for the
    /// cache), breakpoints on the system prompt and the last block of the three latest user turns.
    AnthropicDemo,
}

/// The demo's `only_n_most_recent_images` and `min_removal_threshold`.
const DEMO_IMAGES: usize = 3;
const DEMO_REMOVAL_CHUNK: usize = 10;

/// Prunes screenshots as `policy` does (see [`ContextPolicy`]); Botdesk's keeps up to `most`.
pub fn prune_images_as(messages: &mut [Message], policy: ContextPolicy, most: usize) {
    match policy {
        ContextPolicy::Botdesk => {
            prune_images_to(messages, most);
        }
        ContextPolicy::AnthropicDemo => {
            let sent = settle_images(messages);
            let mut remove = sent.len().saturating_sub(DEMO_IMAGES);
            remove -= remove % DEMO_REMOVAL_CHUNK;
            for &(i, j) in &sent[..remove] {
                if let Block::ToolResult(r) = &mut messages[i].blocks[j] {
                    r.shown = Shown::Removed;
                    if let Some(img) = &mut r.image {
                        img.data = Bytes::new();
                    }
                }
            }
            settle_images(messages);
        }
    }
}

/// Beyond [`MAX_IMAGES_IN_CONTEXT`] images sent, removes all but the latest [`IMAGES_AFTER_PRUNE`]
/// (a note says so in their place). Between two such steps the conversation only grows at its
/// end, so each request repeats the previous one byte for byte and the provider's cache serves
/// it. Run before each request: it also decides which screenshots are "unchanged".
pub fn prune_images(messages: &mut [Message]) -> bool {
    prune_images_to(messages, MAX_IMAGES_IN_CONTEXT)
}

/// How many screenshots a model with this context window keeps: [`MAX_IMAGES_IN_CONTEXT`], fewer
/// in a small window (a local model's 32k keeps 3), so they leave room for the work.
pub fn images_for_window(window: u64) -> usize {
    ((window / 12_000) as usize).clamp(IMAGES_AFTER_PRUNE + 2, MAX_IMAGES_IN_CONTEXT)
}

/// [`prune_images`] keeping up to `most` screenshots.
pub fn prune_images_to(messages: &mut [Message], most: usize) -> bool {
    let sent = settle_images(messages);
    if sent.len() <= most {
        return false;
    }
    let keep_from = sent[sent.len() - IMAGES_AFTER_PRUNE];
    let generation = results(messages).map(|r| r.pruned).max().unwrap_or(0) + 1;
    for (i, m) in messages.iter_mut().enumerate() {
        for (j, b) in m.blocks.iter_mut().enumerate() {
            if let Block::ToolResult(r) = b {
                if (i, j) < keep_from {
                    if let Some(img) = &mut r.image {
                        if r.shown != Shown::Removed {
                            r.pruned = generation;
                        }
                        r.shown = Shown::Removed;
                        // Never sent again: only what it showed (its frame) is kept.
                        img.data = Bytes::new();
                    }
                }
            }
        }
    }
    settle_images(messages);
    true
}

fn results(messages: &[Message]) -> impl Iterator<Item = &ToolResult> {
    messages.iter().flat_map(|m| &m.blocks).filter_map(|b| if let Block::ToolResult(r) = b { Some(r) } else { None })
}

/// Where the prompt will change, or last changed, when screenshots are pruned: the call ids of
/// the oldest image the latest pruning removed and of the oldest image sent. A cache breakpoint
/// just before each keeps what comes before them cached through the change.
pub fn prune_points(messages: &[Message]) -> Vec<String> {
    let latest = results(messages).map(|r| r.pruned).max().unwrap_or(0);
    let removed = results(messages).find(|r| latest > 0 && r.pruned == latest).map(|r| r.call_id.clone());
    let oldest = results(messages).find(|r| r.sent_image().is_some()).map(|r| r.call_id.clone());
    removed.into_iter().chain(oldest).collect()
}

/// Keeps a run's context as Botdesk does: screenshots pruned in steps, and old steps collapsed
/// only when the screenshots were just pruned (the prompt changes there anyway, and holds one
/// screenshot then, so little is written again), or when they pass [`steps_at_most`].
pub fn keep_context(messages: &mut Vec<Message>, from: usize, most_images: usize) {
    let pruned = prune_images_to(messages, most_images);
    let whole = steps(messages, from).len();
    if (pruned && whole >= STEPS_BEFORE_COLLAPSE) || whole >= STEPS_AT_MOST {
        collapse_steps_to(messages, from, 0, STEPS_KEPT);
        prune_images_to(messages, most_images);
    }
}

/// Steps (an assistant turn with tool calls and the results after it) of a run kept whole at the
/// end of the conversation when older ones collapse to a line per call.
pub const STEPS_KEPT: usize = 10;
/// Collapsing waits until this many steps are whole and screenshots are being pruned (the prompt
/// changes then anyway, and holds one screenshot, so little is written to the cache again), then
/// collapses all but [`STEPS_KEPT`] at once.
pub const STEPS_BEFORE_COLLAPSE: usize = 50;
/// Steps collapse at this many whole steps in any case (a run without screenshots).
pub const STEPS_AT_MOST: usize = 60;
/// The summary keeps its newest lines and says how many older ones it left out.
pub const SUMMARY_LINES: usize = 30;
/// How a collapsed summary begins (a user message right after the task).
pub const COLLAPSED: &str = "[Earlier steps of this task, collapsed to a line per tool call (your TODO.md, if you keep one, has your own notes):]";

/// A line of at most `n` characters of `s` (its first line, `…` when cut).
fn line(s: &str, n: usize) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    match first.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &first[..at]),
        None if s.trim().lines().nth(1).is_some() => format!("{first} …"),
        None => first.to_string(),
    }
}

/// Steps kept when the context window is nearly full.
pub const STEPS_KEPT_WHEN_FULL: usize = 2;

/// Bounds a run's conversation: `messages[from..]` is its work after the task. Once `threshold`
/// steps are whole, all but the newest `keep` become one summary message (kept and extended by
/// later collapses), a line per call with its result. [`keep_context`] collapses to
/// [`STEPS_KEPT`]; near the context window the run keeps [`STEPS_KEPT_WHEN_FULL`]; an earlier run
/// given as history keeps none.
pub fn collapse_steps_to(messages: &mut Vec<Message>, from: usize, threshold: usize, keep: usize) {
    // The model's own summary stays as it is; the lines collapse after it.
    if messages.get(from).is_some_and(|m| m.role == Role::User && m.text().starts_with(COMPACTED)) {
        return collapse_steps_to(messages, from + 1, threshold, keep);
    }
    let is_summary = |m: &Message| m.role == Role::User && m.text().starts_with(COLLAPSED);
    let start = if messages.get(from).is_some_and(is_summary) { from + 1 } else { from };
    let steps = steps(messages, start);
    if steps.len() < threshold.max(keep + 1) {
        return;
    }
    // With nothing kept, everything up to the end of the last step goes.
    let first_kept = if keep == 0 { steps[steps.len() - 1] + 2 } else { steps[steps.len() - keep] };
    // The summary so far: its lines, and how many it already left out.
    let old = if start > from { messages[from].text() } else { String::new() };
    let mut left_out: usize = old.lines().find_map(|l| l.strip_prefix("(")?.split_once(" earlier lines left out)")?.0.parse().ok()).unwrap_or(0);
    let mut lines: Vec<String> = old.lines().filter(|l| l.starts_with("- ")).map(str::to_string).collect();
    for m in &messages[start..first_kept] {
        for b in &m.blocks {
            match b {
                Block::Text(t) if m.role == Role::Assistant && !t.trim().is_empty() => lines.push(format!("- you said: {}", line(t, 100))),
                Block::Text(t) if m.role == Role::User && m.blocks.iter().any(|b| matches!(b, Block::ToolResult(_))) => {
                    lines.push(format!("- the person: {}", line(t, 100)))
                }
                Block::ToolCall(c) => lines.push(format!("- {} {}", c.name, line(&c.raw, 80))),
                Block::ToolResult(r) => {
                    if let Some(l) = lines.last_mut() {
                        l.push_str(&format!(" → {}: {}", if r.is_error { "error" } else { "ok" }, line(&r.text, 60)));
                    }
                }
                _ => {}
            }
        }
    }
    if lines.len() > SUMMARY_LINES {
        left_out += lines.len() - SUMMARY_LINES;
        lines.drain(..lines.len() - SUMMARY_LINES);
    }
    let mut text = COLLAPSED.to_string();
    if left_out > 0 {
        text.push_str(&format!("\n({left_out} earlier lines left out)"));
    }
    for l in lines {
        text.push('\n');
        text.push_str(&l);
    }
    messages.splice(from..first_kept, [Message::user(text)]);
}

/// Where each step of `messages[start..]` begins (an assistant turn with tool calls, followed
/// by their results).
fn steps(messages: &[Message], start: usize) -> Vec<usize> {
    (start..messages.len().saturating_sub(1))
        .filter(|&i| {
            messages[i].role == Role::Assistant
                && messages[i].tool_calls().next().is_some()
                && messages[i + 1].blocks.iter().any(|b| matches!(b, Block::ToolResult(_)))
        })
        .collect()
}

/// How the model's own summary of a run's earlier steps begins (a user message right after the task).
pub const COMPACTED: &str = "[Earlier steps of this task, in your own summary (your TODO.md, if you keep one, has your own notes):]";

/// Where the newest `keep` steps of `messages[from..]` begin, when there is more than that to
/// compact.
pub fn compactable(messages: &[Message], from: usize, keep: usize) -> Option<usize> {
    let steps = steps(messages, from);
    (steps.len() > keep && keep > 0).then(|| steps[steps.len() - keep])
}

/// Replaces `messages[from..first_kept]` (earlier summaries included) with the model's summary.
pub fn compact_to(messages: &mut Vec<Message>, from: usize, first_kept: usize, summary: &str) {
    messages.splice(from..first_kept, [Message::user(format!("{COMPACTED}\n{}", summary.trim()))]);
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    /// The model declined the request (Anthropic `refusal`).
    Refusal,
    /// The conversation filled the model's context window (Anthropic
    /// `model_context_window_exceeded`).
    ContextFull,
    /// The provider's content filter stopped the reply (OpenAI `content_filter`).
    ContentFilter,
    /// The reply ended unfinished for another reason (see [`Turn::detail`]).
    Incomplete,
}

/// One assistant turn as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub stop: StopReason,
    /// The provider's own word for why it stopped, when it is not one we name.
    pub detail: Option<String>,
    /// What the call cost, as the provider counted it (zeros when it did not say).
    pub usage: botdesk_core::Usage,
    /// The Responses API's output items (empty in the other formats).
    pub items: Vec<serde_json::Value>,
    /// Claude's thinking blocks, in order (they lead its turn).
    pub thinking: Vec<Block>,
}

impl Turn {
    /// A turn of text and calls that ended as `stop`, with nothing else.
    pub fn new(text: String, calls: Vec<ToolCall>, stop: StopReason, usage: botdesk_core::Usage) -> Self {
        Turn { text, calls, stop, detail: None, usage, items: vec![], thinking: vec![] }
    }

    pub fn into_message(self) -> Message {
        let mut blocks = self.thinking;
        if !self.text.is_empty() {
            blocks.push(Block::Text(self.text));
        }
        blocks.extend(self.calls.into_iter().map(Block::ToolCall));
        if !self.items.is_empty() {
            blocks.push(Block::Items(self.items));
        }
        Message { role: Role::Assistant, blocks }
    }
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

    fn result(id: &str, image: Image) -> Message {
        Message { role: Role::User, blocks: vec![Block::ToolResult(ToolResult { image: Some(image), ..ToolResult::ok(id, "seen") })] }
    }

    fn frame(id: &str, f: &str) -> Message {
        result(id, Image::screenshot(Bytes::from_static(b"png"), f))
    }

    fn sent(m: &Message) -> bool {
        matches!(&m.blocks[0], Block::ToolResult(r) if r.sent_image().is_some())
    }

    fn said(m: &Message) -> String {
        match &m.blocks[0] {
            Block::ToolResult(r) => r.sent_text(),
            _ => m.text(),
        }
    }

    #[test]
    fn screenshots_are_pruned_in_steps() {
        let shot = |i: usize| result(&format!("s{i}"), Image::png(Bytes::from_static(b"png")));
        let mut ms: Vec<Message> = (0..MAX_IMAGES_IN_CONTEXT).map(shot).collect();
        assert!(!prune_images(&mut ms));
        assert!(ms.iter().all(sent), "as many as may stay, stay");
        ms.push(shot(MAX_IMAGES_IN_CONTEXT));
        assert!(prune_images(&mut ms));
        assert_eq!(ms.iter().filter(|m| sent(m)).count(), IMAGES_AFTER_PRUNE, "one more leaves only the newest");
        assert!(sent(ms.last().unwrap()));
        assert!(said(&ms[0]).ends_with(REMOVED));
        assert!(matches!(&ms[0].blocks[0], Block::ToolResult(r) if r.image.as_ref().unwrap().data.is_empty()), "a removed image's bytes are let go");
        // Where the prompt changed is kept for the cache: the oldest removed, then the oldest sent.
        assert_eq!(prune_points(&ms), ["s0", &format!("s{MAX_IMAGES_IN_CONTEXT}")]);
    }

    #[test]
    fn an_unchanged_screen_is_said_only_while_its_image_is_in_the_context() {
        // Two looks at one frame: the second is "unchanged".
        let mut ms = vec![frame("a", "F"), frame("b", "F")];
        prune_images(&mut ms);
        assert!(sent(&ms[0]) && !sent(&ms[1]) && said(&ms[1]).ends_with(UNCHANGED));
        // A look at another frame in between: the same pixels again are sent again.
        let mut ms = vec![frame("a", "F"), frame("b", "G"), frame("c", "F")];
        prune_images(&mut ms);
        assert!(ms.iter().all(sent));
        // Screenshot, zooms (images without a frame) until pruning, the same screen again: the
        // zooms pushed the screenshot out, so the screen is sent again, not said to be unchanged.
        let zoom = |i: usize| result(&format!("z{i}"), Image::png(Bytes::from_static(b"crop")));
        let mut ms = vec![frame("a", "F")];
        ms.extend((0..MAX_IMAGES_IN_CONTEXT).map(zoom));
        prune_images(&mut ms);
        ms.push(frame("b", "F"));
        prune_images(&mut ms);
        assert!(!sent(&ms[0]) && sent(ms.last().unwrap()), "{:?}", ms.iter().map(said).collect::<Vec<_>>());
        // A zoom between two looks at one frame keeps the first in the context: "unchanged".
        let mut ms = vec![frame("a", "F"), zoom(1), frame("b", "F")];
        prune_images(&mut ms);
        assert!(sent(&ms[0]) && sent(&ms[1]) && !sent(&ms[2]));
        // ... until pruning removes the first: then the latest look carries the image.
        ms.extend((2..MAX_IMAGES_IN_CONTEXT + 1).map(zoom));
        prune_images(&mut ms);
        assert!(!sent(&ms[0]) && sent(ms.last().unwrap()));
        ms.push(frame("c", "F"));
        prune_images(&mut ms);
        assert!(sent(ms.last().unwrap()), "the frame is not in the context any more: sent");
    }

    #[test]
    fn after_steps_collapse_or_are_summarized_the_screen_is_sent_again() {
        let step = |i: usize, f: &str| {
            let call = ToolCall::new(format!("c{i}"), "computer_observe".into(), "{}".into());
            let mut r = frame(&format!("c{i}"), f);
            if let Block::ToolResult(res) = &mut r.blocks[0] {
                res.call_id = format!("c{i}");
            }
            [Message { role: Role::Assistant, blocks: vec![Block::ToolCall(call)] }, r]
        };
        // The screen changes once (step 0), then stays: every later look is "unchanged".
        let mut ms = vec![Message::user("the task")];
        ms.extend(step(0, "F"));
        for i in 1..STEPS_AT_MOST - 1 {
            ms.extend(step(i, "F"));
            keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        }
        assert_eq!(ms.iter().filter(|m| sent(m)).count(), 1);
        // Collapsing takes step 0 (the one with the image) away: the oldest kept look carries it.
        ms.extend(step(STEPS_AT_MOST, "F"));
        keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        assert_eq!(ms.len(), 2 + 2 * STEPS_KEPT, "collapsed");
        let images: Vec<usize> = (0..ms.len()).filter(|&i| sent(&ms[i])).collect();
        assert_eq!(images.len(), 1, "one image of the screen, not none");
        assert!(ms[images[0] + 1..].iter().all(|m| !matches!(&m.blocks[0], Block::ToolResult(_)) || said(m).ends_with(UNCHANGED)));
        // The model's own summary replaces all but the last two steps: the same holds.
        let first_kept = compactable(&ms, 1, STEPS_KEPT_WHEN_FULL).unwrap();
        compact_to(&mut ms, 1, first_kept, "I looked at the screen many times.");
        prune_images(&mut ms);
        assert_eq!(ms.iter().filter(|m| sent(m)).count(), 1, "one image after the summary too");
    }

    #[test]
    fn old_steps_collapse_in_steps_and_pairs_stay_whole() {
        let step = |i: usize| {
            let call = ToolCall::new(format!("c{i}"), "shell".into(), format!(r#"{{"command":"echo {i}"}}"#));
            [
                Message { role: Role::Assistant, blocks: vec![Block::ToolCall(call)] },
                Message { role: Role::User, blocks: vec![Block::ToolResult(ToolResult::ok(&format!("c{i}"), format!("exit code 0\n{i}")))] },
            ]
        };
        // Without screenshots (nothing is pruned), steps collapse at STEPS_AT_MOST.
        let mut ms = vec![Message::user("the task")];
        for i in 0..STEPS_AT_MOST - 1 {
            ms.extend(step(i));
        }
        let before = ms.clone();
        keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        assert_eq!(ms, before, "nothing collapses before the threshold");
        ms.extend(step(STEPS_AT_MOST - 1));
        keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        assert_eq!(ms.len(), 2 + 2 * STEPS_KEPT, "task, summary, the kept steps");
        let collapsed = STEPS_AT_MOST - STEPS_KEPT;
        let summary = ms[1].text();
        assert!(summary.starts_with(COLLAPSED) && summary.contains(&format!("({} earlier lines left out)", collapsed - SUMMARY_LINES)), "{summary}");
        assert!(summary.contains(&format!(r#"- shell {{"command":"echo {}"}} → ok: exit code 0 …"#, collapsed - 1)), "{summary}");
        assert!(!summary.contains(&format!("echo {collapsed}\"")), "{summary}");
        assert_eq!(summary.lines().filter(|l| l.starts_with("- ")).count(), SUMMARY_LINES);
        assert_eq!(ms[2].tool_calls().next().unwrap().id, format!("c{collapsed}"), "a kept step starts with its call");
        // Steady until the next threshold.
        let steady = ms.clone();
        ms.extend(step(STEPS_AT_MOST));
        keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        assert_eq!(&ms[..steady.len()], &steady[..]);

        // With screenshots, steps collapse when screenshots are pruned and STEPS_BEFORE_COLLAPSE
        // are whole: the prompt changes then anyway, and holds one screenshot.
        let shot = |i: usize| {
            let [a, mut r] = step(i);
            if let Block::ToolResult(res) = &mut r.blocks[0] {
                res.image = Some(Image::screenshot(Bytes::from_static(b"png"), &format!("f{i}")));
            }
            [a, r]
        };
        let mut ms = vec![Message::user("the task")];
        let mut collapsed_at = None;
        for i in 0..STEPS_AT_MOST {
            ms.extend(shot(i));
            keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
            if collapsed_at.is_none() && ms[1].text().starts_with(COLLAPSED) {
                collapsed_at = Some(i + 1);
            }
        }
        let at = collapsed_at.expect("collapsed within STEPS_AT_MOST steps");
        assert!(at >= STEPS_BEFORE_COLLAPSE && (at - 1) % MAX_IMAGES_IN_CONTEXT == 0, "at step {at}: a pruning's");
    }

    #[test]
    fn the_models_summary_replaces_older_steps_and_survives_later_collapses() {
        let step = |i: usize| {
            let call = ToolCall::new(format!("c{i}"), "shell".into(), format!(r#"{{"command":"echo {i}"}}"#));
            [
                Message { role: Role::Assistant, blocks: vec![Block::ToolCall(call)] },
                Message { role: Role::User, blocks: vec![Block::ToolResult(ToolResult::ok(&format!("c{i}"), format!("{i}")))] },
            ]
        };
        let mut ms = vec![Message::user("the task")];
        ms.extend(step(0));
        ms.extend(step(1));
        assert_eq!(compactable(&ms, 1, STEPS_KEPT_WHEN_FULL), None, "nothing beyond the kept steps");
        ms.extend(step(2));
        let first_kept = compactable(&ms, 1, STEPS_KEPT_WHEN_FULL).unwrap();
        compact_to(&mut ms, 1, first_kept, " did 0 ");
        assert_eq!(ms.len(), 2 + 2 * STEPS_KEPT_WHEN_FULL);
        assert_eq!(ms[1].text(), format!("{COMPACTED}\ndid 0"));
        assert_eq!(ms[2].tool_calls().next().unwrap().id, "c1");
        // The usual collapse later leaves the model's summary as it is and collapses after it.
        for i in 3..3 + STEPS_AT_MOST {
            ms.extend(step(i));
        }
        keep_context(&mut ms, 1, MAX_IMAGES_IN_CONTEXT);
        assert!(ms[1].text().starts_with(COMPACTED) && ms[2].text().starts_with(COLLAPSED), "{:?}", &ms[..3]);
        assert_eq!(ms.len(), 3 + 2 * STEPS_KEPT);
    }

    #[test]
    fn bad_arguments_parse_to_an_empty_object_and_keep_the_raw_text() {
        let c = ToolCall::new("1".into(), "shell".into(), "{not json".into());
        assert_eq!(c.input, serde_json::json!({}));
        assert_eq!(c.raw, "{not json");
        assert_eq!(ToolCall::new("1".into(), "x".into(), "".into()).input, serde_json::json!({}));
    }
}

//! What one model call is, whatever its wire format: the model's configuration, the request,
//! the errors, and the fold each format ([`crate::anthropic`], [`crate::openai`],
//! [`crate::responses`]) implements to turn its stream into a turn. The formats and the client
//! that drives them ([`crate::client`]) depend on this; it depends on neither.

use std::time::Duration;

use crate::conversation::{Message, Turn};
use crate::sse;
use crate::tools::ToolSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    /// Chat Completions: OpenAI's older API and every compatible server.
    OpenAi,
    /// OpenAI's Responses API, for its reasoning models (their reasoning is carried between calls).
    Responses,
}

/// Which model to call and how. `key` is only ever put in a request header.
#[derive(Clone)]
pub struct ModelConfig {
    pub wire: Wire,
    pub model: String,
    pub base_url: String,
    pub key: Option<String>,
    pub max_tokens: u32,
    pub retry: Retry,
    /// How a run keeps its context and marks the prompt cache: Botdesk's own, or (the bench's
    /// anchor) the way Anthropic's computer-use demo does.
    pub context: crate::conversation::ContextPolicy,
    /// The model's context window in tokens: near it, the run collapses older steps at once.
    pub context_window: u64,
    /// OpenAI's own API (which takes `max_completion_tokens`; compatible servers take `max_tokens`).
    pub openai_native: bool,
    /// The words the model uses to work the screen.
    pub dialect: Dialect,
    /// Claude's thinking, as its API asks for it (the table of models gives a default; a
    /// person can change an extended thinking budget).
    pub thinking: botdesk_core::models::Thinking,
    /// The model binds its thinking blocks to the conversation before them (see
    /// `botdesk_core::models::ModelInfo::thinking_binding`).
    pub thinking_binding: bool,
}

/// The beta that lets a request whose earlier messages changed (pruned screenshots) drop the
/// thinking blocks they invalidate, for the models that bind them.
pub const THINKING_BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// Tokens left for the answer after a turn's thinking (the output limit is raised to fit both).
pub const ANSWER_TOKENS: u32 = 4096;

/// How a model works the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Our `computer_observe` and `computer_act` tools.
    Plain,
    /// Claude's own `computer` tool in the version the model was trained on; its actions are
    /// mapped onto ours.
    Claude(ClaudeTool),
    /// OpenAI's computer use through the Responses API: `computer_call`s carried out as ours.
    OpenAiComputer(OpenAiTool),
    /// UI-TARS: our tools, and its own text actions (`Action: click(...)`) when its server answers
    /// in text.
    UiTars,
}

/// The versions of Claude's computer tool (computer use docs): each with its beta header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaudeTool {
    V20241022,
    V20250124,
    /// With `zoom` (turned on).
    V20251124,
}

/// OpenAI's computer tools (computer use guide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiTool {
    /// `computer_use_preview` (display size, environment; `truncation: auto`), for the
    /// `computer-use-preview` model.
    Preview,
    /// The built-in `computer` tool (GPT-5.4 and later).
    Computer,
}

impl Dialect {
    /// The dialect the table of models gives a model of this provider kind: a vendor's own
    /// computer tool only on that vendor's API.
    pub fn default_for(kind: &str, model: &str) -> Self {
        use botdesk_core::models::ScreenTool as T;
        match (kind, botdesk_core::models::lookup_for(kind, model).info.tool) {
            ("anthropic", T::Computer20241022) => Dialect::Claude(ClaudeTool::V20241022),
            ("anthropic", T::Computer20250124) => Dialect::Claude(ClaudeTool::V20250124),
            ("anthropic", T::Computer20251124) => Dialect::Claude(ClaudeTool::V20251124),
            ("openai", T::OpenAiComputerPreview) => Dialect::OpenAiComputer(OpenAiTool::Preview),
            ("openai", T::OpenAiComputer) => Dialect::OpenAiComputer(OpenAiTool::Computer),
            (_, T::UiTars) => Dialect::UiTars,
            _ => Dialect::Plain,
        }
    }

    /// Whether the model works the screen with Claude's own computer tool.
    pub fn claude_computer(self) -> bool {
        matches!(self, Dialect::Claude(_))
    }

    /// Whether the model's own computer tool stands for our `computer_observe` and `computer_act`.
    pub fn own_computer_tool(self) -> bool {
        matches!(self, Dialect::Claude(_) | Dialect::OpenAiComputer(_))
    }

    /// Claude's computer tool for a `w`×`h` screen, and the beta header it needs.
    pub(crate) fn computer_tool(self, (w, h): (u32, u32)) -> Option<(serde_json::Value, &'static str)> {
        let Dialect::Claude(v) = self else { return None };
        let (kind, beta) = match v {
            ClaudeTool::V20241022 => ("computer_20241022", "computer-use-2024-10-22"),
            ClaudeTool::V20250124 => ("computer_20250124", "computer-use-2025-01-24"),
            ClaudeTool::V20251124 => ("computer_20251124", "computer-use-2025-11-24"),
        };
        let mut tool = serde_json::json!({"type": kind, "name": "computer", "display_width_px": w, "display_height_px": h});
        if v == ClaudeTool::V20251124 {
            tool["enable_zoom"] = serde_json::json!(true);
        }
        Some((tool, beta))
    }
}

impl std::fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelConfig")
            .field("wire", &self.wire)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("key", &self.key.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// Whether an API key may be sent to `base_url`: over `https://`, or over plain `http://` only to
/// this machine (a local server); anywhere else anyone on the way would read it.
pub fn key_may_go_to(base_url: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(base_url).map_err(|e| format!("the base URL {base_url:?} is not a URL: {e}"))?;
    let host = url.host_str().unwrap_or("");
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
    let local = host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(()),
        "http" if local => Ok(()),
        _ => Err(format!(
            "an API key goes only over https:// (or plain http:// to this machine), not to {base_url}: use the server's https:// address, or add the model without a key"
        )),
    }
}

impl ModelConfig {
    /// `kind` is `anthropic`, `openai` or `openai-compatible` (as stored by `model add`).
    pub fn new(kind: &str, model: &str, base_url: Option<&str>, key: Option<String>) -> Result<Self, ModelError> {
        let (wire, default_base) = match kind {
            "anthropic" => (Wire::Anthropic, "https://api.anthropic.com"),
            "openai" => (Wire::OpenAi, "https://api.openai.com/v1"),
            "openai-compatible" => (Wire::OpenAi, ""),
            other => return Err(ModelError::Config(format!("unknown model kind {other:?}"))),
        };
        let base_url = base_url.unwrap_or(default_base).trim_end_matches('/').to_string();
        if base_url.is_empty() {
            return Err(ModelError::Config("an OpenAI-compatible model needs a base URL".into()));
        }
        if key.as_deref().is_some_and(|k| !k.is_empty()) {
            key_may_go_to(&base_url).map_err(ModelError::Config)?;
        }
        let dialect = Dialect::default_for(kind, model);
        // OpenAI's reasoning models keep their reasoning between tool calls only on Responses,
        // and its computer use is only there.
        let responses = reasoning_model(model) || matches!(dialect, Dialect::OpenAiComputer(_));
        let wire = if kind == "openai" && responses { Wire::Responses } else { wire };
        let limits = botdesk_core::Limits::default_for(kind, model);
        let row = botdesk_core::models::lookup_for(kind, model).info;
        let thinking = if kind == "anthropic" { row.thinking } else { botdesk_core::models::Thinking::None };
        Ok(Self {
            wire,
            model: model.into(),
            base_url,
            key,
            max_tokens: limits.max_output.min(u32::MAX as u64) as u32,
            retry: Retry::default(),
            context: Default::default(),
            context_window: limits.context_window,
            openai_native: kind == "openai",
            dialect,
            thinking,
            thinking_binding: kind == "anthropic" && row.thinking_binding,
        })
    }

    pub(crate) fn endpoint(&self) -> String {
        match self.wire {
            Wire::Responses => format!("{}/responses", self.base_url),
            Wire::Anthropic if self.base_url.ends_with("/v1") => format!("{}/messages", self.base_url),
            Wire::Anthropic => format!("{}/v1/messages", self.base_url),
            Wire::OpenAi => format!("{}/chat/completions", self.base_url),
        }
    }
}

/// OpenAI's reasoning models (o1, o3, o4-mini, GPT-5 and later).
pub fn reasoning_model(model: &str) -> bool {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    ["o1", "o3", "o4", "gpt-5", "gpt-6", "codex-"].iter().any(|p| m.starts_with(p)) && !m.contains("chat")
}

/// Retries of 408, 409, 429 and 5xx answers and of connection failures.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub base: Duration,
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self { attempts: 5, base: Duration::from_millis(500), max_wait: Duration::from_secs(60) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("the model provider refused the API key ({status}): {message}. Check the key in Settings → Models")]
    BadKey { status: u16, message: String },
    #[error("the model provider does not know the model {model:?}: {message}")]
    UnknownModel { model: String, message: String },
    #[error("the model {model:?} cannot read images, and a bot needs screenshots to use its desktop: {message}")]
    NoImages { model: String, message: String },
    #[error("the model provider is overloaded or failing ({status}) after {attempts} attempts: {message}")]
    Unavailable { status: u16, attempts: u32, message: String },
    #[error("the model provider could not be reached after {attempts} attempts: {message}")]
    Network { attempts: u32, message: String },
    #[error("the model provider rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the model provider sent a reply Botdesk cannot read: {0}")]
    Protocol(String),
    #[error("{0}")]
    Config(String),
    #[error("cancelled")]
    Cancelled,
}

impl ModelError {
    /// What a run that ends on this error failed of (none: it was cancelled, not failed).
    pub fn failure(&self) -> Option<botdesk_core::RunFailure> {
        use botdesk_core::RunFailure as F;
        Some(match self {
            ModelError::BadKey { .. } => F::ModelBadKey,
            ModelError::UnknownModel { .. } => F::ModelUnknown,
            ModelError::NoImages { .. } => F::ModelNoImages,
            ModelError::Unavailable { .. } | ModelError::Network { .. } => F::ModelUnavailable,
            ModelError::Rejected { .. } | ModelError::Protocol(_) | ModelError::Config(_) => F::ModelError,
            ModelError::Cancelled => return None,
        })
    }
}

/// What one request asks for.
pub struct Request<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// Whether the model may call tools in its answer.
    pub tool_choice: ToolChoice,
}

impl Request<'_> {
    /// About how many prompt tokens the request holds (a token per 4 bytes of text, 1,600 per
    /// image): what an announced rate limit is checked against before it is sent.
    pub fn estimate_tokens(&self) -> u64 {
        use crate::conversation::Block;
        let tools: usize = self.tools.iter().map(|t| t.name().len() + t.description.len() + t.schema.to_string().len()).sum();
        let mut bytes = self.system.len() + tools;
        let mut images = 0u64;
        for b in self.messages.iter().flat_map(|m| &m.blocks) {
            bytes += match b {
                Block::Text(t) => t.len(),
                Block::ToolCall(c) => c.name.len() + c.raw.len(),
                Block::ToolResult(r) => {
                    images += u64::from(r.sent_image().is_some());
                    r.text.len()
                }
                Block::Thinking { thinking, .. } => thinking.len(),
                Block::RedactedThinking { data } => data.len(),
                Block::Items(items) => items.iter().map(|i| i.to_string().len()).sum(),
            };
        }
        bytes as u64 / 4 + images * 1_600
    }
}

/// Whether the model may call tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolChoice {
    /// As it sees fit (the default: nothing is sent).
    Auto,
    /// Not at all (a summary): the tools are still sent, so the prompt stays what the cache holds.
    None,
}

/// One failed attempt: retry it (after `wait`, if the server said), or give up with this error.
pub(crate) enum Attempt {
    Retry { error: ModelError, wait: Option<Duration> },
    Fatal(ModelError),
}

/// Folds a format's stream events into one turn.
pub(crate) trait Fold: Send {
    /// Returns true at the end of the stream.
    fn event(&mut self, ev: &sse::Event, on_text: &mut (dyn FnMut(&str) + Send)) -> Result<bool, Attempt>;
    fn finish(&mut self) -> Result<Turn, ModelError>;
}

/// Folds `(event name, data)` pairs into a turn (for the formats' tests).
#[cfg(test)]
pub(crate) fn fold_all(mut fold: impl Fold, events: &[(&str, &str)]) -> Result<Turn, ModelError> {
    for (name, data) in events {
        let ev = sse::Event { name: name.to_string(), data: data.to_string() };
        if let Err(Attempt::Fatal(e) | Attempt::Retry { error: e, .. }) = fold.event(&ev, &mut |_| {}) {
            return Err(e);
        }
    }
    fold.finish()
}

pub(crate) fn protocol(what: impl std::fmt::Display) -> Attempt {
    Attempt::Fatal(ModelError::Protocol(what.to_string()))
}

/// An error the server reported inside the stream (e.g. `overloaded_error`).
pub(crate) fn stream_error(data: &serde_json::Value) -> Attempt {
    let kind = data.pointer("/error/type").and_then(|v| v.as_str()).unwrap_or("");
    let message = data.pointer("/error/message").and_then(|v| v.as_str()).unwrap_or("unknown error").to_string();
    if matches!(kind, "overloaded_error" | "api_error" | "rate_limit_error" | "server_error") {
        Attempt::Retry { error: ModelError::Unavailable { status: 529, attempts: 0, message }, wait: None }
    } else {
        Attempt::Fatal(ModelError::Rejected { status: 200, message: format!("{kind}: {message}") })
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    /// A key goes over https, or over plain http only to this machine; a model without a key
    /// may be anywhere.
    #[test]
    fn a_key_never_goes_over_plain_http_to_another_machine() {
        for ok in ["https://api.example.com/v1", "http://localhost:11434/v1", "http://127.0.0.1:8080", "http://127.8.0.1", "http://[::1]:9000/v1"] {
            assert!(key_may_go_to(ok).is_ok(), "{ok}");
        }
        for bad in ["http://192.168.1.20:8000/v1", "http://example.com/v1", "http://localhost.example.com", "http://[::2]/v1", "ftp://localhost/"] {
            let e = key_may_go_to(bad).unwrap_err();
            assert!(e.contains("only over https://"), "{bad}: {e}");
        }
        let e = ModelConfig::new("openai-compatible", "m", Some("http://10.0.0.5:8000/v1"), Some("sk-1".into())).unwrap_err();
        assert!(e.to_string().contains("only over https://"), "{e}");
        assert!(ModelConfig::new("openai-compatible", "m", Some("http://10.0.0.5:8000/v1"), None).is_ok(), "no key, nothing to leak");
    }
}

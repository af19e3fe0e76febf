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
    /// Mark Anthropic prompt-cache breakpoints (on by default; the bench's anchor turns it off).
    pub prompt_cache: bool,
    /// The model's context window in tokens: near it, the run collapses older steps at once.
    pub context_window: u64,
    /// OpenAI's own API (which takes `max_completion_tokens`; compatible servers take `max_tokens`).
    pub openai_native: bool,
    /// The words the model uses to work the screen.
    pub dialect: Dialect,
}

/// How a model works the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Our `computer_observe` and `computer_act` tools.
    Plain,
    /// Claude's own `computer` tool (computer_20250124, beta `computer-use-2025-01-24`), which
    /// it was trained on; its actions are mapped onto ours.
    ClaudeComputer,
    /// The newer version of it (computer_20251124, beta `computer-use-2025-11-24`) with `zoom`
    /// turned on, for the models that have it.
    ClaudeComputerZoom,
}

impl Dialect {
    /// Claude's computer tool for the Claude models trained on it, on Anthropic's API.
    pub fn default_for(kind: &str, model: &str) -> Self {
        let m = model.to_ascii_lowercase();
        let trained = ["claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "claude-3-7-sonnet", "claude-3-5-sonnet"].iter().any(|p| m.starts_with(p));
        let zoom = ["claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-sonnet-4-6"].iter().any(|p| m.starts_with(p));
        match () {
            _ if kind != "anthropic" => Dialect::Plain,
            _ if zoom => Dialect::ClaudeComputerZoom,
            _ if trained => Dialect::ClaudeComputer,
            _ => Dialect::Plain,
        }
    }

    /// Whether the model works the screen with Claude's own computer tool.
    pub fn claude_computer(self) -> bool {
        matches!(self, Dialect::ClaudeComputer | Dialect::ClaudeComputerZoom)
    }

    /// Claude's computer tool for a `w`×`h` screen, and the beta header it needs.
    pub(crate) fn computer_tool(self, (w, h): (u32, u32)) -> Option<(serde_json::Value, &'static str)> {
        match self {
            Dialect::Plain => None,
            Dialect::ClaudeComputer => Some((
                serde_json::json!({"type": "computer_20250124", "name": "computer", "display_width_px": w, "display_height_px": h}),
                "computer-use-2025-01-24",
            )),
            Dialect::ClaudeComputerZoom => Some((
                serde_json::json!({"type": "computer_20251124", "name": "computer", "display_width_px": w, "display_height_px": h, "enable_zoom": true}),
                "computer-use-2025-11-24",
            )),
        }
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
        // OpenAI's reasoning models keep their reasoning between tool calls only on Responses.
        let wire = if kind == "openai" && reasoning_model(model) { Wire::Responses } else { wire };
        let limits = botdesk_core::Limits::default_for(kind, model);
        Ok(Self {
            wire,
            model: model.into(),
            base_url,
            key,
            max_tokens: limits.max_output.min(u32::MAX as u64) as u32,
            retry: Retry::default(),
            prompt_cache: true,
            context_window: limits.context_window,
            openai_native: kind == "openai",
            dialect: Dialect::default_for(kind, model),
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

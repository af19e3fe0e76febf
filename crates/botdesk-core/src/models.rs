//! The table of models (`models.json` beside this crate): for each model family its prices,
//! context window, output limit, how it works the screen (its tool dialect and coordinate space),
//! its thinking, and the smallest prompt its provider caches, each row with the day it was checked
//! and where. Everything that depends on a model's name reads it here, through [`lookup`].
//!
//! Names are normalized first ([`normalize`]): lowercased, a router's prefix dropped
//! (`anthropic/claude-…`, `openrouter/openai/gpt-…`, Bedrock's `anthropic.claude-…-v1:0`), date
//! suffixes dropped (`-20250929`, `@20250929`, `-2024-08-06`) and an Ollama tag (`:7b`) dropped.
//! The longest matching prefix wins; an unknown model falls back to its family's row (a prefix
//! such as `claude`, `gpt`, or the last resort `""`), and [`Lookup::known`] says so.

use serde::Deserialize;

use crate::action::CoordSpace;
use crate::{Limits, Prices};

/// How a model works the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ScreenTool {
    /// Botdesk's own `computer_observe` and `computer_act` tools.
    #[serde(rename = "ours")]
    Ours,
    /// Claude's own computer tool, in the version the model was trained on.
    #[serde(rename = "computer_20241022")]
    Computer20241022,
    #[serde(rename = "computer_20250124")]
    Computer20250124,
    /// With `zoom`.
    #[serde(rename = "computer_20251124")]
    Computer20251124,
    /// OpenAI's computer-use model through the Responses API (the `computer_use_preview` tool,
    /// for `computer-use-preview`, shut down by OpenAI on 2026-07-23).
    #[serde(rename = "computer_use_preview")]
    OpenAiComputerPreview,
    /// OpenAI's built-in `computer` tool of the Responses API (GPT-5.4 and later).
    #[serde(rename = "computer")]
    OpenAiComputer,
    /// UI-TARS: our tools when its server makes tool calls, its own text actions otherwise.
    #[serde(rename = "ui-tars")]
    UiTars,
}

/// How a model thinks before it answers, as its provider's API asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thinking {
    /// Not at all (or not that Botdesk asks for).
    None,
    /// Anthropic's extended thinking with a token budget (`thinking: {type: enabled,
    /// budget_tokens}`): the default budget.
    Extended(u32),
    /// Anthropic's adaptive thinking (`thinking: {type: adaptive}`): the model decides how much.
    Adaptive,
}

impl std::fmt::Display for Thinking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Thinking::None => f.write_str("off"),
            Thinking::Extended(b) => write!(f, "extended, up to {b} tokens a turn"),
            Thinking::Adaptive => f.write_str("adaptive (the model decides)"),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// The start of a normalized model name this row is for.
    pub prefix: String,
    /// A fallback for models of this family that have no row of their own.
    #[serde(default)]
    pub family: bool,
    /// `anthropic`, `openai` or `local`.
    pub provider: String,
    /// Dollars per million tokens: input, output, cache read, cache write.
    pub prices: Option<[f64; 4]>,
    pub context_window: u64,
    /// The output tokens Botdesk asks for per call (at most what the model allows).
    pub max_output: u64,
    pub tool: ScreenTool,
    pub coordinates: CoordSpace,
    pub thinking: Thinking,
    /// The smallest prompt prefix the provider caches, in tokens.
    pub min_cache: u64,
    /// Its thinking blocks are bound to the conversation before them (Claude Fable 5.1 and later,
    /// Opus and Sonnet 5.5): once screenshots are pruned they no longer match, and the API is
    /// asked to drop them instead of refusing the request (thinking docs, "binding").
    #[serde(default)]
    pub thinking_binding: bool,
    /// The day the row was checked (`YYYY-MM-DD`), and against what.
    pub checked: String,
    pub source: String,
}

impl ModelInfo {
    pub fn prices(&self) -> Option<Prices> {
        self.prices.map(|[input, output, cache_read, cache_write]| Prices { input, output, cache_read, cache_write })
    }

    pub fn limits(&self) -> Limits {
        Limits { context_window: self.context_window, max_output: self.max_output, thinking: None }
    }

    /// The thinking a model of this row is asked for, given what the person set (`budget`:
    /// None, the row's default; 0, off): an extended budget applies to models that think with
    /// one; adaptive models decide for themselves.
    pub fn thinking(&self, budget: Option<u32>) -> Thinking {
        match (self.thinking, budget) {
            (Thinking::Extended(_), Some(0)) => Thinking::None,
            (Thinking::Extended(_), Some(b)) => Thinking::Extended(b.max(1024)),
            (t, _) => t,
        }
    }
}

/// What the table says of a model name.
#[derive(Debug, Clone, Copy)]
pub struct Lookup {
    pub info: &'static ModelInfo,
    /// The name has a row of its own (not only its family's).
    pub known: bool,
}

static TABLE: std::sync::LazyLock<Vec<ModelInfo>> = std::sync::LazyLock::new(|| {
    let mut rows: Vec<ModelInfo> = serde_json::from_str(include_str!("../models.json")).expect("models.json is valid (a test checks it)");
    // Longest prefix first: the first match is the best.
    rows.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
    rows
});

/// Every row, longest prefix first.
pub fn table() -> &'static [ModelInfo] {
    &TABLE
}

/// A model name as the table is keyed: see the module's documentation.
pub fn normalize(name: &str) -> String {
    let mut m = name.trim().to_ascii_lowercase();
    // Routers: "openrouter/anthropic/claude-…", "anthropic/claude-…".
    if let Some((_, last)) = m.rsplit_once('/') {
        m = last.to_string();
    }
    // Bedrock and Vertex: "us.anthropic.claude-…-v1:0", "claude-…@20250929".
    if let Some((_, rest)) = m.split_once("anthropic.") {
        m = rest.to_string();
    }
    if let Some(at) = m.find('@') {
        m.truncate(at);
    }
    if let Some(at) = m.rfind("-v") {
        if m[at + 2..].chars().all(|c| c.is_ascii_digit() || c == ':') && at + 2 < m.len() {
            m.truncate(at);
        }
    }
    // Ollama's tag: "qwen2.5vl:7b".
    if let Some(at) = m.find(':') {
        m.truncate(at);
    }
    // Dates: "-20250929", "-2024-08-06".
    let b = m.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    if b.len() > 9 && b[b.len() - 9] == b'-' && digits(&b[b.len() - 8..]) {
        m.truncate(m.len() - 9);
    } else if b.len() > 11 && b[b.len() - 11] == b'-' && digits(&b[b.len() - 10..b.len() - 6]) && b[b.len() - 6] == b'-' && b[b.len() - 3] == b'-' {
        m.truncate(m.len() - 11);
    }
    m
}

/// The row for a model name: its own, else its family's.
pub fn lookup(name: &str) -> Lookup {
    let n = normalize(name);
    let info = TABLE.iter().find(|r| n.starts_with(&r.prefix)).expect("the table has a row for any name (prefix \"\")");
    Lookup { info, known: !info.family }
}

/// [`lookup`], for a model added with this provider kind (`anthropic`, `openai`,
/// `openai-compatible`): a name the table does not know gets its provider's family row (an
/// Anthropic model named by a proxy is still a Claude), not a local server's.
pub fn lookup_for(kind: &str, name: &str) -> Lookup {
    let found = lookup(name);
    let family = match kind {
        "anthropic" => "claude",
        "openai" => "gpt",
        _ => return found,
    };
    if found.known || found.info.provider != "local" {
        return found;
    }
    let info = TABLE.iter().find(|r| r.prefix == family).expect("a family row for each provider");
    Lookup { info, known: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_whole_and_dated() {
        let mut seen = std::collections::HashSet::new();
        for r in table() {
            assert!(seen.insert(&r.prefix), "{} twice", r.prefix);
            assert_eq!(normalize(&r.prefix), r.prefix, "a prefix is written normalized");
            assert!(matches!(r.provider.as_str(), "anthropic" | "openai" | "local"), "{}", r.prefix);
            assert!(r.max_output < r.context_window && r.context_window >= 4096, "{}", r.prefix);
            let d = r.checked.as_bytes();
            assert!(d.len() == 10 && d[4] == b'-' && d[7] == b'-' && r.checked.starts_with("20"), "{}: checked {:?}", r.prefix, r.checked);
            assert!(r.source.starts_with("https://"), "{}: source {:?}", r.prefix, r.source);
            if let Some(p) = r.prices {
                assert!(p.iter().all(|v| *v >= 0.0 && v.is_finite()), "{}", r.prefix);
            }
            if let Thinking::Extended(b) = r.thinking {
                assert!(b >= 1024, "{}: a thinking budget is at least 1,024 tokens", r.prefix);
            }
        }
        assert!(table().iter().any(|r| r.prefix.is_empty() && r.family), "a last resort for any name");
    }

    #[test]
    fn names_are_normalized_as_routers_and_clouds_write_them() {
        for (name, want) in [
            ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
            ("anthropic/claude-opus-4-6", "claude-opus-4-6"),
            ("openrouter/anthropic/claude-sonnet-4", "claude-sonnet-4"),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
            ("claude-opus-4-1@20250805", "claude-opus-4-1"),
            ("openai/gpt-4o-2024-08-06", "gpt-4o"),
            ("Qwen2.5-VL-7B-Instruct", "qwen2.5-vl-7b-instruct"),
            ("qwen2.5vl:7b", "qwen2.5vl"),
            ("gpt-5", "gpt-5"),
        ] {
            assert_eq!(normalize(name), want, "{name}");
        }
    }

    #[test]
    fn unknown_models_fall_back_by_family() {
        let l = lookup("claude-nonesuch-9");
        assert!(!l.known && l.info.provider == "anthropic", "{:?}", l.info.prefix);
        assert!(!lookup("my-local-model").known);
        assert!(lookup("claude-sonnet-4-5-20250929").known);
    }
}

//! The providers' prompt caches as their documentation describes them, so the usage the scripted
//! server reports (and the bench measures) is what a real run would be billed.
//!
//! Anthropic (prompt caching docs): a request marks up to four breakpoints; the prefix up to each
//! (tools, then system, then messages, block by block) is written to the cache when it is at least
//! the model's minimum cacheable length; a later request reads the longest cached prefix that ends
//! at one of its breakpoints or at most 20 blocks before one; an entry lives 5 minutes from its
//! last use. A change to `tool_choice` or the thinking settings invalidates the cached messages
//! (tools and system stay). Usage: `cache_read_input_tokens` is the prefix read,
//! `cache_creation_input_tokens` what was written after it up to the last breakpoint,
//! `input_tokens` the rest.
//!
//! OpenAI (prompt caching guide): automatic for prompts of 1,024 tokens or more; the longest
//! prefix shared with a recent request is read, in steps of 128 tokens; entries live 5 to 10
//! minutes (5 here). Usage: `cached_tokens` within the prompt tokens; nothing is billed to write.
//!
//! A token is 4 bytes of the request's JSON; an image counts as its vendor counts it (Anthropic:
//! width × height / 750 after fitting 1,568 px and 1.15 megapixels; OpenAI: 85 + 170 per 512 px
//! tile after fitting 2,048 px and 768 px on the short side).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use super::rules::ImageMemo;
use crate::client::Wire;

/// How long an entry lives after its last use.
pub const LIFETIME: Duration = Duration::from_secs(5 * 60);
/// Blocks before a breakpoint where Anthropic still looks for a cached prefix.
pub const LOOKBACK: usize = 20;
/// OpenAI's smallest cached prompt, and the step a cached prefix grows by.
const OPENAI_MIN: u64 = 1024;
const OPENAI_STEP: u64 = 128;

/// The smallest prefix Anthropic caches for a model (prompt caching docs, "Cache limitations"):
/// the table of models says (512 to 4,096 tokens).
pub fn anthropic_minimum(model: &str) -> u64 {
    botdesk_core::models::lookup(model).info.min_cache
}

/// One block of a request's prompt: the hash of the prompt up to and including it, its tokens
/// and the tokens up to it, and whether it carries a breakpoint.
#[derive(Debug, Clone, Copy)]
struct Unit {
    hash: u64,
    end: u64,
    breakpoint: bool,
}

/// What a request read from and wrote to the cache, and its prompt in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    pub prompt: u64,
    pub read: u64,
    pub written: u64,
}

#[derive(Default)]
pub struct PromptCache {
    /// Anthropic: cached prefixes by hash, with when each expires.
    entries: HashMap<u64, Instant>,
    /// OpenAI: recent prompts (their units), with when each expires.
    recent: Vec<(Vec<Unit>, Instant)>,
    /// Added to the clock (tests move time on without waiting).
    pub skew: Duration,
}

impl PromptCache {
    fn now(&self) -> Instant {
        Instant::now() + self.skew
    }

    /// Plays one request against the cache.
    pub fn request(&mut self, wire: Wire, body: &Value, memo: &mut ImageMemo) -> Billed {
        let now = self.now();
        let units = units(wire, body, memo);
        let prompt = units.last().map_or(0, |u| u.end);
        match wire {
            Wire::Anthropic => {
                self.entries.retain(|_, exp| *exp > now);
                let minimum = anthropic_minimum(body["model"].as_str().unwrap_or(""));
                let points: Vec<usize> = units.iter().enumerate().filter(|(_, u)| u.breakpoint).map(|(i, _)| i).collect();
                // The longest cached prefix ending at a breakpoint or up to 20 blocks before one.
                let hit = points.iter().filter_map(|&b| (b.saturating_sub(LOOKBACK)..=b).rev().find(|&j| self.entries.contains_key(&units[j].hash))).max();
                let read = hit.map_or(0, |j| units[j].end);
                if let Some(j) = hit {
                    self.entries.insert(units[j].hash, now + LIFETIME);
                }
                let mut written = 0;
                for &b in &points {
                    if units[b].end >= minimum {
                        self.entries.insert(units[b].hash, now + LIFETIME);
                        written = written.max(units[b].end.saturating_sub(read));
                    }
                }
                Billed { prompt, read, written }
            }
            Wire::OpenAi | Wire::Responses => {
                self.recent.retain(|(_, exp)| *exp > now);
                let mut best = 0;
                for (old, exp) in self.recent.iter_mut() {
                    let common = old.iter().zip(&units).take_while(|(a, b)| a.hash == b.hash).last().map_or(0, |(_, u)| u.end);
                    if common > best {
                        best = common;
                        *exp = now + LIFETIME;
                    }
                }
                let read = if prompt >= OPENAI_MIN && best >= OPENAI_MIN { best / OPENAI_STEP * OPENAI_STEP } else { 0 };
                self.recent.push((units, now + LIFETIME));
                Billed { prompt, read, written: 0 }
            }
        }
    }
}

/// The request's prompt block by block, in the order the provider caches it.
fn units(wire: Wire, body: &Value, memo: &mut ImageMemo) -> Vec<Unit> {
    let mut blocks: Vec<(Value, bool)> = vec![];
    let mark = |v: &Value| v.get("cache_control").is_some();
    let push_all = |v: &Value, blocks: &mut Vec<(Value, bool)>| {
        for b in v.as_array().into_iter().flatten() {
            blocks.push((b.clone(), mark(b)));
        }
    };
    push_all(&body["tools"], &mut blocks);
    match wire {
        Wire::Anthropic => {
            match &body["system"] {
                Value::String(s) => blocks.push((Value::String(s.clone()), false)),
                v => push_all(v, &mut blocks),
            }
            // Messages are cached under the tool choice and thinking settings they were sent with.
            blocks.push((serde_json::json!({"tool_choice": body["tool_choice"], "thinking": body["thinking"]}), false));
            for m in body["messages"].as_array().into_iter().flatten() {
                blocks.push((serde_json::json!({"role": m["role"]}), false));
                match &m["content"] {
                    Value::String(s) => blocks.push((Value::String(s.clone()), false)),
                    v => push_all(v, &mut blocks),
                }
            }
        }
        Wire::OpenAi => push_all(&body["messages"], &mut blocks),
        Wire::Responses => {
            blocks.push((body["instructions"].clone(), false));
            push_all(&body["input"], &mut blocks);
        }
    }
    // Each model has a cache of its own.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body["model"].as_str().hash(&mut h);
    let mut end = 0;
    blocks
        .into_iter()
        .map(|(b, breakpoint)| {
            let (text, image_tokens) = stripped(wire, &b, memo);
            text.hash(&mut h);
            end += text.len() as u64 / 4 + image_tokens;
            Unit { hash: h.finish(), end, breakpoint }
        })
        .collect()
}

/// A block as the cache compares it (breakpoints aside; images by their content), and the
/// tokens of the images in it.
fn stripped(wire: Wire, v: &Value, memo: &mut ImageMemo) -> (String, u64) {
    let mut images = 0;
    let out = strip(wire, v, memo, &mut images);
    (out.to_string(), images)
}

fn strip(wire: Wire, v: &Value, memo: &mut ImageMemo, images: &mut u64) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, val) in m {
                if k == "cache_control" {
                    continue;
                }
                let image = match (k.as_str(), val.as_str()) {
                    ("data", Some(d)) if m.get("type").and_then(Value::as_str) == Some("base64") => {
                        base64::engine::general_purpose::STANDARD.decode(d).ok().map(|bytes| (m["media_type"].as_str().unwrap_or("").to_string(), bytes))
                    }
                    ("url" | "image_url", Some(u)) if u.starts_with("data:image/") => {
                        let (head, data) = u.split_once(";base64,").unwrap_or(("", ""));
                        base64::engine::general_purpose::STANDARD.decode(data).ok().map(|bytes| (head.trim_start_matches("data:").to_string(), bytes))
                    }
                    _ => None,
                };
                let val = match image {
                    Some((media, bytes)) => {
                        let size = memo.size(&media, &bytes).unwrap_or((0, 0));
                        *images += image_tokens(wire, size);
                        let mut hh = std::collections::hash_map::DefaultHasher::new();
                        bytes.hash(&mut hh);
                        Value::String(format!("image {:016x}", hh.finish()))
                    }
                    None => strip(wire, val, memo, images),
                };
                out.insert(k.clone(), val);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| strip(wire, v, memo, images)).collect()),
        v => v.clone(),
    }
}

/// The tokens an image of this size costs, as its vendor counts them.
pub fn image_tokens(wire: Wire, (w, h): (u32, u32)) -> u64 {
    let (w, h) = (w as f64, h as f64);
    if w <= 0.0 || h <= 0.0 {
        return 0;
    }
    match wire {
        Wire::Anthropic => {
            let scale = (1568.0 / w.max(h)).min((1_150_000.0 / (w * h)).sqrt()).min(1.0);
            ((w * scale).round() * (h * scale).round() / 750.0).ceil() as u64
        }
        Wire::OpenAi | Wire::Responses => {
            let s = (2048.0 / w.max(h)).min(1.0);
            let (w, h) = (w * s, h * s);
            let s = (768.0 / w.min(h)).min(1.0);
            let (w, h) = (w * s, h * s);
            85 + 170 * ((w / 512.0).ceil() * (h / 512.0).ceil()) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(i: usize) -> Value {
        json!({"name": format!("tool_{i}"), "description": "x".repeat(400), "input_schema": {"type": "object"}})
    }

    /// A request of `turns` turns of about 100 tokens each, breakpoints on the system prompt and
    /// on the last block.
    fn request(turns: usize, model: &str) -> Value {
        let mut tools: Vec<Value> = (0..10).map(tool).collect();
        tools.last_mut().unwrap()["cache_control"] = json!({"type": "ephemeral"});
        let mut messages: Vec<Value> = (0..turns)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [{"type": "text", "text": format!("{i} {}", "y".repeat(400))}]}))
            .collect();
        messages.last_mut().unwrap()["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        json!({"model": model, "tools": tools, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}], "messages": messages})
    }

    #[test]
    fn anthropic_reads_the_previous_prefix_and_writes_the_new_turns() {
        let mut c = PromptCache::default();
        let mut memo = ImageMemo::default();
        let first = c.request(Wire::Anthropic, &request(3, "claude-sonnet-4-5"), &mut memo);
        assert_eq!((first.read, first.written), (0, first.prompt), "everything written the first time");
        let second = c.request(Wire::Anthropic, &request(5, "claude-sonnet-4-5"), &mut memo);
        assert_eq!(second.read, first.prompt, "the whole previous request is read");
        assert_eq!(second.written, second.prompt - first.prompt);
        // Far beyond the lookback: only the prefix up to the system prompt is found.
        let far = c.request(Wire::Anthropic, &request(60, "claude-sonnet-4-5"), &mut memo);
        assert!(far.read < 1500 && far.read > 1000, "{far:?}");
        // After five minutes nothing is left.
        c.skew += LIFETIME + Duration::from_secs(1);
        assert_eq!(c.request(Wire::Anthropic, &request(60, "claude-sonnet-4-5"), &mut memo).read, 0);
    }

    #[test]
    fn anthropic_caches_nothing_below_the_models_minimum_and_a_tool_choice_change_costs_the_messages() {
        let mut c = PromptCache::default();
        let mut memo = ImageMemo::default();
        let small = json!({"model": "claude-opus-4-5", "system": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": "a"}]});
        assert_eq!(c.request(Wire::Anthropic, &small, &mut memo).written, 0);
        let big = request(40, "claude-opus-4-5");
        let first = c.request(Wire::Anthropic, &big, &mut memo);
        assert!(first.prompt > 4096 && first.written == first.prompt);
        let again = c.request(Wire::Anthropic, &big, &mut memo);
        assert_eq!((again.read, again.written), (first.prompt, 0));
        // The tools and system prompt alone are below this model's 4,096: never cached apart.
        let mut none = big.clone();
        none["tool_choice"] = json!({"type": "none"});
        assert_eq!(c.request(Wire::Anthropic, &none, &mut memo).read, 0);
        let big = request(40, "claude-sonnet-4-5");
        c.request(Wire::Anthropic, &big, &mut memo);
        let mut none = big.clone();
        none["tool_choice"] = json!({"type": "none"});
        let r = c.request(Wire::Anthropic, &none, &mut memo);
        assert!(r.read > 1000 && r.read < 1500, "tools and system only: {r:?}");
    }

    #[test]
    fn openai_reads_shared_prefixes_in_steps_of_128_from_1024() {
        let mut c = PromptCache::default();
        let mut memo = ImageMemo::default();
        let req = |n: usize| json!({"messages": (0..n).map(|i| json!({"role": "user", "content": format!("{i} {}", "z".repeat(400))})).collect::<Vec<_>>()});
        c.request(Wire::OpenAi, &req(5), &mut memo);
        assert_eq!(c.request(Wire::OpenAi, &req(6), &mut memo).read, 0, "below 1024 tokens");
        c.request(Wire::OpenAi, &req(30), &mut memo);
        let b = c.request(Wire::OpenAi, &req(31), &mut memo);
        assert!(b.read % 128 == 0 && b.read > b.prompt - 250 && b.written == 0, "{b:?}");
    }

    #[test]
    fn images_cost_what_their_vendor_counts() {
        assert_eq!(image_tokens(Wire::Anthropic, (1280, 800)), 1366);
        assert_eq!(image_tokens(Wire::Anthropic, (200, 100)), 27);
        assert_eq!(image_tokens(Wire::OpenAi, (1280, 800)), 85 + 170 * 6);
        assert_eq!(image_tokens(Wire::OpenAi, (100, 100)), 255);
    }
}

//! Ollama's own API, beside its OpenAI-compatible `/v1`: the context window it really runs a
//! model with. Its `/v1` takes no context size (a request's `num_ctx` is ignored) and silently
//! drops the oldest messages beyond the window, the task first, so a run must know the window.
//!
//! Asked in order: `GET /api/version` (is this Ollama at all?), `GET /api/ps` (the context of the
//! loaded model, Ollama 0.10 and later), `POST /api/show` (a `num_ctx` set in its Modelfile);
//! when neither says, the model is loaded (`POST /api/generate` without a prompt, which the run's
//! first call would do anyway) and `/api/ps` asked again. Every request has a timeout and every
//! answer a size cap; anything unexpected means "not known", never an error of the run.

use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// How long a quick question may take.
const ASK: Duration = Duration::from_secs(3);
/// How long loading a model may take before the run goes on without knowing its window.
const LOAD: Duration = Duration::from_secs(120);
/// The largest answer read (`/api/show` carries the Modelfile and the licence).
const MAX_ANSWER: usize = 4 << 20;

/// The window Ollama runs a model with, and where that was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub context: u64,
    pub source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The loaded model's own context (`/api/ps`).
    Loaded,
    /// `PARAMETER num_ctx` in its Modelfile (`/api/show`).
    Modelfile,
}

/// The server's root: the base URL without its `/v1`.
fn root(base_url: &str) -> &str {
    let b = base_url.trim_end_matches('/');
    b.strip_suffix("/v1").unwrap_or(b)
}

/// The answer of `req` as JSON, when it came in time, was a success and is within the cap.
async fn ask(req: reqwest::RequestBuilder, within: Duration) -> Option<Value> {
    let fetch = async {
        let mut resp = req.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.ok()? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).ok()
    };
    tokio::time::timeout(within, fetch).await.ok().flatten()
}

/// Whether `name` (as Ollama lists it) is `model`: a name without a tag is `:latest`.
fn same_model(name: &str, model: &str) -> bool {
    let full = |n: &str| if n.contains(':') { n.to_string() } else { format!("{n}:latest") };
    full(name) == full(model)
}

/// The context of `model` among the loaded models of an `/api/ps` answer.
pub fn loaded_context(ps: &Value, model: &str) -> Option<u64> {
    ps["models"].as_array()?.iter().find(|m| ["name", "model"].iter().any(|k| m[k].as_str().is_some_and(|n| same_model(n, model))))?["context_length"]
        .as_u64()
        .filter(|&n| n > 0)
}

/// `num_ctx` from the `parameters` text of an `/api/show` answer.
pub fn modelfile_context(show: &Value) -> Option<u64> {
    show["parameters"]
        .as_str()?
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("num_ctx")).then(|| w.next()?.parse().ok()).flatten()
        })
        .filter(|&n: &u64| n > 0)
}

/// The window Ollama at `base_url` runs `model` with; None when the server is not Ollama or does
/// not say (in time).
pub async fn served_context(http: &reqwest::Client, base_url: &str, model: &str, cancel: &CancellationToken) -> Option<Served> {
    let root = root(base_url);
    let work = async {
        ask(http.get(format!("{root}/api/version")), ASK).await?["version"].as_str()?;
        let ps = || ask(http.get(format!("{root}/api/ps")), ASK);
        if let Some(context) = ps().await.and_then(|v| loaded_context(&v, model)) {
            return Some(Served { context, source: Source::Loaded });
        }
        if let Some(context) =
            ask(http.post(format!("{root}/api/show")).header("content-type", "application/json").body(json!({ "model": model }).to_string()), ASK)
                .await
                .and_then(|v| modelfile_context(&v))
        {
            return Some(Served { context, source: Source::Modelfile });
        }
        ask(
            http.post(format!("{root}/api/generate")).header("content-type", "application/json").body(json!({ "model": model, "stream": false }).to_string()),
            LOAD,
        )
        .await?;
        let context = loaded_context(&ps().await?, model)?;
        Some(Served { context, source: Source::Loaded })
    };
    tokio::select! {
        served = work => served,
        _ = cancel.cancelled() => None,
    }
}

/// What the person is told when Ollama runs `model` with a smaller window than the `set` one.
pub fn smaller(model: &str, served: &Served, set: u64) -> String {
    format!(
        "Ollama runs {model} with a context window of {} tokens, smaller than the {set} set for this model: this run keeps to {}, summarizing its older steps sooner. \
         To give it more, start Ollama with OLLAMA_CONTEXT_LENGTH set higher.",
        served.context, served.context
    )
}

/// What the person is told when Ollama's window for `model` cannot hold one step of a bot.
pub fn too_small(model: &str, served: &Served, need: u64) -> String {
    let raise = need.next_power_of_two().max(16_384);
    format!(
        "Ollama runs {model} with a context window of {} tokens{}, and one step of a bot needs about {need} \
         (its instructions and tools, the task, a screenshot and room for the reply). Ollama drops what does not fit without saying so, \
         so the run did not start. Give the model a larger window: start Ollama with OLLAMA_CONTEXT_LENGTH={raise} (for example \
         `OLLAMA_CONTEXT_LENGTH={raise} ollama serve`), or make a variant with `PARAMETER num_ctx {raise}` in a Modelfile \
         (`ollama create NAME -f Modelfile`) and use that model.",
        served.context,
        match served.source {
            Source::Loaded => " (as it says of the loaded model)",
            Source::Modelfile => " (num_ctx in its Modelfile)",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_only_where_they_say_it() {
        let ps = json!({"models": [{"name": "llava:13b", "context_length": 8192}, {"name": "qwen2.5vl:latest", "model": "qwen2.5vl:latest", "context_length": 4096}]});
        assert_eq!(loaded_context(&ps, "qwen2.5vl"), Some(4096));
        assert_eq!(loaded_context(&ps, "llava:13b"), Some(8192));
        assert_eq!(loaded_context(&ps, "llava"), None, "llava is llava:latest");
        assert_eq!(loaded_context(&json!({"models": [{"name": "m", "context_length": 0}]}), "m"), None);
        assert_eq!(loaded_context(&json!({"models": [{"name": "m"}]}), "m"), None, "Ollama before 0.10 does not say");
        for nonsense in [json!(null), json!({"models": "x"}), json!({"models": [1, null, "m"]}), json!({"models": [{"name": "m", "context_length": -5}]})] {
            assert_eq!(loaded_context(&nonsense, "m"), None);
        }
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx                        32768\ntemperature 0.1"});
        assert_eq!(modelfile_context(&show), Some(32768));
        assert_eq!(modelfile_context(&json!({"parameters": "num_ctx lots"})), None);
        assert_eq!(modelfile_context(&json!({"parameters": "num_ctx 0"})), None);
        assert_eq!(modelfile_context(&json!({"modelfile": "PARAMETER num_ctx 9"})), None);
        assert_eq!(root("http://localhost:11434/v1/"), "http://localhost:11434");
        assert_eq!(root("http://h:1/ollama"), "http://h:1/ollama");
    }

    #[test]
    fn the_person_is_told_how_to_raise_the_window() {
        let m = too_small("qwen2.5vl", &Served { context: 4096, source: Source::Loaded }, 5200);
        assert!(
            m.contains("4096 tokens") && m.contains("about 5200") && m.contains("OLLAMA_CONTEXT_LENGTH=16384") && m.contains("PARAMETER num_ctx 16384"),
            "{m}"
        );
    }
}

//! One small streaming client for two wire formats: Anthropic Messages, and OpenAI chat
//! completions (also any OpenAI-compatible base URL: Ollama, vLLM, LM Studio, OpenRouter, xAI).
//! Retries 408/409/429/5xx and replies broken off mid-stream with backoff, honouring Retry-After;
//! stops at once when cancelled.

use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::conversation::Turn;
pub use crate::model::{reasoning_model, ClaudeTool, Dialect, ModelConfig, ModelError, OpenAiTool, Request, Retry, ToolChoice, Wire};
use crate::model::{Attempt, Fold};
use crate::{anthropic, openai, pace, responses, sse};

/// The longest a call waits out rate limits (429s that say when to come back) before it fails.
pub const RATE_LIMIT_PATIENCE: Duration = Duration::from_secs(15 * 60);

/// Hears what happens during a model call. Every method has a default that ignores it.
pub trait Listener: Send {
    /// A piece of the reply's text.
    fn text(&mut self, _t: &str) {}
    /// The reply broke off and is asked for again: forget its text so far.
    fn restart(&mut self, _why: &str) {}
    /// The call waits this long first, for `why` ("the rate limit", "a retry after an error").
    fn waiting(&mut self, _wait: Duration, _why: &str) {}
}

pub struct ModelClient {
    config: ModelConfig,
    http: reqwest::Client,
}

impl ModelClient {
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { config, http })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The window an Ollama server really runs this model with; None for other servers, or when
    /// it does not say (see [`crate::ollama`]).
    pub async fn served_context(&self, cancel: &CancellationToken) -> Option<crate::ollama::Served> {
        if self.config.wire != Wire::OpenAi || self.config.openai_native {
            return None;
        }
        crate::ollama::served_context(&self.http, &self.config.base_url, &self.config.model, cancel).await
    }

    /// Sends the conversation and streams the reply: `listener` hears each piece of text as it
    /// arrives. Waits first when the provider's announced rate limits say so (see
    /// [`crate::pace`]). Retries transient failures, also one that broke a reply off mid-stream:
    /// then the listener is told why, and the text streamed so far is to be forgotten. A 429 that
    /// says when to come back is waited out without counting as a failed attempt, up to
    /// [`RATE_LIMIT_PATIENCE`] in all.
    pub async fn complete(&self, req: &Request<'_>, listener: &mut dyn Listener, cancel: &CancellationToken) -> Result<Turn, ModelError> {
        let body = match self.config.wire {
            Wire::Anthropic => anthropic::body(&self.config, req),
            Wire::OpenAi => openai::body(&self.config, req),
            Wire::Responses => responses::body(&self.config, req),
        };
        let body = serde_json::to_vec(&body).map_err(|e| ModelError::Protocol(e.to_string()))?;
        let need = req.estimate_tokens();
        let pace_key = pace::key(&self.config.endpoint(), self.config.key.as_deref());
        let retry = self.config.retry;
        let (mut attempt, mut rate_limited) = (0, Duration::ZERO);
        let sleep = |wait: Duration, why: &str, listener: &mut dyn Listener| {
            if wait >= Duration::from_secs(1) {
                listener.waiting(wait, why);
            }
            async move {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => Ok(()),
                    _ = cancel.cancelled() => Err(ModelError::Cancelled),
                }
            }
        };
        loop {
            if let Some(wait) = pace::known(pace_key).wait_for(need, std::time::SystemTime::now()) {
                let wait = wait.min(retry.max_wait);
                tracing::info!(wait_ms = wait.as_millis() as u64, "waiting for the provider's rate limit");
                sleep(wait, "the rate limit", listener).await?;
            }
            attempt += 1;
            let mut streamed = false;
            let mut forward = |t: &str| {
                streamed = true;
                listener.text(t)
            };
            let outcome = tokio::select! {
                r = self.attempt(&body, &mut forward, pace_key) => r,
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
            };
            let (error, wait) = match outcome {
                Ok(turn) => return Ok(turn),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry { error, wait }) => (error, wait),
            };
            // A rate limit the provider says when it lifts is waited out, not counted as a failure.
            let limited = matches!(error, ModelError::Unavailable { status: 429, .. }) && wait.is_some();
            if limited && rate_limited < RATE_LIMIT_PATIENCE {
                attempt -= 1;
            }
            if attempt >= retry.attempts {
                return Err(match error {
                    ModelError::Unavailable { status, message, .. } => ModelError::Unavailable { status, attempts: attempt, message },
                    ModelError::Network { message, .. } => ModelError::Network { attempts: attempt, message },
                    e => e,
                });
            }
            let wait = retry_wait(retry, attempt.max(1), wait, fastrand::f64());
            tracing::warn!(attempt, wait_ms = wait.as_millis() as u64, "model call failed, retrying: {error}");
            if streamed {
                listener.restart(&error.to_string());
            }
            let why = if limited {
                rate_limited += wait;
                "the rate limit"
            } else {
                "a retry after an error"
            };
            sleep(wait, why, listener).await?;
        }
    }

    async fn attempt(&self, body: &[u8], on_text: &mut (dyn FnMut(&str) + Send), pace_key: u64) -> Result<Turn, Attempt> {
        let c = &self.config;
        let mut rb = self.http.post(c.endpoint()).header("content-type", "application/json").header("accept", "text/event-stream");
        rb = match (c.wire, &c.key) {
            (Wire::Anthropic, Some(k)) => rb.header("x-api-key", k),
            (Wire::OpenAi | Wire::Responses, Some(k)) => rb.header("authorization", format!("Bearer {k}")),
            (_, None) => rb,
        };
        if c.wire == Wire::Anthropic {
            rb = rb.header("anthropic-version", "2023-06-01");
        }
        let betas: Vec<&str> = c
            .dialect
            .computer_tool(botdesk_core::action::SCREEN)
            .map(|(_, beta)| beta)
            .into_iter()
            .chain(c.thinking_binding.then_some(crate::model::THINKING_BINDING_BETA))
            .collect();
        if !betas.is_empty() {
            rb = rb.header("anthropic-beta", betas.join(","));
        }
        let net = |e: reqwest::Error| Attempt::Retry { error: ModelError::Network { attempts: 0, message: without_url(e) }, wait: None };
        let resp = rb.body(body.to_vec()).send().await.map_err(net)?;
        let status = resp.status().as_u16();
        let now = std::time::SystemTime::now();
        let limits = pace::Limits::read(resp.headers(), now);
        pace::learn(pace_key, limits);
        if !(200..300).contains(&status) {
            // A 429 that gives no retry-after still says, in its limits, when they reset.
            let wait = server_wait(resp.headers(), now).or_else(|| (status == 429).then(|| limits.reset_after(now)).flatten());
            let text = resp.text().await.unwrap_or_default();
            return Err(classify(status, &text, &c.model, wait));
        }
        let mut parser = sse::Parser::default();
        let mut fold: Box<dyn Fold> = match c.wire {
            Wire::Anthropic => Box::<anthropic::Fold>::default(),
            Wire::OpenAi => Box::<openai::Fold>::default(),
            Wire::Responses => Box::<responses::Fold>::default(),
        };
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(net)?;
            for ev in parser.push(&chunk).map_err(|e| Attempt::Fatal(ModelError::Protocol(e)))? {
                if fold.event(&ev, on_text)? {
                    return fold.finish().map_err(Attempt::Fatal);
                }
            }
        }
        if let Some(ev) = parser.finish() {
            fold.event(&ev, on_text)?;
        }
        // The connection ended without the stream's end: a reply broken off, asked for again.
        fold.finish().map_err(|e| Attempt::Retry { error: ModelError::Network { attempts: 0, message: format!("the reply broke off: {e}") }, wait: None })
    }
}

fn without_url(e: reqwest::Error) -> String {
    let timeout = e.is_timeout();
    let s = e.without_url().to_string();
    if timeout {
        format!("timed out ({s})")
    } else {
        s
    }
}

fn server_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msg = parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message").or_else(|| v.get("message")).or_else(|| v.get("error")).and_then(|m| m.as_str()).map(str::to_string));
    let msg = msg.unwrap_or_else(|| body.trim().to_string());
    let mut msg: String = msg.chars().take(500).collect();
    if msg.is_empty() {
        msg = "no details given".into();
    }
    msg
}

/// How long the server asked us to wait: `retry-after-ms` (OpenAI's), else `retry-after` in
/// seconds or as an HTTP date (against `now`). Anything unreadable, negative or beyond any sane
/// wait counts as not said (the capped backoff applies).
fn server_wait(headers: &reqwest::header::HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let number = |v: &str, scale: f64| v.parse::<f64>().ok().and_then(|n| Duration::try_from_secs_f64(n * scale).ok());
    if let Some(wait) = header("retry-after-ms").and_then(|v| number(v, 0.001)) {
        return Some(wait);
    }
    let v = header("retry-after")?;
    number(v, 1.0).or_else(|| Some(httpdate::parse_http_date(v).ok()?.duration_since(now).unwrap_or(Duration::ZERO)))
}

/// The wait before retry number `attempt`, spread by `jitter` (0..1) so that bots told the same
/// thing do not all come back at once: what the server said plus up to a tenth, else exponential
/// backoff from `retry.base` over its upper quarter; at most `retry.max_wait`.
fn retry_wait(retry: Retry, attempt: u32, said: Option<Duration>, jitter: f64) -> Duration {
    let j = jitter.clamp(0.0, 1.0);
    let wait = match said {
        Some(s) => s.min(retry.max_wait).mul_f64(1.0 + 0.1 * j),
        None => retry.base.saturating_mul(1 << (attempt - 1).min(10)).min(retry.max_wait).mul_f64(0.75 + 0.25 * j),
    };
    wait.min(retry.max_wait)
}

fn classify(status: u16, body: &str, model: &str, wait: Option<Duration>) -> Attempt {
    let message = server_message(body);
    let low = message.to_lowercase();
    let model_missing =
        low.contains("model") && ["not found", "does not exist", "unknown", "not exist", "invalid model", "no such"].iter().any(|w| low.contains(w));
    let no_images =
        low.contains("image") && ["not support", "does not support", "unsupported", "cannot", "can't", "vision", "multimodal"].iter().any(|w| low.contains(w));
    match status {
        401 | 403 => Attempt::Fatal(ModelError::BadKey { status, message }),
        404 => Attempt::Fatal(ModelError::UnknownModel { model: model.into(), message }),
        400 | 422 if no_images => Attempt::Fatal(ModelError::NoImages { model: model.into(), message }),
        400 | 422 if model_missing => Attempt::Fatal(ModelError::UnknownModel { model: model.into(), message }),
        408 | 409 | 429 | 500..=599 => Attempt::Retry { error: ModelError::Unavailable { status, attempts: 0, message }, wait },
        _ => Attempt::Fatal(ModelError::Rejected { status, message }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fatal(a: Attempt) -> ModelError {
        match a {
            Attempt::Fatal(e) => e,
            Attempt::Retry { error, .. } => panic!("expected a fatal error, got a retry of {error}"),
        }
    }

    #[test]
    fn errors_are_classified() {
        assert!(matches!(fatal(classify(401, r#"{"error":{"message":"invalid x-api-key"}}"#, "m", None)), ModelError::BadKey { .. }));
        assert!(matches!(
            fatal(classify(404, r#"{"error":{"type":"not_found_error","message":"model: nope"}}"#, "nope", None)),
            ModelError::UnknownModel { .. }
        ));
        assert!(matches!(fatal(classify(400, r#"{"error":{"message":"The model `x` does not exist"}}"#, "x", None)), ModelError::UnknownModel { .. }));
        assert!(matches!(fatal(classify(400, r#"{"error":{"message":"this model does not support image input"}}"#, "x", None)), ModelError::NoImages { .. }));
        assert!(matches!(fatal(classify(400, "bad", "x", None)), ModelError::Rejected { status: 400, .. }));
        for s in [408, 409, 429, 500, 503, 529] {
            assert!(matches!(classify(s, "", "x", None), Attempt::Retry { .. }), "{s}");
        }
    }

    #[test]
    fn servers_say_when_to_come_back_in_three_forms() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let now = httpdate::parse_http_date("Tue, 01 Dec 2026 10:00:00 GMT").unwrap();
        let wait = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_str(v).unwrap());
            }
            server_wait(&h, now)
        };
        assert_eq!(wait(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(wait(&[("retry-after", " 1.5 ")]), Some(Duration::from_millis(1500)));
        assert_eq!(wait(&[("retry-after-ms", "250"), ("retry-after", "9")]), Some(Duration::from_millis(250)));
        assert_eq!(wait(&[("retry-after", "Tue, 01 Dec 2026 10:00:42 GMT")]), Some(Duration::from_secs(42)));
        assert_eq!(wait(&[("retry-after", "Tue, 01 Dec 2026 09:59:00 GMT")]), Some(Duration::ZERO));
        // Nonsense is not believed, and never panics.
        for bad in ["-1", "1e300", "NaN", "inf", "soon", ""] {
            assert_eq!(wait(&[("retry-after", bad)]), None, "{bad:?}");
        }
        assert_eq!(wait(&[]), None);
    }

    #[test]
    fn waits_back_off_are_capped_and_spread() {
        let r = Retry { attempts: 5, base: Duration::from_millis(500), max_wait: Duration::from_secs(60) };
        assert_eq!(retry_wait(r, 1, None, 1.0), Duration::from_millis(500));
        assert_eq!(retry_wait(r, 3, None, 1.0), Duration::from_millis(2000));
        assert_eq!(retry_wait(r, 3, None, 0.0), Duration::from_millis(1500));
        assert_eq!(retry_wait(r, 30, None, 1.0), Duration::from_secs(60));
        // What the server said is a floor: jitter never brings us back early.
        assert_eq!(retry_wait(r, 1, Some(Duration::from_secs(7)), 0.0), Duration::from_secs(7));
        assert_eq!(retry_wait(r, 1, Some(Duration::from_secs(10)), 1.0), Duration::from_secs(11));
        assert_eq!(retry_wait(r, 1, Some(Duration::from_secs(3600)), 0.5), Duration::from_secs(60));
    }

    #[test]
    fn endpoints() {
        let a = ModelConfig::new("anthropic", "m", None, None).unwrap();
        assert_eq!(a.endpoint(), "https://api.anthropic.com/v1/messages");
        let a = ModelConfig::new("anthropic", "m", Some("http://127.0.0.1:9/v1/"), None).unwrap();
        assert_eq!(a.endpoint(), "http://127.0.0.1:9/v1/messages");
        let o = ModelConfig::new("openai-compatible", "m", Some("http://localhost:11434/v1"), None).unwrap();
        assert_eq!(o.endpoint(), "http://localhost:11434/v1/chat/completions");
        assert!(ModelConfig::new("openai-compatible", "m", None, None).is_err());
        assert!(!format!("{:?}", ModelConfig::new("openai", "m", None, Some("sk-secret-123".into())).unwrap()).contains("sk-secret"));
    }
}

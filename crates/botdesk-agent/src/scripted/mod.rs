//! A scripted model server for tests: speaks Anthropic Messages (`POST /v1/messages`), OpenAI
//! chat completions (`POST /v1/chat/completions`) and OpenAI Responses (`POST /v1/responses`,
//! with a reasoning item of encrypted content `enc-N` before each reply) over HTTP on loopback,
//! streams the replies of a script in small pieces, and records what it received so tests can
//! check it. The real client code runs against it; no test needs a network model.
//!
//! It is strict: a request the real API would refuse ([`rules`]) is refused the same way (the
//! vendor's status and error body) and counted as a failure, whatever the script says. The usage
//! it reports comes from a prompt cache that behaves as the vendors document theirs ([`cache`]).

mod cache;
pub mod rules;

pub use cache::{anthropic_minimum, image_tokens, Billed, LIFETIME as CACHE_LIFETIME};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::client::Wire;

/// A tool result as the server saw it, the same for both formats.
#[derive(Debug, Clone)]
pub struct SeenResult {
    pub call_id: String,
    pub text: String,
    pub is_error: bool,
    pub has_image: bool,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub wire: Wire,
    pub at: Instant,
    pub headers: HashMap<String, String>,
    pub body: Value,
    /// Results of the tool calls of the previous turn.
    pub results: Vec<SeenResult>,
    /// Images anywhere in the request.
    pub images: usize,
}

impl Seen {
    /// The result of the call with this id, or the only/first result.
    pub fn result(&self, call_id: &str) -> Option<&SeenResult> {
        self.results.iter().find(|r| r.call_id == call_id)
    }
    /// The prompt as a provider's cache compares it (tools, system, messages; no breakpoints).
    pub fn prompt(&self) -> String {
        prompt_text(self.wire, &self.body)
    }

    pub fn system(&self) -> String {
        match self.wire {
            // A string, or text blocks (with cache breakpoints).
            Wire::Anthropic => match &self.body["system"] {
                Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
                v => v.as_str().unwrap_or("").into(),
            },
            Wire::OpenAi => self.body["messages"][0]["content"].as_str().unwrap_or("").into(),
            Wire::Responses => self.body["instructions"].as_str().unwrap_or("").into(),
        }
    }
}

pub enum Reply {
    /// Assistant text and tool calls `(name, raw arguments)`; ids are `call_<n>` in order.
    Turn { text: String, calls: Vec<(String, String)> },
    /// Like `Turn`, but stopped by the output limit (Anthropic `max_tokens`, OpenAI `length`):
    /// the last call's arguments are sent as given (cut short by the test).
    Cut { text: String, calls: Vec<(String, String)> },
    /// The start of a text reply, then the connection closes before the reply ends.
    Broken { text: String },
    /// An HTTP error status, optionally with Retry-After (seconds).
    Status { status: u16, retry_after: Option<u64>, body: String },
    /// A reply with more than text and calls (thinking, a stop reason, computer calls).
    Answer(Answer),
    /// Another reply, with these HTTP headers added (rate limits, say).
    Headers(Vec<(String, String)>, Box<Reply>),
    /// Computed from the request.
    Func(Box<dyn Fn(&Seen) -> Reply + Send + Sync>),
}

/// A reply with everything a real one may carry.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub text: String,
    /// Tool calls `(name, raw arguments)`; ids are `call_<n>_<i>` in order.
    pub calls: Vec<(String, String)>,
    /// Claude's thinking, streamed before the rest and signed (the server checks the signature
    /// when it comes back).
    pub thinking: Option<String>,
    /// Why it stopped, in the vendor's own word (Anthropic's `stop_reason`, OpenAI's
    /// `finish_reason`, a Responses `incomplete_details.reason`); None: the usual one.
    pub stop: Option<String>,
    /// Stopped by the output limit: the last call's arguments are as given (cut by the test).
    pub cut: bool,
    /// OpenAI computer-use calls (Responses `computer_call`): each action, and the safety checks
    /// pending on it.
    pub computer: Vec<(Value, Vec<Value>)>,
}

impl Reply {
    pub fn text(t: &str) -> Self {
        Reply::Turn { text: t.into(), calls: vec![] }
    }
    pub fn call(name: &str, args: Value) -> Self {
        Reply::Turn { text: String::new(), calls: vec![(name.into(), args.to_string())] }
    }
    pub fn raw_call(name: &str, raw: &str) -> Self {
        Reply::Turn { text: String::new(), calls: vec![(name.into(), raw.into())] }
    }
    /// This reply, with these HTTP headers.
    pub fn with_headers(self, headers: &[(&str, &str)]) -> Self {
        Reply::Headers(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), Box::new(self))
    }
}

/// What a step checks of the request it gets (an error says what is wrong).
pub type Check = Box<dyn Fn(&Seen) -> Result<(), String> + Send + Sync>;

/// A check on the request, then the reply.
pub struct Step {
    pub check: Option<Check>,
    pub reply: Reply,
}

impl Step {
    pub fn reply(reply: Reply) -> Self {
        Self { check: None, reply }
    }
    pub fn check(check: impl Fn(&Seen) -> Result<(), String> + Send + Sync + 'static, reply: Reply) -> Self {
        Self { check: Some(Box::new(check)), reply }
    }
}

#[derive(Default)]
struct State {
    steps: std::collections::VecDeque<Step>,
    seen: Vec<Seen>,
    failures: Vec<String>,
    calls: usize,
    /// The provider's prompt cache, as documented.
    cache: cache::PromptCache,
    /// Images already decoded.
    memo: rules::ImageMemo,
    /// What each request read from and wrote to the cache, in order.
    billed: Vec<Billed>,
    /// Also answers Ollama's own API, as an Ollama server running this.
    ollama: Option<OllamaSim>,
    /// The paths of Ollama's own API asked, in order.
    ollama_asked: Vec<String>,
    /// Called as each model request arrives, before it is answered.
    on_request: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

/// An Ollama server as far as its own API tells the context window of a model.
#[derive(Debug, Clone)]
pub struct OllamaSim {
    /// The model it serves (a name without a tag is `:latest`).
    pub model: String,
    /// The window it runs the model with once loaded.
    pub context: u64,
    /// Whether the model is loaded already (else `/api/generate` loads it).
    pub loaded: bool,
    /// `PARAMETER num_ctx` in its Modelfile.
    pub modelfile: Option<u64>,
    /// Ollama before 0.10: `/api/ps` does not say the context.
    pub old: bool,
}

/// A real PNG of `w`×`h` pixels (a colour from `seed`, with a noisy band whose bytes follow from
/// it): what a test's screenshots are, since the server decodes every image it is sent.
pub fn png(w: u32, h: u32, seed: u64) -> bytes::Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let band = (h / 8).max(1);
    let mut rgb = Vec::with_capacity((w * h * 3) as usize);
    for row in 0..h {
        for _ in 0..w {
            if row < band {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                rgb.extend_from_slice(&[x as u8, (x >> 8) as u8, (x >> 16) as u8]);
            } else {
                rgb.extend_from_slice(&[seed as u8, 120, 200]);
            }
        }
    }
    let mut out = vec![];
    let mut enc = ::png::Encoder::new(&mut out, w, h);
    enc.set_color(::png::ColorType::Rgb);
    enc.set_depth(::png::BitDepth::Eight);
    enc.set_compression(::png::Compression::Fast);
    enc.write_header().and_then(|mut w| w.write_image_data(&rgb)).expect("encode a PNG in memory");
    out.into()
}

/// The tokens a 1280x800 screenshot costs, as Anthropic counts images (width × height / 750).
pub const IMAGE_TOKENS: usize = 1_365;

/// A request's prompt in order (tools, system, each message), without cache breakpoints, so two
/// requests compare as a provider's prompt cache compares them. An image stands as
/// [`IMAGE_TOKENS`] × 4 bytes naming its content, so a token is 4 bytes of this text throughout.
fn prompt_text(wire: Wire, body: &Value) -> String {
    fn image(data: &str) -> Value {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        let mut s = format!("image {:016x} ", h.finish());
        s.extend(std::iter::repeat_n('.', IMAGE_TOKENS * 4 - s.len()));
        Value::String(s)
    }
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| *k != "cache_control")
                    .map(|(k, v)| match (k.as_str(), v.as_str()) {
                        // Anthropic's base64 source, OpenAI's data URL.
                        ("data", Some(d)) if m.get("type").and_then(Value::as_str) == Some("base64") => (k.clone(), image(d)),
                        ("url" | "image_url", Some(u)) if u.starts_with("data:image/") => (k.clone(), image(u)),
                        _ => (k.clone(), strip(v)),
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            v => v.clone(),
        }
    }
    let mut out = strip(&body["tools"]).to_string();
    if wire == Wire::Anthropic {
        out.push_str(&strip(&body["system"]).to_string());
    }
    if wire == Wire::Responses {
        out.push_str(&strip(&body["instructions"]).to_string());
    }
    for m in body["messages"].as_array().or(body["input"].as_array()).into_iter().flatten() {
        out.push_str(&strip(m).to_string());
    }
    out
}

#[derive(Clone)]
pub struct ScriptedServer {
    port: u16,
    state: Arc<Mutex<State>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

impl ScriptedServer {
    pub async fn start(steps: Vec<Step>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the scripted server");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State { steps: steps.into(), ..Default::default() }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(sock, &st).await {
                        st.lock().unwrap().failures.push(format!("serving a request failed: {e}"));
                    }
                });
            }
        });
        Self { port, state, task: Arc::new(task) }
    }

    /// The base URL a model of this wire format is configured with.
    pub fn base_url(&self, wire: Wire) -> String {
        match wire {
            Wire::Anthropic => format!("http://127.0.0.1:{}", self.port),
            Wire::OpenAi | Wire::Responses => format!("http://127.0.0.1:{}/v1", self.port),
        }
    }

    pub fn push(&self, step: Step) {
        self.state.lock().unwrap().steps.push_back(step);
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Failed checks and unexpected requests.
    pub fn failures(&self) -> Vec<String> {
        self.state.lock().unwrap().failures.clone()
    }

    /// Calls `hook` as each model request arrives, before it is answered (what a test reads of
    /// the client's side at that moment).
    pub fn on_request(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.state.lock().unwrap().on_request = Some(std::sync::Arc::new(hook));
    }

    /// Answers Ollama's own API too (without it, those paths are 404, as on other servers).
    pub fn act_as_ollama(&self, sim: OllamaSim) {
        self.state.lock().unwrap().ollama = Some(sim);
    }

    /// The paths of Ollama's own API asked so far.
    pub fn ollama_asked(&self) -> Vec<String> {
        self.state.lock().unwrap().ollama_asked.clone()
    }

    pub fn remaining(&self) -> usize {
        self.state.lock().unwrap().steps.len()
    }

    /// Moves the server's clock on (its prompt cache's entries expire by it).
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.state.lock().unwrap().cache.skew += by;
    }

    /// What each accepted request read from and wrote to the prompt cache.
    pub fn billed(&self) -> Vec<Billed> {
        self.state.lock().unwrap().billed.clone()
    }
}

async fn serve(sock: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut r = BufReader::new(sock);
    let mut line = String::new();
    r.read_line(&mut line).await?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).await? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).await?;
    let mut sock = r.into_inner();
    if path.starts_with("/api/") {
        let answer = {
            let mut st = state.lock().unwrap();
            st.ollama_asked.push(path.clone());
            st.ollama.as_mut().and_then(|o| ollama_answer(o, &path))
        };
        return match answer {
            Some(a) => respond(&mut sock, 200, None, &[], &a.to_string()).await,
            None => respond(&mut sock, 404, None, &[], "404 page not found").await,
        };
    }
    let hook = state.lock().unwrap().on_request.clone();
    if let Some(hook) = hook {
        hook();
    }
    let wire = match path.as_str() {
        "/v1/messages" => Wire::Anthropic,
        "/v1/chat/completions" => Wire::OpenAi,
        "/v1/responses" => Wire::Responses,
        other => {
            state.lock().unwrap().failures.push(format!("request to an unknown path {other:?}"));
            return respond(&mut sock, 404, None, &[], r#"{"error":{"message":"not found"}}"#).await;
        }
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let include_usage = body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    let seen = normalise(wire, headers, body);
    let answer = {
        let mut guard = state.lock().unwrap();
        let st = &mut *guard;
        st.calls += 1;
        let n = st.calls;
        // Refused as the real API would refuse it: the script waits for a request it accepts.
        match rules::check(wire, &seen.headers, &seen.body, &mut st.memo) {
            Err(r) => {
                st.failures.push(format!("request {n} was refused as the real API would refuse it: {}", r.message));
                Err(r)
            }
            Ok(()) => Ok(script(st, wire, &seen, n)),
        }
    };
    let (reply, n, usage) = match answer {
        Ok(a) => a,
        Err(r) => return respond(&mut sock, r.status, None, &[], &r.body(wire)).await,
    };

    let mut reply = reply;
    let mut extra: Vec<(String, String)> = vec![];
    let reply = loop {
        reply = match reply {
            Reply::Func(f) => f(&seen),
            Reply::Headers(h, r) => {
                extra.extend(h);
                *r
            }
            other => break other,
        }
    };
    let answer = match reply {
        Reply::Status { status, retry_after, body } => return respond(&mut sock, status, retry_after, &extra, &body).await,
        Reply::Broken { text } => {
            sse_head(&mut sock, &extra).await?;
            let usage = botdesk_core::Usage { output: 1, ..usage };
            let a = Answer { text, ..Default::default() };
            let events = match wire {
                Wire::Anthropic => anthropic_events(n, &a, usage, None),
                Wire::OpenAi => openai_events(n, &a, None),
                Wire::Responses => responses_events(n, &a, usage),
            };
            // Up to the text, without the events that end it.
            let keep = match wire {
                Wire::Anthropic => events.len() - 3, // content_block_stop, message_delta, message_stop
                Wire::OpenAi => events.len() - 2,    // the finish chunk, [DONE]
                Wire::Responses => events.len() - 2, // the message's item done, response.completed
            };
            for e in &events[..keep] {
                sock.write_all(e.as_bytes()).await?;
                sock.flush().await?;
            }
            return sock.shutdown().await;
        }
        Reply::Turn { text, calls } => Answer { text, calls, ..Default::default() },
        Reply::Cut { text, calls } => Answer { text, calls, cut: true, ..Default::default() },
        Reply::Answer(a) => a,
        Reply::Func(_) | Reply::Headers(..) => unreachable!(),
    };
    // A Claude asked to think always thinks first (its thinking may be empty text, never absent).
    let mut answer = answer;
    let thinks = matches!(seen.body["thinking"]["type"].as_str(), Some("enabled" | "adaptive"));
    if wire == Wire::Anthropic && thinks && answer.thinking.is_none() {
        answer.thinking = Some(format!("Thinking about step {n}."));
    }
    sse_head(&mut sock, &extra).await?;
    let thought = answer.thinking.as_ref().map_or(0, String::len);
    let output_tokens = (thought + answer.text.len() + answer.calls.iter().map(|(a, b)| a.len() + b.len()).sum::<usize>()) as u64 / 4 + 1;
    let usage = botdesk_core::Usage { output: output_tokens, ..usage };
    let signature = answer.thinking.as_deref().map(|t| rules::thinking_signature_for(seen.body["model"].as_str().unwrap_or(""), &seen.body, t));
    let events = match wire {
        Wire::Anthropic => anthropic_events(n, &answer, usage, signature.as_deref()),
        Wire::OpenAi => openai_events(n, &answer, include_usage.then_some(usage)),
        Wire::Responses => responses_events(n, &answer, usage),
    };
    for e in events {
        sock.write_all(e.as_bytes()).await?;
        sock.flush().await?;
    }
    sock.shutdown().await
}

async fn sse_head(sock: &mut TcpStream, extra: &[(String, String)]) -> std::io::Result<()> {
    let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n");
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await
}

/// The script's answer to an accepted request, and the usage it reports.
fn script(st: &mut State, wire: Wire, seen: &Seen, n: usize) -> (Reply, usize, botdesk_core::Usage) {
    // The usage it reports: the prompt as its vendor counts it, and what its cache served.
    let b = st.cache.request(wire, &seen.body, &mut st.memo);
    st.billed.push(b);
    let usage = botdesk_core::Usage { input: b.prompt - b.read - b.written, output: 0, cache_read: b.read, cache_write: b.written };
    st.seen.push(seen.clone());
    match st.steps.pop_front() {
        None => {
            st.failures.push(format!("request {n} came after the script ended"));
            (Reply::text("(the script has ended)"), n, usage)
        }
        Some(step) => {
            if let Some(check) = &step.check {
                if let Err(e) = check(seen) {
                    st.failures.push(format!("request {n}: {e}"));
                }
            }
            (step.reply, n, usage)
        }
    }
}

/// What a simulated Ollama answers on its own API.
fn ollama_answer(o: &mut OllamaSim, path: &str) -> Option<Value> {
    Some(match path {
        "/api/version" => json!({ "version": if o.old { "0.9.6" } else { "0.12.6" } }),
        "/api/ps" if o.loaded => {
            let mut m = json!({ "name": format!("{}:latest", o.model), "model": format!("{}:latest", o.model), "size": 1 });
            if !o.old {
                m["context_length"] = json!(o.context);
            }
            json!({ "models": [m] })
        }
        "/api/ps" => json!({ "models": [] }),
        "/api/show" => {
            json!({ "parameters": o.modelfile.map_or("stop \"<|im_end|>\"".to_string(), |n| format!("stop \"<|im_end|>\"\nnum_ctx {n}")), "model_info": { "general.architecture": "qwen2", "qwen2.context_length": 131072 } })
        }
        "/api/generate" => {
            o.loaded = true;
            json!({ "model": o.model, "done": true, "done_reason": "load" })
        }
        _ => return None,
    })
}

async fn respond(sock: &mut TcpStream, status: u16, retry_after: Option<u64>, extra: &[(String, String)], body: &str) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    if let Some(s) = retry_after {
        head.push_str(&format!("retry-after: {s}\r\n"));
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.shutdown().await
}

/// Splits text into pieces of a few characters, so deltas are exercised.
fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

/// `usage` reported as Anthropic does: the input and cache at the start, the output's running
/// total at the end. Thinking comes first, signed.
fn anthropic_events(n: usize, a: &Answer, usage: botdesk_core::Usage, signature: Option<&str>) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant", "content": [], "model": "scripted", "stop_reason": null, "usage": {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_write, "cache_read_input_tokens": usage.cache_read, "output_tokens": 1}}}),
    )];
    out.push(ev("ping", json!({"type": "ping"})));
    let mut index = 0;
    if let Some(t) = &a.thinking {
        out.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for p in pieces(t) {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}})));
        }
        let sig = signature.map(str::to_string).unwrap_or_else(|| rules::thinking_signature(t));
        out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": sig}})));
        out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    if !a.text.is_empty() {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for p in pieces(&a.text) {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (i, (name, raw)) in a.calls.iter().enumerate() {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": format!("call_{n}_{i}"), "name": name, "input": {}}})));
        for p in pieces(raw) {
            out.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}),
            ));
        }
        out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let stop = match (&a.stop, a.cut) {
        (Some(s), _) => s.as_str(),
        (None, true) => "max_tokens",
        (None, false) if a.calls.is_empty() => "end_turn",
        _ => "tool_use",
    };
    out.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": usage.output}}),
    ));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}

/// `usage` in a last chunk without choices, when the request asked for it (prompt tokens include
/// the cached ones).
fn openai_events(n: usize, a: &Answer, usage: Option<botdesk_core::Usage>) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk", "model": "scripted", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for p in pieces(&a.text) {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    for (i, (name, raw)) in a.calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for p in pieces(raw) {
            out.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}), Value::Null));
        }
    }
    let finish = match (&a.stop, a.cut) {
        (Some(s), _) => s.as_str(),
        (None, true) => "length",
        (None, false) if a.calls.is_empty() => "stop",
        _ => "tool_calls",
    };
    out.push(chunk(json!({}), json!(finish)));
    if let Some(u) = usage {
        let u = json!({"prompt_tokens": u.prompt(), "completion_tokens": u.output, "total_tokens": u.prompt() + u.output, "prompt_tokens_details": {"cached_tokens": u.cache_read}});
        out.push(format!(
            "data: {}\n\n",
            json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk", "model": "scripted", "choices": [], "usage": u})
        ));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// A reasoning item (`rs_N`, encrypted content `enc-N`), the text as a message, each call as a
/// function call (`call_N_i`) and each computer call (`cu_call_N_i`), then `response.completed`,
/// or `response.incomplete` when cut or given a stop reason.
fn responses_events(n: usize, a: &Answer, usage: botdesk_core::Usage) -> Vec<String> {
    let ev = |data: Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap_or(""));
    let mut out = vec![ev(json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "status": "in_progress"}}))];
    let reasoning = json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": [], "encrypted_content": format!("enc-{n}")});
    out.push(ev(json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": format!("rs_{n}"), "summary": []}})));
    out.push(ev(json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning})));
    let mut index = 1;
    if !a.text.is_empty() {
        let id = format!("msg_{n}");
        out.push(ev(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "message", "id": id, "role": "assistant", "content": [], "status": "in_progress"}})));
        for p in pieces(&a.text) {
            out.push(ev(json!({"type": "response.output_text.delta", "output_index": index, "item_id": id, "content_index": 0, "delta": p})));
        }
        out.push(ev(json!({"type": "response.output_item.done", "output_index": index, "item": {"type": "message", "id": id, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": a.text, "annotations": []}]}})));
        index += 1;
    }
    for (i, (name, raw)) in a.calls.iter().enumerate() {
        let (id, call_id) = (format!("fc_{n}_{i}"), format!("call_{n}_{i}"));
        out.push(ev(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}})));
        for p in pieces(raw) {
            out.push(ev(json!({"type": "response.function_call_arguments.delta", "output_index": index, "item_id": id, "delta": p})));
        }
        // A call the output limit cut off is never done.
        if !(a.cut && i == a.calls.len() - 1) {
            out.push(ev(json!({"type": "response.output_item.done", "output_index": index, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": raw, "status": "completed"}})));
        }
        index += 1;
    }
    for (i, (action, checks)) in a.computer.iter().enumerate() {
        let item = json!({"type": "computer_call", "id": format!("cu_{n}_{i}"), "call_id": format!("cu_call_{n}_{i}"), "action": action, "pending_safety_checks": checks, "status": "completed"});
        out.push(ev(json!({"type": "response.output_item.added", "output_index": index, "item": item})));
        out.push(ev(json!({"type": "response.output_item.done", "output_index": index, "item": item})));
        index += 1;
    }
    let u = json!({"input_tokens": usage.prompt(), "input_tokens_details": {"cached_tokens": usage.cache_read}, "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": usage.prompt() + usage.output});
    let incomplete = match (&a.stop, a.cut) {
        (Some(s), _) => Some(s.as_str()),
        (None, true) => Some("max_output_tokens"),
        (None, false) => None,
    };
    out.push(ev(match incomplete {
        Some(why) => json!({"type": "response.incomplete", "response": {"id": format!("resp_{n}"), "status": "incomplete", "incomplete_details": {"reason": why}, "usage": u}}),
        None => json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "status": "completed", "usage": u}}),
    }));
    out
}

fn normalise(wire: Wire, headers: HashMap<String, String>, body: Value) -> Seen {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let mut results = vec![];
    let mut images = 0;
    match wire {
        Wire::Anthropic => {
            for m in &msgs {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        images += b["content"].as_array().into_iter().flatten().filter(|c| c["type"] == "image").count();
                    }
                    images += usize::from(b["type"] == "image");
                }
            }
            if let Some(last) = msgs.last().filter(|m| m["role"] == "user") {
                for b in last["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
                    let parts = b["content"].as_array().cloned().unwrap_or_default();
                    results.push(SeenResult {
                        call_id: b["tool_use_id"].as_str().unwrap_or("").into(),
                        text: parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
                        is_error: b["is_error"].as_bool().unwrap_or(false),
                        has_image: parts.iter().any(|p| p["type"] == "image"),
                    });
                }
            }
        }
        Wire::Responses => {
            let input = body["input"].as_array().cloned().unwrap_or_default();
            let image_parts = |v: &Value| v.as_array().into_iter().flatten().filter(|c| c["type"] == "input_image").count();
            images = input.iter().map(|i| image_parts(&i["content"]) + image_parts(&i["output"]) + usize::from(i["type"] == "computer_call_output")).sum();
            // The answers after the model's last item.
            let start = input
                .iter()
                .rposition(|i| matches!(i["type"].as_str(), Some("function_call" | "computer_call" | "reasoning")) || i["role"] == "assistant")
                .map_or(0, |i| i + 1);
            for i in input[start..].iter().filter(|i| i["type"] == "computer_call_output") {
                results.push(SeenResult {
                    call_id: i["call_id"].as_str().unwrap_or("").into(),
                    text: String::new(),
                    is_error: false,
                    has_image: i["output"]["image_url"].as_str().is_some_and(|u| u.starts_with("data:image/")),
                });
            }
            for i in input[start..].iter().filter(|i| i["type"] == "function_call_output") {
                let text = match &i["output"] {
                    Value::String(t) => t.clone(),
                    parts => parts.as_array().into_iter().flatten().filter_map(|p| p["text"].as_str()).collect(),
                };
                results.push(SeenResult {
                    call_id: i["call_id"].as_str().unwrap_or("").into(),
                    is_error: text.starts_with("Error: "),
                    text: text.strip_prefix("Error: ").unwrap_or(&text).into(),
                    has_image: image_parts(&i["output"]) > 0,
                });
            }
        }
        Wire::OpenAi => {
            for m in &msgs {
                images += m["content"].as_array().into_iter().flatten().filter(|c| c["type"] == "image_url").count();
            }
            let start = msgs.iter().rposition(|m| m["role"] == "assistant").map(|i| i + 1).unwrap_or(msgs.len());
            let tail = &msgs[start..];
            let shot_texts: Vec<String> =
                tail.iter().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default()).filter_map(|c| c["text"].as_str().map(str::to_string)).collect();
            for m in tail.iter().filter(|m| m["role"] == "tool") {
                let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
                let content = m["content"].as_str().unwrap_or("");
                results.push(SeenResult {
                    has_image: shot_texts.iter().any(|t| t.contains(&format!("tool call {id}:"))),
                    call_id: id,
                    text: content.strip_prefix("Error: ").unwrap_or(content).into(),
                    is_error: content.starts_with("Error: "),
                });
            }
        }
    }
    Seen { wire, at: Instant::now(), headers, body, results, images }
}

//! A scripted model server for tests: speaks Anthropic Messages (`POST /v1/messages`), OpenAI
//! chat completions (`POST /v1/chat/completions`) and OpenAI Responses (`POST /v1/responses`,
//! with a reasoning item of encrypted content `enc-N` before each reply) over HTTP on loopback, streams the replies of a
//! script in small pieces, and records what it received so tests can check it. The real client
//! code runs against it; no test needs a network model.

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
    /// Computed from the request.
    Func(Box<dyn Fn(&Seen) -> Reply + Send + Sync>),
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
    /// The previous request's prompt (see [`prompt_text`]): its longest common start with the next
    /// one is what a provider's prompt cache would serve.
    cached: String,
    /// Also answers Ollama's own API, as an Ollama server running this.
    ollama: Option<OllamaSim>,
    /// The paths of Ollama's own API asked, in order.
    ollama_asked: Vec<String>,
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

/// Whether the request marks anything for Anthropic's prompt cache.
fn has_breakpoints(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("cache_control") || m.values().any(has_breakpoints),
        Value::Array(a) => a.iter().any(has_breakpoints),
        _ => false,
    }
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
            Some(a) => respond(&mut sock, 200, None, &a.to_string()).await,
            None => respond(&mut sock, 404, None, "404 page not found").await,
        };
    }
    let wire = match path.as_str() {
        "/v1/messages" => Wire::Anthropic,
        "/v1/chat/completions" => Wire::OpenAi,
        "/v1/responses" => Wire::Responses,
        other => {
            state.lock().unwrap().failures.push(format!("request to an unknown path {other:?}"));
            return respond(&mut sock, 404, None, r#"{"error":{"message":"not found"}}"#).await;
        }
    };
    // The usage it reports: a token per 4 bytes of the prompt (images as a provider counts
    // them); what the previous request's prompt has in common with this one's comes from the
    // cache (Anthropic: only when the request marks breakpoints, and the rest is written to it;
    // OpenAI caches by itself).
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let include_usage = body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    let prompt = prompt_text(wire, &body);
    let prompt_tokens = prompt.len() as u64 / 4;
    let caching = wire != Wire::Anthropic || has_breakpoints(&body);
    let seen = normalise(wire, headers, body);
    let (reply, n, usage) = {
        let mut st = state.lock().unwrap();
        let common = st.cached.bytes().zip(prompt.bytes()).take_while(|(a, b)| a == b).count() as u64;
        let (read, write) = if caching { (common / 4, (prompt.len() as u64 - common) / 4) } else { (0, 0) };
        let write = if wire == Wire::Anthropic { write } else { 0 };
        let usage = botdesk_core::Usage { input: prompt_tokens.saturating_sub(read + write), output: 0, cache_read: read, cache_write: write };
        if caching {
            st.cached = prompt;
        }
        st.seen.push(seen.clone());
        st.calls += 1;
        let n = st.calls;
        match st.steps.pop_front() {
            None => {
                st.failures.push(format!("request {n} came after the script ended"));
                (Reply::text("(the script has ended)"), n, usage)
            }
            Some(step) => {
                if let Some(check) = &step.check {
                    if let Err(e) = check(&seen) {
                        st.failures.push(format!("request {n}: {e}"));
                    }
                }
                (step.reply, n, usage)
            }
        }
    };
    let mut reply = reply;
    while let Reply::Func(f) = reply {
        reply = f(&seen);
    }
    match reply {
        Reply::Status { status, retry_after, body } => respond(&mut sock, status, retry_after, &body).await,
        Reply::Broken { text } => {
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n").await?;
            let usage = botdesk_core::Usage { output: 1, ..usage };
            let events = match wire {
                Wire::Anthropic => anthropic_events(n, &text, &[], usage, false),
                Wire::OpenAi => openai_events(n, &text, &[], None, false),
                Wire::Responses => responses_events(n, &text, &[], usage, false),
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
            sock.shutdown().await
        }
        Reply::Turn { .. } | Reply::Cut { .. } => {
            let (text, calls, cut) = match reply {
                Reply::Turn { text, calls } => (text, calls, false),
                Reply::Cut { text, calls } => (text, calls, true),
                _ => unreachable!(),
            };
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n").await?;
            let output_tokens = (text.len() + calls.iter().map(|(a, b)| a.len() + b.len()).sum::<usize>()) as u64 / 4 + 1;
            let usage = botdesk_core::Usage { output: output_tokens, ..usage };
            let events = match wire {
                Wire::Anthropic => anthropic_events(n, &text, &calls, usage, cut),
                Wire::OpenAi => openai_events(n, &text, &calls, include_usage.then_some(usage), cut),
                Wire::Responses => responses_events(n, &text, &calls, usage, cut),
            };
            for e in events {
                sock.write_all(e.as_bytes()).await?;
                sock.flush().await?;
            }
            sock.shutdown().await
        }
        Reply::Func(_) => unreachable!(),
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

async fn respond(sock: &mut TcpStream, status: u16, retry_after: Option<u64>, body: &str) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    if let Some(s) = retry_after {
        head.push_str(&format!("retry-after: {s}\r\n"));
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
/// total at the end.
fn anthropic_events(n: usize, text: &str, calls: &[(String, String)], usage: botdesk_core::Usage, cut: bool) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant", "content": [], "model": "scripted", "stop_reason": null, "usage": {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_write, "cache_read_input_tokens": usage.cache_read, "output_tokens": 1}}}),
    )];
    out.push(ev("ping", json!({"type": "ping"})));
    let mut index = 0;
    if !text.is_empty() {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        for p in pieces(text) {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (i, (name, raw)) in calls.iter().enumerate() {
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
    let stop = if cut {
        "max_tokens"
    } else if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
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
fn openai_events(n: usize, text: &str, calls: &[(String, String)], usage: Option<botdesk_core::Usage>, cut: bool) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk", "model": "scripted", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for p in pieces(text) {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    for (i, (name, raw)) in calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for p in pieces(raw) {
            out.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}), Value::Null));
        }
    }
    out.push(chunk(
        json!({}),
        json!(if cut {
            "length"
        } else if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }),
    ));
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
/// function call (`call_N_i`), then `response.completed`, or `response.incomplete` when cut.
fn responses_events(n: usize, text: &str, calls: &[(String, String)], usage: botdesk_core::Usage, cut: bool) -> Vec<String> {
    let ev = |data: Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap_or(""));
    let mut out = vec![ev(json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "status": "in_progress"}}))];
    let reasoning = json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": [], "encrypted_content": format!("enc-{n}")});
    out.push(ev(json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": format!("rs_{n}"), "summary": []}})));
    out.push(ev(json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning})));
    let mut index = 1;
    if !text.is_empty() {
        let id = format!("msg_{n}");
        out.push(ev(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "message", "id": id, "role": "assistant", "content": [], "status": "in_progress"}})));
        for p in pieces(text) {
            out.push(ev(json!({"type": "response.output_text.delta", "output_index": index, "item_id": id, "content_index": 0, "delta": p})));
        }
        out.push(ev(json!({"type": "response.output_item.done", "output_index": index, "item": {"type": "message", "id": id, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}})));
        index += 1;
    }
    for (i, (name, raw)) in calls.iter().enumerate() {
        let (id, call_id) = (format!("fc_{n}_{i}"), format!("call_{n}_{i}"));
        out.push(ev(json!({"type": "response.output_item.added", "output_index": index, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}})));
        for p in pieces(raw) {
            out.push(ev(json!({"type": "response.function_call_arguments.delta", "output_index": index, "item_id": id, "delta": p})));
        }
        // A call the output limit cut off is never done.
        if !(cut && i == calls.len() - 1) {
            out.push(ev(json!({"type": "response.output_item.done", "output_index": index, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": raw, "status": "completed"}})));
        }
        index += 1;
    }
    let u = json!({"input_tokens": usage.prompt(), "input_tokens_details": {"cached_tokens": usage.cache_read}, "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": usage.prompt() + usage.output});
    out.push(ev(if cut {
        json!({"type": "response.incomplete", "response": {"id": format!("resp_{n}"), "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": u}})
    } else {
        json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "status": "completed", "usage": u}})
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
            images = input.iter().map(|i| image_parts(&i["content"]) + image_parts(&i["output"])).sum();
            // The answers after the model's last item.
            let start =
                input.iter().rposition(|i| matches!(i["type"].as_str(), Some("function_call" | "reasoning")) || i["role"] == "assistant").map_or(0, |i| i + 1);
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

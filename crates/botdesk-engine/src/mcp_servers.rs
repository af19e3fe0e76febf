//! MCP servers of a bot, run inside its computer: the person adds them (`botdesk bot mcp add`),
//! each run starts them in the bot's computer as the bot (its network, its files, its display),
//! offers their tools to the model as `SERVER__TOOL`, and ends them when it ends. Nothing of them
//! runs on the person's machine: the engine only speaks MCP over the command's pipes.
//!
//! Bounds: a server has [`START_TIMEOUT`] to answer `initialize` and list its tools, a call
//! [`CALL_TIMEOUT`]; one message over [`MAX_MESSAGE`] bytes ends the server (flooding); a result
//! is cut like a command's output. A server that fails to start, crashes or floods is said in the
//! chat (or in the failed call) and the run goes on without it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use botdesk_agent::tools::{ToolKind, ToolSpec};
use botdesk_agent::{Image, ToolOutput};
use botdesk_core::{CallCtx, ExecOutput, ExecRequest, StreamKind};
use botdesk_store::BotMcpServer;
use bytes::Bytes;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::{Engine, EngineError, Result};

/// Servers one bot may have.
pub const MAX_SERVERS: usize = 8;
/// Tools offered from one server (the first ones it lists).
pub const MAX_TOOLS_PER_SERVER: usize = 32;
/// From starting the command to its tools listed.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// One tool call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest message a server may send (a line of JSON).
pub const MAX_MESSAGE: usize = 4 << 20;
/// What the model is told of a tool's description at most.
const MAX_DESCRIPTION: usize = 1_000;
/// The end of a server's stderr kept to say why it ended.
const STDERR_TAIL: usize = 2_000;

/// Between a server's name and its tool's in the name the model is given: model APIs allow only
/// letters, digits, `_` and `-` in tool names (up to 64), so not the dot of `SERVER.TOOL`.
pub const SEPARATOR: &str = "__";

impl Engine {
    /// A bot's MCP servers.
    pub async fn bot_mcp_servers(&self, bot: &crate::BotRef) -> Result<Vec<BotMcpServer>> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
        Ok(self.inner.store.bot_mcp_servers(&bot.id).await?)
    }

    /// Adds an MCP server to a bot: a command run on stdio inside its computer (`command`), or a
    /// remote server's address (`url`) reached from inside it. Its runs start it from the next one.
    pub async fn add_bot_mcp_server(&self, bot: &crate::BotRef, name: &str, command: Vec<String>, url: Option<String>) -> Result<BotMcpServer> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
        check_name(name)?;
        match (&url, command.is_empty()) {
            (None, true) => return Err(EngineError::invalid("say the server's command (after --) or its --url")),
            (Some(_), false) => return Err(EngineError::invalid("a server is a command or a --url, not both")),
            (None, false) => {
                if command[0].trim().is_empty() || command.iter().any(|a| a.contains('\0')) || command.iter().map(String::len).sum::<usize>() > 8192 {
                    return Err(EngineError::invalid("the command must name a program, hold no NUL byte and be at most 8 KiB"));
                }
            }
            (Some(u), true) => {
                let host = u.strip_prefix("https://").or_else(|| u.strip_prefix("http://")).and_then(|r| r.split(['/', '?', '#']).next());
                if host.is_none_or(str::is_empty) || u.len() > 2048 || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(EngineError::invalid(format!("{u:?} is not an http(s) address of an MCP server")));
                }
            }
        }
        if self.inner.store.bot_mcp_servers(&bot.id).await?.len() >= MAX_SERVERS {
            return Err(EngineError::invalid(format!("{} already has {MAX_SERVERS} MCP servers, the most a bot may have", bot.name)));
        }
        let server = BotMcpServer { name: name.to_string(), command, url, created_at: self.now() };
        self.inner.store.add_bot_mcp_server(&bot.id, &server).await?;
        Ok(server)
    }

    pub async fn remove_bot_mcp_server(&self, bot: &crate::BotRef, name: &str) -> Result<()> {
        let bot = self.inner.store.bot(bot.id.as_str()).await?;
        Ok(self.inner.store.remove_bot_mcp_server(&bot.id, name).await?)
    }

    /// Starts a run's MCP servers in the bot's computer; returns them, their tools for the model,
    /// and a sentence for each server that could not start (the run goes on without it).
    pub(crate) async fn start_mcp_servers(&self, bot: &botdesk_store::Bot, run_id: &str) -> (RunMcp, Vec<ToolSpec>, Vec<String>) {
        let mut mcp = RunMcp::default();
        let (mut specs, mut notes) = (vec![], vec![]);
        let servers = match self.inner.store.bot_mcp_servers(&bot.id).await {
            Ok(s) => s,
            Err(e) => return (mcp, specs, vec![format!("The bot's MCP servers could not be read: {e}")]),
        };
        for s in servers {
            match self.start_mcp_server(bot, run_id, &s).await {
                Ok((server, tools)) => {
                    let (offered, skipped) = offer(&s.name, tools);
                    if !skipped.is_empty() {
                        notes.push(format!("The MCP server {:?} has tools the model cannot be given: {}.", s.name, skipped.join("; ")));
                    }
                    specs.extend(offered);
                    mcp.servers.push(server);
                }
                Err(why) => notes.push(format!("The MCP server {:?} did not start: {why}. The run goes on without it.", s.name)),
            }
        }
        (mcp, specs, notes)
    }

    async fn start_mcp_server(
        &self,
        bot: &botdesk_store::Bot,
        run_id: &str,
        s: &BotMcpServer,
    ) -> std::result::Result<(McpServer, Vec<rmcp::model::Tool>), String> {
        let req = match &s.url {
            // A remote server is reached from inside the computer, through its bridge. Its
            // address (which may hold a key) goes in the environment, readable by the bot's uid
            // only, not in the command line every user of the machine can read.
            Some(url) => ExecRequest::new(["botdesk-mcp-http"]).env("BOTDESK_MCP_URL", url.clone()),
            None => ExecRequest::new(s.command.clone()),
        };
        let computer = self.inner.store.computer(bot.computer_id.as_str()).await.map_err(|e| e.to_string())?;
        let cwd = self.resolve(bot, &computer, "").map_err(|e| e.message)?;
        let cref = self.ensure_running(&computer).await.map_err(|e| e.message)?;
        let display = self.display_of(&computer.id, &bot.id).await.map_err(|e| e.message)?;
        let ctx = CallCtx { run: Some(run_id.to_string()), display, ..crate::bot_ctx(bot, &computer) };
        let pipe = self.inner.provider.open_pipe(&cref, req.cwd(cwd), &ctx).await.map_err(|e| e.to_string())?;
        McpServer::start(&s.name, pipe).await
    }
}

/// A name of the bot's own choosing: letters, digits and `-` (no `_`, which separates it from
/// its tools' names), up to 20.
fn check_name(name: &str) -> Result<()> {
    if (1..=20).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        Ok(())
    } else {
        Err(EngineError::invalid(format!("{name:?} cannot name an MCP server: use letters, digits and -, at most 20")))
    }
}

/// The tools a server listed, as the model is given them, and the ones left out (why).
fn offer(server: &str, tools: Vec<rmcp::model::Tool>) -> (Vec<ToolSpec>, Vec<String>) {
    let (mut offered, mut skipped) = (vec![], vec![]);
    let count = tools.len();
    for t in tools.into_iter().take(MAX_TOOLS_PER_SERVER) {
        let name = format!("{server}{SEPARATOR}{}", t.name);
        if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            skipped.push(format!("{:?} (a tool name is letters, digits, _ and -, at most 64 with the server's)", t.name));
            continue;
        }
        let description: String = t.description.as_deref().unwrap_or("").chars().take(MAX_DESCRIPTION).collect();
        let mut schema = Value::Object((*t.input_schema).clone());
        if schema.get("type").is_none() {
            schema["type"] = "object".into();
        }
        offered.push(ToolSpec { kind: ToolKind::Mcp, name, description: format!("(MCP server {server}) {description}"), schema });
    }
    if count > MAX_TOOLS_PER_SERVER {
        skipped.push(format!("{} more beyond the first {MAX_TOOLS_PER_SERVER}", count - MAX_TOOLS_PER_SERVER));
    }
    (offered, skipped)
}

/// A run's started MCP servers; [`RunMcp::close`] ends them (the run's end does).
#[derive(Default)]
pub(crate) struct RunMcp {
    servers: Vec<McpServer>,
}

impl RunMcp {
    /// Calls `SERVER__TOOL` with `arguments`; every failure is a tool error that says what
    /// happened, and no failure of one server touches another.
    pub(crate) async fn call(&self, name: &str, arguments: serde_json::Map<String, Value>, cancel: &CancellationToken) -> ToolOutput {
        let Some((server, tool)) = name.split_once(SEPARATOR) else {
            return ToolOutput::error(format!("there is no MCP tool named {name:?}"));
        };
        let Some(s) = self.servers.iter().find(|s| s.name == server) else {
            return ToolOutput::error(format!("the MCP server {server:?} is not running in this run"));
        };
        let client = s.client.lock().unwrap().clone();
        let Some(client) = client else {
            return ToolOutput::error(s.ended_or("it is not connected"));
        };
        let call = client.peer().call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments));
        let result = tokio::select! {
            r = tokio::time::timeout(CALL_TIMEOUT, call) => r,
            _ = cancel.cancelled() => return ToolOutput::error("the run was stopped during the call"),
        };
        match result {
            Ok(Ok(r)) => output_of(r),
            Ok(Err(e)) => ToolOutput::error(s.ended_or(&format!("the MCP server {server:?} failed the call: {e}"))),
            Err(_) => ToolOutput::error(format!("the MCP server {server:?} did not answer {name} within {} s", CALL_TIMEOUT.as_secs())),
        }
    }

    /// Ends every server (their commands, with everything they started, in the computer).
    pub(crate) async fn close(&self) {
        for s in &self.servers {
            s.close().await;
        }
    }
}

/// A tool's result as the model gets it: its text (or structured content) cut like a command's
/// output, the first PNG image it holds, other content said in a word.
fn output_of(r: rmcp::model::CallToolResult) -> ToolOutput {
    use base64::Engine as _;
    let (mut text, mut image) = (String::new(), None);
    for c in &r.content {
        match c {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::Image(i) => match base64::engine::general_purpose::STANDARD.decode(&i.data) {
                Ok(png) if image.is_none() && i.mime_type == "image/png" && png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() <= 5 << 20 => {
                    image = Some(Image::png(Bytes::from(png)));
                }
                _ => text.push_str(&format!("\n[an image ({}) left out: only one PNG of at most 5 MB is passed on]\n", i.mime_type)),
            },
            ContentBlock::Audio(a) => text.push_str(&format!("\n[audio ({}) left out]\n", a.mime_type)),
            ContentBlock::Resource(_) => text.push_str("\n[an embedded resource left out]\n"),
            ContentBlock::ResourceLink(l) => text.push_str(&format!("\n[a resource: {}]\n", l.uri)),
            _ => text.push_str("\n[content of another kind left out]\n"),
        }
    }
    if text.trim().is_empty() {
        if let Some(v) = &r.structured_content {
            text = v.to_string();
        }
    }
    let total = text.chars().count();
    let keep = botdesk_agent::conversation::MAX_TOOL_TEXT - 200;
    if total > keep {
        text = format!("{}\n[cut: showing the first {keep} of {total} characters]", text.chars().take(keep).collect::<String>());
    }
    if text.trim().is_empty() && image.is_none() {
        text = "(no output)".into();
    }
    ToolOutput { text, image, is_error: r.is_error == Some(true), page_url: None }
}

/// One started server: the MCP client over its pipes, and what ended it.
struct McpServer {
    name: String,
    client: Mutex<Option<Arc<RunningService<RoleClient, ClientConfig>>>>,
    /// Why it ended, once it did (its exit, a flood), with the end of its stderr.
    ended: Arc<Mutex<Option<String>>>,
    pumps: Vec<tokio::task::JoinHandle<()>>,
}

impl McpServer {
    /// Speaks MCP over a started command's pipes: `initialize`, then its tools listed, within
    /// [`START_TIMEOUT`]. Dropped on failure, its pipes close and the computer ends it.
    async fn start(name: &str, pipe: botdesk_core::PipeSession) -> std::result::Result<(McpServer, Vec<rmcp::model::Tool>), String> {
        let (server, io) = McpServer::connect(name, pipe);
        let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("botdesk", env!("CARGO_PKG_VERSION")));
        let started = async {
            let client = info.serve(io).await.map_err(|e| format!("it did not answer initialize ({e})"))?;
            let tools = client.peer().list_all_tools().await.map_err(|e| format!("it did not list its tools ({e})"))?;
            Ok::<_, String>((client, tools))
        };
        match tokio::time::timeout(START_TIMEOUT, started).await {
            Ok(Ok((client, tools))) => {
                *server.client.lock().unwrap() = Some(Arc::new(client));
                Ok((server, tools))
            }
            Ok(Err(why)) => Err(server.ended_or(&why)),
            Err(_) => Err(format!("it did not list its tools within {} s", START_TIMEOUT.as_secs())),
        }
    }

    /// Joins the command's pipes to one end of a byte stream, and returns the other, for the
    /// client: the command's stdout comes out of it (a message over [`MAX_MESSAGE`] ends the
    /// command), what the client writes into it goes to the command's stdin.
    fn connect(name: &str, pipe: botdesk_core::PipeSession) -> (Self, tokio::io::DuplexStream) {
        let (client_end, ours) = tokio::io::duplex(64 << 10);
        let (mut from_client, mut to_client) = tokio::io::split(ours);
        let ended: Arc<Mutex<Option<String>>> = Arc::default();
        let botdesk_core::PipeSession { mut output, input } = pipe;
        let why = ended.clone();
        let out = tokio::spawn(async move {
            let (mut line, mut stderr) = (0usize, Vec::<u8>::new());
            let reason = loop {
                match output.recv().await {
                    Some(ExecOutput { stream: StreamKind::Stdout, data }) => {
                        line = match data.iter().rposition(|&b| b == b'\n') {
                            Some(i) => data.len() - i - 1,
                            None => line + data.len(),
                        };
                        if line > MAX_MESSAGE {
                            break format!("it sent a message over {} MiB, the most a server may send at once, and was ended", MAX_MESSAGE >> 20);
                        }
                        if to_client.write_all(&data).await.is_err() {
                            break "the run let go of it".into();
                        }
                    }
                    Some(ExecOutput { stream: StreamKind::Stderr, data }) => {
                        stderr.extend_from_slice(&data);
                        if stderr.len() > 2 * STDERR_TAIL {
                            stderr.drain(..stderr.len() - STDERR_TAIL);
                        }
                    }
                    None => break "it ended".into(),
                }
            };
            let said = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(STDERR_TAIL)..]).trim().to_string();
            *why.lock().unwrap() = Some(if said.is_empty() { reason } else { format!("{reason}; the end of its stderr: {said}") });
            let _ = to_client.shutdown().await;
        });
        let into = tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            loop {
                match from_client.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if input.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                            break;
                        }
                    }
                }
            }
            // Dropping the input ends the command.
        });
        (McpServer { name: name.to_string(), client: Mutex::default(), ended, pumps: vec![out, into] }, client_end)
    }

    /// What to say of a failure: why the server ended, when it did, else `otherwise`.
    fn ended_or(&self, otherwise: &str) -> String {
        match self.ended.lock().unwrap().as_deref() {
            Some(why) => format!("the MCP server {:?} is not running: {why}", self.name),
            None => otherwise.to_string(),
        }
    }

    /// Closes the client and the pipes: the command's input closes, and the computer ends it
    /// with everything it started.
    async fn close(&self) {
        let client = self.client.lock().unwrap().take();
        if let Some(c) = client.and_then(|c| Arc::try_unwrap(c).ok()) {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.cancel()).await;
        }
        for p in &self.pumps {
            p.abort();
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        for p in &self.pumps {
            p.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_to_what_model_apis_accept() {
        assert!(check_name("notes").is_ok() && check_name("my-fs2").is_ok());
        for bad in ["", "a_b", "a.b", "with space", "x".repeat(21).as_str()] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let tool = |name: &str| rmcp::model::Tool::new(name.to_string(), "does it", Arc::new(serde_json::Map::new()));
        let (offered, skipped) = offer("notes", vec![tool("add"), tool("a.b"), tool(&"y".repeat(60))]);
        assert_eq!(offered.iter().map(|t| t.name()).collect::<Vec<_>>(), ["notes__add"]);
        assert_eq!(offered[0].schema["type"], "object");
        assert_eq!(skipped.len(), 2, "{skipped:?}");
    }

    /// A server in this process, on the pipes a computer's command would have: it answers
    /// `initialize` and `tools/list` (one tool, `echo`), then `act(call)` for each tool call
    /// (what it writes to stdout, to stderr, and whether it ends there).
    fn fake_server(act: impl Fn(&Value) -> (Vec<u8>, &'static str, bool) + Send + 'static) -> botdesk_core::PipeSession {
        let (out_tx, output) = tokio::sync::mpsc::channel::<ExecOutput>(64);
        let (input, mut in_rx) = tokio::sync::mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            while let Some(chunk) = in_rx.recv().await {
                buf.extend_from_slice(&chunk);
                while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    let msg: Value = serde_json::from_slice(&line).unwrap();
                    let reply = |result: Value| ExecOutput {
                        stream: StreamKind::Stdout,
                        data: Bytes::from(format!("{}\n", serde_json::json!({"jsonrpc": "2.0", "id": msg["id"], "result": result}))),
                    };
                    let sent = match msg["method"].as_str() {
                        Some("initialize") => out_tx.send(reply(serde_json::json!({"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}))).await,
                        Some("tools/list") => out_tx.send(reply(serde_json::json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}))).await,
                        Some("tools/call") => {
                            let (stdout, stderr, ends) = act(&msg);
                            let _ = out_tx.send(ExecOutput { stream: StreamKind::Stderr, data: Bytes::from(stderr) }).await;
                            let _ = out_tx.send(ExecOutput { stream: StreamKind::Stdout, data: Bytes::from(stdout) }).await;
                            if ends {
                                return;
                            }
                            Ok(())
                        }
                        _ => Ok(()),
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            }
        });
        botdesk_core::PipeSession { output, input }
    }

    /// A server that crashes during a call, or floods, fails that call with what happened (its
    /// last words on stderr); the other server of the run still answers.
    #[tokio::test]
    async fn a_server_that_crashes_or_floods_fails_only_its_calls() {
        let echo = |msg: &Value| {
            let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("").to_string();
            let answer = serde_json::json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": [{"type": "text", "text": text}]}});
            (format!("{answer}\n").into_bytes(), "", false)
        };
        let (good, tools) = McpServer::start("good", fake_server(echo)).await.unwrap();
        assert_eq!(offer("good", tools).0[0].name(), "good__echo");
        let (crashing, _) = McpServer::start("crashing", fake_server(|_| (vec![], "Traceback: boom\n", true))).await.unwrap();
        let (flooding, _) = McpServer::start("flooding", fake_server(|_| (vec![b'x'; MAX_MESSAGE + 10], "", false))).await.unwrap();
        let run = RunMcp { servers: vec![good, crashing, flooding] };
        let cancel = CancellationToken::new();
        let args = |t: &str| serde_json::json!({"text": t}).as_object().unwrap().clone();

        let out = run.call("crashing__echo", args("a"), &cancel).await;
        assert!(out.is_error && out.text.contains("\"crashing\" is not running: it ended; the end of its stderr: Traceback: boom"), "{}", out.text);
        let out = run.call("flooding__echo", args("a"), &cancel).await;
        assert!(out.is_error && out.text.contains("sent a message over 4 MiB"), "{}", out.text);
        let out = run.call("good__echo", args("still here"), &cancel).await;
        assert!(!out.is_error && out.text == "still here", "{}", out.text);
        let out = run.call("nobody__echo", args("a"), &cancel).await;
        assert!(out.is_error && out.text.contains("not running in this run"), "{}", out.text);
        run.close().await;
    }

    #[test]
    fn results_are_cut_and_images_checked() {
        let long = rmcp::model::CallToolResult::success(vec![ContentBlock::text("x".repeat(50_000))]);
        let out = output_of(long);
        assert!(out.text.chars().count() <= botdesk_agent::conversation::MAX_TOOL_TEXT && out.text.contains("[cut: showing the first"), "{}", out.text.len());
        let fake_png = rmcp::model::CallToolResult::success(vec![ContentBlock::image("bm90IGEgcG5n", "image/png")]);
        let out = output_of(fake_png);
        assert!(out.image.is_none() && out.text.contains("left out"), "{}", out.text);
        let empty = rmcp::model::CallToolResult::success(vec![]);
        assert_eq!(output_of(empty).text, "(no output)");
    }
}

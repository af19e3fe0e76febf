//! `botdesk mcp`: the bots as an MCP server (the official Rust SDK, `rmcp`), on stdio or, with
//! `--http`, streamable HTTP on a loopback address behind a bearer token.
//!
//! The tools are the ones a run's model has, under names an MCP client expects (`screenshot`,
//! `act`, `shell`, `read_file`, …), each with the same schema plus the `bot` it is for, and two
//! of its own (`list_bots`, `create_bot`). A call on a bot goes through an engine session
//! ([`botdesk_engine::ClientSession`]): the bot's execution lease held for "MCP: <client>" (the
//! name from the client's `initialize`), with the same checks, limits, chat and activity records
//! as a run. A session ends when the client leaves, after [`IDLE`] without a call, or on Stop.
//!
//! Resources, read without holding a bot (as the app's screen and Files pane do): each bot's
//! screen, `botdesk://BOT/screen` (PNG), and its folder, `botdesk://BOT/files/PATH` (a folder's
//! listing when PATH is empty or ends in `/`, else the file, up to [`READ_MAX`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botdesk_agent::tools::{specs, ToolKind};
use botdesk_core::action::CoordSpace;
use botdesk_engine::{ClientSession, ComputerScope, Engine, SessionOutput};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

/// A session nobody called for this long lets go of its bot (a run or the person may want it).
pub const IDLE: Duration = Duration::from_secs(60);

/// The largest file read as a resource.
pub const READ_MAX: u64 = 10 << 20;

/// MCP names of the run tools offered, beside the run tool each one is.
const OFFERED: &[(&str, ToolKind)] = &[
    ("screenshot", ToolKind::ComputerObserve),
    ("act", ToolKind::ComputerAct),
    ("shell", ToolKind::Shell),
    ("list_files", ToolKind::ListFiles),
    ("read_file", ToolKind::ReadFile),
    ("write_file", ToolKind::WriteFile),
    ("open_path", ToolKind::OpenPath),
    ("launch_app", ToolKind::LaunchApp),
    ("browser_navigate", ToolKind::BrowserNavigate),
    ("browser_snapshot", ToolKind::BrowserSnapshot),
    ("browser_act", ToolKind::BrowserAct),
    ("ask_person", ToolKind::RequestTakeover),
];

/// One bot's session, if one is open, and when it was last used.
#[derive(Default)]
struct Slot {
    session: Option<ClientSession>,
    used: Option<Instant>,
}

#[derive(Clone)]
pub struct Server {
    engine: Engine,
    tools: Arc<Vec<Tool>>,
    slots: Arc<Mutex<HashMap<botdesk_engine::BotId, Arc<tokio::sync::Mutex<Slot>>>>>,
}

/// Serves MCP on stdin and stdout until the client closes them; then every session ends.
pub async fn serve_stdio(engine: Engine) -> Result<(), String> {
    let server = Server::new(engine);
    let closer = tokio::spawn(server.clone().close_idle());
    let running = server.clone().serve(rmcp::transport::stdio()).await.map_err(|e| format!("MCP: {e}"))?;
    let ended = running.waiting().await;
    closer.abort();
    server.close_all().await;
    ended.map(|_| ()).map_err(|e| format!("MCP: {e}"))
}

/// Serves MCP over streamable HTTP at `http://ADDR/mcp` (loopback only) until Ctrl-C. Every
/// request must carry `Authorization: Bearer <token>`: a token drawn now, written to `token_file`
/// (0600) and printed once by the caller. Other requests get 401 and reach nothing.
pub async fn serve_http(engine: Engine, addr: std::net::SocketAddr, token: String, on_listening: impl FnOnce(std::net::SocketAddr)) -> Result<(), String> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rmcp::transport::streamable_http_server::{session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService};
    if !addr.ip().is_loopback() {
        return Err(format!("MCP over HTTP listens on a loopback address only (127.0.0.1 or ::1), not {}", addr.ip()));
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("MCP: {addr}: {e}"))?;
    let server = Server::new(engine);
    let closer = tokio::spawn(server.clone().close_idle());
    let stop = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    let factory = server.clone();
    let service = StreamableHttpService::new(move || Ok(factory.clone()), Arc::new(LocalSessionManager::default()), config);
    on_listening(listener.local_addr().map_err(|e| e.to_string())?);
    let expected = Arc::new(format!("Bearer {token}"));
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => { tracing::warn!("MCP over HTTP: {e}"); continue }
            },
            _ = tokio::signal::ctrl_c() => break,
        };
        let (service, expected) = (service.clone(), expected.clone());
        tokio::spawn(async move {
            let handle = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut service = service.clone();
                let allowed = req.headers().get(hyper::header::AUTHORIZATION).is_some_and(|v| v.as_bytes() == expected.as_bytes());
                async move {
                    use tower_service::Service as _;
                    if !allowed {
                        let refusal =
                            http_body_util::Full::new(bytes::Bytes::from_static(b"a bearer token is required (the one botdesk mcp --http printed)\n"));
                        let mut r = hyper::Response::new(http_body_util::BodyExt::boxed(http_body_util::BodyExt::map_err(refusal, |never| match never {})));
                        *r.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                        r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
                        return Ok::<_, std::convert::Infallible>(r);
                    }
                    service.call(req).await
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), handle).await;
        });
    }
    stop.cancel();
    closer.abort();
    server.close_all().await;
    Ok(())
}

impl Server {
    pub fn new(engine: Engine) -> Self {
        Server { engine, tools: Arc::new(tools()), slots: Default::default() }
    }

    /// Closes sessions idle for [`IDLE`], and forgets those that ended (Stop).
    async fn close_idle(self) {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let slots: Vec<_> = self.slots.lock().unwrap().values().cloned().collect();
            for slot in slots {
                let Ok(mut s) = slot.try_lock() else { continue };
                let idle = s.used.is_some_and(|u| u.elapsed() >= IDLE);
                let ended = match &s.session {
                    Some(session) => !session.is_live().await,
                    None => false,
                };
                if idle || ended {
                    if let Some(session) = s.session.take() {
                        session.close().await;
                    }
                }
            }
        }
    }

    async fn close_all(&self) {
        let slots: Vec<_> = self.slots.lock().unwrap().drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Some(session) = slot.lock().await.session.take() {
                session.close().await;
            }
        }
    }

    /// A call of a run tool on a bot, in that bot's session (opened when there is none).
    async fn on_bot(&self, driver: &str, kind: ToolKind, mut args: Map<String, Value>, ct: &tokio_util::sync::CancellationToken) -> CallToolResult {
        let bot = match self.bot(&args).await {
            Ok(b) => b,
            Err(e) => return e,
        };
        args.remove("bot");
        let slot = self.slots.lock().unwrap().entry(bot.id.clone()).or_default().clone();
        let mut slot = slot.lock().await;
        if let Some(s) = &slot.session {
            if !s.is_live().await {
                slot.session.take().unwrap().close().await;
            }
        }
        if slot.session.is_none() {
            match self.engine.open_client_session(&bot.id, driver).await {
                Ok(s) => slot.session = Some(s),
                Err(e) => return tool_error(&e.to_string()),
            }
        }
        slot.used = Some(Instant::now());
        let out = slot.session.as_ref().unwrap().call(kind.name(), Value::Object(args), ct).await;
        slot.used = Some(Instant::now());
        result(out)
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("botdesk", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Botdesk's bots, each with its own Linux desktop, browser and folder on this machine. list_bots names them; every other \
                 tool takes the bot it is for. While a call is made on a bot, Botdesk holds it for you: a run or the person cannot use it \
                 meanwhile, and a call on a bot that a run or the person is using is refused, saying who.",
            )
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items((*self.tools).clone()))
    }

    async fn list_resources(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListResourcesResult, ErrorData> {
        let bots = self.engine.list_bots().await.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut items = vec![];
        for b in bots {
            items.push(
                Resource::new(format!("botdesk://{}/screen", b.name), format!("{} screen", b.name))
                    .with_mime_type("image/png")
                    .with_description(format!("What {}'s screen shows now", b.name)),
            );
            items.push(
                Resource::new(format!("botdesk://{}/files/", b.name), format!("{} files", b.name))
                    .with_mime_type("text/plain")
                    .with_description(format!("The files of {}'s folder", b.name)),
            );
        }
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("botdesk://{bot}/screen", "screen").with_mime_type("image/png").with_description("A bot's screen now"),
            ResourceTemplate::new("botdesk://{bot}/files/{path}", "file")
                .with_description("A file of a bot's folder, or a folder's listing (a path ending in /)"),
        ]))
    }

    async fn read_resource(&self, request: ReadResourceRequestParams, _context: RequestContext<RoleServer>) -> Result<ReadResourceResponse, ErrorData> {
        use base64::Engine as _;
        let uri = request.uri;
        let unknown = || ErrorData::resource_not_found(format!("{uri:?} is not a Botdesk resource: botdesk://BOT/screen or botdesk://BOT/files/PATH"), None);
        let decoded = percent_decoded(&uri).ok_or_else(unknown)?;
        let (bot, what) = decoded.strip_prefix("botdesk://").and_then(|r| r.split_once('/')).ok_or_else(unknown)?;
        let failed = |e: botdesk_engine::EngineError| ErrorData::invalid_params(e.to_string(), None);
        let contents = if what == "screen" {
            let bot = &self.engine.bot_ref(bot).await.map_err(failed)?;
            let shot = self.engine.screenshot(bot, botdesk_engine::ImageFormat::Png).await.map_err(failed)?;
            let png = shot.image.ok_or_else(|| ErrorData::internal_error("the screenshot has no image", None))?;
            ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(&png), uri.clone()).with_mime_type("image/png")
        } else if let Some(path) = what.strip_prefix("files/") {
            let bot = &self.engine.bot_ref(bot).await.map_err(failed)?;
            if path.is_empty() || path.ends_with('/') {
                let (dir, entries) = self.engine.files_list(bot, if path.is_empty() { "." } else { path }).await.map_err(failed)?;
                ResourceContents::text(botdesk_engine::listing_text(&dir, &entries), uri.clone())
            } else {
                let data = self.engine.files_read(bot, path, READ_MAX).await.map_err(failed)?;
                match String::from_utf8(data.to_vec()) {
                    Ok(text) => ResourceContents::text(text, uri.clone()),
                    Err(_) => {
                        ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(&data), uri.clone()).with_mime_type("application/octet-stream")
                    }
                }
            }
        } else {
            return Err(unknown());
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        let result = match name {
            "list_bots" => match self.engine.list_bots().await {
                Ok(bots) => text_result(&serde_json::to_string_pretty(&bots).unwrap_or_default()),
                Err(e) => tool_error(&e.to_string()),
            },
            "create_bot" => self.create_bot(&args).await,
            "run_task" => self.run_task(&args, &context).await,
            _ => match OFFERED.iter().find(|(n, _)| *n == name) {
                Some((_, kind)) => {
                    let client = context.peer.peer_info().map(|p| p.client_info.name.clone()).filter(|n| !n.trim().is_empty());
                    let driver = format!("MCP: {}", client.as_deref().unwrap_or("a client"));
                    self.on_bot(&driver, *kind, args, &context.ct).await
                }
                None => return Err(ErrorData::invalid_params(format!("there is no tool named {name:?}; tools/list lists them"), None)),
            },
        };
        Ok(CallToolResponse::Complete(result))
    }
}

impl Server {
    /// The bot's own model does a task; its steps reach the client as progress notifications (when
    /// it asked for them with a progress token), its answer as the result. The client's own
    /// session on that bot lets go first; cancelling the call stops the run.
    async fn run_task(&self, args: &Map<String, Value>, context: &RequestContext<RoleServer>) -> CallToolResult {
        use botdesk_engine::RunEvent;
        let Some(task) = args.get("task").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) else {
            return tool_error("missing \"task\": what the bot should do, in words");
        };
        let bot = match self.bot(args).await {
            Ok(b) => b,
            Err(e) => return e,
        };
        let slot = self.slots.lock().unwrap().get(&bot.id).cloned();
        if let Some(slot) = slot {
            if let Some(session) = slot.lock().await.session.take() {
                session.close().await;
            }
        }
        let mut events = self.engine.run_events();
        let token = context.meta.get_progress_token();
        let (engine, id, task) = (self.engine.clone(), bot.id.clone(), task.to_string());
        let mut run = tokio::spawn(async move { engine.run_task(&id, &task).await });
        let (mut steps, mut answer) = (0u32, String::new());
        let mut cancelled = false;
        let ended = loop {
            let said = tokio::select! {
                done = &mut run => break done,
                _ = context.ct.cancelled(), if !cancelled => {
                    cancelled = true;
                    let _ = self.engine.stop_bot(&bot.id).await;
                    continue;
                }
                event = events.recv() => match event {
                    Ok(RunEvent::Tool { bot: b, call, .. }) if b == bot.id.as_str() && call.status == botdesk_core::CallStatus::Running => {
                        format!("{} {}", call.name, call.arguments.chars().take(200).collect::<String>())
                    }
                    Ok(RunEvent::Message { bot: b, item }) if b == bot.id.as_str() && item.role == botdesk_core::MessageRole::Assistant && !item.text.trim().is_empty() => {
                        answer = item.text.clone();
                        item.text.chars().take(200).collect()
                    }
                    _ => continue,
                },
            };
            steps += 1;
            if let Some(token) = &token {
                let note = rmcp::model::ProgressNotificationParam::new(token.clone(), steps as f64).with_message(said);
                let _ = context.peer.notify_progress(note).await;
            }
        };
        match ended {
            Ok(Ok(run)) if run.status == botdesk_core::RunStatus::Completed => {
                text_result(&format!("{} completed the task (run {}).\n{answer}", bot.name, run.id))
            }
            Ok(Ok(run)) => tool_error(&format!("the run {} ended {}: {}\n{answer}", run.id, run.status, run.error.unwrap_or_default())),
            Ok(Err(e)) => tool_error(&e.to_string()),
            Err(e) => tool_error(&format!("the run's task failed: {e}")),
        }
    }

    /// The bot named (or with the id) in the call's `bot` argument.
    async fn bot(&self, args: &Map<String, Value>) -> Result<botdesk_engine::BotRef, CallToolResult> {
        let Some(name) = args.get("bot").and_then(Value::as_str) else {
            return Err(tool_error("missing \"bot\": the name (or id) of the bot to use; list_bots lists them"));
        };
        self.engine.bot_ref(name).await.map_err(|e| match e.code {
            botdesk_engine::ErrorCode::NotFound => tool_error(&format!("there is no bot named {name:?}; list_bots lists them")),
            _ => tool_error(&e.to_string()),
        })
    }

    async fn create_bot(&self, args: &Map<String, Value>) -> CallToolResult {
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return tool_error("missing \"name\": the new bot's name");
        };
        let scope = match args.get("computer").and_then(Value::as_str).unwrap_or("team") {
            "team" => ComputerScope::Team,
            "private" => ComputerScope::Private,
            other => return tool_error(&format!("\"computer\" is \"team\" or \"private\", not {other:?}")),
        };
        let model = args.get("model").and_then(Value::as_str);
        match self.engine.create_bot(name, scope, model, "").await {
            Ok(bot) => text_result(&serde_json::to_string_pretty(&bot).unwrap_or_default()),
            Err(e) => tool_error(&e.to_string()),
        }
    }
}

/// Every tool offered, with its schema.
fn tools() -> Vec<Tool> {
    let object = |v: Value| -> Arc<Map<String, Value>> { Arc::new(v.as_object().cloned().unwrap_or_default()) };
    let mut tools = vec![
        Tool::new(
            "list_bots",
            "The bots: name, id, computer (Team or Private), model and whether one is working.",
            object(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "create_bot",
            "Makes a bot: its own desktop, browser and folder, on the Team computer (shared with the other Team bots) or a Private one.",
            object(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "letters, digits, - and _"},
                    "computer": {"type": "string", "enum": ["team", "private"], "description": "default team"},
                    "model": {"type": "string", "description": "a model's id from Botdesk's settings (optional: the bot can also be driven only over MCP)"}
                },
                "required": ["name"]
            })),
        ),
    ];
    tools.push(Tool::new(
        "run_task",
        "Hands a task to the bot's own model (set in Botdesk) and waits until its run ends; each step is sent as a progress \
         notification, and the result is the bot's last answer. Cancelling the call stops the run.",
        object(json!({
            "type": "object",
            "properties": {
                "bot": {"type": "string", "description": "the bot's name or id (list_bots)"},
                "task": {"type": "string", "description": "what to do, in words"}
            },
            "required": ["bot", "task"]
        })),
    ));
    let specs = specs(CoordSpace::Pixels);
    for (name, kind) in OFFERED {
        let Some(spec) = specs.iter().find(|s| s.kind == *kind) else { continue };
        let mut schema = spec.schema.as_object().cloned().unwrap_or_default();
        let props = schema.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("bot".into(), json!({"type": "string", "description": "the bot's name or id (list_bots)"}));
        }
        let required = schema.entry("required").or_insert_with(|| json!([]));
        if let Some(r) = required.as_array_mut() {
            r.insert(0, json!("bot"));
        }
        tools.push(Tool::new(*name, spec.description.clone(), Arc::new(schema)));
    }
    tools
}

fn result(out: SessionOutput) -> CallToolResult {
    use base64::Engine as _;
    let mut content = vec![ContentBlock::text(out.text)];
    if let Some(img) = out.image {
        content.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(&img.data), img.media_type));
    }
    if out.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// A URI with its `%XX` escapes decoded (None when they do not make UTF-8).
fn percent_decoded(uri: &str) -> Option<String> {
    let (bytes, mut out) = (uri.as_bytes(), Vec::with_capacity(uri.len()));
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn text_result(text: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn tool_error(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

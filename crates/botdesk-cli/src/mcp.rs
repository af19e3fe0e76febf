//! `botdesk mcp`: the bots as an MCP server (the official Rust SDK, `rmcp`), on stdio or, with
//! `--http`, streamable HTTP on a loopback address behind a bearer token.
//!
//! The tools are the ones a run's model has, under names an MCP client expects (`screenshot`,
//! `act`, `shell`, `read_file`, …), each with the same schema plus the `bot` it is for, and two
//! of its own (`list_bots`, `create_bot`). A call on a bot goes through an engine session
//! ([`botdesk_engine::ClientSession`]): the bot's execution lease held for "MCP: <client>" (the
//! name from the client's `initialize`), with the same checks, limits, chat and activity records
//! as a run. A session ends when the client leaves, after [`IDLE`] without a call, or on Stop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use botdesk_agent::tools::{specs, ToolKind};
use botdesk_core::action::CoordSpace;
use botdesk_engine::{ClientSession, ComputerScope, Engine, SessionOutput};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

/// A session nobody called for this long lets go of its bot (a run or the person may want it).
pub const IDLE: Duration = Duration::from_secs(60);

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
    slots: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>>,
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
        let Some(bot) = args.remove("bot").and_then(|b| b.as_str().map(str::to_string)) else {
            return tool_error("missing \"bot\": the name (or id) of the bot to use; list_bots lists them");
        };
        let bot = match self.engine.list_bots().await {
            Ok(bots) => match bots.into_iter().find(|b| b.name == bot || b.id == bot) {
                Some(b) => b,
                None => return tool_error(&format!("there is no bot named {bot:?}; list_bots lists them")),
            },
            Err(e) => return tool_error(&e.to_string()),
        };
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
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

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        let result = match name {
            "list_bots" => match self.engine.list_bots().await {
                Ok(bots) => text_result(&serde_json::to_string_pretty(&bots).unwrap_or_default()),
                Err(e) => tool_error(&e.to_string()),
            },
            "create_bot" => self.create_bot(&args).await,
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

fn text_result(text: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn tool_error(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

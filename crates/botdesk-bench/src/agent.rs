//! The agent's tokens: the real client and run loop against the scripted model server (no
//! Docker), a 60-step GUI run of Claude Sonnet 4.5 on its own computer tool, where every action
//! returns a new 1280x800 screenshot. The server counts tokens as the vendor does (a token per 4
//! bytes of text, width × height / 750 an image) and plays Anthropic's prompt cache as its docs
//! describe it (breakpoints, the 20-block lookback, the model's minimum, 5 minutes). The anchor
//! is the same run kept the way Anthropic's computer-use demo keeps it (every step, the three most
//! recent screenshots removed ten at a time, breakpoints on the three latest user turns).

use async_trait::async_trait;
use botdesk_agent::conversation::ContextPolicy;
use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_agent::{Host, Image, ModelClient, ModelConfig, RunConfig, RunEnd, Tool, ToolCall, ToolOutput, ToolResult};
use botdesk_core::Usage;
use tokio_util::sync::CancellationToken;

pub const STEPS: usize = 60;
/// Anthropic's prices for Claude Sonnet 4.5 relative to an input token (pricing page).
const CACHE_READ: f64 = 0.1;
const CACHE_WRITE: f64 = 1.25;

struct Shots {
    usage: std::sync::Mutex<Vec<Usage>>,
    n: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl Host for Shots {
    async fn execute(&self, _id: &str, _tool: Tool, _cancel: &CancellationToken) -> ToolOutput {
        // A new screen at every step.
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ToolOutput {
            image: Some(Image::screenshot(botdesk_agent::scripted::png(1280, 800, n), &format!("frame-{n}"))),
            ..ToolOutput::ok("Did 1 action. The screen changed and was still 310 ms after the last action. Screen 1280x800, cursor at (640, 400).")
        }
    }
    fn text_delta(&self, _t: &str) {}
    async fn assistant(&self, _text: &str, _calls: &[ToolCall]) {}
    async fn tool_result(&self, _call: &ToolCall, _r: &ToolResult) {}
    async fn usage(&self, u: &Usage) {
        self.usage.lock().unwrap().push(*u);
    }
}

/// What one run sent.
pub struct Tokens {
    /// Prompt tokens over all calls (cached or not).
    pub prompt: u64,
    /// Of all prompt tokens, the share read from the cache.
    pub cached: f64,
    /// Prompt tokens as Anthropic bills them, in input-token equivalents (a cache read costs a
    /// tenth, a cache write 1.25).
    pub billed: f64,
    /// Request bytes over all calls.
    pub bytes: u64,
    /// Prompt tokens at step 60 ÷ at step 5.
    pub growth: f64,
    /// The largest prompt of the run ÷ the prompt at step 5 (screenshots come and go in steps, so
    /// step 60 alone depends on where it falls among them).
    pub peak: f64,
}

async fn one(context: ContextPolicy) -> Tokens {
    let mut steps: Vec<Step> =
        (0..STEPS - 1).map(|i| Step::reply(Reply::call("computer", serde_json::json!({"action": "left_click", "coordinate": [100 + i, 200]})))).collect();
    steps.push(Step::reply(Reply::text("Done.")));
    let server = ScriptedServer::start(steps).await;
    let mut cfg = ModelConfig::new("anthropic", "claude-sonnet-4-5", Some(&server.base_url(botdesk_agent::Wire::Anthropic)), Some("sk-bench".into())).unwrap();
    cfg.context = context;
    let dialect = cfg.dialect;
    let client = ModelClient::new(cfg).unwrap();
    let host = Shots { usage: Default::default(), n: Default::default() };
    let setting = botdesk_agent::run::Setting {
        bot: "bench",
        instructions: "",
        folder: "bots/bench",
        shared: true,
        today: "2026-12-01",
        coords: Default::default(),
        dialect,
    };
    let rc = RunConfig {
        system: botdesk_agent::system_prompt(&setting),
        max_steps: STEPS as u32,
        budget: Default::default(),
        prices: None,
        coords: Default::default(),
        mcp_tools: vec![],
        login_sites: vec![],
    };
    let end = botdesk_agent::run(&client, &host, &rc, vec![], "Work through the form on the screen.", &CancellationToken::new()).await;
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    assert_eq!(server.failures(), Vec::<String>::new());
    let sizes: Vec<u64> = server.requests().iter().map(|s| s.body.to_string().len() as u64).collect();
    if std::env::var_os("BOTDESK_BENCH_TRACE").is_some() {
        for (i, b) in server.billed().iter().enumerate() {
            eprintln!("{context:?} {:>2}: prompt {:>6} read {:>6} written {:>6}", i + 1, b.prompt, b.read, b.written);
        }
    }
    let usage = host.usage.lock().unwrap().clone();
    assert_eq!((sizes.len(), usage.len()), (STEPS, STEPS));
    let all = usage.iter().fold(Usage::default(), |mut t, u| {
        t.add(u);
        t
    });
    Tokens {
        prompt: all.prompt(),
        billed: usage.iter().map(|u| u.input as f64 + CACHE_READ * u.cache_read as f64 + CACHE_WRITE * u.cache_write as f64).sum(),
        cached: all.cache_read as f64 / all.prompt() as f64,
        bytes: sizes.iter().sum(),
        growth: usage[STEPS - 1].prompt() as f64 / usage[4].prompt() as f64,
        peak: usage.iter().map(Usage::prompt).max().unwrap_or(0) as f64 / usage[4].prompt() as f64,
    }
}

/// (ours, anchor: the demo's way)
pub async fn run() -> (Tokens, Tokens) {
    (one(ContextPolicy::Botdesk).await, one(ContextPolicy::AnthropicDemo).await)
}

/// The section of docs/benchmarks.md.
pub fn section(ours: &Tokens, anchor: &Tokens) -> String {
    format!(
        "\n## Agent tokens (scripted model server with a documented prompt cache)\n\n\
         A {STEPS}-step GUI run of Claude Sonnet 4.5 on its own computer tool: each step a click returning a new 1280×800 \
         screenshot ({} tokens as Anthropic counts images). The scripted server refuses what the Messages API refuses and \
         plays its prompt cache as documented: a prefix is written at each breakpoint when it is at least the model's \
         minimum (1,024 tokens), read when a later breakpoint or one of the 20 blocks before it ends where a written one \
         did, for 5 minutes. Anchor: the same script kept as Anthropic's computer-use demo keeps its conversation (every \
         step, the three most recent screenshots with older ones removed ten at a time, breakpoints on the system prompt \
         and the three latest user turns).\n\n\
         | what | ours | anchor | ratio | target |\n|---|---|---|---|---|\n\
         | prompt tokens, all calls | {} | {} | {:.2} | |\n\
         | the same, billed (cache reads ×0.1, cache writes ×1.25, in input tokens) | {:.0} | {:.0} | {:.2} | ≤ 0.8 |\n\
         | share of the prompt read from the cache, all calls | {:.1} % | {:.1} % | | ≥ 85 % |\n\
         | bytes sent, all calls | {:.1} MB | {:.1} MB | {:.2} | |\n\
         | prompt tokens at step {STEPS} ÷ at step 5 | {:.2} | {:.2} | | ≤ 2 |\n\
         | the run's largest prompt ÷ at step 5 | {:.2} | {:.2} | | |\n\
         \nOurs keeps up to {} screenshots (at the next, all but the newest {} go), collapses old steps only when \
         screenshots are pruned and {} steps are whole (all but the newest {} become a line per call in one summary of its \
         last 30 lines), and puts breakpoints on the system prompt, the last block, and just before the oldest screenshot \
         removed last and the oldest one sent: between prunings each request repeats the previous one and adds one turn, \
         and at one the prompt changes only after a breakpoint, so only the pruned steps' text is written again.\n",
        botdesk_agent::scripted::image_tokens(botdesk_agent::Wire::Anthropic, (1280, 800)),
        ours.prompt,
        anchor.prompt,
        ours.prompt as f64 / anchor.prompt as f64,
        ours.billed,
        anchor.billed,
        ours.billed / anchor.billed,
        ours.cached * 100.0,
        anchor.cached * 100.0,
        ours.bytes as f64 / 1e6,
        anchor.bytes as f64 / 1e6,
        ours.bytes as f64 / anchor.bytes as f64,
        ours.growth,
        anchor.growth,
        ours.peak,
        anchor.peak,
        botdesk_agent::conversation::MAX_IMAGES_IN_CONTEXT,
        botdesk_agent::conversation::IMAGES_AFTER_PRUNE,
        botdesk_agent::conversation::STEPS_BEFORE_COLLAPSE,
        botdesk_agent::conversation::STEPS_KEPT,
    )
}

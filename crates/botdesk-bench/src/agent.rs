//! The agent's tokens: the real client and run loop against the scripted model server (no
//! Docker), a 60-step GUI run in the Anthropic format where every action returns a screenshot
//! of a real screenshot's size. The server counts a token per 4 bytes and plays a prompt cache
//! (what a request repeats of the previous one, when it marks breakpoints). The anchor is the
//! same run without cache breakpoints.

use async_trait::async_trait;
use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_agent::{Host, Image, ModelClient, ModelConfig, RunConfig, RunEnd, Tool, ToolCall, ToolOutput, ToolResult};
use botdesk_core::Usage;
use tokio_util::sync::CancellationToken;

pub const STEPS: usize = 60;
/// About what a PNG of a busy 1280x800 desktop weighs.
const SHOT_BYTES: usize = 150_000;

struct Shots {
    usage: std::sync::Mutex<Vec<Usage>>,
    n: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl Host for Shots {
    async fn execute(&self, _id: &str, _tool: Tool, _cancel: &CancellationToken) -> ToolOutput {
        // A different, incompressible screenshot each time (xorshift bytes).
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ self.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bytes: Vec<u8> = (0..SHOT_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        ToolOutput {
            text: "Did 1 action. The screen changed and was still 310 ms after the last action. Screen 1280x800, cursor at (640, 400).".into(),
            image: Some(Image::png(bytes.into())),
            is_error: false,
            page_url: None,
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
    /// Of the prompt tokens of calls after the third, the share read from the cache.
    pub cached_after_3: f64,
    /// Prompt tokens as Anthropic bills them, in input-token equivalents (a cache read costs a
    /// tenth, a cache write 1.25).
    pub billed: f64,
    /// Request bytes over all calls.
    pub bytes: u64,
    /// Prompt tokens at step 60 ÷ at step 5.
    pub growth: f64,
}

async fn one(prompt_cache: bool) -> Tokens {
    let mut steps: Vec<Step> =
        (0..STEPS - 1).map(|i| Step::reply(Reply::call("computer_act", serde_json::json!({"actions": [{"type": "click", "x": 100 + i, "y": 200}]})))).collect();
    steps.push(Step::reply(Reply::text("Done.")));
    let server = ScriptedServer::start(steps).await;
    let mut cfg = ModelConfig::new("anthropic", "scripted", Some(&server.base_url(botdesk_agent::Wire::Anthropic)), Some("sk-bench".into())).unwrap();
    cfg.prompt_cache = prompt_cache;
    let client = ModelClient::new(cfg).unwrap();
    let host = Shots { usage: Default::default(), n: Default::default() };
    let setting = botdesk_agent::run::Setting {
        bot: "bench",
        instructions: "",
        folder: "bots/bench",
        shared: true,
        today: "2026-12-01",
        coords: Default::default(),
        dialect: botdesk_agent::Dialect::Plain,
    };
    let rc = RunConfig {
        system: botdesk_agent::system_prompt(&setting),
        max_steps: STEPS as u32,
        budget: Default::default(),
        prices: None,
        coords: Default::default(),
    };
    let end = botdesk_agent::run(&client, &host, &rc, vec![], "Work through the form on the screen.", &CancellationToken::new()).await;
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    assert_eq!(server.failures(), Vec::<String>::new());
    let sizes: Vec<u64> = server.requests().iter().map(|s| s.body.to_string().len() as u64).collect();
    let usage = host.usage.lock().unwrap().clone();
    assert_eq!((sizes.len(), usage.len()), (STEPS, STEPS));
    let later = usage[3..].iter().fold(Usage::default(), |mut t, u| {
        t.add(u);
        t
    });
    Tokens {
        prompt: usage.iter().map(Usage::prompt).sum(),
        billed: usage.iter().map(|u| u.input as f64 + 0.1 * u.cache_read as f64 + 1.25 * u.cache_write as f64).sum(),
        cached_after_3: later.cache_read as f64 / later.prompt() as f64,
        bytes: sizes.iter().sum(),
        growth: usage[STEPS - 1].prompt() as f64 / usage[4].prompt() as f64,
    }
}

/// (ours, anchor without cache breakpoints)
pub async fn run() -> (Tokens, Tokens) {
    (one(true).await, one(false).await)
}

/// The section of docs/benchmarks.md.
pub fn section(ours: &Tokens, anchor: &Tokens) -> String {
    format!(
        "\n## Agent tokens (scripted model server, Anthropic format)\n\n\
         A {STEPS}-step GUI run: each step a `computer_act` returning a new {} KB screenshot. The server counts a token per 4 \
         bytes of the prompt and {} tokens per screenshot (as Anthropic counts a 1280×800 image), and plays a prompt cache: \
         what a request repeats of the previous one (breakpoints aside) is read from the cache when the request marks \
         breakpoints. Anchor: the same run without cache breakpoints.\n\n\
         | what | ours | anchor | ratio | target |\n|---|---|---|---|---|\n\
         | prompt tokens, all calls | {} | {} | {:.2} | |\n\
         | the same, billed (cache reads ×0.1, cache writes ×1.25, in input tokens) | {:.0} | {:.0} | {:.2} | |\n\
         | share of the prompt read from the cache, calls 4 to {STEPS} | {:.1} % | {:.1} % | | ≥ 70 % |\n\
         | bytes sent, all calls | {:.1} MB | {:.1} MB | {:.2} | |\n\
         | prompt tokens at step {STEPS} ÷ at step 5 | {:.2} | {:.2} | | ≤ 2 |\n\
         \nScreenshots are pruned in steps (at the fourth, all but the newest) and so are whole steps (at sixteen, all but the \
         newest eight become a line per call in one summary, which keeps its last 30 lines), so the prompt changes before \
         its end only at those moments; the rest of the time each request repeats the previous one and adds one turn.\n",
        SHOT_BYTES / 1000,
        botdesk_agent::scripted::IMAGE_TOKENS,
        ours.prompt,
        anchor.prompt,
        ours.prompt as f64 / anchor.prompt as f64,
        ours.billed,
        anchor.billed,
        ours.billed / anchor.billed,
        ours.cached_after_3 * 100.0,
        anchor.cached_after_3 * 100.0,
        ours.bytes as f64 / 1e6,
        anchor.bytes as f64 / 1e6,
        ours.bytes as f64 / anchor.bytes as f64,
        ours.growth,
        anchor.growth,
    )
}

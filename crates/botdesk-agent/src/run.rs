//! The run loop: ask the model, carry out its tool calls through the host, repeat until the model
//! answers without tools, the step limit is reached, or the run is cancelled. Bad tool calls are
//! answered with an error the model can read and the loop goes on.

use async_trait::async_trait;
use botdesk_core::RunFailure;
use tokio_util::sync::CancellationToken;

use crate::client::{Listener, ModelClient, ModelError, Request};
use crate::conversation::{
    collapse_steps_to, compact_to, compactable, keep_context, prune_images_as, Block, ContextPolicy, Image, Message, Role, StopReason, ToolCall, ToolResult,
    Turn, STEPS_KEPT_WHEN_FULL,
};
use crate::model::{ClaudeTool, Dialect, ToolChoice};
use crate::tools::{self, Tool, ToolSpec};

/// What a tool gave back (the host's side).
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    pub text: String,
    pub image: Option<Image>,
    pub is_error: bool,
    /// The address of the page in front, when the bot's browser is.
    pub page_url: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Default::default() }
    }
    pub fn error(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: true, ..Default::default() }
    }
}

/// Where the run's tools run and its events go. The engine implements it.
#[async_trait]
pub trait Host: Send + Sync {
    /// Carries out one checked tool call. Failures come back as `is_error` outputs.
    async fn execute(&self, call_id: &str, tool: Tool, cancel: &CancellationToken) -> ToolOutput;
    /// A piece of streamed assistant text (not persisted: the whole message follows).
    fn text_delta(&self, text: &str);
    /// The model's complete turn.
    async fn assistant(&self, text: &str, calls: &[ToolCall]);
    /// A tool call's result (already cut to the context limit).
    async fn tool_result(&self, call: &ToolCall, result: &ToolResult);
    /// What one model call cost.
    async fn usage(&self, _usage: &botdesk_core::Usage) {}
    /// The reply broke off mid-stream and is asked for again: forget the text streamed so far.
    fn restart(&self, _why: &str) {}
    /// The next model call waits this long first (a rate limit the provider announced, or a
    /// retry after an error); `why` says which, for the person.
    fn waiting(&self, _wait: std::time::Duration, _why: &str) {}
    /// Something the person should know about the run (shown in the chat, not added to this
    /// run's conversation).
    async fn note(&self, _text: &str) {}
    /// A step boundary (before each model call, never inside a batch of actions or a command):
    /// the person may have paused the run to take the screen. Returns once the run may go on,
    /// with what the model is told about the pause, if there was one.
    async fn between_steps(&self, _cancel: &CancellationToken) -> Option<String> {
        None
    }
}

pub struct RunConfig {
    pub system: String,
    /// Model calls allowed in one run.
    pub max_steps: u32,
    /// What the run may spend; checked before each model call after the first.
    pub budget: botdesk_core::Budget,
    /// The model's prices, when known (for a dollar budget).
    pub prices: Option<botdesk_core::Prices>,
    /// How the model gives screen coordinates (its tools say so).
    pub coords: botdesk_core::action::CoordSpace,
    /// The tools of the bot's MCP servers, offered after ours.
    pub mcp_tools: Vec<crate::tools::ToolSpec>,
    /// The sites the person saved logins on for the bot: `fill_login` is offered for them.
    pub login_sites: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The model answered without calling a tool; its last text.
    Completed(String),
    /// What it failed of, and the sentence for the person.
    Failed(botdesk_core::RunFailure, String),
    Cancelled,
}

/// How many times in a row a reply cut off at the output limit is continued.
pub const MAX_CONTINUATIONS: u32 = 3;

/// What the model is told when its reply (text only) hit the output limit.
pub const CONTINUE: &str = "Your reply was cut off at the output limit. Continue exactly where it stopped, without repeating anything.";

/// The answer to a tool call whose arguments the output limit cut off.
pub fn cut_call(max_tokens: u32) -> String {
    format!(
        "Your reply hit the output limit ({max_tokens} tokens) while writing this call, so its arguments were cut off and nothing was done. \
         Send less at once: write a long file in parts (write_file with the first part, then write_file with append: true for each next part)."
    )
}

/// Runs `task` after `history` (earlier messages of this bot's chat).
pub async fn run(client: &ModelClient, host: &dyn Host, cfg: &RunConfig, history: Vec<Message>, task: &str, cancel: &CancellationToken) -> RunEnd {
    let mut specs = tools::specs(cfg.coords);
    if !cfg.login_sites.is_empty() {
        specs.push(tools::login_spec(&cfg.login_sites));
    }
    specs.extend(cfg.mcp_tools.iter().cloned());
    let mut messages = history;
    messages.push(Message::user(task));
    let work = messages.len();
    // Text of replies cut off at the output limit and continued, in order.
    let (mut so_far, mut continued) = (String::new(), 0);
    let mut spent = botdesk_core::Usage::default();
    let window = match window_for(client, host, cfg, &specs, task, cancel).await {
        Ok(w) => w,
        Err(end) => return end,
    };
    if cancel.is_cancelled() {
        return RunEnd::Cancelled;
    }
    let mut fill = Fill::new(window, work);
    // UI-TARS acts on the screenshot it is given: its first turn gets one.
    if client.config().dialect == Dialect::UiTars {
        let look = ToolCall::from_text("look_0".into(), tools::ToolKind::ComputerObserve.name().into(), "{}".into());
        host.assistant("", std::slice::from_ref(&look)).await;
        messages.push(Message { role: Role::Assistant, blocks: vec![Block::ToolCall(look.clone())] });
        let results = carry_out(client, host, &[look], false, &[], cancel).await;
        messages.push(Message { role: Role::User, blocks: results });
    }
    for step in 0..cfg.max_steps {
        if let Some(said) = host.between_steps(cancel).await {
            tell(&mut messages, said);
        }
        if cancel.is_cancelled() {
            return RunEnd::Cancelled;
        }
        if let Some(why) = cfg.budget.exceeded(&spent, cfg.prices.map(|p| p.cost(&spent))) {
            return RunEnd::Failed(RunFailure::OverBudget, why);
        }
        match make_room(client, host, cfg, &specs, &mut messages, &mut fill, cancel).await {
            Ok(summary) => spent.add(&summary),
            Err(end) => return end,
        }
        let req = Request { system: &cfg.system, messages: &messages, tools: &specs, tool_choice: ToolChoice::Auto };
        let mut turn = match client.complete(&req, &mut HostListener(host), cancel).await {
            Ok(t) => t,
            Err(e) => match e.failure() {
                Some(failure) => return RunEnd::Failed(failure, e.to_string()),
                None => return RunEnd::Cancelled,
            },
        };
        spent.add(&turn.usage);
        fill.last_prompt = turn.usage.prompt();
        host.usage(&turn.usage).await;
        if client.config().dialect == Dialect::UiTars && turn.calls.is_empty() {
            match uitars_calls(&mut turn, step) {
                Ok(None) => {}
                Ok(Some(answer)) => {
                    host.assistant(&turn.text, &[]).await;
                    return RunEnd::Completed(answer);
                }
                // Not an action it can do: it is told, and answers again.
                Err(why) => {
                    host.assistant(&turn.text, &[]).await;
                    messages.push(turn.into_message());
                    messages
                        .push(Message::user(format!("Your action could not be carried out: {why}. Answer with one action in the format of the list above.")));
                    continue;
                }
            }
        }
        if let Some((failure, why)) = ended(&turn) {
            // Its calls are not carried out: the run ends here, with what the model said.
            host.assistant(&turn.text, &[]).await;
            return RunEnd::Failed(failure, why);
        }
        host.assistant(&turn.text, &turn.calls).await;
        let calls = turn.calls.clone();
        let cut = turn.stop == StopReason::MaxTokens;
        so_far.push_str(&turn.text);
        messages.push(turn.into_message());
        if calls.is_empty() {
            if cut && continued < MAX_CONTINUATIONS {
                continued += 1;
                messages.push(Message::user(CONTINUE));
                continue;
            }
            return RunEnd::Completed(so_far);
        }
        continued = 0;
        so_far.clear();
        let results = carry_out(client, host, &calls, cut, &cfg.mcp_tools, cancel).await;
        messages.push(Message { role: Role::User, blocks: results });
        fill.since_summary = fill.since_summary.saturating_add(1);
    }
    if cancel.is_cancelled() {
        return RunEnd::Cancelled;
    }
    RunEnd::Failed(RunFailure::StepLimit, format!("the bot reached its limit of {} steps without finishing", cfg.max_steps))
}

/// The context window the run keeps to. Ollama may run the model with a smaller window than it
/// is set to (and drops what does not fit without saying so): then the one it really has (the
/// person is told), and a window too small for one step ends the run saying how to raise it.
async fn window_for(client: &ModelClient, host: &dyn Host, cfg: &RunConfig, specs: &[ToolSpec], task: &str, cancel: &CancellationToken) -> Result<u64, RunEnd> {
    let mut window = client.config().context_window;
    if let Some(served) = client.served_context(cancel).await {
        let need = step_tokens(cfg, specs, task, client.config().max_tokens);
        if need > served.context {
            return Err(RunEnd::Failed(RunFailure::ContextTooSmall, crate::ollama::too_small(&client.config().model, &served, need)));
        }
        if served.context < window {
            host.note(&crate::ollama::smaller(&client.config().model, &served, window)).await;
            window = served.context;
        }
    }
    Ok(window)
}

/// How full the context window is, as the run keeps it.
struct Fill {
    /// The first message of this run's own work (what came before is the chat's history).
    work: usize,
    /// The last call's prompt filled the window past this (tokens): collapse now.
    nearly_full: u64,
    most_images: usize,
    /// The last call's prompt (tokens).
    last_prompt: u64,
    /// Steps since the last summary (or attempt): summaries come at most every `SUMMARY_GAP` steps.
    since_summary: usize,
}

impl Fill {
    fn new(window: u64, work: usize) -> Fill {
        Fill { work, nearly_full: window / 4 * 3, most_images: crate::conversation::images_for_window(window), last_prompt: 0, since_summary: usize::MAX }
    }
}

/// Makes room before a model call: when the last prompt nearly filled the window, a summary of
/// the earlier steps (what it cost is returned), or a line per call when one came just before or
/// it failed; otherwise the context policy's own trimming. Only a cancel ends the run here.
async fn make_room(
    client: &ModelClient,
    host: &dyn Host,
    cfg: &RunConfig,
    specs: &[ToolSpec],
    messages: &mut Vec<Message>,
    fill: &mut Fill,
    cancel: &CancellationToken,
) -> Result<botdesk_core::Usage, RunEnd> {
    let work = fill.work;
    let mut cost = botdesk_core::Usage::default();
    if fill.last_prompt >= fill.nearly_full && fill.since_summary < SUMMARY_GAP {
        // Still nearly full soon after a summary: a line per call until the next one is due.
        collapse_steps_to(messages, work, 0, STEPS_KEPT_WHEN_FULL);
    } else if fill.last_prompt >= fill.nearly_full {
        match summarize(client, host, cfg, specs, messages, work, cancel).await {
            Ok(Some((first_kept, summary, usage))) => {
                cost = usage;
                compact_to(messages, work, first_kept, &summary);
                fill.since_summary = 0;
            }
            Ok(None) => {}
            Err(ModelError::Cancelled) => return Err(RunEnd::Cancelled),
            // No summary (the call failed, or the model gave no text): a line per call instead.
            Err(e) => {
                tracing::warn!("the model's summary of the earlier steps failed ({e}); they collapse to a line per call");
                collapse_steps_to(messages, work, 0, STEPS_KEPT_WHEN_FULL);
                fill.since_summary = 0;
            }
        }
    } else if client.config().context == ContextPolicy::Botdesk {
        keep_context(messages, work, fill.most_images);
    }
    prune_images_as(messages, client.config().context, fill.most_images);
    Ok(cost)
}

/// UI-TARS writes its actions as text: they become the turn's calls (`Ok(None)`), or it says it
/// finished (`Ok(Some(answer))`), or the text is not an action it can do (`Err(why)`).
fn uitars_calls(turn: &mut Turn, step: u32) -> Result<Option<String>, String> {
    match crate::uitars::actions(&turn.text) {
        None => Ok(None),
        Some(Ok(crate::uitars::Actions::Finished(answer))) => Ok(Some(answer)),
        Some(Ok(crate::uitars::Actions::Calls(calls))) => {
            turn.calls =
                calls.into_iter().enumerate().map(|(i, (name, args))| ToolCall::from_text(format!("act_{step}_{i}"), name, args.to_string())).collect();
            Ok(None)
        }
        Some(Err(why)) => Err(why),
    }
}

/// Carries out a turn's calls in order (`cut`: the output limit cut the turn off; `mcp_tools`:
/// the bot's MCP tools, besides ours) and returns their results. Every call gets an answer, so
/// the conversation stays well formed.
async fn carry_out(client: &ModelClient, host: &dyn Host, calls: &[ToolCall], cut: bool, mcp_tools: &[ToolSpec], cancel: &CancellationToken) -> Vec<Block> {
    let mut results = vec![];
    for call in calls {
        if cancel.is_cancelled() {
            results.push(Block::ToolResult(ToolResult::error(&call.id, "the run was stopped before this call")));
            continue;
        }
        let out = match tools::parse_among(call, mcp_tools) {
            Ok(tool) => host.execute(&call.id, tool, cancel).await,
            // Only the call being written when the limit hit is cut (its JSON is unfinished).
            Err(_) if cut && serde_json::from_str::<serde_json::Value>(&call.raw).is_err() => ToolOutput::error(cut_call(client.config().max_tokens)),
            Err(why) => ToolOutput::error(why),
        };
        let mut result = if out.is_error { ToolResult::error(&call.id, out.text) } else { ToolResult::ok(&call.id, out.text) };
        (result.image, result.page_url) = (out.image, out.page_url);
        host.tool_result(call, &result).await;
        results.push(Block::ToolResult(result));
    }
    results
}

/// Passes what the model client reports on to the run's host.
struct HostListener<'a>(&'a dyn Host);

impl Listener for HostListener<'_> {
    fn text(&mut self, t: &str) {
        self.0.text_delta(t)
    }
    fn restart(&mut self, why: &str) {
        self.0.restart(why)
    }
    fn waiting(&mut self, wait: std::time::Duration, why: &str) {
        self.0.waiting(wait, why)
    }
}

/// A reply that ends the run as failed, and the sentence for the person: the model refused, the
/// context window is full, a content filter stopped it, or it ended unfinished for another reason
/// than the output limit (which is continued instead).
fn ended(turn: &Turn) -> Option<(RunFailure, String)> {
    let said = match turn.text.trim() {
        "" => String::new(),
        t => format!(" It said: {:?}.", t.chars().take(300).collect::<String>()),
    };
    Some(match turn.stop {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::MaxTokens => return None,
        StopReason::Refusal => (
            RunFailure::ModelRefused,
            format!("the model declined to go on with this task.{said} Rephrase the task, or do this part yourself with Take control"),
        ),
        StopReason::ContextFull => (
            RunFailure::ContextFull,
            "the conversation filled the model's context window before it could summarize. Send the task again (a new run starts with a short history), or set a smaller window so it summarizes earlier: `botdesk model limits ID --context N`".into(),
        ),
        StopReason::ContentFilter => (
            RunFailure::ContentFiltered,
            format!("the provider's content filter stopped the model's reply.{said} Rephrase the task, or use another model"),
        ),
        StopReason::Incomplete => (
            RunFailure::ModelIncomplete,
            format!(
                "the model's reply ended unfinished ({}).{said} Send the task again; if it keeps happening, the provider's status page may say why",
                turn.detail.as_deref().unwrap_or("no reason given")
            ),
        ),
    })
}

/// About how many tokens one step needs: the instructions and tools, the task, a screenshot and
/// room for a reply (a token is about 4 bytes of text; a 1280x800 screenshot about 1,400 tokens).
fn step_tokens(cfg: &RunConfig, specs: &[crate::tools::ToolSpec], task: &str, max_tokens: u32) -> u64 {
    let tools: usize = specs.iter().map(|t| t.name().len() + t.description.len() + t.schema.to_string().len()).sum();
    ((cfg.system.len() + tools + task.len()) / 4) as u64 + 1_400 + u64::from(max_tokens).min(1_024)
}

/// Steps at least between two of the model's summaries: a window that stays nearly full costs a
/// summary call every few steps, not at each.
pub const SUMMARY_GAP: usize = 3;

/// What the model is asked when its context window is nearly full.
pub const SUMMARIZE: &str = "Your context window is nearly full, so the earlier steps of this task will now be replaced by a summary that you write. \
Write it now, without calling any tool: the task, what you have done and found (file names, paths, URLs, commands and results that matter), \
what is left to do, and anything you must not forget. At most 300 words.";

/// Near the context window: the model's own summary of the run's work so far, to take the place
/// of all but its newest [`STEPS_KEPT_WHEN_FULL`] steps (where they begin, the summary, what the
/// call cost). None when there is not more than that to compact. The request repeats the last
/// one with the question at its end, so the provider's cache serves all but the question.
async fn summarize(
    client: &ModelClient,
    host: &dyn Host,
    cfg: &RunConfig,
    specs: &[crate::tools::ToolSpec],
    messages: &[Message],
    work: usize,
    cancel: &CancellationToken,
) -> Result<Option<(usize, String, botdesk_core::Usage)>, ModelError> {
    let Some(first_kept) = compactable(messages, work, STEPS_KEPT_WHEN_FULL) else { return Ok(None) };
    let most_images = crate::conversation::images_for_window(client.config().context_window);
    let mut ask = messages.to_vec();
    prune_images_as(&mut ask, client.config().context, most_images);
    tell(&mut ask, SUMMARIZE.into());
    // Tools are still declared (the prompt stays what the cache holds) but may not be called.
    let req = Request { system: &cfg.system, messages: &ask, tools: specs, tool_choice: ToolChoice::None };
    let turn = client.complete(&req, &mut Quiet, cancel).await?;
    host.usage(&turn.usage).await;
    let summary = summary_of(&turn).map_err(ModelError::Protocol)?;
    Ok(Some((first_kept, summary, turn.usage)))
}

/// Hears nothing: a summary is not streamed to the person.
struct Quiet;
impl Listener for Quiet {}

/// The shortest summary taken: anything shorter says too little to replace the steps.
pub const MIN_SUMMARY_CHARS: usize = 80;

/// The model's answer to the request for a summary, or why it cannot stand for the steps: it
/// called a tool (it meant to go on working, not to sum up), was cut off, or says too little.
fn summary_of(turn: &Turn) -> Result<String, String> {
    let text = turn.text.trim();
    if !turn.calls.is_empty() {
        return Err(format!("the model answered the request for a summary with a tool call ({}), not a summary", turn.calls[0].name));
    }
    if turn.stop != StopReason::EndTurn {
        return Err(format!("the model's summary did not end normally ({:?})", turn.stop));
    }
    if text.chars().count() < MIN_SUMMARY_CHARS {
        return Err(format!("the model's summary says too little to replace the steps ({:?})", text));
    }
    Ok(text.to_string())
}

/// Adds `text` from the person to the conversation: to the last message when that is theirs
/// (the task, or the results of the last step), else as a message of its own.
fn tell(messages: &mut Vec<Message>, text: String) {
    match messages.last_mut() {
        Some(m) if m.role == Role::User => m.blocks.push(Block::Text(text)),
        _ => messages.push(Message::user(text)),
    }
}

/// What the system prompt says about a bot and its computer.
pub struct Setting<'a> {
    pub bot: &'a str,
    /// The person's instructions for this bot.
    pub instructions: &'a str,
    /// Its folder, relative to the computer's home.
    pub folder: &'a str,
    /// On a Team computer (shared/ and other bots' folders beside its own).
    pub shared: bool,
    /// Today, `YYYY-MM-DD`.
    pub today: &'a str,
    pub coords: botdesk_core::action::CoordSpace,
    /// How the model works the screen.
    pub dialect: crate::client::Dialect,
}

/// The system prompt of a bot: who and where it is, how its screen and coordinates work, what
/// the computer has, and how to work well there. Stable across a bot's runs on one day (the
/// provider caches it).
pub fn system_prompt(s: &Setting<'_>) -> String {
    use botdesk_core::action::{CoordSpace, SCREEN};
    let coords = match s.coords {
        CoordSpace::Pixels => {
            format!("Coordinates are pixels of the screenshot: x from 0 to {} (left to right), y from 0 to {} (top to bottom).", SCREEN.0 - 1, SCREEN.1 - 1)
        }
        other => other.describe(),
    };
    let shared = if s.shared { " shared/ is shared with the other bots of this computer; bots/ holds every bot's folder (leave theirs alone)." } else { "" };
    let mut p = format!(
        "You are {bot}, a bot with your own Linux computer (Debian): a {w}x{h} desktop with Chromium, a shell and a workspace. Today is {today}.\n\
         Your folder is {folder}; relative paths are resolved there.{shared} Files outside the home (/home/botdesk), such as in /tmp, are lost when the computer restarts.\n\
         You are not root and cannot install system packages. Python 3, git, curl, jq, xdotool and ImageMagick are installed; for Python packages use uv: `uv venv`, then `uv pip install PACKAGE` (the system Python is not writable), or `uvx TOOL`. Graphical programs you start from the shell open on your own screen.\n\
         Tools: {screen} ({coords}); on web pages prefer browser_navigate, browser_snapshot and browser_act, which work by element refs and are faster and surer than clicking pixels; shell runs commands; read_file, write_file (append: true to write a long file in parts) and list_files work on your files.\n\
         Work in small verified steps: observe, act, then check the result before going on. If something did not work, look again instead of repeating it.\n\
         On a long task keep a TODO.md in your folder with what is done and what is next, and update it as you go.\n\
         If you need the person (a login, a captcha, a payment, a decision), call request_takeover with what they should do, and wait.\n\
         When the task is done, answer with a short summary and no tool call.",
        bot = s.bot,
        screen = match s.dialect {
            Dialect::Plain | Dialect::UiTars => "computer_observe looks at your screen; computer_act clicks and types",
            Dialect::Claude(ClaudeTool::V20251124) => "computer takes screenshots, clicks and types, and zooms into a region to read small text",
            Dialect::Claude(_) | Dialect::OpenAiComputer(_) => "computer takes screenshots, clicks and types",
        },
        w = SCREEN.0,
        h = SCREEN.1,
        today = s.today,
        folder = s.folder,
    );
    if s.dialect == Dialect::UiTars {
        p.push_str(crate::uitars::ACTION_SPACE);
    }
    if !s.instructions.trim().is_empty() {
        p.push_str("\n\nInstructions from the person:\n");
        p.push_str(s.instructions.trim());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use botdesk_core::action::CoordSpace;

    #[test]
    fn the_persons_word_joins_their_last_message_or_comes_alone() {
        let mut m = vec![Message::user("task")];
        tell(&mut m, "note".into());
        assert_eq!(m, vec![Message { role: Role::User, blocks: vec![Block::Text("task".into()), Block::Text("note".into())] }]);
        m.push(Message { role: Role::Assistant, blocks: vec![Block::Text("ok".into())] });
        tell(&mut m, "again".into());
        assert_eq!((m.len(), m[2].clone()), (3, Message::user("again")));
    }

    #[test]
    fn the_system_prompt_says_where_and_how() {
        let mut setting =
            Setting { bot: "ada", instructions: "", folder: "bots/b1", shared: true, today: "2026-12-01", coords: CoordSpace::Pixels, dialect: Dialect::Plain };
        let p = system_prompt(&setting);
        for want in [
            "You are ada",
            "Today is 2026-12-01",
            "1280x800",
            "x from 0 to 1279",
            "Your folder is bots/b1",
            "shared/ is shared",
            "not root",
            "uv venv",
            "prefer browser_navigate",
            "TODO.md",
            "request_takeover",
            "append: true",
        ] {
            assert!(p.contains(want), "{want:?} missing from:\n{p}");
        }
        assert!(!p.contains("Instructions from the person"));
        setting.coords = CoordSpace::Thousandths;
        setting.shared = false;
        setting.instructions = "be brief";
        let p = system_prompt(&setting);
        assert!(p.contains("from 0 to 1000 on each axis") && !p.contains("shared/") && p.ends_with("Instructions from the person:\nbe brief"), "{p}");
    }
}

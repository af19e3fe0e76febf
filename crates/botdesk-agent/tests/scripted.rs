//! The real clients and run loop against the scripted model server, in both wire formats.
//! The host here is a small in-memory one: the engine's real host is tested in botdesk-engine.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use botdesk_agent::scripted::{Reply, ScriptedServer, Seen, Step};
use botdesk_agent::*;
use botdesk_core::RunFailure;
use bytes::Bytes;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct MemHost {
    executed: Mutex<Vec<Tool>>,
    deltas: Mutex<String>,
    assistant: Mutex<Vec<String>>,
    results: Mutex<Vec<(String, ToolResult)>>,
    usage: Mutex<Vec<botdesk_core::Usage>>,
    restarts: Mutex<Vec<String>>,
    notes: Mutex<Vec<String>>,
    waits: Mutex<Vec<(Duration, String)>>,
    /// Screenshots name their frame (one screen that never changes).
    frames: bool,
}

#[async_trait]
impl Host for MemHost {
    async fn execute(&self, _id: &str, tool: Tool, cancel: &CancellationToken) -> ToolOutput {
        self.executed.lock().unwrap().push(tool.clone());
        match tool {
            Tool::Observe if self.frames => ToolOutput { image: Some(Image::screenshot(shot(), "F")), ..ToolOutput::ok("1280x800") },
            Tool::Observe => ToolOutput { image: Some(Image::png(shot())), ..ToolOutput::ok("1280x800") },
            Tool::Zoom { .. } => ToolOutput { image: Some(Image::png(botdesk_agent::scripted::png(32, 32, 7))), ..ToolOutput::ok("zoomed") },
            Tool::Shell { command, .. } if command == "sleep" => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(30)) => ToolOutput::ok("slept"),
                    _ = cancel.cancelled() => ToolOutput::error("exit code 130 (command aborted)"),
                }
            }
            Tool::Shell { command, .. } if command == "big" => ToolOutput::ok("x".repeat(20_000)),
            Tool::Act { .. } | Tool::SafetyChecked { .. } => ToolOutput { image: Some(Image::png(shot())), ..ToolOutput::ok("done") },
            Tool::Shell { command, .. } => ToolOutput::ok(format!("exit 0\n{command}")),
            other => ToolOutput::ok(format!("{other:?}")),
        }
    }
    fn text_delta(&self, t: &str) {
        self.deltas.lock().unwrap().push_str(t);
    }
    async fn assistant(&self, text: &str, _calls: &[ToolCall]) {
        self.assistant.lock().unwrap().push(text.into());
    }
    async fn tool_result(&self, call: &ToolCall, r: &ToolResult) {
        self.results.lock().unwrap().push((call.name.clone(), r.clone()));
    }
    async fn usage(&self, u: &botdesk_core::Usage) {
        self.usage.lock().unwrap().push(*u);
    }
    async fn note(&self, text: &str) {
        self.notes.lock().unwrap().push(text.into());
    }
    fn restart(&self, why: &str) {
        self.deltas.lock().unwrap().clear();
        self.restarts.lock().unwrap().push(why.to_string());
    }
    fn waiting(&self, wait: Duration, why: &str) {
        self.waits.lock().unwrap().push((wait, why.to_string()));
    }
}

/// Every model call's usage, as each wire format reports it (Anthropic at the start and the end
/// of the message; OpenAI in a last chunk it sends only when asked), reaches the host.
#[tokio::test]
async fn each_model_calls_usage_reaches_the_host_in_both_formats() {
    both(async |wire| {
        let server = ScriptedServer::start(vec![
            Step::check(
                move |s| match wire {
                    Wire::OpenAi if s.body.pointer("/stream_options/include_usage") != Some(&json!(true)) => Err("usage not asked for".into()),
                    Wire::OpenAi if s.body["parallel_tool_calls"] != json!(false) => Err("parallel tool calls not turned off".into()),
                    _ => Ok(()),
                },
                Reply::call("shell", json!({"command": "echo hi"})),
            ),
            Step::reply(Reply::text("Done, 12 chars.")),
        ])
        .await;
        let host = MemHost::default();
        let end = run(&client(&server, wire), &host, &cfg(), vec![], "count", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("Done, 12 chars.".into()), "{wire:?}");
        assert_eq!(server.failures(), Vec::<String>::new());
        let usage = host.usage.lock().unwrap().clone();
        assert_eq!(usage.len(), 2, "{wire:?}");
        // The scripted server counts a token per 4 bytes of the request, and of the reply plus one;
        // what the second request repeats of the first comes from its cache.
        assert!(usage[0].prompt() > 100 && usage[1].prompt() > usage[0].prompt(), "{wire:?}: {usage:?}");
        assert_eq!(usage[0].output, ("shell".len() + r#"{"command":"echo hi"}"#.len()) as u64 / 4 + 1, "{wire:?}");
        assert_eq!(usage[1].output, "Done, 12 chars.".len() as u64 / 4 + 1, "{wire:?}");
        assert_eq!(usage[0].cache_read, 0, "{wire:?}");
        assert!(usage[1].cache_read > 0, "{wire:?}: {usage:?}");
        assert_eq!(usage[0].cache_write > 0, wire == Wire::Anthropic, "{wire:?}: {usage:?}");
    })
    .await;
}

/// Anthropic requests carry cache breakpoints on the system prompt, the last block and just
/// before where pruning screenshots changes the prompt (at most 4); in both formats each request
/// starts with the whole previous one (byte for byte, breakpoints aside), except where
/// screenshots are pruned, which happens in steps (one past the most, down to one); after the
/// third step at least 70 % of the prompt comes from the cache.
#[tokio::test]
async fn each_request_repeats_the_previous_one_so_the_cache_serves_it() {
    both(async |wire| {
        // (A model with a small window keeps fewer screenshots.)
        let most = botdesk_agent::conversation::images_for_window(client(&ScriptedServer::start(vec![]).await, wire).config().context_window);
        let looks = most + 3;
        let mut steps: Vec<Step> = (0..looks).map(|_| Step::reply(Reply::call("computer_observe", json!({})))).collect();
        steps.push(Step::reply(Reply::text("Seen enough.")));
        let server = ScriptedServer::start(steps).await;
        let host = MemHost::default();
        let end = run(&client(&server, wire), &host, &cfg(), vec![], "look many times", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("Seen enough.".into()), "{wire:?}");
        let seen = server.requests();
        assert_eq!(seen.len(), looks + 1);
        if wire == Wire::Anthropic {
            let point = json!({"type": "ephemeral"});
            for s in &seen {
                let b = &s.body;
                assert_eq!(b["system"][0]["cache_control"], point);
                let last = b["messages"].as_array().unwrap().last().unwrap()["content"].as_array().unwrap().last().unwrap().clone();
                assert_eq!(last["cache_control"], point);
                assert!(b.to_string().matches("cache_control").count() <= 4, "at most 4 are allowed");
            }
        }
        let images: Vec<usize> = seen.iter().map(|s| s.images).collect();
        let want: Vec<usize> = (0..=looks).map(|i| if i <= most { i } else { i - most }).collect();
        assert_eq!(images, want, "{wire:?}");
        for (i, pair) in seen.windows(2).enumerate() {
            let kept = pair[1].prompt().starts_with(&pair[0].prompt());
            assert_eq!(kept, images[i + 1] != 1 || images[i] == 0, "{wire:?}: request {} after {}", i + 2, i + 1);
        }
        let usage = host.usage.lock().unwrap().clone();
        let later = usage[3..].iter().fold(botdesk_core::Usage::default(), |mut t, u| {
            t.add(u);
            t
        });
        assert!(later.cache_read * 10 >= later.prompt() * 7, "{wire:?}: {later:?}");
    })
    .await;
}

const KEY: &str = "sk-test-key-0123456789";

/// A small real screenshot (the server decodes every image).
fn shot() -> Bytes {
    static SHOT: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    SHOT.get_or_init(|| botdesk_agent::scripted::png(64, 40, 1)).clone()
}

fn client(server: &ScriptedServer, wire: Wire) -> ModelClient {
    let kind = if wire == Wire::Anthropic { "anthropic" } else { "openai-compatible" };
    let mut cfg = ModelConfig::new(kind, "scripted-1", Some(&server.base_url(wire)), Some(KEY.into())).unwrap();
    cfg.retry = Retry { attempts: 3, base: Duration::from_millis(50), max_wait: Duration::from_secs(5) };
    ModelClient::new(cfg).unwrap()
}

/// [`cfg`] for a model of this dialect pointing in `coords`.
fn cfg_for(dialect: Dialect, coords: botdesk_core::action::CoordSpace) -> RunConfig {
    let setting = botdesk_agent::run::Setting { bot: "tester", instructions: "", folder: "bots/b1", shared: false, today: "2026-12-01", coords, dialect };
    RunConfig { system: system_prompt(&setting), coords, ..cfg() }
}

fn cfg() -> RunConfig {
    let setting = botdesk_agent::run::Setting {
        bot: "tester",
        instructions: "be brief",
        folder: "bots/b1",
        shared: true,
        today: "2026-12-01",
        coords: Default::default(),
        dialect: botdesk_agent::Dialect::Plain,
    };
    RunConfig {
        system: system_prompt(&setting),
        max_steps: 20,
        budget: Default::default(),
        prices: None,
        coords: Default::default(),
        mcp_tools: vec![],
        login_sites: vec![],
    }
}

fn expect_error(contains: &'static str) -> impl Fn(&Seen) -> Result<(), String> + Send + Sync {
    move |s: &Seen| match s.results.first() {
        Some(r) if r.is_error && r.text.contains(contains) => Ok(()),
        other => Err(format!("expected an error result containing {contains:?}, got {other:?}")),
    }
}

async fn both(f: impl AsyncFn(Wire)) {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        f(wire).await;
    }
}

#[tokio::test]
async fn a_run_streams_calls_tools_and_places_screenshots_where_each_format_wants_them() {
    both(async |wire| {
        let server = ScriptedServer::start(vec![
            Step::check(
                move |s| {
                    let auth = if wire == Wire::Anthropic { s.headers.get("x-api-key").cloned() } else { s.headers.get("authorization").cloned() };
                    let want = if wire == Wire::Anthropic { KEY.to_string() } else { format!("Bearer {KEY}") };
                    if auth.as_deref() != Some(want.as_str()) {
                        return Err(format!("bad auth header {auth:?}"));
                    }
                    if !s.system().contains("You are tester") || !s.system().contains("be brief") {
                        return Err("system prompt missing".into());
                    }
                    let tools = s.body["tools"].as_array().map(|t| t.len());
                    (tools == Some(13)).then_some(()).ok_or(format!("expected 13 tools, got {tools:?}"))
                },
                Reply::Turn { text: "Let me look at the screen first.".into(), calls: vec![("computer_observe".into(), "{}".into())] },
            ),
            Step::check(
                move |s| {
                    let r = s.results.first().ok_or("no tool result")?;
                    if !r.has_image || r.text != "1280x800" || r.is_error {
                        return Err(format!("bad observe result {r:?}"));
                    }
                    // Where the image sits: inside the tool result (Anthropic) or in a following user message.
                    let msgs = s.body["messages"].as_array().unwrap();
                    let last = msgs.last().unwrap();
                    let ok = match wire {
                        Wire::Anthropic => last["content"][0]["type"] == "tool_result" && last["content"][0]["content"][1]["type"] == "image",
                        Wire::OpenAi => msgs[msgs.len() - 2]["role"] == "tool" && last["role"] == "user" && last["content"][1]["type"] == "image_url",
                        Wire::Responses => unreachable!("tested on its own"),
                    };
                    ok.then_some(()).ok_or(format!("screenshot misplaced: {last}"))
                },
                Reply::Turn {
                    text: String::new(),
                    calls: vec![("shell".into(), r#"{"command":"echo hi"}"#.into()), ("write_file".into(), r#"{"path":"a.txt","content":"é"}"#.into())],
                },
            ),
            Step::check(
                |s| {
                    let texts: Vec<&str> = s.results.iter().map(|r| r.text.as_str()).collect();
                    (s.results.len() == 2 && texts[0].contains("echo hi") && !s.results[1].is_error).then_some(()).ok_or(format!("bad results {texts:?}"))
                },
                Reply::text("All done: wrote a.txt."),
            ),
        ])
        .await;
        let host = MemHost::default();
        let end =
            run(&client(&server, wire), &host, &cfg(), vec![Message::user("earlier"), Message::assistant("ok")], "do the thing", &CancellationToken::new())
                .await;
        assert_eq!(end, RunEnd::Completed("All done: wrote a.txt.".into()), "{wire:?}");
        assert_eq!(server.failures(), Vec::<String>::new(), "{wire:?}");
        assert!(host.deltas.lock().unwrap().contains("Let me look at the screen first.All done: wrote a.txt."));
        assert_eq!(host.executed.lock().unwrap().len(), 3);
        assert_eq!(host.executed.lock().unwrap()[2], Tool::WriteFile { path: "a.txt".into(), content: "é".into(), append: false });
    })
    .await;
}

#[tokio::test]
async fn malformed_tool_calls_are_answered_with_errors_and_the_run_goes_on() {
    both(async |wire| {
        let batch: Vec<_> = (0..25).map(|i| json!({"type": "move", "x": i, "y": i})).collect();
        let server = ScriptedServer::start(vec![
            Step::reply(Reply::raw_call("shell", r#"{"command": "ls""#)),
            Step::check(expect_error("not valid JSON"), Reply::call("summon_demon", json!({}))),
            Step::check(expect_error("no tool named"), Reply::call("shell", json!({"command": ["ls"]}))),
            Step::check(expect_error("invalid type"), Reply::call("computer_act", json!({ "actions": batch }))),
            Step::check(expect_error("at most 24 actions"), Reply::call("shell", json!({"command": "big"}))),
            Step::check(
                |s| {
                    let t = &s.results[0].text;
                    (t.chars().count() < 12_100 && t.contains("[cut: showing the first 12000 of 20000 characters]"))
                        .then_some(())
                        .ok_or(format!("not cut: {} chars", t.len()))
                },
                Reply::text("done"),
            ),
        ])
        .await;
        let host = MemHost::default();
        let end = run(&client(&server, wire), &host, &cfg(), vec![], "t", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("done".into()));
        assert_eq!(server.failures(), Vec::<String>::new(), "{wire:?}");
        // Only the valid call reached the host.
        assert_eq!(host.executed.lock().unwrap().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn retries_honour_retry_after_and_give_up_with_a_clear_error() {
    both(async |wire| {
        let server = ScriptedServer::start(vec![
            Step::reply(Reply::Status { status: 429, retry_after: Some(1), body: r#"{"error":{"message":"slow down"}}"#.into() }),
            Step::reply(Reply::Status { status: 503, retry_after: None, body: "".into() }),
            Step::reply(Reply::text("finally")),
        ])
        .await;
        let end = run(&client(&server, wire), &MemHost::default(), &cfg(), vec![], "t", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("finally".into()));
        let seen = server.requests();
        assert_eq!(seen.len(), 3);
        let waited = seen[1].at - seen[0].at;
        assert!(waited >= Duration::from_millis(950), "Retry-After: 1 was not honoured ({waited:?})");

        let server = ScriptedServer::start(
            (0..3)
                .map(|_| {
                    Step::reply(Reply::Status {
                        status: 529,
                        retry_after: None,
                        body: r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
                    })
                })
                .collect(),
        )
        .await;
        let end = run(&client(&server, wire), &MemHost::default(), &cfg(), vec![], "t", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Failed(RunFailure::ModelUnavailable, "the model provider is overloaded or failing (529) after 3 attempts: Overloaded".into()));
    })
    .await;
}

#[tokio::test]
async fn a_bad_key_an_unknown_model_and_a_model_without_images_are_named() {
    both(async |wire| {
        let cases = [
            (401, r#"{"error":{"message":"invalid api key"}}"#, "refused the API key (401)", RunFailure::ModelBadKey),
            (404, r#"{"error":{"message":"model scripted-1 not found"}}"#, "does not know the model \"scripted-1\"", RunFailure::ModelUnknown),
            (400, r#"{"error":{"message":"This model does not support image input."}}"#, "cannot read images", RunFailure::ModelNoImages),
        ];
        for (status, body, want, code) in cases {
            let server = ScriptedServer::start(vec![Step::reply(Reply::Status { status, retry_after: None, body: body.into() })]).await;
            match run(&client(&server, wire), &MemHost::default(), &cfg(), vec![], "t", &CancellationToken::new()).await {
                RunEnd::Failed(failure, m) => {
                    assert_eq!(failure, code, "{m}");
                    assert!(m.contains(want), "{m}");
                    assert!(!m.contains(KEY));
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(server.requests().len(), 1, "a {status} is not retried");
        }
    })
    .await;
}

#[tokio::test]
async fn cancel_ends_a_run_promptly_and_the_step_limit_holds() {
    both(async |wire| {
        let server = ScriptedServer::start(vec![Step::reply(Reply::call("shell", json!({"command": "sleep"})))]).await;
        let host = MemHost::default();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.cancel();
        });
        // A hang guard only (the command never ends by itself); speed is the bench's to measure.
        let end = tokio::time::timeout(Duration::from_secs(60), run(&client(&server, wire), &host, &cfg(), vec![], "t", &cancel))
            .await
            .expect("cancel ended the run");
        assert_eq!(end, RunEnd::Cancelled);
        assert!(host.results.lock().unwrap()[0].1.text.contains("130"));

        let server = ScriptedServer::start((0..5).map(|_| Step::reply(Reply::call("list_files", json!({})))).collect()).await;
        let end = run(&client(&server, wire), &MemHost::default(), &RunConfig { max_steps: 3, ..cfg() }, vec![], "t", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Failed(RunFailure::StepLimit, "the bot reached its limit of 3 steps without finishing".into()));
        assert_eq!(server.requests().len(), 3);
    })
    .await;
}

/// A reply cut off at the output limit: a call whose arguments were cut is answered with the
/// limit and how to go on (nothing is done); cut text is continued and the run's answer is the
/// whole of it.
#[tokio::test]
async fn replies_cut_at_the_output_limit_are_answered_or_continued() {
    both(async |wire| {
        let server = ScriptedServer::start(vec![
            Step::reply(Reply::Cut {
                text: String::new(),
                calls: vec![("write_file".into(), r##"{"path":"big.md","content":"# Chapter 1\nIt was a dark and st"##.into())],
            }),
            Step::check(
                expect_error(if wire == Wire::Anthropic { "hit the output limit (16384 tokens)" } else { "hit the output limit (4096 tokens)" }),
                Reply::Cut { text: "The report begins here and".into(), calls: vec![] },
            ),
            Step::check(
                |s| {
                    let last = s.body["messages"].as_array().and_then(|m| m.last()).map(|m| m.to_string()).unwrap_or_default();
                    last.contains("Continue exactly where it stopped").then_some(()).ok_or(format!("not asked to continue: {last}"))
                },
                Reply::text(" ends here."),
            ),
        ])
        .await;
        let host = MemHost::default();
        let end = run(&client(&server, wire), &host, &cfg(), vec![], "write a long report", &CancellationToken::new()).await;
        assert_eq!(server.failures(), Vec::<String>::new(), "{wire:?}");
        assert_eq!(end, RunEnd::Completed("The report begins here and ends here.".into()), "{wire:?}");
        assert!(host.executed.lock().unwrap().is_empty(), "the cut call was carried out");
        let (name, result) = host.results.lock().unwrap()[0].clone();
        assert_eq!(name, "write_file");
        assert!(result.is_error && result.text.contains("append: true"), "{result:?}");
    })
    .await;
}

/// Near the model's context window (75 %), the model writes a summary of the run's work so far,
/// which takes the place of all but the last two steps (and of the summary before it); when that
/// call fails, the older steps collapse to a line per call instead. Requests state the output
/// limit in each format's own field.
#[tokio::test]
async fn near_the_context_window_the_model_summarizes_older_steps() {
    both(async |wire| {
        let shell = |i: u32| Reply::call("shell", json!({"command": format!("echo {i}")}));
        let asks = |s: &Seen| s.body["messages"].to_string().contains("will now be replaced by a summary that you write");
        let summary_of = |expect: &'static [&'static str], reply: Reply| {
            Step::check(
                move |s: &Seen| {
                    let all = s.body["messages"].to_string();
                    if !asks(s) {
                        return Err("no request for a summary".into());
                    }
                    expect.iter().all(|e| all.contains(e)).then_some(()).ok_or(format!("the summary request lacks one of {expect:?}"))
                },
                reply,
            )
        };
        let has = |what: &'static [&'static str], lacks: &'static [&'static str], reply: Reply| {
            Step::check(
                move |s: &Seen| {
                    let all = s.body["messages"].to_string();
                    let missing: Vec<_> = what.iter().filter(|w| !all.contains(*w)).collect();
                    let present: Vec<_> = lacks.iter().filter(|w| all.contains(*w)).collect();
                    (missing.is_empty() && present.is_empty()).then_some(()).ok_or(format!("missing {missing:?}, present {present:?}"))
                },
                reply,
            )
        };
        let server = ScriptedServer::start(vec![
            Step::reply(shell(0)),
            Step::reply(shell(1)),
            Step::reply(shell(2)),
            // Three steps are whole and the window is past 75 %: a summary is asked for, and fails;
            // the older steps collapse to a line per call instead.
            summary_of(&["echo 0", "echo 2"], Reply::Status { status: 400, retry_after: None, body: r#"{"error":{"message":"no"}}"#.into() }),
            has(&["Earlier steps of this task, collapsed"], &[], shell(3)),
            // Soon after a summary (or an attempt) no new one is asked for: lines per call.
            Step::reply(shell(4)),
            Step::reply(shell(5)),
            summary_of(&["echo 5"], Reply::text("SUMMARY-A: I counted from 0 to 5 with echo in the shell, one number a step; 6 is left to do.")),
            // The summary replaced all but the last two steps, the collapsed lines included.
            has(&["SUMMARY-A", "echo 4", "echo 5"], &["Earlier steps of this task, collapsed", "echo 3"], shell(6)),
            has(&["SUMMARY-A", "echo 6"], &["will now be replaced by a summary"], Reply::text("Done.")),
        ])
        .await;
        let kind = if wire == Wire::Anthropic { "anthropic" } else { "openai-compatible" };
        let mut model = ModelConfig::new(kind, "scripted-1", Some(&server.base_url(wire)), Some(KEY.into())).unwrap();
        // The tools and system prompt alone are about 1,700 tokens: past 75 % from the start.
        (model.context_window, model.max_tokens) = (2_000, 500);
        let host = MemHost::default();
        let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "count to six", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("Done.".into()), "{wire:?}");
        assert_eq!(server.failures(), Vec::<String>::new(), "{wire:?}");
        let seen = server.requests();
        let asked: Vec<usize> =
            seen.iter().enumerate().filter(|(_, s)| s.body["messages"].to_string().contains("will now be replaced by a summary")).map(|(i, _)| i + 1).collect();
        assert_eq!(asked, [4, 8], "{wire:?}: a summary when first full, the next only {} steps later", botdesk_agent::run::SUMMARY_GAP);
        // Each summary call's cost is the run's too.
        assert_eq!(host.usage.lock().unwrap().len(), 9, "{wire:?}: every answered call's usage (not the refused one)");
        // (OpenAI's own API would get max_completion_tokens; a compatible server gets max_tokens.)
        assert!(seen.iter().all(|s| s.body["max_tokens"] == json!(500)), "{wire:?}");
    })
    .await;
}

fn ollama(context: u64, loaded: bool, modelfile: Option<u64>, old: bool) -> botdesk_agent::scripted::OllamaSim {
    botdesk_agent::scripted::OllamaSim { model: "scripted-1".into(), context, loaded, modelfile, old }
}

/// Ollama runs the model with a window too small for one step (read from the loaded model after
/// loading it): the run does not start, and says how to raise the window.
#[tokio::test]
async fn an_ollama_window_too_small_for_a_step_is_said_with_how_to_raise_it() {
    let server = ScriptedServer::start(vec![]).await;
    server.act_as_ollama(ollama(2048, false, None, false));
    let host = MemHost::default();
    let end = run(&client(&server, Wire::OpenAi), &host, &cfg(), vec![], "look at the screen", &CancellationToken::new()).await;
    let RunEnd::Failed(RunFailure::ContextTooSmall, why) = end else { panic!("{end:?}") };
    assert!(
        why.contains("Ollama runs scripted-1 with a context window of 2048 tokens (as it says of the loaded model)")
            && why.contains("OLLAMA_CONTEXT_LENGTH=16384")
            && why.contains("PARAMETER num_ctx"),
        "{why}"
    );
    assert_eq!(server.ollama_asked(), ["/api/version", "/api/ps", "/api/show", "/api/generate", "/api/ps"]);
    assert!(server.requests().is_empty(), "no model call");
}

/// Ollama's window (here from the Modelfile) is smaller than the one set for the model: the run
/// keeps to it (the person is told), so its steps are summarized before Ollama would drop them.
#[tokio::test]
async fn a_run_keeps_to_the_window_ollama_really_has() {
    let big = || Reply::call("shell", json!({"command": "big"}));
    let server = ScriptedServer::start(vec![
        Step::reply(big()),
        Step::reply(big()),
        Step::reply(big()),
        Step::check(
            |s: &Seen| s.body["messages"].to_string().contains("replaced by a summary").then_some(()).ok_or("no summary asked for".into()),
            Reply::text("Read three big outputs."),
        ),
        Step::reply(Reply::text("Done.")),
    ])
    .await;
    server.act_as_ollama(ollama(131_072, false, Some(8192), false));
    let mut model = ModelConfig::new("openai-compatible", "scripted-1", Some(&server.base_url(Wire::OpenAi)), None).unwrap();
    (model.context_window, model.max_tokens) = (32_768, 1_024);
    let host = MemHost::default();
    let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "read big things", &CancellationToken::new()).await;
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(server.ollama_asked(), ["/api/version", "/api/ps", "/api/show"]);
    let notes = host.notes.lock().unwrap().clone();
    assert!(notes.len() == 1 && notes[0].contains("context window of 8192 tokens, smaller than the 32768 set for this model"), "{notes:?}");
}

/// An Ollama before 0.10 (its model list does not say the window) and any other server: nothing
/// is known, nothing is said, the run goes on with the window set.
#[tokio::test]
async fn a_server_that_does_not_say_its_window_changes_nothing() {
    for old in [true, false] {
        let server = ScriptedServer::start(vec![Step::reply(Reply::text("Hi."))]).await;
        if old {
            server.act_as_ollama(ollama(2048, true, None, true));
        }
        let host = MemHost::default();
        assert_eq!(run(&client(&server, Wire::OpenAi), &host, &cfg(), vec![], "hi", &CancellationToken::new()).await, RunEnd::Completed("Hi.".into()));
        assert!(host.notes.lock().unwrap().is_empty());
        let asked = server.ollama_asked();
        assert_eq!(asked, if old { vec!["/api/version", "/api/ps", "/api/show", "/api/generate", "/api/ps"] } else { vec!["/api/version"] }, "old: {old}");
    }
}

/// A reply that breaks off mid-stream is asked for again as a whole; the host is told to forget
/// the text streamed so far.
#[tokio::test]
async fn a_reply_broken_off_mid_stream_is_asked_for_again() {
    both(async |wire| {
        let server =
            ScriptedServer::start(vec![Step::reply(Reply::Broken { text: "The answer is fo".into() }), Step::reply(Reply::text("The answer is four."))]).await;
        let host = MemHost::default();
        let end = run(&client(&server, wire), &host, &cfg(), vec![], "what is 2+2", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("The answer is four.".into()), "{wire:?}");
        assert_eq!(server.requests().len(), 2);
        let restarts = host.restarts.lock().unwrap().clone();
        assert!(restarts.len() == 1 && restarts[0].contains("broke off"), "{wire:?}: {restarts:?}");
        assert_eq!(*host.deltas.lock().unwrap(), "The answer is four.", "{wire:?}");
    })
    .await;
}

/// A Claude model trained on computer use gets its own `computer` tool (with the beta header)
/// instead of ours, and its actions become ours: a screenshot is an observe, clicks, keys and
/// drags one checked batch each, a hold_key ours; an action out of bounds is an error it can read.
#[tokio::test]
async fn claude_works_the_screen_with_its_own_computer_tool() {
    let server = ScriptedServer::start(vec![
        Step::check(
            |s| {
                let tools = s.body["tools"].as_array().cloned().unwrap_or_default();
                let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
                let native = tools
                    .iter()
                    .any(|t| t["type"] == "computer_20250124" && t["name"] == "computer" && t["display_width_px"] == 1280 && t["display_height_px"] == 800);
                let beta = s.headers.get("anthropic-beta").map(String::as_str) == Some("computer-use-2025-01-24");
                (native
                    && beta
                    && !names.contains(&"computer_act")
                    && !names.contains(&"computer_observe")
                    && names.contains(&"shell")
                    && s.system().contains("computer takes screenshots"))
                .then_some(())
                .ok_or(format!("tools {names:?}, beta {beta}"))
            },
            Reply::call("computer", json!({"action": "screenshot"})),
        ),
        Step::reply(Reply::call("computer", json!({"action": "double_click", "coordinate": [100, 200]}))),
        Step::reply(Reply::call("computer", json!({"action": "key", "text": "ctrl+shift+t"}))),
        Step::reply(Reply::call("computer", json!({"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [30, 40]}))),
        Step::reply(Reply::call("computer", json!({"action": "hold_key", "text": "shift", "duration": 1}))),
        Step::reply(Reply::call("computer", json!({"action": "left_click", "coordinate": [5000, 1]}))),
        Step::reply(Reply::call("computer", json!({"action": "wait", "duration": 101}))),
        Step::check(expect_error("duration is 0 to 100 seconds"), Reply::text("Done.")),
    ])
    .await;
    let mut model = ModelConfig::new("anthropic", "claude-sonnet-4-5", Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
    model.retry = Retry { attempts: 1, base: Duration::from_millis(10), max_wait: Duration::from_secs(1) };
    assert_eq!(model.dialect, Dialect::Claude(ClaudeTool::V20250124));
    assert_eq!(ModelConfig::new("openai", "gpt-4o", None, Some(KEY.into())).unwrap().dialect, Dialect::Plain);
    let host = MemHost::default();
    let rc = cfg_for(Dialect::Claude(ClaudeTool::V20250124), Default::default());
    let end = run(&ModelClient::new(model).unwrap(), &host, &rc, vec![], "tidy the desktop", &CancellationToken::new()).await;
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    let executed = host.executed.lock().unwrap().clone();
    let batch = |v: serde_json::Value| Tool::Act { actions: botdesk_core::action::parse_batch(&v).unwrap(), settle_ms: None };
    assert_eq!(
        executed,
        [
            Tool::Observe,
            batch(json!([{"type": "click", "x": 100, "y": 200, "button": "left"}, {"type": "click", "x": 100, "y": 200, "button": "left"}])),
            batch(json!([{"type": "key", "key": "t", "modifiers": ["ctrl", "shift"]}])),
            batch(json!([{"type": "drag", "x": 1, "y": 2, "to_x": 30, "to_y": 40}])),
            Tool::HoldKey { keys: vec!["shift".into()], ms: 1000 },
            // (The click at 5000 passes the tool's own check; the engine refuses it against the screen.)
            batch(json!([{"type": "click", "x": 5000, "y": 1, "button": "left"}])),
        ]
    );
}

/// The Claude models that have it get the newer computer tool with `zoom` turned on (and its beta
/// header); a zoom becomes a close look at the region, a malformed one an error the model reads.
#[tokio::test]
async fn claude_zooms_where_its_model_can() {
    let server = ScriptedServer::start(vec![
        Step::check(
            |s| {
                let tools = s.body["tools"].as_array().cloned().unwrap_or_default();
                let native = tools
                    .iter()
                    .any(|t| t["type"] == "computer_20251124" && t["name"] == "computer" && t["enable_zoom"] == true && t["display_width_px"] == 1280);
                let beta = s.headers.get("anthropic-beta").map(String::as_str) == Some("computer-use-2025-11-24");
                (native && beta && s.system().contains("zooms into a region")).then_some(()).ok_or(format!("tools {tools:?}, beta {beta}"))
            },
            Reply::call("computer", json!({"action": "zoom", "region": [640, 0, 1280, 400]})),
        ),
        Step::reply(Reply::call("computer", json!({"action": "zoom", "region": [10, 10]}))),
        Step::check(expect_error("zoom needs region as [left, top, right, bottom]"), Reply::text("Done.")),
    ])
    .await;
    let model = ModelConfig::new("anthropic", "claude-opus-4-5-20251101", Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
    assert_eq!(model.dialect, Dialect::Claude(ClaudeTool::V20251124));
    assert_eq!(
        ModelConfig::new("anthropic", "claude-sonnet-4-5", None, None).unwrap().dialect,
        Dialect::Claude(ClaudeTool::V20250124),
        "no zoom before these models"
    );
    let host = MemHost::default();
    let rc = cfg_for(Dialect::Claude(ClaudeTool::V20251124), Default::default());
    let end = run(&ModelClient::new(model).unwrap(), &host, &rc, vec![], "read the small print", &CancellationToken::new()).await;
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    assert_eq!(host.executed.lock().unwrap().clone(), [Tool::Zoom { region: [640, 0, 1280, 400] }]);
}

/// OpenAI's reasoning models speak the Responses API, statelessly: each request asks for the
/// encrypted reasoning and sends every earlier reasoning item back with the calls that followed
/// it; tools are flat, one call per turn; screenshots go back inside the call's output; usage,
/// the cache and a reply cut by the output limit are read as in the other formats.
#[tokio::test]
async fn gpt_reasoning_models_speak_responses_and_keep_their_reasoning() {
    let input = |s: &Seen| s.body["input"].as_array().cloned().unwrap_or_default();
    let server = ScriptedServer::start(vec![
        Step::check(
            |s: &Seen| {
                let b = &s.body;
                let tool = b["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "shell")).cloned().unwrap_or_default();
                let ok = s.wire == Wire::Responses
                    && b["store"] == false
                    && b["include"] == json!(["reasoning.encrypted_content"])
                    && b["parallel_tool_calls"] == false
                    && b["max_output_tokens"].as_u64().is_some()
                    && s.system().contains("You are tester")
                    && tool["type"] == "function"
                    && tool["parameters"]["type"] == "object"
                    && s.headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {KEY}"));
                ok.then_some(()).ok_or(format!("request: {}", serde_json::to_string(b).unwrap_or_default().chars().take(600).collect::<String>()))
            },
            Reply::call("shell", json!({"command": "echo hi"})),
        ),
        Step::check(
            move |s: &Seen| {
                let items = input(s);
                let at = items
                    .iter()
                    .position(|i| i["type"] == "reasoning" && i["id"] == "rs_1" && i["encrypted_content"] == "enc-1")
                    .ok_or("the first reasoning is not sent back")?;
                (items[at + 1]["type"] == "function_call" && items[at + 1]["call_id"] == "call_1_0")
                    .then_some(())
                    .ok_or("the reasoning is not followed by its call")?;
                let r = s.result("call_1_0").ok_or("no answer to the call")?;
                r.text.contains("echo hi").then_some(()).ok_or(format!("answer {r:?}"))
            },
            Reply::call("computer_observe", json!({})),
        ),
        Step::check(
            move |s: &Seen| {
                let items = input(s);
                let kept = ["enc-1", "enc-2"].iter().all(|e| items.iter().any(|i| i["encrypted_content"] == *e));
                let shot = s.result("call_2_0").is_some_and(|r| r.has_image);
                (kept && shot && s.images == 1).then_some(()).ok_or(format!("reasoning kept {kept}, screenshot in the output {shot}"))
            },
            Reply::Cut { text: String::new(), calls: vec![("write_file".into(), r#"{"path": "a.txt", "content": "abc"#.into())] },
        ),
        Step::check(expect_error("hit the output limit"), Reply::text("Done.")),
    ])
    .await;
    let model = ModelConfig::new("openai", "gpt-5", Some(&server.base_url(Wire::Responses)), Some(KEY.into())).unwrap();
    assert_eq!(model.wire, Wire::Responses);
    assert_eq!(ModelConfig::new("openai", "gpt-4o", None, None).unwrap().wire, Wire::OpenAi, "not a reasoning model");
    assert_eq!(
        ModelConfig::new("openai-compatible", "o3", Some("http://localhost:1/v1"), None).unwrap().wire,
        Wire::OpenAi,
        "compatible servers keep Chat Completions"
    );
    let host = MemHost::default();
    let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "say hi", &CancellationToken::new()).await;
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    let usage = host.usage.lock().unwrap().clone();
    assert_eq!(usage.len(), 4);
    assert!(usage[1].cache_read > 0 && usage.iter().all(|u| u.output > 0), "{usage:?}");
}

/// Every way a reply can end unfinished, other than the output limit, ends the run as failed
/// with its own code and a sentence saying what to do; the model's words are kept.
#[tokio::test]
async fn a_refusal_a_full_window_a_content_filter_and_an_unfinished_reply_each_fail_the_run() {
    use botdesk_agent::scripted::Answer;
    let cases: [(Wire, &str, RunFailure, &str); 6] = [
        (Wire::Anthropic, "refusal", RunFailure::ModelRefused, "declined to go on"),
        (Wire::Anthropic, "model_context_window_exceeded", RunFailure::ContextFull, "filled the model's context window"),
        (Wire::Anthropic, "pause_turn", RunFailure::ModelIncomplete, "ended unfinished (pause_turn)"),
        (Wire::OpenAi, "content_filter", RunFailure::ContentFiltered, "content filter stopped"),
        (Wire::Responses, "content_filter", RunFailure::ContentFiltered, "content filter stopped"),
        (Wire::Responses, "server_interrupted", RunFailure::ModelIncomplete, "ended unfinished (server_interrupted)"),
    ];
    for (wire, stop, code, says) in cases {
        let reply = Reply::Answer(Answer { text: "I can't help with that.".into(), stop: Some(stop.into()), ..Default::default() });
        let server = ScriptedServer::start(vec![Step::reply(reply)]).await;
        let (kind, name) = match wire {
            Wire::Anthropic => ("anthropic", "scripted-1"),
            Wire::OpenAi => ("openai-compatible", "scripted-1"),
            Wire::Responses => ("openai", "gpt-5"),
        };
        let model = ModelConfig::new(kind, name, Some(&server.base_url(wire)), Some(KEY.into())).unwrap();
        let host = MemHost::default();
        let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "do it", &CancellationToken::new()).await;
        match end {
            RunEnd::Failed(f, why) => {
                assert_eq!(f, code, "{wire:?} {stop}: {why}");
                assert!(why.contains(says), "{wire:?} {stop}: {why}");
            }
            other => panic!("{wire:?} {stop}: {other:?}"),
        }
        assert_eq!(host.assistant.lock().unwrap().clone(), ["I can't help with that."], "{wire:?} {stop}: the words are kept");
        assert_eq!(server.failures(), Vec::<String>::new());
    }
}

/// The summary is asked with tool choice none; a reply that calls a tool anyway, or says too
/// little, is not taken: the older steps collapse to a line per call instead.
#[tokio::test]
async fn a_summary_that_calls_a_tool_or_says_nothing_is_refused() {
    for (wire, bad) in [
        (Wire::Anthropic, Reply::Turn { text: "Let me take a screenshot first.".into(), calls: vec![("computer_observe".into(), "{}".into())] }),
        (Wire::OpenAi, Reply::text("Let me take a screenshot first.")),
    ] {
        let shell = |i: u32| Reply::call("shell", json!({"command": format!("echo {i}")}));
        let server = ScriptedServer::start(vec![
            Step::reply(shell(0)),
            Step::reply(shell(1)),
            Step::reply(shell(2)),
            Step::check(
                move |s: &Seen| {
                    let choice = &s.body["tool_choice"];
                    let none = choice == &json!("none") || choice == &json!({"type": "none"});
                    none.then_some(()).ok_or(format!("the summary was asked with tool_choice {choice}"))
                },
                bad,
            ),
            Step::check(
                |s: &Seen| {
                    let all = s.body["messages"].to_string();
                    (all.contains("Earlier steps of this task, collapsed") && !all.contains("Let me take a screenshot first"))
                        .then_some(())
                        .ok_or("the refused summary stood for the steps".to_string())
                },
                Reply::text("Done."),
            ),
        ])
        .await;
        let kind = if wire == Wire::Anthropic { "anthropic" } else { "openai-compatible" };
        let mut model = ModelConfig::new(kind, "scripted-1", Some(&server.base_url(wire)), Some(KEY.into())).unwrap();
        (model.context_window, model.max_tokens) = (2_000, 500);
        let end = run(&ModelClient::new(model).unwrap(), &MemHost::default(), &cfg(), vec![], "count", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("Done.".into()), "{wire:?}");
        assert_eq!(server.failures(), Vec::<String>::new(), "{wire:?}");
    }
}

/// Claude's thinking (extended with a budget, or adaptive) comes back to the API exactly as it
/// came, signed and first in its turn, across tool calls; its tokens are the call's output.
#[tokio::test]
async fn thinking_blocks_round_trip_unchanged() {
    use botdesk_agent::scripted::Answer;
    for (model_name, want) in [("claude-sonnet-4-5", json!({"type": "enabled", "budget_tokens": 1024})), ("claude-opus-4-8", json!({"type": "adaptive"}))] {
        let thought = "The user wants the files listed; shell is the fastest way.";
        let server = ScriptedServer::start(vec![
            Step::check(
                move |s: &Seen| (s.body["thinking"] == want).then_some(()).ok_or(format!("thinking asked as {}", s.body["thinking"])),
                Reply::Answer(Answer { thinking: Some(thought.into()), calls: vec![("shell".into(), r#"{"command":"ls"}"#.into())], ..Default::default() }),
            ),
            Step::check(
                move |s: &Seen| {
                    let turn = &s.body["messages"][1]["content"];
                    (turn[0]["type"] == "thinking" && turn[0]["thinking"] == thought && turn[1]["type"] == "tool_use")
                        .then_some(())
                        .ok_or(format!("the turn came back as {turn}"))
                },
                Reply::text("Listed."),
            ),
        ])
        .await;
        let model = ModelConfig::new("anthropic", model_name, Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
        let host = MemHost::default();
        let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "list the files", &CancellationToken::new()).await;
        assert_eq!(end, RunEnd::Completed("Listed.".into()), "{model_name}");
        assert_eq!(server.failures(), Vec::<String>::new(), "{model_name}: the strict server checks the signature");
        assert!(host.usage.lock().unwrap()[0].output as usize > thought.len() / 4, "{model_name}: thinking is billed as output");
    }
}

/// A 429 that gives no retry-after but says in its rate-limit headers when the limit resets is
/// waited out for that long (the host hears it), without counting as a failed attempt; and a
/// success that says no request is left makes the next call wait for the reset before it goes.
#[tokio::test]
async fn rate_limit_headers_pace_the_calls() {
    // Resets two seconds after the answer is made.
    let reset_in = || httpdate_rfc3339(std::time::SystemTime::now() + Duration::from_secs(2));
    let limited = move |_: &Seen| {
        Reply::Status { status: 429, retry_after: None, body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#.into() }
            .with_headers(&[("anthropic-ratelimit-input-tokens-remaining", "0"), ("anthropic-ratelimit-input-tokens-reset", &reset_in())])
    };
    let last_request = move |_: &Seen| {
        Reply::call("list_files", json!({}))
            .with_headers(&[("anthropic-ratelimit-requests-remaining", "0"), ("anthropic-ratelimit-requests-reset", &reset_in())])
    };
    let server = ScriptedServer::start(vec![
        Step::reply(Reply::Func(Box::new(limited))),
        Step::reply(Reply::Func(Box::new(last_request))),
        Step::reply(Reply::text("Done.")),
    ])
    .await;
    let mut model = ModelConfig::new("anthropic", "scripted-1", Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
    // One attempt only: the 429 must not count as one.
    model.retry = Retry { attempts: 1, base: Duration::from_millis(50), max_wait: Duration::from_secs(30) };
    let host = MemHost::default();
    let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "look", &CancellationToken::new()).await;
    assert_eq!(end, RunEnd::Completed("Done.".into()));
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    // (Resets are whole seconds: at least a second of the two is left when they are read.)
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(900), "the 429 was not waited out: {:?}", seen[1].at - seen[0].at);
    assert!(seen[2].at - seen[1].at >= Duration::from_millis(900), "no request was left, yet the next went at once");
    let waits = host.waits.lock().unwrap().clone();
    assert!(waits.len() == 2 && waits.iter().all(|(d, why)| why == "the rate limit" && *d >= Duration::from_secs(1)), "{waits:?}");
}

/// `2026-12-04T13:24:15Z` (the form of Anthropic's reset headers), whole seconds.
fn httpdate_rfc3339(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = botdesk_core::civil::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A screen that stops changing: the model is told "unchanged" only while its context holds an
/// image of that screen. After three zooms pushed the screenshot out, and after old steps
/// collapsed, the next look at the same screen carries the image again.
#[tokio::test]
async fn the_model_never_goes_blind() {
    let sees = |want: bool| {
        move |s: &Seen| match s.results.first() {
            Some(r) if r.has_image == want && (want || r.text.contains("has not changed")) => Ok(()),
            other => Err(format!("expected a look {} an image, got {other:?}", if want { "with" } else { "without" })),
        }
    };
    let zoom = || Reply::call("computer", json!({"action": "zoom", "region": [0, 0, 100, 100]}));
    let mut steps = vec![
        Step::reply(Reply::call("computer", json!({"action": "screenshot"}))),
        Step::check(sees(true), Reply::call("computer", json!({"action": "screenshot"}))),
        Step::check(sees(false), zoom()),
    ];
    for _ in 1..botdesk_agent::conversation::MAX_IMAGES_IN_CONTEXT {
        steps.push(Step::reply(zoom()));
    }
    steps.extend([
        Step::reply(Reply::call("computer", json!({"action": "screenshot"}))),
        // The zooms and the screenshot made one image too many: only the newest stayed, so the
        // same screen is sent again.
        Step::check(sees(true), Reply::call("computer", json!({"action": "screenshot"}))),
        Step::check(sees(false), Reply::call("computer", json!({"action": "screenshot"}))),
    ]);
    // Enough unchanged looks for old steps to collapse: the one that carried the image goes.
    for _ in 0..botdesk_agent::conversation::STEPS_AT_MOST {
        steps.push(Step::check(
            |s: &Seen| (s.images >= 1).then_some(()).ok_or(format!("no image of the screen in the context ({} images)", s.images)),
            Reply::call("computer", json!({"action": "screenshot"})),
        ));
    }
    steps.push(Step::check(|s: &Seen| (s.images >= 1).then_some(()).ok_or("blind at the end".to_string()), Reply::text("Done.")));
    let server = ScriptedServer::start(steps).await;
    let model = ModelConfig::new("anthropic", "claude-opus-4-5", Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
    let host = MemHost { frames: true, ..Default::default() };
    let mut rc = cfg();
    rc.max_steps = 100;
    let end = run(&ModelClient::new(model).unwrap(), &host, &rc, vec![], "watch the screen", &CancellationToken::new()).await;
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(end, RunEnd::Completed("Done.".into()));
}

/// UI-TARS served without a tool-call parser answers in its trained text actions: they become our
/// calls (in its own coordinates, which the engine places), go back to it as its text with the
/// results and screenshots as user messages, and `finished` is the run's answer. Its first turn
/// already has a screenshot.
#[tokio::test]
async fn ui_tars_text_actions_become_calls() {
    let server = ScriptedServer::start(vec![
        Step::check(
            |s: &Seen| {
                let shot = s.body["messages"].as_array().and_then(|m| m.last()).map(|m| m.to_string()).unwrap_or_default();
                (s.images == 1 && shot.contains("image_url") && s.system().contains("click(start_box='(x,y)')"))
                    .then_some(())
                    .ok_or(format!("the first turn has no screenshot or no action space ({} images)", s.images))
            },
            Reply::text("Thought: The search box is at the top.\nAction: click(start_box='<|box_start|>(644,406)<|box_end|>')"),
        ),
        Step::check(
            |s: &Seen| {
                let ms = s.body["messages"].as_array().cloned().unwrap_or_default();
                let said = ms.iter().any(|m| m["role"] == "assistant" && m["content"].as_str().is_some_and(|c| c.contains("Action: click")));
                let no_calls = ms.iter().all(|m| m.get("tool_calls").is_none() && m["role"] != "tool");
                (said && no_calls).then_some(()).ok_or("its action did not go back as its text".to_string())
            },
            Reply::text("Thought: typed.\nAction: type(content='cats\\n')"),
        ),
        Step::reply(Reply::text("Thought: odd\nAction: fly(start_box='(1,2)')")),
        Step::check(
            |s: &Seen| s.body["messages"].to_string().contains("could not be carried out").then_some(()).ok_or("not told".to_string()),
            Reply::text("Action: finished(content='Found cats.')"),
        ),
    ])
    .await;
    let model = ModelConfig::new("openai-compatible", "ui-tars-1.5-7b", Some(&server.base_url(Wire::OpenAi)), None).unwrap();
    assert_eq!(model.dialect, Dialect::UiTars);
    let host = MemHost::default();
    let rc = cfg_for(Dialect::UiTars, botdesk_core::action::CoordSpace::SmartResize);
    let end = run(&ModelClient::new(model).unwrap(), &host, &rc, vec![], "search for cats", &CancellationToken::new()).await;
    assert_eq!(server.failures(), Vec::<String>::new());
    assert_eq!(end, RunEnd::Completed("Found cats.".into()));
    let batch = |v: serde_json::Value| Tool::Act { actions: botdesk_core::action::parse_batch(&v).unwrap(), settle_ms: None };
    assert_eq!(
        host.executed.lock().unwrap().clone(),
        [
            Tool::Observe,
            batch(json!([{"type": "click", "x": 644, "y": 406}])),
            batch(json!([{"type": "type", "text": "cats"}, {"type": "key", "key": "Return"}])),
        ]
    );
}

/// OpenAI's computer use through the Responses API: `computer-use-preview` gets the preview tool
/// (display size, environment linux, truncation auto) and the GA models the `computer` tool;
/// computer calls become our actions; each answer carries the screenshot; a call with pending
/// safety checks goes to the host as such (the engine asks the person), and its answer carries
/// them acknowledged (the strict server refuses it otherwise).
#[tokio::test]
async fn openai_computer_use_carries_out_calls_and_acknowledges_checks_only_through_the_host() {
    use botdesk_agent::scripted::Answer;
    let computer = |action: serde_json::Value, checks: Vec<serde_json::Value>| Reply::Answer(Answer { computer: vec![(action, checks)], ..Default::default() });
    let check = json!({"id": "cu_sc_1", "code": "malicious_instructions", "message": "We've detected instructions that may cause your application to perform malicious or unauthorized actions."});
    for (model_name, tool) in [("computer-use-preview", "computer_use_preview"), ("gpt-5.4", "computer")] {
        let check = check.clone();
        let server = ScriptedServer::start(vec![
            Step::check(
                move |s: &Seen| {
                    let tools = s.body["tools"].as_array().cloned().unwrap_or_default();
                    let ok = tools.iter().any(|t| t["type"] == tool)
                        && !tools.iter().any(|t| t["name"] == "computer_act" || t["name"] == "computer_observe")
                        && s.body["truncation"] == "auto";
                    ok.then_some(()).ok_or(format!("tools {tools:?}"))
                },
                computer(json!({"type": "click", "x": 100, "y": 200, "button": "left"}), vec![]),
            ),
            Step::check(
                |s: &Seen| s.results.first().filter(|r| r.has_image).map(|_| ()).ok_or(format!("no screenshot answer: {:?}", s.results)),
                computer(json!({"type": "keypress", "keys": ["CTRL", "A"]}), vec![check.clone()]),
            ),
            Step::check(
                |s: &Seen| {
                    let input = s.body["input"].as_array().cloned().unwrap_or_default();
                    let out = input.iter().rfind(|i| i["type"] == "computer_call_output").cloned().unwrap_or_default();
                    (out["acknowledged_safety_checks"][0]["id"] == "cu_sc_1").then_some(()).ok_or(format!("not acknowledged: {out}"))
                },
                computer(json!({"type": "scroll", "x": 10, "y": 20, "scroll_x": 0, "scroll_y": -250}), vec![]),
            ),
            Step::reply(Reply::text("Done.")),
        ])
        .await;
        let model = ModelConfig::new("openai", model_name, Some(&server.base_url(Wire::Responses)), Some(KEY.into())).unwrap();
        assert_eq!(model.wire, Wire::Responses, "{model_name}");
        let host = MemHost::default();
        let end = run(&ModelClient::new(model).unwrap(), &host, &cfg(), vec![], "select all", &CancellationToken::new()).await;
        assert_eq!(server.failures(), Vec::<String>::new(), "{model_name}");
        assert_eq!(end, RunEnd::Completed("Done.".into()), "{model_name}");
        let batch = |v: serde_json::Value| Tool::Act { actions: botdesk_core::action::parse_batch(&v).unwrap(), settle_ms: None };
        let executed = host.executed.lock().unwrap().clone();
        assert_eq!(executed[0], batch(json!([{"type": "click", "x": 100, "y": 200}])), "{model_name}");
        assert_eq!(
            executed[1],
            Tool::SafetyChecked {
                checks: vec![serde_json::from_value(check).unwrap()],
                then: Box::new(batch(json!([{"type": "key", "key": "a", "modifiers": ["ctrl"]}]))),
            },
            "{model_name}"
        );
        assert_eq!(executed[2], batch(json!([{"type": "move", "x": 10, "y": 20}, {"type": "scroll", "direction": "up", "amount": 3}])), "{model_name}");
    }
}

/// Claude Opus 5.5 binds each thinking block to the conversation before it: once screenshots are
/// pruned the blocks after the change no longer match. The run asks the API to drop those (the
/// binding beta); without that, the strict server refuses the request as the API would.
#[tokio::test]
async fn bound_thinking_survives_pruned_screenshots() {
    for asks_to_drop in [true, false] {
        let looks = botdesk_agent::conversation::MAX_IMAGES_IN_CONTEXT + 2;
        let mut steps: Vec<Step> = (0..looks).map(|_| Step::reply(Reply::call("computer_observe", json!({})))).collect();
        steps.push(Step::reply(Reply::text("Seen.")));
        let server = ScriptedServer::start(steps).await;
        let mut model = ModelConfig::new("anthropic", "claude-opus-5-5", Some(&server.base_url(Wire::Anthropic)), Some(KEY.into())).unwrap();
        assert!(model.thinking_binding && model.thinking == botdesk_core::models::Thinking::Adaptive);
        model.thinking_binding = asks_to_drop;
        model.retry = Retry { attempts: 1, base: Duration::from_millis(10), max_wait: Duration::from_secs(1) };
        let end = run(&ModelClient::new(model).unwrap(), &MemHost::default(), &cfg(), vec![], "look", &CancellationToken::new()).await;
        if asks_to_drop {
            assert_eq!(server.failures(), Vec::<String>::new());
            assert_eq!(end, RunEnd::Completed("Seen.".into()));
            let last = server.requests().last().unwrap().clone();
            assert!(last.headers["anthropic-beta"].contains("thinking-binding-controls-2026-08-01"));
        } else {
            let failures = server.failures();
            assert!(failures.iter().any(|f| f.contains("bound to the conversation before it")), "{failures:?}");
            assert!(matches!(end, RunEnd::Failed(botdesk_core::RunFailure::ModelError, _)), "{end:?}");
        }
    }
}

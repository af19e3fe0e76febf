//! A run's replay in the real app under Xvfb, with its computer stopped: the run (scripted model,
//! real computer) paints its screen and clicks in three places; the replay view opens from the
//! chat, scrubs to each click with its ring drawn where it was and its step highlighted, and plays
//! at 8× to the end. Screenshots of the three moments in target/e2e/31-replay-*.png.

mod webdriver;

use botdesk_agent::scripted::{Reply, ScriptedServer, Step};
use botdesk_engine::*;
use serde_json::json;
use std::time::Duration;
use webdriver::*;

const CLICKS: [(u32, u32); 3] = [(200, 200), (700, 420), (1000, 650)];

/// Destroys the test's computers however the test ends.
struct Cleanup<'a>(&'a tokio::runtime::Runtime, &'a Engine);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.0.block_on(async {
            for c in self.1.list_computers().await.unwrap_or_default() {
                let _ = self.1.destroy_computer(&c.id).await;
            }
        });
    }
}

#[test]
fn a_runs_replay_plays_and_scrubs_with_its_clicks_drawn_where_they_were() {
    let data = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(Engine::open(EngineConfig::new(data.path(), ProviderChoice::Machine(botdesk_docker::machine)))).unwrap();
    let _cleanup = Cleanup(&rt, &engine);
    let click = |(x, y): (u32, u32)| {
        Step::reply(Reply::call("computer_act", json!({"actions": [{"type": "click", "x": x, "y": y}, {"type": "wait", "ms": 800}], "settle_ms": 0})))
    };
    let server = rt.block_on(ScriptedServer::start(vec![
        Step::reply(Reply::call("computer_observe", json!({}))),
        Step::reply(Reply::call(
            "shell",
            json!({"command": "xsetroot -solid '#13579b' && (setsid xterm -bg '#f0a020' -geometry 50x12+560+330 >/dev/null 2>&1 &) && sleep 1"}),
        )),
        click(CLICKS[0]),
        click(CLICKS[1]),
        click(CLICKS[2]),
        Step::reply(Reply::text("Clicked three times.")),
    ]));
    let model_id = format!("replay-e2e-{}", std::process::id());
    let new = NewModel {
        id: model_id.clone(),
        kind: botdesk_core::ModelKind::OpenAiCompatible,
        model: "scripted".into(),
        base_url: Some(server.base_url(botdesk_agent::Wire::OpenAi)),
        coordinates: None,
    };
    rt.block_on(engine.add_model(new, None)).unwrap();
    let bot = rt.block_on(engine.create_bot("player", ComputerScope::Private, Some(&model_id), "")).unwrap();
    let run = rt.block_on(async { engine.run_task(&engine.bot_ref("player").await.unwrap().id, "click three times").await }).unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(server.failures(), Vec::<String>::new());
    assert!(engine.recording(&run.id).is_some(), "the run was recorded");
    // The replay needs no computer.
    rt.block_on(engine.stop_computer(&bot.computer.id)).unwrap();

    let d = Driver::start(env!("CARGO_BIN_EXE_botdesk-app").as_ref(), &[("BOTDESK_DATA_DIR", data.path().to_str().unwrap())]);
    d.find(".bot-list");
    d.click(&format!(".bot[data-bot='{}']", bot.id));
    d.wait_js("the run's Replay in the chat", &format!("return !!document.querySelector(\"[data-replay-run='{}']\")", run.id), Duration::from_secs(20));
    d.click(&format!("[data-replay-run='{}']", run.id));
    d.wait_js(
        "the first frame",
        "const i = document.querySelector('#replay-frame'); return !!i && i.complete && i.naturalWidth === 960",
        Duration::from_secs(30),
    );
    let steps = d.js("return [...document.querySelectorAll('.replay-step.tool')].map(e => [Number(e.dataset.step), Number(e.dataset.at)])");
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 5, "a look, the shell call and three clicks: {steps:?}");

    // Scrub to each click: its ring is drawn where it was, and its step is the current one.
    for (k, (x, y)) in CLICKS.iter().enumerate() {
        let (index, at) = (steps[k + 2][0].as_u64().unwrap(), steps[k + 2][1].as_u64().unwrap());
        d.click(&format!(".replay-step[data-step='{index}']"));
        d.wait_js(
            "the click's ring and its frame",
            &format!("const f = document.querySelector('#replay-frame'); return !!document.querySelector('#replay-marks circle.click-ring[data-x=\"{x}\"][data-y=\"{y}\"]') && f.complete && f.dataset.frame !== undefined"),
            Duration::from_secs(20),
        );
        assert_eq!(d.js("return Number(document.querySelector('.replay-step.current').dataset.step)"), json!(index));
        assert_eq!(d.js("return Number(document.querySelector('#replay-time').dataset.ms)"), json!(at));
        std::thread::sleep(Duration::from_millis(300));
        screenshot(&format!("31-replay-{}.png", k + 1));
    }
    // The ring's centre is over the click's place on the screen.
    let centre = d.js(
        "const c = document.querySelector('#replay-marks circle.click-ring[data-x=\"1000\"]').getBoundingClientRect(), s = document.querySelector('.replay-stage').getBoundingClientRect(); return [Math.round((c.x + c.width / 2 - s.x) / s.width * 1280), Math.round((c.y + c.height / 2 - s.y) / s.height * 800)]",
    );
    assert_eq!(centre, json!([CLICKS[2].0, CLICKS[2].1]));

    // Play from the start at 8×: the playhead moves on and stops at the end.
    d.click(".replay-step[data-step='0']");
    d.js("const s = document.querySelector('#replay-speed'); s.value = '8'; s.dispatchEvent(new Event('change')); return true");
    d.click("#replay-play");
    d.wait_js("playing", "return document.querySelector('.replay-modal')?.dataset.playing === 'true'", Duration::from_secs(5));
    d.wait_js(
        "the end of the run",
        "const t = document.querySelector('#replay-time'); return document.querySelector('.replay-modal').dataset.playing === 'false' && Number(t.dataset.ms) === Number(document.querySelector('#replay-scrub').max)",
        Duration::from_secs(30),
    );
    assert!(d.js("return document.querySelector('.replay-step.current').classList.contains('message')").as_bool().unwrap(), "the last step is current");
    drop(d);
    rt.block_on(engine.remove_model(&model_id)).ok();
}

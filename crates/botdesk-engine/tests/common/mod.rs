//! What every engine test shares: tearing down what a test's engine made.

use std::io::Write;
use std::time::Duration;

use botdesk_engine::Engine;

/// Destroys every computer of `engine` (checkpointed first, as the app does), then removes its
/// bots and `models`. Runs on a runtime of its own, so it works from `Drop` inside a test's
/// runtime. A destroy that fails (a checkpoint that cannot be written, Docker slow under load) is
/// tried again; what still stands is then removed with `docker rm -f`, and the failure is written
/// straight to stderr (past the test harness's capture) so a leak's cause shows in the log.
pub fn tear_down(engine: &Engine, models: &[String]) {
    let engine = engine.clone();
    let models = models.to_vec();
    let _ = std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            for c in engine.list_computers().await.unwrap_or_default() {
                let mut last = None;
                for attempt in 0..3 {
                    if attempt > 0 {
                        tokio::time::sleep(Duration::from_secs(attempt)).await;
                    }
                    match engine.destroy_computer(&c.id).await {
                        Ok(_) => {
                            last = None;
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                if let Some(e) = last {
                    let _ = writeln!(std::io::stderr(), "tear-down: destroying computer {} failed three times ({e}); removing its container by force", c.name);
                    force_remove(&c.id);
                }
            }
            for b in engine.list_bots().await.unwrap_or_default() {
                let _ = engine.remove_bot(&b.id).await;
            }
            for m in models {
                let _ = engine.remove_model(&m).await;
            }
        })
    })
    .join();
}

/// Removes the containers of computer `id` without the engine (what a failed destroy left).
fn force_remove(id: &str) {
    let out = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &format!("label=botdesk.computer={id}")]).output().unwrap();
    for c in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = std::process::Command::new("docker").args(["rm", "-f", c]).output();
    }
}

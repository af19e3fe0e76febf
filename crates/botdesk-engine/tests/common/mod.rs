//! What every engine test shares: tearing down what a test's engine made.

use std::io::Write;
use std::time::Duration;

use botdesk_engine::{Engine, EngineConfig, ProviderChoice};

/// Destroys every computer of the data directory (checkpointed first, as the app does), then
/// removes its bots and `models`. Runs on a runtime and an engine of its own, so it works from
/// `Drop` inside a test's runtime. The computers come from the store through the bots as well as from the listing (which
/// asks Docker each computer's status and so can fail under load). A destroy that fails (a
/// checkpoint that cannot be written, Docker slow under load) is tried again; what still stands is
/// then removed with `docker rm -f`, and every failure is written straight to stderr (past the test
/// harness's capture) so a leak's cause shows in the log.
pub fn tear_down(data_dir: &std::path::Path, models: &[String]) {
    let data_dir = data_dir.to_path_buf();
    let models = models.to_vec();
    let _ = std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            // An engine of its own on the same data directory (as the CLI beside the app): the
            // test's engine pools its SQLite connections on the test's runtime, which is blocked
            // while this runs (seen in CI: "pool timed out while waiting for an open connection").
            let engine = match Engine::open(EngineConfig::new(&data_dir, ProviderChoice::Machine(botdesk_docker::machine))).await {
                Ok(e) => e,
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "tear-down: cannot open the engine on {} ({e})", data_dir.display());
                    return;
                }
            };
            let mut ids: Vec<botdesk_core::ComputerId> = engine.list_bots().await.unwrap_or_default().into_iter().map(|b| b.computer.id).collect();
            for attempt in 0..3 {
                match engine.list_computers().await {
                    Ok(computers) => {
                        ids.extend(computers.into_iter().map(|c| c.id));
                        break;
                    }
                    Err(e) if attempt == 2 => {
                        let _ = writeln!(std::io::stderr(), "tear-down: listing the computers failed three times ({e}); destroying those of the bots");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
            ids.sort();
            ids.dedup();
            for id in ids {
                let mut last = None;
                for attempt in 0..3 {
                    if attempt > 0 {
                        tokio::time::sleep(Duration::from_secs(attempt)).await;
                    }
                    match engine.destroy_computer(&id).await {
                        Ok(_) => {
                            last = None;
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                if let Some(e) = last {
                    let _ = writeln!(std::io::stderr(), "tear-down: destroying computer {id} failed three times ({e}); removing its container by force");
                    force_remove(id.as_str());
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

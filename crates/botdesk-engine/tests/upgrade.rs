//! Upgrades lose nothing: each committed fixture (a data directory as that version left it, made
//! by `examples/make_fixture.rs`) opens in this version on the real engine: its migrations apply,
//! everything reads back, and its checkpoints restore into new computers.

mod common;

use botdesk_engine::*;
use std::path::{Path, PathBuf};

/// Copies `from` to `to` (files, folders, links). Git keeps no empty folders, so those a
/// checkpoint's index lists (`vN.index`) and each home's `trash/` are made again.
fn copy_fixture(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if t.is_dir() {
            copy_fixture(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
    for e in std::fs::read_dir(to).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(version) = name.strip_suffix(".index") {
            let index: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            for d in index["dirs"].as_array().into_iter().flatten().filter_map(|d| d.as_str()) {
                std::fs::create_dir_all(to.join(version).join(d)).unwrap();
            }
            std::fs::create_dir_all(to.join("trash")).unwrap();
        }
    }
}

struct Opened {
    engine: Engine,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Opened {
    fn drop(&mut self) {
        common::tear_down(&self.data, &[]);
    }
}

async fn open(fixture: &str) -> Opened {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_fixture(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(fixture), &data);
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    Opened { engine, data, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_2026_12_01_opens_whole_and_its_checkpoints_restore() {
    let o = open("data-2026-12-01").await;
    let e = &o.engine;
    // Settings, the model with its prices, both bots on their computers.
    let s = e.settings().unwrap();
    assert_eq!((s.memory_mib, s.cpus, s.screen_limit), (1536, 1.5, Some(4)));
    assert_eq!(e.model_prices("scripted").await.unwrap(), Some(Prices { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 }));
    let bots = e.list_bots().await.unwrap();
    let scope = |n: &str| bots.iter().find(|b| b.name == n).map(|b| (b.computer.scope, b.model.clone()));
    assert_eq!(scope("teamie"), Some((ComputerScope::Team, Some("scripted".into()))));
    assert_eq!(scope("solo"), Some((ComputerScope::Private, Some("scripted".into()))));
    // The chat with its tool calls, their screenshot and the run's cost; the activity.
    let chat = e.chat(&e.bot_ref("teamie").await.unwrap(), 50).await.unwrap();
    let calls: Vec<&str> = chat.iter().flat_map(|m| m.calls.iter().map(|c| c.name.as_str())).collect();
    assert_eq!(calls, ["shell", "write_file", "browser_navigate", "computer_observe"], "{chat:?}");
    let shot = chat.iter().flat_map(|m| &m.calls).find_map(|c| c.image.clone()).expect("a screenshot in the chat");
    assert!(std::fs::read(o.data.join(&shot)).unwrap().starts_with(b"\x89PNG"), "{shot}");
    let last = chat.last().unwrap();
    assert_eq!(last.text, "Done: notes.md written and the page opened.");
    assert!(last.usage.is_some_and(|u| u.output > 0) && last.cost_usd.is_some(), "{last:?}");
    let activity = e.activity(&e.bot_ref("teamie").await.unwrap(), 0, 50).await.unwrap();
    assert!(activity.iter().any(|a| a.kind == "shell" && a.output_tail.contains("served")), "{activity:?}");
    // The workspaces, offline, from their checkpoints.
    assert_eq!(&e.stored_read(&e.bot_ref("teamie").await.unwrap(), "notes.md", 1000).await.unwrap()[..], b"# Notes\nThe fixture's Team bot wrote this.\n");
    assert_eq!(&e.stored_read(&e.bot_ref("solo").await.unwrap(), "solo.txt", 1000).await.unwrap()[..], b"the Private bot's file\n");
    // The checkpoints restore: the computers (gone) start with their homes, the browser profile too.
    let (code, out) = e.shell(&e.bot_ref("teamie").await.unwrap(), "cat notes.md && ls /home/botdesk/.browser-profiles/*/Default/History").await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("The fixture's Team bot wrote this.") && out.contains("Default/History"), "{out}");
    let (code, out) = e.shell(&e.bot_ref("solo").await.unwrap(), "cat solo.txt").await.unwrap();
    assert_eq!((code, out.trim()), (0, "the Private bot's file"));
}

//! Checkpoint and restore of a 1 GiB workspace with 10,000 small files, and a checkpoint after
//! one changed file, against anchors measured on the same tree in the same run: `cp -a` of the
//! checkpoint on the host, and `tar` over `docker exec` (the plain way to stream a home out of a
//! container and back).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ProviderChoice};
use tokio_util::sync::CancellationToken;

use crate::BOT;

pub struct Figures {
    pub bytes: u64,
    pub files: u64,
    pub full: Duration,
    pub one_changed: Duration,
    pub restore: Duration,
    pub cp_full: Duration,
    pub tar_full: Duration,
    pub tar_restore: Duration,
}

const SMALL: usize = 10_000;
const SMALL_SIZE: usize = 4096;
const BIG: usize = 8;

/// Writes the tree inside the computer: 10,000 files of 4 KiB and 8 blobs up to 1 GiB in all.
fn generator() -> String {
    format!(
        "import os\nn,s,b={SMALL},{SMALL_SIZE},{BIG}\nfor i in range(n):\n d=f'project/src/m{{i//100:03}}'\n os.makedirs(d,exist_ok=True)\n open(f'{{d}}/f{{i:05}}.txt','wb').write(os.urandom(s))\nbig=((1<<30)-n*s)//b\nos.makedirs('data',exist_ok=True)\nfor i in range(b):\n open(f'data/blob{{i}}.bin','wb').write(os.urandom(big))\n"
    )
}

async fn sh(engine: &Engine, bot: &str, argv: &[&str]) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let exit =
        engine.exec(bot, argv.iter().map(|s| s.to_string()).collect(), None, Some(Duration::from_secs(600)), Some(tx), CancellationToken::new()).await.unwrap();
    assert_eq!(exit.code, 0, "{argv:?}");
}

fn timed(cmd: &str) -> Duration {
    let t = Instant::now();
    let st = Command::new("sh").args(["-c", cmd]).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "{cmd}");
    t.elapsed()
}

pub async fn run(dir: &Path) -> Figures {
    let data = dir.join("checkpoint-bench");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Docker)).await.unwrap();
    let bot = engine.create_bot("ckpt", ComputerScope::Private, None, "").await.unwrap();
    let computer = bot.computer.id.clone();
    sh(&engine, "ckpt", &["python3", "-c", &generator()]).await;
    sh(&engine, "ckpt", &["sync"]).await;
    let out = Command::new("docker").args(["ps", "-q", "--filter", &format!("label=botdesk.computer={computer}")]).output().unwrap();
    let container = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let t = Instant::now();
    let r = engine.checkpoint(&computer).await.unwrap();
    let full = t.elapsed();
    assert!(r.files >= (SMALL + BIG) as u64 && r.bytes >= 1 << 30, "{r:?}");
    let (files, bytes) = (r.files, r.bytes);

    let mut one = vec![];
    for _ in 0..5 {
        sh(&engine, "ckpt", &["python3", "-c", "import os; open('project/src/m000/f00000.txt','wb').write(os.urandom(4096))"]).await;
        let t = Instant::now();
        let r = engine.checkpoint(&computer).await.unwrap();
        one.push(t.elapsed());
        assert_eq!(r.copied, 1);
    }
    one.sort();

    // Anchors on the same tree: cp -a of the checkpoint; tar out of the computer over exec; tar
    // back into it over exec.
    let store = data.join("homes").join(std::fs::read_dir(data.join("homes")).unwrap().next().unwrap().unwrap().file_name());
    let current = std::fs::canonicalize(store.join("current")).unwrap();
    let anchor = dir.join("ckpt-anchor");
    let cp_full = timed(&format!("cp -a '{}' '{}' && sync", current.display(), anchor.display()));
    let _ = std::fs::remove_dir_all(&anchor);
    std::fs::create_dir_all(&anchor).unwrap();
    let tar_full = timed(&format!("docker exec -u {BOT} {container} tar -C /home/botdesk -cf - . | tar -C '{}' -xf - && sync", anchor.display()));
    // Restores write 1 GiB each, and this disk's speed wanders: three rounds, each the anchor
    // then ours, and the median of each.
    let (mut tar_restores, mut restores) = (vec![], vec![]);
    for _ in 0..3 {
        tar_restores.push(timed(&format!(
            "tar -C '{}' -cf - . | docker exec -i -u {BOT} {container} sh -c 'mkdir -p /home/botdesk/.anchor && tar -C /home/botdesk/.anchor -xf - && sync && rm -rf /home/botdesk/.anchor'",
            anchor.display()
        )));
        let t = Instant::now();
        let r = engine.restore_latest(&computer).await.unwrap().expect("a checkpoint to restore");
        sh(&engine, "ckpt", &["sync"]).await;
        restores.push(t.elapsed());
        assert_eq!(r.files, files);
    }
    let _ = std::fs::remove_dir_all(&anchor);
    tar_restores.sort();
    restores.sort();
    let (tar_restore, restore) = (tar_restores[1], restores[1]);
    let _ = engine.remove_bot("ckpt").await;
    let _ = std::fs::remove_dir_all(&data);
    Figures { bytes, files, full, one_changed: one[one.len() / 2], restore, cp_full, tar_full, tar_restore }
}

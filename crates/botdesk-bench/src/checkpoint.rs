//! Checkpoint and restore of a 1 GiB workspace with 10,000 small files, and a checkpoint after
//! one changed file, against `cp -a` of the same tree in the same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use botdesk_engine::{ComputerScope, Engine, EngineConfig, ProviderChoice};

pub struct Figures {
    pub bytes: u64,
    pub files: u64,
    pub full: Duration,
    pub one_changed: Duration,
    pub restore: Duration,
    pub cp_full: Duration,
    pub cp_restore: Duration,
}

const SMALL: usize = 10_000;
const SMALL_SIZE: usize = 4096;
const BIG: usize = 8;

/// Fills a buffer with cheap, incompressible-looking bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn generate(home: &Path) -> (u64, u64) {
    let mut bytes = 0u64;
    for i in 0..SMALL {
        let d = home.join(format!("project/src/m{:03}", i / 100));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i:05}.txt")), noise(i as u64, SMALL_SIZE)).unwrap();
        bytes += SMALL_SIZE as u64;
    }
    let big = ((1u64 << 30) - bytes) / BIG as u64;
    std::fs::create_dir_all(home.join("data")).unwrap();
    for i in 0..BIG {
        std::fs::write(home.join(format!("data/blob{i}.bin")), noise(1_000_000 + i as u64, big as usize)).unwrap();
        bytes += big;
    }
    (bytes, (SMALL + BIG) as u64)
}

fn cp(from: &Path, to: &PathBuf) -> Duration {
    let _ = std::fs::remove_dir_all(to);
    let t = Instant::now();
    assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap().success());
    let took = t.elapsed();
    Command::new("sync").status().unwrap();
    took
}

pub async fn run(dir: &Path) -> Figures {
    let data = dir.join("checkpoint-bench");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Docker)).await.unwrap();
    let bot = engine.create_bot("ckpt", ComputerScope::Private, None, "").await.unwrap();
    let computer = bot.computer.id.clone();
    // The computer never starts: its machine disk is filled directly (no browser to close).
    let home = data.join("machines").join(&computer).join("home");
    let (bytes, files) = generate(&home);
    Command::new("sync").status().unwrap();

    let cp_full = cp(&home, &dir.join("cp-anchor"));
    let t = Instant::now();
    let r = engine.checkpoint(&computer).await.unwrap();
    let full = t.elapsed();
    assert_eq!((r.files, r.bytes), (files, bytes));

    let mut one = vec![];
    for i in 0..5 {
        std::fs::write(home.join("project/src/m000/f00000.txt"), noise(99 + i, SMALL_SIZE)).unwrap();
        let t = Instant::now();
        let r = engine.checkpoint(&computer).await.unwrap();
        one.push(t.elapsed());
        assert_eq!(r.copied, 1);
    }
    one.sort();

    let current = std::fs::canonicalize(data.join("homes").join(std::fs::read_dir(data.join("homes")).unwrap().next().unwrap().unwrap().file_name()).join("current")).unwrap();
    let cp_restore = cp(&current, &dir.join("cp-anchor"));
    let _ = std::fs::remove_dir_all(dir.join("cp-anchor"));
    std::fs::remove_dir_all(&home).unwrap();
    let t = Instant::now();
    let r = engine.restore_workspace(&computer).await.unwrap().expect("a checkpoint to restore");
    let restore = t.elapsed();
    Command::new("sync").status().unwrap();
    assert_eq!(r.files, files);
    let _ = engine.remove_bot("ckpt").await;
    let _ = std::fs::remove_dir_all(&data);
    Figures { bytes, files, full, one_changed: one[one.len() / 2], restore, cp_full, cp_restore }
}

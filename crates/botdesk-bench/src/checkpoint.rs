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
    /// A restore of the first version, whole, through `Engine::restore` (a checkpoint of the
    /// present first, then the version put back), the median of three.
    pub version_restore: Duration,
    /// Disk the store takes with 30 versions, one file changed between each, and one version.
    pub disk_versions: u64,
    pub disk_one: u64,
    pub versions: u64,
}

/// Versions the disk row keeps (one changed file between each).
const VERSIONS: usize = 30;

/// Bytes on disk under `path`, each file once however many names it has (`du`).
fn du(path: &Path) -> u64 {
    let out = Command::new("du").args(["-s", "-B1"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().parse().unwrap()
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
    let exit = engine
        .exec(
            &engine.bot_ref(bot).await.unwrap(),
            argv.iter().map(|s| s.to_string()).collect(),
            None,
            Some(Duration::from_secs(600)),
            Some(tx),
            CancellationToken::new(),
        )
        .await
        .unwrap();
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
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
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
    // Up to 30 versions, one changed file each: what they take on disk beside one version.
    for _ in 6..VERSIONS {
        sh(&engine, "ckpt", &["python3", "-c", "import os; open('project/src/m000/f00001.txt','wb').write(os.urandom(4096))"]).await;
        engine.checkpoint(&computer).await.unwrap();
    }
    engine.settle().await;

    // Anchors on the same tree: cp -a of the checkpoint; tar out of the computer over exec; tar
    // back into it over exec.
    let store = data.join("homes").join(std::fs::read_dir(data.join("homes")).unwrap().next().unwrap().unwrap().file_name());
    let current = std::fs::canonicalize(store.join("current")).unwrap();
    let versions = engine.history(&engine.bot_ref("ckpt").await.unwrap()).await.unwrap().versions.len() as u64;
    let (disk_versions, disk_one) = (du(&store), du(&current));
    let anchor = dir.join("ckpt-anchor");
    let cp_full = timed(&format!("cp -a '{}' '{}' && sync", current.display(), anchor.display()));
    let _ = std::fs::remove_dir_all(&anchor);
    std::fs::create_dir_all(&anchor).unwrap();
    let tar_full = timed(&format!("docker exec -u {BOT} {container} tar -C /home/botdesk -cf - . | tar -C '{}' -xf - && sync", anchor.display()));
    // Restores write 1 GiB each, and this disk's speed wanders: three rounds, each the anchor
    // then ours, and the median of each.
    let (mut tar_restores, mut restores, mut version_restores) = (vec![], vec![], vec![]);
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
        let t = Instant::now();
        engine.restore(&engine.bot_ref("ckpt").await.unwrap(), 1, None).await.unwrap();
        sh(&engine, "ckpt", &["sync"]).await;
        version_restores.push(t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&anchor);
    tar_restores.sort();
    restores.sort();
    let (tar_restore, restore) = (tar_restores[1], restores[1]);
    let version_restore = crate::median(version_restores);
    let _ = engine.remove_bot(&engine.bot_ref("ckpt").await.unwrap().id).await;
    let _ = std::fs::remove_dir_all(&data);
    Figures { bytes, files, full, one_changed: one[one.len() / 2], restore, cp_full, tar_full, tar_restore, version_restore, disk_versions, disk_one, versions }
}

/// The disk row, as a line of the notes (bytes, not times).
pub fn disk_line(f: &Figures) -> String {
    let mib = |b: u64| b as f64 / 1_048_576.0;
    format!(
        "{} versions of the 1 GiB home, one changed file between each, take {:.1} MiB on disk beside {:.1} MiB for one version (`du`, each file once): {:.3}× (target ≤ 1.1×)",
        f.versions,
        mib(f.disk_versions),
        mib(f.disk_one),
        f.disk_versions as f64 / f.disk_one as f64
    )
}

/// The whole process's memory while a home of `entries` empty files under long names is
/// checkpointed.
pub struct Memory {
    pub entries: u64,
    /// The first checkpoint (every file new) and the next (every file unchanged: the previous
    /// version's index read alongside the stream).
    pub first: Peak,
    pub next: Peak,
}

pub struct Peak {
    /// Resident memory of this process just before (the anchor), and the most seen during.
    pub before: u64,
    pub peak: u64,
    pub took: Duration,
    /// The checkpoint's error, when it refused.
    pub refused: Option<String>,
}

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap();
    kb * 1024
}

/// Checkpoints `entries` empty files twice, sampling this process's resident memory.
pub async fn memory(dir: &Path, entries: usize) -> Memory {
    let data = dir.join("checkpoint-memory");
    let engine = Engine::open(EngineConfig::new(&data, ProviderChoice::Machine(botdesk_docker::machine))).await.unwrap();
    let bot = engine.create_bot("many", ComputerScope::Private, None, "").await.unwrap();
    // 2,000 folders of 1,000 empty files, each name 120 bytes long.
    let make = format!(
        "import os\nn={entries}\nfor d in range((n + 999) // 1000):\n p = 'many/' + 'd' * 100 + '%05d' % d\n os.makedirs(p)\n for i in range(min(1000, n - d * 1000)):\n  os.close(os.open(p + '/' + 'f' * 113 + '%07d' % (d * 1000 + i), os.O_CREAT | os.O_WRONLY, 0o644))\n"
    );
    sh(&engine, "many", &["python3", "-c", &make]).await;
    let first = peak_of(&engine, &bot.computer.id).await;
    let next = peak_of(&engine, &bot.computer.id).await;
    let _ = engine.remove_bot(&engine.bot_ref("many").await.unwrap().id).await;
    let _ = std::fs::remove_dir_all(&data);
    Memory { entries: entries as u64, first, next }
}

async fn peak_of(engine: &Engine, computer: &botdesk_engine::ComputerId) -> Peak {
    engine.settle().await;
    let before = rss();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let t = Instant::now();
    let r = engine.checkpoint(computer).await;
    let took = t.elapsed();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.join().unwrap().max(rss());
    Peak { before, peak, took, refused: r.err().map(|e| e.message) }
}

/// The memory row, as a line of the notes.
pub fn memory_line(m: &Memory) -> String {
    let mib = |b: u64| b as f64 / 1_048_576.0;
    let one = |p: &Peak| {
        format!(
            "{:.0} MiB, from {:.0} MiB just before ({}, {:.1} s)",
            mib(p.peak.saturating_sub(p.before)),
            mib(p.before),
            p.refused.as_deref().map_or("saved".to_string(), |e| format!("refused: {e}")),
            p.took.as_secs_f64()
        )
    };
    format!(
        "Checkpoints of {} empty files under 120-byte names: this process's resident memory grew {} for the first, {} for the next (all unchanged) (target: < 64 MiB of growth)",
        m.entries,
        one(&m.first),
        one(&m.next)
    )
}

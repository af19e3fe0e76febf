//! Lease throughput: claim + renew + release cycles on the real SQLite database, in one process
//! and in two processes × 32 tasks contending for the same bots, counting invariant violations.

use botdesk_core::{BotId, ComputerId, ComputerScope, HostName};
use botdesk_store::{NewBot, Store, StoreError};
use std::{
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

pub const BOTS: usize = 8;
const TTL: i64 = 60_000;

pub struct Counts {
    pub cycles: u64,
    pub ops: u64,
    pub violations: u64,
    pub secs: f64,
}

pub async fn setup(db: &Path) -> (Store, ComputerId, Vec<BotId>) {
    let s = Store::open(db).await.unwrap();
    let mut bots = vec![];
    let mut computer = None;
    for i in 0..BOTS {
        let name = format!("bench{i}");
        let (b, c) = s
            .create_bot(NewBot { name: &name, scope: ComputerScope::Team, model: None, instructions: "", provider: "bench", host: HostName::local() }, 0)
            .await
            .unwrap();
        bots.push(b.id);
        computer = Some(c.id);
    }
    (s, computer.unwrap(), bots)
}

pub async fn open(db: &Path) -> (Store, ComputerId, Vec<BotId>) {
    let s = Store::open(db).await.unwrap();
    let bots: Vec<BotId> = s.list_bots().await.unwrap().into_iter().map(|b| b.id).collect();
    let c = s.list_computers().await.unwrap()[0].id.clone();
    (s, c, bots)
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `tasks` tasks cycle over the bots for `secs` seconds.
pub async fn contend(store: Store, c: ComputerId, bots: Vec<BotId>, tasks: usize, secs: f64, tag: &str) -> Counts {
    let cycles = Arc::new(AtomicU64::new(0));
    let ops = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut handles = vec![];
    for t in 0..tasks {
        let (store, c, bots) = (store.clone(), c.clone(), bots.clone());
        let (cycles, ops, violations) = (cycles.clone(), ops.clone(), violations.clone());
        let holder = format!("{tag}-{t}");
        handles.push(tokio::spawn(async move {
            let mut last_fence = vec![0i64; bots.len()];
            let mut i = t;
            while Instant::now() < deadline {
                let b = i % bots.len();
                i += 1;
                ops.fetch_add(1, Ordering::Relaxed);
                let lease = match store.claim_execution(&c, &bots[b], &holder, now(), TTL).await {
                    Ok(l) => l,
                    Err(StoreError::Busy(_)) => continue,
                    Err(e) => panic!("claim: {e}"),
                };
                if lease.fence <= last_fence[b] {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                last_fence[b] = lease.fence;
                // Nobody else may hold it now.
                ops.fetch_add(1, Ordering::Relaxed);
                match store.live_execution(&c, &bots[b], now()).await.unwrap() {
                    Some(l) if l.fence == lease.fence && l.holder == holder => {}
                    _ => {
                        violations.fetch_add(1, Ordering::Relaxed);
                    }
                }
                ops.fetch_add(2, Ordering::Relaxed);
                let renewed = store.renew_execution(&lease, now(), TTL).await;
                let released = match renewed {
                    Ok(l) => store.release_execution(&l).await,
                    Err(e) => Err(e),
                };
                if released.is_err() {
                    violations.fetch_add(1, Ordering::Relaxed);
                } else {
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    Counts {
        cycles: cycles.load(Ordering::Relaxed),
        ops: ops.load(Ordering::Relaxed),
        violations: violations.load(Ordering::Relaxed),
        secs: started.elapsed().as_secs_f64(),
    }
}

/// Anchor: plain one-row UPDATE statements on the same kind of database, as fast as one task can.
pub async fn anchor_updates(store_db: &Path, secs: f64) -> f64 {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(store_db)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal),
        )
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS anchor (id INTEGER PRIMARY KEY, n INTEGER); INSERT OR IGNORE INTO anchor VALUES (1, 0);")
        .execute(&pool)
        .await
        .unwrap();
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed().as_secs_f64() < secs {
        sqlx::raw_sql("UPDATE anchor SET n = n + 1 WHERE id = 1").execute(&pool).await.unwrap();
        n += 1;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

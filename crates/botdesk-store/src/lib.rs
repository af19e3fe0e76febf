//! SQLite persistence (sqlx, WAL): workspaces, computers, bots. The engine is the only caller; this
//! crate knows nothing of Docker. Time comes in as an argument (`now_ms`) so tests control it.

mod chat;
mod desktops;
mod guardrails;
mod hosts;
mod leases;
mod mcp_servers;
mod models;
mod network;
mod questions;
mod spares;
pub use chat::{ActivityRow, MessageRow, ToolCallRow};
pub use desktops::Desktop;
pub use guardrails::BotLogin;
pub use hosts::HostRow;
pub use leases::*;
pub use mcp_servers::BotMcpServer;
pub use models::ModelRow;
pub use questions::Question;
pub use spares::{new_computer_id, Spare};

use botdesk_core::{state::ComputerState, BotId, ComputerId, ComputerRef, ComputerScope, HostName};
use serde::Serialize;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    SqlitePool,
};
use std::{collections::HashSet, path::Path, time::Duration};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Bringing an existing database up to this version failed; it was put back as it was.
    #[error("{0}")]
    Upgrade(String),
    #[error("{0} was not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Someone else holds what was asked for (a live lease, control, a reservation).
    #[error("{0}")]
    Busy(String),
    /// A run holds the bot: "Stop the bot first".
    #[error("{0}")]
    BotRunning(String),
    /// The computer already shows as many screens as it may.
    #[error("{0}")]
    ScreenLimit(String),
    /// The caller's lease or view is out of date (an older fence, an expired lease, a moved state).
    #[error("{0}")]
    Stale(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workspace {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Computer {
    pub id: ComputerId,
    pub name: String,
    pub scope: ComputerScope,
    pub home_key: String,
    pub provider: String,
    pub provider_ref: Option<String>,
    pub state: ComputerState,
    /// The volume holding its whole home (None: none yet, or its deletion started).
    pub home_volume: Option<String>,
    /// The Docker host it runs on.
    pub host: HostName,
}

impl Computer {
    /// How the provider finds it.
    pub fn cref(&self) -> ComputerRef {
        ComputerRef { id: self.id.clone(), host: self.host.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bot {
    pub id: BotId,
    pub name: String,
    pub computer_id: ComputerId,
    pub model: Option<String>,
    pub instructions: String,
    pub created_at: i64,
    /// Its own uid on a Team computer (see `BotUser`).
    pub uid: u32,
}

#[derive(Debug, Clone)]
pub struct NewBot<'a> {
    pub name: &'a str,
    pub scope: ComputerScope,
    pub model: Option<&'a str>,
    pub instructions: &'a str,
    pub provider: &'a str,
    /// The host a new computer goes on (an existing one is kept where it is).
    pub host: HostName,
}

#[derive(Clone)]
pub struct Store {
    pub(crate) pool: SqlitePool,
}

pub(crate) fn new_id() -> String {
    let mut b = [0u8; 6];
    getrandom(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Random bytes from the OS without another dependency.
fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf)).expect("/dev/urandom is readable");
}

/// Row shapes as sqlx reads them; converted to the domain types below.
struct ComputerRow {
    id: String,
    name: String,
    scope: String,
    home_key: String,
    provider: String,
    provider_ref: Option<String>,
    state: String,
    home_volume: Option<String>,
    host: String,
}

impl TryFrom<ComputerRow> for Computer {
    type Error = StoreError;
    fn try_from(r: ComputerRow) -> Result<Self> {
        Ok(Computer {
            scope: ComputerScope::parse(&r.scope).ok_or_else(|| StoreError::Conflict(format!("unknown scope {}", r.scope)))?,
            id: ComputerId::new(r.id),
            name: r.name,
            home_key: r.home_key,
            provider: r.provider,
            provider_ref: r.provider_ref,
            state: ComputerState::parse(&r.state).ok_or_else(|| StoreError::Conflict(format!("unknown computer state {}", r.state)))?,
            home_volume: r.home_volume,
            host: HostName::new(r.host),
        })
    }
}

struct BotRow {
    id: String,
    name: String,
    computer_id: String,
    model: Option<String>,
    instructions: String,
    created_at: i64,
    uid: i64,
}

impl From<BotRow> for Bot {
    fn from(r: BotRow) -> Self {
        Bot {
            id: BotId::new(r.id),
            name: r.name,
            computer_id: ComputerId::new(r.computer_id),
            model: r.model,
            instructions: r.instructions,
            created_at: r.created_at,
            uid: u32::try_from(r.uid).unwrap_or(0),
        }
    }
}

/// This version's schema: the migrations in `migrations/`, in order.
pub fn migrator() -> sqlx::migrate::Migrator {
    sqlx::migrate!("./migrations")
}

impl Store {
    /// A transaction that holds the write lock from its start (`BEGIN IMMEDIATE`). Every
    /// transaction here reads, then writes: a deferred one could not take the write lock after
    /// another connection's commit (SQLite answers "database is locked" at once, whatever the busy
    /// timeout), while this one waits for it within the busy timeout.
    pub(crate) async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Opens (creating if needed) the database in WAL mode with foreign keys and a busy timeout,
    /// and applies the embedded migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(opts).await?;
        Self::upgrade(&pool, path, &migrator()).await?;
        Ok(Self { pool })
    }

    /// Applies the migrations `pool` lacks. A database made by an earlier version is copied first
    /// (`VACUUM INTO` beside it); if a migration fails, the copy is put back, so the old database
    /// is as it was and the earlier version still opens it, and the error says so.
    async fn upgrade(pool: &SqlitePool, path: &Path, migrator: &sqlx::migrate::Migrator) -> Result<()> {
        let has_table =
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'").fetch_one(pool).await? > 0;
        let applied: HashSet<i64> = if has_table {
            sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations").fetch_all(pool).await?.into_iter().collect()
        } else {
            HashSet::new()
        };
        let pending: Vec<i64> = migrator.iter().map(|m| m.version).filter(|v| !applied.contains(v)).collect();
        if pending.is_empty() || applied.is_empty() {
            // Up to date, or new: nothing to keep.
            return Ok(migrator.run(pool).await?);
        }
        let copy = path.with_extension("db.before-upgrade");
        let _ = std::fs::remove_file(&copy);
        sqlx::query("VACUUM INTO ?1").bind(copy.to_string_lossy().into_owned()).execute(pool).await?;
        let Err(e) = migrator.run(pool).await else {
            let _ = std::fs::remove_file(&copy);
            return Ok(());
        };
        // Put the copy back: no connection may keep the half-upgraded file open.
        pool.close().await;
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let restored = std::fs::rename(&copy, path);
        Err(StoreError::Upgrade(match restored {
            Ok(()) => format!(
                "this version of Botdesk could not upgrade the database {} (to schema version {}): {e}. It was left as it was, so the earlier version still opens it.",
                path.display(),
                pending.last().unwrap_or(&0)
            ),
            Err(r) => format!(
                "this version of Botdesk could not upgrade the database {} ({e}), and putting back its copy failed too ({r}): the database as it was is in {}",
                path.display(),
                copy.display()
            ),
        }))
    }

    /// The default workspace, created on first use.
    pub async fn default_workspace(&self, now_ms: i64) -> Result<Workspace> {
        let id = new_id();
        sqlx::query!("INSERT INTO workspaces (id, name, created_at) VALUES (?1, 'default', ?2) ON CONFLICT(name) DO NOTHING", id, now_ms)
            .execute(&self.pool)
            .await?;
        let row = sqlx::query!(r#"SELECT id AS "id!", name FROM workspaces WHERE name = 'default'"#).fetch_one(&self.pool).await?;
        Ok(Workspace { id: row.id, name: row.name })
    }

    /// Creates a bot and, as needed, its computer (the workspace's Team computer, or a new Private
    /// one), in one transaction.
    pub async fn create_bot(&self, new: NewBot<'_>, now_ms: i64) -> Result<(Bot, Computer)> {
        let ws = self.default_workspace(now_ms).await?;
        let mut tx = self.write_tx().await?;
        if sqlx::query!("SELECT 1 AS one FROM bots WHERE name = ?1", new.name).fetch_optional(&mut *tx).await?.is_some() {
            return Err(StoreError::Conflict(format!("a bot named {:?} already exists", new.name)));
        }
        let bot_id = BotId::new(format!("b{}", new_id()));
        let computer = computer_for(&mut tx, &ws.id, new.scope, (&bot_id, new.name), new.provider, &new.host, now_ms).await?;
        let uid = sqlx::query_scalar!("UPDATE bot_uids SET last = last + 1 RETURNING last").fetch_one(&mut *tx).await?;
        let uid = u32::try_from(uid)
            .ok()
            .filter(|u| *u <= botdesk_core::BotUser::LAST_TEAM_UID)
            .ok_or_else(|| StoreError::Conflict("this data directory has given out every bot number it may (65,000 bots made): no bot can be added".into()))?;
        let bot = Bot {
            id: bot_id,
            name: new.name.to_string(),
            computer_id: computer.id.clone(),
            model: new.model.map(str::to_string),
            instructions: new.instructions.to_string(),
            created_at: now_ms,
            uid,
        };
        let (bid, cid) = (bot.id.as_str(), bot.computer_id.as_str());
        sqlx::query!(
            "INSERT INTO bots (id, workspace_id, name, computer_id, model, instructions, created_at, uid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            bid,
            ws.id,
            bot.name,
            cid,
            bot.model,
            bot.instructions,
            now_ms,
            uid
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((bot, computer))
    }

    /// Gives a bot another name (no other bot may have it).
    pub async fn rename_bot(&self, bot: &BotId, name: &str) -> Result<()> {
        let b = bot.as_str();
        let mut tx = self.write_tx().await?;
        if sqlx::query!("SELECT 1 AS one FROM bots WHERE name = ?1 AND id != ?2", name, b).fetch_optional(&mut *tx).await?.is_some() {
            return Err(StoreError::Conflict(format!("a bot named {name:?} already exists")));
        }
        let done = sqlx::query!("UPDATE bots SET name = ?2 WHERE id = ?1", b, name).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("bot {b}")));
        }
        tx.commit().await?;
        Ok(())
    }

    /// Gives a bot another model (a model that exists: the reference is checked).
    pub async fn set_bot_model(&self, bot: &BotId, model: &str) -> Result<()> {
        let b = bot.as_str();
        let done = sqlx::query!("UPDATE bots SET model = ?2 WHERE id = ?1", b, model).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("bot {b}")));
        }
        Ok(())
    }

    /// The computer `bot` would work on with `scope`: the workspace's Team computer, or the bot's
    /// own Private computer (kept from an earlier switch). Created, stopped, when there is none.
    pub async fn home_computer(&self, bot: &Bot, scope: ComputerScope, provider: &str, host: &HostName, now_ms: i64) -> Result<Computer> {
        let ws = self.default_workspace(now_ms).await?;
        let mut tx = self.write_tx().await?;
        let c = computer_for(&mut tx, &ws.id, scope, (&bot.id, &bot.name), provider, host, now_ms).await?;
        tx.commit().await?;
        Ok(c)
    }

    /// Moves a bot to another computer (a Team/Private switch). `from` must still be its computer.
    pub async fn move_bot(&self, bot: &BotId, from: &ComputerId, to: &ComputerId) -> Result<()> {
        let (bid, f, t) = (bot.as_str(), from.as_str(), to.as_str());
        let moved = sqlx::query!("UPDATE bots SET computer_id = ?1 WHERE id = ?2 AND computer_id = ?3", t, bid, f).execute(&self.pool).await?;
        if moved.rows_affected() == 0 {
            return Err(StoreError::Stale(format!("bot {bot} is no longer on computer {from}")));
        }
        Ok(())
    }

    /// The Private computer that belongs to a bot (the one it works on, or the one it keeps while
    /// on the Team computer).
    pub async fn private_computer_of(&self, bot: &BotId) -> Result<Option<Computer>> {
        let bid = bot.as_str();
        sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers WHERE scope = 'private' AND owner_bot = ?1"#,
            bid
        )
        .fetch_optional(&self.pool)
        .await?
        .map(Computer::try_from)
        .transpose()
    }

    pub async fn list_bots(&self) -> Result<Vec<Bot>> {
        let rows =
            sqlx::query_as!(BotRow, r#"SELECT id AS "id!", name, computer_id, model, instructions, created_at, uid FROM bots ORDER BY created_at, name"#)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(Bot::from).collect())
    }

    /// A bot by name (case-insensitive) or id.
    pub async fn bot(&self, name_or_id: &str) -> Result<Bot> {
        sqlx::query_as!(
            BotRow,
            r#"SELECT id AS "id!", name, computer_id, model, instructions, created_at, uid FROM bots WHERE name = ?1 OR id = ?1"#,
            name_or_id
        )
        .fetch_optional(&self.pool)
        .await?
        .map(Bot::from)
        .ok_or_else(|| StoreError::NotFound(format!("bot {name_or_id:?}")))
    }

    /// Deletes a bot and the Private computer it owns (their homes stay on disk). Returns the
    /// computer rows that were deleted.
    pub async fn delete_bot(&self, id: &BotId) -> Result<Vec<Computer>> {
        let bid = id.as_str();
        let mut tx = self.write_tx().await?;
        if sqlx::query!("SELECT 1 AS one FROM bots WHERE id = ?1", bid).fetch_optional(&mut *tx).await?.is_none() {
            return Err(StoreError::NotFound(format!("bot {id}")));
        }
        sqlx::query!("DELETE FROM bots WHERE id = ?1", bid).execute(&mut *tx).await?;
        let rows = sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers WHERE scope = 'private' AND owner_bot = ?1
               AND NOT EXISTS (SELECT 1 FROM bots WHERE computer_id = computers.id)"#,
            bid
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut removed = vec![];
        for r in rows {
            let c = Computer::try_from(r)?;
            let cid = c.id.as_str();
            sqlx::query!("DELETE FROM computers WHERE id = ?1", cid).execute(&mut *tx).await?;
            removed.push(c);
        }
        tx.commit().await?;
        Ok(removed)
    }

    pub async fn list_computers(&self) -> Result<Vec<Computer>> {
        let rows = sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers ORDER BY created_at, name"#
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(Computer::try_from).collect()
    }

    /// A computer by id or name.
    pub async fn computer(&self, id_or_name: &str) -> Result<Computer> {
        sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers WHERE id = ?1 OR name = ?1"#,
            id_or_name
        )
        .fetch_optional(&self.pool)
        .await?
        .map(Computer::try_from)
        .transpose()?
        .ok_or_else(|| StoreError::NotFound(format!("computer {id_or_name:?}")))
    }

    pub async fn bots_on(&self, computer: &ComputerId) -> Result<Vec<Bot>> {
        let cid = computer.as_str();
        let rows = sqlx::query_as!(
            BotRow,
            r#"SELECT id AS "id!", name, computer_id, model, instructions, created_at, uid FROM bots WHERE computer_id = ?1 ORDER BY created_at"#,
            cid
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Bot::from).collect())
    }

    /// Records what the provider reported (reconcile and start-up); lifecycle transitions go
    /// through [`Store::transition_computer`].
    pub async fn set_computer_state(&self, id: &ComputerId, state: ComputerState, provider_ref: Option<&str>, now_ms: i64) -> Result<()> {
        let cid = id.as_str();
        let state = state.as_str();
        sqlx::query!(
            "UPDATE computers SET state = ?1, provider_ref = COALESCE(?2, provider_ref), updated_at = ?3, generation = generation + 1 WHERE id = ?4",
            state,
            provider_ref,
            now_ms,
            cid
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records the volume holding a computer's whole home, or (None) that its deletion starts.
    pub async fn set_home_volume(&self, id: &ComputerId, volume: Option<&str>, now_ms: i64) -> Result<()> {
        let cid = id.as_str();
        sqlx::query!("UPDATE computers SET home_volume = ?1, updated_at = ?2 WHERE id = ?3", volume, now_ms, cid).execute(&self.pool).await?;
        Ok(())
    }

    /// Records whether the computer's home volume holds exactly its latest checkpoint version (it
    /// stopped after one), or may hold more (it started since).
    pub async fn set_home_saved(&self, id: &ComputerId, saved: bool) -> Result<()> {
        let cid = id.as_str();
        sqlx::query!("UPDATE computers SET home_saved = ?1 WHERE id = ?2", saved, cid).execute(&self.pool).await?;
        Ok(())
    }

    /// Whether the computer's home volume holds exactly its latest checkpoint version.
    pub async fn home_saved(&self, id: &ComputerId) -> Result<bool> {
        let cid = id.as_str();
        Ok(sqlx::query!(r#"SELECT home_saved AS "saved: bool" FROM computers WHERE id = ?1"#, cid).fetch_one(&self.pool).await?.saved)
    }

    /// Last activity on a computer (ms), for idle suspend.
    pub async fn last_active(&self, id: &ComputerId) -> Result<i64> {
        let cid = id.as_str();
        Ok(sqlx::query!("SELECT last_active_at FROM computers WHERE id = ?1", cid).fetch_one(&self.pool).await?.last_active_at)
    }
}

/// Finds or creates (stopped) the computer a bot (id, name) of `scope` works on, inside a
/// transaction: a new one goes on `host`.
async fn computer_for(
    tx: &mut sqlx::SqliteConnection,
    ws: &str,
    scope: ComputerScope,
    (bot, bot_name): (&BotId, &str),
    provider: &str,
    host: &HostName,
    now_ms: i64,
) -> Result<Computer> {
    let bid = bot.as_str();
    let host_name = host.as_str();
    let existing = match scope {
        ComputerScope::Team => sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers WHERE workspace_id = ?1 AND scope = 'team' AND host = ?2"#,
            ws,
            host_name
        )
        .fetch_optional(&mut *tx)
        .await?,
        ComputerScope::Private => sqlx::query_as!(
            ComputerRow,
            r#"SELECT id AS "id!", name, scope, home_key, provider, provider_ref, state, home_volume, host FROM computers WHERE scope = 'private' AND owner_bot = ?1"#,
            bid
        )
        .fetch_optional(&mut *tx)
        .await?,
    };
    if let Some(row) = existing {
        return Computer::try_from(row);
    }
    // A spare on the host becomes this computer: its id and home volume (made and started already).
    let (id, home_volume) = match spares::take(tx, host).await? {
        Some((id, volume)) => (id, Some(volume)),
        None => (new_computer_id().to_string(), None),
    };
    let (name, owner) = match scope {
        // One Team computer per host: `team` here, `team-NAME` on host NAME.
        ComputerScope::Team if host.is_local() => ("team".to_string(), None),
        ComputerScope::Team => (format!("team-{host}"), None),
        ComputerScope::Private => (format!("private-{}", bot_name.to_lowercase()), Some(bid)),
    };
    let scope_str = scope.as_str();
    sqlx::query!(
        "INSERT INTO computers (id, workspace_id, name, scope, home_key, provider, state, owner_bot, created_at, updated_at, host, home_volume)
         VALUES (?1, ?2, ?3, ?4, ?1, ?5, 'stopped', ?6, ?7, ?7, ?8, ?9)",
        id,
        ws,
        name,
        scope_str,
        provider,
        owner,
        now_ms,
        host_name,
        home_volume
    )
    .execute(&mut *tx)
    .await
    .map_err(|e| match e {
        sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(format!("a computer named {name:?} already exists")),
        e => e.into(),
    })?;
    Ok(Computer {
        id: ComputerId::new(id.clone()),
        name,
        scope,
        home_key: id,
        provider: provider.to_string(),
        provider_ref: None,
        state: ComputerState::Stopped,
        home_volume,
        host: host.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        (Store::open(&dir.path().join("botdesk.db")).await.unwrap(), dir)
    }

    fn new(name: &str, scope: ComputerScope) -> NewBot<'_> {
        NewBot { name, scope, model: None, instructions: "", provider: "fake", host: HostName::local() }
    }

    #[tokio::test]
    async fn team_bots_share_one_computer_private_bots_get_their_own() {
        let (s, _d) = store().await;
        let (a, ca) = s.create_bot(new("alpha", ComputerScope::Team), 1).await.unwrap();
        let (b, cb) = s.create_bot(new("beta", ComputerScope::Team), 2).await.unwrap();
        let (_, cp) = s.create_bot(new("gamma", ComputerScope::Private), 3).await.unwrap();
        assert_eq!(ca.id, cb.id);
        assert_ne!(ca.id, cp.id);
        assert_eq!(cp.name, "private-gamma");
        assert_eq!(s.list_bots().await.unwrap().len(), 3);
        assert_eq!(s.bots_on(&ca.id).await.unwrap().iter().map(|b| b.id.clone()).collect::<Vec<_>>(), vec![a.id.clone(), b.id.clone()]);
        assert_eq!(s.bot("ALPHA").await.unwrap().id, a.id, "names are case-insensitive");
    }

    #[tokio::test]
    async fn duplicate_names_conflict_and_nothing_is_half_written() {
        let (s, _d) = store().await;
        s.create_bot(new("alpha", ComputerScope::Private), 1).await.unwrap();
        let err = s.create_bot(new("Alpha", ComputerScope::Private), 2).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err}");
        assert_eq!(s.list_computers().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn deleting_the_last_bot_of_a_private_computer_deletes_that_computer_only() {
        let (s, _d) = store().await;
        let (t, _) = s.create_bot(new("t", ComputerScope::Team), 1).await.unwrap();
        let (p, pc) = s.create_bot(new("p", ComputerScope::Private), 2).await.unwrap();
        assert_eq!(s.delete_bot(&t.id).await.unwrap(), vec![], "the Team computer stays");
        assert_eq!(s.delete_bot(&p.id).await.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>(), vec![pc.id]);
        assert_eq!(s.list_computers().await.unwrap().len(), 1);
        assert!(matches!(s.delete_bot(&p.id).await, Err(StoreError::NotFound(_))));
    }

    #[tokio::test]
    async fn a_bot_switched_between_team_and_private_keeps_one_private_computer_that_goes_with_it() {
        let (s, _d) = store().await;
        let (b, team) = s.create_bot(new("b", ComputerScope::Team), 1).await.unwrap();
        let private = s.home_computer(&b, ComputerScope::Private, "fake", &HostName::local(), 2).await.unwrap();
        assert_eq!((private.scope, private.name.as_str()), (ComputerScope::Private, "private-b"));
        s.move_bot(&b.id, &team.id, &private.id).await.unwrap();
        assert!(matches!(s.move_bot(&b.id, &team.id, &private.id).await, Err(StoreError::Stale(_))), "a second move from the old computer is stale");
        let b = s.bot("b").await.unwrap();
        assert_eq!(s.home_computer(&b, ComputerScope::Team, "fake", &HostName::local(), 3).await.unwrap().id, team.id, "the one Team computer");
        s.move_bot(&b.id, &private.id, &team.id).await.unwrap();
        let b = s.bot("b").await.unwrap();
        assert_eq!(s.home_computer(&b, ComputerScope::Private, "fake", &HostName::local(), 4).await.unwrap().id, private.id, "its Private computer is kept");
        assert_eq!(s.list_computers().await.unwrap().len(), 2);
        assert_eq!(s.private_computer_of(&b.id).await.unwrap().map(|c| c.id), Some(private.id.clone()));
        assert_eq!(
            s.delete_bot(&b.id).await.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>(),
            vec![private.id],
            "its kept Private computer goes with it"
        );
        assert_eq!(s.list_computers().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn state_updates_and_reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("botdesk.db");
        let c = {
            let s = Store::open(&path).await.unwrap();
            let (_, c) = s.create_bot(new("alpha", ComputerScope::Team), 1).await.unwrap();
            s.set_computer_state(&c.id, ComputerState::Running, Some("abc"), 5).await.unwrap();
            c
        };
        let s = Store::open(&path).await.unwrap();
        let again = s.computer(c.id.as_str()).await.unwrap();
        assert_eq!((again.state.as_str(), again.provider_ref.as_deref()), ("running", Some("abc")));
        assert_eq!(s.computer("team").await.unwrap().id, c.id);
    }
}

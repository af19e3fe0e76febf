//! SQLite persistence (sqlx, WAL): workspaces, computers, bots. The engine is the only caller; this
//! crate knows nothing of Docker. Time comes in as an argument (`now_ms`) so tests control it.

use botdesk_core::{BotId, ComputerId, ComputerScope};
use serde::Serialize;
use sqlx::{
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
    Row, SqlitePool,
};
use std::{path::Path, time::Duration};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} was not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
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
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bot {
    pub id: BotId,
    pub name: String,
    pub computer_id: ComputerId,
    pub model: Option<String>,
    pub instructions: String,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewBot<'a> {
    pub name: &'a str,
    pub scope: ComputerScope,
    pub model: Option<&'a str>,
    pub instructions: &'a str,
    pub provider: &'a str,
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

fn new_id() -> String {
    let mut b = [0u8; 6];
    getrandom(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Random bytes from the OS without another dependency.
fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf)).expect("/dev/urandom is readable");
}

fn computer_from(row: &sqlx::sqlite::SqliteRow) -> Result<Computer> {
    let scope: String = row.try_get("scope")?;
    Ok(Computer {
        id: ComputerId::new(row.try_get::<String, _>("id")?),
        name: row.try_get("name")?,
        scope: ComputerScope::parse(&scope).ok_or_else(|| StoreError::Conflict(format!("unknown scope {scope}")))?,
        home_key: row.try_get("home_key")?,
        provider: row.try_get("provider")?,
        provider_ref: row.try_get("provider_ref")?,
        state: row.try_get("state")?,
    })
}

fn bot_from(row: &sqlx::sqlite::SqliteRow) -> Result<Bot> {
    Ok(Bot {
        id: BotId::new(row.try_get::<String, _>("id")?),
        name: row.try_get("name")?,
        computer_id: ComputerId::new(row.try_get::<String, _>("computer_id")?),
        model: row.try_get("model")?,
        instructions: row.try_get("instructions")?,
        created_at: row.try_get("created_at")?,
    })
}

// Column lists as macros so every query stays one static string (sqlx refuses dynamic SQL).
macro_rules! computer_cols {
    () => {
        "id, name, scope, home_key, provider, provider_ref, state"
    };
}
macro_rules! bot_cols {
    () => {
        "id, name, computer_id, model, instructions, created_at"
    };
}

impl Store {
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
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self { pool })
    }

    /// The default workspace, created on first use.
    pub async fn default_workspace(&self, now_ms: i64) -> Result<Workspace> {
        sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES (?, 'default', ?) ON CONFLICT(name) DO NOTHING")
            .bind(new_id())
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        let row = sqlx::query("SELECT id, name FROM workspaces WHERE name = 'default'").fetch_one(&self.pool).await?;
        Ok(Workspace { id: row.try_get("id")?, name: row.try_get("name")? })
    }

    /// Creates a bot and, as needed, its computer (the workspace's Team computer, or a new Private
    /// one), in one transaction.
    pub async fn create_bot(&self, new: NewBot<'_>, now_ms: i64) -> Result<(Bot, Computer)> {
        let ws = self.default_workspace(now_ms).await?;
        let mut tx = self.pool.begin().await?;
        if sqlx::query("SELECT 1 FROM bots WHERE name = ?").bind(new.name).fetch_optional(&mut *tx).await?.is_some() {
            return Err(StoreError::Conflict(format!("a bot named {:?} already exists", new.name)));
        }
        let existing_team = match new.scope {
            ComputerScope::Team => sqlx::query(concat!("SELECT ", computer_cols!(), " FROM computers WHERE workspace_id = ? AND scope = 'team'"))
                .bind(&ws.id)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| computer_from(&r))
                .transpose()?,
            ComputerScope::Private => None,
        };
        let computer = match existing_team {
            Some(c) => c,
            None => {
                let id = format!("c{}", new_id());
                let name = match new.scope {
                    ComputerScope::Team => "team".to_string(),
                    ComputerScope::Private => format!("private-{}", new.name.to_lowercase()),
                };
                sqlx::query(
                    "INSERT INTO computers (id, workspace_id, name, scope, home_key, provider, state, created_at, updated_at)
                     VALUES (?, ?, ?, ?, ?, ?, 'stopped', ?, ?)",
                )
                .bind(&id)
                .bind(&ws.id)
                .bind(&name)
                .bind(new.scope.as_str())
                .bind(&id)
                .bind(new.provider)
                .bind(now_ms)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(|e| match e {
                    sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(format!("a computer named {name:?} already exists")),
                    e => e.into(),
                })?;
                Computer {
                    id: ComputerId::new(id.clone()),
                    name,
                    scope: new.scope,
                    home_key: id,
                    provider: new.provider.to_string(),
                    provider_ref: None,
                    state: "stopped".into(),
                }
            }
        };
        let bot = Bot {
            id: BotId::new(format!("b{}", new_id())),
            name: new.name.to_string(),
            computer_id: computer.id.clone(),
            model: new.model.map(str::to_string),
            instructions: new.instructions.to_string(),
            created_at: now_ms,
        };
        sqlx::query("INSERT INTO bots (id, workspace_id, name, computer_id, model, instructions, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)")
            .bind(bot.id.as_str())
            .bind(&ws.id)
            .bind(&bot.name)
            .bind(bot.computer_id.as_str())
            .bind(&bot.model)
            .bind(&bot.instructions)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((bot, computer))
    }

    pub async fn list_bots(&self) -> Result<Vec<Bot>> {
        let rows = sqlx::query(concat!("SELECT ", bot_cols!(), " FROM bots ORDER BY created_at, name")).fetch_all(&self.pool).await?;
        rows.iter().map(bot_from).collect()
    }

    /// A bot by name (case-insensitive) or id.
    pub async fn bot(&self, name_or_id: &str) -> Result<Bot> {
        let row = sqlx::query(concat!("SELECT ", bot_cols!(), " FROM bots WHERE name = ? OR id = ?"))
            .bind(name_or_id)
            .bind(name_or_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("bot {name_or_id:?}")))?;
        bot_from(&row)
    }

    /// Deletes a bot; a Private computer left without bots goes with it (its home stays on disk).
    /// Returns the computer row that was deleted, if any.
    pub async fn delete_bot(&self, id: &BotId) -> Result<Option<Computer>> {
        let mut tx = self.pool.begin().await?;
        let bot = sqlx::query(concat!("SELECT ", bot_cols!(), " FROM bots WHERE id = ?"))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("bot {id}")))?;
        let bot = bot_from(&bot)?;
        sqlx::query("DELETE FROM bots WHERE id = ?").bind(id.as_str()).execute(&mut *tx).await?;
        let row = sqlx::query(concat!("SELECT ", computer_cols!(), " FROM computers WHERE id = ? AND scope = 'private'
             AND NOT EXISTS (SELECT 1 FROM bots WHERE computer_id = computers.id)"))
        .bind(bot.computer_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let removed = match row {
            Some(r) => {
                let c = computer_from(&r)?;
                sqlx::query("DELETE FROM computers WHERE id = ?").bind(c.id.as_str()).execute(&mut *tx).await?;
                Some(c)
            }
            None => None,
        };
        tx.commit().await?;
        Ok(removed)
    }

    pub async fn list_computers(&self) -> Result<Vec<Computer>> {
        let rows = sqlx::query(concat!("SELECT ", computer_cols!(), " FROM computers ORDER BY created_at, name")).fetch_all(&self.pool).await?;
        rows.iter().map(computer_from).collect()
    }

    /// A computer by id or name.
    pub async fn computer(&self, id_or_name: &str) -> Result<Computer> {
        let row = sqlx::query(concat!("SELECT ", computer_cols!(), " FROM computers WHERE id = ? OR name = ?"))
            .bind(id_or_name)
            .bind(id_or_name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("computer {id_or_name:?}")))?;
        computer_from(&row)
    }

    pub async fn bots_on(&self, computer: &ComputerId) -> Result<Vec<Bot>> {
        let rows = sqlx::query(concat!("SELECT ", bot_cols!(), " FROM bots WHERE computer_id = ? ORDER BY created_at"))
            .bind(computer.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(bot_from).collect()
    }

    /// Records what the provider reported. (Checked state transitions arrive with the lease engine.)
    pub async fn set_computer_state(&self, id: &ComputerId, state: &str, provider_ref: Option<&str>, now_ms: i64) -> Result<()> {
        sqlx::query("UPDATE computers SET state = ?, provider_ref = COALESCE(?, provider_ref), updated_at = ? WHERE id = ?")
            .bind(state)
            .bind(provider_ref)
            .bind(now_ms)
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        (Store::open(&dir.path().join("botdesk.db")).await.unwrap(), dir)
    }

    fn new(name: &str, scope: ComputerScope) -> NewBot<'_> {
        NewBot { name, scope, model: None, instructions: "", provider: "fake" }
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
        assert_eq!(s.delete_bot(&t.id).await.unwrap(), None, "the Team computer stays");
        assert_eq!(s.delete_bot(&p.id).await.unwrap().map(|c| c.id), Some(pc.id));
        assert_eq!(s.list_computers().await.unwrap().len(), 1);
        assert!(matches!(s.delete_bot(&p.id).await, Err(StoreError::NotFound(_))));
    }

    #[tokio::test]
    async fn state_updates_and_reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("botdesk.db");
        let c = {
            let s = Store::open(&path).await.unwrap();
            let (_, c) = s.create_bot(new("alpha", ComputerScope::Team), 1).await.unwrap();
            s.set_computer_state(&c.id, "running", Some("abc"), 5).await.unwrap();
            c
        };
        let s = Store::open(&path).await.unwrap();
        let again = s.computer(c.id.as_str()).await.unwrap();
        assert_eq!((again.state.as_str(), again.provider_ref.as_deref()), ("running", Some("abc")));
        assert_eq!(s.computer("team").await.unwrap().id, c.id);
    }
}

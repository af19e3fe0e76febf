//! A bot's chat (messages and tool calls of its runs) and its activity (what it did on its
//! computer). Everything here was redacted by the engine before it was written.

use serde::Serialize;

use botdesk_core::{ActivityStatus, BotId, MessageRole};

use crate::{Result, Store, StoreError};

/// A tool call with its result (`result` is JSON written by the engine; None while running).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallRow {
    pub id: String,
    pub message_id: i64,
    pub name: String,
    pub arguments: String,
    pub result: Option<String>,
    pub is_error: bool,
}

/// One chat message; `content` is JSON written by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageRow {
    pub id: i64,
    pub run_id: String,
    pub role: MessageRole,
    pub content: String,
    pub created_at: i64,
}

/// A message as SQLite holds it (the column's CHECK allows only roles `parse` knows, and `tool`,
/// which no version wrote).
struct MessageText {
    id: i64,
    run_id: String,
    role: String,
    content: String,
    created_at: i64,
}

impl From<MessageText> for MessageRow {
    fn from(m: MessageText) -> Self {
        MessageRow {
            id: m.id,
            run_id: m.run_id,
            role: MessageRole::parse(&m.role).unwrap_or(MessageRole::System),
            content: m.content,
            created_at: m.created_at,
        }
    }
}

/// What a bot did on its computer: `kind` is the tool's name, `target` its command or path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ActivityRow {
    pub id: i64,
    pub bot_id: String,
    pub run_id: Option<String>,
    pub kind: String,
    pub target: String,
    pub status: ActivityStatus,
    pub exit_code: Option<i64>,
    pub output_tail: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An activity row as SQLite holds it (only the engine writes the status, from the enum).
struct ActivityText {
    id: i64,
    bot_id: String,
    run_id: Option<String>,
    kind: String,
    target: String,
    status: String,
    exit_code: Option<i64>,
    output_tail: String,
    created_at: i64,
    updated_at: i64,
}

impl From<ActivityText> for ActivityRow {
    fn from(a: ActivityText) -> Self {
        ActivityRow {
            id: a.id,
            bot_id: a.bot_id,
            run_id: a.run_id,
            kind: a.kind,
            target: a.target,
            status: ActivityStatus::parse(&a.status).unwrap_or(ActivityStatus::Error),
            exit_code: a.exit_code,
            output_tail: a.output_tail,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

impl Store {
    pub async fn add_message(&self, run_id: &str, role: MessageRole, content: &str, now: i64) -> Result<i64> {
        let role = role.as_str();
        let done = sqlx::query!("INSERT INTO messages (run_id, role, content, created_at) VALUES (?1, ?2, ?3, ?4)", run_id, role, content, now)
            .execute(&self.pool)
            .await?;
        Ok(done.last_insert_rowid())
    }

    /// Records a tool call as started; `id` must be unique (the engine prefixes the run id).
    pub async fn add_tool_call(&self, id: &str, run_id: &str, message_id: i64, name: &str, arguments: &str, now: i64) -> Result<()> {
        sqlx::query!(
            "INSERT INTO tool_calls (id, run_id, message_id, name, arguments, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            id,
            run_id,
            message_id,
            name,
            arguments,
            now
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn finish_tool_call(&self, id: &str, result: &str, is_error: bool, now: i64) -> Result<()> {
        let done = sqlx::query!("UPDATE tool_calls SET result = ?1, is_error = ?2, finished_at = ?3 WHERE id = ?4", result, is_error, now, id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("tool call {id}")));
        }
        Ok(())
    }

    /// The latest `limit` messages of a bot's chat, oldest first.
    pub async fn messages_of(&self, bot: &BotId, limit: i64) -> Result<Vec<MessageRow>> {
        let b = bot.as_str();
        let mut rows = sqlx::query_as!(
            MessageText,
            r#"SELECT m.id AS "id!", m.run_id, m.role, m.content, m.created_at FROM messages m JOIN runs r ON r.id = m.run_id
               WHERE r.bot_id = ?1 ORDER BY m.id DESC LIMIT ?2"#,
            b,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        rows.reverse();
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// The messages of a bot's latest `runs` runs that have any, oldest first.
    pub async fn messages_of_runs(&self, bot: &BotId, runs: i64) -> Result<Vec<MessageRow>> {
        let b = bot.as_str();
        let rows = sqlx::query_as!(
            MessageText,
            r#"SELECT m.id AS "id!", m.run_id, m.role, m.content, m.created_at FROM messages m
               WHERE m.run_id IN (SELECT r.id FROM runs r WHERE r.bot_id = ?1 AND EXISTS (SELECT 1 FROM messages x WHERE x.run_id = r.id)
                                  ORDER BY r.created_at DESC, r.rowid DESC LIMIT ?2)
               ORDER BY m.id"#,
            b,
            runs
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Tool calls of the messages from `first_message` on, of one bot.
    pub async fn tool_calls_of(&self, bot: &BotId, first_message: i64) -> Result<Vec<ToolCallRow>> {
        let b = bot.as_str();
        Ok(sqlx::query_as!(
            ToolCallRow,
            r#"SELECT t.id AS "id!", t.message_id AS "message_id!", t.name, t.arguments, t.result, t.is_error AS "is_error: bool"
               FROM tool_calls t JOIN runs r ON r.id = t.run_id
               WHERE r.bot_id = ?1 AND t.message_id >= ?2 ORDER BY t.created_at, t.rowid"#,
            b,
            first_message
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Starts an activity entry (status `running`, or already final for one-line entries).
    pub async fn add_activity(&self, bot: &BotId, run_id: Option<&str>, kind: &str, target: &str, status: ActivityStatus, now: i64) -> Result<i64> {
        let b = bot.as_str();
        let status = status.as_str();
        let done = sqlx::query!(
            "INSERT INTO activity (bot_id, run_id, kind, target, status, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
            b,
            run_id,
            kind,
            target,
            status,
            now
        )
        .execute(&self.pool)
        .await?;
        Ok(done.last_insert_rowid())
    }

    /// Ends an entry. Only a `running` entry changes, so a late update never overwrites an end.
    pub async fn finish_activity(&self, id: i64, status: ActivityStatus, exit_code: Option<i64>, output_tail: &str, now: i64) -> Result<bool> {
        let status = status.as_str();
        let done = sqlx::query!(
            "UPDATE activity SET status = ?1, exit_code = ?2, output_tail = ?3, updated_at = ?4 WHERE id = ?5 AND status = 'running'",
            status,
            exit_code,
            output_tail,
            now,
            id
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// A bot's latest `limit` activity entries, oldest first.
    pub async fn latest_activity(&self, bot: &BotId, limit: i64) -> Result<Vec<ActivityRow>> {
        let b = bot.as_str();
        let mut rows = sqlx::query_as!(
            ActivityText,
            r#"SELECT id AS "id!", bot_id, run_id, kind, target, status, exit_code, output_tail, created_at, updated_at
               FROM activity WHERE bot_id = ?1 ORDER BY id DESC LIMIT ?2"#,
            b,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        rows.reverse();
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// A run's activity entries of one kind, oldest first (at most 1,000).
    pub async fn run_activity(&self, run: &str, kind: &str) -> Result<Vec<ActivityRow>> {
        let rows = sqlx::query_as!(
            ActivityText,
            r#"SELECT id AS "id!", bot_id, run_id, kind, target, status, exit_code, output_tail, created_at, updated_at
               FROM activity WHERE run_id = ?1 AND kind = ?2 ORDER BY id LIMIT 1000"#,
            run,
            kind
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// A bot's activity entries with an id above `after`, oldest first.
    pub async fn activity_of(&self, bot: &BotId, after: i64, limit: i64) -> Result<Vec<ActivityRow>> {
        let b = bot.as_str();
        let rows = sqlx::query_as!(
            ActivityText,
            r#"SELECT id AS "id!", bot_id, run_id, kind, target, status, exit_code, output_tail, created_at, updated_at
               FROM activity WHERE bot_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"#,
            b,
            after,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }
}

/// A token count as stored (SQLite integers are signed).
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn usage_of(input: Option<i64>, output: Option<i64>, cache_read: Option<i64>, cache_write: Option<i64>) -> botdesk_core::Usage {
    let n = |v: Option<i64>| v.unwrap_or(0).max(0) as u64;
    botdesk_core::Usage { input: n(input), output: n(output), cache_read: n(cache_read), cache_write: n(cache_write) }
}

impl Store {
    /// Records what one model call of a run cost: tokens, and dollars when its prices are known.
    pub async fn add_model_call(&self, run_id: &str, u: &botdesk_core::Usage, cost_usd: Option<f64>, now: i64) -> Result<()> {
        let (i, o, r, w) = (stored(u.input), stored(u.output), stored(u.cache_read), stored(u.cache_write));
        sqlx::query!(
            "INSERT INTO model_calls (run_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            run_id, i, o, r, w, cost_usd, now
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// What a run's model calls cost together: tokens, and dollars when every call's is known.
    pub async fn run_usage(&self, run_id: &str) -> Result<(botdesk_core::Usage, Option<f64>)> {
        let r = sqlx::query!(
            r#"SELECT SUM(input_tokens) AS "i: i64", SUM(output_tokens) AS "o: i64", SUM(cache_read_tokens) AS "r: i64", SUM(cache_write_tokens) AS "w: i64",
                      SUM(cost_usd) AS "usd: f64", COUNT(*) - COUNT(cost_usd) AS "unknown!: i64"
               FROM model_calls WHERE run_id = ?1"#,
            run_id
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((usage_of(r.i, r.o, r.r, r.w), if r.unknown == 0 { Some(r.usd.unwrap_or(0.0)) } else { None }))
    }

    /// What each of a bot's failed runs failed of, by run id.
    pub async fn run_failures(&self, bot: &BotId) -> Result<std::collections::HashMap<String, botdesk_core::RunFailure>> {
        let b = bot.as_str();
        let rows =
            sqlx::query!(r#"SELECT id AS "id!", failure AS "failure!" FROM runs WHERE bot_id = ?1 AND failure IS NOT NULL"#, b).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().filter_map(|r| botdesk_core::RunFailure::parse(&r.failure).map(|f| (r.id, f))).collect())
    }

    /// What each of a bot's runs cost (those with model calls), by run id: as [`Store::run_usage`].
    pub async fn run_usages(&self, bot: &BotId) -> Result<std::collections::HashMap<String, (botdesk_core::Usage, Option<f64>)>> {
        let b = bot.as_str();
        let rows = sqlx::query!(
            r#"SELECT m.run_id AS "run_id!", SUM(m.input_tokens) AS "i?: i64", SUM(m.output_tokens) AS "o?: i64", SUM(m.cache_read_tokens) AS "r?: i64", SUM(m.cache_write_tokens) AS "w?: i64",
                      SUM(m.cost_usd) AS "usd?: f64", COUNT(*) - COUNT(m.cost_usd) AS "unknown!: i64"
               FROM model_calls m JOIN runs r ON r.id = m.run_id WHERE r.bot_id = ?1 GROUP BY m.run_id"#,
            b
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.run_id, (usage_of(r.i, r.o, r.r, r.w), if r.unknown == 0 { Some(r.usd.unwrap_or(0.0)) } else { None }))).collect())
    }

    /// A model's prices, when known.
    pub async fn model_prices(&self, model_id: &str) -> Result<Option<botdesk_core::Prices>> {
        let r = sqlx::query!(r#"SELECT input AS "input: f64", output AS "output: f64", cache_read AS "cache_read: f64", cache_write AS "cache_write: f64" FROM model_prices WHERE model_id = ?1"#, model_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(r.map(|r| botdesk_core::Prices { input: r.input, output: r.output, cache_read: r.cache_read, cache_write: r.cache_write }))
    }

    /// Sets (or with None, forgets) a model's prices.
    pub async fn set_model_prices(&self, model_id: &str, p: Option<&botdesk_core::Prices>) -> Result<()> {
        match p {
            Some(p) => {
                sqlx::query!(
                    "INSERT INTO model_prices (model_id, input, output, cache_read, cache_write) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (model_id) DO UPDATE SET input = ?2, output = ?3, cache_read = ?4, cache_write = ?5",
                    model_id,
                    p.input,
                    p.output,
                    p.cache_read,
                    p.cache_write
                )
                .execute(&self.pool)
                .await?;
            }
            None => {
                sqlx::query!("DELETE FROM model_prices WHERE model_id = ?1", model_id).execute(&self.pool).await?;
            }
        }
        Ok(())
    }

    /// A model's context window and output per call, when set.
    pub async fn model_limits(&self, model_id: &str) -> Result<Option<botdesk_core::Limits>> {
        let r =
            sqlx::query!(r#"SELECT context_window AS "c: i64", max_output AS "o: i64", thinking AS "t: i64" FROM model_limits WHERE model_id = ?1"#, model_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(r.map(|r| botdesk_core::Limits {
            context_window: r.c.max(1) as u64,
            max_output: r.o.max(1) as u64,
            thinking: r.t.map(|t| t.clamp(0, u32::MAX as i64) as u32),
        }))
    }

    /// Sets (or with None, forgets) a model's context window and output per call.
    pub async fn set_model_limits(&self, model_id: &str, l: Option<&botdesk_core::Limits>) -> Result<()> {
        match l {
            Some(l) => {
                let (c, o, t) = (stored(l.context_window), stored(l.max_output), l.thinking.map(i64::from));
                sqlx::query!(
                    "INSERT INTO model_limits (model_id, context_window, max_output, thinking) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (model_id) DO UPDATE SET context_window = ?2, max_output = ?3, thinking = ?4",
                    model_id, c, o, t
                )
                .execute(&self.pool)
                .await?;
            }
            None => {
                sqlx::query!("DELETE FROM model_limits WHERE model_id = ?1", model_id).execute(&self.pool).await?;
            }
        }
        Ok(())
    }

    /// A bot's limits per run (the default where none is set).
    pub async fn bot_budget(&self, bot: &BotId) -> Result<botdesk_core::Budget> {
        let b = bot.as_str();
        let r = sqlx::query!(r#"SELECT tokens AS "tokens: i64", usd AS "usd: f64" FROM bot_budgets WHERE bot_id = ?1"#, b).fetch_optional(&self.pool).await?;
        let default = botdesk_core::Budget::default();
        Ok(match r {
            Some(r) => botdesk_core::Budget { tokens: r.tokens.map_or(default.tokens, |t| t.max(1) as u64), usd: r.usd },
            None => default,
        })
    }

    /// Sets a bot's limits per run (None: the default tokens, no dollar limit).
    pub async fn set_bot_budget(&self, bot: &BotId, tokens: Option<u64>, usd: Option<f64>) -> Result<()> {
        let (b, t) = (bot.as_str(), tokens.map(stored));
        sqlx::query!("INSERT INTO bot_budgets (bot_id, tokens, usd) VALUES (?1, ?2, ?3) ON CONFLICT (bot_id) DO UPDATE SET tokens = ?2, usd = ?3", b, t, usd)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// What all of a bot's runs cost together: tokens, and dollars over the calls whose prices
    /// were known (with how many calls had none).
    pub async fn bot_usage(&self, bot: &BotId) -> Result<(botdesk_core::Usage, f64, u64)> {
        let b = bot.as_str();
        let r = sqlx::query!(
            r#"SELECT SUM(m.input_tokens) AS "i: i64", SUM(m.output_tokens) AS "o: i64", SUM(m.cache_read_tokens) AS "r: i64", SUM(m.cache_write_tokens) AS "w: i64",
                      SUM(m.cost_usd) AS "usd: f64", COUNT(*) - COUNT(m.cost_usd) AS "unknown!: i64"
               FROM model_calls m JOIN runs r ON r.id = m.run_id WHERE r.bot_id = ?1"#,
            b
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((usage_of(r.i, r.o, r.r, r.w), r.usd.unwrap_or(0.0), r.unknown.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use crate::{NewBot, Store};
    use botdesk_core::{ActivityStatus::*, ComputerScope, HostName};

    #[tokio::test]
    async fn a_late_running_never_overwrites_an_end_and_activity_reads_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("botdesk.db")).await.unwrap();
        let (bot, _) = s
            .create_bot(NewBot { name: "a", scope: ComputerScope::Team, model: None, instructions: "", provider: "fake", host: HostName::local() }, 0)
            .await
            .unwrap();
        let id = s.add_activity(&bot.id, None, "shell", "make", Running, 1).await.unwrap();
        assert!(s.finish_activity(id, Done, Some(0), "ok", 2).await.unwrap());
        // A second end (a late or repeated update) changes nothing.
        assert!(!s.finish_activity(id, Running, None, "", 3).await.unwrap());
        assert!(!s.finish_activity(id, Failed, Some(1), "late", 4).await.unwrap());
        let rows = s.activity_of(&bot.id, 0, 10).await.unwrap();
        assert_eq!((rows[0].status.as_str(), rows[0].exit_code, rows[0].output_tail.as_str()), ("done", Some(0), "ok"));
        let second = s.add_activity(&bot.id, None, "write_file", "a.txt", Running, 5).await.unwrap();
        assert_eq!(s.activity_of(&bot.id, id, 10).await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), [second]);
        assert_eq!(s.latest_activity(&bot.id, 1).await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), [second]);
        assert_eq!(s.latest_activity(&bot.id, 5).await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), [id, second]);
    }
}

//! A bot's guardrails besides its network policy: what it must ask the person first (JSON of
//! `botdesk_core::Approvals`, checked by the engine) and the logins saved for it (site and user
//! name only: the secrets are in the OS keyring).

use botdesk_core::BotId;
use serde::Serialize;

use crate::{Result, Store, StoreError};

/// A saved login, without its secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct BotLogin {
    /// The origin it may be filled in on (`https://example.org`).
    pub site: String,
    pub username: String,
    /// A one-time-code seed is saved with it.
    pub has_code: bool,
    pub created_at: i64,
}

impl Store {
    pub async fn bot_approvals(&self, bot: &BotId) -> Result<String> {
        let b = bot.as_str();
        let row = sqlx::query_scalar!("SELECT approvals FROM bots WHERE id = ?1", b).fetch_optional(&self.pool).await?;
        row.ok_or_else(|| StoreError::NotFound(format!("bot {b}")))
    }

    pub async fn set_bot_approvals(&self, bot: &BotId, approvals: &str) -> Result<()> {
        let b = bot.as_str();
        let done = sqlx::query!("UPDATE bots SET approvals = ?2 WHERE id = ?1", b, approvals).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("bot {b}")));
        }
        Ok(())
    }

    /// Saves a login (replacing the bot's earlier one for the same site).
    pub async fn put_bot_login(&self, bot: &BotId, login: &BotLogin) -> Result<()> {
        let b = bot.as_str();
        sqlx::query!(
            "INSERT INTO bot_logins (bot_id, site, username, has_code, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (bot_id, site) DO UPDATE SET username = excluded.username, has_code = excluded.has_code, created_at = excluded.created_at",
            b,
            login.site,
            login.username,
            login.has_code,
            login.created_at
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A bot's logins, by site.
    pub async fn bot_logins(&self, bot: &BotId) -> Result<Vec<BotLogin>> {
        let b = bot.as_str();
        let rows = sqlx::query!(
            r#"SELECT site, username, has_code AS "has_code: bool", created_at AS "created_at: i64" FROM bot_logins WHERE bot_id = ?1 ORDER BY site"#,
            b
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| BotLogin { site: r.site, username: r.username, has_code: r.has_code, created_at: r.created_at }).collect())
    }

    /// Forgets a bot's login for `site`: whether there was one.
    pub async fn remove_bot_login(&self, bot: &BotId, site: &str) -> Result<bool> {
        let b = bot.as_str();
        let done = sqlx::query!("DELETE FROM bot_logins WHERE bot_id = ?1 AND site = ?2", b, site).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }
}

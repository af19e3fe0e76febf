//! Each bot's network policy (JSON of `botdesk_core::NetPolicy`, checked by the engine), and the
//! cursor of the refusals already taken into its activity.

use botdesk_core::{BotId, ComputerId};

use crate::{Result, Store, StoreError};

impl Store {
    /// A bot's policy, as stored.
    pub async fn bot_network(&self, bot: &BotId) -> Result<String> {
        let b = bot.as_str();
        let row = sqlx::query_scalar!("SELECT network FROM bots WHERE id = ?1", b).fetch_optional(&self.pool).await?;
        row.ok_or_else(|| StoreError::NotFound(format!("bot {b}")))
    }

    pub async fn set_bot_network(&self, bot: &BotId, network: &str) -> Result<()> {
        let b = bot.as_str();
        let done = sqlx::query!("UPDATE bots SET network = ?2 WHERE id = ?1", b, network).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("bot {b}")));
        }
        Ok(())
    }

    /// The policies of a computer's bots: (bot, uid, policy).
    pub async fn networks_on(&self, computer: &ComputerId) -> Result<Vec<(BotId, u32, String)>> {
        let c = computer.as_str();
        let rows = sqlx::query!(r#"SELECT id AS "id!", uid, network FROM bots WHERE computer_id = ?1 ORDER BY created_at"#, c).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|r| (BotId::new(r.id), r.uid as u32, r.network)).collect())
    }

    /// How far the bot's refusals were read: (boot, last number).
    pub async fn net_cursor(&self, bot: &BotId) -> Result<(String, u64)> {
        let b = bot.as_str();
        let row = sqlx::query!("SELECT net_boot, net_seen FROM bots WHERE id = ?1", b).fetch_optional(&self.pool).await?;
        let row = row.ok_or_else(|| StoreError::NotFound(format!("bot {b}")))?;
        Ok((row.net_boot, row.net_seen.max(0) as u64))
    }

    /// Moves the cursor from `from` to `to`, unless another process moved it first: whether this
    /// one did (and so takes those refusals into the activity).
    pub async fn advance_net_cursor(&self, bot: &BotId, from: (&str, u64), to: (&str, u64)) -> Result<bool> {
        let (b, from_seen, to_seen) = (bot.as_str(), from.1 as i64, to.1 as i64);
        let done =
            sqlx::query!("UPDATE bots SET net_boot = ?4, net_seen = ?5 WHERE id = ?1 AND net_boot = ?2 AND net_seen = ?3", b, from.0, from_seen, to.0, to_seen)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() == 1)
    }
}

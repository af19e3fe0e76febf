//! Display slots: lowest free slot per computer, kept while assigned, reusable only after a
//! verified teardown; a failed teardown keeps the slot reserved.

use botdesk_core::{state::DesktopState, BotId, ComputerId};
use serde::Serialize;

use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Desktop {
    pub computer_id: ComputerId,
    pub slot: u32,
    pub bot_id: Option<BotId>,
    pub state: DesktopState,
    pub view_token: String,
    pub control_token: Option<String>,
}

struct Row {
    computer_id: String,
    slot: i64,
    bot_id: Option<String>,
    state: String,
    view_token: String,
    control_token: Option<String>,
}

impl From<Row> for Desktop {
    fn from(r: Row) -> Self {
        Desktop {
            computer_id: ComputerId::new(r.computer_id),
            slot: r.slot as u32,
            bot_id: r.bot_id.map(BotId::new),
            // The table's CHECK admits only these three.
            state: DesktopState::parse(&r.state).unwrap_or(DesktopState::Failed),
            view_token: r.view_token,
            control_token: r.control_token,
        }
    }
}

impl Store {
    /// The bot's desktop on a computer, if it has one.
    pub async fn desktop_of(&self, computer: &ComputerId, bot: &BotId) -> Result<Option<Desktop>> {
        let (c, b) = (computer.as_str(), bot.as_str());
        Ok(sqlx::query_as!(
            Row,
            "SELECT computer_id, slot, bot_id, state, view_token, control_token FROM desktops WHERE computer_id = ?1 AND bot_id = ?2",
            c,
            b
        )
        .fetch_optional(&self.pool)
        .await?
        .map(Desktop::from))
    }

    pub async fn desktops_on(&self, computer: &ComputerId) -> Result<Vec<Desktop>> {
        let c = computer.as_str();
        Ok(sqlx::query_as!(Row, "SELECT computer_id, slot, bot_id, state, view_token, control_token FROM desktops WHERE computer_id = ?1 ORDER BY slot", c)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(Desktop::from)
            .collect())
    }

    /// Assigns the lowest free slot to the bot (or returns the slot it already has). `limit` caps
    /// how many slots a computer may occupy; beyond it: `ScreenLimit("MULTI_SCREEN_UNAVAILABLE: …")`.
    pub async fn assign_desktop(&self, computer: &ComputerId, bot: &BotId, view_token: &str, limit: Option<u32>, now: i64) -> Result<(Desktop, bool)> {
        if let Some(d) = self.desktop_of(computer, bot).await? {
            return Ok((d, false));
        }
        let (c, b) = (computer.as_str(), bot.as_str());
        for _ in 0..8 {
            let taken: Vec<i64> = sqlx::query!("SELECT slot FROM desktops WHERE computer_id = ?1 ORDER BY slot", c)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|r| r.slot)
                .collect();
            if let Some(limit) = limit {
                if taken.len() as u32 >= limit {
                    return Err(StoreError::ScreenLimit(format!(
                        "MULTI_SCREEN_UNAVAILABLE: this computer already shows {} screen(s), its limit (SANDBOX_TEAM_SCREEN_LIMIT); shell and file tools still work",
                        taken.len()
                    )));
                }
            }
            let slot = (1..).find(|s| !taken.contains(s)).unwrap_or(1);
            let inserted = sqlx::query!(
                "INSERT INTO desktops (computer_id, slot, bot_id, state, view_token, created_at) VALUES (?1, ?2, ?3, 'assigned', ?4, ?5)
                 ON CONFLICT DO NOTHING",
                c,
                slot,
                b,
                view_token,
                now
            )
            .execute(&self.pool)
            .await?;
            if inserted.rows_affected() == 1 {
                let d = self.desktop_of(computer, bot).await?.ok_or_else(|| StoreError::Conflict("the desktop vanished".into()))?;
                return Ok((d, true));
            }
            if let Some(d) = self.desktop_of(computer, bot).await? {
                return Ok((d, false)); // another process assigned it a moment ago
            }
        }
        Err(StoreError::Busy("could not find a free display slot; try again".into()))
    }

    /// Starts releasing the bot's desktop (assigned or failed → releasing); returns its slot.
    pub async fn begin_release_desktop(&self, computer: &ComputerId, bot: &BotId) -> Result<Option<Desktop>> {
        let (c, b) = (computer.as_str(), bot.as_str());
        let done = sqlx::query!("UPDATE desktops SET state = 'releasing' WHERE computer_id = ?1 AND bot_id = ?2 AND state IN ('assigned', 'failed')", c, b)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.desktop_of(computer, bot).await
    }

    /// Ends a release: a verified teardown frees the slot; a failed one keeps it reserved (no bot).
    pub async fn finish_release_desktop(&self, computer: &ComputerId, slot: u32, verified: bool) -> Result<()> {
        let (c, s) = (computer.as_str(), slot as i64);
        if verified {
            sqlx::query!("DELETE FROM desktops WHERE computer_id = ?1 AND slot = ?2 AND state = 'releasing'", c, s).execute(&self.pool).await?;
        } else {
            sqlx::query!("UPDATE desktops SET state = 'failed', bot_id = NULL, control_token = NULL WHERE computer_id = ?1 AND slot = ?2", c, s)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    pub async fn set_control_token(&self, computer: &ComputerId, slot: u32, token: Option<&str>) -> Result<()> {
        let (c, s) = (computer.as_str(), slot as i64);
        sqlx::query!("UPDATE desktops SET control_token = ?1 WHERE computer_id = ?2 AND slot = ?3", token, c, s).execute(&self.pool).await?;
        Ok(())
    }

    /// Forgets every desktop of a computer (its machine stopped or was destroyed: displays are gone).
    pub async fn clear_desktops(&self, computer: &ComputerId) -> Result<()> {
        let c = computer.as_str();
        sqlx::query!("DELETE FROM desktops WHERE computer_id = ?1", c).execute(&self.pool).await?;
        Ok(())
    }
}

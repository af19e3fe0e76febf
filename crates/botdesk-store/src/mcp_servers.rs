//! MCP servers a bot uses (started inside its computer for each of its runs).

use botdesk_core::BotId;
use serde::Serialize;

use crate::{Result, Store, StoreError};

/// One MCP server of a bot: a command run on stdio inside the computer, or a remote server's
/// address reached from inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct BotMcpServer {
    pub name: String,
    /// The program and its arguments (empty for a remote server).
    pub command: Vec<String>,
    /// A remote server's address (streamable HTTP).
    pub url: Option<String>,
    pub created_at: i64,
}

impl Store {
    /// Adds a server to a bot; a name the bot already uses is a conflict.
    pub async fn add_bot_mcp_server(&self, bot: &BotId, server: &BotMcpServer) -> Result<()> {
        let b = bot.as_str();
        let command = (!server.command.is_empty()).then(|| serde_json::to_string(&server.command).expect("strings serialize"));
        let done = sqlx::query!(
            "INSERT INTO bot_mcp_servers (bot_id, name, command, url, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            b,
            server.name,
            command,
            server.url,
            server.created_at
        )
        .execute(&self.pool)
        .await;
        match done {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(d)) if d.is_unique_violation() => {
                Err(StoreError::Conflict(format!("the bot already has an MCP server named {:?}", server.name)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A bot's servers, by name.
    pub async fn bot_mcp_servers(&self, bot: &BotId) -> Result<Vec<BotMcpServer>> {
        let b = bot.as_str();
        let rows = sqlx::query!(r#"SELECT name, command, url, created_at AS "created_at: i64" FROM bot_mcp_servers WHERE bot_id = ?1 ORDER BY name"#, b)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(|r| {
                let command = match r.command {
                    Some(c) => {
                        serde_json::from_str(&c).map_err(|e| StoreError::Conflict(format!("the MCP server {:?} has a damaged command ({e})", r.name)))?
                    }
                    None => vec![],
                };
                Ok(BotMcpServer { name: r.name, command, url: r.url, created_at: r.created_at })
            })
            .collect()
    }

    /// Removes one of a bot's servers.
    pub async fn remove_bot_mcp_server(&self, bot: &BotId, name: &str) -> Result<()> {
        let b = bot.as_str();
        let done = sqlx::query!("DELETE FROM bot_mcp_servers WHERE bot_id = ?1 AND name = ?2", b, name).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("MCP server {name:?}")));
        }
        Ok(())
    }
}

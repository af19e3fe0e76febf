//! Docker engines on other machines, by name (`botdesk host add`). No secret is kept here: the
//! certificates stay in their folder, which only its path names.

use serde::Serialize;

use botdesk_core::{ComputerId, HostName};

use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRow {
    pub name: String,
    /// `tcp://HOST:PORT`.
    pub url: String,
    /// The folder holding `ca.pem`, `cert.pem` and `key.pem`.
    pub tls_dir: String,
    pub created_at: i64,
}

impl Store {
    pub async fn add_host(&self, h: &HostRow) -> Result<()> {
        sqlx::query!("INSERT INTO hosts (name, url, tls_dir, created_at) VALUES (?1, ?2, ?3, ?4)", h.name, h.url, h.tls_dir, h.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| match e {
                sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(format!("a host named {:?} already exists", h.name)),
                e => e.into(),
            })?;
        Ok(())
    }

    pub async fn list_hosts(&self) -> Result<Vec<HostRow>> {
        Ok(sqlx::query_as!(HostRow, r#"SELECT name AS "name!", url, tls_dir, created_at FROM hosts ORDER BY name"#).fetch_all(&self.pool).await?)
    }

    pub async fn host(&self, name: &str) -> Result<HostRow> {
        sqlx::query_as!(HostRow, r#"SELECT name AS "name!", url, tls_dir, created_at FROM hosts WHERE name = ?1"#, name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("host {name:?} (see `botdesk host ls`)")))
    }

    /// Puts a computer on another host; only one without a machine (its home volume cleared by
    /// a destroy), so nothing is left running where it was.
    pub async fn set_computer_host(&self, computer: &ComputerId, host: &HostName) -> Result<()> {
        let (c, h) = (computer.as_str(), host.as_str());
        let done = sqlx::query!("UPDATE computers SET host = ?1 WHERE id = ?2 AND home_volume IS NULL", h, c).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Stale(format!("computer {computer} still has a home volume (or is gone): destroy it before it moves")));
        }
        Ok(())
    }

    /// Refused while computers are on the host (their homes are there).
    pub async fn remove_host(&self, name: &str) -> Result<()> {
        let on: Vec<String> = sqlx::query_scalar!(r#"SELECT name AS "name!" FROM computers WHERE host = ?1 ORDER BY name"#, name).fetch_all(&self.pool).await?;
        if !on.is_empty() {
            return Err(StoreError::Conflict(format!("host {name:?} still has computers ({}): move their bots elsewhere or delete them first", on.join(", "))));
        }
        let done = sqlx::query!("DELETE FROM hosts WHERE name = ?1", name).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("host {name:?} (see `botdesk host ls`)")));
        }
        Ok(())
    }
}

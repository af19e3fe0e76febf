//! Model providers (no secrets: keys live in the OS keyring).

use serde::Serialize;

use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelRow {
    pub id: String,
    pub kind: String,
    pub model: String,
    pub base_url: Option<String>,
    pub has_key: bool,
}

impl Store {
    pub async fn add_model(&self, m: &ModelRow, now: i64) -> Result<()> {
        sqlx::query!(
            "INSERT INTO models (id, kind, model, base_url, has_key, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            m.id,
            m.kind,
            m.model,
            m.base_url,
            m.has_key,
            now
        )
        .execute(&self.pool)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(format!("a model named {:?} already exists", m.id)),
            e => e.into(),
        })?;
        Ok(())
    }

    pub async fn list_models(&self) -> Result<Vec<ModelRow>> {
        Ok(sqlx::query_as!(ModelRow, r#"SELECT id AS "id!", kind, model, base_url, has_key AS "has_key: bool" FROM models ORDER BY id"#)
            .fetch_all(&self.pool)
            .await?)
    }

    pub async fn model(&self, id: &str) -> Result<ModelRow> {
        sqlx::query_as!(ModelRow, r#"SELECT id AS "id!", kind, model, base_url, has_key AS "has_key: bool" FROM models WHERE id = ?1"#, id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("model {id:?} (see `botdesk model list`)")))
    }

    /// Removes a model no bot uses.
    pub async fn remove_model(&self, id: &str) -> Result<()> {
        let users: Vec<String> = sqlx::query_scalar!("SELECT name FROM bots WHERE model = ?1 ORDER BY name", id).fetch_all(&self.pool).await?;
        if !users.is_empty() {
            return Err(StoreError::Conflict(format!("model {id:?} is used by {}; give them another model first", users.join(", "))));
        }
        let done = sqlx::query!("DELETE FROM models WHERE id = ?1", id).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("model {id:?}")));
        }
        Ok(())
    }
}

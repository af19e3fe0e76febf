//! Model providers (no secrets: keys live in the OS keyring).

use serde::Serialize;

use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelRow {
    pub id: String,
    pub kind: botdesk_core::ModelKind,
    pub model: String,
    pub base_url: Option<String>,
    pub has_key: bool,
    /// How it gives screen coordinates.
    pub coordinates: botdesk_core::action::CoordSpace,
}

struct Row {
    id: String,
    kind: String,
    model: String,
    base_url: Option<String>,
    has_key: bool,
    coordinates: String,
}

impl From<Row> for ModelRow {
    fn from(r: Row) -> Self {
        // The columns' CHECKs allow only what `parse` knows.
        let coordinates = botdesk_core::action::CoordSpace::parse(&r.coordinates).unwrap_or_default();
        let kind = botdesk_core::ModelKind::parse(&r.kind).unwrap_or(botdesk_core::ModelKind::OpenAiCompatible);
        ModelRow { id: r.id, kind, model: r.model, base_url: r.base_url, has_key: r.has_key, coordinates }
    }
}

impl Store {
    pub async fn add_model(&self, m: &ModelRow, now: i64) -> Result<()> {
        let coordinates = m.coordinates.as_str();
        let kind = m.kind.as_str();
        sqlx::query!(
            "INSERT INTO models (id, kind, model, base_url, has_key, coordinates, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            m.id,
            kind,
            m.model,
            m.base_url,
            m.has_key,
            coordinates,
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
        Ok(sqlx::query_as!(Row, r#"SELECT id AS "id!", kind, model, base_url, has_key AS "has_key: bool", coordinates FROM models ORDER BY id"#)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(ModelRow::from)
            .collect())
    }

    pub async fn model(&self, id: &str) -> Result<ModelRow> {
        sqlx::query_as!(Row, r#"SELECT id AS "id!", kind, model, base_url, has_key AS "has_key: bool", coordinates FROM models WHERE id = ?1"#, id)
            .fetch_optional(&self.pool)
            .await?
            .map(ModelRow::from)
            .ok_or_else(|| StoreError::NotFound(format!("model {id:?} (see `botdesk model list`)")))
    }

    /// Sets how a model gives screen coordinates; later runs use it.
    pub async fn set_model_coordinates(&self, id: &str, coordinates: botdesk_core::action::CoordSpace) -> Result<()> {
        let c = coordinates.as_str();
        let done = sqlx::query!("UPDATE models SET coordinates = ?2 WHERE id = ?1", id, c).execute(&self.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("model {id:?}")));
        }
        Ok(())
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

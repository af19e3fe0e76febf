//! Spare computers: one made in advance per host, taken whole (id and home volume) by the next
//! computer created there. The engine makes and starts them; here they are only rows.

use crate::{Result, Store};
use botdesk_core::{ComputerId, HostName, Resources};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spare {
    pub id: ComputerId,
    pub host: HostName,
    pub home_volume: String,
    pub image: String,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
}

impl Spare {
    /// Whether it was made from this image with these resources.
    pub fn fits(&self, image: &str, r: &Resources) -> bool {
        self.image == image && self.memory_bytes == r.memory_bytes as i64 && self.nano_cpus == r.nano_cpus
    }
}

/// A new computer's id (the same form whether it starts as a spare or not).
pub fn new_computer_id() -> ComputerId {
    ComputerId::new(format!("c{}", crate::new_id()))
}

impl Store {
    /// Records a spare before anything of it is made, so a reconcile never takes its parts for
    /// leftovers.
    pub async fn add_spare(&self, s: &Spare, now_ms: i64) -> Result<()> {
        let (id, host) = (s.id.as_str(), s.host.as_str());
        sqlx::query!(
            "INSERT INTO spares (id, host, home_volume, image, memory_bytes, nano_cpus, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            id,
            host,
            s.home_volume,
            s.image,
            s.memory_bytes,
            s.nano_cpus,
            now_ms
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn spares(&self) -> Result<Vec<Spare>> {
        let rows = sqlx::query!(r#"SELECT id AS "id!", host, home_volume, image, memory_bytes, nano_cpus FROM spares ORDER BY created_at"#)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| Spare {
                id: ComputerId::new(r.id),
                host: HostName::new(r.host),
                home_volume: r.home_volume,
                image: r.image,
                memory_bytes: r.memory_bytes,
                nano_cpus: r.nano_cpus,
            })
            .collect())
    }

    /// Removes a spare's row; false when a new computer took it first (then it is that
    /// computer's, and must not be destroyed).
    pub async fn remove_spare(&self, id: &ComputerId) -> Result<bool> {
        let cid = id.as_str();
        Ok(sqlx::query!("DELETE FROM spares WHERE id = ?1", cid).execute(&self.pool).await?.rows_affected() == 1)
    }
}

/// Takes the oldest spare on `host` for a computer being created in `tx`: (its id, its home volume).
pub(crate) async fn take(tx: &mut sqlx::SqliteConnection, host: &HostName) -> Result<Option<(String, String)>> {
    let h = host.as_str();
    let row = sqlx::query!(r#"SELECT id AS "id!", home_volume FROM spares WHERE host = ?1 ORDER BY created_at LIMIT 1"#, h).fetch_optional(&mut *tx).await?;
    let Some(row) = row else { return Ok(None) };
    sqlx::query!("DELETE FROM spares WHERE id = ?1", row.id).execute(&mut *tx).await?;
    Ok(Some((row.id, row.home_volume)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewBot;
    use botdesk_core::ComputerScope;

    #[tokio::test]
    async fn a_new_computer_on_the_spares_host_takes_it_whole_and_only_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("botdesk.db")).await.unwrap();
        let spare = Spare {
            id: new_computer_id(),
            host: HostName::local(),
            home_volume: "vol-1".into(),
            image: "img".into(),
            memory_bytes: 1 << 30,
            nano_cpus: 1_000_000_000,
        };
        store.add_spare(&spare, 1).await.unwrap();
        let bot = |name, host| NewBot { name, scope: ComputerScope::Private, model: None, instructions: "", provider: "docker", host };
        // A computer on another host leaves it.
        let (_, other) = store.create_bot(bot("elsewhere", HostName::new("far")), 2).await.unwrap();
        assert_ne!(other.id, spare.id);
        assert_eq!(other.home_volume, None);
        let (_, c) = store.create_bot(bot("first", HostName::local()), 3).await.unwrap();
        assert_eq!((c.id.clone(), c.home_volume.as_deref()), (spare.id.clone(), Some("vol-1")));
        assert_eq!(store.computer(c.id.as_str()).await.unwrap().home_volume.as_deref(), Some("vol-1"));
        assert!(store.spares().await.unwrap().is_empty());
        assert!(!store.remove_spare(&spare.id).await.unwrap(), "taken: not the keeper's to destroy");
        let (_, next) = store.create_bot(bot("second", HostName::local()), 4).await.unwrap();
        assert_ne!(next.id, spare.id);
        assert_eq!(next.home_volume, None);
    }
}

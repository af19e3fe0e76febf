//! Opening a database made by an earlier version: it is upgraded, or, when a migration fails,
//! left exactly as it was (the earlier version still opens it) with an error that says so.

use botdesk_store::{migrator, Store, StoreError};
use sqlx::{sqlite::SqliteConnectOptions, SqlitePool};

async fn pool(path: &std::path::Path) -> SqlitePool {
    SqlitePool::connect_with(SqliteConnectOptions::new().filename(path).create_if_missing(true)).await.unwrap()
}

/// What the database holds: its schema, its migrations and a table's rows.
async fn contents(path: &std::path::Path) -> (Vec<String>, Vec<i64>, Vec<String>) {
    let p = pool(path).await;
    let schema = sqlx::query_scalar("SELECT coalesce(sql, name) FROM sqlite_master ORDER BY name").fetch_all(&p).await.unwrap();
    let versions = sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version").fetch_all(&p).await.unwrap();
    let names = sqlx::query_scalar("SELECT name FROM workspaces ORDER BY name").fetch_all(&p).await.unwrap();
    p.close().await;
    (schema, versions, names)
}

#[tokio::test]
async fn a_failed_upgrade_leaves_the_old_database_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("botdesk.db");
    let all = migrator();
    let last = all.iter().last().unwrap().version;
    // A database from two versions before the migration that adds `runs.handback_note`, with
    // data, and that column already there (as a hand edit might leave it): the next migration
    // applies, that one fails, and the later ones never run.
    let breaks = all.iter().find(|m| m.sql.as_str().contains("ADD COLUMN handback_note")).expect("a migration adds handback_note").version;
    let p = pool(&path).await;
    all.run_to(breaks - 2, &p).await.unwrap();
    sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ('w1', 'mine', 1)").execute(&p).await.unwrap();
    sqlx::query("ALTER TABLE runs ADD COLUMN handback_note TEXT").execute(&p).await.unwrap();
    p.close().await;
    let before = contents(&path).await;
    assert_eq!(before.1.last(), Some(&(breaks - 2)));

    let e = match Store::open(&path).await {
        Err(e) => e,
        Ok(_) => panic!("the upgrade should have failed"),
    };
    assert!(matches!(e, StoreError::Upgrade(_)), "{e:?}");
    let said = e.to_string();
    assert!(said.contains("could not upgrade the database") && said.contains(&format!("schema version {last}")) && said.contains("left as it was"), "{said}");
    assert_eq!(contents(&path).await, before, "not even the migration that applied is kept");
    assert!(!path.with_extension("db.before-upgrade").exists(), "the copy went back in its place");

    // Without the stray column, the same database upgrades, its data kept.
    let p = pool(&path).await;
    sqlx::query("ALTER TABLE runs DROP COLUMN handback_note").execute(&p).await.unwrap();
    p.close().await;
    let store = Store::open(&path).await.unwrap();
    drop(store);
    let after = contents(&path).await;
    assert_eq!((after.1.last(), after.2), (Some(&last), vec!["mine".to_string()]));
    assert!(!path.with_extension("db.before-upgrade").exists(), "no copy is left after a good upgrade");
}

//! The state database: migrations and refusing a newer schema.
#![allow(clippy::unwrap_used)]

use super::Store;
use crate::engine::paths::Home;
use crate::ErrorCode;

#[tokio::test]
async fn a_database_from_a_newer_burrow_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path()).unwrap();
    let store = Store::open(&home).await.unwrap();
    store.close().await;
    // Pretend a newer burrow migrated this database.
    let db = home.db_path();
    // A busy timeout: the pool's last connection may still be finishing its
    // checkpoint on close.
    let status = std::process::Command::new("sqlite3")
        .args(["-cmd", ".timeout 5000"])
        .arg(&db)
        .arg("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101000000, 'future', 1, x'00', 0);")
        .status()
        .unwrap();
    assert!(status.success());
    let err = Store::open(&home).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Store);
    // Nothing was migrated or dropped.
    let out = std::process::Command::new("sqlite3")
        .args(["-cmd", ".timeout 5000"])
        .arg(&db)
        .arg("SELECT COUNT(*) FROM _sqlx_migrations; SELECT COUNT(*) FROM sqlite_master WHERE name = 'sandboxes';")
        .output()
        .unwrap();
    let known = super::MIGRATOR.iter().count();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n1\n", known + 1)
    );
}

#[tokio::test]
async fn reopening_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path()).unwrap();
    for _ in 0..3 {
        let s = Store::open(&home).await.unwrap();
        assert!(s.list().await.unwrap().is_empty());
        s.close().await;
    }
}

#[tokio::test]
async fn a_database_of_the_first_schema_is_migrated_with_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path()).unwrap();
    // As the first release left it: its one migration, one sandbox.
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(home.db_path())
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    super::migrations::embedded(&[("0001_init.sql", include_str!("migrations/0001_init.sql"))])
        .run(&pool)
        .await
        .unwrap();
    let id = crate::model::SandboxId::new();
    sqlx::query(
        "INSERT INTO sandboxes (id, name, config, status, created_at, updated_at)
         VALUES (?, 'old', '{\"image\":\"img\"}', 'created', 0, 0)",
    )
    .bind(id.as_str())
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let store = Store::open(&home).await.unwrap();
    let old = store.get_by_name("old").await.unwrap().unwrap();
    assert_eq!(
        (old.info.id.clone(), old.info.config.image.as_str()),
        (id, "img")
    );
    assert_eq!(store.sealed_secrets(&old.info.id).await.unwrap(), None);
}

#[tokio::test]
async fn opening_a_fresh_database_another_process_holds_waits_for_it() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path()).unwrap();
    // Another process made the database (rollback journal, as SQLite
    // starts one) and holds it exclusively for a while.
    let mut holder = std::process::Command::new("sqlite3")
        .arg(home.db_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = holder.stdin.take().unwrap();
    input
        .write_all(b"BEGIN EXCLUSIVE;\nCREATE TABLE hold(x);\nSELECT 1;\n")
        .unwrap();
    input.flush().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let opening = tokio::spawn({
        let home = home.clone();
        async move { Store::open(&home).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!opening.is_finished(), "opened through an exclusive lock");
    input.write_all(b"COMMIT;\n.quit\n").unwrap();
    drop(input);
    holder.wait().unwrap();
    let store = opening.await.unwrap().unwrap();
    assert!(store.list().await.unwrap().is_empty());
}

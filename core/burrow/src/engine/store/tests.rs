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
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n1\n");
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

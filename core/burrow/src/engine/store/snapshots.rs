//! Snapshot rows: written last by a snapshot, removed only while no
//! sandbox uses them (both single statements).

use std::str::FromStr;

use sqlx::{Row, Sqlite, Transaction};

use super::Store;
use crate::error::{Error, Result};
use crate::model::{DriverKind, SandboxId, SnapshotInfo, SnapshotKind, SNAPSHOT_IMAGE_PREFIX};

const SELECT: &str = "SELECT name, kind, digest, size, source_id, source_name, base_image, driver, created_at FROM snapshots";

pub(crate) fn not_found(name: &str) -> Error {
    Error::NotFound {
        what: format!("snapshot {name:?}"),
        name: Some(name.to_owned()),
        id: None,
    }
}

pub(super) async fn exists_in(tx: &mut Transaction<'_, Sqlite>, name: &str) -> Result<bool> {
    let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM snapshots WHERE name = ?")
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.is_some())
}

/// How [`Store::remove_snapshot`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Removed {
    /// Gone; it had this digest.
    Yes(String),
    /// There was none.
    Missing,
    /// Kept: these sandboxes use it.
    InUse(Vec<String>),
}

impl Store {
    /// Records a snapshot whose content is in place. A taken name is
    /// [`Error::SnapshotExists`].
    pub(crate) async fn insert_snapshot(&self, s: &SnapshotInfo) -> Result<()> {
        let res = sqlx::query(
            "INSERT INTO snapshots (name, kind, digest, size, source_id, source_name, base_image, driver, created_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.name)
        .bind(s.kind.as_str())
        .bind(&s.digest)
        .bind(i64::try_from(s.size).unwrap_or(i64::MAX))
        .bind(s.source_id.as_str())
        .bind(&s.source_name)
        .bind(&s.base_image)
        .bind(s.driver.as_str())
        .bind(s.created_at_ms)
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                Err(Error::SnapshotExists {
                    name: s.name.clone(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One snapshot.
    pub(crate) async fn get_snapshot(&self, name: &str) -> Result<Option<SnapshotInfo>> {
        let row = sqlx::query(&format!("{SELECT} WHERE name = ?"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Every snapshot, by name.
    pub(crate) async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let rows = sqlx::query(&format!("{SELECT} ORDER BY name"))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    /// The names of the sandboxes created from `snapshot`.
    pub(crate) async fn snapshot_users(&self, snapshot: &str) -> Result<Vec<String>> {
        let users: Vec<(String,)> = sqlx::query_as(
            "SELECT name FROM sandboxes WHERE json_extract(config, '$.image') = ? ORDER BY name",
        )
        .bind(format!("{SNAPSHOT_IMAGE_PREFIX}{snapshot}"))
        .fetch_all(&self.pool)
        .await?;
        Ok(users.into_iter().map(|(n,)| n).collect())
    }

    /// Deletes the snapshot unless a sandbox uses it (one statement: a
    /// create from it either committed before, and is seen, or checks for
    /// the snapshot after this and fails).
    pub(crate) async fn remove_snapshot(&self, name: &str) -> Result<Removed> {
        let image = format!("{SNAPSHOT_IMAGE_PREFIX}{name}");
        let deleted: Option<(String,)> = sqlx::query_as(
            "DELETE FROM snapshots WHERE name = ?
               AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE json_extract(config, '$.image') = ?)
             RETURNING digest",
        )
        .bind(name)
        .bind(&image)
        .fetch_optional(&self.pool)
        .await?;
        if let Some((digest,)) = deleted {
            return Ok(Removed::Yes(digest));
        }
        if self.get_snapshot(name).await?.is_none() {
            return Ok(Removed::Missing);
        }
        Ok(Removed::InUse(self.snapshot_users(name).await?))
    }
}

fn decode(row: &sqlx::sqlite::SqliteRow) -> Result<SnapshotInfo> {
    let bad = |what: &str| Error::Store {
        reason: format!("corrupt snapshot row: {what}"),
        source: None,
    };
    let name: String = row.try_get("name")?;
    Ok(SnapshotInfo {
        image: format!("{SNAPSHOT_IMAGE_PREFIX}{name}"),
        name,
        kind: SnapshotKind::parse(row.try_get("kind")?).ok_or_else(|| bad("kind"))?,
        digest: row.try_get("digest")?,
        size: u64::try_from(row.try_get::<i64, _>("size")?).unwrap_or(0),
        source_id: SandboxId::from_str(row.try_get::<&str, _>("source_id")?)
            .map_err(|_| bad("source id"))?,
        source_name: row.try_get("source_name")?,
        base_image: row.try_get("base_image")?,
        driver: DriverKind::from_str(row.try_get::<&str, _>("driver")?)
            .map_err(|_| bad("driver"))?,
        created_at_ms: row.try_get("created_at")?,
    })
}

//! Persistent state in SQLite (sqlx): sandboxes, runs and labels.
//!
//! Every state change is a single conditional statement (or a transaction
//! whose first statement is a write), so two processes can never both win
//! a transition: e.g. a start claim is `UPDATE .. WHERE id = ? AND status IN
//! (startable)`, and only the caller that changed a row owns the new
//! generation. WAL mode lets readers proceed while a writer commits; a busy
//! database is waited on (busy_timeout), not reported.

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::engine::locks::FileLock;
use crate::engine::paths::Home;
use crate::engine::procs::ProcIdentity;
use crate::error::{Error, Result};
use crate::lifecycle::Operation;
use crate::model::{ExitReason, RunInfo, SandboxConfig, SandboxId, SandboxInfo, Status};

mod events;
mod fork;
pub mod migrations;
pub(crate) mod pools;
pub(crate) mod snapshots;

/// The database's migrations (`migrations/*.sql`, embedded).
static MIGRATOR: std::sync::LazyLock<sqlx::migrate::Migrator> = std::sync::LazyLock::new(|| {
    migrations::embedded(&[
        ("0001_init.sql", include_str!("migrations/0001_init.sql")),
        (
            "0002_secrets.sql",
            include_str!("migrations/0002_secrets.sql"),
        ),
        (
            "0003_snapshots.sql",
            include_str!("migrations/0003_snapshots.sql"),
        ),
        ("0004_pools.sql", include_str!("migrations/0004_pools.sql")),
        (
            "0005_pool_claims.sql",
            include_str!("migrations/0005_pool_claims.sql"),
        ),
        (
            "0006_events.sql",
            include_str!("migrations/0006_events.sql"),
        ),
    ])
});

/// The state database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
}

/// A sandbox row plus its owner.
#[derive(Debug, Clone)]
pub struct Record {
    /// Public snapshot.
    pub info: SandboxInfo,
    /// Live owner of a runtime status (starter, then supervisor).
    pub owner: Option<ProcIdentity>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating and migrating) the database of `home`. Refuses a
    /// database written by a newer burrow.
    pub async fn open(home: &Home) -> Result<Store> {
        fork::hold_sqlite_across_fork();
        // A fork child: its parent's connections go first (see `fork`).
        fork::close_inherited();
        let path = home.db_path();
        let opts = SqliteConnectOptions::new()
            .filename(&path)
            // Each connection has its own mutex, held inside every call:
            // what a fork waits on (see `fork`).
            .serialized(true)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        // A database just created by another process can be busy for its
        // first connections while that one turns on WAL (SQLite answers
        // that switch's lock conflict without waiting on busy_timeout):
        // opened again until it is not, for as long as busy_timeout.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        let pool = loop {
            let opened = SqlitePoolOptions::new()
                .max_connections(4)
                .min_connections(0)
                .idle_timeout(Some(Duration::from_secs(30)))
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        let mut handle = conn.lock_handle().await?;
                        fork::register(handle.as_raw_handle().as_ptr());
                        Ok(())
                    })
                })
                .connect_with(opts.clone())
                .await;
            match opened {
                Ok(pool) => break pool,
                Err(sqlx::Error::Database(db))
                    if db.code().as_deref() == Some("5")
                        && started.elapsed() < Duration::from_secs(30) =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(Error::store(format!("opening {}", path.display()), e)),
            }
        };
        let store = Store { pool };
        // Every supervisor opens the store on the critical path of a start:
        // a schema that is already current needs neither the migration lock
        // nor the migrator's checks.
        if store.schema_is_current().await? {
            return Ok(store);
        }
        // Only one process migrates at a time; the others wait, then see an
        // up-to-date schema.
        let _guard = FileLock::acquire(&home.locks_dir().join("migrate.lock")).await?;
        store.check_version().await?;
        MIGRATOR
            .run(&store.pool)
            .await
            .map_err(|e| Error::store("migrating the state database", e))?;
        Ok(store)
    }

    /// Whether every migration this build knows is applied, and nothing
    /// newer or failed is recorded (one statement).
    async fn schema_is_current(&self) -> Result<bool> {
        let known: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        let newest = known.iter().copied().max().unwrap_or(0);
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT COUNT(DISTINCT version), COALESCE(MAX(version), 0), COALESCE(SUM(success = 0), 0)
             FROM _sqlx_migrations",
        )
        .fetch_optional(&self.pool)
        .await
        // No migrations table yet: not current.
        .unwrap_or(None);
        let distinct = known
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len() as i64;
        Ok(matches!(row, Some((n, max, failed)) if n == distinct && max == newest && failed == 0))
    }

    async fn check_version(&self) -> Result<()> {
        let exists: Option<(String,)> = sqlx::query_as(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_optional(&self.pool)
        .await?;
        if exists.is_none() {
            return Ok(());
        }
        let newest: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = 1")
                .fetch_one(&self.pool)
                .await?;
        let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        if let Some(v) = newest.filter(|v| *v > known) {
            return Err(Error::Store {
                reason: format!(
                    "the state database has schema version {v}, newer than this burrow understands ({known}); upgrade burrow or use another BURROW_HOME"
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// Inserts a new sandbox in status Created, with its sealed secrets
    /// (see `engine::secrets`). A taken name is [`Error::AlreadyExists`]
    /// with the holder's id.
    pub async fn insert(
        &self,
        id: &SandboxId,
        name: &str,
        config: &SandboxConfig,
        detached: bool,
        sealed_secrets: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        let config_json =
            serde_json::to_string(config).map_err(|e| Error::store("encoding config", e))?;
        let mut tx = self.pool.begin().await?;
        let res = sqlx::query(
            "INSERT INTO sandboxes (id, name, config, status, generation, detached, created_at, updated_at, secrets)
             VALUES (?, ?, ?, 'created', 0, ?, ?, ?, ?)",
        )
        .bind(id.as_str())
        .bind(name)
        .bind(&config_json)
        .bind(detached)
        .bind(now)
        .bind(now)
        .bind(sealed_secrets)
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                drop(tx);
                let holder = self.get_by_name(name).await?;
                return Err(Error::AlreadyExists {
                    name: name.to_owned(),
                    id: holder.map(|r| r.info.id).unwrap_or_else(|| id.clone()),
                });
            }
            Err(e) => return Err(e.into()),
        }
        // A sandbox of a snapshot exists only while the snapshot does:
        // checked after the write, so a removal of the snapshot (which
        // checks for users in its own statement) is ordered before or after
        // this whole transaction, never between.
        if let Some(snapshot) = crate::model::snapshot_of_image(&config.image) {
            if !snapshots::exists_in(&mut tx, snapshot).await? {
                return Err(snapshots::not_found(snapshot));
            }
        }
        for (k, v) in &config.labels {
            sqlx::query("INSERT INTO labels (sandbox_id, key, value) VALUES (?, ?, ?)")
                .bind(id.as_str())
                .bind(k)
                .bind(v)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    const SELECT: &'static str = "SELECT s.id, s.name, s.config, s.status, s.generation, s.detached, s.owner_pid,
        s.owner_start, s.created_at, s.updated_at, r.generation AS r_gen, r.supervisor_pid, r.started_at,
        r.running_at, r.ended_at, r.exit_reason, r.detail, r.timings
        FROM sandboxes s LEFT JOIN runs r ON r.sandbox_id = s.id AND r.generation = s.generation";

    /// Looks a sandbox up by id.
    pub async fn get_by_id(&self, id: &SandboxId) -> Result<Option<Record>> {
        let row = sqlx::query(&format!("{} WHERE s.id = ?", Self::SELECT))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// The runs of a sandbox, newest first, at most `limit`.
    pub async fn runs(&self, id: &SandboxId, limit: usize) -> Result<Vec<RunInfo>> {
        let rows = sqlx::query(
            "SELECT generation AS r_gen, supervisor_pid, started_at, running_at, ended_at,
             exit_reason, detail, timings FROM runs WHERE sandbox_id = ?
             ORDER BY generation DESC LIMIT ?",
        )
        .bind(id.as_str())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .filter_map(|r| decode_run(r).transpose())
            .collect()
    }

    /// Looks a sandbox up by name.
    pub async fn get_by_name(&self, name: &str) -> Result<Option<Record>> {
        let row = sqlx::query(&format!("{} WHERE s.name = ?", Self::SELECT))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| decode(&r)).transpose()
    }

    /// Every sandbox, oldest first.
    pub async fn list(&self) -> Result<Vec<Record>> {
        let rows = sqlx::query(&format!("{} ORDER BY s.created_at, s.id", Self::SELECT))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    /// Claims a start: `status in (created, stopped, crashed)` -> Starting,
    /// generation + 1, owner = `owner`, new run row. Returns the new
    /// generation, or `None` when the sandbox is not in a startable status
    /// (someone else won, or it is running).
    pub async fn claim_start(
        &self,
        id: &SandboxId,
        owner: ProcIdentity,
        detached: Option<bool>,
    ) -> Result<Option<u64>> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // First statement is the write: the transaction takes the write lock
        // before reading anything, so there is no read->write upgrade race.
        static CLAIM: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE sandboxes SET status = 'starting', generation = generation + 1, owner_pid = ?,
                   owner_start = ?, updated_at = ?, detached = COALESCE(?, detached)
                 WHERE id = ? AND status IN ({})
                 RETURNING generation",
                sql_list(Operation::Start.acts_in())
            )
        });
        let generation: Option<i64> = sqlx::query_scalar(CLAIM.as_str())
            .bind(owner.pid)
            .bind(owner.start as i64)
            .bind(now)
            .bind(detached)
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(generation) = generation else {
            return Ok(None);
        };
        sqlx::query("INSERT INTO runs (sandbox_id, generation, started_at) VALUES (?, ?, ?)")
            .bind(id.as_str())
            .bind(generation)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(generation as u64))
    }

    /// The supervisor takes ownership of a start it was spawned for and
    /// reads the record it now owns, in one transaction (one connection on
    /// the start's critical path). `None` when the start was abandoned
    /// (reconciled or superseded) meanwhile.
    pub async fn handoff(
        &self,
        id: &SandboxId,
        generation: u64,
        supervisor: ProcIdentity,
    ) -> Result<Option<Record>> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE sandboxes SET owner_pid = ?, owner_start = ?, updated_at = ?
             WHERE id = ? AND generation = ? AND status = 'starting'",
        )
        .bind(supervisor.pid)
        .bind(supervisor.start as i64)
        .bind(now_ms())
        .bind(id.as_str())
        .bind(generation as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 1 {
            sqlx::query("UPDATE runs SET supervisor_pid = ?, supervisor_start = ? WHERE sandbox_id = ? AND generation = ?")
                .bind(supervisor.pid)
                .bind(supervisor.start as i64)
                .bind(id.as_str())
                .bind(generation as i64)
                .execute(&mut *tx)
                .await?;
        }
        let record = if n == 1 {
            let row = sqlx::query(&format!("{} WHERE s.id = ?", Self::SELECT))
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
            row.map(|r| decode(&r)).transpose()?
        } else {
            None
        };
        tx.commit().await?;
        Ok(record)
    }

    /// Starting -> Running for exactly this generation.
    pub async fn set_running(
        &self,
        id: &SandboxId,
        generation: u64,
        timings: &serde_json::Value,
    ) -> Result<bool> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE sandboxes SET status = 'running', updated_at = ?
             WHERE id = ? AND generation = ? AND status = 'starting'",
        )
        .bind(now)
        .bind(id.as_str())
        .bind(generation as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 1 {
            sqlx::query("UPDATE runs SET running_at = ?, timings = ? WHERE sandbox_id = ? AND generation = ?")
                .bind(now)
                .bind(timings.to_string())
                .bind(id.as_str())
                .bind(generation as i64)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(n == 1)
    }

    /// Moves a runtime status to another runtime status (Running <->
    /// Draining/Paused) for exactly this generation.
    pub async fn transition(
        &self,
        id: &SandboxId,
        generation: u64,
        from: &[Status],
        to: Status,
    ) -> Result<bool> {
        let from_list = sql_list(from.iter().copied());
        let n = sqlx::query(&format!(
            "UPDATE sandboxes SET status = ?, updated_at = ? WHERE id = ? AND generation = ? AND status IN ({from_list})"
        ))
        .bind(to.as_str())
        .bind(now_ms())
        .bind(id.as_str())
        .bind(generation as i64)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Ends a run: a runtime status of exactly this generation becomes
    /// `status` (Stopped or Crashed) with the reason recorded on the run.
    /// False when the run had already ended (first writer wins).
    pub async fn finish_run(
        &self,
        id: &SandboxId,
        generation: u64,
        status: Status,
        reason: ExitReason,
        detail: Option<&str>,
    ) -> Result<bool> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        static FINISH: LazyLock<String> = LazyLock::new(|| {
            format!(
                "UPDATE sandboxes SET status = ?, owner_pid = NULL, owner_start = NULL, updated_at = ?
                 WHERE id = ? AND generation = ? AND status IN ({})",
                sql_list(Status::ALL.into_iter().filter(|s| s.has_runtime()))
            )
        });
        let n = sqlx::query(FINISH.as_str())
            .bind(status.as_str())
            .bind(now)
            .bind(id.as_str())
            .bind(generation as i64)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 1 {
            sqlx::query(
                "UPDATE runs SET ended_at = ?, exit_reason = ?, detail = ? WHERE sandbox_id = ? AND generation = ?",
            )
            .bind(now)
            .bind(reason.as_str())
            .bind(detail)
            .bind(id.as_str())
            .bind(generation as i64)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(n == 1)
    }

    /// The sealed secrets of `id` (`None`: it has none, or is gone).
    pub async fn sealed_secrets(&self, id: &SandboxId) -> Result<Option<String>> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT secrets FROM sandboxes WHERE id = ?")
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|r| r.0))
    }

    /// Replaces the persisted configuration (and the label index). False when
    /// the sandbox is gone.
    pub async fn update_config(&self, id: &SandboxId, config: &SandboxConfig) -> Result<bool> {
        let config_json =
            serde_json::to_string(config).map_err(|e| Error::store("encoding config", e))?;
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query("UPDATE sandboxes SET config = ?, updated_at = ? WHERE id = ?")
            .bind(&config_json)
            .bind(now_ms())
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 1 {
            sqlx::query("DELETE FROM labels WHERE sandbox_id = ?")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await?;
            for (k, v) in &config.labels {
                sqlx::query("INSERT INTO labels (sandbox_id, key, value) VALUES (?, ?, ?)")
                    .bind(id.as_str())
                    .bind(k)
                    .bind(v)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(n == 1)
    }

    /// Records that the hibernated guest of run `generation` was discarded
    /// (an explicit stop): the run's exit reason becomes `stopped`.
    /// Returns whether that run was recorded as hibernated.
    pub async fn forget_hibernation(&self, id: &SandboxId, generation: u64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE runs SET exit_reason = ?, detail = ? WHERE sandbox_id = ? AND generation = ? AND exit_reason = ?",
        )
        .bind(ExitReason::Stopped.as_str())
        .bind("stopped while hibernated: the saved guest was discarded")
        .bind(id.as_str())
        .bind(generation as i64)
        .bind(ExitReason::Hibernated.as_str())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Records whether the sandbox survives its creating process.
    pub async fn set_detached(&self, id: &SandboxId, detached: bool) -> Result<()> {
        sqlx::query("UPDATE sandboxes SET detached = ?, updated_at = ? WHERE id = ?")
            .bind(detached)
            .bind(now_ms())
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deletes a sandbox whose status allows removal. Returns false when the
    /// row is gone or its status changed meanwhile.
    pub async fn delete(&self, id: &SandboxId) -> Result<bool> {
        static DELETE: LazyLock<String> = LazyLock::new(|| {
            format!(
                "DELETE FROM sandboxes WHERE id = ? AND status IN ({})",
                sql_list(Operation::Remove.acts_in())
            )
        });
        let n = sqlx::query(DELETE.as_str())
            .bind(id.as_str())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn decode(row: &sqlx::sqlite::SqliteRow) -> Result<Record> {
    let bad = |what: &str| Error::Store {
        reason: format!("corrupt sandbox row: {what}"),
        source: None,
    };
    let id = SandboxId::from_str(row.try_get::<&str, _>("id")?).map_err(|_| bad("id"))?;
    let config: SandboxConfig = serde_json::from_str(row.try_get::<&str, _>("config")?)
        .map_err(|e| Error::store("corrupt sandbox config", e))?;
    let status = Status::from_str(row.try_get::<&str, _>("status")?).map_err(|_| bad("status"))?;
    let owner = match (
        row.try_get::<Option<i64>, _>("owner_pid")?,
        row.try_get::<Option<i64>, _>("owner_start")?,
    ) {
        (Some(pid), Some(start)) => Some(ProcIdentity {
            pid: pid as u32,
            start: start as u64,
        }),
        _ => None,
    };
    let last_run = decode_run(row)?;
    Ok(Record {
        info: SandboxInfo {
            id,
            name: row.try_get("name")?,
            status,
            config,
            generation: row.try_get::<i64, _>("generation")? as u64,
            detached: row.try_get("detached")?,
            created_at_ms: row.try_get("created_at")?,
            updated_at_ms: row.try_get("updated_at")?,
            last_run,
        },
        owner,
    })
}

/// The run of a row that has the run's columns (`r_gen` its generation;
/// `None`: the sandbox never ran).
fn decode_run(row: &sqlx::sqlite::SqliteRow) -> Result<Option<RunInfo>> {
    let Some(g) = row.try_get::<Option<i64>, _>("r_gen")? else {
        return Ok(None);
    };
    Ok(Some(RunInfo {
        generation: g as u64,
        supervisor_pid: row
            .try_get::<Option<i64>, _>("supervisor_pid")?
            .map(|p| p as u32),
        started_at_ms: row.try_get("started_at")?,
        running_at_ms: row.try_get("running_at")?,
        ended_at_ms: row.try_get("ended_at")?,
        exit_reason: row
            .try_get::<Option<&str>, _>("exit_reason")?
            .and_then(ExitReason::parse),
        detail: row.try_get("detail")?,
        timings: row
            .try_get::<Option<&str>, _>("timings")?
            .and_then(|t| serde_json::from_str(t).ok()),
    }))
}

/// `'created','stopped'` for a SQL `IN (...)`: the statuses come from the
/// lifecycle table, never from literals repeated here.
fn sql_list(statuses: impl Iterator<Item = Status>) -> String {
    statuses
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;

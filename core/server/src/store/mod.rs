//! The server's own tables: API tokens, gateway targets, runtime state,
//! request leases and client sessions, in SQLite (one replica) or Postgres
//! (any number), through sqlx's `Any` driver with one migration set per
//! database. Every statement is short and holds its connection only while
//! it runs: nothing here is called while a start or a reclaim is awaited.
//!
//! Times are milliseconds since the epoch, taken from the caller's clock
//! (replicas on one host share it).
//!
//! One file per group of tables: `tokens`, `targets`, `runtime` (runtime
//! state and leases: the gateway's side), `reaper` (the sweep's batched
//! candidates, claims and locks), `sessions`. Where Postgres and SQLite
//! differ, a statement has both forms side by side; lists of ids reach a
//! statement as one JSON array (the `Any` driver binds no arrays).

use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection};

mod audit;
mod calls;
mod console;
mod events;
mod mcp_sessions;
mod previews;
mod quotas;
mod reaper;
mod runtime;
mod sessions;
mod targets;
mod tenant_policy;
mod tokens;

pub use audit::{AuditEntry, AuditFilter, Outcome};
pub use calls::{CallHold, CallLocks};
pub use console::{ColdStart, ConsoleSession};
pub use events::{
    Delivery, DeliveryAttempt, DeliveryNext, DueDelivery, EventRow, NewEvent, PumpTurn, SeenRow,
    Webhook,
};
pub use mcp_sessions::McpSession;
pub use previews::{Preview, PreviewGrant};
pub use quotas::{QuotaTurn, Quotas};
pub use reaper::ReapLocker;
pub use runtime::{LeaseOpen, TargetStatus};
pub use tenant_policy::TenantRules;
pub use tokens::TenantInfo;

/// Errors of the server's store. The database's error is in the text, so
/// it is not also a `source()`: a printed chain says it once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or opened.
    #[error("cannot open the database {url}: {error}")]
    Open {
        /// The URL (password redacted).
        url: String,
        /// Why.
        error: sqlx::Error,
    },
    /// A migration failed.
    #[error("migrating the database {url} failed: {error}")]
    Migrate {
        /// The URL (password redacted).
        url: String,
        /// Why.
        error: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("database error: {0}")]
    Query(sqlx::Error),
    /// A row holds a value this version does not know.
    #[error("unexpected value in the database: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Query(e)
    }
}

impl StoreError {
    /// Whether the pool had no free connection in time (the caller may
    /// answer 503 and let the client retry).
    pub fn is_pool_timeout(&self) -> bool {
        matches!(self, StoreError::Query(sqlx::Error::PoolTimedOut))
    }
}

type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    /// SQLite: one replica.
    Sqlite,
    /// Postgres: any number of replicas.
    Postgres,
}

/// Runtime state of a sandbox target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeState {
    /// Not running (reclaimed, or never started through the gateway).
    Dormant,
    /// A start is in progress.
    Starting,
    /// Running and reachable.
    Ready,
    /// Being reclaimed.
    Reaping,
    /// The last start failed (`last_error`); the next call retries.
    Failed,
}

impl RuntimeState {
    /// The state as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeState::Dormant => "dormant",
            RuntimeState::Starting => "starting",
            RuntimeState::Ready => "ready",
            RuntimeState::Reaping => "reaping",
            RuntimeState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<RuntimeState> {
        Ok(match s {
            "dormant" => RuntimeState::Dormant,
            "starting" => RuntimeState::Starting,
            "ready" => RuntimeState::Ready,
            "reaping" => RuntimeState::Reaping,
            "failed" => RuntimeState::Failed,
            other => return Err(StoreError::Corrupt(format!("runtime state {other:?}"))),
        })
    }
}

/// A runtime-state row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeRow {
    /// The state.
    pub state: RuntimeState,
    /// Counts the starts made through the gateway.
    pub generation: i64,
    /// When a call last ended or began.
    pub last_used_at: i64,
    /// Last change of state.
    pub updated_at: i64,
    /// The replica holding a start or a reclaim.
    pub owner: Option<String>,
    /// Why the last start or reclaim failed.
    pub last_error: Option<String>,
}

/// What the gateway proxies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    /// A TCP port inside the sandbox whose id is the target's id.
    Sandbox {
        /// The port.
        port: u16,
        /// Run after each start, before the port is probed (it must return:
        /// it starts the service in the background).
        command: Option<Vec<String>>,
    },
    /// A remote HTTP endpoint (proxying only: no workload, never reclaimed).
    Url {
        /// Base URL.
        url: String,
    },
}

/// A gateway target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Sandbox id, or `tg_...` for URL targets.
    pub id: String,
    /// What it proxies to.
    pub kind: TargetKind,
    /// Discovered metadata (JSON object, opaque to the server).
    pub metadata: serde_json::Value,
    /// Extra request headers added to every proxied call (never returned by
    /// the API).
    pub headers: Vec<(String, String)>,
    /// Creation time.
    pub created_at: i64,
    /// The tenant it belongs to.
    pub tenant: String,
}

/// A reclaim candidate found by a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The target (a sandbox id).
    pub target_id: String,
    /// Its state when found.
    pub state: RuntimeState,
}

/// Cut-off times of one sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepCutoffs {
    /// Now.
    pub now: i64,
    /// `ready` rows last used before this are idle.
    pub idle_before: i64,
    /// `starting` rows last changed before this are stranded.
    pub starting_before: i64,
    /// `failed` rows last changed before this are stranded.
    pub failed_before: i64,
}

/// An API token as listed (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    /// Token id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tenant.
    pub tenant: String,
    /// Its role in the tenant.
    pub role: crate::tenancy::Role,
    /// Creation time.
    pub created_at: i64,
}

/// The server's store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    kind: DbKind,
    url: String,
    local_locks: calls::LocalHolds,
    calls: Arc<CallLocks>,
    sqlite_writer: Arc<tokio::sync::Mutex<()>>,
    /// Quota turns of this process, per tenant (taken before the
    /// database's, so that one waiter per tenant holds a connection).
    quota_turns: quotas::LocalTurns,
    /// The audit log's writer of queued entries (started at first use).
    audit_queue: audit::Queue,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A duration in milliseconds, as the tables store times.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The advisory-lock key of a target: the reaper's exclusive lock and the
/// calls' shared locks are taken on it.
fn lock_key(target_id: &str) -> i64 {
    let d = Sha256::digest(target_id.as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    i64::from_be_bytes(k)
}

fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut b);
    format!("{prefix}{}", hex::encode(b))
}

/// The stored form of a token: hex SHA-256 (tokens are 256 random bits, so
/// a fast hash is enough; the secret itself is never stored).
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A pooled connection idle for longer than this is pinged before use (a
/// database restart is noticed there, not by a failed call); one used more
/// recently is handed out as is, which saves a round trip per statement on
/// a busy server.
const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// Creates the SQLite file of `url` if it is missing, readable by its
/// owner only from the first instant (it holds webhook secrets and token
/// hashes; SQLite gives its `-wal` and `-shm` files the same mode), and
/// takes group and other access away from one this user owns.
fn private_sqlite_file(url: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // A missing directory and the like: SQLite says why, as before.
        Err(_) => return Ok(()),
    }
    let meta = std::fs::metadata(path)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() == me && meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

impl Store {
    /// Connects (creating a SQLite file if missing) and migrates.
    /// `redacted` names the database in errors.
    pub async fn open(
        url: &str,
        redacted: &str,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let kind = if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            DbKind::Postgres
        } else {
            DbKind::Sqlite
        };
        let url = match kind {
            DbKind::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_owned(),
        };
        let open_err = |error| StoreError::Open {
            url: redacted.to_owned(),
            error,
        };
        if kind == DbKind::Sqlite {
            private_sqlite_file(&url).map_err(|e| open_err(sqlx::Error::Io(e)))?;
        }
        let opts: AnyConnectOptions = url.parse().map_err(open_err)?;
        // One direct connection first: a pool only reports "timed out",
        // this says why (refused, unknown host, authentication, ...).
        AnyConnection::connect_with(&opts)
            .await
            .map_err(open_err)?
            .close()
            .await
            .map_err(open_err)?;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > PING_IDLE_AFTER {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if kind == DbKind::Sqlite {
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA busy_timeout = 5000")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA foreign_keys = ON")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .map_err(open_err)?;
        let migrator = burrow::internal::migrations::embedded(match kind {
            DbKind::Sqlite => &[
                (
                    "0001_init.sql",
                    include_str!("../../migrations/sqlite/0001_init.sql"),
                ),
                (
                    "0002_tenants.sql",
                    include_str!("../../migrations/sqlite/0002_tenants.sql"),
                ),
                (
                    "0003_events.sql",
                    include_str!("../../migrations/sqlite/0003_events.sql"),
                ),
                (
                    "0004_mcp_sessions.sql",
                    include_str!("../../migrations/sqlite/0004_mcp_sessions.sql"),
                ),
                (
                    "0005_console.sql",
                    include_str!("../../migrations/sqlite/0005_console.sql"),
                ),
                (
                    "0006_previews.sql",
                    include_str!("../../migrations/sqlite/0006_previews.sql"),
                ),
                (
                    "0007_audit_actions.sql",
                    include_str!("../../migrations/sqlite/0007_audit_actions.sql"),
                ),
                (
                    "0008_tenant_policy.sql",
                    include_str!("../../migrations/sqlite/0008_tenant_policy.sql"),
                ),
            ],
            DbKind::Postgres => &[
                (
                    "0001_init.sql",
                    include_str!("../../migrations/postgres/0001_init.sql"),
                ),
                (
                    "0002_tenants.sql",
                    include_str!("../../migrations/postgres/0002_tenants.sql"),
                ),
                (
                    "0003_events.sql",
                    include_str!("../../migrations/postgres/0003_events.sql"),
                ),
                (
                    "0004_mcp_sessions.sql",
                    include_str!("../../migrations/postgres/0004_mcp_sessions.sql"),
                ),
                (
                    "0005_console.sql",
                    include_str!("../../migrations/postgres/0005_console.sql"),
                ),
                (
                    "0006_previews.sql",
                    include_str!("../../migrations/postgres/0006_previews.sql"),
                ),
                (
                    "0007_audit_actions.sql",
                    include_str!("../../migrations/postgres/0007_audit_actions.sql"),
                ),
                (
                    "0008_tenant_policy.sql",
                    include_str!("../../migrations/postgres/0008_tenant_policy.sql"),
                ),
            ],
        });
        migrator
            .run(&pool)
            .await
            .map_err(|error| StoreError::Migrate {
                url: redacted.to_owned(),
                error,
            })?;
        let local_locks = calls::LocalHolds::default();
        let calls = Arc::new(match kind {
            DbKind::Postgres => CallLocks::postgres(url.clone()),
            DbKind::Sqlite => CallLocks::local(local_locks.clone()),
        });
        Ok(Store {
            pool,
            kind,
            url,
            local_locks,
            calls,
            sqlite_writer: Arc::default(),
            quota_turns: Arc::default(),
            audit_queue: audit::Queue::default(),
        })
    }

    /// SQLite takes one writer at a time and makes the others wait by
    /// sleeping (a millisecond, then longer); the writes of this process
    /// (one replica) take turns here instead, each starting as soon as the
    /// one before has committed. Postgres: no turn to take.
    async fn write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.kind {
            DbKind::Sqlite => Some(self.sqlite_writer.lock().await),
            DbKind::Postgres => None,
        }
    }

    /// This replica's calls in flight, held as locks the reaper respects
    /// (one lock session per store, opened on first use).
    pub fn calls(&self) -> &Arc<CallLocks> {
        &self.calls
    }

    /// Which database this is.
    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// Round trip to the database (readiness).
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Connections open and idle in the pool.
    pub fn pool_stats(&self) -> (u32, usize) {
        (self.pool.size(), self.pool.num_idle())
    }

    /// For tests and benchmarks: runs raw SQL.
    #[doc(hidden)]
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

/// A JSON array of strings: how a list of ids reaches a statement (the
/// `Any` driver binds no arrays; Postgres reads it with
/// `json_array_elements_text`, SQLite with `json_each`).
fn json_list<S: AsRef<str>>(items: &[S]) -> String {
    serde_json::Value::from(items.iter().map(|s| s.as_ref()).collect::<Vec<_>>()).to_string()
}

#[cfg(test)]
mod testutil {
    use super::*;

    pub(super) async fn sqlite() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let s = Store::open(&url, &url, 4, Duration::from_secs(5))
            .await
            .unwrap();
        (dir, s)
    }

    #[tokio::test]
    async fn a_sqlite_database_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, store) = sqlite().await;
        store.ping().await.unwrap();
        for f in ["s.db", "s.db-wal", "s.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}: {mode:o}");
        }
        // One made readable by others before is taken back.
        let loose = dir.path().join("loose.db");
        std::fs::write(&loose, b"").unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
        let url = format!("sqlite://{}", loose.display());
        Store::open(&url, &url, 1, Duration::from_secs(5))
            .await
            .unwrap();
        let mode = std::fs::metadata(&loose).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    pub(super) fn target(id: &str) -> Target {
        Target {
            id: id.into(),
            kind: TargetKind::Sandbox {
                port: 8080,
                command: Some(vec!["httpd".into()]),
            },
            metadata: serde_json::json!({"tools": 3}),
            headers: vec![("x-k".into(), "v".into())],
            created_at: 0,
            tenant: "default".into(),
        }
    }

    pub(super) fn cut(now: i64) -> SweepCutoffs {
        SweepCutoffs {
            now,
            idle_before: now - 1000,
            starting_before: now - 5000,
            failed_before: now - 1000,
        }
    }
}

//! The server's own tables: API tokens, gateway targets, runtime state,
//! request leases and client sessions, in SQLite (one replica) or Postgres
//! (any number), through sqlx's `Any` driver with one migration set per
//! database. Every statement is short and holds its connection only while
//! it runs: nothing here is called while a start or a reclaim is awaited.
//!
//! Times are milliseconds since the epoch, taken from the caller's clock
//! (replicas on one host share it).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection, Row};

/// Errors of the server's store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or opened.
    #[error("cannot open the database {url}: {source}")]
    Open {
        /// The URL (password redacted).
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// A migration failed.
    #[error("migrating the database {url} failed: {source}")]
    Migrate {
        /// The URL (password redacted).
        url: String,
        /// Why.
        source: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
    /// A row holds a value this version does not know.
    #[error("unexpected value in the database: {0}")]
    Corrupt(String),
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
    /// Creation time.
    pub created_at: i64,
}

/// The server's store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    kind: DbKind,
    url: String,
    local_locks: Arc<Mutex<HashSet<String>>>,
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

/// The advisory-lock key of a target.
fn lock_key(target_id: &str) -> i64 {
    let d = Sha256::digest(target_id.as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    i64::from_be_bytes(k)
}

const SANDBOX: &str = "sandbox";

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
        let open_err = |source| StoreError::Open {
            url: redacted.to_owned(),
            source,
        };
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
        let migrator = match kind {
            DbKind::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            DbKind::Postgres => sqlx::migrate!("./migrations/postgres"),
        };
        migrator
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate {
                url: redacted.to_owned(),
                source,
            })?;
        Ok(Store {
            pool,
            kind,
            url,
            local_locks: Arc::default(),
        })
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

    // ---- tokens ----

    /// Creates a token named `name` and returns its secret (shown once).
    pub async fn create_token(&self, name: &str) -> Result<String> {
        let mut b = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut b);
        let secret = format!("bw_{}", hex::encode(b));
        sqlx::query(
            "INSERT INTO api_tokens (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(random_id("tok_"))
        .bind(name)
        .bind(hash_token(&secret))
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(secret)
    }

    /// The tokens (names and ids only).
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let rows = sqlx::query("SELECT id, name, created_at FROM api_tokens ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenInfo {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Deletes the token named `name`; false if there was none.
    pub async fn revoke_token(&self, name: &str) -> Result<bool> {
        let r = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// The name of the token whose secret is `secret`, if any.
    pub async fn check_token(&self, secret: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT name FROM api_tokens WHERE token_hash = $1")
            .bind(hash_token(secret))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("name")).transpose()?)
    }

    // ---- targets ----

    /// Creates or replaces a target (its runtime state is kept).
    pub async fn put_target(&self, t: &Target) -> Result<()> {
        let (kind, port, url, command) = match &t.kind {
            TargetKind::Sandbox { port, command } => (
                SANDBOX,
                Some(i32::from(*port)),
                None,
                command.as_ref().map(|c| serde_json::json!(c).to_string()),
            ),
            TargetKind::Url { url } => ("url", None, Some(url.clone()), None),
        };
        let headers = serde_json::to_string(&t.headers)
            .map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO targets \
               (id, kind, port, url, metadata, credentials, command, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $8, $7, $7) \
             ON CONFLICT (id) DO UPDATE SET kind = $2, port = $3, url = $4, metadata = $5, \
             credentials = $6, command = $8, updated_at = $7",
        )
        .bind(&t.id)
        .bind(kind)
        .bind(port)
        .bind(url)
        .bind(t.metadata.to_string())
        .bind(headers)
        .bind(now)
        .bind(command)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// One target.
    pub async fn get_target(&self, id: &str) -> Result<Option<Target>> {
        let row = sqlx::query(
            "SELECT id, kind, port, url, metadata, credentials, command, created_at FROM targets WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| target_from_row(&r)).transpose()
    }

    /// Every target.
    pub async fn list_targets(&self) -> Result<Vec<Target>> {
        let rows = sqlx::query(
            "SELECT id, kind, port, url, metadata, credentials, command, created_at FROM targets ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(target_from_row).collect()
    }

    /// Deletes a target and its runtime state; false if there was none.
    pub async fn delete_target(&self, id: &str) -> Result<bool> {
        sqlx::query("DELETE FROM runtime_state WHERE target_id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        let r = sqlx::query("DELETE FROM targets WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    // ---- runtime state ----

    /// The runtime row of a target, if it was ever called.
    pub async fn runtime(&self, id: &str) -> Result<Option<RuntimeRow>> {
        let row = sqlx::query(
            "SELECT state, generation, last_used_at, updated_at, owner, last_error \
             FROM runtime_state WHERE target_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(RuntimeRow {
                state: RuntimeState::parse(&r.try_get::<String, _>("state")?)?,
                generation: r.try_get("generation")?,
                last_used_at: r.try_get("last_used_at")?,
                updated_at: r.try_get("updated_at")?,
                owner: r.try_get("owner")?,
                last_error: r.try_get("last_error")?,
            })
        })
        .transpose()
    }

    /// The warm path: stamps `last_used_at` if the target is ready and
    /// returns its generation. A reclaim claim on the same row is
    /// serialised against this statement (row lock), so a row cannot be
    /// both stamped now and claimed as idle.
    pub async fn touch_if_ready(&self, id: &str, now: i64) -> Result<Option<i64>> {
        let row = sqlx::query(
            "UPDATE runtime_state SET last_used_at = $2 \
             WHERE target_id = $1 AND state = 'ready' RETURNING generation",
        )
        .bind(id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("generation")).transpose()?)
    }

    /// Claims the start of a target: creates its row as `starting`, or moves
    /// `dormant`/`failed`, a `starting` row last changed before
    /// `stale_before`, or the `ready` row of generation `stale_ready` (found
    /// not running) to `starting` with the next generation. One statement,
    /// one winner; `None` means someone else holds the row.
    pub async fn claim_start(
        &self,
        id: &str,
        me: &str,
        now: i64,
        stale_before: i64,
        stale_ready: Option<i64>,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at, owner) \
             VALUES ($1, 'starting', 1, $2, $2, $3) \
             ON CONFLICT (target_id) DO UPDATE SET state = 'starting', prev_state = NULL, \
               generation = runtime_state.generation + 1, updated_at = $2, owner = $3, \
               last_error = NULL \
             WHERE runtime_state.state IN ('dormant', 'failed') \
               OR (runtime_state.state = 'starting' AND runtime_state.updated_at < $4) \
               OR (runtime_state.state = 'ready' AND runtime_state.generation = $5) \
             RETURNING generation",
        )
        .bind(id)
        .bind(now)
        .bind(me)
        .bind(stale_before)
        .bind(stale_ready.unwrap_or(-1))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("generation")).transpose()?)
    }

    /// Ends the start of `generation`: `ready` on success, `failed` with
    /// the error otherwise. False if the row moved on meanwhile.
    pub async fn finish_start(
        &self,
        id: &str,
        generation: i64,
        now: i64,
        outcome: Result<(), String>,
    ) -> Result<bool> {
        let (state, error) = match outcome {
            Ok(()) => ("ready", None),
            Err(e) => ("failed", Some(e)),
        };
        let r = sqlx::query(
            "UPDATE runtime_state SET state = $3, last_used_at = $4, updated_at = $4, \
             owner = NULL, last_error = $5 \
             WHERE target_id = $1 AND generation = $2 AND state = 'starting'",
        )
        .bind(id)
        .bind(generation)
        .bind(state)
        .bind(now)
        .bind(error)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    /// A `ready` row whose sandbox turned out not to run: `dormant`.
    pub async fn mark_gone(&self, id: &str, generation: i64, now: i64) -> Result<()> {
        sqlx::query(
            "UPDATE runtime_state SET state = 'dormant', updated_at = $3 \
             WHERE target_id = $1 AND generation = $2 AND state = 'ready'",
        )
        .bind(id)
        .bind(generation)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // ---- leases ----

    /// Opens a lease on a target; returns its id.
    pub async fn open_lease(&self, target: &str, replica: &str, expires_at: i64) -> Result<String> {
        let id = random_id("ls_");
        sqlx::query(
            "INSERT INTO leases (id, target_id, replica, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(target)
        .bind(replica)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// Extends a lease.
    pub async fn heartbeat_lease(&self, lease: &str, expires_at: i64) -> Result<()> {
        sqlx::query("UPDATE leases SET expires_at = $2 WHERE id = $1")
            .bind(lease)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Closes a lease and stamps the target's `last_used_at`.
    pub async fn close_lease(&self, lease: &str, target: &str, now: i64) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE id = $1")
            .bind(lease)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "UPDATE runtime_state SET last_used_at = $2 \
             WHERE target_id = $1 AND last_used_at < $2",
        )
        .bind(target)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Deletes expired leases; returns how many.
    pub async fn sweep_leases(&self, now: i64) -> Result<u64> {
        let r = sqlx::query("DELETE FROM leases WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Live leases (for metrics).
    pub async fn live_leases(&self, now: i64) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM leases WHERE expires_at >= $1")
            .bind(now)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }

    // ---- reaper ----

    /// Reclaim candidates: sandbox targets (never URL targets) whose row is
    /// `ready` and idle, `starting`/`failed` and stranded, or `reaping`
    /// (its reaper may have died: the advisory lock tells), with no live
    /// lease. Targets never called have no row and are never candidates.
    pub async fn reap_candidates(&self, c: SweepCutoffs, limit: i64) -> Result<Vec<Candidate>> {
        let rows = sqlx::query(
            "SELECT r.target_id, r.state FROM runtime_state r \
             JOIN targets t ON t.id = r.target_id \
             WHERE t.kind = 'sandbox' AND ( \
                 (r.state = 'ready' AND r.last_used_at < $1) \
              OR (r.state = 'starting' AND r.updated_at < $2) \
              OR (r.state = 'failed' AND r.updated_at < $3) \
              OR r.state = 'reaping') \
             AND NOT EXISTS (SELECT 1 FROM leases l \
                             WHERE l.target_id = r.target_id AND l.expires_at >= $4) \
             ORDER BY r.last_used_at LIMIT $5",
        )
        .bind(c.idle_before)
        .bind(c.starting_before)
        .bind(c.failed_before)
        .bind(c.now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Candidate {
                    target_id: r.try_get("target_id")?,
                    state: RuntimeState::parse(&r.try_get::<String, _>("state")?)?,
                })
            })
            .collect()
    }

    /// Claims a candidate for reclaim (re-checking every condition in the
    /// same statement): `reaping`, remembering the state it had. Returns
    /// that state, or `None` if the row is no longer a candidate.
    pub async fn claim_reap(
        &self,
        id: &str,
        me: &str,
        c: SweepCutoffs,
    ) -> Result<Option<RuntimeState>> {
        let row = sqlx::query(
            "UPDATE runtime_state SET \
               prev_state = CASE WHEN state = 'reaping' THEN prev_state ELSE state END, \
               state = 'reaping', updated_at = $2, owner = $3 \
             WHERE target_id = $1 AND ( \
                 (state = 'ready' AND last_used_at < $4) \
              OR (state = 'starting' AND updated_at < $5) \
              OR (state = 'failed' AND updated_at < $6) \
              OR state = 'reaping') \
             AND NOT EXISTS (SELECT 1 FROM leases l \
                             WHERE l.target_id = $1 AND l.expires_at >= $2) \
             RETURNING prev_state",
        )
        .bind(id)
        .bind(c.now)
        .bind(me)
        .bind(c.idle_before)
        .bind(c.starting_before)
        .bind(c.failed_before)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            let prev: Option<String> = r.try_get("prev_state")?;
            RuntimeState::parse(prev.as_deref().unwrap_or("ready"))
        })
        .transpose()
    }

    /// Ends a reclaim: `dormant`, or back to the state it had with the error.
    pub async fn finish_reap(&self, id: &str, now: i64, outcome: Result<(), String>) -> Result<()> {
        match outcome {
            Ok(()) => {
                sqlx::query(
                    "UPDATE runtime_state SET state = 'dormant', prev_state = NULL, \
                     updated_at = $2, owner = NULL, last_error = NULL \
                     WHERE target_id = $1 AND state = 'reaping'",
                )
                .bind(id)
                .bind(now)
                .execute(&self.pool)
                .await?
            }
            Err(e) => {
                sqlx::query(
                    "UPDATE runtime_state SET state = COALESCE(prev_state, 'ready'), \
                     prev_state = NULL, updated_at = $2, owner = NULL, last_error = $3 \
                     WHERE target_id = $1 AND state = 'reaping'",
                )
                .bind(id)
                .bind(now)
                .bind(e)
                .execute(&self.pool)
                .await?
            }
        };
        Ok(())
    }

    /// A lock connection for the reaper: Postgres advisory locks on a
    /// connection of its own (a dying replica's locks go with it), or an
    /// in-process set for SQLite (one replica).
    pub async fn reap_locker(&self) -> Result<ReapLocker> {
        Ok(match self.kind {
            DbKind::Postgres => {
                let opts: AnyConnectOptions = self.url.parse()?;
                ReapLocker::Postgres(AnyConnection::connect_with(&opts).await?)
            }
            DbKind::Sqlite => ReapLocker::Local(self.local_locks.clone()),
        })
    }

    // ---- sessions ----

    /// Registers a session held by `replica`.
    pub async fn open_session(&self, replica: &str, expires_at: i64) -> Result<String> {
        let id = random_id("ses_");
        sqlx::query("INSERT INTO sessions (id, replica, expires_at) VALUES ($1, $2, $3)")
            .bind(&id)
            .bind(replica)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(id)
    }

    /// Extends a session; false if it is gone.
    pub async fn heartbeat_session(&self, id: &str, expires_at: i64) -> Result<bool> {
        let r = sqlx::query("UPDATE sessions SET expires_at = $2 WHERE id = $1")
            .bind(id)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Whether a session is live.
    pub async fn session_live(&self, id: &str, now: i64) -> Result<bool> {
        let row = sqlx::query("SELECT 1 AS one FROM sessions WHERE id = $1 AND expires_at >= $2")
            .bind(id)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Attaches a sandbox to a session (replacing an earlier attachment).
    pub async fn attach(&self, sandbox_id: &str, name: &str, session: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO attachments (sandbox_id, name, session_id) VALUES ($1, $2, $3) \
             ON CONFLICT (sandbox_id) DO UPDATE SET name = $2, session_id = $3",
        )
        .bind(sandbox_id)
        .bind(name)
        .bind(session)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets a sandbox's attachment (detached, removed).
    pub async fn detach(&self, sandbox_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM attachments WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends a session: deletes it and returns the (id, name) of the
    /// sandboxes attached through it, whose attachments are deleted too.
    pub async fn end_session(&self, id: &str) -> Result<Vec<(String, String)>> {
        sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        let rows =
            sqlx::query("DELETE FROM attachments WHERE session_id = $1 RETURNING sandbox_id, name")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("sandbox_id")?, r.try_get("name")?)))
            .collect()
    }

    /// Sessions whose replica stopped heartbeating them.
    pub async fn expired_sessions(&self, now: i64) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM sessions WHERE expires_at < $1")
            .bind(now)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    /// For tests and benchmarks: runs raw SQL.
    #[doc(hidden)]
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

fn target_from_row(r: &sqlx::any::AnyRow) -> Result<Target> {
    let kind: String = r.try_get("kind")?;
    let kind = match kind.as_str() {
        SANDBOX => {
            let port: i32 = r.try_get("port")?;
            let command: Option<String> = r.try_get("command")?;
            TargetKind::Sandbox {
                port: u16::try_from(port)
                    .map_err(|_| StoreError::Corrupt(format!("port {port}")))?,
                command: command
                    .map(|c| serde_json::from_str(&c))
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("command: {e}")))?,
            }
        }
        "url" => TargetKind::Url {
            url: r.try_get("url")?,
        },
        other => return Err(StoreError::Corrupt(format!("target kind {other:?}"))),
    };
    let metadata: String = r.try_get("metadata")?;
    let headers: Option<String> = r.try_get("credentials")?;
    Ok(Target {
        id: r.try_get("id")?,
        kind,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| StoreError::Corrupt(format!("metadata: {e}")))?,
        headers: match headers {
            Some(h) => serde_json::from_str(&h)
                .map_err(|e| StoreError::Corrupt(format!("credentials: {e}")))?,
            None => Vec::new(),
        },
        created_at: r.try_get("created_at")?,
    })
}

/// Per-target reclaim locks taken by try-lock: a busy lock is a skip.
#[derive(Debug)]
pub enum ReapLocker {
    /// Session-level advisory locks on a dedicated connection.
    Postgres(AnyConnection),
    /// In-process (SQLite, one replica).
    Local(Arc<Mutex<HashSet<String>>>),
}

impl ReapLocker {
    /// Takes the lock of `target` if it is free.
    pub async fn try_lock(&mut self, target: &str) -> Result<bool> {
        match self {
            ReapLocker::Postgres(conn) => {
                let row = sqlx::query("SELECT pg_try_advisory_lock($1) AS got")
                    .bind(lock_key(target))
                    .fetch_one(&mut *conn)
                    .await?;
                Ok(row.try_get("got")?)
            }
            ReapLocker::Local(set) => Ok(set
                .lock()
                .map_err(|_| StoreError::Corrupt("lock set poisoned".into()))?
                .insert(target.to_owned())),
        }
    }

    /// Releases the lock of `target`.
    pub async fn unlock(&mut self, target: &str) -> Result<()> {
        match self {
            ReapLocker::Postgres(conn) => {
                sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(lock_key(target))
                    .execute(&mut *conn)
                    .await?;
            }
            ReapLocker::Local(set) => {
                set.lock()
                    .map_err(|_| StoreError::Corrupt("lock set poisoned".into()))?
                    .remove(target);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sqlite() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let s = Store::open(&url, &url, 4, Duration::from_secs(5))
            .await
            .unwrap();
        (dir, s)
    }

    fn target(id: &str) -> Target {
        Target {
            id: id.into(),
            kind: TargetKind::Sandbox {
                port: 8080,
                command: Some(vec!["httpd".into()]),
            },
            metadata: serde_json::json!({"tools": 3}),
            headers: vec![("x-k".into(), "v".into())],
            created_at: 0,
        }
    }

    fn cut(now: i64) -> SweepCutoffs {
        SweepCutoffs {
            now,
            idle_before: now - 1000,
            starting_before: now - 5000,
            failed_before: now - 1000,
        }
    }

    #[tokio::test]
    async fn tokens_are_stored_hashed() {
        let (_d, s) = sqlite().await;
        let secret = s.create_token("ci").await.unwrap();
        assert_eq!(s.check_token(&secret).await.unwrap().as_deref(), Some("ci"));
        assert_eq!(s.check_token("bw_nope").await.unwrap(), None);
        let stored: String = sqlx::query("SELECT token_hash FROM api_tokens")
            .fetch_one(s.pool())
            .await
            .unwrap()
            .try_get("token_hash")
            .unwrap();
        assert_ne!(stored, secret);
        assert!(s.create_token("ci").await.is_err(), "names are unique");
        assert!(s.revoke_token("ci").await.unwrap());
        assert_eq!(s.check_token(&secret).await.unwrap(), None);
    }

    #[tokio::test]
    async fn one_start_claim_wins_and_the_reaper_respects_leases() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_a")).await.unwrap();
        assert_eq!(
            s.get_target("sb_a").await.unwrap().unwrap().headers.len(),
            1
        );
        let t0 = 1_000_000;
        assert_eq!(
            s.claim_start("sb_a", "r1", t0, t0 - 5000, None)
                .await
                .unwrap(),
            Some(1)
        );
        assert_eq!(
            s.claim_start("sb_a", "r2", t0, t0 - 5000, None)
                .await
                .unwrap(),
            None
        );
        assert!(s.finish_start("sb_a", 1, t0, Ok(())).await.unwrap());
        assert_eq!(s.touch_if_ready("sb_a", t0 + 10).await.unwrap(), Some(1));
        // Idle, but leased: not a candidate, cannot be claimed.
        let later = t0 + 10_000;
        let lease = s.open_lease("sb_a", "r1", later + 30_000).await.unwrap();
        assert!(s.reap_candidates(cut(later), 100).await.unwrap().is_empty());
        assert_eq!(s.claim_reap("sb_a", "r1", cut(later)).await.unwrap(), None);
        // The lease ends (stamping last_used_at), then time passes.
        s.close_lease(&lease, "sb_a", later).await.unwrap();
        assert!(s
            .reap_candidates(cut(later + 500), 100)
            .await
            .unwrap()
            .is_empty());
        let c = s.reap_candidates(cut(later + 2000), 100).await.unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(
            s.claim_reap("sb_a", "r1", cut(later + 2000)).await.unwrap(),
            Some(RuntimeState::Ready)
        );
        // A failed reclaim restores the previous state with the error.
        s.finish_reap("sb_a", later + 2001, Err("boom".into()))
            .await
            .unwrap();
        let row = s.runtime("sb_a").await.unwrap().unwrap();
        assert_eq!(row.state, RuntimeState::Ready);
        assert_eq!(row.last_error.as_deref(), Some("boom"));
        s.claim_reap("sb_a", "r1", cut(later + 3000))
            .await
            .unwrap()
            .unwrap();
        s.finish_reap("sb_a", later + 3001, Ok(())).await.unwrap();
        assert_eq!(
            s.runtime("sb_a").await.unwrap().unwrap().state,
            RuntimeState::Dormant
        );
        // Dormant: the next call claims generation 2.
        assert_eq!(s.touch_if_ready("sb_a", later + 4000).await.unwrap(), None);
        assert_eq!(
            s.claim_start("sb_a", "r2", later + 4000, later - 1000, None)
                .await
                .unwrap(),
            Some(2)
        );
    }

    #[tokio::test]
    async fn url_targets_and_uncalled_sandboxes_are_never_candidates() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_never")).await.unwrap();
        let mut u = target("tg_url");
        u.kind = TargetKind::Url {
            url: "http://127.0.0.1:9".into(),
        };
        s.put_target(&u).await.unwrap();
        // Even with a (forged) idle ready row, a URL target is not reclaimable.
        sqlx::query(
            "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at) \
             VALUES ('tg_url', 'ready', 1, 0, 0)",
        )
        .execute(s.pool())
        .await
        .unwrap();
        assert!(s
            .reap_candidates(cut(10_000_000), 100)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn stranded_starting_rows_are_reclaimable_and_reclaimed_again() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_s")).await.unwrap();
        let t0 = 1_000_000;
        s.claim_start("sb_s", "dead", t0, t0 - 5000, None)
            .await
            .unwrap()
            .unwrap();
        assert!(s
            .reap_candidates(cut(t0 + 1000), 10)
            .await
            .unwrap()
            .is_empty());
        let c = cut(t0 + 6000);
        assert_eq!(s.reap_candidates(c, 10).await.unwrap().len(), 1);
        assert_eq!(
            s.claim_reap("sb_s", "r1", c).await.unwrap(),
            Some(RuntimeState::Starting)
        );
        // The reaper dies here; the row stays `reaping` and is found again,
        // keeping the state it had before.
        let c2 = cut(t0 + 7000);
        assert_eq!(s.reap_candidates(c2, 10).await.unwrap().len(), 1);
        assert_eq!(
            s.claim_reap("sb_s", "r2", c2).await.unwrap(),
            Some(RuntimeState::Starting)
        );
        let mut l1 = s.reap_locker().await.unwrap();
        let mut l2 = s.reap_locker().await.unwrap();
        assert!(l1.try_lock("sb_s").await.unwrap());
        assert!(!l2.try_lock("sb_s").await.unwrap(), "busy is a skip");
        l1.unlock("sb_s").await.unwrap();
        assert!(l2.try_lock("sb_s").await.unwrap());
    }

    #[tokio::test]
    async fn sessions_collect_their_attachments() {
        let (_d, s) = sqlite().await;
        let ses = s.open_session("r1", 100).await.unwrap();
        assert!(s.session_live(&ses, 50).await.unwrap());
        s.attach("sb_1", "one", &ses).await.unwrap();
        s.attach("sb_2", "two", &ses).await.unwrap();
        s.detach("sb_2").await.unwrap();
        assert_eq!(s.expired_sessions(200).await.unwrap(), vec![ses.clone()]);
        let gone = s.end_session(&ses).await.unwrap();
        assert_eq!(gone, vec![("sb_1".to_string(), "one".to_string())]);
        assert!(!s.session_live(&ses, 50).await.unwrap());
    }
}

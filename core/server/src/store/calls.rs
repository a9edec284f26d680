//! Calls in flight, as a fact the reaper checks instead of a timer it
//! trusts.
//!
//! A replica holds one database session of its own (Postgres) on which it
//! takes a *shared* session-level advisory lock per target with gateway
//! calls in flight: taken when the first call opens, released when the
//! last one closes. The reaper's claim takes the *exclusive* try-lock on
//! the same key ([`super::ReapLocker`]) and skips the target when it cannot
//! have it. So a call in flight is never reclaimed however late its
//! replica's heartbeats are (a stalled, starved or paused process, a slow
//! database: the session and its locks stay), and the guard vanishes the
//! moment the replica dies (the kernel closes its socket, Postgres ends the
//! session and drops its locks): nothing waits for a lease to expire.
//!
//! A replica whose whole host freezes keeps its session until TCP
//! keepalive gives up on it: the session asks the server for probes after
//! [`KEEPALIVE_IDLE_S`] s, every [`KEEPALIVE_INTERVAL_S`] s, at most
//! [`KEEPALIVE_COUNT`] unanswered.
//!
//! With SQLite (one replica) the same holds in process: one table of
//! holds shared by the calls and the reaper's locker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, Connection};

use super::{lock_key, Result, StoreError};

/// Seconds of silence before the server probes the lock session.
pub const KEEPALIVE_IDLE_S: u32 = 10;
/// Seconds between probes.
pub const KEEPALIVE_INTERVAL_S: u32 = 5;
/// Unanswered probes after which the server ends the session.
pub const KEEPALIVE_COUNT: u32 = 4;

/// Who holds a target in process (SQLite: one replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LocalHold {
    /// The reaper is reclaiming it.
    Reclaim,
    /// This many calls are in flight.
    Calls(u32),
}

/// The in-process holds of targets (SQLite), shared with the reaper's locker.
pub(super) type LocalHolds = Arc<Mutex<HashMap<String, LocalHold>>>;

/// Locks a hold table, whatever a panicking holder left.
pub(super) fn holds(h: &LocalHolds) -> std::sync::MutexGuard<'_, HashMap<String, LocalHold>> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

/// The calls in flight of this replica, held as locks the reaper respects.
#[derive(Debug)]
pub struct CallLocks {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Postgres(tokio::sync::Mutex<PgSession>),
    Local(LocalHolds),
}

/// The replica's lock session and the calls it holds locks for.
#[derive(Debug)]
struct PgSession {
    url: String,
    conn: Option<AnyConnection>,
    /// Calls in flight per target; a target is here exactly while this
    /// session (when open) holds its shared lock once.
    held: HashMap<String, u32>,
}

impl PgSession {
    /// The open session, opened (with its keepalive settings) if needed.
    /// A session opened anew takes again the locks of every target held:
    /// the old one's went with it.
    async fn conn(&mut self) -> Result<&mut AnyConnection> {
        if self.conn.is_none() {
            let opts: AnyConnectOptions = self.url.parse()?;
            let mut conn = AnyConnection::connect_with(&opts).await?;
            sqlx::query(&format!(
                "SELECT set_config('application_name', 'burrow call locks', false), \
                        set_config('tcp_keepalives_idle', '{KEEPALIVE_IDLE_S}', false), \
                        set_config('tcp_keepalives_interval', '{KEEPALIVE_INTERVAL_S}', false), \
                        set_config('tcp_keepalives_count', '{KEEPALIVE_COUNT}', false)"
            ))
            .execute(&mut conn)
            .await?;
            for target in self.held.keys() {
                let ok: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock_shared($1)")
                    .bind(lock_key(target))
                    .fetch_one(&mut conn)
                    .await?;
                if !ok {
                    tracing::warn!(
                        target = %target,
                        "the lock session was lost while a call was in flight, and a reclaim \
                         holds the target now"
                    );
                }
            }
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Corrupt("lock session missing".into()))
    }

    /// Runs one lock statement, on a new session if the open one is
    /// broken (one retry).
    async fn run(&mut self, sql: &str, key: i64) -> Result<bool> {
        let first = sqlx::query_scalar::<_, bool>(sql)
            .bind(key)
            .fetch_one(self.conn().await?)
            .await;
        let e = match first {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        tracing::warn!(error = %e, "the call lock session failed; opening another");
        self.conn = None;
        let again = sqlx::query_scalar::<_, bool>(sql)
            .bind(key)
            .fetch_one(self.conn().await?)
            .await;
        if again.is_err() {
            self.conn = None;
        }
        Ok(again?)
    }
}

impl CallLocks {
    pub(super) fn postgres(url: String) -> CallLocks {
        CallLocks {
            inner: Inner::Postgres(tokio::sync::Mutex::new(PgSession {
                url,
                conn: None,
                held: HashMap::new(),
            })),
        }
    }

    pub(super) fn local(holds: LocalHolds) -> CallLocks {
        CallLocks {
            inner: Inner::Local(holds),
        }
    }

    /// Counts a call in flight on `target`, taking the target's shared
    /// lock for the first one. `None`: a reclaim holds the target right
    /// now (nothing is counted).
    pub async fn enter(self: &Arc<Self>, target: &str) -> Result<Option<CallHold>> {
        let hold = || CallHold {
            locks: self.clone(),
            target: Some(target.to_owned()),
        };
        match &self.inner {
            Inner::Postgres(session) => {
                let mut s = session.lock().await;
                if let Some(n) = s.held.get_mut(target) {
                    *n += 1;
                    return Ok(Some(hold()));
                }
                if !s
                    .run("SELECT pg_try_advisory_lock_shared($1)", lock_key(target))
                    .await?
                {
                    return Ok(None);
                }
                s.held.insert(target.to_owned(), 1);
                Ok(Some(hold()))
            }
            Inner::Local(h) => {
                let mut h = holds(h);
                match h.get_mut(target) {
                    Some(LocalHold::Reclaim) => return Ok(None),
                    Some(LocalHold::Calls(n)) => *n += 1,
                    None => {
                        h.insert(target.to_owned(), LocalHold::Calls(1));
                    }
                }
                Ok(Some(hold()))
            }
        }
    }

    /// One call on `target` has ended; the last one releases the lock.
    async fn leave(&self, target: &str) {
        match &self.inner {
            Inner::Postgres(session) => {
                let mut s = session.lock().await;
                match s.held.get_mut(target) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        s.held.remove(target);
                        // A session that fails here is dropped, and its
                        // locks with it: released either way.
                        if s.conn.is_some() {
                            if let Err(e) = s
                                .run("SELECT pg_advisory_unlock_shared($1)", lock_key(target))
                                .await
                            {
                                tracing::warn!(target = %target, error = %e, "releasing a call lock failed");
                            }
                        }
                    }
                    None => {}
                }
            }
            Inner::Local(h) => {
                let mut h = holds(h);
                if let Some(LocalHold::Calls(n)) = h.get_mut(target) {
                    if *n > 1 {
                        *n -= 1;
                    } else {
                        h.remove(target);
                    }
                }
            }
        }
    }

    /// Checks the lock session while it holds locks, opening another (and
    /// taking the locks again) if it broke. The server calls this
    /// periodically, so a session lost while calls run is replaced without
    /// waiting for the next call.
    pub async fn check(&self) -> Result<()> {
        let Inner::Postgres(session) = &self.inner else {
            return Ok(());
        };
        let mut s = session.lock().await;
        if s.held.is_empty() {
            return Ok(());
        }
        s.run("SELECT $1::int8 = $1::int8", 0).await.map(|_| ())
    }

    /// Targets with calls in flight in this replica (for tests and status).
    pub async fn held(&self) -> Vec<String> {
        let mut v: Vec<String> = match &self.inner {
            Inner::Postgres(session) => session.lock().await.held.keys().cloned().collect(),
            Inner::Local(h) => holds(h)
                .iter()
                .filter(|(_, v)| matches!(v, LocalHold::Calls(_)))
                .map(|(k, _)| k.clone())
                .collect(),
        };
        v.sort();
        v
    }
}

/// One call in flight on a target; [`CallHold::release`] (or dropping it,
/// inside a tokio runtime) ends it.
#[derive(Debug)]
pub struct CallHold {
    locks: Arc<CallLocks>,
    target: Option<String>,
}

impl CallHold {
    /// Ends the call, releasing the target's lock if it was the last one.
    pub async fn release(mut self) {
        if let Some(t) = self.target.take() {
            self.locks.leave(&t).await;
        }
    }
}

impl Drop for CallHold {
    fn drop(&mut self) {
        if let Some(t) = self.target.take() {
            let locks = self.locks.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { locks.leave(&t).await });
            }
        }
    }
}

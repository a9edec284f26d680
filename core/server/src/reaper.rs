//! The idle reaper: every `sweep_interval`, reclaim sandbox targets idle
//! past `idle_timeout`.
//!
//! Never reclaimed: a target with a call in flight in any replica (the
//! call holds a shared lock on the target that the reclaim's exclusive
//! try-lock cannot have: see [`crate::store::CallLocks`]; a lease is no
//! guard), a target never called (no runtime row), a URL target (no
//! workload). Reclaimable besides idle ready
//! targets: `starting` rows older than `startup_timeout` (their replica died
//! mid-start), `failed` rows older than `idle_timeout`, and `reaping` rows
//! whose reaper died (its advisory lock is free again). Each reclaim is
//! serialised per target with a lock taken by try-lock — a Postgres
//! advisory lock on the reaper's own connection, so a dying replica's locks
//! go with its connection; a busy lock is a skip, not a failure. A failed
//! reclaim restores the state the row had, with the error.
//!
//! The database work is batched: the candidates are taken [`CLAIM_CHUNK`]
//! at a time, and for each chunk one statement takes the free locks, one
//! claims the rows (re-checking every condition), one releases the locks
//! of the rows not claimed, and one, after the stops, those of the rest. The reclaims of a chunk run [`RECLAIM_PARALLEL`] at a time; each
//! group of reclaims that have ended is recorded in one statement, as soon
//! as it has ended, so a stopped sandbox is not left `reaping` while the
//! others stop.
//!
//! `idle_timeout = 0` disables reclaim and says so once; otherwise the
//! reaper logs only failures. Expired leases and sessions are swept either
//! way.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use burrow::{Backend, ErrorCode, SandboxId, StopOptions};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;

use crate::app::AppState;
use crate::store::{ms, now_ms, ReapLocker, Store, StoreError, SweepCutoffs};

/// Most candidates handled by one sweep (the rest wait for the next).
pub const SWEEP_BATCH: i64 = 10_000;
/// Candidates locked, claimed and released together (one statement each).
/// A claimed row waits for at most `CLAIM_CHUNK / RECLAIM_PARALLEL` stops
/// before its own.
pub const CLAIM_CHUNK: usize = 64;
/// Reclaims (engine stops) of a chunk running at once.
pub const RECLAIM_PARALLEL: usize = 8;
/// A `starting` row is stranded this long after `startup_timeout`.
const STRANDED_MARGIN: Duration = Duration::from_secs(5);

/// What reclaiming a target means.
#[async_trait]
pub trait Reclaim: Send + Sync {
    /// Stops the target's workload; the error text is recorded on failure.
    async fn reclaim(&self, target_id: &str) -> Result<(), String>;
}

/// Reclaim through the engine: a graceful stop (its id, configuration,
/// volumes and writable layer stay).
#[derive(Debug)]
pub struct EngineReclaim(pub Arc<AppState>);

#[async_trait]
impl Reclaim for EngineReclaim {
    async fn reclaim(&self, target_id: &str) -> Result<(), String> {
        let state = &self.0;
        state.gateway.forget_runtime(target_id);
        let id: SandboxId = target_id
            .parse()
            .map_err(|_| "not a sandbox id".to_string())?;
        let info = match state.engine.get_by_id(&id).await {
            Ok(i) => i,
            // Removed meanwhile: nothing left to stop.
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        if !info.status.has_runtime() {
            return Ok(());
        }
        stop(state.engine.as_ref(), &info.name, &id).await
    }
}

async fn stop(engine: &dyn Backend, name: &str, id: &SandboxId) -> Result<(), String> {
    match engine.stop(name, id, StopOptions::default()).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Timeouts of a sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepParams {
    /// Idle time after which a ready target is reclaimed.
    pub idle_timeout: Duration,
    /// The gateway's start bound.
    pub startup_timeout: Duration,
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Candidates found.
    pub candidates: u64,
    /// Reclaimed.
    pub reclaimed: u64,
    /// Failed (state restored with the error).
    pub failed: u64,
    /// Skipped: locked by another replica, or no longer a candidate.
    pub skipped: u64,
    /// Expired leases deleted.
    pub leases_expired: u64,
}

/// One sweep.
pub async fn sweep(
    store: &Store,
    locker: &mut ReapLocker,
    replica: &str,
    p: SweepParams,
    reclaim: &dyn Reclaim,
) -> Result<SweepReport, StoreError> {
    let now = now_ms();
    let mut report = SweepReport {
        leases_expired: store.sweep_leases(now).await?,
        ..SweepReport::default()
    };
    let cut = SweepCutoffs {
        now,
        idle_before: now - ms(p.idle_timeout),
        starting_before: now - ms(p.startup_timeout + STRANDED_MARGIN),
        failed_before: now - ms(p.idle_timeout),
    };
    let candidates = store.reap_candidates(cut, SWEEP_BATCH).await?;
    report.candidates = candidates.len() as u64;
    for chunk in candidates.chunks(CLAIM_CHUNK) {
        let ids: Vec<String> = chunk.iter().map(|c| c.target_id.clone()).collect();
        let locked = locker.try_lock_many(&ids).await?;
        report.skipped += (ids.len() - locked.len()) as u64;
        if locked.is_empty() {
            continue;
        }
        // Claimed (re-checked) in one statement; the locks of the rows not
        // taken go at once, so a call waiting for one is not kept waiting
        // for this chunk's stops.
        let claimed = match store.claim_reaps(&locked, replica, cut).await {
            Ok(c) => c,
            Err(e) => {
                let _ = locker.unlock_many(&locked).await;
                return Err(e);
            }
        };
        let claimed: Vec<String> = claimed.into_iter().map(|(id, _)| id).collect();
        let passed: Vec<String> = locked
            .iter()
            .filter(|id| !claimed.contains(id))
            .cloned()
            .collect();
        report.skipped += passed.len() as u64;
        let released = locker.unlock_many(&passed).await;
        let result = match released {
            Ok(()) => reclaim_claimed(store, reclaim, claimed.clone(), &mut report).await,
            Err(e) => Err(e),
        };
        // Released whatever happened; if releasing fails the caller drops
        // the lock connection, which releases them too.
        let released = locker.unlock_many(&claimed).await;
        result?;
        released?;
    }
    Ok(report)
}

/// Reclaims the claimed targets of a chunk, [`RECLAIM_PARALLEL`] at a time,
/// and records how each ended.
async fn reclaim_claimed(
    store: &Store,
    reclaim: &dyn Reclaim,
    claimed: Vec<String>,
    report: &mut SweepReport,
) -> Result<(), StoreError> {
    let one = |id: String| async move {
        let outcome = reclaim.reclaim(&id).await;
        (id, outcome)
    };
    let mut waiting = claimed.into_iter();
    let mut running = FuturesUnordered::new();
    running.extend(waiting.by_ref().take(RECLAIM_PARALLEL).map(one));
    while let Some(first) = running.next().await {
        // Everything that has ended by now is recorded in one statement.
        let mut ended = vec![first];
        loop {
            while running.len() < RECLAIM_PARALLEL {
                match waiting.next() {
                    Some(id) => running.push(one(id)),
                    None => break,
                }
            }
            match running.next().now_or_never() {
                Some(Some(done)) => ended.push(done),
                _ => break,
            }
        }
        store.finish_reaps(now_ms(), &ended).await?;
        for (id, outcome) in &ended {
            match outcome {
                Ok(()) => report.reclaimed += 1,
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(target = %id, error = %e, "reclaiming an idle sandbox failed");
                }
            }
        }
    }
    Ok(())
}

/// The reaper loop of a replica (also sweeps expired leases and sessions).
pub async fn run(state: Arc<AppState>) {
    let every = state.config.reaper.sweep_interval;
    let idle = state.config.reaper.idle_timeout.filter(|d| !d.is_zero());
    if idle.is_none() {
        tracing::info!("idle reaper disabled by explicit zero timeout");
    }
    let reclaim = EngineReclaim(state.clone());
    let mut locker: Option<ReapLocker> = None;
    loop {
        tokio::time::sleep(every).await;
        crate::sessions::sweep(&state).await;
        // Warm sandboxes that ended are replaced without waiting for a claim.
        if let Err(e) = state.engine.refill_pools().await {
            tracing::warn!(error = %e, "refilling the pools failed");
        }
        if let Some(keep) = state.config.audit.retention {
            let before = crate::store::now_ms() - crate::store::ms(keep);
            if let Err(e) = state.store.prune_audit(before).await {
                tracing::warn!(error = %e, "pruning the audit log failed");
            }
        }
        if let Some(keep) = state.config.events.retention {
            let before = crate::store::now_ms() - crate::store::ms(keep);
            if let Err(e) = state.store.prune_events(before).await {
                tracing::warn!(error = %e, "pruning the event log failed");
            }
        }
        let expired =
            crate::store::now_ms() - crate::store::ms(state.config.gateway.mcp_session_ttl);
        if let Err(e) = state.store.purge_mcp_sessions(expired).await {
            tracing::warn!(error = %e, "purging expired MCP sessions failed");
        }
        if let Err(e) = state
            .store
            .purge_console_sessions(crate::store::now_ms())
            .await
        {
            tracing::warn!(error = %e, "purging expired console sessions failed");
        }
        if let Err(e) = state.store.purge_previews(crate::store::now_ms()).await {
            tracing::warn!(error = %e, "purging expired preview links failed");
        }
        // A lock session lost while calls run is replaced now, not at the
        // next call.
        if let Err(e) = state.store.calls().check().await {
            tracing::warn!(error = %e, "the call lock session cannot be reopened");
        }
        let Some(idle) = idle else {
            match state.store.sweep_leases(now_ms()).await {
                Ok(n) => state.metrics.add(&state.metrics.leases_expired, n),
                Err(e) => tracing::warn!(error = %e, "sweeping expired leases failed"),
            }
            continue;
        };
        if locker.is_none() {
            match state.store.reap_locker().await {
                Ok(l) => locker = Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "the reaper cannot open its lock connection");
                    continue;
                }
            }
        }
        let Some(l) = locker.as_mut() else { continue };
        let params = SweepParams {
            idle_timeout: idle,
            startup_timeout: state.config.gateway.startup_timeout,
        };
        state.metrics.inc(&state.metrics.sweeps);
        match sweep(&state.store, l, state.replica(), params, &reclaim).await {
            Ok(r) => {
                let m = &state.metrics;
                m.add(&m.reclaims_ok, r.reclaimed);
                m.add(&m.reclaims_failed, r.failed);
                m.add(&m.reclaims_skipped, r.skipped);
                m.add(&m.leases_expired, r.leases_expired);
            }
            Err(e) => {
                tracing::warn!(error = %e, "a reaper sweep failed");
                // The lock connection may be the broken part: reopen it.
                locker = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::store::{RuntimeState, Target, TargetKind};

    /// Stops nothing; fails for ids ending in `7`; counts how many run at once.
    #[derive(Default)]
    struct Fake {
        running: AtomicUsize,
        most: AtomicUsize,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Reclaim for Fake {
        async fn reclaim(&self, target_id: &str) -> Result<(), String> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            self.seen.lock().unwrap().push(target_id.to_owned());
            if target_id.ends_with('7') {
                Err(format!("{target_id} would not stop"))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn a_sweep_claims_in_chunks_skips_busy_locks_and_records_each_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let s = Store::open(&url, &url, 4, Duration::from_secs(5))
            .await
            .unwrap();
        let now = now_ms();
        // 150 idle ready targets (more than two chunks), 10 fresh ones.
        let ids: Vec<String> = (0..160).map(|i| format!("sb_{i:03}")).collect();
        for (i, id) in ids.iter().enumerate() {
            s.put_target(&Target {
                id: id.clone(),
                kind: TargetKind::Sandbox {
                    port: 80,
                    command: None,
                },
                metadata: serde_json::json!({}),
                headers: Vec::new(),
                created_at: 0,
                tenant: "default".into(),
            })
            .await
            .unwrap();
            let used = if i < 150 { now - 3_600_000 } else { now };
            sqlx::query(
                "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at) \
                 VALUES ($1, 'ready', 1, $2, $2)",
            )
            .bind(id)
            .bind(used)
            .execute(s.pool())
            .await
            .unwrap();
        }
        // One is being reclaimed by someone else (its lock is taken).
        let mut other = s.reap_locker().await.unwrap();
        assert!(other.try_lock("sb_100").await.unwrap());
        // Another has a call in flight.
        let call = s.calls().enter("sb_101").await.unwrap().unwrap();
        let mut locker = s.reap_locker().await.unwrap();
        let fake = Fake::default();
        let p = SweepParams {
            idle_timeout: Duration::from_secs(600),
            startup_timeout: Duration::from_secs(60),
        };
        let r = sweep(&s, &mut locker, "r1", p, &fake).await.unwrap();
        // sb_007, sb_017, ... sb_147 fail: 15 of them.
        assert_eq!(
            (r.candidates, r.reclaimed, r.failed, r.skipped),
            (150, 133, 15, 2)
        );
        let most = fake.most.load(Ordering::SeqCst);
        assert!(
            (2..=RECLAIM_PARALLEL).contains(&most),
            "{most} reclaims at once"
        );
        assert_eq!(fake.seen.lock().unwrap().len(), 148);
        for (i, id) in ids.iter().enumerate() {
            let row = s.runtime(id).await.unwrap().unwrap();
            let want = match i {
                100 | 101 | 150.. => (RuntimeState::Ready, None),
                _ if i % 10 == 7 => (RuntimeState::Ready, Some(format!("{id} would not stop"))),
                _ => (RuntimeState::Dormant, None),
            };
            assert_eq!((row.state, row.last_error), want, "{id}");
            assert_eq!(row.owner, None, "{id}");
        }
        // Every lock was released: the busy one can be taken now that its
        // holder lets go, and the others are free.
        other.unlock("sb_100").await.unwrap();
        call.release().await;
        assert_eq!(locker.try_lock_many(&ids).await.unwrap(), ids);
        locker.unlock_many(&ids).await.unwrap();
        // The next sweep finds the failed ones again (still idle) with the
        // two it skipped, and skips nothing.
        let r = sweep(&s, &mut locker, "r1", p, &fake).await.unwrap();
        assert_eq!(
            (r.candidates, r.reclaimed, r.failed, r.skipped),
            (17, 2, 15, 0)
        );
    }
}

//! The idle reaper: every `sweep_interval`, reclaim sandbox targets idle
//! past `idle_timeout`.
//!
//! Never reclaimed: a target with a live lease, a target never called (no
//! runtime row), a URL target (no workload). Reclaimable besides idle ready
//! targets: `starting` rows older than `startup_timeout` (their replica died
//! mid-start), `failed` rows older than `idle_timeout`, and `reaping` rows
//! whose reaper died (its advisory lock is free again). Each reclaim is
//! serialised per target with a lock taken by try-lock — a Postgres
//! advisory lock on the reaper's own connection, so a dying replica's locks
//! go with its connection; a busy lock is a skip, not a failure. A failed
//! reclaim restores the state the row had, with the error.
//!
//! `idle_timeout = 0` disables reclaim and says so once; otherwise the
//! reaper logs only failures. Expired leases and sessions are swept either
//! way.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use burrow::{Backend, ErrorCode, SandboxId, StopOptions};

use crate::app::AppState;
use crate::store::{ms, now_ms, ReapLocker, Store, StoreError, SweepCutoffs};

/// Most candidates handled by one sweep (the rest wait for the next).
pub const SWEEP_BATCH: i64 = 10_000;
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
        state.gateway.forget(target_id);
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
    match engine
        .stop_identified(name, id, StopOptions::default())
        .await
    {
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
    for c in candidates {
        if !locker.try_lock(&c.target_id).await? {
            report.skipped += 1;
            continue;
        }
        let result = reclaim_one(store, replica, cut, reclaim, &c.target_id).await;
        locker.unlock(&c.target_id).await?;
        match result? {
            None => report.skipped += 1,
            Some(Ok(())) => report.reclaimed += 1,
            Some(Err(e)) => {
                report.failed += 1;
                tracing::warn!(target = %c.target_id, error = %e, "reclaiming an idle sandbox failed");
            }
        }
    }
    Ok(report)
}

async fn reclaim_one(
    store: &Store,
    replica: &str,
    cut: SweepCutoffs,
    reclaim: &dyn Reclaim,
    id: &str,
) -> Result<Option<Result<(), String>>, StoreError> {
    // Re-checked under the lock, in one statement with the claim.
    if store.claim_reap(id, replica, cut).await?.is_none() {
        return Ok(None);
    }
    let outcome = reclaim.reclaim(id).await;
    store.finish_reap(id, now_ms(), outcome.clone()).await?;
    Ok(Some(outcome))
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

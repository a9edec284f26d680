//! The idle and max-duration checker of a backend: a pass over the
//! records every second, the pod asked whether calls are in flight before
//! an idle one is reclaimed.

use std::sync::Weak;
use std::time::Duration;

use burrow::{ExitReason, Result, Status};
use kube::api::{ListParams, Patch, PatchParams};

use crate::record::{self, Stored};
use crate::{api_error, guest, names, now_ms, KubeBackend, REAPER_PERIOD, RECLAIM_LOCK_TIMEOUT};

impl KubeBackend {
    /// The idle and max-duration checks of one pass over the records.
    pub(crate) async fn reap_once(&self) -> Result<()> {
        // This process's own use of its guests counts as activity.
        let local = self.guests.all();
        let list = self
            .records
            .list(&ListParams::default().labels(&format!("{}=burrow", record::MANAGED_LABEL)))
            .await
            .map_err(|e| api_error("listing sandbox records", e))?;
        for object in list {
            let Ok(s) = Stored::from_object(object) else {
                continue;
            };
            let info = s.info().clone();
            if info.status != Status::Running {
                continue;
            }
            let mine: Vec<_> = local
                .iter()
                .filter(|(id, _)| *id == info.id)
                .map(|(_, r)| r)
                .collect();
            let busy = mine.iter().any(|r| r.in_flight() > 0);
            let used_ago = mine.iter().map(|r| r.idle_for()).min();
            let now = now_ms();
            if let Some(ago) = used_ago {
                let used_at = now - ago.as_millis() as i64;
                // Stamp the record only when it moves the clock by a while.
                if used_at > s.spec.activity_ms + 500 {
                    let _ = self.stamp(&info.name, used_at).await;
                }
            }
            let activity = used_ago
                .map(|a| now - a.as_millis() as i64)
                .unwrap_or(0)
                .max(s.spec.activity_ms);
            let idle = info
                .config
                .idle_timeout
                .is_some_and(|idle| !busy && now - activity > idle.as_millis() as i64);
            let overdue = matches!(
                (info.config.max_duration, info.last_run.as_ref().and_then(|r| r.running_at_ms)),
                (Some(max), Some(at)) if now - at > max.as_millis() as i64
            );
            let reclaim = if overdue {
                Some((Duration::from_secs(10), ExitReason::MaxDuration))
            } else {
                idle.then_some((Duration::from_secs(2), ExitReason::IdleTimeout))
            };
            // Idle by every clock; whether some session, of any process,
            // has requests in flight is the pod's to say, and it holds the
            // answer while the pod is deleted. When it cannot say (the exec
            // failed), the pod stays: the next pass asks again.
            let mut held = None;
            if reclaim.is_some() && !overdue {
                let pod = names::pod_name(&info.id, info.generation);
                match tokio::time::timeout(
                    RECLAIM_LOCK_TIMEOUT,
                    guest::reclaim_lock(&self.pods, &pod),
                )
                .await
                {
                    Ok(Ok(Some(lock))) => held = Some(lock),
                    Ok(Ok(None)) => continue,
                    Ok(Err(e)) => {
                        tracing::debug!(sandbox = %info.id, error = %e, "idle, but whether requests are in flight cannot be told; keeping it");
                        continue;
                    }
                    Err(_) => {
                        tracing::debug!(sandbox = %info.id, "idle, but its reclaim lock did not answer; keeping it");
                        continue;
                    }
                }
                tracing::info!(sandbox = %info.id, "idle timeout: deleting the pod, keeping the record");
            }
            if let Some((grace, reason)) = reclaim {
                let _ = self.stop_as(&info.name, &info.id, grace, reason).await;
            }
            drop(held);
        }
        Ok(())
    }

    /// Moves the record's idle clock to `at_ms` (a merge patch: activity is
    /// not a transition, so it needs no precondition).
    pub(crate) async fn stamp(&self, name: &str, at_ms: i64) -> Result<()> {
        let patch = serde_json::json!({"spec": {"activityMs": at_ms}});
        self.records
            .patch(
                &names::record_name(name),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| api_error("recording activity", e))
    }
}

pub(crate) fn spawn_reaper(backend: Weak<KubeBackend>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REAPER_PERIOD).await;
            let Some(b) = backend.upgrade() else {
                return;
            };
            if let Err(e) = b.reap_once().await {
                tracing::debug!(error = %e, "idle check failed; trying again");
            }
        }
    });
}

/// Keeps every pool at its size (a size set through the `scale`
/// subresource, a warm sandbox that died), a pass every [`POOL_PERIOD`].
pub(crate) fn spawn_pool_keeper(backend: Weak<KubeBackend>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(POOL_PERIOD).await;
            let Some(b) = backend.upgrade() else {
                return;
            };
            if let Err(e) = b.refill_all().await {
                tracing::debug!(error = %e, "refilling the pools failed; trying again");
            }
        }
    });
}

/// How often a backend looks at its pools.
const POOL_PERIOD: Duration = Duration::from_secs(2);

//! Tenants' quotas, checked where a tenant's operation would add to its
//! usage: a create, a start, a fork, a pool's definition or size.
//!
//! Usage is counted from the engine (the tenant's sandboxes, and its pools'
//! warm sandboxes at their size) during the tenant's quota turn (see
//! [`crate::store::QuotaTurn`]), which lasts until the operation is done:
//! of concurrent operations across replicas, each sees what the one before
//! did, so none passes a limit together with another. The turn serializes
//! a tenant's quota-bound operations (not its others, nor other tenants')
//! while it has limits; a tenant without limits takes no turn.
//!
//! A sandbox's CPUs and memory count while it has a runtime; one without
//! limits counts as [`DEFAULT_CPUS`] and [`DEFAULT_MEMORY_MB`], which are
//! the limits a tenant's sandbox that names none is given (its policy's
//! defaults, [`super::SandboxLimits`]): it never runs with more than it
//! is counted for.
//!
//! Every path that starts a sandbox for a tenant goes through its view
//! ([`Scoped`]) and so through its turn, once per path shape: a start, a
//! connect-or-start and a restart (`start_demand`); a create that may
//! claim a pool's running sandbox (a restore from a snapshot is a create,
//! started like any other); a fork (its copies start); a pool's size (its
//! warm sandboxes count as running; the engine's refills keep the size
//! counted); a wake on the runtime stream, which starts an idle-reclaimed
//! sandbox as the tenant's connect-or-start, never as the engine's own
//! demand start (see `super::wake`). The gateway's start and its handles
//! of a target (whose tunnels may wake it) are the target's tenant's view
//! too; the server starts nothing else of a tenant's on its own (the
//! reaper only stops).

use std::future::Future;

use burrow::{Backend, Error, ListFilter, Result, SandboxConfig};

use crate::store::{Quotas, Store, StoreError};

use super::Scoped;

/// The CPUs a sandbox without a CPU limit counts for.
pub const DEFAULT_CPUS: f64 = 1.0;
/// The memory a sandbox without a memory limit counts for, in MiB.
pub const DEFAULT_MEMORY_MB: u64 = 512;

/// Whose quotas a scoped engine checks.
#[derive(Debug, Clone)]
pub struct QuotaCtx {
    /// The server's store (limits, turns, starts).
    pub store: Store,
    /// The tenant.
    pub tenant: String,
}

/// What an operation adds to a tenant's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    sandboxes: u64,
    running: u64,
    cpus: f64,
    memory_mb: u64,
    starts: u64,
}

impl Demand {
    /// `n` new sandboxes of `config`, defined only.
    pub fn defined(n: u64) -> Demand {
        Demand {
            sandboxes: n,
            ..Demand::default()
        }
    }

    /// `n` sandboxes of `config` that start (`new`: they are new ones).
    pub fn started(config: &SandboxConfig, n: u64, new: bool) -> Demand {
        Demand {
            sandboxes: if new { n } else { 0 },
            running: n,
            cpus: config.cpus.unwrap_or(DEFAULT_CPUS) * n as f64,
            memory_mb: config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB) * n,
            starts: n,
        }
    }

    /// `n` warm sandboxes of a pool of `config` (their starts are the
    /// pool's, not counted).
    pub fn warm(config: &SandboxConfig, n: u64) -> Demand {
        Demand {
            starts: 0,
            ..Demand::started(config, n, true)
        }
    }

    /// A running sandbox given more CPUs or memory (a change of its
    /// limits): what it grows by, if anything.
    pub fn grown(info: &burrow::SandboxInfo, changes: &burrow::Modify) -> Demand {
        if !info.status.has_runtime() {
            return Demand::none();
        }
        let cpus = |c: Option<f64>| c.unwrap_or(DEFAULT_CPUS);
        let memory = |m: Option<u64>| m.unwrap_or(DEFAULT_MEMORY_MB);
        let (old_cpus, old_memory) = (cpus(info.config.cpus), memory(info.config.memory_mb));
        let new_cpus = changes.cpus.map_or(old_cpus, cpus);
        let new_memory = changes.memory_mb.map_or(old_memory, memory);
        Demand {
            cpus: (new_cpus - old_cpus).max(0.0),
            memory_mb: new_memory.saturating_sub(old_memory),
            ..Demand::default()
        }
    }

    /// A start of a sandbox that has a runtime already (a restart).
    pub fn restart() -> Demand {
        Demand {
            starts: 1,
            ..Demand::default()
        }
    }

    /// Nothing.
    pub fn none() -> Demand {
        Demand::default()
    }
}

#[derive(Debug, Default)]
struct Usage {
    sandboxes: u64,
    running: u64,
    cpus: f64,
    memory_mb: u64,
}

fn store_error(e: StoreError) -> Error {
    Error::Store {
        reason: e.to_string(),
        source: None,
    }
}

fn exceeded(quota: &str, limit: u64, reason: String) -> Error {
    Error::QuotaExceeded {
        quota: quota.to_owned(),
        limit,
        reason,
    }
}

impl Scoped {
    async fn usage(&self) -> Result<Usage> {
        let mut u = Usage::default();
        for s in self.list(&ListFilter::default()).await? {
            u.sandboxes += 1;
            if s.status.has_runtime() {
                u.running += 1;
                u.cpus += s.config.cpus.unwrap_or(DEFAULT_CPUS);
                u.memory_mb += s.config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB);
            }
        }
        let pools = match self.list_pools().await {
            Ok(p) => p,
            Err(Error::Unsupported { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        for p in pools {
            let n = u64::from(p.size);
            u.sandboxes += n;
            u.running += n;
            u.cpus += p.config.cpus.unwrap_or(DEFAULT_CPUS) * n as f64;
            u.memory_mb += p.config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB) * n;
        }
        Ok(u)
    }

    /// Runs `op` if the tenant's limits allow what it adds (`demand`,
    /// read only when the tenant has limits), in the tenant's quota turn;
    /// a start it makes is counted.
    pub(super) async fn within_quota<T, D, Fut>(&self, demand: D, op: Fut) -> Result<T>
    where
        D: Future<Output = Result<Demand>>,
        Fut: Future<Output = Result<T>>,
    {
        let Some(ctx) = self.quota.as_ref() else {
            return op.await;
        };
        let quotas = ctx.store.quotas(&ctx.tenant).await.map_err(store_error)?;
        let quotas = quotas.unwrap_or_default();
        if !quotas.any() {
            return op.await;
        }
        let demand = demand.await?;
        if demand == Demand::none() {
            return op.await;
        }
        let mut turn = ctx
            .store
            .quota_turn(&ctx.tenant)
            .await
            .map_err(store_error)?;
        let usage = self.usage().await?;
        let starts = match quotas.max_starts_per_minute {
            Some(_) if demand.starts > 0 => turn.recent_starts().await.map_err(store_error)?,
            _ => 0,
        };
        check(&quotas, &usage, starts, &demand)?;
        burrow::internal::fault::hold(burrow::internal::fault::Fault::QuotaInTurn).await;
        let r = op.await;
        if r.is_ok() && demand.starts > 0 {
            for _ in 0..demand.starts {
                turn.record_start().await.map_err(store_error)?;
            }
        }
        turn.end().await.map_err(store_error)?;
        r
    }
}

/// Whether `demand` fits `quotas` beside `usage` and `starts` of the last
/// minute.
fn check(quotas: &Quotas, usage: &Usage, starts: u64, demand: &Demand) -> Result<()> {
    let counts = [
        (
            "sandboxes",
            quotas.max_sandboxes,
            usage.sandboxes,
            demand.sandboxes,
        ),
        ("running", quotas.max_running, usage.running, demand.running),
        (
            "memory_mb",
            quotas.max_memory_mb,
            usage.memory_mb,
            demand.memory_mb,
        ),
        (
            "starts_per_minute",
            quotas.max_starts_per_minute,
            starts,
            demand.starts,
        ),
    ];
    for (quota, limit, used, more) in counts {
        if let Some(limit) = limit {
            if more > 0 && used + more > limit {
                return Err(exceeded(
                    quota,
                    limit,
                    format!("{used} in use, {more} more asked"),
                ));
            }
        }
    }
    if let Some(limit) = quotas.max_cpus {
        if demand.cpus > 0.0 && usage.cpus + demand.cpus > limit + 1e-9 {
            // Reported in thousandths, the quota's unit in an error.
            let milli = (limit * 1000.0).round() as u64;
            return Err(exceeded(
                "millicpus",
                milli,
                format!("{} CPUs in use, {} more asked", usage.cpus, demand.cpus),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<()>) -> Option<(String, u64)> {
        match r {
            Ok(()) => None,
            Err(Error::QuotaExceeded { quota, limit, .. }) => Some((quota, limit)),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn limits_are_checked_against_usage_and_demand() {
        let q = Quotas {
            max_sandboxes: Some(3),
            max_running: Some(2),
            max_cpus: Some(1.5),
            max_memory_mb: None,
            max_starts_per_minute: Some(10),
        };
        let used = Usage {
            sandboxes: 2,
            running: 1,
            cpus: 1.0,
            memory_mb: 512,
        };
        let mut half = SandboxConfig::new("x");
        half.cpus = Some(0.5);
        assert_eq!(code(check(&q, &used, 0, &Demand::defined(1))), None);
        assert_eq!(
            code(check(&q, &used, 0, &Demand::defined(2))),
            Some(("sandboxes".into(), 3))
        );
        assert_eq!(
            code(check(&q, &used, 0, &Demand::started(&half, 1, false))),
            None
        );
        assert_eq!(
            code(check(
                &q,
                &used,
                0,
                &Demand::started(&SandboxConfig::new("x"), 1, false)
            )),
            Some(("millicpus".into(), 1500))
        );
        assert_eq!(
            code(check(&q, &used, 10, &Demand::started(&half, 1, false))),
            Some(("starts_per_minute".into(), 10))
        );
        assert_eq!(
            code(check(&q, &used, 0, &Demand::started(&half, 2, false))),
            Some(("running".into(), 2))
        );
        // What adds nothing is never refused, even over a limit.
        let over = Usage {
            sandboxes: 9,
            ..Usage::default()
        };
        assert_eq!(code(check(&q, &over, 0, &Demand::none())), None);
    }
}

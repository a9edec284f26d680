//! A gateway start: one winner of the start claim runs it in its own task
//! (bounded by `startup_timeout`, holding no database connection while it
//! waits); the others are answered 503 + Retry-After.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow::{Error, ErrorCode, GuestErrorCode, Sandbox, SandboxId, StartOptions};

use crate::app::{ApiError, ApiResult, AppState};
use crate::store::{ms, now_ms, RuntimeState};

/// A `starting` row older than `startup_timeout` plus this is stranded (its
/// replica died mid-start) and may be claimed again.
const STALE_MARGIN: Duration = Duration::from_secs(5);
/// How often a start probes the target port.
const PORT_POLL: Duration = Duration::from_millis(50);

/// How a call got a ready target from [`start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ready {
    /// The generation that is ready.
    pub generation: i64,
    /// This call ran the start (a cold call); `false` when someone else's
    /// start finished between this call's look and its claim (it paid no
    /// start: a warm call).
    pub started: bool,
}

/// Makes the target ready: wins the start claim and runs the start, or
/// answers 503 while someone else's start (or a reclaim) is under way.
pub(super) async fn start(
    state: &Arc<AppState>,
    tenant: &str,
    id: &str,
    sid: &SandboxId,
    port: u16,
    command: &Option<Vec<String>>,
    stale_ready: Option<i64>,
) -> ApiResult<Ready> {
    // The window a start that another call finishes meanwhile lands in.
    burrow::internal::fault::hold(burrow::internal::fault::Fault::GatewayBeforeClaim).await;
    let now = now_ms();
    let stale_before = now - ms(state.config.gateway.startup_timeout + STALE_MARGIN);
    let claimed = state
        .store
        .claim_start(id, state.replica(), now, stale_before, stale_ready)
        .await?;
    let Some(generation) = claimed else {
        let row = state.store.runtime(id).await?;
        if let Some(row) = row.as_ref().filter(|r| r.state == RuntimeState::Ready) {
            // Someone else's start finished in between.
            return Ok(Ready {
                generation: row.generation,
                started: false,
            });
        }
        let reaping = row.is_some_and(|r| r.state == RuntimeState::Reaping);
        state.metrics.inc(&state.metrics.gw_busy);
        let name = state
            .engine
            .get_by_id(sid)
            .await
            .map(|i| i.name)
            .unwrap_or_default();
        return Err(ApiError::busy(
            Error::Starting {
                name,
                id: sid.clone(),
            },
            state.retry_after_secs(),
            if reaping { "reaping" } else { "starting" },
        ));
    };
    // The start is its own task: the caller giving up does not cancel it.
    let task = tokio::spawn(run_start(
        state.clone(),
        tenant.to_owned(),
        id.to_owned(),
        sid.clone(),
        port,
        command.clone(),
        generation,
    ));
    match task.await {
        Ok(Ok(())) => Ok(Ready {
            generation,
            started: true,
        }),
        // The tenant's quota: its own answer (429), not the upstream's.
        Ok(Err(e)) if e.code() == ErrorCode::QuotaExceeded => Err(e.into()),
        Ok(Err(e)) => {
            state.metrics.inc(&state.metrics.gw_failed);
            Err(ApiError::bad_gateway(e))
        }
        Err(e) => Err(ApiError::bad_gateway(Error::Protocol {
            reason: format!("the start task failed: {e}"),
        })),
    }
}

async fn run_start(
    state: Arc<AppState>,
    tenant: String,
    id: String,
    sid: SandboxId,
    port: u16,
    command: Option<Vec<String>>,
    generation: i64,
) -> Result<(), Error> {
    let t0 = Instant::now();
    let limit = state.config.gateway.startup_timeout;
    let engine = state.engine.clone();
    let mut name = String::new();
    // Where a start that runs out of time was: its error says so.
    let phase = Mutex::new("starting the sandbox");
    let set_phase = |p| {
        if let Ok(mut g) = phase.lock() {
            *g = p;
        }
    };
    // The start is the tenant's, within its quotas, and so is the handle
    // the command and the port's probes (and later calls) go through: a
    // tunnel that wakes the sandbox again starts it as the tenant's.
    let tenants = super::tenants_engine(&state, &tenant).await?;
    let work = async {
        let info = engine.get_by_id(&sid).await?;
        name = info.name.clone();
        let opts = StartOptions::default().detached(true);
        let theirs = tenants.get_by_id(&sid).await?;
        tenants.connect_or_start(&theirs.name, &sid, opts).await?;
        let info = tenants.get_by_id(&sid).await?;
        let sandbox = Sandbox::from_info(tenants.clone(), &info);
        if let Some(argv) = &command {
            set_phase(
                "running the target's command, which has not returned (it must start \
                 the service in the background and exit)",
            );
            let out = sandbox.exec(argv.iter().cloned()).await?;
            if !out.success() {
                return Err(Error::StartFailed {
                    name: info.name.clone(),
                    id: info.id.clone(),
                    reason: format!(
                        "the target's command {argv:?} failed ({:?}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
        }
        // Ready means the service accepts connections, not just "booted".
        set_phase("waiting for the port to accept connections");
        loop {
            match sandbox.tunnel(port).await {
                Ok(t) => {
                    drop(t);
                    return Ok::<_, Error>(sandbox);
                }
                Err(Error::Guest { failure, .. })
                    if failure.code() == GuestErrorCode::ConnectionRefused =>
                {
                    tokio::time::sleep(PORT_POLL).await;
                }
                Err(e) => return Err(e),
            }
        }
    };
    let outcome = match tokio::time::timeout(limit, work).await {
        Ok(Ok(sandbox)) => {
            state.gateway.remember(&id, generation, sandbox);
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Timeout {
            operation: format!(
                "starting gateway target {id} (port {port}): {}",
                phase.lock().map(|p| *p).unwrap_or("starting")
            ),
            after: limit,
        }),
    };
    let now = now_ms();
    match outcome {
        Ok(()) => {
            state.metrics.inc(&state.metrics.starts_ok);
            state
                .metrics
                .add(&state.metrics.start_ms_sum, t0.elapsed().as_millis() as u64);
            finish(&state, &id, generation, now, Ok(())).await;
            Ok(())
        }
        Err(e) => {
            state.metrics.inc(&state.metrics.starts_failed);
            tracing::warn!(target = %id, error = %e, "gateway start failed");
            // A failed start leaves nothing running (one its tenant's
            // quota refused did not start anything).
            let refused = e.code() == ErrorCode::QuotaExceeded;
            if !name.is_empty() && !refused {
                if let Err(k) = engine.kill(&name, &sid).await {
                    tracing::warn!(target = %id, error = %k, "removing the workload of a failed start failed");
                }
            }
            finish(&state, &id, generation, now, Err(e.to_string())).await;
            if refused {
                return Err(e);
            }
            Err(Error::StartFailed {
                name,
                id: sid,
                reason: e.to_string(),
            })
        }
    }
}

async fn finish(state: &AppState, id: &str, generation: i64, now: i64, r: Result<(), String>) {
    // Retried: a start must never be left `starting` for a database hiccup.
    for attempt in 0..5u32 {
        match state
            .store
            .finish_start(id, generation, now, r.clone())
            .await
        {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(target = %id, attempt, error = %e, "recording the end of a start failed");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
}

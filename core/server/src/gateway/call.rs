//! What a gateway call holds while it runs: its call lock (the fact the
//! reaper checks), its lease (what `burrow serve status` shows), and the
//! response body that releases both when it ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use burrow::internal::fault::Fault;
use burrow::{Error, SandboxId};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

use crate::app::{ApiError, ApiResult, AppState};
use crate::routes::parse_id;
use crate::store::{ms, now_ms, CallHold, RuntimeState, Target};
use crate::targets::not_found;

/// What a call holds for its duration (until the response body is
/// finished or dropped): its call lock, the fact the reaper checks
/// ([`crate::store::CallLocks`]), and its lease, which `burrow serve status`
/// shows and a heartbeat renews (no guard: a lease whose heartbeats are
/// late expires and is swept, and the call goes on).
pub(super) struct LeaseGuard {
    state: Arc<AppState>,
    lease: String,
    target: String,
    call: Option<CallHold>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl LeaseGuard {
    /// Holds `lease` (already opened) and `call` until dropped.
    fn hold(state: &Arc<AppState>, lease: String, target: &str, call: CallHold) -> LeaseGuard {
        let ttl = ms(state.config.gateway.lease_ttl);
        let every = state.config.gateway.heartbeat_interval;
        let (st, l) = (state.clone(), lease.clone());
        let heartbeat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Tests stall the heartbeats here, past the lease's expiry.
                burrow::internal::fault::hold(Fault::GatewayBeforeHeartbeat).await;
                if let Err(e) = st.store.heartbeat_lease(&l, now_ms() + ttl).await {
                    tracing::warn!(lease = %l, error = %e, "lease heartbeat failed");
                }
            }
        });
        LeaseGuard {
            state: state.clone(),
            lease,
            target: target.to_owned(),
            call: Some(call),
            heartbeat,
        }
    }
}

/// How long a call waits for a target whose lock a reaper holds without
/// having claimed it (it lets go within a statement or two) before it is
/// answered 503.
const RECLAIM_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often it looks again meanwhile.
const RECLAIM_LOCK_POLL: Duration = Duration::from_millis(10);

/// Counts the call as in flight on `id` (the lock the reaper respects).
/// While a reclaim holds the target, answers 503 + Retry-After, like a
/// call arriving during a start: the call never reached the workload.
async fn enter_call(state: &Arc<AppState>, id: &str) -> ApiResult<CallHold> {
    let end = Instant::now() + RECLAIM_LOCK_WAIT;
    loop {
        if let Some(hold) = state.store.calls().enter(id).await? {
            return Ok(hold);
        }
        let reaping = state
            .store
            .runtime(id)
            .await?
            .is_some_and(|r| r.state == RuntimeState::Reaping);
        if reaping || Instant::now() > end {
            state.metrics.inc(&state.metrics.gw_busy);
            let id: SandboxId = parse_id(id)?;
            let name = state
                .engine
                .get_by_id(&id)
                .await
                .map(|i| i.name)
                .unwrap_or_default();
            return Err(ApiError::busy(
                Error::Starting { name, id },
                state.retry_after_secs(),
                "reaping",
            ));
        }
        tokio::time::sleep(RECLAIM_LOCK_POLL).await;
    }
}

/// Takes the call's lock and opens its lease, stamping a ready target, at
/// once (the lease comes with the stamp: a reclaim claim re-checks it; the
/// lock keeps any claim off while the call runs), and finds the target:
/// from the cache if its version is the one the statement read, else from
/// the database. Returns the target, the lease, and the generation if the
/// target is ready.
///
/// The lock and the stamp go in parallel, and the call goes on only with
/// both: a claim that came first makes the row `reaping` (no stamp: the
/// call is answered 503), a stamp that came first makes the claim find the
/// row in use (and the reaper lets the lock go).
pub(super) async fn open_call(
    state: &Arc<AppState>,
    id: &str,
) -> ApiResult<(Arc<Target>, LeaseGuard, Option<i64>)> {
    crate::targets::check_target_id(id)?;
    let now = now_ms();
    let expires = now + ms(state.config.gateway.lease_ttl);
    let (call, open) = tokio::join!(
        enter_call(state, id),
        state.store.open_call(id, state.replica(), expires, now)
    );
    let Some(open) = open? else {
        state.gateway.forget(id);
        return Err(not_found(id).into());
    };
    let call = match call {
        Ok(c) => c,
        Err(e) => {
            let (st, id) = (state.clone(), id.to_owned());
            tokio::spawn(async move {
                let _ = st.store.close_lease(&open.lease, &id, now_ms()).await;
            });
            return Err(e);
        }
    };
    let lease = LeaseGuard::hold(state, open.lease, id, call);
    let target = match state.gateway.target(id, open.target_version) {
        Some(t) => t,
        None => match state.store.get_target_versioned(id).await? {
            Some((t, version)) => state.gateway.remember_target(version, t),
            // Deleted since (the lease is closed as it drops).
            None => {
                state.gateway.forget(id);
                return Err(not_found(id).into());
            }
        },
    };
    Ok((target, lease, open.ready))
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.heartbeat.abort();
        let (st, lease, target, call) = (
            self.state.clone(),
            std::mem::take(&mut self.lease),
            std::mem::take(&mut self.target),
            self.call.take(),
        );
        tokio::spawn(async move {
            if let Err(e) = st.store.close_lease(&lease, &target, now_ms()).await {
                tracing::warn!(lease, error = %e, "closing a lease failed; it will expire");
            }
            // After the stamp: a reaper that gets the lock next sees the
            // call's end as the last use.
            if let Some(call) = call {
                call.release().await;
            }
        });
    }
}

/// The upstream response body, holding the lease (and, for a sandbox, the
/// connection to return to the pool once the body is complete).
pub(super) struct GuardedBody {
    inner: Incoming,
    lease: Option<LeaseGuard>,
    back: Option<(Arc<AppState>, String, i64, SendRequest<Body>)>,
}

impl GuardedBody {
    /// `inner`, holding `lease` until it ends; `back` is the connection
    /// to return to the pool then.
    pub(super) fn new(
        inner: Incoming,
        lease: LeaseGuard,
        back: Option<(Arc<AppState>, String, i64, SendRequest<Body>)>,
    ) -> GuardedBody {
        GuardedBody {
            inner,
            lease: Some(lease),
            back,
        }
    }

    fn finish(&mut self) {
        if let Some((st, id, generation, conn)) = self.back.take() {
            st.gateway.put_back(&id, generation, conn);
        }
        self.lease.take();
    }
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            this.finish();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
        // Otherwise the connection is mid-response: it is dropped, not reused.
    }
}

//! The deliverer: every replica leases due deliveries, posts each to its
//! webhook (signed), and records the attempt: a 2xx answer delivers it;
//! anything else is tried again after a backoff that doubles (from
//! `webhooks.backoff`, at most [`MAX_BACKOFF`]) until
//! `webhooks.max_attempts` are used up. A lease lasts the post's timeout
//! and a margin: a replica killed mid-post leaves a lease that runs out,
//! and another replica posts the delivery again (at least once; the
//! receiver tells repeats apart by `Burrow-Delivery`).
//!
//! Each post goes through the outbound guard (see [`crate::outbound`]): a
//! receiver at the server's host or a private address is reached only
//! where `[outbound] allow` names it, and an attempt without an answer
//! records one generic error, whatever kept it from one.
//!
//! A request carries `Content-Type: application/json`, the event as its
//! body, and
//! - `Burrow-Event-Id`, `Burrow-Event-Type`: the event's id and type;
//! - `Burrow-Delivery`, `Burrow-Attempt`: the delivery's id (the same for
//!   every attempt) and the attempt's number;
//! - `Burrow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` of
//!   `<t>.<body>` with the webhook's secret (see [`signature`]).

use std::sync::Arc;
use std::time::Duration;

use burrow_net::outbound::Guard;
use futures_util::future::join_all;

use super::webhooks::{post, Posted};
use crate::app::AppState;
use crate::store::{ms, now_ms, DeliveryNext, DueDelivery};

/// Deliveries one replica posts at once.
const CONCURRENCY: u32 = 16;

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// How often each replica looks for due deliveries (besides being woken
/// by its own pump).
const POLL: Duration = Duration::from_millis(500);

/// A lease outlives the post's timeout by this much.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The `Burrow-Signature` value of `body` sent at `t` (unix seconds):
/// `t=<t>,v1=<hex of HMAC-SHA256(secret, "<t>.<body>")>`. A receiver
/// computes the same and compares (in constant time), and refuses an old
/// `t` to stop replays.
pub fn signature(secret: &str, t: u64, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(t.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("t={t},v1={}", hex::encode(ctx.sign().as_ref()))
}

/// The wait after failed attempt `attempt` (1, 2, ...): `base`, doubled
/// for each attempt after the first, at most [`MAX_BACKOFF`].
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    base.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// Posts one leased delivery and records how it went.
async fn deliver(state: &AppState, d: DueDelivery, guard: &Guard) {
    let settings = &state.config.webhooks;
    let posted = post(&d, settings.timeout, guard).await;
    let m = &state.metrics;
    let (status, error) = match &posted {
        Posted::Answered(s) => (Some(*s), None),
        Posted::Failed(e) => (None, Some(e.as_str())),
    };
    let ok = matches!(posted, Posted::Answered(s) if (200..300).contains(&s));
    let next = if ok {
        m.inc(&m.webhook_delivered);
        DeliveryNext::Delivered
    } else if d.attempt >= settings.max_attempts {
        m.inc(&m.webhook_failed);
        tracing::warn!(delivery = d.id, url = %d.url, "a webhook delivery failed its last attempt");
        DeliveryNext::GiveUp
    } else {
        m.inc(&m.webhook_retried);
        DeliveryNext::RetryAt(now_ms() + ms(backoff(settings.backoff, d.attempt)))
    };
    if let Err(e) = state
        .store
        .finish_delivery(d.id, d.attempt, status, error, next)
        .await
    {
        // The lease runs out and the delivery is posted again.
        tracing::warn!(delivery = d.id, error = %e, "recording a webhook delivery failed");
    }
}

/// Leases and posts due deliveries until the server shuts down.
pub async fn run(state: Arc<AppState>) {
    let mut shutdown = state.shutdown.subscribe();
    let guard = crate::outbound::guard(&state.config);
    loop {
        let lease = state.config.webhooks.timeout + LEASE_MARGIN;
        match state
            .store
            .lease_deliveries(CONCURRENCY, now_ms() + ms(lease))
            .await
        {
            Ok(due) if !due.is_empty() => {
                join_all(due.into_iter().map(|d| deliver(&state, d, &guard))).await;
                continue;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "leasing webhook deliveries failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = state.wakers.deliveries.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_and_backoff() {
        // HMAC-SHA256 test vector 2 of RFC 4231 ("Jefe"), as `t.body`.
        let s = signature("Jefe", 0, b"what do ya want for nothing?");
        assert!(s.starts_with("t=0,v1="));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe");
        let tag = ring::hmac::sign(&key, b"0.what do ya want for nothing?");
        assert_eq!(s, format!("t=0,v1={}", hex::encode(tag.as_ref())));
        let rfc = ring::hmac::sign(&key, b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(rfc.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let base = Duration::from_secs(1);
        let waits: Vec<u64> = (1..=5).map(|a| backoff(base, a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16]);
        assert_eq!(backoff(base, 40), MAX_BACKOFF);
    }
}

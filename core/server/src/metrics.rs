//! Counters and gauges in the Prometheus text format (`GET /metrics`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::app::{ApiResult, AppState};
use crate::store::now_ms;

/// The server's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// API requests answered.
    pub api_requests: AtomicU64,
    /// Requests refused for a missing or bad token.
    pub auth_failures: AtomicU64,
    /// Requests refused by a token's rate limit.
    pub rate_limited: AtomicU64,
    /// Webhook deliveries a receiver took (2xx).
    pub webhook_delivered: AtomicU64,
    /// Webhook attempts that failed and will be tried again.
    pub webhook_retried: AtomicU64,
    /// Webhook deliveries given up (attempts used up).
    pub webhook_failed: AtomicU64,
    /// Gateway calls proxied to a ready target.
    pub gw_warm: AtomicU64,
    /// Gateway calls that started their target and were then proxied.
    pub gw_cold: AtomicU64,
    /// Gateway calls answered 503 because a start or reclaim was under way.
    pub gw_busy: AtomicU64,
    /// Gateway calls answered 502 (start failed, upstream unreachable).
    pub gw_failed: AtomicU64,
    /// MCP sessions the gateway re-established on a new server.
    pub gw_mcp_replays: AtomicU64,
    /// Starts made by the gateway that succeeded.
    pub starts_ok: AtomicU64,
    /// Starts made by the gateway that failed.
    pub starts_failed: AtomicU64,
    /// Sum of the durations of successful starts, in milliseconds.
    pub start_ms_sum: AtomicU64,
    /// Reaper sweeps run.
    pub sweeps: AtomicU64,
    /// Targets reclaimed.
    pub reclaims_ok: AtomicU64,
    /// Reclaims that failed (state restored).
    pub reclaims_failed: AtomicU64,
    /// Candidates skipped because another replica held their lock.
    pub reclaims_skipped: AtomicU64,
    /// Expired leases deleted.
    pub leases_expired: AtomicU64,
    /// Client sessions open on this replica.
    pub sessions_open: AtomicU64,
}

impl Metrics {
    /// Adds one.
    pub fn inc(&self, c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

fn line(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// `GET /metrics`.
pub async fn render(State(state): State<Arc<AppState>>) -> ApiResult<impl IntoResponse> {
    let m = &state.metrics;
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let leases = u64::try_from(state.store.live_leases(now_ms()).await?).unwrap_or(0);
    let (pool_size, pool_idle) = state.store.pool_stats();
    let mut out = String::new();
    line(
        &mut out,
        "burrow_api_requests_total",
        "counter",
        "API requests answered.",
        &[("", g(&m.api_requests))],
    );
    line(
        &mut out,
        "burrow_auth_failures_total",
        "counter",
        "Requests refused for a missing or unknown token.",
        &[("", g(&m.auth_failures))],
    );
    line(
        &mut out,
        "burrow_rate_limited_total",
        "counter",
        "Requests refused by a token's rate limit (auth.requests_per_minute).",
        &[("", g(&m.rate_limited))],
    );
    line(
        &mut out,
        "burrow_webhook_attempts_total",
        "counter",
        "Webhook delivery attempts by outcome (retried: failed, tried again later; failed: the last attempt failed).",
        &[
            ("outcome=\"delivered\"", g(&m.webhook_delivered)),
            ("outcome=\"retried\"", g(&m.webhook_retried)),
            ("outcome=\"failed\"", g(&m.webhook_failed)),
        ],
    );
    line(
        &mut out,
        "burrow_gateway_calls_total",
        "counter",
        "Gateway calls by outcome.",
        &[
            ("outcome=\"warm\"", g(&m.gw_warm)),
            ("outcome=\"cold\"", g(&m.gw_cold)),
            ("outcome=\"busy\"", g(&m.gw_busy)),
            ("outcome=\"failed\"", g(&m.gw_failed)),
        ],
    );
    line(
        &mut out,
        "burrow_gateway_mcp_sessions_reestablished_total",
        "counter",
        "MCP sessions the gateway re-established on a new server (their initialize replayed after a reclaim).",
        &[("", g(&m.gw_mcp_replays))],
    );
    line(
        &mut out,
        "burrow_gateway_starts_total",
        "counter",
        "Starts made by the gateway, by result.",
        &[
            ("result=\"ok\"", g(&m.starts_ok)),
            ("result=\"failed\"", g(&m.starts_failed)),
        ],
    );
    line(
        &mut out,
        "burrow_gateway_start_milliseconds_sum",
        "counter",
        "Total duration of successful gateway starts.",
        &[("", g(&m.start_ms_sum))],
    );
    line(
        &mut out,
        "burrow_reaper_sweeps_total",
        "counter",
        "Reaper sweeps run by this replica.",
        &[("", g(&m.sweeps))],
    );
    line(
        &mut out,
        "burrow_reaper_reclaims_total",
        "counter",
        "Reclaims by result (skipped: another replica held the lock).",
        &[
            ("result=\"ok\"", g(&m.reclaims_ok)),
            ("result=\"failed\"", g(&m.reclaims_failed)),
            ("result=\"skipped\"", g(&m.reclaims_skipped)),
        ],
    );
    line(
        &mut out,
        "burrow_leases_expired_total",
        "counter",
        "Expired leases swept.",
        &[("", g(&m.leases_expired))],
    );
    line(
        &mut out,
        "burrow_leases_live",
        "gauge",
        "Live request leases (all replicas).",
        &[("", leases)],
    );
    line(
        &mut out,
        "burrow_sessions_open",
        "gauge",
        "Client sessions held by this replica.",
        &[("", g(&m.sessions_open))],
    );
    line(
        &mut out,
        "burrow_db_pool_connections",
        "gauge",
        "Database pool connections by state.",
        &[
            ("state=\"open\"", u64::from(pool_size)),
            ("state=\"idle\"", pool_idle as u64),
        ],
    );
    pools(&mut out, &state).await;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}

/// A metric family of the pools: name, type, help, and its value of a pool.
type PoolFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&burrow::PoolInfo) -> u64,
);

/// The engine's warm pools, by pool (nothing where the backend has none).
async fn pools(out: &mut String, state: &AppState) {
    let pools = match state.engine.list_pools().await {
        Ok(p) => p,
        Err(e) => {
            if e.code() != burrow::ErrorCode::Unsupported {
                tracing::warn!(error = %e, "listing pools for the metrics");
            }
            return;
        }
    };
    let labels: Vec<String> = pools
        .iter()
        .map(|p| format!("pool=\"{}\"", escape_label(&p.name)))
        .collect();
    let series = |f: fn(&burrow::PoolInfo) -> u64| -> Vec<(&str, u64)> {
        labels
            .iter()
            .zip(&pools)
            .map(|(l, p)| (l.as_str(), f(p)))
            .collect()
    };
    let families: [PoolFamily; 6] = [
        (
            "burrow_pool_size",
            "gauge",
            "Warm sandboxes a pool keeps.",
            |p| u64::from(p.size),
        ),
        (
            "burrow_pool_warm",
            "gauge",
            "Warm sandboxes running and unclaimed.",
            |p| u64::from(p.warm),
        ),
        (
            "burrow_pool_starting",
            "gauge",
            "Warm sandboxes still starting.",
            |p| u64::from(p.starting),
        ),
        (
            "burrow_pool_claims_total",
            "counter",
            "Creates that claimed a warm sandbox.",
            |p| p.claims,
        ),
        (
            "burrow_pool_misses_total",
            "counter",
            "Creates of a pool's configuration that found none warm and started cold.",
            |p| p.misses,
        ),
        (
            "burrow_pool_last_refill_milliseconds",
            "gauge",
            "How long a pool's last refill took to start its sandboxes.",
            |p| p.last_refill_ms.unwrap_or(0),
        ),
    ];
    for (name, kind, help, f) in families {
        line(out, name, kind, help, &series(f));
    }
}

/// A label value as the text format writes it.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

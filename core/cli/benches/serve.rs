//! `burrow serve` benchmark.
//!
//! 1. Gateway overhead per warm proxied call: the same busybox httpd inside
//!    one sandbox, called (a) directly through a port the test publishes
//!    with `Sandbox::publish` (the agent-channel tunnel, no server) and
//!    (b) through `burrow serve`'s `/gw/{id}/` (token check, cached target,
//!    one statement opening the lease with the `last_used_at` stamp, one
//!    closing it with the stamp, proxy over a tunnel), with the same
//!    keep-alive client, in the same run; for each database (Postgres, then
//!    SQLite). Reported: p50 and p99 of each, and the difference.
//! 2. Reaper sweep over 100,000 runtime rows on Postgres with 1% idle: one
//!    sweep (find the candidates, then per chunk of 64: try-lock, claim,
//!    finish, unlock, one statement each) with a no-op reclaim — the
//!    database work of a sweep, not the stops — and a second sweep that
//!    finds nothing.
//!
//! Run: `cargo bench -p burrow-cli --bench serve` (starts its own Postgres
//! server; needs Debian's postgresql package). Calls: BENCH_ITERS (default
//! 1000 per path).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::pct_ms;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use burrow_server::reaper::{sweep, Reclaim, SweepParams};
use burrow_server::store::{now_ms, Store};
use common::serve::pg::PgCluster;
use common::serve::{call_retrying, http, web_command, ServeEnv};
use common::TestHome;

/// A keep-alive HTTP/1.1 client for one host (it reconnects when the server
/// closes: busybox httpd answers `Connection: close`).
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    host: String,
    closed: bool,
}

impl Client {
    fn connect(host: &str) -> Client {
        let s = TcpStream::connect(host).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
            host: host.to_owned(),
            closed: false,
        }
    }

    fn get(&mut self, path: &str, token: Option<&str>) -> (u16, Vec<u8>) {
        if self.closed {
            *self = Client::connect(&self.host.clone());
        }
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            self.w,
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{auth}\r\n",
            self.host
        )
        .unwrap();
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            self.r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
                if k.eq_ignore_ascii_case("connection") && v.trim().eq_ignore_ascii_case("close") {
                    self.closed = true;
                }
            }
        }
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        (status, body)
    }
}

fn timed(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..20 {
        f();
    }
    let mut out: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    out.sort();
    out
}

async fn gateway_overhead(label: &str, database: String, iters: usize) {
    let th = TestHome::new().await;
    let env = ServeEnv::new(th.path(), &database).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("bench");
    let server = env.start("bench");
    let h = th.builder("web").detached(true).define().await.unwrap();
    let body = serde_json::json!({"port": 8080, "command": web_command(0)}).to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{}", server.url, h.id()),
        Some(&token),
        Some(&body),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let gw_url = format!("{}/gw/{}/index.html", server.url, h.id());
    let (r, _) = call_retrying(&gw_url, &token, Duration::from_secs(60));
    assert_eq!(r.status, 200);

    let sandbox = h.connect().await.unwrap();
    let published = sandbox.publish(8080).await.unwrap();
    let direct_host = published.local_addr().to_string();
    let gw_host = server.url.trim_start_matches("http://").to_owned();
    let gw_path = format!("/gw/{}/index.html", h.id());
    let token2 = token.clone();
    let (direct, gateway) = tokio::task::spawn_blocking(move || {
        let mut d = Client::connect(&direct_host);
        let mut g = Client::connect(&gw_host);
        let direct = timed(iters, || assert_eq!(d.get("/index.html", None).0, 200));
        let gateway = timed(iters, || assert_eq!(g.get(&gw_path, Some(&token2)).0, 200));
        (direct, gateway)
    })
    .await
    .unwrap();
    println!(
        "gateway overhead ({label}, {iters} warm calls each; busybox httpd closes every \
         connection, so each call opens a new tunnel either way):\n  \
         direct via tunnel: p50 {:.3} ms  p99 {:.3} ms\n  \
         through /gw/:      p50 {:.3} ms  p99 {:.3} ms\n  \
         overhead:          p50 {:+.3} ms  p99 {:+.3} ms",
        pct_ms(&direct, 0.5),
        pct_ms(&direct, 0.99),
        pct_ms(&gateway, 0.5),
        pct_ms(&gateway, 0.99),
        pct_ms(&gateway, 0.5) - pct_ms(&direct, 0.5),
        pct_ms(&gateway, 0.99) - pct_ms(&direct, 0.99),
    );
    drop(published);
    drop(server);
}

struct NoopReclaim;

#[async_trait]
impl Reclaim for NoopReclaim {
    async fn reclaim(&self, _target_id: &str) -> Result<(), String> {
        Ok(())
    }
}

async fn reaper_sweep(database: String) {
    const ROWS: i64 = 100_000;
    let store = Store::open(&database, "bench", 4, Duration::from_secs(30))
        .await
        .unwrap();
    let now = now_ms();
    let t = Instant::now();
    sqlx::query(
        "INSERT INTO targets (id, kind, port, metadata, created_at, updated_at) \
         SELECT 'sb_bench' || g, 'sandbox', 8080, '{}', 0, 0 FROM generate_series(1, $1) g",
    )
    .bind(ROWS)
    .execute(store.pool())
    .await
    .unwrap();
    // 1% idle (an hour ago), the rest used just now.
    sqlx::query(
        "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at) \
         SELECT 'sb_bench' || g, 'ready', 1, \
                CASE WHEN g % 100 = 0 THEN $2 - 3600000 ELSE $2 END, $2 \
         FROM generate_series(1, $1) g",
    )
    .bind(ROWS)
    .bind(now)
    .execute(store.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
    let loaded = t.elapsed();
    let mut locker = store.reap_locker().await.unwrap();
    let params = SweepParams {
        idle_timeout: Duration::from_secs(600),
        startup_timeout: Duration::from_secs(60),
    };
    let t = Instant::now();
    let first = sweep(&store, &mut locker, "bench", params, &NoopReclaim)
        .await
        .unwrap();
    let first_time = t.elapsed();
    assert_eq!(first.reclaimed, (ROWS / 100) as u64);
    let t = Instant::now();
    let second = sweep(&store, &mut locker, "bench", params, &NoopReclaim)
        .await
        .unwrap();
    let second_time = t.elapsed();
    assert_eq!(second.candidates, 0);
    println!(
        "reaper sweep (Postgres, {ROWS} runtime rows, 1% idle; loaded in {:.1} s):\n  \
         sweep reclaiming {} rows: {:.1} ms ({:.3} ms per reclaimed row)\n  \
         sweep finding nothing:    {:.1} ms",
        loaded.as_secs_f64(),
        first.reclaimed,
        first_time.as_secs_f64() * 1e3,
        first_time.as_secs_f64() * 1e3 / first.reclaimed as f64,
        second_time.as_secs_f64() * 1e3,
    );
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pg = PgCluster::start();
    rt.block_on(async {
        gateway_overhead("Postgres", pg.create_database("gw").unwrap(), iters).await;
        let sqlite_dir = tempfile::tempdir().unwrap();
        let sqlite = format!("sqlite://{}/serve.db", sqlite_dir.path().display());
        gateway_overhead("SQLite", sqlite, iters).await;
        reaper_sweep(pg.create_database("sweep").unwrap()).await;
    });
}

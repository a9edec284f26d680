//! The web console's sandboxes page with 1,000 sandboxes, in headless
//! Chromium against a real `burrow serve` on PostgreSQL:
//!
//! - anchor: the list's fetch and JSON parse from the same page
//!   (`GET /v1/sandboxes`, 1,000 records), what any client pays;
//! - the page: from navigation start to all 1,000 rows in the table
//!   (tests/console/bench.mjs), the app's files cached.
//!
//! Both are measured in each of BENCH_ROUNDS rounds (default 5) after a
//! warm-up. The sandboxes are created (not started): the page shows what
//! it is given the same way whatever their status.
//!
//! Run: `cargo xtask bench console`, as root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::process::Command;

use burrow_test_support::workspace_root;
use common::serve::pg::PgCluster;
use common::serve::{http, ServeEnv};
use common::TestHome;
use serde_json::json;

const ROWS: usize = 1000;

fn stats(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    format!(
        "p50 {:7.1} ms   min {:7.1}   max {:7.1}",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let home = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(TestHome::new());
    home.name_image("busybox");
    let pg = PgCluster::start();
    let env = ServeEnv::new(home.path(), &pg.create_database("console_bench").unwrap());
    let token = env.create_token("bench");
    let server = env.start("r1");
    eprintln!("creating {ROWS} sandboxes");
    for i in 0..ROWS {
        let body = json!({
            "name": format!("sb-{i:04}"),
            "config": {"image": "busybox", "labels": {"team": format!("t{}", i % 7)}},
            "detached": true,
        });
        let r = http(
            "POST",
            &format!("{}/v1/sandboxes", server.url),
            Some(&token),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let out = Command::new("node")
        .arg(workspace_root().join("tests/console/bench.mjs"))
        .env("BURROW_CONSOLE_URL", &server.url)
        .env("BURROW_CONSOLE_TOKEN", &token)
        .env("BURROW_CONSOLE_ROWS", ROWS.to_string())
        .env("BURROW_CONSOLE_ROUNDS", rounds.to_string())
        .output()
        .expect("running node");
    assert!(
        out.status.success(),
        "bench.mjs failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let r: serde_json::Value = serde_json::from_str(line.trim().lines().last().unwrap()).unwrap();
    let nums = |k: &str| -> Vec<f64> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    println!("console: the sandboxes page, {ROWS} sandboxes, {rounds} rounds (headless Chromium)");
    println!(
        "  anchor: GET /v1/sandboxes + JSON parse   {}",
        stats(&nums("fetch_ms"))
    );
    println!(
        "  page: navigation to {ROWS} rows          {}",
        stats(&nums("render_ms"))
    );
}

//! `burrow mcp` benchmark: a tool call's round trip against the library
//! call it makes, measured in the same run on the same sandbox.
//!
//! - anchor: `Sandbox::exec(["true"])` from the Rust library (in process),
//!   BENCH_ITERS times after one warm-up;
//! - `exec` `{"argv": ["true"]}` through `burrow mcp` over stdio, called by
//!   the official TypeScript MCP client (`tests/mcp/bench.mjs`, the SDK of
//!   `examples/mcp`) on one connected client, BENCH_ITERS times after one
//!   warm-up: JSON-RPC both ways, the server's lookup of the sandbox by
//!   name, and its output collected for the result.
//!
//! Run: `cargo xtask bench burrow_mcp` (it builds the MCP example's image
//! for the SDK), as root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::time::Instant;

use burrow_test_support::stats::pct;
use burrow_test_support::{agent_bin, burrow_bin, mcp_image, workspace_root};
use common::TestHome;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let th = TestHome::new().await;
        // Labelled as `burrow mcp`'s own: it acts on no other sandbox.
        let sb = th
            .builder("bench")
            .label(burrow_mcp::LABEL, "true")
            .detached(true)
            .create()
            .await
            .unwrap();

        sb.exec(["true"]).await.unwrap();
        let mut library = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            let out = sb.exec(["true"]).await.unwrap();
            library.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(out.status.code, Some(0));
        }
        let library = sorted(library);

        // The client script beside the SDK's modules.
        let dir = tempfile::tempdir().unwrap();
        let modules = mcp_image().join("rootfs/app/node_modules");
        std::os::unix::fs::symlink(modules, dir.path().join("node_modules")).unwrap();
        std::fs::copy(
            workspace_root().join("tests/mcp/bench.mjs"),
            dir.path().join("bench.mjs"),
        )
        .unwrap();
        let out = tokio::process::Command::new("node")
            .arg(dir.path().join("bench.mjs"))
            .arg(burrow_bin())
            .arg("bench")
            .arg(iters.to_string())
            .env("BURROW_HOME", th.path())
            .env("BURROW_BIN", burrow_bin())
            .env("BURROW_AGENT_BIN", agent_bin())
            .env_remove("BURROW_URL")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "the bench client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mcp = sorted(
            r["ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_f64().unwrap())
                .collect(),
        );
        println!(
            "exec true, {iters} calls after a warm-up:   p50        p90\n  \
             library (Sandbox::exec)            {:8.2} ms {:8.2} ms\n  \
             burrow mcp tool call (stdio)       {:8.2} ms {:8.2} ms\n  \
             MCP's share                        {:+8.2} ms {:+8.2} ms",
            pct(&library, 0.5),
            pct(&library, 0.9),
            pct(&mcp, 0.5),
            pct(&mcp, 0.9),
            pct(&mcp, 0.5) - pct(&library, 0.5),
            pct(&mcp, 0.9) - pct(&library, 0.9),
        );
        sb.destroy().await.unwrap();
    });
}

//! Warm pool benchmark (the suites' driver: container by default, or
//! `BURROW_DRIVER=vm`): a create claiming a running sandbox of a pool,
//! timed until the caller holds it Running, beside, in the same run, a
//! cold create -> Running of the same image on a home without a pool, and
//! the anchors `runc run` and `crun run` of the same rootfs (`/bin/true`).
//! Target: a local claim <= 5 ms.
//!
//! Run: `cargo bench -p burrow-cli --bench pools`. Rounds: BENCH_ITERS
//! (default 20); the pool is refilled (untimed) between claims.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::time::{Duration, Instant};

use burrow::{Backend, PoolSpec, SandboxConfig, Status};
use burrow_test_support::stats::pct_ms;
use common::TestHome;

fn report(label: &str, samples: &[Duration]) {
    println!(
        "{label:<34} median {:>8.2} ms   p90 {:>8.2} ms   ({} runs)",
        pct_ms(samples, 0.5),
        pct_ms(samples, 0.9),
        samples.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let driver = common::driver();
    println!("warm pool claims, driver {driver:?}, {rounds} rounds");
    let pooled = TestHome::new().await;
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    pooled
        .backend
        .create_pool(PoolSpec::new("bench", SandboxConfig::new(image), 2))
        .await
        .unwrap();
    let mut claims = Vec::new();
    for r in 0..rounds {
        pooled.backend.refill_pool("bench").await.unwrap();
        let t = Instant::now();
        let sb = pooled
            .builder(&format!("claim-{r}"))
            .create()
            .await
            .unwrap();
        claims.push(t.elapsed());
        assert_eq!(sb.info().await.unwrap().status, Status::Running);
        sb.destroy().await.unwrap();
    }
    let info = pooled.backend.get_pool("bench").await.unwrap();
    assert_eq!(info.misses, 0, "a claim found the pool empty");
    pooled.backend.remove_pool("bench").await.unwrap();

    let cold_home = TestHome::new().await;
    let mut cold = Vec::new();
    for r in 0..rounds {
        let t = Instant::now();
        let sb = cold_home
            .builder(&format!("cold-{r}"))
            .create()
            .await
            .unwrap();
        cold.push(t.elapsed());
        sb.destroy().await.unwrap();
    }
    let scratch = tempfile::tempdir_in("/tmp").unwrap();
    let bundle = scratch.path().join("bundle");
    common::runtimes::runc_bundle(&bundle, &common::busybox_rootfs(), &["/bin/true"]);
    let mut anchors = Vec::new();
    for runtime in ["runc", "crun"] {
        let root = scratch.path().join(format!("{runtime}-root"));
        let _ = common::runtimes::run_times(runtime, &bundle, &root, 3);
        anchors.push((
            runtime,
            common::runtimes::run_times(runtime, &bundle, &root, rounds),
        ));
    }
    report("claim from a warm pool -> Running", &claims);
    report("cold create -> Running", &cold);
    for (runtime, samples) in &anchors {
        report(&format!("{runtime} run (true)"), samples);
    }
    let claim = pct_ms(&claims, 0.5);
    println!("claim / cold: {:.3}x", claim / pct_ms(&cold, 0.5));
    for (runtime, samples) in &anchors {
        println!(
            "claim / {runtime} run: {:.3}x",
            claim / pct_ms(samples, 0.5)
        );
    }
}

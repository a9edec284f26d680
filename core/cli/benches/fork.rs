//! Fork benchmark (the vm driver; TCG on this machine): a fork of a running
//! vm sandbox, a counter process going on in it, into 8 copies, timed until
//! all 8 are Running (each restored with the parent's processes), beside,
//! in the same run, 8 creates at once restored from the image's boot
//! template and 8 cold-booted creates at once (`BURROW_VM_TEMPLATES=0`).
//! Target: the 8-way fork in <= 400 ms.
//!
//! Run: `cargo bench -p burrow-cli --bench fork` (needs QEMU and the guest
//! kernel from scripts/build-kernel.sh). Rounds: BENCH_ITERS (default 5;
//! the cold creates run min(3, BENCH_ITERS) rounds).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::time::{Duration, Instant};

use burrow::internal::driver::vm::{start_record, StartKind, TEMPLATES_ENV};
use burrow::{ForkOptions, Sandbox};
use burrow_test_support::stats::pct_ms;
use common::TestHome;

fn started_from(home: &TestHome, sb: &Sandbox) -> StartKind {
    start_record(
        &home
            .path()
            .join("sandboxes")
            .join(sb.id().as_str())
            .join("runtime"),
    )
    .expect("the driver recorded the start")
    .from
}

/// 8 creates at once, `rounds` times: the time until all are Running.
async fn creates_at_once(
    home: &TestHome,
    label: &str,
    rounds: usize,
    from: StartKind,
) -> Vec<Duration> {
    let mut times = Vec::new();
    for r in 0..rounds {
        let t = Instant::now();
        let all = futures::future::join_all((0..8).map(|i| {
            home.builder(&format!("{label}-{r}-{i}"))
                .driver("vm")
                .create()
        }))
        .await;
        times.push(t.elapsed());
        let sandboxes: Vec<Sandbox> = all.into_iter().map(|s| s.unwrap()).collect();
        for sb in &sandboxes {
            assert_eq!(started_from(home, sb), from, "{label}");
        }
        for sb in sandboxes {
            sb.destroy().await.unwrap();
        }
    }
    times
}

async fn count(sb: &Sandbox) -> u64 {
    common::counted(sb).await.expect("a count")
}

/// `rounds` forks of one running parent into 8: the time until all are
/// Running; checks each copy's counter goes on.
async fn forks(home: &TestHome, rounds: usize) -> Vec<Duration> {
    let parent = home.builder("parent").driver("vm").create().await.unwrap();
    common::start_counter(&parent).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut times = Vec::new();
    for _ in 0..rounds {
        let before = count(&parent).await;
        let t = Instant::now();
        let copies = parent.fork(&ForkOptions::count(8)).await.unwrap();
        times.push(t.elapsed());
        assert_eq!(copies.len(), 8);
        for copy in &copies {
            assert_eq!(started_from(home, copy), StartKind::Hibernation);
            assert!(count(copy).await >= before, "the copy's counter goes on");
        }
        for copy in copies {
            copy.destroy().await.unwrap();
        }
    }
    parent.destroy().await.unwrap();
    times
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    common::init_env();
    let support = rt
        .block_on(burrow::internal::driver::vm::check_support())
        .expect("VM support (QEMU, kernel, agent)");
    let home = rt.block_on(TestHome::new());
    // The boot templates, built before anything is timed.
    rt.block_on(creates_at_once(&home, "warm", 1, StartKind::Template));

    let fork = rt.block_on(forks(&home, rounds));
    let template = rt.block_on(creates_at_once(
        &home,
        "template",
        rounds,
        StartKind::Template,
    ));
    std::env::set_var(TEMPLATES_ENV, "0");
    let cold = rt.block_on(creates_at_once(
        &home,
        "cold",
        rounds.min(3),
        StartKind::Cold,
    ));
    std::env::remove_var(TEMPLATES_ENV);

    println!(
        "vm fork bench ({}, {rounds} rounds; cold creates {})",
        support.accel.accel.as_str(),
        rounds.min(3)
    );
    println!("| figure | median | p90 | ratio |");
    println!("|---|---|---|---|");
    let anchor = pct_ms(&template, 0.5);
    for (what, samples) in [
        (
            "fork of a running vm into 8 -> all Running, processes going on",
            &fork,
        ),
        (
            "8 creates at once from the boot template -> all Running",
            &template,
        ),
        ("8 cold-booted creates at once -> all Running", &cold),
    ] {
        println!(
            "| {what} | {:.1} ms | {:.1} ms | {:.2} x template creates |",
            pct_ms(samples, 0.5),
            pct_ms(samples, 0.9),
            pct_ms(samples, 0.5) / anchor
        );
    }
}

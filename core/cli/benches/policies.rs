//! Policy benchmark: cold demand start (the call on a sandbox reclaimed for
//! idleness, to its result) beside create -> Running in the same run, and the
//! idle reaper's overhead (CPU time of an idle sandbox's supervisor over a
//! window, default 60 s).
//!
//! Run: `cargo bench -p burrow-cli --bench policies` (as root).
//! BENCH_ITERS (default 15), BENCH_IDLE_WINDOW_SECS (default 60).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::{ms, pct};
use std::time::{Duration, Instant};

use burrow::Status;
use common::TestHome;

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the state.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let window = Duration::from_secs(
        std::env::var("BENCH_IDLE_WINDOW_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = TestHome::new().await;
        home.builder("warmup")
            .create()
            .await
            .unwrap()
            .destroy()
            .await
            .unwrap();

        let mut create = Vec::new();
        for i in 0..iters {
            let b = home.builder(&format!("c{i}"));
            let t = Instant::now();
            let sb = b.create().await.unwrap();
            create.push(t.elapsed());
            sb.destroy().await.unwrap();
        }

        let sb = home
            .builder("cold")
            .idle_timeout(Duration::from_millis(500))
            .create()
            .await
            .unwrap();
        let mut cold = Vec::new();
        for _ in 0..iters {
            sb.handle()
                .wait_for_status(&[Status::Stopped])
                .await
                .unwrap();
            let t = Instant::now();
            let out = sb.exec(["true"]).await.unwrap();
            cold.push(t.elapsed());
            assert_eq!(out.status.code, Some(0));
        }
        sb.destroy().await.unwrap();

        println!("\nburrow policy benchmark ({iters} iterations)");
        println!("{:<42} {:>10} {:>10}", "operation", "median ms", "p90 ms");
        for (name, s) in [
            ("create -> Running", &create),
            ("cold demand start: exec true after reclaim", &cold),
        ] {
            println!(
                "{:<42} {:>10.2} {:>10.2}",
                name,
                ms(pct(s, 0.5)),
                ms(pct(s, 0.9))
            );
        }

        // Idle reaper overhead: an idle sandbox whose reaper checks every
        // second (idle timeout 1 h, never reached in the window) beside one
        // without an idle timeout.
        let slow = home
            .builder("idle-1h")
            .idle_timeout(Duration::from_secs(3600))
            .create()
            .await
            .unwrap();
        let none = home.builder("idle-off").create().await.unwrap();
        let pid = |sb: &burrow::Sandbox| {
            let sb = sb.clone();
            async move {
                sb.info()
                    .await
                    .unwrap()
                    .last_run
                    .unwrap()
                    .supervisor_pid
                    .unwrap()
            }
        };
        let (p_slow, p_none) = (pid(&slow).await, pid(&none).await);
        let (c_slow, c_none) = (cpu_seconds(p_slow), cpu_seconds(p_none));
        tokio::time::sleep(window).await;
        let (d_slow, d_none) = (cpu_seconds(p_slow) - c_slow, cpu_seconds(p_none) - c_none);
        println!(
            "\nsupervisor CPU over {}s of idleness (clock tick resolution 10 ms)",
            window.as_secs()
        );
        println!(
            "{:<42} {:>10.3} s ({:.4}% of one core)",
            "idle timeout 1 h (reaper checks every 1 s)",
            d_slow,
            d_slow / window.as_secs_f64() * 100.0
        );
        println!(
            "{:<42} {:>10.3} s ({:.4}% of one core)",
            "no idle timeout",
            d_none,
            d_none / window.as_secs_f64() * 100.0
        );
        slow.destroy().await.unwrap();
        none.destroy().await.unwrap();
    });
}

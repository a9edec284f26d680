//! Snapshot benchmark: a filesystem snapshot of a running container
//! sandbox whose writable layer holds 1 GiB (16 files of 64 MiB of random
//! bytes), beside `cp --reflink=auto -a` and `tar -cf` of the same layer
//! directory in the same run (the copy a user would make by hand; neither
//! freezes the guest, hashes the content or stores it by digest), and
//! beside that copy made durable (`cp`, then `sync`), as a snapshot is
//! before it is recorded. Each snapshot follows a small change (a marker
//! file), as checkpoints do, so none finds its layer stored already.
//!
//! Run: `cargo bench -p burrow-cli --bench snapshots` (as root).
//! BENCH_ITERS (default 3), BENCH_LAYER_MB (default 1024).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::process::Command;
use std::time::{Duration, Instant};

use burrow_test_support::stats::{ms, pct};
use common::TestHome;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Drops the page cache, so each copy reads the layer from the disk as a
/// first snapshot of a long-running sandbox would (root only; best effort).
fn drop_caches() {
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let layer_mb: usize = std::env::var("BENCH_LAYER_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let files = 16;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = TestHome::new().await;
        // The copies go where the snapshot goes: the home's filesystem.
        let scratch = tempfile::Builder::new()
            .prefix("bench")
            .tempdir_in(home.path())
            .unwrap();
        let sb = home.builder("bench-snap").create().await.unwrap();
        let per = layer_mb / files;
        let out = sb
            .exec([
                "sh",
                "-c",
                &format!(
                    "mkdir -p /data && for i in $(seq 1 {files}); do dd if=/dev/urandom of=/data/f$i bs=1M count={per} 2>/dev/null; done; sync"
                ),
            ])
            .await
            .unwrap();
        assert_eq!(out.status.code, Some(0), "{}", out.stderr_str());
        let upper = home.path().join("sandboxes").join(sb.id().as_str()).join("upper");
        assert!(upper.join("data/f1").is_file(), "{}", upper.display());

        let mut snaps: Vec<Duration> = Vec::new();
        let mut cps: Vec<Duration> = Vec::new();
        let mut tars: Vec<Duration> = Vec::new();
        let mut synced: Vec<Duration> = Vec::new();
        for i in 0..iters {
            sb.exec(["sh", "-c", &format!("echo {i} > /marker")])
                .await
                .unwrap();
            drop_caches();
            let t = Instant::now();
            let info = sb.snapshot(&format!("s{i}")).await.unwrap();
            snaps.push(t.elapsed());
            assert!(info.size >= (layer_mb as u64) << 20);

            let dst = scratch.path().join(format!("cp{i}"));
            drop_caches();
            let t = Instant::now();
            run(Command::new("cp")
                .args(["--reflink=auto", "-a"])
                .arg(&upper)
                .arg(&dst));
            cps.push(t.elapsed());
            std::fs::remove_dir_all(&dst).unwrap();

            drop_caches();
            let t = Instant::now();
            run(Command::new("cp")
                .args(["--reflink=auto", "-a"])
                .arg(&upper)
                .arg(&dst));
            run(&mut Command::new("sync"));
            synced.push(t.elapsed());
            std::fs::remove_dir_all(&dst).unwrap();

            let tar = scratch.path().join(format!("t{i}.tar"));
            drop_caches();
            let t = Instant::now();
            run(Command::new("tar")
                .arg("-cf")
                .arg(&tar)
                .arg("-C")
                .arg(&upper)
                .arg("."));
            tars.push(t.elapsed());
            std::fs::remove_file(&tar).unwrap();
        }
        sb.destroy().await.unwrap();

        let base = pct(&cps, 0.5);
        println!(
            "\nburrow snapshot benchmark: a running container sandbox, {layer_mb} MiB in its writable layer ({files} files), {iters} runs, page cache dropped before each"
        );
        println!(
            "{:<52} {:>10} {:>10} {:>8}",
            "operation", "median ms", "p90 ms", "vs cp"
        );
        for (name, s) in [
            ("cp --reflink=auto -a (the layer directory)", &cps),
            ("tar -cf (the layer directory)", &tars),
            ("cp --reflink=auto -a, then sync", &synced),
            ("burrow snapshot (freeze, layer, digest, store)", &snaps),
        ] {
            println!(
                "{:<52} {:>10.1} {:>10.1} {:>8.2}",
                name,
                ms(pct(s, 0.5)),
                ms(pct(s, 0.9)),
                ms(pct(s, 0.5)) / ms(base)
            );
        }
    });
}

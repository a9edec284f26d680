//! Lifecycle benchmark: median and p90 of create -> Running, exec of `true`,
//! and connect_or_create on a running sandbox, each beside `runc run` of the
//! same busybox rootfs measured in the same run (ratio = burrow median /
//! runc run median).
//!
//! Run: `cargo bench -p burrow-cli --bench lifecycle` (as root).
//! Iterations: BENCH_ITERS (default 30 for starts, 10x that for the rest).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{busybox_rootfs, TestHome};

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn pct(&self, p: f64) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        let idx = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[idx]
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A runc bundle over a read-only copy of the rootfs, running `args`.
fn runc_bundle(dir: &Path, rootfs: &Path, args: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let status = Command::new("runc")
        .args(["spec", "--rootless"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success());
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    spec["root"]["path"] = rootfs.to_string_lossy().into_owned().into();
    spec["root"]["readonly"] = true.into();
    spec["process"]["terminal"] = false.into();
    spec["process"]["args"] = args.iter().map(|a| serde_json::Value::from(*a)).collect();
    // Keep within this host's hard limits (no CAP_SYS_RESOURCE here).
    spec["process"]["rlimits"] = serde_json::json!([]);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&spec).unwrap(),
    )
    .unwrap();
}

fn runc_run(bundle: &Path, root: &Path, iters: usize) -> Stats {
    let mut samples = Vec::new();
    for i in 0..iters {
        let id = format!("bench-run-{i}");
        let t = Instant::now();
        let status = Command::new("runc")
            .arg("--root")
            .arg(root)
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        samples.push(t.elapsed());
        assert!(status.success(), "runc run failed");
    }
    Stats {
        name: "runc run (true)",
        samples,
    }
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rootfs = busybox_rootfs();
    let scratch = tempfile::Builder::new()
        .prefix("bb")
        .tempdir_in("/tmp")
        .unwrap();
    let bundle = scratch.path().join("bundle");
    runc_bundle(&bundle, &rootfs, &["/bin/true"]);
    let runc_root = scratch.path().join("runc-root");

    let results = rt.block_on(async {
        let home = TestHome::new().await;
        // Warm-up: the shifted image copy is built once per image.
        home.builder("warmup")
            .create()
            .await
            .unwrap()
            .destroy()
            .await
            .unwrap();
        let _ = runc_run(&bundle, &runc_root, 3);

        let baseline = runc_run(&bundle, &runc_root, iters);

        let mut create = Vec::new();
        for i in 0..iters {
            let builder = home.builder(&format!("bench-{i}"));
            let t = Instant::now();
            let sb = builder.create().await.unwrap();
            create.push(t.elapsed());
            sb.destroy().await.unwrap();
        }

        let sb = home.builder("bench-exec").create().await.unwrap();
        sb.exec(["true"]).await.unwrap();
        let mut exec = Vec::new();
        for _ in 0..iters * 10 {
            let t = Instant::now();
            let out = sb.exec(["true"]).await.unwrap();
            exec.push(t.elapsed());
            assert_eq!(out.status.code, Some(0));
        }
        let mut converge = Vec::new();
        for _ in 0..iters * 10 {
            let builder = home.builder("bench-exec");
            let t = Instant::now();
            let again = builder.connect_or_create().await.unwrap();
            converge.push(t.elapsed());
            assert_eq!(again.id(), sb.id());
        }
        sb.destroy().await.unwrap();
        vec![
            baseline,
            Stats {
                name: "create -> Running",
                samples: create,
            },
            Stats {
                name: "exec true (running)",
                samples: exec,
            },
            Stats {
                name: "connect_or_create (running)",
                samples: converge,
            },
        ]
    });

    let base = results[0].pct(0.5);
    println!(
        "\nburrow lifecycle benchmark ({iters} starts; {} execs and connects)",
        iters * 10
    );
    println!(
        "{:<30} {:>10} {:>10} {:>16}",
        "operation", "median ms", "p90 ms", "median / runc run"
    );
    for s in &results {
        println!(
            "{:<30} {:>10.2} {:>10.2} {:>16.2}",
            s.name,
            ms(s.pct(0.5)),
            ms(s.pct(0.9)),
            ms(s.pct(0.5)) / ms(base)
        );
    }
}

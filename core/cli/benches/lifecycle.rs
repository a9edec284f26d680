//! Lifecycle benchmark: median and p90 of create -> Running (with runc,
//! crun and runsc), exec of `true`, and connect_or_create on a running
//! sandbox, each beside `runc run`, `crun run` and `runsc run` of the same
//! busybox rootfs measured in the same run (ratio = burrow median / the
//! runtime's own run median), the runsc start against the runc start, and
//! the median of each recorded phase of a start.
//!
//! The rootless rows: the same creates and execs by an unprivileged user
//! (this bench run again as the user of scripts/rootless-user.sh, its
//! samples read back), each beside root's figure of the same run.
//!
//! Run: `cargo bench -p burrow-cli --bench lifecycle` (as root). runsc is
//! `$BURROW_RUNSC` or `runsc` on `PATH` (scripts/k8s/build.sh builds one
//! under target/k8s/*/bin); without it its rows are left out, saying so.
//! Iterations: BENCH_ITERS (default 30 for starts, 10x that for the rest).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::{ms, pct};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::runtimes::runc_bundle;
use common::{busybox_rootfs, TestHome};

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn pct(&self, p: f64) -> Duration {
        pct(&self.samples, p)
    }
}

/// `runtime run` of the bundle, `iters` times, as a row.
fn runtime_run(
    runtime: &str,
    name: &'static str,
    bundle: &Path,
    root: &Path,
    iters: usize,
) -> Stats {
    let samples = common::runtimes::run_times(runtime, bundle, root, iters);
    Stats { name, samples }
}

/// Creates `iters` sandboxes with `runtime`, each to Running; returns the
/// wall times and each start's recorded phases (ms), plus the time outside
/// the supervisor (spawn, readiness, SQLite writes of the library).
async fn creates(
    home: &TestHome,
    runtime: burrow::OciRuntime,
    iters: usize,
) -> (Vec<Duration>, Vec<(String, f64)>) {
    creates_with(home, runtime, iters, |b| b).await
}

/// The host's default limits but the disk's: the writable layer in a
/// directory, as before it had a size (the anchor of the layer disk's
/// cost).
fn without_layer_disk(b: burrow::SandboxBuilder) -> burrow::SandboxBuilder {
    let d = burrow::DefaultLimits::BUILT_IN;
    b.default_limits(false)
        .memory_mb(d.memory_mb.unwrap())
        .cpus(d.cpus.unwrap())
        .pids_limit(d.pids_limit.unwrap())
}

async fn creates_with(
    home: &TestHome,
    runtime: burrow::OciRuntime,
    iters: usize,
    shape: fn(burrow::SandboxBuilder) -> burrow::SandboxBuilder,
) -> (Vec<Duration>, Vec<(String, f64)>) {
    let mut walls = Vec::new();
    let mut phases = Vec::new();
    for i in 0..iters {
        let builder = shape(
            home.builder(&format!("bench-{}-{i}", runtime.binary()))
                .runtime(runtime),
        );
        let t = Instant::now();
        let sb = builder.create().await.unwrap();
        let wall = t.elapsed();
        walls.push(wall);
        let info = sb.info().await.unwrap();
        if let Some(serde_json::Value::Object(map)) = info.last_run.and_then(|r| r.timings) {
            for (k, v) in &map {
                phases.push((k.clone(), v.as_f64().unwrap_or(0.0)));
            }
            let total = map.get("total").and_then(|v| v.as_f64()).unwrap_or(0.0);
            let spawn = map.get("spawn").and_then(|v| v.as_f64()).unwrap_or(0.0);
            phases.push((
                "library (claim, spawn call, report, lookups)".into(),
                ms(wall) - total - spawn,
            ));
        }
        sb.destroy().await.unwrap();
    }
    (walls, phases)
}

fn print_phases(title: &str, phases: &[(String, f64)]) {
    let mut names: Vec<&String> = phases.iter().map(|(k, _)| k).collect();
    names.dedup();
    let mut seen = Vec::new();
    println!("\nphases of a start, {title} (median ms)");
    for n in names {
        if seen.contains(&n) {
            continue;
        }
        seen.push(n);
        let mut v: Vec<f64> = phases
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, x)| *x)
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        println!("  {:<28} {:>8.2}", n, v[v.len() / 2]);
    }
}

/// Set in the bench's own run as the unprivileged user.
const ROOTLESS_CHILD: &str = "BURROW_BENCH_ROOTLESS_CHILD";

/// The names of the rootless rows, in the order the child prints them.
const ROOTLESS_ROWS: [&str; 3] = [
    "create -> Running (runc) rootless",
    "create -> Running (crun) rootless",
    "exec true (running) rootless",
];

/// A fresh home whose image is prepared (the shifted image copy is built
/// once per image, by a first create).
async fn warm_home() -> TestHome {
    let home = TestHome::new().await;
    home.builder("warmup")
        .create()
        .await
        .unwrap()
        .destroy()
        .await
        .unwrap();
    home
}

/// `n` execs of `true` on `sb` (after one unmeasured), their wall times.
async fn execs(sb: &burrow::Sandbox, n: usize) -> Vec<Duration> {
    sb.exec(["true"]).await.unwrap();
    let mut walls = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = sb.exec(["true"]).await.unwrap();
        walls.push(t.elapsed());
        assert_eq!(out.status.code, Some(0));
    }
    walls
}

/// The child's part: creates with runc and crun, and execs, as this
/// (unprivileged) user; prints `ROW <index> <nanoseconds>` per sample.
async fn rootless_child(iters: usize) {
    let home = warm_home().await;
    let runtimes = [burrow::OciRuntime::Runc, burrow::OciRuntime::Crun];
    for (row, runtime) in runtimes.into_iter().enumerate() {
        let (walls, _) = creates(&home, runtime, iters).await;
        for w in walls {
            println!("ROW {row} {}", w.as_nanos());
        }
    }
    let sb = home.builder("bench-exec").create().await.unwrap();
    for w in execs(&sb, iters * 10).await {
        println!("ROW 2 {}", w.as_nanos());
    }
    sb.destroy().await.unwrap();
}

/// This bench run again as the unprivileged user (scripts/rootless-user.sh
/// makes it); its samples, one Stats per rootless row.
fn rootless_rows(iters: usize) -> Vec<Stats> {
    let root = common::workspace_root();
    let user = Command::new("bash")
        .arg(root.join("scripts/rootless-user.sh"))
        .output()
        .unwrap();
    assert!(user.status.success(), "scripts/rootless-user.sh failed");
    let user = String::from_utf8(user.stdout).unwrap().trim().to_owned();
    let home = format!("/home/{user}");
    println!("rootless rows: this bench again as {user}");
    let out = Command::new("runuser")
        .args(["-u", &user, "--", "env"])
        .args([
            "-u",
            "XDG_RUNTIME_DIR",
            "-u",
            "XDG_DATA_HOME",
            "-u",
            "XDG_CACHE_HOME",
        ])
        .arg(format!("HOME={home}"))
        .arg("TMPDIR=/tmp")
        .arg(format!("{ROOTLESS_CHILD}=1"))
        .arg(format!("BENCH_ITERS={iters}"))
        .arg(std::env::current_exe().unwrap())
        .arg("--bench")
        .current_dir("/tmp")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "the rootless run failed");
    let mut rows: Vec<Stats> = ROOTLESS_ROWS
        .iter()
        .map(|name| Stats {
            name,
            samples: Vec::new(),
        })
        .collect();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some("ROW") {
            continue;
        }
        let row: usize = f.next().unwrap().parse().unwrap();
        let nanos: u64 = f.next().unwrap().parse().unwrap();
        rows[row].samples.push(Duration::from_nanos(nanos));
    }
    for r in &rows {
        assert!(!r.samples.is_empty(), "no samples of {}", r.name);
    }
    rows
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
    if std::env::var_os(ROOTLESS_CHILD).is_some() {
        rt.block_on(rootless_child(iters));
        return;
    }
    let rootfs = busybox_rootfs();
    let scratch = tempfile::Builder::new()
        .prefix("bb")
        .tempdir_in("/tmp")
        .unwrap();
    let bundle = scratch.path().join("bundle");
    runc_bundle(&bundle, &rootfs, &["/bin/true"]);
    // The same with the filter the container driver puts in each config,
    // as runc and crun get it: the cost of the runtime's seccomp.
    let filtered = |runtime: burrow::OciRuntime, name: &str| {
        let dir = scratch.path().join(name);
        runc_bundle(&dir, &rootfs, &["/bin/true"]);
        let path = dir.join("config.json");
        let mut spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        burrow::internal::driver::container::set_seccomp(&mut spec, runtime, &[]);
        std::fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
        dir
    };
    let runc_filtered = filtered(burrow::OciRuntime::Runc, "bundle-runc-seccomp");
    let crun_filtered = filtered(burrow::OciRuntime::Crun, "bundle-crun-seccomp");
    let runc_root = scratch.path().join("runc-root");
    let crun_root = scratch.path().join("crun-root");
    let runsc_root = scratch.path().join("runsc-root");
    let runsc = std::env::var("BURROW_RUNSC")
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|d| d.join("runsc"))
                    .find(|p| p.is_file())
                    .map(|p| p.to_string_lossy().into_owned())
            })
        });
    if runsc.is_none() {
        println!("runsc: not found (set BURROW_RUNSC): its rows are left out");
    }

    let results = rt.block_on(async {
        let home = warm_home().await;
        let _ = runtime_run("runc", "warmup", &bundle, &runc_root, 3);
        let _ = runtime_run("crun", "warmup", &bundle, &crun_root, 3);

        let baseline = runtime_run("runc", "runc run (true)", &bundle, &runc_root, iters);
        let crun_baseline = runtime_run("crun", "crun run (true)", &bundle, &crun_root, iters);
        let runc_seccomp = runtime_run(
            "runc",
            "runc run (true), burrow's seccomp profile",
            &runc_filtered,
            &runc_root,
            iters,
        );
        let crun_seccomp = runtime_run(
            "crun",
            "crun run (true), burrow's seccomp program",
            &crun_filtered,
            &crun_root,
            iters,
        );

        let (create, runc_phases) = creates(&home, burrow::OciRuntime::Runc, iters).await;
        let (create_crun, crun_phases) = creates(&home, burrow::OciRuntime::Crun, iters).await;
        let (plain_runc, _) =
            creates_with(&home, burrow::OciRuntime::Runc, iters, without_layer_disk).await;
        let (plain_crun, _) =
            creates_with(&home, burrow::OciRuntime::Crun, iters, without_layer_disk).await;
        print_phases("runc", &runc_phases);
        print_phases("crun", &crun_phases);
        let mut gvisor = Vec::new();
        if let Some(runsc) = &runsc {
            // The driver finds it the same way.
            std::env::set_var("BURROW_RUNSC", runsc);
            let _ = runtime_run(runsc, "warmup", &bundle, &runsc_root, 3);
            gvisor.push(runtime_run(
                runsc,
                "runsc run (true)",
                &bundle,
                &runsc_root,
                iters,
            ));
            let (create_runsc, runsc_phases) =
                creates(&home, burrow::OciRuntime::Runsc, iters).await;
            print_phases("runsc", &runsc_phases);
            gvisor.push(Stats {
                name: "create -> Running (runsc)",
                samples: create_runsc,
            });
        }

        let sb = home.builder("bench-exec").create().await.unwrap();
        let exec = execs(&sb, iters * 10).await;
        let mut converge = Vec::new();
        for _ in 0..iters * 10 {
            let builder = home.builder("bench-exec");
            let t = Instant::now();
            let again = builder.connect_or_create().await.unwrap();
            converge.push(t.elapsed());
            assert_eq!(again.id(), sb.id());
        }
        // The supervisor's resident memory once the sandbox has settled.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pid = sb
            .info()
            .await
            .unwrap()
            .last_run
            .and_then(|r| r.supervisor_pid)
            .unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        for key in ["VmRSS", "RssAnon", "RssFile", "Threads"] {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap_or("");
            println!("supervisor {line}");
        }
        sb.destroy().await.unwrap();
        let mut all = vec![
            baseline,
            runc_seccomp,
            Stats {
                name: "create -> Running (runc)",
                samples: create,
            },
            Stats {
                name: "create -> Running (runc), no layer disk",
                samples: plain_runc,
            },
            crun_baseline,
            crun_seccomp,
            Stats {
                name: "create -> Running (crun)",
                samples: create_crun,
            },
            Stats {
                name: "create -> Running (crun), no layer disk",
                samples: plain_crun,
            },
            Stats {
                name: "exec true (running)",
                samples: exec,
            },
            Stats {
                name: "connect_or_create (running)",
                samples: converge,
            },
        ];
        all.extend(gvisor);
        all
    });

    // As root, the same rows as the unprivileged user, after root's own.
    let rootless = if !common::is_rootless() {
        rootless_rows(iters)
    } else {
        println!(
            "rootless rows: this run is already unprivileged (its rows are the rootless ones)"
        );
        Vec::new()
    };
    let row = |name: &str| results.iter().find(|s| s.name == name);
    let median = |name: &str| row(name).map(|s| s.pct(0.5));
    let base = results[0].pct(0.5);
    let crun_base = median("crun run (true)").unwrap();
    let runsc_base = median("runsc run (true)");
    println!(
        "\nburrow lifecycle benchmark ({iters} starts; {} execs and connects)",
        iters * 10
    );
    println!(
        "{:<42} {:>10} {:>10} {:>16}",
        "operation", "median ms", "p90 ms", "median / run"
    );
    for s in &results {
        // crun and runsc figures against their own run, the rest against
        // runc's.
        let anchor = if s.name.contains("crun") {
            crun_base
        } else if s.name.contains("runsc") {
            runsc_base.unwrap_or(base)
        } else {
            base
        };
        println!(
            "{:<42} {:>10.2} {:>10.2} {:>16.2}",
            s.name,
            ms(s.pct(0.5)),
            ms(s.pct(0.9)),
            ms(s.pct(0.5)) / ms(anchor)
        );
    }
    // Each rootless row against root's figure of the same operation.
    let roots = [
        "create -> Running (runc)",
        "create -> Running (crun)",
        "exec true (running)",
    ];
    for (s, of) in rootless.iter().zip(roots) {
        println!(
            "{:<36} {:>10.2} {:>10.2} {:>10.2} x root",
            s.name,
            ms(s.pct(0.5)),
            ms(s.pct(0.9)),
            ms(s.pct(0.5)) / ms(median(of).unwrap())
        );
    }
    if let (Some(runsc), Some(runc)) = (
        row("create -> Running (runsc)"),
        median("create -> Running (runc)"),
    ) {
        println!(
            "{:<30} {:>10} {:>10} {:>16.2}",
            "runsc start / runc start",
            "",
            "",
            ms(runsc.pct(0.5)) / ms(runc)
        );
    }
}

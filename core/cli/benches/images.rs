//! Image benchmark: pull + unpack of a ~100 MB multi-layer image from a real
//! registry on 127.0.0.1, beside `skopeo copy` + `umoci unpack` of the same
//! image in the same run; and create -> Running from the cached image.
//!
//! Run: `cargo bench -p burrow-cli --bench images` (as root; needs
//! docker-registry, skopeo and umoci from scripts/install-deps.sh).
//! BENCH_ITERS (default 3 cold pulls, 10 starts).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::{ms, pct};
use std::process::Command;
use std::time::Instant;

use burrow::image::{ImageConfig, PullOptions, PullPolicy};
use burrow::internal::image::oci::{write_layout, LayerEntry, LayerSpec};
use common::registry::TestRegistry;
use common::{busybox_rootfs, TestHome};

const LAYERS: usize = 4;
const LAYER_MB: usize = 24;

/// Incompressible bytes (xorshift), so the layers stay ~LAYER_MB compressed.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let scratch = tempfile::Builder::new()
        .prefix("bi")
        .tempdir_in("/tmp")
        .unwrap();
    let registry = TestRegistry::start();
    // Before any thread: the supervisor pulls with the default options.
    std::env::set_var(burrow::image::INSECURE_REGISTRIES_ENV, registry.host());

    // busybox base + LAYERS layers of random data.
    let layout = scratch.path().join("layout");
    let mut layers = vec![LayerSpec::dir(busybox_rootfs())];
    for i in 0..LAYERS {
        layers.push(LayerSpec::entries([LayerEntry::file(
            format!("data/blob{i}.bin"),
            noise(i as u64 + 7, LAYER_MB << 20),
        )]));
    }
    let config = ImageConfig {
        env: vec!["PATH=/bin:/usr/bin".into()],
        workdir: Some("/".into()),
        ..Default::default()
    };
    write_layout(&layout, &layers, &config, Some("v1")).unwrap();
    registry.push(&layout, "v1", "bench/big:v1");
    let reference = registry.reference("bench/big:v1");
    let total_mb = (LAYERS * LAYER_MB) as f64 + 2.0;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (burrow_pull, starts) = rt.block_on(async {
        let mut pulls = Vec::new();
        for _ in 0..iters {
            // A fresh home each time: a cold pull (download, verify, unpack).
            let home = TestHome::new().await;
            let opts = PullOptions {
                policy: PullPolicy::Always,
                insecure: true,
                ..Default::default()
            };
            let t = Instant::now();
            home.backend.pull_image(&reference, &opts).await.unwrap();
            pulls.push(t.elapsed());
        }
        let home = TestHome::new().await;
        let opts = PullOptions {
            insecure: true,
            ..Default::default()
        };
        home.backend.pull_image(&reference, &opts).await.unwrap();
        let mut starts = Vec::new();
        for i in 0..iters * 3 {
            let b = burrow::Sandbox::builder(format!("s{i}"))
                .image(&reference)
                .backend(home.dyn_backend());
            let t = Instant::now();
            let sb = b.create().await.unwrap();
            starts.push(t.elapsed());
            sb.destroy().await.unwrap();
        }
        (pulls, starts)
    });

    let mut baseline = Vec::new();
    for i in 0..iters {
        let dir = scratch.path().join(format!("skopeo-{i}"));
        let bundle = scratch.path().join(format!("bundle-{i}"));
        let t = Instant::now();
        run(Command::new("skopeo")
            .args(["copy", "--quiet", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:v1", dir.display())));
        run(Command::new("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:v1", dir.display()))
            .arg(&bundle));
        baseline.push(t.elapsed());
    }

    let base = pct(&baseline, 0.5);
    println!("\nburrow image benchmark: {LAYERS}x{LAYER_MB} MB random layers + busybox (~{total_mb:.0} MB), {iters} cold pulls");
    println!(
        "{:<44} {:>10} {:>10} {:>12}",
        "operation", "median ms", "p90 ms", "vs skopeo+umoci"
    );
    for (name, s) in [
        ("skopeo copy + umoci unpack", &baseline),
        ("burrow pull (download, verify, unpack)", &burrow_pull),
        ("create -> Running from the cached image", &starts),
    ] {
        println!(
            "{:<44} {:>10.1} {:>10.1} {:>12.2}",
            name,
            ms(pct(s, 0.5)),
            ms(pct(s, 0.9)),
            ms(pct(s, 0.5)) / ms(base)
        );
    }
}

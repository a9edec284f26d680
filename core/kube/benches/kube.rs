//! Kubernetes backend benchmark, each figure beside its anchor in the same
//! run on the same cluster:
//!
//! - create -> Running of a pod-backed sandbox (record, pod, agent copied in,
//!   session agent's hello) against `kubectl run --rm --restart=Never` of the
//!   same image running `true` to its end;
//! - a create claiming a running sandbox of a warm pool (its pod already
//!   running) -> Running, against the same `kubectl run`;
//! - exec of `true` through the API server (an exec stream kept open behind
//!   the relay) against `kubectl exec POD -- true`.
//!
//! Run against the test cluster:
//! `bash scripts/k8s/cluster.sh start` (it prints `KUBECONFIG`), import the
//! agent image (`scripts/test.sh` shows how), then
//! `BURROW_TEST_KUBECONFIG=$KUBECONFIG cargo bench -p burrow-kube --bench kube`.
//! Iterations: BENCH_ITERS (default 10 starts, 10x that for execs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_test_support::stats::pct_ms;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::{Backend, CreateRequest, PoolSpec, Sandbox, SandboxConfig};
use burrow_kube::{KubeBackend, KubeSettings};

fn median_p90(v: Vec<Duration>) -> (f64, f64) {
    (pct_ms(&v, 0.5), pct_ms(&v, 0.9))
}

fn kubectl() -> Command {
    let bin = std::env::var("BURROW_K8S_BIN")
        .map_or_else(|_| "kubectl".to_string(), |d| format!("{d}/kubectl"));
    let mut c = Command::new(bin);
    c.arg("--kubeconfig")
        .arg(std::env::var("BURROW_TEST_KUBECONFIG").expect("BURROW_TEST_KUBECONFIG"));
    c
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let image =
        std::env::var("BURROW_TEST_KUBE_IMAGE").unwrap_or_else(|_| "burrow.test/busybox:1".into());
    let namespace = format!("bench-{}", std::process::id());
    run(kubectl().args(["create", "namespace", &namespace]));
    let settings = KubeSettings {
        kubeconfig: Some(std::env::var("BURROW_TEST_KUBECONFIG").unwrap().into()),
        namespace: namespace.clone(),
        ..KubeSettings::from_env().unwrap()
    };
    let backend: Arc<dyn Backend> = KubeBackend::connect(settings).await.unwrap();

    // Warm-up: the images are in the node's store, the API paths are hot.
    let mut anchor_runs = Vec::new();
    let mut creates = Vec::new();
    for i in 0..=iters {
        let t = Instant::now();
        run(kubectl().args([
            "-n",
            &namespace,
            "run",
            &format!("anchor-{i}"),
            "--rm",
            "-i",
            "--quiet",
            "--restart=Never",
            "--image-pull-policy=IfNotPresent",
            &format!("--image={image}"),
            "--command",
            "--",
            "true",
        ]));
        let anchor = t.elapsed();
        let name = format!("b{i}");
        let t = Instant::now();
        let info = backend
            .create(CreateRequest::new(&name, SandboxConfig::new(image.clone())))
            .await
            .unwrap();
        backend
            .start(&name, &info.id, Default::default())
            .await
            .unwrap();
        let create = t.elapsed();
        if i > 0 {
            anchor_runs.push(anchor);
            creates.push(create);
        }
        if i < iters {
            backend.destroy(&name, &info.id).await.unwrap();
        }
    }

    // Claims: the pool refilled (untimed) before each.
    backend
        .create_pool(PoolSpec::new("bench", SandboxConfig::new(image.clone()), 2))
        .await
        .unwrap();
    let mut claims = Vec::new();
    for i in 0..iters {
        while backend.get_pool("bench").await.unwrap().warm < 2 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let name = format!("c{i}");
        let t = Instant::now();
        let info = backend
            .create(CreateRequest::new(&name, SandboxConfig::new(image.clone())).claiming(true))
            .await
            .unwrap();
        claims.push(t.elapsed());
        assert_eq!(
            info.status,
            burrow::Status::Running,
            "a claim found the pool empty"
        );
        backend.destroy(&name, &info.id).await.unwrap();
    }
    backend.remove_pool("bench").await.unwrap();

    let last = backend.get(&format!("b{iters}")).await.unwrap();
    let sb = Sandbox::from_info(backend.clone(), &last);
    let pod = burrow_kube::names::pod_name(&last.id, last.generation);
    sb.exec(["true"]).await.unwrap();
    let mut execs = Vec::new();
    let mut kubectl_execs = Vec::new();
    for _ in 0..iters * 10 {
        let t = Instant::now();
        let out = sb.exec(["true"]).await.unwrap();
        execs.push(t.elapsed());
        assert_eq!(out.status.code, Some(0));
        let t = Instant::now();
        run(kubectl().args([
            "-n", &namespace, "exec", &pod, "-c", "sandbox", "--", "true",
        ]));
        kubectl_execs.push(t.elapsed());
    }
    backend.destroy(&last.name, &last.id).await.unwrap();
    run(kubectl().args(["delete", "namespace", &namespace, "--wait=false"]));

    println!(
        "\nburrow kubernetes benchmark ({iters} starts, {} execs; one cluster, same run)",
        iters * 10
    );
    println!(
        "{:<48}{:>12}{:>12}{:>10}",
        "operation", "median ms", "p90 ms", "ratio"
    );
    let rows = [
        (
            "kubectl run --rm (true, to its end)",
            anchor_runs.clone(),
            None,
        ),
        (
            "create -> Running (pod, agent, hello)",
            creates,
            Some(anchor_runs.clone()),
        ),
        (
            "claim from a warm pool -> Running",
            claims,
            Some(anchor_runs),
        ),
        ("kubectl exec -- true", kubectl_execs.clone(), None),
        (
            "exec true through the API server",
            execs,
            Some(kubectl_execs),
        ),
    ];
    for (name, samples, anchor) in rows {
        let (m, p) = median_p90(samples);
        let ratio = anchor.map_or(1.0, |a| m / median_p90(a).0);
        println!("{name:<48}{m:>12.1}{p:>12.1}{ratio:>10.2}");
    }
}

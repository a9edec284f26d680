#![allow(clippy::unwrap_used)]
//! The CLI on the test cluster of `scripts/k8s/cluster.sh` (real
//! kube-apiserver, kubelet, containerd with runc and gVisor), started by
//! `scripts/test.sh` around the tests: `burrow doctor --kubernetes`, and
//! `burrow serve` with the kubernetes backend behind two replicas on a real
//! Postgres server (the gateway's one start, 503 + Retry-After while it
//! starts, warm calls never 503; its lifecycle events, listed from the
//! cluster), and `burrow mcp` acting through such a server (each sandbox a
//! pod). `BURROW_TEST_KUBECONFIG` names the
//! cluster's kubeconfig and `BURROW_K8S_BIN` its binaries; without them
//! these tests fail, they are never skipped.

use burrow_cli_testkit as common;

use common::kube::{kubeconfig, kubectl, Namespace};

use std::process::Command;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use common::serve::pg::PgCluster;
use common::serve::{call_retrying, http, metric_sample, web_command, ServeEnv, Server};
use common::{burrow_bin, TestHome};
use serde_json::{json, Value};

/// `burrow --json doctor --kubernetes ARGS` on namespace `ns` with the
/// extra variables `vars`: (exit status, the report's `kubernetes` entry).
fn doctor(ns: &str, vars: &[(&str, &str)], args: &[&str]) -> (i32, Value) {
    let mut c = Command::new(burrow_bin());
    c.args(["--json", "doctor", "--kubernetes"])
        .args(args)
        .env("BURROW_KUBECONFIG", kubeconfig())
        .env("BURROW_KUBE_NAMESPACE", ns)
        .env_remove("BURROW_SERVE_CONFIG");
    for (k, v) in vars {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), report["kubernetes"].clone())
}

#[test]
fn doctor_runs_a_probe_sandbox_under_each_runtime_class_and_leaves_nothing() {
    let ns = Namespace::new("doctor-ok");
    let (code, k) = doctor(&ns.0, &[], &[]);
    assert_eq!(code, 0, "{k:#}");
    assert_eq!(k["ok"], true);
    let classes = k["details"]["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2);
    // The default runtime (no class), and gVisor's class.
    assert_eq!(classes[0]["role"], "default");
    assert_eq!(classes[0]["runtime_class"], Value::Null);
    assert_eq!(classes[0]["state"], "ran", "{k:#}");
    assert!(classes[0]["start_ms"].as_u64().unwrap() > 0);
    assert_eq!(classes[1]["role"], "gvisor");
    assert_eq!(classes[1]["runtime_class"], "gvisor");
    assert_eq!(classes[1]["state"], "ran", "{k:#}");
    assert_eq!(classes[1]["handler"], "runsc");
    // Read from the guest: gVisor's own kernel, not the host's.
    let gvisor = classes[1]["kernel"].as_str().unwrap();
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert!(gvisor.contains("gvisor"), "{gvisor}");
    assert_ne!(classes[0]["kernel"], classes[1]["kernel"]);
    assert_eq!(
        classes[0]["kernel"].as_str().unwrap(),
        host.lines().next().unwrap()
    );
    // The probes are gone: no record, no pod.
    assert_eq!(ns.objects("sandboxes.burrow.dev"), Vec::<String>::new());
    assert_eq!(ns.objects("pods"), Vec::<String>::new());
}

#[test]
fn doctor_finds_a_missing_class_and_a_class_that_cannot_run() {
    let ns = Namespace::new("doctor-bad");
    // No such class: unusable, and nothing is probed under it. The gVisor
    // class is optional: missing, it is only reported.
    let (code, k) = doctor(
        &ns.0,
        &[
            ("BURROW_KUBE_RUNTIME_CLASS", "burrow-test-missing"),
            (
                "BURROW_KUBE_GVISOR_RUNTIME_CLASS",
                "burrow-test-missing-too",
            ),
        ],
        &[],
    );
    assert_eq!(code, 7, "{k:#}");
    assert_eq!(k["ok"], false);
    let classes = k["details"]["classes"].as_array().unwrap();
    assert_eq!(classes[0]["state"], "missing");
    assert_eq!(classes[0]["required"], true);
    assert_eq!(classes[1]["state"], "missing");
    assert_eq!(classes[1]["required"], false);

    // A class that exists but whose handler no node has: its probe never
    // runs, is bounded by --probe-timeout, and is cleaned up.
    let class = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: burrow-test-broken\nhandler: burrow-test-no-such-handler\n";
    let path = std::env::temp_dir().join(format!("broken-class-{}.yaml", std::process::id()));
    std::fs::write(&path, class).unwrap();
    let out = kubectl(&["apply", "-f", path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let (code, k) = doctor(
        &ns.0,
        &[
            ("BURROW_KUBE_RUNTIME_CLASS", "burrow-test-broken"),
            (
                "BURROW_KUBE_GVISOR_RUNTIME_CLASS",
                "burrow-test-missing-too",
            ),
        ],
        &["--probe-timeout", "10s"],
    );
    assert_eq!(code, 7, "{k:#}");
    let classes = k["details"]["classes"].as_array().unwrap();
    assert_eq!(classes[0]["state"], "failed", "{k:#}");
    assert_eq!(classes[0]["code"], "start_failed");
    assert_eq!(ns.objects("sandboxes.burrow.dev"), Vec::<String>::new());
    assert_eq!(ns.objects("pods"), Vec::<String>::new());
    let _ = kubectl(&["delete", "runtimeclass", "burrow-test-broken"]);
}

#[test]
fn doctor_without_a_usable_cluster_is_a_typed_failure() {
    // An unloadable kubeconfig, and a namespace the cluster does not have.
    let (code, k) = doctor(
        "default",
        &[("BURROW_KUBECONFIG", "/nonexistent/kubeconfig")],
        &[],
    );
    assert_eq!((code, k["ok"].clone()), (7, json!(false)), "{k:#}");
    assert_eq!(k["code"], "invalid_config");
    let (code, k) = doctor("burrow-test-no-such-namespace", &[], &[]);
    assert_eq!((code, k["ok"].clone()), (7, json!(false)), "{k:#}");
    assert_eq!(k["code"], "invalid_config");
}

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

fn image() -> String {
    std::env::var("BURROW_TEST_KUBE_IMAGE").unwrap_or_else(|_| "burrow.test/busybox:1".into())
}

/// A `burrow serve` environment on a fresh Postgres database `db` whose
/// backend is the cluster, records and pods in `ns` (blocking).
fn kube_serve_env(home: &std::path::Path, db: &str, ns: &str) -> ServeEnv {
    let url = cluster().create_database(db).unwrap();
    let mut env = ServeEnv::new(home, &url)
        .set("BACKEND", "kubernetes")
        .set("IDLE_TIMEOUT", "0");
    env.vars.push(("BURROW_KUBECONFIG".into(), kubeconfig()));
    env.vars
        .push(("BURROW_KUBE_NAMESPACE".into(), ns.to_owned()));
    env
}

/// Runs `n` gateway calls at once over `servers`, each retrying on 503
/// (which must carry Retry-After); returns (status, body, 503s seen).
fn race(servers: &[&Server], path: &str, token: &str, n: usize) -> Vec<(u16, String, usize)> {
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let url = format!("{}{path}", servers[i % servers.len()].url);
            let (barrier, token) = (barrier.clone(), token.to_owned());
            std::thread::spawn(move || {
                barrier.wait();
                let (r, busy) = call_retrying(&url, &token, Duration::from_secs(180));
                (r.status, r.text(), busy)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn starts(server: &Server, token: &str) -> u64 {
    metric_sample(
        &server.url,
        token,
        "burrow_gateway_starts_total{result=\"ok\"}",
    )
    .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_kubernetes_cold_calls_make_one_start_and_warm_calls_never_see_503() {
    let th = TestHome::new().await;
    let ns = Namespace::new("serve-gw");
    let env = tokio::task::spawn_blocking({
        let (home, ns) = (th.path().to_path_buf(), ns.0.clone());
        move || kube_serve_env(&home, "kube_gateway", &ns)
    })
    .await
    .unwrap();
    let token = env.create_token("tests");
    let (a, b) = (Arc::new(env.start("a")), Arc::new(env.start("b")));

    // A sandbox on the cluster, defined through the API (no pod yet), as a
    // gateway target whose service comes up 2 s after the pod runs.
    let create = json!({
        "name": "web",
        "config": {"image": image(), "startup_timeout": 120_000},
        "detached": true,
    })
    .to_string();
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes", a.url),
        Some(&token),
        Some(&create),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(ns.objects("pods"), Vec::<String>::new());
    let target = json!({"port": 8080, "command": web_command(2)}).to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{id}", a.url),
        Some(&token),
        Some(&target),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // Cold: 20 calls at once over both replicas; every one answers "ok",
    // most saw 503 + Retry-After first, and there was exactly one start.
    let path = format!("/gw/{id}/index.html");
    let results = {
        let (a, b, path, token) = (a.clone(), b.clone(), path.clone(), token.clone());
        tokio::task::spawn_blocking(move || race(&[&a, &b], &path, &token, 20))
            .await
            .unwrap()
    };
    for (status, body, _) in &results {
        assert_eq!((*status, body.trim()), (200, "ok"), "{body}");
    }
    let refused = results.iter().filter(|(_, _, busy)| *busy > 0).count();
    assert!(
        refused >= 15,
        "only {refused} of 20 calls saw 503 during the start"
    );
    assert_eq!(starts(&a, &token) + starts(&b, &token), 1);
    let info = http(
        "GET",
        &format!("{}/v1/sandboxes/{id}", b.url),
        Some(&token),
        None,
    )
    .json();
    assert_eq!(
        (info["status"].clone(), info["generation"].clone()),
        (json!("running"), json!(1))
    );
    assert_eq!(ns.objects("pods").len(), 1, "one pod for one start");

    // Warm: 20 at once, not one 503, still generation 1.
    let warm = {
        let (a, b, path, token) = (a.clone(), b.clone(), path.clone(), token.clone());
        tokio::task::spawn_blocking(move || race(&[&a, &b], &path, &token, 20))
            .await
            .unwrap()
    };
    for (status, body, busy) in &warm {
        assert_eq!((*status, *busy), (200, 0), "{body}");
    }
    let info = http(
        "GET",
        &format!("{}/v1/sandboxes/{id}", a.url),
        Some(&token),
        None,
    )
    .json();
    assert_eq!(info["generation"], 1);
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes/{id}/destroy", a.url),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());

    // Lifecycle events, though the cluster keeps no event log: the pump
    // lists the sandboxes every second and each change is an event (a
    // quick `starting` may fall between two listings).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = http(
            "GET",
            &format!("{}/v1/events?limit=1000", b.url),
            Some(&token),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let types: Vec<String> = r
            .text()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["sandbox"]["id"] == id.as_str())
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect();
        let done = types.first().map(String::as_str) == Some("sandbox.created")
            && types.iter().any(|t| t == "sandbox.running")
            && types.last().map(String::as_str) == Some("sandbox.removed");
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the events never told the sandbox's life: {types:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Portable snapshots: a filesystem snapshot taken in a laptop's home and
/// pushed to a registry (`LocalBackend::push_snapshot`, as `burrow snapshot
/// push` does) is an image the Kubernetes backend runs: the file written on
/// the laptop side is there in the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_pushed_from_a_laptop_runs_in_a_pod() {
    let registry = common::registry::TestRegistry::start();
    // The cluster's containerd reaches the test registry over plain HTTP
    // (its registry host configuration, read at each pull).
    let hosts = std::path::PathBuf::from(
        std::env::var("BURROW_K8S_REGISTRY_HOSTS")
            .expect("BURROW_K8S_REGISTRY_HOSTS (bash scripts/k8s/cluster.sh env)"),
    )
    .join(format!("127.0.0.1:{}", registry.port()));
    std::fs::create_dir_all(&hosts).unwrap();
    std::fs::write(
        hosts.join("hosts.toml"),
        format!(
            "server = \"http://127.0.0.1:{p}\"\n\n[host.\"http://127.0.0.1:{p}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            p = registry.port()
        ),
    )
    .unwrap();
    let target = registry.reference("burrow-test/portable:v1");

    let laptop = TestHome::new().await;
    let sb = laptop.builder("laptop").create().await.unwrap();
    common::sh_ok(&sb, "echo written-on-the-laptop > /carried").await;
    sb.snapshot("carry").await.unwrap();
    let opts = burrow::image::PullOptions {
        insecure: true,
        ..Default::default()
    };
    laptop
        .backend
        .push_snapshot("carry", &target, &opts)
        .await
        .unwrap();

    let ns = Namespace::new("portable");
    let settings = burrow_kube::KubeSettings {
        kubeconfig: Some(kubeconfig().into()),
        namespace: ns.0.clone(),
        ..burrow_kube::KubeSettings::from_env().unwrap()
    };
    let cluster: Arc<dyn burrow::Backend> =
        burrow_kube::KubeBackend::connect(settings).await.unwrap();
    let pod = burrow::Sandbox::builder("from-the-laptop")
        .image(target)
        .startup_timeout(Duration::from_secs(120))
        .backend(cluster)
        .create()
        .await
        .unwrap();
    assert_eq!(
        common::sh_ok(&pod, "cat /carried").await,
        "written-on-the-laptop\n"
    );
    pod.destroy().await.unwrap();
    let _ = std::fs::remove_dir_all(&hosts);
}

/// `burrow mcp` on the Kubernetes backend (which the CLI reaches through a
/// `burrow serve` whose backend is the cluster): the official Python
/// client's whole round trip, every sandbox a pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burrow_mcp_acts_on_the_cluster_through_a_server() {
    let th = TestHome::new().await;
    let ns = Namespace::new("mcp-tools");
    let env = tokio::task::spawn_blocking({
        let (home, ns) = (th.path().to_path_buf(), ns.0.clone());
        move || kube_serve_env(&home, "kube_mcp_tools", &ns)
    })
    .await
    .unwrap();
    let token = env.create_token("mcp");
    let server = env.start("a");
    let remote = [
        ("BURROW_URL", server.url.as_str()),
        ("BURROW_TOKEN", token.as_str()),
    ];
    let seen = common::mcp::python_client(th.path(), "stdio", &image(), &remote).await;
    common::mcp::check(&seen);
    // Destroyed by the client: no pod is left.
    assert_eq!(ns.objects("pods"), Vec::<String>::new());
}

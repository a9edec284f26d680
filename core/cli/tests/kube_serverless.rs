#![allow(clippy::unwrap_used)]
//! Serverless MCP on the Kubernetes backend, and `burrow serve` deployed by
//! its Helm chart, on the test cluster of `scripts/k8s/cluster.sh` (real
//! kube-apiserver, kubelet and containerd; started by `scripts/test.sh`)
//! with a real Postgres server:
//!
//! - the MCP round trip of `mcp.rs` with the sandbox as a pod;
//! - the chart installed with two replicas on in-cluster credentials,
//!   reached through `kubectl port-forward` to its service: the MCP round
//!   trip, then a replica SIGKILLed mid-reclaim;
//! - an execution cluster's kubeconfig Secret beating in-cluster
//!   credentials.
//!
//! The server pods use the host's network (`hostNetwork`): the test
//! cluster's API server and Postgres listen on the host's loopback only.

use burrow_cli_testkit as common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow_server::store::{RuntimeState, Store};
use common::kube::{api_server, import_image, k8s_bin, kubeconfig, kubectl, Namespace};
use common::mcp::{self, RoundTrip};
use common::serve::pg::PgCluster;
use common::serve::{http, ServeEnv};
use common::TestHome;
use serde_json::{json, Value};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

async fn database(name: &str) -> String {
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || cluster().create_database(&name).unwrap())
        .await
        .unwrap()
}

/// The MCP example's image, imported into the cluster: its name.
fn mcp_image() -> String {
    let (tar, name) = mcp::oci();
    import_image(&tar);
    name
}

/// The sandbox pods of `ns` (the server's own pods are not sandboxes).
fn sandbox_pods(ns: &Namespace) -> Vec<String> {
    ns.objects_labelled("pods", "burrow.dev/id")
}

/// Creates (defines) the MCP sandbox through the API at `url` and registers
/// it as a gateway target; `stubborn`: its workload ignores SIGTERM, so a
/// reclaim's graceful stop takes its whole grace period.
fn mcp_target(url: &str, token: &str, name: &str, stubborn: bool) -> String {
    let create = json!({
        "name": name,
        "config": {"image": mcp_image(), "startup_timeout": 120_000},
        "detached": true,
    })
    .to_string();
    let r = http(
        "POST",
        &format!("{url}/v1/sandboxes"),
        Some(token),
        Some(&create),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let mut command = mcp::slow_server_command(2);
    if stubborn {
        command[2] = format!(
            "(trap '' TERM; while true; do sleep 1; done) & {}",
            command[2]
        );
    }
    let target = json!({
        "port": mcp::PORT,
        "command": command,
        "metadata": {"server": "burrow-mcp-example"},
        "headers": {"x-upstream-key": "s3cret"},
    })
    .to_string();
    let r = http(
        "PUT",
        &format!("{url}/v1/gateway/targets/{id}"),
        Some(token),
        Some(&target),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcp_server_on_kubernetes_sleeps_when_idle_and_wakes_on_the_next_tool_call() {
    let th = TestHome::new().await;
    let ns = Namespace::new("mcp");
    let url = database("kube_mcp").await;
    let mut env = ServeEnv::new(th.path(), &url)
        .set("BACKEND", "kubernetes")
        .set("IDLE_TIMEOUT", "2s")
        .set("SWEEP_INTERVAL", "300ms")
        .set("LEASE_TTL", "1500ms");
    env.vars.push(("BURROW_KUBECONFIG".into(), kubeconfig()));
    env.vars
        .push(("BURROW_KUBE_NAMESPACE".into(), ns.0.clone()));
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("mcp"))
            .await
            .unwrap()
    };
    let server = env.start("a");
    let store = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();
    let id = {
        let (url, token) = (server.url.clone(), token.clone());
        tokio::task::spawn_blocking(move || mcp_target(&url, &token, "mcp", false))
            .await
            .unwrap()
    };
    assert_eq!(
        sandbox_pods(&ns),
        Vec::<String>::new(),
        "defined, not started"
    );
    let log = || server.log();
    let gone = || sandbox_pods(&ns).is_empty();
    RoundTrip {
        url: server.url.clone(),
        log: &log,
        one_replica: true,
        env: &env,
        token: &token,
        id: &id,
        store: &store,
        long_call_s: 8,
        workload_gone: &gone,
        freeze_pid: Some(server.pid()),
    }
    .run()
    .await;
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes/{id}/destroy", server.url),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());
}

// ------------------------------------------------------------ the chart

/// The image of `burrow serve` (this build's binary), imported: its name.
fn serve_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let tar = common::workspace_root().join(format!(
                "target/k8s/burrow-serve-{}.tar",
                std::process::id()
            ));
            let out = Command::new("bash")
                .arg(common::workspace_root().join("scripts/k8s/serve-image.sh"))
                .arg(common::burrow_bin())
                .arg(&tar)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "serve-image.sh: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            import_image(&tar);
            let _ = std::fs::remove_file(&tar);
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        })
        .clone()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A release of the chart in its own namespace, uninstalled when dropped.
struct Release {
    ns: Namespace,
    name: String,
    port: u16,
}

impl Release {
    /// `helm install --wait` of the chart with the test cluster's settings
    /// (this build's image, the host's network, the API server the pods
    /// can reach) and `sets`.
    fn install(
        ns: Namespace,
        db: &str,
        sets: &[(&str, &str)],
        extra_env: &[(&str, &str)],
    ) -> Release {
        let image = serve_image();
        let (repo, tag) = image.rsplit_once(':').unwrap();
        let port = free_port();
        // In-cluster credentials name the API server's service address,
        // which only kube-proxy would route; this cluster's API server
        // listens on the host's loopback, which these pods share.
        let api = api_server();
        let api = api.strip_prefix("https://").unwrap();
        let (host, api_port) = api.rsplit_once(':').unwrap();
        let mut env = vec![
            json!({"name": "KUBERNETES_SERVICE_HOST", "value": host}),
            json!({"name": "KUBERNETES_SERVICE_PORT", "value": api_port}),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| json!({"name": k, "value": v})),
        );
        let name = "burrow".to_owned();
        let port_s = port.to_string();
        let mut args: Vec<String> = vec![
            "install".into(),
            name.clone(),
            common::workspace_root()
                .join("deploy/helm/burrow")
                .display()
                .to_string(),
            "--namespace".into(),
            ns.0.clone(),
            "--wait".into(),
            "--timeout".into(),
            "240s".into(),
            "--set-json".into(),
            format!("extraEnv={}", Value::Array(env)),
        ];
        let base = [
            ("image.repository", repo),
            ("image.tag", tag),
            ("image.pullPolicy", "Never"),
            ("database.url", db),
            ("hostNetwork", "true"),
            ("service.port", &port_s),
            ("logFormat", "json"),
        ];
        for (k, v) in base.iter().chain(sets) {
            args.push("--set".into());
            args.push(format!("{k}={v}"));
        }
        let out = common::helm_command()
            .args(&args)
            .env("KUBECONFIG", kubeconfig())
            .output()
            .unwrap();
        let release = Release { ns, name, port };
        assert!(
            out.status.success(),
            "helm install: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            release.logs()
        );
        release
    }

    fn server_pods(&self) -> Vec<String> {
        let out = kubectl(&[
            "get",
            "pods",
            "-n",
            &self.ns.0,
            "-l",
            "app.kubernetes.io/instance",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Every server pod's log (JSON lines).
    fn logs(&self) -> String {
        self.server_pods()
            .iter()
            .map(|p| {
                let out = kubectl(&["logs", "-n", &self.ns.0, p, "--all-containers"]);
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `credentials` field of each server pod's "reaches its cluster"
    /// line.
    fn credentials(&self) -> Vec<String> {
        self.server_pods()
            .iter()
            .map(|p| {
                let out = kubectl(&["logs", "-n", &self.ns.0, p]);
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find_map(|l| l["fields"]["credentials"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| panic!("{p} logged no credentials line"))
            })
            .collect()
    }

    fn port_forward(&self) -> PortForward {
        PortForward::start(&self.ns.0, &format!("svc/{}", self.name), self.port)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- burrow serve pods -----\n{}", self.logs());
        }
        let _ = common::helm_command()
            .args([
                "uninstall",
                &self.name,
                "--namespace",
                &self.ns.0,
                "--wait",
                "--timeout",
                "60s",
            ])
            .env("KUBECONFIG", kubeconfig())
            .output();
    }
}

/// `kubectl port-forward` to a local port, stopped when dropped.
struct PortForward {
    child: Child,
    url: String,
}

impl PortForward {
    fn start(ns: &str, what: &str, port: u16) -> PortForward {
        let mut child = Command::new(k8s_bin("kubectl"))
            .args(["port-forward", "-n", ns, what, &format!(":{port}")])
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        // The rest is read to the end: kubectl dies of a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        // "Forwarding from 127.0.0.1:43123 -> 7878"
        let local = line
            .split_whitespace()
            .nth(2)
            .filter(|a| a.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("kubectl port-forward said {line:?}"))
            .to_owned();
        PortForward {
            child,
            url: format!("http://{local}"),
        }
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILLs the `burrow serve` process of replica (pod) `replica`: seen
/// from the host, as the pods share its process table's view.
fn kill_replica(replica: &str) {
    let want = format!("BURROW_SERVE_REPLICA_ID={replica}");
    let pids = common::processes_with(|args| {
        args.first().is_some_and(|a| a.ends_with("/burrow"))
            && args.get(1).is_some_and(|a| a == "serve")
    });
    let pid = pids
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|e| e.split(|b| *b == 0).any(|v| v == want.as_bytes()))
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("no burrow serve process of replica {replica}"));
    // SAFETY: kill(2) on a pid just read from /proc.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_runs_two_replicas_that_serve_mcp_and_survive_one_killed_mid_reclaim() {
    let th = TestHome::new().await;
    let url = database("chart_in_cluster").await;
    let release = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            Release::install(
                Namespace::new("chart"),
                &url,
                &[
                    ("replicas", "2"),
                    ("idleTimeout", "2s"),
                    ("sweepInterval", "300ms"),
                    ("startupTimeout", "120s"),
                ],
                &[("BURROW_SERVE_LEASE_TTL", "1500ms")],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(release.server_pods().len(), 2);
    assert_eq!(
        release.credentials(),
        ["in_cluster", "in_cluster"],
        "both replicas on the pods' service account"
    );

    // A token made on this host, on the same database; the API through a
    // port-forward to the service.
    let env = ServeEnv::new(th.path(), &url);
    let token = env.create_token("chart");
    let pf = release.port_forward();
    let store = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();
    let id = {
        let (u, t) = (pf.url.clone(), token.clone());
        tokio::task::spawn_blocking(move || mcp_target(&u, &t, "mcp", false))
            .await
            .unwrap()
    };
    let log = || release.logs();
    let gone = || sandbox_pods(&release.ns).is_empty();
    RoundTrip {
        url: pf.url.clone(),
        log: &log,
        one_replica: false,
        env: &env,
        token: &token,
        id: &id,
        store: &store,
        long_call_s: 8,
        workload_gone: &gone,
        freeze_pid: None,
    }
    .run()
    .await;

    // A replica SIGKILLed while it reclaims (the workload ignores SIGTERM,
    // so the graceful stop holds the claim for its whole grace period):
    // the other replica finishes the reclaim, and the next call wakes it.
    let stubborn = {
        let (u, t) = (pf.url.clone(), token.clone());
        tokio::task::spawn_blocking(move || mcp_target(&u, &t, "stubborn", true))
            .await
            .unwrap()
    };
    let endpoint = format!("{}/gw/{stubborn}/mcp", pf.url);
    let first = {
        let (e, t) = (endpoint.clone(), token.clone());
        tokio::task::spawn_blocking(move || {
            mcp::client(&e, &t, &["call", "add", r#"{"a":1,"b":2}"#])
        })
        .await
        .unwrap()
    };
    assert_eq!(first["result"], "3");
    let end = Instant::now() + Duration::from_secs(30);
    let owner = loop {
        let row = store.runtime(&stubborn).await.unwrap().unwrap();
        if row.state == RuntimeState::Reaping {
            break row.owner.unwrap();
        }
        assert!(Instant::now() < end, "never claimed for reclaim: {row:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    kill_replica(&owner);
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let row = store.runtime(&stubborn).await.unwrap().unwrap();
        if row.state == RuntimeState::Dormant {
            assert_eq!(row.owner, None);
            break;
        }
        assert!(
            Instant::now() < end,
            "the reclaim of a killed replica was never finished: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The port-forward may have been to the killed replica's pod: a new
    // one, to a ready pod.
    drop(pf);
    let pf = release.port_forward();
    let endpoint = format!("{}/gw/{stubborn}/mcp", pf.url);
    let again = {
        let t = token.clone();
        tokio::task::spawn_blocking(move || {
            mcp::client(&endpoint, &t, &["call", "add", r#"{"a":2,"b":2}"#])
        })
        .await
        .unwrap()
    };
    assert_eq!(again["result"], "4");
    assert_eq!(
        store.runtime(&stubborn).await.unwrap().unwrap().generation,
        2
    );
    for id in [&id, &stubborn] {
        let r = http(
            "POST",
            &format!("{}/v1/sandboxes/{id}/destroy", pf.url),
            Some(&token),
            None,
        );
        assert_eq!(r.status, 204, "{}", r.text());
    }
}

/// A kubeconfig for service account `sa` of `ns` (a token it is issued),
/// its one context named `context`, with no current context.
fn service_account_kubeconfig(ns: &str, sa: &str, context: &str) -> String {
    let out = kubectl(&["create", "token", sa, "-n", ns, "--duration", "2h"]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let out = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca = String::from_utf8(out.stdout).unwrap();
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "execution", "cluster": {"server": api_server(), "certificate-authority-data": ca}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "execution", "user": sa}}],
        "current-context": "",
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_execution_cluster_kubeconfig_beats_in_cluster_credentials() {
    let url = database("chart_execution").await;
    let db = url.clone();
    let (release, exec_ns) = tokio::task::spawn_blocking(move || {
        // The execution side: a namespace and a service account that may
        // do anything; its kubeconfig in a Secret of the release's
        // namespace. The release's own service account gets no rights at
        // all (rbac.create=false): on in-cluster credentials the server
        // could not even start.
        let exec_ns = Namespace::new("exec");
        let ns = Namespace::new("chart-exec");
        assert!(
            kubectl(&["create", "serviceaccount", "executor", "-n", &exec_ns.0])
                .status
                .success()
        );
        let binding = format!("burrow-test-executor-{}", exec_ns.0);
        let out = kubectl(&[
            "create",
            "clusterrolebinding",
            &binding,
            "--clusterrole",
            "cluster-admin",
            "--serviceaccount",
            &format!("{}:executor", exec_ns.0),
        ]);
        assert!(out.status.success(), "{out:?}");
        let file = std::env::temp_dir().join(format!("burrow-exec-kubeconfig-{}", exec_ns.0));
        std::fs::write(
            &file,
            service_account_kubeconfig(&exec_ns.0, "executor", "workers"),
        )
        .unwrap();
        let out = kubectl(&[
            "create",
            "secret",
            "generic",
            "exec-kubeconfig",
            "-n",
            &ns.0,
            &format!("--from-file=config={}", file.display()),
        ]);
        let _ = std::fs::remove_file(&file);
        assert!(out.status.success(), "{out:?}");
        let release = Release::install(
            ns,
            &url,
            &[
                ("replicas", "1"),
                ("rbac.create", "false"),
                ("kubernetes.namespace", &exec_ns.0),
                ("executionCluster.kubeconfigSecret", "exec-kubeconfig"),
                ("executionCluster.kubeconfigKey", "config"),
                ("executionCluster.context", "workers"),
                ("idleTimeout", "0"),
            ],
            &[],
        );
        (release, exec_ns)
    })
    .await
    .unwrap();
    assert_eq!(release.credentials(), ["explicit"]);

    // A sandbox made through the server runs as a pod of the execution
    // side's namespace, made with the execution side's identity.
    let th = TestHome::new().await;
    let env = ServeEnv::new(th.path(), &db);
    let token = env.create_token("exec");
    let pf = release.port_forward();
    let create = json!({
        "name": "probe",
        "config": {"image": "burrow.test/busybox:1", "startup_timeout": 120_000},
        "detached": true,
    })
    .to_string();
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes", pf.url),
        Some(&token),
        Some(&create),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes/{id}/start", pf.url),
        Some(&token),
        Some(r#"{"detached": true}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sandbox_pods(&exec_ns).len(), 1);
    assert_eq!(sandbox_pods(&release.ns), Vec::<String>::new());
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes/{id}/destroy", pf.url),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    drop(pf);
    drop(release);
    let _ = kubectl(&[
        "delete",
        "clusterrolebinding",
        &format!("burrow-test-executor-{}", exec_ns.0),
    ]);
}

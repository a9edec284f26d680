#![allow(clippy::unwrap_used)]
//! The Helm chart (`deploy/helm/burrow`), rendered by a real helm (built
//! from the Go module proxy): `helm lint`, every combination of the values
//! that shape the deployment rendered and read back, and the combinations
//! that cannot work refused at render time, naming the value. Installing it
//! into a real cluster is in `kube.rs`.

use burrow_cli_testkit as common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

fn chart() -> PathBuf {
    common::workspace_root().join("deploy/helm/burrow")
}

fn helm(args: &[&str]) -> Output {
    common::helm_command()
        .args(args)
        .output()
        .expect("running helm")
}

/// `helm template` with `--set` pairs: the rendered objects, or the
/// failure's stderr.
fn render(sets: &[(&str, &str)]) -> Result<Vec<Value>, String> {
    let chart = chart();
    let mut args = vec![
        "template".to_owned(),
        "demo".into(),
        chart.display().to_string(),
        "--namespace".into(),
        "burrow-system".into(),
        "--include-crds".into(),
        // The test cluster's version (helm assumes an old one offline).
        "--kube-version".into(),
        KUBE_VERSION.into(),
    ];
    for (k, v) in sets {
        args.push("--set".into());
        args.push(format!("{k}={v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = helm(&args);
    if !out.status.success() {
        assert!(out.stdout.is_empty(), "a failed render printed objects");
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn object<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    env(container, name).map(|e| e["value"].as_str().unwrap().to_owned())
}

/// The Kubernetes version of `scripts/k8s/build.sh`.
const KUBE_VERSION: &str = "1.34.4";

const DB: &str = "postgres://burrow:pw@db.internal:5432/burrow";

#[test]
fn helm_lint_passes_with_each_database_source() {
    let chart = chart().display().to_string();
    for set in [
        format!("database.url={DB}"),
        "database.existingSecret=burrow-db,database.existingSecretKey=dsn".into(),
    ] {
        let out = helm(&[
            "lint",
            "--strict",
            &chart,
            "--kube-version",
            KUBE_VERSION,
            "--set",
            &set,
        ]);
        assert!(
            out.status.success(),
            "helm lint --set {set}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_value_combination_renders_what_it_says() {
    let mut renders = 0;
    for replicas in ["1", "3"] {
        for existing in [false, true] {
            for execution in [0, 1, 2] {
                for host_network in [false, true] {
                    for runtime_class in ["", "gvisor"] {
                        for idle in ["0", "15m"] {
                            check_render(
                                replicas,
                                existing,
                                execution,
                                host_network,
                                runtime_class,
                                idle,
                            );
                            renders += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(renders, 96);
}

/// Renders one combination and checks every object it shapes.
/// `execution`: 0 none, 1 Secret and key, 2 those and a context.
fn check_render(
    replicas: &str,
    existing: bool,
    execution: u8,
    host_network: bool,
    runtime_class: &str,
    idle: &str,
) {
    let mut sets = vec![
        ("replicas", replicas),
        ("idleTimeout", idle),
        ("sweepInterval", "10s"),
        ("startupTimeout", "2m"),
        ("kubernetes.runtimeClass", runtime_class),
        ("hostNetwork", if host_network { "true" } else { "false" }),
    ];
    if existing {
        sets.push(("database.existingSecret", "my-db"));
        sets.push(("database.existingSecretKey", "dsn"));
    } else {
        sets.push(("database.url", DB));
    }
    if execution >= 1 {
        sets.push(("executionCluster.kubeconfigSecret", "exec-kubeconfig"));
        sets.push(("executionCluster.kubeconfigKey", "config"));
    }
    if execution == 2 {
        sets.push(("executionCluster.context", "workers"));
    }
    let what = format!("{sets:?}");
    let objects = render(&sets).unwrap_or_else(|e| panic!("{what}: {e}"));
    let d = object(&objects, "Deployment").unwrap();
    assert_eq!(
        d["spec"]["replicas"],
        replicas.parse::<u64>().unwrap(),
        "{what}"
    );
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["args"], serde_json::json!(["serve"]));
    assert_eq!(
        env_value(c, "BURROW_SERVE_IDLE_TIMEOUT").as_deref(),
        Some(idle)
    );
    assert_eq!(
        env_value(c, "BURROW_SERVE_SWEEP_INTERVAL").as_deref(),
        Some("10s")
    );
    assert_eq!(
        env_value(c, "BURROW_SERVE_STARTUP_TIMEOUT").as_deref(),
        Some("2m")
    );
    assert_eq!(
        env_value(c, "BURROW_SERVE_BACKEND").as_deref(),
        Some("kubernetes")
    );
    assert_eq!(
        env_value(c, "BURROW_KUBE_RUNTIME_CLASS").as_deref(),
        (!runtime_class.is_empty()).then_some(runtime_class),
        "{what}"
    );
    assert_eq!(
        env_value(c, "BURROW_KUBE_NAMESPACE").as_deref(),
        Some("burrow-system")
    );
    assert_eq!(
        env(c, "BURROW_SERVE_REPLICA_ID").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );

    // The database URL comes from a Secret: the chart's own or the user's.
    let db = &env(c, "BURROW_SERVE_DATABASE").unwrap()["valueFrom"]["secretKeyRef"];
    let secret = objects.iter().find(|o| o["kind"] == "Secret");
    if existing {
        assert_eq!(
            (db["name"].as_str(), db["key"].as_str()),
            (Some("my-db"), Some("dsn"))
        );
        assert!(
            secret.is_none(),
            "{what}: the chart made a Secret of its own"
        );
    } else {
        let secret = secret.unwrap();
        assert_eq!(db["name"], secret["metadata"]["name"]);
        assert_eq!(secret["stringData"][db["key"].as_str().unwrap()], DB);
    }

    // The execution cluster's kubeconfig: mounted, and named by
    // BURROW_KUBECONFIG (which beats in-cluster credentials), or neither.
    let mounts = c["volumeMounts"].as_array().unwrap();
    let volumes = pod["volumes"].as_array().unwrap();
    let mount = mounts.iter().find(|m| m["name"] == "execution-cluster");
    let volume = volumes.iter().find(|v| v["name"] == "execution-cluster");
    if execution >= 1 {
        let (mount, volume) = (mount.unwrap(), volume.unwrap());
        assert_eq!(volume["secret"]["secretName"], "exec-kubeconfig");
        assert_eq!(volume["secret"]["items"][0]["key"], "config");
        let path = format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap(),
            volume["secret"]["items"][0]["path"].as_str().unwrap()
        );
        assert_eq!(env_value(c, "BURROW_KUBECONFIG"), Some(path), "{what}");
        assert_eq!(mount["readOnly"], true);
    } else {
        assert!(mount.is_none() && volume.is_none(), "{what}");
        assert_eq!(env_value(c, "BURROW_KUBECONFIG"), None, "{what}");
    }
    assert_eq!(
        env_value(c, "BURROW_KUBE_CONTEXT").as_deref(),
        (execution == 2).then_some("workers")
    );

    // hostNetwork: the node's loopback, the port shared by the replicas.
    if host_network {
        assert_eq!(pod["hostNetwork"], true);
        assert_eq!(
            env_value(c, "BURROW_SERVE_LISTEN").as_deref(),
            Some("127.0.0.1:7878")
        );
        assert_eq!(
            env_value(c, "BURROW_SERVE_REUSE_PORT").as_deref(),
            Some("true")
        );
        assert_eq!(c["readinessProbe"]["httpGet"]["host"], "127.0.0.1");
        // No declared (host) port: the scheduler would allow one replica
        // per node.
        assert!(c["ports"].is_null(), "{what}");
    } else {
        assert!(pod["hostNetwork"].is_null(), "{what}");
        assert_eq!(
            env_value(c, "BURROW_SERVE_LISTEN").as_deref(),
            Some("0.0.0.0:7878")
        );
        assert_eq!(env_value(c, "BURROW_SERVE_REUSE_PORT"), None);
        assert_eq!(c["ports"][0]["containerPort"], 7878);
    }

    // Defaults of the settings other tests vary: plain HTTP, no rate
    // limit, a month of audit log.
    assert_eq!(
        env_value(c, "BURROW_SERVE_REQUESTS_PER_MINUTE").as_deref(),
        Some("0")
    );
    assert_eq!(
        env_value(c, "BURROW_SERVE_AUDIT_RETENTION").as_deref(),
        Some("30d")
    );
    check_tls(&objects, None, host_network, &what);

    // The service account and what it may do; the Sandbox definition.
    let sa = object(&objects, "ServiceAccount").unwrap();
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    for kind in [
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
    ] {
        assert!(object(&objects, kind).is_some(), "{what}: no {kind}");
    }
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    let mut names: Vec<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["sandboxes.burrow.dev", "sandboxpools.burrow.dev"]);
}

/// What `tls.existingSecret` (`secret`) shapes: the Secret mounted whole
/// and read-only (no subPath: the kubelet updates it in place, and the
/// server reloads it), the server's TLS settings naming its files, HTTPS
/// probes and port names; or none of it.
fn check_tls(objects: &[Value], secret: Option<&str>, host_network: bool, what: &str) {
    let d = object(objects, "Deployment").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "tls");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tls");
    let service = object(objects, "Service").unwrap();
    let Some(secret) = secret else {
        assert!(mount.is_none() && volume.is_none(), "{what}");
        for var in ["BURROW_SERVE_TLS_CERT", "BURROW_SERVE_TLS_KEY"] {
            assert_eq!(env_value(c, var), None, "{what}");
        }
        for probe in ["readinessProbe", "livenessProbe"] {
            assert!(c[probe]["httpGet"]["scheme"].is_null(), "{what}");
        }
        assert_eq!(service["spec"]["ports"][0]["name"], "http", "{what}");
        return;
    };
    let (mount, volume) = (mount.unwrap(), volume.unwrap());
    assert_eq!(volume["secret"]["secretName"], secret, "{what}");
    assert_eq!(mount["readOnly"], true, "{what}");
    assert!(
        mount["subPath"].is_null(),
        "{what}: a subPath is never updated"
    );
    let dir = mount["mountPath"].as_str().unwrap();
    let items = volume["secret"]["items"].as_array().unwrap();
    for (var, key) in [
        ("BURROW_SERVE_TLS_CERT", "tls.crt"),
        ("BURROW_SERVE_TLS_KEY", "tls.key"),
    ] {
        let item = items.iter().find(|i| i["key"] == key).unwrap();
        assert_eq!(
            env_value(c, var),
            Some(format!("{dir}/{}", item["path"].as_str().unwrap())),
            "{what}"
        );
    }
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{what}");
    }
    assert_eq!(service["spec"]["ports"][0]["name"], "https", "{what}");
    if !host_network {
        assert_eq!(c["ports"][0]["name"], "https", "{what}");
    }
}

#[test]
fn tls_rate_limits_retention_and_webhooks_render_what_they_say() {
    let mut renders = 0;
    for tls in [None, Some("burrow-tls")] {
        for host_network in [false, true] {
            for (rpm, retention) in [("0", "0"), ("600", "7d"), ("1000000", "720h")] {
                let mut sets = vec![
                    ("database.url", DB),
                    ("hostNetwork", if host_network { "true" } else { "false" }),
                    ("auth.requestsPerMinute", rpm),
                    ("audit.retention", retention),
                ];
                if let Some(secret) = tls {
                    sets.push(("tls.existingSecret", secret));
                }
                let what = format!("{sets:?}");
                let objects = render(&sets).unwrap_or_else(|e| panic!("{what}: {e}"));
                let d = object(&objects, "Deployment").unwrap();
                let c = &d["spec"]["template"]["spec"]["containers"][0];
                assert_eq!(
                    env_value(c, "BURROW_SERVE_REQUESTS_PER_MINUTE").as_deref(),
                    Some(rpm),
                    "{what}"
                );
                assert_eq!(
                    env_value(c, "BURROW_SERVE_AUDIT_RETENTION").as_deref(),
                    Some(retention),
                    "{what}"
                );
                for (var, want) in [
                    ("BURROW_SERVE_EVENTS_RETENTION", "7d"),
                    ("BURROW_SERVE_WEBHOOK_TIMEOUT", "10s"),
                    ("BURROW_SERVE_WEBHOOK_BACKOFF", "1s"),
                    ("BURROW_SERVE_WEBHOOK_MAX_ATTEMPTS", "8"),
                ] {
                    assert_eq!(env_value(c, var).as_deref(), Some(want), "{what}: {var}");
                }
                check_tls(&objects, tls, host_network, &what);
                renders += 1;
            }
        }
    }
    assert_eq!(renders, 12);
    // Events and webhooks, set.
    let objects = render(&[
        ("database.url", DB),
        ("events.retention", "0"),
        ("webhooks.timeout", "30s"),
        ("webhooks.backoff", "500ms"),
        ("webhooks.maxAttempts", "3"),
    ])
    .unwrap();
    let d = object(&objects, "Deployment").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    for (var, want) in [
        ("BURROW_SERVE_EVENTS_RETENTION", "0"),
        ("BURROW_SERVE_WEBHOOK_TIMEOUT", "30s"),
        ("BURROW_SERVE_WEBHOOK_BACKOFF", "500ms"),
        ("BURROW_SERVE_WEBHOOK_MAX_ATTEMPTS", "3"),
    ] {
        assert_eq!(env_value(c, var).as_deref(), Some(want), "{var}");
    }
    // The chart passes lint with TLS on.
    let chart = chart().display().to_string();
    let out = helm(&[
        "lint",
        "--strict",
        &chart,
        "--kube-version",
        KUBE_VERSION,
        "--set",
        &format!("database.url={DB},tls.existingSecret=burrow-tls,auth.requestsPerMinute=60"),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_charts_resource_definitions_are_the_backends() {
    let objects = render(&[("database.url", DB)]).unwrap();
    for want in [burrow_kube::record::crd(), burrow_kube::pool_record::crd()] {
        let name = &want["metadata"]["name"];
        let crd = objects
            .iter()
            .find(|o| o["kind"] == "CustomResourceDefinition" && o["metadata"]["name"] == *name)
            .unwrap_or_else(|| panic!("no definition {name} in the chart"));
        assert_eq!(*crd, want);
    }
}

#[test]
fn bad_values_fail_the_render_naming_the_value() {
    let url = ("database.url", DB);
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![url, ("executionCluster.kubeconfigSecret", "k")],
            "executionCluster.kubeconfigKey",
        ),
        (
            vec![url, ("executionCluster.kubeconfigKey", "config")],
            "executionCluster.kubeconfigSecret",
        ),
        (
            vec![url, ("executionCluster.context", "c")],
            "executionCluster.kubeconfigSecret",
        ),
        (vec![], "database.url"),
        (
            vec![url, ("database.existingSecret", "s")],
            "database.existingSecret",
        ),
        (vec![("database.url", "mysql://x/y")], "database.url"),
        (vec![url, ("backend", "local")], "backend"),
        (vec![url, ("replicas", "0")], "replicas"),
        (vec![url, ("logFormat", "xml")], "logFormat"),
        (vec![url, ("idleTimeout", "soon")], "idleTimeout"),
        (vec![url, ("sweepInterval", "-1s")], "sweepInterval"),
        (
            vec![url, ("auth.requestsPerMinute", "many")],
            "auth.requestsPerMinute",
        ),
        (
            vec![url, ("auth.requestsPerMinute", "1000001")],
            "auth.requestsPerMinute",
        ),
        (vec![url, ("audit.retention", "a month")], "audit.retention"),
        (
            vec![url, ("events.retention", "forever")],
            "events.retention",
        ),
        (vec![url, ("webhooks.timeout", "0s")], "webhooks.timeout"),
        (vec![url, ("webhooks.backoff", "soon")], "webhooks.backoff"),
        (
            vec![url, ("webhooks.maxAttempts", "0")],
            "webhooks.maxAttempts",
        ),
        (
            vec![url, ("webhooks.maxAttempts", "51")],
            "webhooks.maxAttempts",
        ),
        (
            vec![url, ("tls.existingSecret", "true")],
            "tls.existingSecret",
        ),
    ];
    for (sets, names) in cases {
        let err = render(&sets).expect_err(&format!("{sets:?} rendered"));
        assert!(
            err.contains(names),
            "{sets:?}: the failure does not name {names}: {err}"
        );
    }
}

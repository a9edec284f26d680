#![allow(clippy::unwrap_used)]
//! The Kubernetes backend against a real cluster: the single-node cluster
//! of `scripts/k8s/cluster.sh` (real kube-apiserver, etcd, kubelet,
//! containerd, runc and gVisor), started by `scripts/test.sh` around these
//! tests. `BURROW_TEST_KUBECONFIG` names its kubeconfig; the images
//! (`BURROW_TEST_KUBE_IMAGE`, busybox, and `BURROW_KUBE_AGENT_IMAGE`, the
//! agent) are imported into its containerd. Without a cluster these tests
//! fail: they are never skipped.

mod common;

use std::sync::Arc;
use std::time::Duration;

use burrow::{
    Backend, BackendExt, CreateRequest, Error, ErrorCode, ExitReason, Sandbox, SandboxConfig,
    Status,
};
use burrow_kube::{KubeBackend, KubeSettings};
use common::{backend, client, image, kubeconfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

async fn stopped_info(b: &Arc<dyn Backend>, name: &str) -> burrow::SandboxInfo {
    b.get(name).await.unwrap()
}

fn config() -> SandboxConfig {
    let mut c = SandboxConfig::new(image());
    c.startup_timeout = Duration::from_secs(90);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_runs_in_a_pod_and_its_record_outlives_it() {
    let (b, ns) = backend("life").await;
    let b: Arc<dyn Backend> = b;
    let info = b
        .create(CreateRequest::new("Web 1.é_x", config()))
        .await
        .unwrap();
    assert_eq!(info.status, Status::Created);
    // Strict create: one winner.
    let err = b
        .create(CreateRequest::new("Web 1.é_x", config()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);

    let running = b
        .start("Web 1.é_x", &info.id, Default::default())
        .await
        .unwrap();
    let sb = Sandbox::from_info(b.clone(), &running);
    assert_eq!(running.status, Status::Running);
    assert_eq!(running.generation, 1);
    let out = sb.exec(["sh", "-c", "echo hi; uname -s"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\nLinux\n");
    sb.fs().write("/tmp/x", b"kept?").await.unwrap();
    assert_eq!(sb.fs().read("/tmp/x").await.unwrap(), b"kept?");

    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    let pod_name = burrow_kube::names::pod_name(&info.id, 1);
    assert!(pods.get_opt(&pod_name).await.unwrap().is_some());

    let stopped = b
        .stop("Web 1.é_x", &info.id, Default::default())
        .await
        .unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(
        stopped.last_run.unwrap().exit_reason,
        Some(ExitReason::Stopped)
    );
    assert!(pods.get_opt(&pod_name).await.unwrap().is_none());
    // The record is still there; the next start is generation 2.
    let again = b
        .start("Web 1.é_x", &info.id, Default::default())
        .await
        .unwrap();
    assert_eq!(again.generation, 2);
    b.destroy("Web 1.é_x", &info.id).await.unwrap();
    assert_eq!(
        b.get("Web 1.é_x").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

/// A process-count limit the cluster cannot hold a pod to is refused,
/// naming it, and leaves no record; with best-effort limits it is kept in
/// the configuration and the sandbox runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pids_limit_is_refused_unless_best_effort() {
    let (b, _ns) = backend("pids").await;
    let b: Arc<dyn Backend> = b;
    let mut capped = config();
    capped.pids_limit = Some(64);
    let err = b
        .create(CreateRequest::new("capped", capped.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    assert!(
        matches!(&err, burrow::Error::InvalidConfig { field, .. } if field == "pids_limit"),
        "{err:?}"
    );
    assert_eq!(
        b.get("capped").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    capped.best_effort_limits = true;
    let info = b
        .create(CreateRequest::new("capped", capped))
        .await
        .unwrap();
    assert_eq!(info.config.pids_limit, Some(64));
    let running = b
        .start("capped", &info.id, Default::default())
        .await
        .unwrap();
    assert_eq!(running.status, Status::Running);
    b.destroy("capped", &info.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_receiver_is_refused() {
    let (b, _) = backend("stale").await;
    let b: Arc<dyn Backend> = b;
    let old = b.create(CreateRequest::new("s", config())).await.unwrap();
    b.destroy("s", &old.id).await.unwrap();
    let new = b.create(CreateRequest::new("s", config())).await.unwrap();
    let err = b.start("s", &old.id, Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, Error::SandboxReplaced { actual, .. } if actual == &new.id),
        "{err}"
    );
    assert_eq!(b.get("s").await.unwrap().status, Status::Created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_behind_our_back_is_a_crash() {
    let (b, ns) = backend("crash").await;
    let b: Arc<dyn Backend> = b;
    let info = b.create(CreateRequest::new("c", config())).await.unwrap();
    b.start("c", &info.id, Default::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    pods.delete(
        &burrow_kube::names::pod_name(&info.id, 1),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    let crashed = b
        .wait_for_status("c", &info.id, &[Status::Crashed])
        .await
        .unwrap();
    assert_eq!(
        crashed.last_run.unwrap().exit_reason,
        Some(ExitReason::Crashed)
    );
    // It starts again.
    assert_eq!(
        b.start_by_name("c", Default::default())
            .await
            .unwrap()
            .generation,
        2
    );
    b.destroy_by_name("c").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_never_runs_fails_the_start_and_is_cleaned_up() {
    let (b, ns) = backend("never").await;
    let b: Arc<dyn Backend> = b;
    let mut c = SandboxConfig::new("burrow.test/no-such-image:1");
    c.startup_timeout = Duration::from_secs(5);
    let info = b.create(CreateRequest::new("n", c)).await.unwrap();
    let err = b
        .start("n", &info.id, Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StartFailed, "{err}");
    let after = b.get("n").await.unwrap();
    assert_eq!(after.status, Status::Crashed);
    assert_eq!(
        after.last_run.unwrap().exit_reason,
        Some(ExitReason::StartFailed)
    );
    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    let pod = burrow_kube::names::pod_name(&info.id, 1);
    for _ in 0..300 {
        if pods.get_opt(&pod).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("pod {pod} of a failed start is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reclaim_deletes_the_pod_and_the_next_call_starts_generation_2() {
    let (b, ns) = backend("idle").await;
    let backend: Arc<dyn Backend> = b;
    let mut c = config();
    c.idle_timeout = Some(Duration::from_secs(2));
    c.demand_start = Some(true);
    let info = backend.create(CreateRequest::new("i", c)).await.unwrap();
    backend
        .start("i", &info.id, Default::default())
        .await
        .unwrap();
    let stopped = backend
        .wait_for_status("i", &info.id, &[Status::Stopped])
        .await
        .unwrap();
    assert_eq!(
        stopped.last_run.unwrap().exit_reason,
        Some(ExitReason::IdleTimeout)
    );
    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    assert!(pods
        .get_opt(&burrow_kube::names::pod_name(&info.id, 1))
        .await
        .unwrap()
        .is_none());
    // Demand start: the next exec wakes it as generation 2.
    let sb = Sandbox::from_info(backend.clone(), &stopped_info(&backend, "i").await);
    let out = sb.exec(["true"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    assert_eq!(backend.get("i").await.unwrap().generation, 2);
    backend.destroy("i", &info.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_never_reclaims_a_pod_under_a_request_in_flight() {
    // Two backends on one namespace, as two processes have: each its own
    // session agent in the pod and its own idle checker. A's long exec
    // stamps the record's idle clock only when it begins, so by the clock B
    // finds the sandbox idle after 2 s; the pod's calls lock, held by A's
    // session while the exec runs, says otherwise.
    let (a, ns) = backend("inflight").await;
    let settings = KubeSettings {
        kubeconfig: Some(kubeconfig()),
        namespace: ns.clone(),
        ..KubeSettings::from_env().unwrap()
    };
    let b = KubeBackend::connect(settings).await.unwrap();
    let a: Arc<dyn Backend> = a;
    let mut c = config();
    c.idle_timeout = Some(Duration::from_secs(2));
    let info = a.create(CreateRequest::new("busy", c)).await.unwrap();
    let running = a.start("busy", &info.id, Default::default()).await.unwrap();
    let sb = Sandbox::from_info(a.clone(), &running);
    let t0 = std::time::Instant::now();
    // Bounded: an exec whose pod is deleted under it never answers.
    let out = tokio::time::timeout(Duration::from_secs(90), sb.exec(["sleep", "8"]))
        .await
        .expect("the exec never ended: its pod was reclaimed under it")
        .unwrap();
    assert_eq!(out.status.code, Some(0), "the exec was cut: {out:?}");
    assert!(t0.elapsed() >= Duration::from_secs(8));
    // Then idle: reclaimed (by either), as generation 1.
    let stopped = a
        .wait_for_status("busy", &info.id, &[Status::Stopped])
        .await
        .unwrap();
    let run = stopped.last_run.unwrap();
    assert_eq!(
        (run.exit_reason, stopped.generation),
        (Some(ExitReason::IdleTimeout), 1)
    );
    drop(b);
    a.destroy("busy", &info.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_typed_errors_naming_their_source() {
    let settings = KubeSettings {
        kubeconfig: Some("/nonexistent/kubeconfig".into()),
        ..KubeSettings::default()
    };
    let err = KubeBackend::connect(settings).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let settings = KubeSettings {
        kubeconfig: Some(kubeconfig()),
        context: Some("no-such-context".into()),
        ..KubeSettings::default()
    };
    let err = KubeBackend::connect(settings).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let settings = KubeSettings {
        kubeconfig: Some(kubeconfig()),
        namespace: "no-such-namespace".into(),
        ..KubeSettings::default()
    };
    let err = KubeBackend::connect(settings).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { field, .. } if field == "kubernetes.namespace"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runsc_sandbox_runs_under_the_gvisor_runtime_class() {
    let (b, ns) = backend("gvisor").await;
    let b: Arc<dyn Backend> = b;
    let mut c = config();
    c.runtime = Some(burrow::OciRuntime::Runsc);
    let info = b.create(CreateRequest::new("g", c)).await.unwrap();
    let running = b.start("g", &info.id, Default::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    let pod = pods
        .get(&burrow_kube::names::pod_name(&info.id, 1))
        .await
        .unwrap();
    assert_eq!(
        pod.spec.unwrap().runtime_class_name.as_deref(),
        Some("gvisor")
    );
    // gVisor's own kernel answers, not the host's.
    let sb = Sandbox::from_info(b.clone(), &running);
    let out = sb.exec(["dmesg"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("gVisor"),
        "dmesg: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    b.destroy("g", &info.id).await.unwrap();
}

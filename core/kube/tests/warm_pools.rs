#![allow(clippy::unwrap_used)]
//! Warm pools of the Kubernetes backend on the test cluster: warm pods
//! claimed by creates without a start (the claimer's name, labels and
//! environment), the pool refilled behind them; sixteen claimers on four
//! backends (as four processes) take each warm sandbox once; the `scale`
//! subresource (what `kubectl scale` and an autoscaler use) sizes a pool;
//! claims whose claimer died mid-way are finished or undone by the next
//! refill; a definition changed under a pool has its warm sandboxes
//! replaced, and an unchanged one keeps them; bad definitions are refused
//! and change nothing.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::{Backend, CreateRequest, ErrorCode, PoolSpec, Sandbox, SandboxConfig, Status};
use burrow_kube::record::{self, ClaimMark, Spec, Stored};
use burrow_kube::KubeBackend;
use common::{backend, client, connect, image};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};

fn config() -> SandboxConfig {
    let mut c = SandboxConfig::new(image());
    c.env.insert("POOLED".into(), "yes".into());
    c
}

fn claim(name: &str, c: SandboxConfig) -> CreateRequest {
    CreateRequest::new(name, c).claiming(true)
}

async fn pods_of(ns: &str) -> usize {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    pods.list(&ListParams::default()).await.unwrap().items.len()
}

/// Waits (60 s at most) until `pool` has `warm` running sandboxes.
async fn until_warm(b: &KubeBackend, pool: &str, warm: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = b.get_pool(pool).await.unwrap();
        if info.warm == warm && info.starting == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "never {warm} warm: {info:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_claims_a_warm_pod_and_the_pool_refills() {
    let (b, ns) = backend("pool").await;
    let made = b
        .create_pool(PoolSpec::new("warm", config(), 2))
        .await
        .unwrap();
    assert_eq!((made.size, made.warm, made.claims), (2, 2, 0));
    assert!(b.list(&Default::default()).await.unwrap().is_empty());
    assert_eq!(pods_of(&ns).await, 2);

    let mut wanted = config();
    wanted.env.insert("TASK".into(), "7".into());
    wanted.labels.insert("team".into(), "a".into());
    let info = b.create(claim("claimed", wanted)).await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.name, "claimed");
    assert_eq!(info.config.labels["team"], "a");
    let dynb: Arc<dyn Backend> = b.clone();
    let sb = Sandbox::from_info(dynb, &info);
    let out = sb.exec(["sh", "-c", "echo $TASK $POOLED"]).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "7 yes\n");
    assert_eq!(b.get_by_id(&info.id).await.unwrap().name, "claimed");
    let listed = b.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(b.get_pool("warm").await.unwrap().claims, 1);
    // Its pod is the warm one's: owned by its record now.
    let pods: Api<Pod> = Api::namespaced(client().await, &ns);
    let pod = pods
        .get(&burrow_kube::names::pod_name(&info.id, info.generation))
        .await
        .unwrap();
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.name, burrow_kube::names::record_name("claimed"));
    until_warm(&b, "warm", 2).await;

    // A create alone, or of another configuration, claims nothing.
    let defined = b
        .create(CreateRequest::new("defined", config()))
        .await
        .unwrap();
    assert_eq!(defined.status, Status::Created);
    let mut other = config();
    other.workdir = Some("/tmp".into());
    let cold = b.create(claim("other", other)).await.unwrap();
    assert_eq!(cold.status, Status::Created);
    let pool = b.get_pool("warm").await.unwrap();
    assert_eq!((pool.claims, pool.misses), (1, 0));

    // Empty: a claim misses, and the create is an ordinary one.
    let scaled = b.scale_pool("warm", 0).await.unwrap();
    assert_eq!((scaled.size, scaled.warm), (0, 0));
    let missed = b.create(claim("missed", config())).await.unwrap();
    assert_eq!(missed.status, Status::Created);
    assert_eq!(b.get_pool("warm").await.unwrap().misses, 1);

    b.remove_pool("warm").await.unwrap();
    let err = b.get_pool("warm").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!(b.list_pools().await.unwrap().len(), 0);
    assert_eq!(
        b.status("claimed", &info.id).await.unwrap().status,
        Status::Running
    );
    b.destroy("claimed", &info.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pool_definitions_change_nothing() {
    let (b, _ns) = backend("poolbad").await;
    let mut with_ports = config();
    with_ports.ports = vec!["18080:80".parse().unwrap()];
    for (spec, code) in [
        (PoolSpec::new("a/b/c", config(), 1), ErrorCode::InvalidName),
        (
            PoolSpec::new("big", config(), 65),
            ErrorCode::InvalidArgument,
        ),
        (
            PoolSpec::new("ports", with_ports, 1),
            ErrorCode::InvalidConfig,
        ),
        (
            PoolSpec::new("path", SandboxConfig::new("/host/rootfs"), 1),
            ErrorCode::InvalidImage,
        ),
    ] {
        let err = b.create_pool(spec.clone()).await.unwrap_err();
        assert_eq!(err.code(), code, "{spec:?}: {err}");
    }
    assert!(b.list_pools().await.unwrap().is_empty());
    b.create_pool(PoolSpec::new("p", config(), 0))
        .await
        .unwrap();
    let err = b
        .create_pool(PoolSpec::new("p", config(), 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    let err = b.scale_pool("p", 65).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = b.scale_pool("nope", 1).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!(b.get_pool("p").await.unwrap().size, 0);
}

/// Sixteen creates on four backends of one namespace (as four processes)
/// race for a pool of four: each gets a sandbox of its own, none is handed
/// out twice, every claim and miss is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_claimers_on_four_backends_take_each_warm_sandbox_once() {
    let (first, ns) = backend("poolrace").await;
    first
        .create_pool(PoolSpec::new("race", config(), 4))
        .await
        .unwrap();
    let mut backends = vec![first.clone()];
    for _ in 0..3 {
        backends.push(connect(&ns).await);
    }
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..16 {
        let b = backends[i % 4].clone();
        racers.spawn(async move { b.create(claim(&format!("r{i}"), config())).await });
    }
    let mut ids = HashSet::new();
    let mut claimed = 0;
    while let Some(done) = racers.join_next().await {
        let info = done.unwrap().unwrap();
        assert!(ids.insert(info.id.clone()), "{info:?}");
        if info.status == Status::Running {
            claimed += 1;
        }
    }
    let pool = first.get_pool("race").await.unwrap();
    assert_eq!(pool.claims + pool.misses, 16, "{pool:?}");
    assert_eq!(pool.claims, claimed, "{pool:?}");
    assert!(claimed >= 1);
    assert_eq!(first.list(&Default::default()).await.unwrap().len(), 16);
}

/// The `scale` subresource sets the size and the pool follows; a claim
/// whose claimer died after marking it is undone, one that died after
/// making its record is finished, by the next refill of any backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_subresource_sizes_a_pool_and_left_claims_are_settled() {
    let (b, ns) = backend("poolscale").await;
    b.create_pool(PoolSpec::new("s", config(), 0))
        .await
        .unwrap();
    let pools: Api<DynamicObject> = Api::namespaced_with(
        client().await,
        &ns,
        &burrow_kube::pool_record::api_resource(),
    );
    let object = burrow_kube::names::record_name("s");
    pools
        .patch_scale(
            &object,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    until_warm(&b, "s", 2).await;
    assert_eq!(
        pools
            .get_scale(&object)
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(2)
    );

    let records: Api<DynamicObject> =
        Api::namespaced_with(client().await, &ns, &record::api_resource());
    let warm = |slot: u32| {
        let records = records.clone();
        async move {
            let o = records
                .get(&burrow_kube::names::record_name(&format!("pool/s/{slot}")))
                .await
                .unwrap();
            Stored::from_object(o).unwrap()
        }
    };
    let left = |s: &Stored, name: &str| {
        let mut spec: Spec = s.spec.clone();
        spec.warm.as_mut().unwrap().claim = Some(ClaimMark {
            name: name.into(),
            at_ms: 0,
        });
        s.replacement(&spec).unwrap()
    };
    // Marked, then its claimer died: undone.
    let ghost = warm(0).await;
    records
        .replace(
            &burrow_kube::names::record_name(&ghost.info().name),
            &PostParams::default(),
            &left(&ghost, "ghost"),
        )
        .await
        .unwrap();
    // Marked and its record made, then its claimer died: finished. (The
    // record first here, so that no refill sees the mark without it.)
    let half = warm(1).await;
    let mut spec = half.spec.clone();
    spec.info.name = "half".into();
    spec.warm = None;
    records
        .create(&PostParams::default(), &record::new_object(&spec).unwrap())
        .await
        .unwrap();
    records
        .replace(
            &burrow_kube::names::record_name(&half.info().name),
            &PostParams::default(),
            &left(&half, "half"),
        )
        .await
        .unwrap();
    // Another backend's refill settles both.
    let other = connect(&ns).await;
    other.scale_pool("s", 2).await.unwrap();
    until_warm(&b, "s", 2).await;
    assert_eq!(
        b.get("ghost").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let got = b.get("half").await.unwrap();
    assert_eq!(
        (got.id.clone(), got.status),
        (half.info().id.clone(), Status::Running)
    );
    let dynb: Arc<dyn Backend> = b.clone();
    let out = Sandbox::from_info(dynb, &got).exec(["true"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    for s in b.list(&Default::default()).await.unwrap() {
        assert_eq!(s.name, "half", "only the finished claim is listed");
    }
    assert!(records
        .get_opt(&burrow_kube::names::record_name(&half.info().name))
        .await
        .unwrap()
        .is_none_or(|o| Stored::from_object(o).unwrap().info().id != half.info().id));
}

/// The ids and environments of `pool`'s warm records in `ns`.
async fn warm_of(ns: &str, pool: &str) -> Vec<(burrow::SandboxId, Option<String>)> {
    let records: Api<DynamicObject> =
        Api::namespaced_with(client().await, ns, &record::api_resource());
    let list = records
        .list(&ListParams::default().labels(&format!("{}=true", record::WARM_LABEL)))
        .await
        .unwrap();
    let mut out: Vec<_> = list
        .into_iter()
        .map(|o| Stored::from_object(o).unwrap())
        .filter(|s| s.spec.warm.as_ref().unwrap().pool == pool)
        .map(|s| (s.info().id.clone(), s.info().config.env.get("V").cloned()))
        .collect();
    out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    out
}

/// A definition edited on the cluster (as `kubectl edit` does) has its
/// warm sandboxes replaced, one at a time, by the pool's refills; one left
/// alone keeps its warm sandboxes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_definition_replaces_the_warm_sandboxes_and_an_unchanged_one_keeps_them() {
    let (b, ns) = backend("pooledit").await;
    let mut c = config();
    c.env.insert("V".into(), "1".into());
    b.create_pool(PoolSpec::new("e", c, 2)).await.unwrap();
    let before = warm_of(&ns, "e").await;
    assert_eq!(before.len(), 2);
    // Left alone for a few refills: the same sandboxes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(warm_of(&ns, "e").await, before);

    let pools: Api<DynamicObject> = Api::namespaced_with(
        client().await,
        &ns,
        &burrow_kube::pool_record::api_resource(),
    );
    pools
        .patch(
            &burrow_kube::names::record_name("e"),
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"config": {"env": {"POOLED": "yes", "V": "2"}}}}),
            ),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = warm_of(&ns, "e").await;
        if now.len() == 2 && now.iter().all(|(_, v)| v.as_deref() == Some("2")) {
            assert!(now
                .iter()
                .all(|(id, _)| before.iter().all(|(old, _)| old != id)));
            break;
        }
        assert!(Instant::now() < deadline, "not replaced: {now:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    until_warm(&b, "e", 2).await;
}

//! `QuotaBackend`'s own rules, with real sandboxes: the quota (in total, per
//! label, and when starts race for the last slot from separate backend
//! instances, as separate processes would), and namespaces.

#[path = "../../../core/conformance/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use burrow::{
    Backend, ErrorCode, ListFilter, Sandbox, SandboxConfig, SandboxHandle, StartOptions, Status,
};
use custom_backend::{Quota, QuotaBackend, NAMESPACE_LABEL};

async fn open(home: &support::Home, namespace: &str, quota: Quota) -> Arc<dyn Backend> {
    Arc::new(
        QuotaBackend::open(home.path(), namespace, quota)
            .await
            .expect("open"),
    )
}

fn config(labels: &[(&str, &str)]) -> SandboxConfig {
    let mut config = SandboxConfig::new(support::busybox_rootfs().to_string_lossy());
    config.labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    config
}

async fn define(backend: &Arc<dyn Backend>, name: &str, labels: &[(&str, &str)]) -> SandboxHandle {
    Sandbox::builder(name)
        .backend(backend.clone())
        .config(config(labels))
        .detached(true)
        .define()
        .await
        .expect("define")
}

fn home() -> support::Home {
    support::init_env();
    support::Home::new(support::new_home_dir().expect("home"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_past_the_quota_are_refused_and_change_nothing() {
    let home = home();
    let b = open(
        &home,
        "q",
        Quota::new().max_running(2).max_running_per_label("team", 1),
    )
    .await;
    let a1 = define(&b, "a1", &[("team", "a")]).await;
    let a2 = define(&b, "a2", &[("team", "a")]).await;
    let b1 = define(&b, "b1", &[("team", "b")]).await;
    let free = define(&b, "free", &[]).await;

    a1.start().await.expect("first of team a");
    // Per label: team a has its one.
    let e = a2.start().await.expect_err("second of team a");
    assert_eq!(e.code(), ErrorCode::RuntimeUnavailable, "{e}");
    let info = a2.info().await.unwrap();
    assert_eq!((info.status, info.generation), (Status::Created, 0));
    b1.start().await.expect("team b has room");
    // In total: two run.
    let e = free.connect_or_start().await.expect_err("third in total");
    assert_eq!(e.code(), ErrorCode::RuntimeUnavailable, "{e}");
    // Relabelling a running sandbox into a full group is a start there.
    let e = b1
        .modify()
        .label("team", "a")
        .apply()
        .await
        .expect_err("team a is full");
    assert_eq!(e.code(), ErrorCode::RuntimeUnavailable, "{e}");
    assert_eq!(
        b1.info()
            .await
            .unwrap()
            .config
            .labels
            .get("team")
            .map(String::as_str),
        Some("b")
    );
    // A running sandbox needs no new slot: converging on it, restarting it.
    a1.connect_or_start().await.expect("already running");
    a1.restart().await.expect("restart keeps its slot");
    // Freed slots are taken again.
    a1.stop().await.unwrap();
    a2.start().await.expect("team a has room again");
    for h in [a1, a2, b1, free] {
        h.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_racing_for_the_last_slot_from_separate_instances_have_one_winner() {
    let home = home();
    let quota = Quota::new().max_running(1);
    let first = open(&home, "q", quota.clone()).await;
    let mut handles = Vec::new();
    for i in 0..4 {
        handles.push(define(&first, &format!("racer{i}"), &[]).await);
    }
    // Each caller on its own instance (its own in-process lock): only the
    // lock file of the home keeps their check and start atomic.
    let mut calls = Vec::new();
    for h in &handles {
        let backend = open(&home, "q", quota.clone()).await;
        let (name, id) = (h.name().to_owned(), h.id().clone());
        calls.push(tokio::spawn(async move {
            backend
                .start(&name, &id, StartOptions::default())
                .await
                .map(|i| i.status)
                .map_err(|e| e.code())
        }));
    }
    let outcomes: Vec<_> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let won = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| **o == Err(ErrorCode::RuntimeUnavailable))
        .count();
    assert_eq!((won, refused), (1, 3), "{outcomes:?}");
    let running = first
        .list(&ListFilter::default().statuses([Status::Running]))
        .await
        .unwrap();
    assert_eq!(running.len(), 1);
    for h in handles {
        h.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_sees_and_touches_only_its_own_sandboxes() {
    let home = home();
    let a = open(&home, "a", Quota::new()).await;
    let b = open(&home, "b", Quota::new()).await;
    let x = Sandbox::builder("x")
        .backend(a.clone())
        .config(config(&[("team", "a")]))
        .detached(true)
        .create()
        .await
        .expect("create in a");
    // The label is the backend's: not shown, not settable.
    let info = x.info().await.unwrap();
    assert!(
        !info.config.labels.contains_key(NAMESPACE_LABEL),
        "{info:?}"
    );
    assert_eq!(
        info.config.labels.get("team").map(String::as_str),
        Some("a")
    );
    let e = Sandbox::builder("y")
        .backend(a.clone())
        .config(config(&[(NAMESPACE_LABEL, "b")]))
        .define()
        .await
        .expect_err("the namespace label is refused");
    assert_eq!(e.code(), ErrorCode::InvalidConfig);

    // b sees nothing of a.
    assert!(b.list(&ListFilter::default()).await.unwrap().is_empty());
    assert_eq!(b.get("x").await.unwrap_err().code(), ErrorCode::InvalidName);
    assert_eq!(
        b.get_by_id(x.id()).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let e = Sandbox::builder("x")
        .backend(b.clone())
        .config(config(&[]))
        .connect_or_create()
        .await
        .expect_err("a's name");
    assert_eq!(e.code(), ErrorCode::InvalidName);
    // Nor acts on it, even given its id.
    let e = b
        .stop("x", x.id(), burrow::StopOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert_eq!(
        b.destroy("x", x.id()).await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    assert_eq!(x.info().await.unwrap().status, Status::Running);
    assert_eq!(a.list(&ListFilter::default()).await.unwrap().len(), 1);
    x.destroy().await.unwrap();
}

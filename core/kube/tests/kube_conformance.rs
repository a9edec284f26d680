//! The conformance kit (`tests/conformance/cases.json`) against the
//! Kubernetes backend on the real test cluster (see `tests/cluster.rs`):
//! every case in a namespace of its own.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use burrow::Backend;
use burrow_conformance::{Kit, ProcessRaces, Store};
use burrow_kube::{KubeBackend, KubeSettings};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

fn kubeconfig() -> std::path::PathBuf {
    std::env::var_os("BURROW_TEST_KUBECONFIG")
        .map(Into::into)
        .expect("BURROW_TEST_KUBECONFIG: start the test cluster (bash scripts/k8s/cluster.sh start) and point this at its kubeconfig")
}

async fn fresh_namespace() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let name = format!(
        "conf-{}",
        burrow::SandboxId::new().as_str()[3..15].to_ascii_lowercase()
    );
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    Api::<Namespace>::all(client)
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_case_passes_on_the_kubernetes_backend() {
    let image =
        std::env::var("BURROW_TEST_KUBE_IMAGE").unwrap_or_else(|_| "burrow.test/busybox:1".into());
    let report = Kit::new(|| async {
        let namespace = fresh_namespace().await?;
        let settings = KubeSettings {
            kubeconfig: Some(kubeconfig()),
            namespace: namespace.clone(),
            ..KubeSettings::from_env()?
        };
        // One backend per case (and per caller of a race, each its own
        // client of the same cluster).
        Ok(Store::new(move || {
            let settings = settings.clone();
            async move { Ok(KubeBackend::connect(settings).await? as Arc<dyn Backend>) }
        })
        .location(namespace))
    })
    .image(image)
    .concurrency(2)
    .process_spawner(caller_command)
    .run()
    .await;
    println!("{report}");
    // Races "in processes" ran each caller in an OS process of its own
    // (8 processes converging on one name among them).
    assert_eq!(report.process_races, ProcessRaces::Spawned);
    report.assert_all_passed();
}

/// The caller program (this crate's `burrow-kube-conformance-caller`) on
/// the case's namespace.
fn caller_command(caller: &burrow_conformance::Caller<'_>) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_burrow-kube-conformance-caller"));
    c.arg(caller.location().expect("the namespace is the location"));
    c
}

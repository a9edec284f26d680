#![allow(clippy::unwrap_used)]
//! The first connects of a fresh cluster: the `Sandbox` resource definition
//! is installed by whichever caller comes first, and exists a moment before
//! the API server serves it. Every caller's `connect` returns only once
//! records can be written. This binary deletes the definition (and with it
//! every record on the cluster), so it lives apart from the other cluster
//! tests: cargo runs test binaries one at a time.

mod common;

use std::time::Duration;

use burrow::{Backend, CreateRequest, SandboxConfig, Status};
use burrow_kube::{KubeBackend, KubeSettings};
use common::{client, kubeconfig};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

async fn delete_definition(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "sandboxes.burrow.dev";
    let _ = crds.delete(name, &DeleteParams::default()).await;
    for _ in 0..600 {
        if crds.get_opt(name).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the Sandbox resource definition was not deleted in 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_first_connect_can_write_records_at_once() {
    let client = client().await;
    let namespace = format!(
        "crd-{}",
        burrow::SandboxId::new().as_str()[3..13].to_ascii_lowercase()
    );
    let ns: Api<Namespace> = Api::all(client.clone());
    let object: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}
    }))
    .unwrap();
    ns.create(&PostParams::default(), &object).await.unwrap();
    for round in 0..3 {
        delete_definition(&client).await;
        let callers = (0..4).map(|i| {
            let namespace = namespace.clone();
            tokio::spawn(async move {
                let settings = KubeSettings {
                    kubeconfig: Some(kubeconfig()),
                    namespace,
                    ..KubeSettings::from_env().unwrap()
                };
                let b = KubeBackend::connect(settings).await.unwrap();
                let name = format!("r{round}-c{i}");
                let info = b
                    .create(CreateRequest::new(
                        &name,
                        SandboxConfig::new("burrow.test/busybox:1"),
                    ))
                    .await
                    .unwrap();
                assert_eq!(info.status, Status::Created);
                assert_eq!(b.get(&name).await.unwrap().id, info.id);
            })
        });
        for caller in futures_util::future::join_all(callers).await {
            caller.unwrap();
        }
    }
    let _ = ns.delete(&namespace, &DeleteParams::default()).await;
}

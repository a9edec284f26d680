//! What the cluster tests share: the test cluster's kubeconfig and a client
//! on it.
#![allow(clippy::unwrap_used, dead_code)]

/// `BURROW_TEST_KUBECONFIG`, the kubeconfig of scripts/k8s/cluster.sh.
pub fn kubeconfig() -> std::path::PathBuf {
    std::env::var_os("BURROW_TEST_KUBECONFIG")
        .map(Into::into)
        .expect("BURROW_TEST_KUBECONFIG: start the test cluster (bash scripts/k8s/cluster.sh start) and point this at its kubeconfig")
}

/// A client of the test cluster.
pub async fn client() -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The image of the tests' sandboxes (busybox, imported into the cluster).
pub fn image() -> String {
    std::env::var("BURROW_TEST_KUBE_IMAGE").unwrap_or_else(|_| "burrow.test/busybox:1".into())
}

/// A backend on a namespace of its own (created here).
pub async fn backend(prefix: &str) -> (std::sync::Arc<burrow_kube::KubeBackend>, String) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let namespace = format!(
        "{prefix}-{}",
        burrow::SandboxId::new().as_str()[3..13].to_ascii_lowercase()
    );
    let ns: Api<Namespace> = Api::all(client().await);
    let object: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}
    }))
    .unwrap();
    ns.create(&PostParams::default(), &object).await.unwrap();
    (connect(&namespace).await, namespace)
}

/// Another backend on `namespace`, as another process has.
pub async fn connect(namespace: &str) -> std::sync::Arc<burrow_kube::KubeBackend> {
    let settings = burrow_kube::KubeSettings {
        kubeconfig: Some(kubeconfig()),
        namespace: namespace.to_owned(),
        ..burrow_kube::KubeSettings::from_env().unwrap()
    };
    burrow_kube::KubeBackend::connect(settings).await.unwrap()
}

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

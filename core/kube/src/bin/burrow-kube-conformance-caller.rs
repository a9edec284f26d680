//! A caller of the conformance kit's races in processes, over the
//! Kubernetes backend: `burrow-kube-conformance-caller NAMESPACE` (the
//! kubeconfig is `$BURROW_TEST_KUBECONFIG`, else the usual sources). Each caller is its own OS process with its
//! own client of the cluster, as separate hosts would be.

use std::sync::Arc;

fn main() -> std::process::ExitCode {
    let namespace = std::env::args().nth(1).unwrap_or_default();
    burrow_conformance::caller::main(|| async move {
        let settings = burrow_kube::KubeSettings {
            kubeconfig: std::env::var_os("BURROW_TEST_KUBECONFIG").map(Into::into),
            namespace,
            ..burrow_kube::KubeSettings::from_env()?
        };
        Ok(burrow_kube::KubeBackend::connect(settings).await? as Arc<dyn burrow::Backend>)
    })
}

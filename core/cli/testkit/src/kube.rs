//! The test cluster of `scripts/k8s/cluster.sh` (started by
//! `scripts/test.sh` around the tests): its kubeconfig, kubectl, images
//! imported into its containerd, and namespaces of a test's own.

use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

pub fn kubeconfig() -> String {
    std::env::var("BURROW_TEST_KUBECONFIG").expect(
        "BURROW_TEST_KUBECONFIG: start the test cluster (bash scripts/k8s/cluster.sh start) and point this at its kubeconfig",
    )
}

pub fn kubectl(args: &[&str]) -> Output {
    let bin = std::env::var("BURROW_K8S_BIN")
        .expect("BURROW_K8S_BIN: the cluster's binaries (bash scripts/k8s/cluster.sh env)");
    Command::new(format!("{bin}/kubectl"))
        .env("KUBECONFIG", kubeconfig())
        .args(args)
        .output()
        .unwrap()
}

/// A namespace of its own, deleted (without waiting) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Namespace {
        let name = format!(
            "{prefix}-{}",
            burrow::SandboxId::new().as_str()[3..13].to_ascii_lowercase()
        );
        let out = kubectl(&["create", "namespace", &name]);
        assert!(out.status.success(), "{out:?}");
        Namespace(name)
    }

    /// The names of the objects of `kind` in the namespace.
    pub fn objects(&self, kind: &str) -> Vec<String> {
        self.list(&["get", kind, "-n", &self.0, "-o", "name"])
    }

    /// Those of them that carry the label `label`.
    pub fn objects_labelled(&self, kind: &str, label: &str) -> Vec<String> {
        self.list(&["get", kind, "-n", &self.0, "-l", label, "-o", "name"])
    }

    fn list(&self, args: &[&str]) -> Vec<String> {
        let out = kubectl(args);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// The cluster's binaries (kubectl, ctr, ...).
pub fn k8s_bin(name: &str) -> String {
    let bin = std::env::var("BURROW_K8S_BIN")
        .expect("BURROW_K8S_BIN: the cluster's binaries (bash scripts/k8s/cluster.sh env)");
    format!("{bin}/{name}")
}

/// Imports an OCI layout tar into the cluster's containerd (its `k8s.io`
/// namespace, as `CONTAINERD_ADDRESS` of `cluster.sh env` names it), once
/// per tar and test process.
pub fn import_image(tar: &std::path::Path) {
    static DONE: OnceLock<Mutex<Vec<std::path::PathBuf>>> = OnceLock::new();
    let done = DONE.get_or_init(Mutex::default);
    let mut done = done.lock().unwrap();
    if done.iter().any(|t| t == tar) {
        return;
    }
    let out = Command::new(k8s_bin("ctr"))
        .args([
            "-n",
            "k8s.io",
            "images",
            "import",
            "--platform",
            "linux/amd64",
        ])
        .arg(tar)
        .output()
        .expect("running ctr");
    assert!(
        out.status.success(),
        "ctr images import {}: {}",
        tar.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    done.push(tar.to_path_buf());
}

/// The API server's `https://127.0.0.1:PORT` of the test kubeconfig.
pub fn api_server() -> String {
    let out = kubectl(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

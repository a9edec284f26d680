//! The OCI runtimes' own runs, the anchors the benches measure burrow
//! against: bundles over the busybox rootfs, and containers kept running
//! for `exec`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A runc bundle over a read-only copy of the rootfs, running `args`.
pub fn runc_bundle(dir: &Path, rootfs: &Path, args: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let status = Command::new("runc")
        .args(["spec", "--rootless"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success());
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    spec["root"]["path"] = rootfs.to_string_lossy().into_owned().into();
    spec["root"]["readonly"] = true.into();
    spec["process"]["terminal"] = false.into();
    spec["process"]["args"] = args.iter().map(|a| serde_json::Value::from(*a)).collect();
    // Keep within this host's hard limits (no CAP_SYS_RESOURCE here).
    spec["process"]["rlimits"] = serde_json::json!([]);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&spec).unwrap(),
    )
    .unwrap();
}

/// A command of `runtime` (a binary name or path) with its state under
/// `root`; crun gets the driver's private cgroup view, runsc the driver's
/// flags (writes kept, no network).
pub fn runtime_command(runtime: &str, root: &Path) -> Command {
    let mut cmd = Command::new(runtime);
    if runtime.ends_with("runsc") {
        cmd.args(["--overlay2=none", "--network=none"]);
    }
    if runtime == "crun" {
        use std::os::unix::process::CommandExt;
        // SAFETY: the driver's own hook for crun: raw syscalls only.
        unsafe {
            cmd.pre_exec(burrow::internal::driver::container::crun_private_cgroup_view);
        }
    }
    cmd.arg("--root").arg(root);
    cmd
}

/// A container of `runtime` (runc or crun) running `sleep` over the
/// busybox rootfs, for `exec`; deleted when dropped.
pub struct Running {
    runtime: &'static str,
    root: PathBuf,
    id: String,
}

impl Running {
    /// Starts one under `dir` (its bundle and the runtime's state).
    pub fn start(runtime: &'static str, dir: &Path, rootfs: &Path) -> Running {
        let bundle = dir.join(format!("{runtime}-bundle"));
        runc_bundle(&bundle, rootfs, &["sleep", "3600"]);
        let root = dir.join(format!("{runtime}-state"));
        let id = format!("bench-{runtime}-{}", std::process::id());
        let status = runtime_command(runtime, &root)
            .args(["run", "-d", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(status.success(), "{runtime} run -d failed");
        Running { runtime, root, id }
    }

    /// `runtime exec` of `args` in the container.
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut cmd = runtime_command(self.runtime, &self.root);
        cmd.arg("exec").arg(&self.id).args(args);
        cmd
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = runtime_command(self.runtime, &self.root)
            .args(["delete", "-f", &self.id])
            .stderr(Stdio::null())
            .status();
    }
}

/// How long `runtime run` of `bundle` takes, `iters` times (each run a
/// container of its own, its process's exit awaited). `runtime` is a
/// binary name or path; runsc gets the driver's flags.
pub fn run_times(
    runtime: &str,
    bundle: &Path,
    root: &Path,
    iters: usize,
) -> Vec<std::time::Duration> {
    let mut samples = Vec::new();
    for i in 0..iters {
        let id = format!("bench-run-{i}");
        let mut cmd = runtime_command(runtime, root);
        let t = std::time::Instant::now();
        let status = cmd
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(&id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .status()
            .unwrap();
        samples.push(t.elapsed());
        assert!(status.success(), "{runtime} run failed");
    }
    samples
}

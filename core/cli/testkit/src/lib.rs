//! Shared setup of the CLI's end-to-end tests and benches: real supervisor
//! processes, the real static guest agent, real runc containers over a
//! busybox root filesystem, and a fresh burrow home (real SQLite file) per
//! test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    missing_debug_implementations
)]

pub mod dns;
pub mod gateway;
pub mod kube;
pub mod mcp;
pub mod runtimes;
pub mod serve;
pub mod tls;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use burrow::{Backend, LocalBackend, SandboxBuilder};
/// The environment shared with the other end-to-end suites.
pub use burrow_test_support::{
    agent_bin, burrow_bin, busybox_rootfs, helm_bin, mcp_client_python, mcp_image, probe,
    processes_with, registry, schemathesis_bin, workspace_root,
};

static ENV: Once = Once::new();

/// Points the library at the test binaries. Called before any thread of the
/// test touches the environment.
pub fn init_env() {
    ENV.call_once(|| {
        let agent = agent_bin();
        // SAFETY (edition 2021 API, documented hazard): set once, guarded by
        // `Once`, before any sandbox is created in this process.
        std::env::set_var("BURROW_BIN", burrow_bin());
        std::env::set_var("BURROW_AGENT_BIN", agent);
        let _ = tracing_subscriber_init();
    });
}

fn tracing_subscriber_init() -> Option<()> {
    None
}

/// A fresh burrow home (short path: unix socket paths live under it).
pub struct TestHome {
    pub dir: tempfile::TempDir,
    pub backend: Arc<LocalBackend>,
}

impl TestHome {
    pub async fn new() -> TestHome {
        init_env();
        let dir = tempfile::Builder::new()
            .prefix("bt")
            .tempdir_in("/tmp")
            .expect("temp home");
        let backend = Arc::new(
            LocalBackend::open_at(dir.path())
                .await
                .expect("open backend"),
        );
        TestHome { dir, backend }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Installs the test image as the named image `name` of this home
    /// (what a `burrow serve` tenant may use: not a host directory).
    pub fn name_image(&self, name: &str) {
        let named = self.path().join("images/named");
        std::fs::create_dir_all(&named).expect("images/named");
        std::os::unix::fs::symlink(busybox_rootfs(), named.join(name)).expect("named image");
    }

    pub fn dyn_backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    /// A builder for `name` on this home with the busybox image.
    pub fn builder(&self, name: &str) -> SandboxBuilder {
        burrow::Sandbox::builder(name)
            .image(busybox_rootfs().to_string_lossy().into_owned())
            .backend(self.dyn_backend())
    }

    /// Waits until a sandbox named `name` exists and is Running; returns
    /// its handle.
    pub async fn running_handle(&self, name: &str) -> burrow::SandboxHandle {
        let handle = loop {
            if let Ok(h) = burrow::SandboxHandle::get_in(self.dyn_backend(), name).await {
                break h;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        handle
            .wait_for_status(&[burrow::Status::Running])
            .await
            .expect("sandbox running");
        handle
    }

    /// A `burrow` CLI command bound to this home.
    /// [`TestHome::cli`] as a tokio command.
    pub fn cli_async(&self) -> tokio::process::Command {
        tokio::process::Command::from(self.cli())
    }

    pub fn cli(&self) -> Command {
        let mut c = Command::new(burrow_bin());
        c.env("BURROW_HOME", self.path())
            .env("BURROW_BIN", burrow_bin())
            .env("BURROW_AGENT_BIN", agent_bin())
            .stdin(Stdio::null());
        c
    }
}

impl Drop for TestHome {
    fn drop(&mut self) {
        // Stop every supervisor of this home so no test leaks runtimes (the
        // agent sees its channel close and the container goes with it).
        kill_supervisors_of(self.dir.path());
        kill_vms_of(self.dir.path());
        if std::thread::panicking() {
            dump_logs(self.dir.path());
        }
        burrow_test_support::remove_rootless_home(self.dir.path());
    }
}

/// Prints every sandbox log of `home` (kept for a failing test).
pub fn dump_logs(home: &Path) {
    let Ok(entries) = std::fs::read_dir(home.join("sandboxes")) else {
        return;
    };
    for e in entries.flatten() {
        for log in ["supervisor.log", "guest.log"] {
            let p = e.path().join("logs").join(log);
            if let Ok(text) = std::fs::read_to_string(&p) {
                eprintln!("----- {} -----\n{text}", p.display());
            }
        }
        if let Ok(text) = std::fs::read_to_string(e.path().join("runtime/runtime.log")) {
            eprintln!("----- runtime.log -----\n{text}");
        }
    }
}

/// SIGKILLs every supervisor process whose command line names `home`.
pub fn kill_supervisors_of(home: &Path) {
    let needle = home.to_string_lossy().into_owned();
    for pid in supervisors_of(&needle) {
        // SAFETY: kill(2) on a pid we just read from /proc.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// Cuts `file` to half its length (a damaged saved VM state).
pub fn truncate_half(file: &Path) {
    let len = std::fs::metadata(file).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}

/// QEMU processes running a guest of `home` (or building a template in
/// it).
pub fn vms_of(home: &Path) -> Vec<u32> {
    let needle = home.to_string_lossy().into_owned();
    processes_with(|args| {
        args.first().is_some_and(|a| a.contains("qemu-system"))
            && args.iter().any(|a| a.contains(&needle))
    })
}

/// SIGKILLs every QEMU process running a guest of `home` (a VM normally
/// powers itself off when its supervisor goes; this bounds a broken one).
pub fn kill_vms_of(home: &Path) {
    for pid in vms_of(home) {
        // SAFETY: kill(2) on a pid we just read from /proc.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// The driver the suites run against: the local backend's host default
/// (`$BURROW_DRIVER`: `container` or `vm`), so the same tests cover both.
pub fn driver() -> burrow::DriverKind {
    burrow::LocalConfig::from_env()
        .expect("BURROW_DRIVER must be container or vm")
        .default_driver
}

/// The OCI runtime of the suites' container sandboxes: the local backend's
/// host default (`$BURROW_RUNTIME`), so the same tests cover runc and runsc.
pub fn runtime() -> burrow::OciRuntime {
    burrow::LocalConfig::from_env()
        .expect("BURROW_RUNTIME must be runc, crun or runsc")
        .default_runtime
}

/// Which limits the suites' driver enforces here, for the user the tests
/// run as (rootless without a delegated cgroup: none of a container's).
pub fn enforceable() -> burrow::internal::driver::Enforceable {
    burrow::internal::driver::for_kind(driver(), runtime()).enforceable()
}

/// Whether the tests run as an unprivileged user.
pub fn is_rootless() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() != 0 }
}

/// Whether the suites run against the VM driver.
pub fn is_vm() -> bool {
    driver() == burrow::DriverKind::Vm
}

/// The host pid whose death is the guest's crash: the container's init
/// (`runtime/pid`, written by the OCI runtime) or the VM's QEMU process
/// (`runtime/qemu.json`, recorded by the VM driver).
pub fn guest_pid(home: &Path, id: &burrow::SandboxId) -> i32 {
    let runtime = home.join("sandboxes").join(id.as_str()).join("runtime");
    if let Ok(qemu) = std::fs::read(runtime.join("qemu.json")) {
        let v: serde_json::Value = serde_json::from_slice(&qemu).unwrap();
        v["pid"].as_i64().unwrap() as i32
    } else {
        std::fs::read_to_string(runtime.join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Pids of live supervisor processes for `home`.
pub fn supervisors_of(home: &str) -> Vec<u32> {
    processes_with(|args| args.iter().any(|a| a == "__supervise") && args.iter().any(|a| a == home))
}

/// A container sandbox's overlay upper directory, as the host may read
/// and change it: in the sandbox directory, or (a layer on a disk of its
/// own, mounted in its supervisor's mount namespace) through that
/// supervisor's view of the filesystem.
pub fn upper_dir(home: &Path, id: &burrow::SandboxId) -> PathBuf {
    let dir = home.join("sandboxes").join(id.as_str());
    if !dir.join("layer.ext4").exists() {
        return dir.join("upper");
    }
    let supervisor = processes_with(|args| {
        args.iter().any(|a| a == "__supervise") && args.iter().any(|a| a == id.as_str())
    });
    let pid = supervisor
        .first()
        .unwrap_or_else(|| panic!("no supervisor of {id} to see its layer disk through"));
    let inside = dir.join("layer/upper");
    Path::new(&format!("/proc/{pid}/root")).join(inside.strip_prefix("/").unwrap())
}

/// Whether `pid` has finished exiting (reaped, or a zombie). A killed
/// process's cmdline empties while it is still exiting, before its state
/// changes, so [`processes_with`] stops listing it a moment too early.
pub fn has_exited(pid: u32) -> bool {
    let Ok(raw) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = raw
        .rfind(')')
        .and_then(|i| raw[i + 1..].split_whitespace().next())
        .unwrap_or("");
    matches!(state, "Z" | "X")
}

/// Polls `f` until it returns true or `limit` passes.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// A `helm` command (see [`helm_bin`]) with its cache, configuration and
/// data under the temporary directory, not the user's.
pub fn helm_command() -> Command {
    let dir = std::env::temp_dir().join("burrow-helm-test");
    let mut c = Command::new(helm_bin());
    c.env("HELM_CACHE_HOME", dir.join("cache"))
        .env("HELM_CONFIG_HOME", dir.join("config"))
        .env("HELM_DATA_HOME", dir.join("data"));
    c
}

/// Runs `script` with `sh -c` in `sb`; asserts it exits 0; its stdout.
pub async fn sh_ok(sb: &burrow::Sandbox, script: &str) -> String {
    let out = sb.exec(["sh", "-c", script]).await.expect("exec");
    assert_eq!(
        out.status.code,
        Some(0),
        "{script}: {}{}",
        out.stdout_str(),
        out.stderr_str()
    );
    out.stdout_str()
}

/// Starts a process in `sb` that counts in guest memory (`/tmp` is a tmpfs
/// in a VM) ten times a second, detached from the exec that starts it:
/// what a restored or forked guest must go on with. Returns once the
/// first count is written (a loaded host may take a while to run it).
pub async fn start_counter(sb: &burrow::Sandbox) {
    sh_ok(
        sb,
        // Each value is written aside and renamed into place: a reader
        // never sees the file truncated.
        "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; \
         mv /tmp/count.new /tmp/count; sleep 0.1; done' </dev/null >/dev/null 2>&1 &",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while counted(sb).await.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the counter never wrote its first count"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The counter of [`start_counter`] (None: no count file).
pub async fn counted(sb: &burrow::Sandbox) -> Option<u64> {
    let out = sb.exec(["cat", "/tmp/count"]).await.expect("exec");
    out.stdout_str().trim().parse().ok()
}

/// The value of field `name` (`Seccomp:`, `NoNewPrivs:`) of a
/// `/proc/PID/status` text, trimmed; panics, showing the text, without it.
pub fn status_field(status: &str, name: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("no {name} line: {status}"))
}

/// Fills `sb`'s writable layer past its disk limit of `limit_mb` and
/// checks what a disk limit promises: the guest's writes stop at the limit
/// (`ENOSPC`: dd fails, one more MiB has no room, `df` shows none left),
/// the host's file holds no more than the limit and `metrics` shows the
/// use, and the sandbox goes on answering, its space back once the file
/// goes.
pub async fn fill_past_disk_limit(sb: &burrow::Sandbox, limit_mb: u64) {
    let sh = |script: &'static str| async move { sb.exec(["sh", "-c", script]).await.unwrap() };
    let fill = sh("dd if=/dev/zero of=/fill bs=1M count=200 2>/dev/null; echo $?; sync").await;
    assert_ne!(
        fill.stdout_str().trim(),
        "0",
        "dd wrote 200 MiB into {limit_mb} MiB"
    );
    let number = |script: &'static str| async move {
        let out = sh(script).await;
        out.stdout_str().trim().parse::<u64>().unwrap()
    };
    let size = number("stat -c %s /fill").await;
    assert!(size < limit_mb << 20, "the guest wrote {size} bytes");
    let more = sh("dd if=/dev/zero of=/more bs=1M count=1 2>/dev/null; echo $?").await;
    assert_ne!(more.stdout_str().trim(), "0", "one more MiB had room");
    let avail = number("df -k / | tail -1 | awk '{print $4}'").await;
    assert!(avail < 1024, "{avail} KiB still free");
    let m = sb.metrics().await.unwrap();
    assert_eq!(m.disk_limit_bytes, Some(limit_mb << 20));
    let used = m.disk_bytes.unwrap();
    assert!(
        (limit_mb << 19..=limit_mb << 20).contains(&used),
        "the host's file holds {used} bytes"
    );
    let freed = sh("rm -f /fill /more && echo x > /again && cat /again").await;
    assert_eq!(freed.stdout_str(), "x\n");
}

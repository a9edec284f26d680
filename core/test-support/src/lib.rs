//! The shared environment of burrow's end-to-end tests (the conformance
//! kit's, the binding core's, the relay's): the static guest agent
//! (`$BURROW_AGENT_BIN`, else built into `target/agent`), the busybox root
//! filesystem of `target/test-images/busybox` (built by
//! `scripts/make-demo-rootfs.sh`), the `burrow` binary of this target
//! directory, which hosts the supervisor (`$BURROW_BIN`, else
//! `target/debug/burrow`: build it with `cargo build -p burrow-cli`),
//! burrow homes that kill what still runs in them when dropped, and the
//! handshake with burrow's fault points ([`fault::FaultWindow`]).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Once, OnceLock};

pub mod fault;
pub mod pg;
pub mod probe;
pub mod registry;
pub mod stats;

/// The root of the workspace (of this checkout).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn lock_file(path: &Path) -> std::fs::File {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("lock dir");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .expect("lock file");
    f.lock().expect("lock");
    f
}

/// The static guest agent (built once per workspace, under a lock shared
/// with the other suites, into its own target directory).
pub fn agent_bin() -> PathBuf {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("BURROW_AGENT_BIN").filter(|p| !p.is_empty()) {
                return PathBuf::from(p);
            }
            let root = workspace_root();
            let target = root.join("target/agent");
            let _guard = lock_file(&target.join(".build.lock"));
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .current_dir(&root)
                .args(["build", "-q", "-p", "burrow-agent", "--release"])
                .args(["--target", "x86_64-unknown-linux-musl", "--target-dir"])
                .arg(&target)
                .status()
                .expect("running cargo to build the guest agent");
            assert!(
                status.success(),
                "building the static guest agent failed (is the x86_64-unknown-linux-musl target installed?)"
            );
            target.join("x86_64-unknown-linux-musl/release/burrow-agent")
        })
        .clone()
}

/// The busybox root filesystem (built once per workspace).
pub fn busybox_rootfs() -> PathBuf {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS
        .get_or_init(|| {
            let root = workspace_root();
            let dir = root.join("target/test-images/busybox");
            // Built already (checked before the lock, which a test run as
            // an unprivileged user over root's build could not take).
            if dir.join(".complete").exists() {
                return dir;
            }
            let _guard = lock_file(&root.join("target/test-images/.lock"));
            if dir.join(".complete").exists() {
                return dir;
            }
            let status = Command::new("bash")
                .arg(root.join("scripts/make-demo-rootfs.sh"))
                .arg(&dir)
                .status()
                .expect("running scripts/make-demo-rootfs.sh");
            assert!(
                status.success(),
                "building the busybox rootfs failed (is busybox-static installed?)"
            );
            std::fs::write(dir.join(".complete"), b"").expect("marker");
            dir
        })
        .clone()
}

/// The image of the MCP example (`examples/mcp`): a busybox root
/// filesystem with this machine's Node.js and the example's MCP server and
/// client (the official SDK), built by `examples/mcp/build-image.sh` once
/// per content into `target/mcp/<key>`, under a lock shared with the other
/// suites (or `$BURROW_MCP_IMAGE`, as `cargo xtask` sets it). Holds `rootfs/` (the local backend's image), `mcp.tar` (an OCI
/// layout for the cluster's containerd) and `ref` (its name).
pub fn mcp_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            tool_from_script(
                Some("BURROW_MCP_IMAGE"),
                "examples/mcp/build-image.sh",
                "target/mcp/.lock",
                "are node and npm installed?",
            )
        })
        .clone()
}

/// helm: `$BURROW_HELM`, else built from the Go module proxy by
/// `scripts/build-helm.sh` (once per version, under a lock shared with the
/// other suites).
pub fn helm_bin() -> PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        tool_from_script(
            Some("BURROW_HELM"),
            "scripts/build-helm.sh",
            "target/helm/.lock",
            "is Go installed?",
        )
    })
    .clone()
}

/// The `schemathesis` command (the OpenAPI fuzzer): `$BURROW_SCHEMATHESIS`,
/// else the virtualenv of `scripts/schemathesis.sh` (made on first use,
/// from PyPI, under `target/schemathesis`).
/// The python of a virtualenv with the official MCP SDK (PyPI `mcp`), from
/// `scripts/mcp-client.sh` (made once per version).
pub fn mcp_client_python() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // Made already (checked before the lock, which a test run as an
        // unprivileged user over root's build could not take). The version
        // is scripts/mcp-client.sh's.
        let made = workspace_root().join("target/mcp-client/2.3.0");
        if made.join(".complete").exists() {
            return made.join("bin/python");
        }
        tool_from_script(
            Some("BURROW_MCP_PYTHON"),
            "scripts/mcp-client.sh",
            "target/mcp-client/.lock",
            "python3 -m venv and PyPI are needed",
        )
    })
    .clone()
}

pub fn schemathesis_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        tool_from_script(
            Some("BURROW_SCHEMATHESIS"),
            "scripts/schemathesis.sh",
            "target/schemathesis/.lock",
            "python3 -m venv and PyPI are needed",
        )
    })
    .clone()
}

/// `$var` if set, else the path a script of the workspace prints on its
/// last line (run once at a time, under `lock`).
fn tool_from_script(var: Option<&str>, script: &str, lock: &str, hint: &str) -> PathBuf {
    if let Some(p) = var.and_then(std::env::var_os).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    let _guard = lock_file(&root.join(lock));
    let out = Command::new("bash")
        .arg(root.join(script))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(out.status.success(), "{script} failed ({hint})");
    let path = String::from_utf8(out.stdout).expect("utf-8");
    PathBuf::from(path.lines().last().expect("the tool's path").trim())
}

/// The `burrow` binary that hosts the supervisor: `$BURROW_BIN`, else the
/// one of this target directory (`target/debug/burrow` beside `deps/`).
pub fn burrow_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("BURROW_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("burrow"))
        .expect("target directory");
    assert!(
        bin.is_file(),
        "{} is missing: build the CLI first (cargo build -p burrow-cli) or set BURROW_BIN",
        bin.display()
    );
    bin
}

static ENV: Once = Once::new();

/// Points the library (and the caller processes, which inherit it) at the
/// test binaries, once, before any sandbox is created.
pub fn init_env() {
    ENV.call_once(|| {
        let (agent, burrow) = (agent_bin(), burrow_bin());
        // SAFETY (edition 2021 API, documented hazard): set once, guarded
        // by `Once`, before this process creates any sandbox.
        std::env::set_var("BURROW_BIN", burrow);
        std::env::set_var("BURROW_AGENT_BIN", agent);
    });
}

/// A fresh burrow home; on drop, every supervisor still running for it is
/// killed (so no case leaks a runtime) and the directory removed.
#[derive(Debug)]
pub struct Home {
    dir: tempfile::TempDir,
}

impl Drop for Home {
    fn drop(&mut self) {
        let needle = self.dir.path().to_string_lossy().into_owned();
        for pid in
            processes_with(|args| args.iter().any(|a| a == "__supervise") && args.contains(&needle))
        {
            // SAFETY: kill(2) on a pid just read from /proc.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        remove_rootless_home(self.dir.path());
    }
}

/// As an unprivileged user, removes a burrow home whose sandboxes left
/// files of the user's subordinate ids (which only the supervisor program,
/// in the user's namespace, can remove: `burrow __remove`); the home's
/// `TempDir` then has nothing left to remove. Nothing to do as root.
pub fn remove_rootless_home(dir: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 || std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    let _ = Command::new(burrow_bin())
        .arg("__remove")
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status();
}

/// Pids of processes whose argument vector satisfies `pred`.
pub fn processes_with(pred: impl Fn(&[String]) -> bool) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if pred(&args) {
            out.push(pid);
        }
    }
    out
}

/// The supervisor, guest and runtime logs of every sandbox of `home` (what
/// explains a failed case).
pub fn logs_of(home: &Path) -> String {
    let mut out = String::new();
    let Ok(entries) = std::fs::read_dir(home.join("sandboxes")) else {
        return out;
    };
    for e in entries.flatten() {
        for log in [
            "logs/supervisor.log",
            "logs/guest.log",
            "runtime/runtime.log",
        ] {
            let p = e.path().join(log);
            if let Ok(text) = std::fs::read_to_string(&p) {
                let tail: String = text
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push_str(&format!(
                    "----- {} (last 40 lines) -----\n{tail}\n",
                    p.display()
                ));
            }
        }
    }
    out
}

/// A new, empty directory for a burrow home (short path: unix socket paths
/// live under it). Dropping the [`Home`] made of it kills what still runs
/// there.
pub fn new_home_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("bc").tempdir_in("/tmp")
}

impl Home {
    /// Guards `dir` (see [`Home`]).
    pub fn new(dir: tempfile::TempDir) -> Home {
        Home { dir }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The store's diagnostics: the logs of every sandbox of the home at `path`.
pub fn diagnostics_of(path: &Path) -> impl Fn() -> String + Send + Sync + 'static {
    let path = path.to_owned();
    move || logs_of(&path)
}

//! Invoking the OCI runtime binary (runc, crun, runsc).
//!
//! Short commands (`kill`, `pause`, `delete`, ...) run under a timeout with
//! their output captured into the error. The long-lived `run` process and the
//! network helper are spawned from one dedicated thread that never exits:
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child ends, so
//! forking from a tokio worker or blocking-pool thread could kill the guest
//! whenever the pool retires a thread.

use std::ffi::OsStr;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::model::OciRuntime;

/// Bound on one short runtime command.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Environment variables that make runc/crun pass extra descriptors or
/// sockets into the container; the supervisor's own must never leak in.
const SCRUBBED_ENV: &[&str] = &[
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
];

/// One runtime binary bound to a private state directory.
#[derive(Debug, Clone)]
pub(super) struct Runtime {
    pub kind: OciRuntime,
    pub binary: PathBuf,
    /// `--root`: runtime state private to this sandbox.
    pub root: PathBuf,
    /// `--log`: the runtime's own messages (JSON lines).
    pub log: PathBuf,
}

impl Runtime {
    /// Finds the binary: `BURROW_RUNC`/`BURROW_CRUN`/`BURROW_RUNSC`, else `PATH`.
    pub(super) fn locate(kind: OciRuntime, root: PathBuf, log: PathBuf) -> Result<Runtime> {
        let var = format!("BURROW_{}", kind.binary().to_ascii_uppercase());
        let unavailable = |reason: String| Error::Runtime {
            runtime: kind.binary().into(),
            reason,
        };
        let binary = match std::env::var_os(&var).filter(|v| !v.is_empty()) {
            Some(p) => {
                let p = PathBuf::from(p);
                if !is_executable(&p) {
                    return Err(unavailable(format!(
                        "{var} points to {}, which is not an executable file",
                        p.display()
                    )));
                }
                p
            }
            None => find_on_path(kind.binary()).ok_or_else(|| {
                unavailable(format!(
                    "`{}` was not found on PATH (install it, or set {var} to its path){}",
                    kind.binary(),
                    if kind == OciRuntime::Runsc {
                        "; runsc comes with gVisor"
                    } else {
                        ""
                    }
                ))
            })?,
        };
        Ok(Runtime {
            kind,
            binary,
            root,
            log,
        })
    }

    fn name(&self) -> &'static str {
        self.kind.binary()
    }

    /// The binary with its global options.
    pub(super) fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.binary);
        c.arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&self.log)
            .arg("--log-format")
            .arg("json");
        for v in SCRUBBED_ENV {
            c.env_remove(v);
        }
        if super::rootless::in_user_namespace() {
            // Root of the supervisor's user namespace, not of the host: no
            // cgroups of its own (runc would take a namespace's root for
            // the host's; crun refuses a cgroup v1 hybrid host outright),
            // and with runsc, no host root at all.
            match self.kind {
                OciRuntime::Runc => {
                    c.arg("--rootless=true");
                }
                OciRuntime::Runsc => {
                    c.arg("--rootless").arg("--ignore-cgroups");
                }
                OciRuntime::Crun => {
                    c.arg("--cgroup-manager=disabled");
                }
            }
        }
        if self.kind == OciRuntime::Runsc {
            // Root filesystem writes reach the bundle's rootfs, as with
            // runc (runsc's default keeps them in the sandbox's memory and
            // drops them at exit), and the spec's seccomp profile is
            // applied inside gVisor (runsc ignores it by default).
            c.arg("--overlay2=none").arg("--oci-seccomp");
        }
        if self.kind == OciRuntime::Crun {
            // SAFETY: the closure only makes raw syscalls (no allocation, no
            // locks), which is all that is allowed between fork and exec.
            unsafe {
                c.pre_exec(crun_private_cgroup_view);
            }
        }
        c
    }

    /// Runs `args` to completion under `timeout`; a non-zero exit is an
    /// error carrying the runtime's output.
    pub(super) async fn invoke<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        timeout: Duration,
    ) -> Result<Output> {
        let mut c = self.command();
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut c = tokio::process::Command::from(c);
        c.kill_on_drop(true);
        let what = describe(args);
        let output = match tokio::time::timeout(timeout, c.output()).await {
            Err(_) => {
                return Err(self.error(format!(
                    "`{} {what}` did not finish within {timeout:?}",
                    self.name()
                )))
            }
            Ok(Err(e)) => {
                return Err(self.error(format!("running `{} {what}`: {e}", self.binary.display())))
            }
            Ok(Ok(o)) => o,
        };
        if output.status.success() {
            Ok(output)
        } else {
            Err(self.failure(&what, &output))
        }
    }

    /// An error from a failed command: its stderr, else the runtime log.
    pub(super) fn failure(&self, what: &str, output: &Output) -> Error {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut detail = stderr.trim().to_owned();
        if detail.is_empty() {
            detail = self.log_errors();
        }
        self.error(format!(
            "`{} {what}` failed ({}): {detail}",
            self.name(),
            output.status
        ))
    }

    pub(super) fn error(&self, reason: String) -> Error {
        Error::Runtime {
            runtime: self.name().into(),
            reason,
        }
    }

    /// The error and warning messages of the runtime log (last few).
    pub(super) fn log_errors(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let msgs: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                let level = v["level"].as_str().unwrap_or_default();
                matches!(level, "error" | "fatal" | "warning")
                    .then(|| v["msg"].as_str().unwrap_or(l).to_owned())
            })
            .collect();
        let tail = &msgs[msgs.len().saturating_sub(4)..];
        if tail.is_empty() {
            "no error output".into()
        } else {
            tail.join("; ")
        }
    }

    /// `delete --force <id>`; a missing container is fine.
    pub(super) async fn delete_force(&self, id: &str) -> Result<()> {
        self.invoke(&["delete", "--force", id], COMMAND_TIMEOUT)
            .await
            .map(drop)
    }

    /// Blocking `delete --force` for `Drop`, bounded like [`Self::invoke`].
    pub(super) fn delete_force_blocking(&self, id: &str) {
        let mut c = self.command();
        c.args(["delete", "--force", id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let Ok(mut child) = c.spawn() else { return };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn describe<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `name` in the directories of `PATH` (plus the sbin directories, which a
/// non-login root shell may lack).
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// crun refuses a hybrid cgroup layout, so it runs in a private mount
/// namespace of its own without the cgroup2 mount: unmounted, or, where it
/// cannot be (an unprivileged user's namespace, whose inherited mounts are
/// locked), covered by an empty read-only tmpfs. A `pre_exec` hook (raw
/// syscalls only); public for benchmarks that run crun beside burrow.
pub fn crun_private_cgroup_view() -> io::Result<()> {
    super::rootfs::enter_mount_namespace(0, libc::MS_PRIVATE)?;
    // SAFETY: plain syscalls on constant, NUL-terminated strings.
    unsafe {
        // Not mounted (pure v1 or v2 hosts): nothing to hide.
        let unified = c"/sys/fs/cgroup/unified";
        if libc::umount2(unified.as_ptr(), libc::MNT_DETACH) != 0 {
            let mut fs: libc::statfs = std::mem::zeroed();
            if libc::statfs(unified.as_ptr(), &mut fs) == 0
                && fs.f_type == libc::CGROUP2_SUPER_MAGIC
                && libc::mount(
                    c"none".as_ptr(),
                    unified.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=4k".as_ptr().cast(),
                ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Makes `cmd` inherit exactly `keep` beyond stdio and, with
/// `die_with_parent`, die with this process.
pub(crate) fn bind_to_parent(
    cmd: &mut std::process::Command,
    keep: Vec<RawFd>,
    die_with_parent: bool,
) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only makes raw syscalls on integers (no
    // allocation, no locks), as required between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if die_with_parent
                && libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl took effect.
            if die_with_parent && libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            for &fd in &keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `cmd.spawn()` on the process-lifetime spawner thread, inside the
/// caller's tokio runtime.
pub(crate) async fn spawn_long_lived(
    cmd: tokio::process::Command,
) -> io::Result<tokio::process::Child> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("burrow-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: children's
                // PDEATHSIG is tied to this thread.
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let tx = tx
        .as_ref()
        .ok_or_else(|| io::Error::other("could not start the burrow-spawner thread"))?;
    let handle = tokio::runtime::Handle::current();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let mut cmd = cmd;
    let job: Job = Box::new(move || {
        let _guard = handle.enter();
        let _ = done_tx.send(cmd.spawn());
    });
    tx.send(job)
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    done_rx
        .await
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

//! Spawning the supervisor process and waiting for its readiness report.

use std::io::BufRead;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use super::LocalBackend;
use crate::model::SandboxInfo;

/// Extra time past the sandbox's startup timeout before the starter gives up
/// on a supervisor that neither reported nor exited.
const REPORT_MARGIN: Duration = Duration::from_secs(5);

impl LocalBackend {
    /// Spawns the supervisor for `generation` and waits for its report.
    /// Errors are plain reasons; the caller records them.
    pub(super) async fn spawn_and_wait(
        &self,
        info: &SandboxInfo,
        generation: u64,
        detached: bool,
    ) -> Result<(), String> {
        let bin = crate::procs::burrow_bin().ok_or_else(|| {
            "the burrow binary (which hosts the sandbox supervisor) was not found: set BURROW_BIN or put burrow on PATH".to_string()
        })?;
        let logs = self.home.sandbox_dir(&info.id).join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join("supervisor.log"))
            .map_err(|e| format!("opening the supervisor log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;

        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fresh descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!(
                "creating the readiness pipe: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let write_raw = write_end.as_raw_fd();

        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("__supervise")
            .arg("--home")
            .arg(self.home.root())
            .arg("--id")
            .arg(info.id.as_str())
            .arg("--generation")
            .arg(generation.to_string())
            .arg("--runtime")
            .arg(info.config.runtime.binary())
            .arg("--ready-fd")
            .arg("3")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .kill_on_drop(false);
        if !detached {
            cmd.arg("--owner-pid").arg(std::process::id().to_string());
        }
        // SAFETY: only async-signal-safe calls (setsid, dup2, fcntl,
        // syscall) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Own session: terminal signals aimed at the application's
                // process group do not hit the supervisor directly.
                libc::setsid();
                // The one descriptor the supervisor inherits on purpose.
                if write_raw == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else if libc::dup2(write_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Whatever else the host application left inheritable (fds
                // from other libraries) is closed at exec.
                libc::syscall(
                    libc::SYS_close_range,
                    4u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        drop(write_end);
        crate::fault::point("start.after_spawn");
        let pid = child.id();
        // Dropping the handle is fine: tokio reaps the child in the background.
        drop(child);

        let limit = info.config.startup_timeout + REPORT_MARGIN;
        let reader = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let mut r = std::io::BufReader::new(std::fs::File::from(read_end));
            let _ = r.read_line(&mut line);
            line
        });
        let line = match tokio::time::timeout(limit, reader).await {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(format!("waiting for the supervisor: {e}")),
            Err(_) => {
                if let Some(pid) = pid {
                    // SAFETY: kill(2) on the process group of the supervisor
                    // we spawned (it called setsid, so pgid == pid).
                    unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
                }
                return Err(format!("the sandbox did not become ready within {limit:?}"));
            }
        };
        match serde_json::from_str::<serde_json::Value>(line.trim()) {
            Ok(v) if v["ok"] == serde_json::Value::Bool(true) => Ok(()),
            Ok(v) => Err(v["error"]
                .as_str()
                .unwrap_or("the supervisor reported an unknown error")
                .to_string()),
            Err(_) => {
                let tail = std::fs::read_to_string(logs.join("supervisor.log")).unwrap_or_default();
                let tail: String = tail
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                Err(format!(
                    "the supervisor exited without reporting readiness; its log ends with:\n{tail}"
                ))
            }
        }
    }
}

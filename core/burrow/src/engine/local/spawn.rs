//! Spawning the supervisor process and waiting for its readiness report.

use std::io::BufRead;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use super::LocalBackend;
use crate::engine::fault::Fault;
use crate::logs::LogSource;
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
        let bin = crate::engine::procs::supervisor_bin().ok_or_else(|| {
            "the burrow binary (which hosts the sandbox supervisor) was not found: set BURROW_BIN or put burrow on PATH".to_string()
        })?;
        let logs = crate::engine::logs::log_dir(&self.home.sandbox_dir(&info.id));
        std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
        // The supervisor logs into supervisor.log itself; its stdout and
        // stderr only ever carry a panic or an error from before its
        // logging was set up.
        let stderr_path = logs.join(SUPERVISOR_STDERR);
        let log = open_stderr_log(&stderr_path)
            .map_err(|e| format!("opening {}: {e}", stderr_path.display()))?;

        // The readiness pipe is the supervisor's stdout (it moves it off
        // fd 1 at once, pointing stdout at its stderr log). No `pre_exec`:
        // the spawn is a vfork-style posix_spawn, which does not copy the
        // caller's page tables (a fork of a large application took
        // milliseconds). The supervisor makes itself a session leader and
        // closes whatever else it inherited first thing.
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

        // The driver's head start runs beside the spawn; what it holds is
        // let go once the supervisor has reported.
        let head_start = {
            let driver = crate::engine::driver::for_config(&info.config);
            let (dir, images) = (self.home.sandbox_dir(&info.id), self.home.images_dir());
            let config = info.config.clone();
            tokio::task::spawn_blocking(move || driver.head_start(&dir, &images, &config))
        };

        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("__supervise")
            .arg("--home")
            .arg(self.home.root())
            .arg("--id")
            .arg(info.id.as_str())
            .arg("--generation")
            .arg(generation.to_string())
            .arg("--runtime")
            .arg(info.config.oci_runtime().binary())
            .arg("--driver")
            .arg(info.config.driver.unwrap_or_default().as_str())
            .arg("--ready-fd")
            .arg("1")
            .arg("--spawned-at")
            .arg(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_micros()
                    .to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end))
            .stderr(log)
            .kill_on_drop(false);
        if !detached {
            cmd.arg("--owner-pid").arg(std::process::id().to_string());
        }
        // The command holds the write end: dropped with it right after the
        // spawn, so a supervisor that dies unreported reads as EOF here.
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        drop(cmd);
        crate::engine::fault::point(Fault::StartAfterSpawn);
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
        let line = tokio::time::timeout(limit, reader).await;
        drop(head_start.await);
        let line = match line {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(format!("waiting for the supervisor: {e}")),
            Err(_) => {
                if let Some(pid) = pid {
                    // SAFETY: kill(2) on the process group of the supervisor
                    // we spawned (once it called setsid, pgid == pid), and on
                    // the supervisor itself (in case it never got that far).
                    unsafe {
                        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
                        libc::kill(pid as libc::pid_t, libc::SIGKILL);
                    }
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
                let mut msg = "the supervisor exited without reporting readiness".to_string();
                for file in [SUPERVISOR_STDERR, LogSource::Supervisor.file_name()] {
                    let lines = crate::engine::logs::read_tail(&logs.join(file), TAIL_LINES)
                        .unwrap_or_default();
                    if !lines.is_empty() {
                        msg.push_str(&format!("; {file} ends with:\n{}", lines.join("\n")));
                    }
                }
                Err(msg)
            }
        }
    }
}

/// The supervisor's raw stdout and stderr, beside its log.
const SUPERVISOR_STDERR: &str = "supervisor.stderr";

/// Lines of each file quoted when a supervisor dies without a report.
const TAIL_LINES: usize = 10;

/// Opens `path` for appending; a file grown past the log bound (a
/// supervisor that kept panicking) is rotated first.
fn open_stderr_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > crate::engine::logs::max_bytes_from_env()) {
        std::fs::rename(path, crate::engine::logs::rotated_path(path))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

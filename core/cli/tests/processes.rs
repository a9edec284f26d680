#![allow(clippy::unwrap_used)]
//! Cross-process tests: several `burrow` processes racing on one name, owners
//! and supervisors killed with SIGKILL at each step of a start.

use burrow_cli_testkit as common;

use std::process::{Child, Output, Stdio};
use std::time::Duration;

use burrow::internal::fault::Fault;
use burrow::{Backend, ErrorCode, ExitReason, SandboxHandle, Status};
use burrow_test_support::fault::FaultWindow;
use common::{busybox_rootfs, eventually, TestHome};

fn image() -> String {
    busybox_rootfs().to_string_lossy().into_owned()
}

fn up(home: &TestHome, name: &str) -> std::process::Command {
    let mut c = home.cli();
    c.args(["--json", "up", name, "--image", &image()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={} stderr={}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn race(home: &TestHome, name: &str, n: usize) -> Vec<Output> {
    let children: Vec<Child> = (0..n)
        .map(|_| up(home, name).spawn().expect("spawn burrow up"))
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait burrow up"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_converge_on_one_sandbox_per_round() {
    let home = TestHome::new().await;
    for round in 0..10 {
        let name = format!("conv-{round}");
        let outs = race(&home, &name, 8);
        let mut ids = Vec::new();
        for out in &outs {
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v = json_of(out);
            assert_eq!(v["status"], "running");
            ids.push(v["id"].as_str().expect("id").to_string());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "round {round}: all callers get the same id");
        let info = home.backend.get(&name).await.unwrap();
        assert_eq!(info.id.as_str(), ids[0]);
        assert_eq!(info.generation, 1, "round {round}: exactly one start");
        let all = home.backend.list(&Default::default()).await.unwrap();
        assert_eq!(all.len(), 1, "round {round}: exactly one sandbox created");
        burrow::BackendExt::destroy_by_name(&*home.backend, &name)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_start_a_stopped_sandbox_once() {
    let home = TestHome::new().await;
    let sb = home.builder("cos").detached(true).create().await.unwrap();
    for round in 0..5 {
        let before = sb.stop().await.unwrap();
        assert_eq!(before.status, Status::Stopped);
        let outs = race(&home, "cos", 8);
        for out in &outs {
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v = json_of(out);
            assert_eq!(v["id"].as_str(), Some(sb.id().as_str()));
            assert_eq!(
                v["generation"].as_u64(),
                Some(before.generation + 1),
                "round {round}: one runtime generation"
            );
        }
        let info = sb.info().await.unwrap();
        assert_eq!(info.status, Status::Running);
        assert_eq!(info.generation, before.generation + 1);
    }
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_sandbox_stops_with_its_owner_detached_survives() {
    let home = TestHome::new().await;
    let mut owner = home
        .cli()
        .args(["run", "--name", "att", &image(), "--", "sleep", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let handle = home.running_handle("att").await;
    owner.kill().unwrap(); // SIGKILL
    let _ = owner.wait();
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        handle.wait_for_status(&[Status::Stopped]),
    )
    .await;
    let info = done
        .expect("the attached sandbox stops after its owner died")
        .unwrap();
    assert_eq!(
        info.last_run.unwrap().exit_reason,
        Some(ExitReason::OwnerExited)
    );

    let out = up(&home, "det").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The creating process is gone; the detached sandbox lives on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let det = SandboxHandle::get_in(home.dyn_backend(), "det")
        .await
        .unwrap();
    assert_eq!(det.status().await.unwrap(), Status::Running);
    let sb = det.connect().await.unwrap();
    assert_eq!(
        sb.exec(["echo", "alive"]).await.unwrap().stdout_str(),
        "alive\n"
    );
    sb.destroy().await.unwrap();
}

/// Runs `burrow up` with a fault point, waits until the point is reached and
/// returns (child, pid written by the process that reached it).
async fn up_until(home: &TestHome, name: &str, fault: Fault) -> (Child, u32) {
    up_until_with(home, up(home, name), fault).await
}

/// [`up_until`] of a command of the caller's.
async fn up_until_with(
    home: &TestHome,
    mut up: std::process::Command,
    fault: Fault,
) -> (Child, u32) {
    let point = fault.as_str();
    let w = FaultWindow::new(home.path(), point);
    let child = w.arm(&mut up).spawn().unwrap();
    let reached = w.wait_open(Duration::from_secs(60)).await;
    assert!(reached, "fault point {point} was not reached");
    let pid = w.pid().expect("the pid in the marker");
    (child, pid)
}

fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a pid of a process this test started (directly or
    // through the library).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

/// After a crash: nothing stays Starting, and connect_or_start brings it back.
async fn assert_recovers(home: &TestHome, name: &str) {
    let handle = SandboxHandle::get_in(home.dyn_backend(), name)
        .await
        .unwrap();
    let settled = tokio::time::timeout(
        Duration::from_secs(30),
        handle.wait_for_status(&[Status::Crashed, Status::Stopped, Status::Running]),
    )
    .await
    .expect("no sandbox stays Starting")
    .unwrap();
    assert_ne!(settled.status, Status::Starting);
    let sb = handle
        .connect_or_start()
        .await
        .expect("connect_or_start brings it back");
    assert_eq!(sb.status().await.unwrap(), Status::Running);
    assert_eq!(
        sb.exec(["echo", "back"]).await.unwrap().stdout_str(),
        "back\n"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creator_killed_at_each_start_step() {
    let home = TestHome::new().await;
    for (i, fault) in [Fault::StartAfterClaim, Fault::StartAfterSpawn]
        .into_iter()
        .enumerate()
    {
        let point = fault.as_str();
        let name = format!("crash-creator-{i}");
        let (mut child, pid) = up_until(&home, &name, fault).await;
        assert_eq!(pid, child.id(), "the creating process reached {point}");
        sigkill(pid);
        let _ = child.wait();
        assert_recovers(&home, &name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_killed_at_each_start_step() {
    let home = TestHome::new().await;
    let faults = [
        Fault::SupervisorBeforeHandoff,
        Fault::SupervisorAfterLock,
        Fault::SupervisorAfterLaunch,
        Fault::SupervisorBeforeRunning,
    ];
    for (i, fault) in faults.into_iter().enumerate() {
        let point = fault.as_str();
        let name = format!("crash-sup-{i}");
        let (child, pid) = up_until(&home, &name, fault).await;
        assert_ne!(pid, child.id(), "the supervisor reached {point}");
        sigkill(pid);
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "{point}: the start must fail");
        let v = json_of(&out);
        assert_eq!(
            v["error"]["code"],
            ErrorCode::StartFailed.as_str(),
            "{point}"
        );
        // The start fails as soon as the pipe closes, which is a moment
        // before the supervisor has finished exiting.
        assert!(eventually(Duration::from_secs(10), || common::has_exited(pid)).await);
        let info = home.backend.get(&name).await.unwrap();
        assert_eq!(info.status, Status::Crashed, "{point}");
        assert_recovers(&home, &name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creator_and_supervisor_both_killed_mid_start() {
    let home = TestHome::new().await;
    for (i, fault) in [Fault::SupervisorAfterLock, Fault::SupervisorBeforeRunning]
        .into_iter()
        .enumerate()
    {
        let point = fault.as_str();
        let name = format!("crash-both-{i}");
        let (mut child, pid) = up_until(&home, &name, fault).await;
        sigkill(child.id());
        let _ = child.wait();
        sigkill(pid);
        // Status reads reconcile the dead owner to Crashed (once it has
        // really exited, not merely lost its cmdline while exiting).
        let ok = eventually(Duration::from_secs(10), || {
            common::has_exited(pid)
                && common::supervisors_of(&home.path().to_string_lossy()).is_empty()
        })
        .await;
        assert!(ok);
        let info = home.backend.get(&name).await.unwrap();
        assert_eq!(info.status, Status::Crashed, "{point}");
        assert_recovers(&home, &name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_lets_an_attached_sandbox_outlive_its_owner() {
    let home = TestHome::new().await;
    let mut owner = home
        .cli()
        .args([
            "run",
            "--name",
            "later-detached",
            &image(),
            "--",
            "sleep",
            "1000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let handle = home.running_handle("later-detached").await;
    assert!(!handle.info().await.unwrap().detached);
    let sb = handle.connect().await.unwrap();
    let info = sb.detach().await.unwrap();
    assert!(info.detached);
    owner.kill().unwrap();
    let _ = owner.wait();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        handle.status().await.unwrap(),
        Status::Running,
        "detached: survives its owner"
    );
    assert_eq!(sb.exec(["echo", "ok"]).await.unwrap().stdout_str(), "ok\n");
    sb.destroy().await.unwrap();
}

/// The supervisor is spawned without a `pre_exec` hook, so it detaches
/// itself: it leads its own session (the application's terminal signals
/// miss it), holds none of the descriptors the application left
/// inheritable, and its stdout (the readiness pipe while it starts) ends up
/// on its log, not on a pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_keeps_nothing_of_the_application() {
    let home = TestHome::new().await;
    // An inheritable pipe, as a careless application might hold.
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) writes two fresh descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let leaked = std::fs::read_link(format!("/proc/self/fd/{}", fds[1])).unwrap();
    let sb = home.builder("hygiene").create().await.unwrap();
    let pid = sb
        .info()
        .await
        .unwrap()
        .last_run
        .and_then(|r| r.supervisor_pid)
        .unwrap() as i32;
    // SAFETY: getsid on a pid; no memory involved.
    assert_eq!(unsafe { libc::getsid(pid) }, pid, "a session of its own");
    let held: Vec<std::path::PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    assert!(!held.contains(&leaked), "{held:?} holds {leaked:?}");
    let stdout = std::fs::read_link(format!("/proc/{pid}/fd/1")).unwrap();
    assert!(
        stdout.ends_with("supervisor.stderr"),
        "stdout is {}",
        stdout.display()
    );
    // SAFETY: closing the two descriptors opened above.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    sb.destroy().await.unwrap();
}

/// What a removed sandbox may have left on the host: its directory, its
/// supervisor socket, rootfs mount points (container driver).
fn left_of(home: &TestHome, id: &burrow::SandboxId) -> Vec<String> {
    let mut left = Vec::new();
    let dir = home.path().join("sandboxes").join(id.as_str());
    if dir.exists() {
        left.push(dir.display().to_string());
    }
    for e in std::fs::read_dir(home.path().join("run"))
        .into_iter()
        .flatten()
        .flatten()
    {
        left.push(e.path().display().to_string());
    }
    let mount_dir = std::env::var_os("BURROW_MOUNT_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/run/burrow".into());
    let prefix = format!("burrow-{}-", id.as_str().trim_start_matches("sb_")).to_ascii_lowercase();
    for e in std::fs::read_dir(mount_dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            left.push(e.path().display().to_string());
        }
    }
    left
}

/// Every `burrow` command opens the backend, which sweeps the directories
/// of removed sandboxes. One opened while another process removes a
/// sandbox whose supervisor was killed must leave the directory to that
/// remove until it has reclaimed the runtime state recorded there; the
/// remove then leaves nothing behind, the socket included. (Found by
/// soak.rs: rootfs mount points were left behind, and a `runc delete` of
/// the remove failed under the sweep.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remove_in_progress_is_not_swept_by_another_process() {
    let home = TestHome::new().await;
    let out = up(&home, "swept").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = home.backend.get("swept").await.unwrap();
    let pid = info.last_run.unwrap().supervisor_pid.unwrap();
    sigkill(pid);
    assert!(eventually(Duration::from_secs(10), || common::has_exited(pid)).await);
    assert!(
        !left_of(&home, &info.id).is_empty(),
        "the killed supervisor left its run behind"
    );
    // The remove holds after deleting the record, before reclaiming.
    let w = FaultWindow::new(home.path(), Fault::RemoveAfterDelete.as_str());
    let rm = w
        .arm(home.cli().args(["--json", "rm", "swept"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(w.wait_open(Duration::from_secs(60)).await);
    let ls = home.cli().args(["--json", "ls"]).output().unwrap();
    assert!(ls.status.success());
    assert_eq!(json_of(&ls), serde_json::json!([]));
    w.release();
    let out = rm.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(left_of(&home, &info.id), Vec::<String>::new());
}

/// A supervisor killed just after creating a rootfs mount point: the
/// directory was already recorded for teardown, so removing the sandbox
/// leaves nothing behind (found by soak.rs: it was recorded only after it
/// was created, and a kill in between left it forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_killed_after_creating_a_mount_point() {
    // Mount points are the container driver's: it runs in every suite.
    let home = TestHome::new().await;
    let mut on_container = up(&home, "mountpoint");
    on_container.env(burrow::local::ENV_DRIVER, "container");
    let (child, pid) = up_until_with(&home, on_container, Fault::SupervisorAfterMountPoint).await;
    sigkill(pid);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        json_of(&out)["error"]["code"],
        ErrorCode::StartFailed.as_str()
    );
    assert!(eventually(Duration::from_secs(10), || common::has_exited(pid)).await);
    let id = home.backend.get("mountpoint").await.unwrap().id;
    let rm = home
        .cli()
        .args(["--json", "rm", "mountpoint"])
        .output()
        .unwrap();
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stdout)
    );
    assert_eq!(left_of(&home, &id), Vec::<String>::new());
}

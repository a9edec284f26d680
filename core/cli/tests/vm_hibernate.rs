#![allow(clippy::unwrap_used)]
//! Hibernation on idle (`idle_action = hibernate`), end to end with real
//! QEMU (TCG here): an idle vm sandbox is saved whole and a demand start
//! resumes it with its processes and memory (a counter goes on counting),
//! sixteen concurrent calls converge on one restore, an explicit stop or a
//! configuration change discards the saved guest, a damaged one is
//! replaced by a fresh start, what cannot be saved is
//! stopped instead, a kill -9 of the supervisor while it saves or while it
//! restores never leaves the sandbox unstartable, and a removal takes the
//! saved guest with it.

use burrow_cli_testkit as common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use burrow::internal::driver::vm::{is_hibernated, start_record, StartKind};
use burrow::internal::fault::Fault;
use burrow::{ExitReason, IdleAction, Sandbox, SandboxInfo, Status};
use burrow_test_support::fault::FaultWindow;
use common::{busybox_rootfs, start_counter, TestHome};

const IDLE: Duration = Duration::from_secs(2);

fn sandbox_dir(home: &TestHome, info: &SandboxInfo) -> PathBuf {
    home.path().join("sandboxes").join(info.id.as_str())
}

fn start_kind(home: &TestHome, info: &SandboxInfo) -> StartKind {
    start_record(&sandbox_dir(home, info).join("runtime"))
        .expect("the driver recorded the start")
        .from
}

fn reason(info: &SandboxInfo) -> Option<ExitReason> {
    info.last_run.as_ref().and_then(|r| r.exit_reason)
}

async fn hibernating(home: &TestHome, name: &str) -> Sandbox {
    home.builder(name)
        .driver("vm")
        .idle_timeout(IDLE)
        .idle_action(IdleAction::Hibernate)
        .create()
        .await
        .unwrap()
}

async fn count(sb: &Sandbox) -> Option<u64> {
    common::counted(sb).await
}

/// Waits for the idle reclaim; returns the stopped snapshot.
async fn reclaimed(sb: &Sandbox) -> SandboxInfo {
    tokio::time::timeout(
        Duration::from_secs(60),
        sb.handle().wait_for_status(&[Status::Stopped]),
    )
    .await
    .expect("reclaimed within a minute")
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_action_is_kept_and_changed_by_modify() {
    let home = TestHome::new().await;
    let sb = home
        .builder("actions")
        .idle_timeout(Duration::from_secs(600))
        .idle_action(IdleAction::Hibernate)
        .create()
        .await
        .unwrap();
    assert_eq!(
        sb.info().await.unwrap().config.idle_action,
        IdleAction::Hibernate
    );
    let plan = sb
        .modify()
        .idle_action(IdleAction::Stop)
        .apply()
        .await
        .unwrap();
    assert_eq!(plan.info.config.idle_action, IdleAction::Stop);
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(plan.changes[0].field, "idle_action");
    assert_eq!(plan.changes[0].applies, burrow::Applies::Live);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hibernated_guest_resumes_on_demand_with_its_processes() {
    let home = TestHome::new().await;
    let sb = hibernating(&home, "sleeper").await;
    start_counter(&sb).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = count(&sb).await.unwrap();
    let uuid_before = sb
        .exec(["cat", "/proc/sys/kernel/random/uuid"])
        .await
        .unwrap()
        .stdout_str();

    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    assert!(is_hibernated(&sandbox_dir(&home, &info)));
    let generation = info.generation;

    // Sixteen calls at once wake it: one restore serves them all.
    let calls = (0..16).map(|_| {
        let sb = sb.clone();
        tokio::spawn(async move { count(&sb).await })
    });
    let mut counts = Vec::new();
    for c in calls {
        counts.push(c.await.unwrap().expect("the counter file survives"));
    }
    let after = sb.info().await.unwrap();
    assert_eq!(after.status, Status::Running);
    assert_eq!(
        after.generation,
        generation + 1,
        "exactly one new generation"
    );
    assert_eq!(start_kind(&home, &after), StartKind::Hibernation);
    // The counter went on from where it was: its memory was kept. A fresh
    // guest would have no /tmp/count at all.
    assert!(
        counts.iter().all(|&c| c >= before),
        "{counts:?} vs {before}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = count(&sb).await.unwrap();
    assert!(later > *counts.iter().max().unwrap(), "it counts on");
    // The saved guest was consumed by the restore, and its random state
    // was reseeded.
    assert!(!is_hibernated(&sandbox_dir(&home, &after)));
    let uuid_after = sb
        .exec(["cat", "/proc/sys/kernel/random/uuid"])
        .await
        .unwrap()
        .stdout_str();
    assert_ne!(uuid_after, uuid_before);

    // Hibernated again, then removed: nothing of it is left.
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    let dir = sandbox_dir(&home, &info);
    assert!(is_hibernated(&dir));
    sb.destroy().await.unwrap();
    assert!(!dir.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_guest_has_its_policy_stack_again() {
    let home = TestHome::new().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::thread::spawn(move || {
        use std::io::Write;
        for _ in 0..2 {
            let (mut conn, _) = listener.accept().unwrap();
            conn.write_all(b"hi").unwrap();
        }
    });
    let sb = home
        .builder("netsleeper")
        .driver("vm")
        .idle_timeout(IDLE)
        .idle_action(IdleAction::Hibernate)
        .network(burrow::NetworkPolicy::allow([format!("tcp:127.0.0.1:{port}")]).unwrap())
        .create()
        .await
        .unwrap();
    let fetch = format!("nc -w 5 10.0.2.2 {port} </dev/null");
    let out = sb.exec(["sh", "-c", fetch.as_str()]).await.unwrap();
    assert_eq!(out.stdout_str(), "hi", "{}", out.stderr_str());
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    // Woken by the next call: restored with a new link to a new stack,
    // which enforces the same policy.
    let out = sb.exec(["sh", "-c", fetch.as_str()]).await.unwrap();
    assert_eq!(out.stdout_str(), "hi", "{}", out.stderr_str());
    assert_eq!(
        start_kind(&home, &sb.info().await.unwrap()),
        StartKind::Hibernation
    );
    let net = sb
        .metrics()
        .await
        .unwrap()
        .network
        .expect("network counters");
    assert_eq!(net.connections, 1, "the new stack's own count: {net:?}");
    served.join().unwrap();
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_or_a_config_change_discards_the_saved_guest() {
    let home = TestHome::new().await;
    let sb = hibernating(&home, "discard").await;
    start_counter(&sb).await;
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));

    // An explicit stop of the hibernated sandbox discards its guest.
    let stopped = sb.stop().await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(reason(&stopped), Some(ExitReason::Stopped));
    assert!(!is_hibernated(&sandbox_dir(&home, &stopped)));
    let sb = sb.handle().start().await.unwrap();
    let info = sb.info().await.unwrap();
    assert_eq!(start_kind(&home, &info), StartKind::Template);
    assert_eq!(count(&sb).await, None, "a fresh guest");

    // A damaged saved guest: its restore fails, and the start is fresh.
    start_counter(&sb).await;
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    let state = sandbox_dir(&home, &info).join("vm/hibernated/state");
    common::truncate_half(&state);
    assert_eq!(count(&sb).await, None, "a fresh guest");
    let info = sb.info().await.unwrap();
    assert_eq!(start_kind(&home, &info), StartKind::Template);
    assert!(!is_hibernated(&sandbox_dir(&home, &info)));

    // A changed memory size: the saved guest cannot be restored on the
    // new machine, so the next start is fresh too.
    start_counter(&sb).await;
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    sb.modify().memory(256).apply().await.unwrap();
    let out = sb
        .exec(["sh", "-c", "test -e /tmp/count || echo fresh"])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "fresh\n");
    let info = sb.info().await.unwrap();
    assert_eq!(start_kind(&home, &info), StartKind::Template);
    assert!(!is_hibernated(&sandbox_dir(&home, &info)));
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_saved_is_stopped_instead() {
    let home = TestHome::new().await;
    let shared = tempfile::tempdir().unwrap();
    let with_share = home
        .builder("shared")
        .driver("vm")
        .idle_timeout(IDLE)
        .idle_action(IdleAction::Hibernate)
        .mount(shared.path(), "/shared", false)
        .create()
        .await
        .unwrap();
    let info = reclaimed(&with_share).await;
    assert_eq!(reason(&info), Some(ExitReason::IdleTimeout));
    assert!(!is_hibernated(&sandbox_dir(&home, &info)));
    // It starts again on demand, as any reclaimed sandbox.
    let out = with_share.exec(["echo", "back"]).await.unwrap();
    assert_eq!(out.stdout_str(), "back\n");
    with_share.destroy().await.unwrap();

    // A container cannot be saved either.
    let container = home
        .builder("container")
        .driver("container")
        .idle_timeout(IDLE)
        .idle_action(IdleAction::Hibernate)
        .create()
        .await
        .unwrap();
    let info = reclaimed(&container).await;
    assert_eq!(reason(&info), Some(ExitReason::IdleTimeout));
    let out = container.exec(["echo", "back"]).await.unwrap();
    assert_eq!(out.stdout_str(), "back\n");
    container.destroy().await.unwrap();
}

/// Waits for the process at a fault point to write its pid, and kills it.
async fn kill_at_fault(w: &FaultWindow) {
    let reached = w.wait_open(Duration::from_secs(60)).await;
    assert!(reached, "the fault point was reached");
    let pid = w.pid().expect("the pid in the marker");
    // SAFETY: kill(2) on the supervisor that announced itself at the
    // fault point.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    // Gone for good before the test goes on: a dying process still looks
    // alive to the next call's liveness check.
    let gone = common::eventually(Duration::from_secs(10), || common::has_exited(pid)).await;
    assert!(gone, "the supervisor outlived SIGKILL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_saving_or_restoring_never_leaves_it_unstartable() {
    let home = TestHome::new().await;

    // Saving: the supervisor (started by this CLI, so with the fault in
    // its environment) is killed with the state written, not published.
    let save = FaultWindow::new(home.path(), Fault::VmHibernateBeforePublish.as_str());
    let out = save
        .arm(&mut home.cli())
        .args([
            "--json",
            "up",
            "saver",
            "--driver",
            "vm",
            "--idle-timeout",
            "2s",
        ])
        .args(["--idle-action", "hibernate", "--image"])
        .arg(busybox_rootfs())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kill_at_fault(&save).await;
    let handle = burrow::SandboxHandle::get_in(home.dyn_backend(), "saver")
        .await
        .unwrap();
    // The next call finds the dead supervisor, and starts it afresh.
    let sb = handle.connect_or_start().await.unwrap();
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(start_kind(&home, &info), StartKind::Template);
    assert_eq!(sb.exec(["echo", "ok"]).await.unwrap().stdout_str(), "ok\n");
    // Only this start's QEMU is alive: the stopped one was reclaimed.
    assert_eq!(
        common::vms_of(home.path()),
        vec![common::guest_pid(home.path(), &info.id) as u32]
    );

    // Restoring: hibernate it for real, then wake it from a CLI whose
    // supervisor is killed with the state loaded, before the guest ran.
    start_counter(&sb).await;
    let info = reclaimed(&sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    let restore = FaultWindow::new(home.path(), Fault::VmHibernateLoaded.as_str());
    let waker = restore
        .arm(home.cli().args(["exec", "saver", "--", "true"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_at_fault(&restore).await;
    let _ = tokio::task::spawn_blocking(move || waker.wait_with_output())
        .await
        .unwrap();
    // The guest never ran from that state: the next start restores it, and
    // the counter goes on.
    let sb = handle.connect_or_start().await.unwrap();
    let info = sb.info().await.unwrap();
    assert_eq!(start_kind(&home, &info), StartKind::Hibernation);
    assert!(count(&sb).await.unwrap() > 0);
    assert_eq!(
        common::vms_of(home.path()),
        vec![common::guest_pid(home.path(), &info.id) as u32]
    );
    sb.destroy().await.unwrap();
}

/// A CLI call held at fault point `fault` (its supervisors inherit the
/// fault), with the window that says it is held.
struct Held {
    child: std::process::Child,
    window: FaultWindow,
}

impl Held {
    async fn spawn(home: &TestHome, fault: Fault, args: &[&str]) -> Held {
        let point = fault.as_str();
        // An earlier hold's marker and release are removed: they would
        // open it at once.
        let window = FaultWindow::new(home.path(), point);
        let child = window
            .arm(home.cli().args(args))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let open = window.wait_open(Duration::from_secs(60)).await;
        assert!(open, "{point} was reached");
        Held { child, window }
    }

    /// Lets it go on; returns its exit code and stdout.
    async fn release(self) -> (Option<i32>, String) {
        self.window.release();
        let child = self.child;
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code().is_some(), "{text} {err}");
        (out.status.code(), text)
    }
}

/// What is left in the sandbox's `vm/` of saved, claimed or discarded
/// guests.
fn saved_leftovers(home: &TestHome, info: &SandboxInfo) -> Vec<String> {
    std::fs::read_dir(sandbox_dir(home, info).join("vm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("hibernated"))
        .collect()
}

/// Waits for `sb` to hibernate; returns the generation that did.
async fn hibernated(sb: &Sandbox) -> u64 {
    let info = reclaimed(sb).await;
    assert_eq!(reason(&info), Some(ExitReason::Hibernated));
    info.generation
}

/// A CLI stop of `contested`, held after it read the row, before its discard.
async fn held_stop(home: &TestHome) -> Held {
    Held::spawn(
        home,
        Fault::StopBeforeDiscard,
        &["--json", "stop", "contested"],
    )
    .await
}

/// A stop of a hibernated sandbox races a start for its saved guest: the
/// stop discards it by a rename, the start claims it by another. Exactly
/// one gets it. Both orders are held open across processes: a start that
/// claims it first resumes the guest and the stop then stops that run; a
/// stop that discards it first leaves the start a fresh guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_and_a_start_racing_for_a_saved_guest_never_both_get_it() {
    let home = TestHome::new().await;
    let sb = hibernating(&home, "contested").await;
    start_counter(&sb).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = count(&sb).await.unwrap();
    let generation = hibernated(&sb).await;

    // The start first: the stop has read the row (hibernated) and is held
    // before its discard; a demand start resumes the saved guest.
    let stop = held_stop(&home).await;
    let resumed = count(&sb).await.expect("the saved guest was resumed");
    assert!(resumed >= before, "{resumed} vs {before}");
    let running = sb.info().await.unwrap();
    assert_eq!(running.generation, generation + 1);
    assert_eq!(start_kind(&home, &running), StartKind::Hibernation);
    let (code, out) = stop.release().await;
    assert_eq!(code, Some(0), "{out}");
    // The stop found the guest taken, and stopped the run that took it.
    let stopped = sb.info().await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(stopped.generation, generation + 1);
    assert_eq!(reason(&stopped), Some(ExitReason::Stopped));
    assert!(saved_leftovers(&home, &stopped).is_empty());

    // The stop first: hibernate again; the stop is held before its
    // discard, then a start is held before its claim (its run begun);
    // the stop discards, and the start finds nothing to resume.
    let sb = sb.handle().start().await.unwrap();
    start_counter(&sb).await;
    let generation = hibernated(&sb).await;
    let info = sb.info().await.unwrap();
    let stop = held_stop(&home).await;
    let start = Held::spawn(
        &home,
        Fault::VmHibernateBeforeClaim,
        &[
            "exec",
            "contested",
            "--",
            "sh",
            "-c",
            "test -e /tmp/count || echo fresh",
        ],
    )
    .await;
    let (code, out) = stop.release().await;
    assert_eq!(code, Some(0), "{out}");
    assert!(saved_leftovers(&home, &info).is_empty(), "discarded");
    let (code, out) = start.release().await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "fresh\n", "the start found no saved guest");
    // The exec that started it owns the run (the sandbox is attached) and
    // has exited, so the run ends: by its owner's exit, or by the idle
    // reclaim if that comes first on a loaded machine. Either way it is
    // the run the start began (its runtime directory, with the start
    // record, goes with it: `fresh` above is what shows no guest resumed).
    let info = reclaimed(&sb).await;
    assert!(
        matches!(
            reason(&info),
            Some(ExitReason::OwnerExited | ExitReason::Hibernated)
        ),
        "{info:?}"
    );
    assert_eq!(info.generation, generation + 1);
    sb.destroy().await.unwrap();
}

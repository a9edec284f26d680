#![allow(clippy::unwrap_used)]
//! Forks of running vm sandboxes, end to end with real QEMU (TCG here):
//! every copy goes on from the parent's running state (a counter process
//! keeps counting in each, a file synced before the fork is there) with an
//! identity of its own (id, name, hostname, machine id, random state), the
//! copies and the parent diverge from there, and bad forks (a bad count or
//! name, a taken name, a stopped parent, a parent whose calls are in
//! flight) change nothing.

use burrow_cli_testkit as common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use burrow::internal::driver::vm::{start_record, StartKind};
use burrow::{Backend, ErrorCode, ForkOptions, Sandbox, SandboxInfo, Status};
use common::{start_counter, TestHome};

fn sandbox_dir(home: &TestHome, info: &SandboxInfo) -> PathBuf {
    home.path().join("sandboxes").join(info.id.as_str())
}

async fn count(sb: &Sandbox) -> u64 {
    common::counted(sb)
        .await
        .unwrap_or_else(|| panic!("no count in {}", sb.name()))
}

async fn output(sb: &Sandbox, argv: &[&str]) -> String {
    let out = sb.exec(argv.iter().copied()).await.unwrap();
    assert_eq!(out.status.code, Some(0), "{argv:?}: {}", out.stderr_str());
    out.stdout_str().trim().to_owned()
}

/// What makes a guest itself.
async fn identity(sb: &Sandbox) -> (String, String, String) {
    (
        output(sb, &["hostname"]).await,
        output(sb, &["cat", "/etc/machine-id"]).await,
        output(sb, &["cat", "/proc/sys/kernel/random/uuid"]).await,
    )
}

async fn running_vm(home: &TestHome, name: &str) -> Sandbox {
    home.builder(name).driver("vm").create().await.unwrap()
}

/// A running vm whose counter counts and whose `/root/state` holds `state`,
/// synced; and the count a moment later.
async fn counting_vm(home: &TestHome, name: &str, state: &str) -> (Sandbox, u64) {
    let sb = running_vm(home, name).await;
    start_counter(&sb).await;
    let script = format!("echo {state} > /root/state && sync /root/state");
    output(&sb, &["sh", "-c", &script]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count = count(&sb).await;
    (sb, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_copy_goes_on_from_the_running_parent_as_itself() {
    let home = TestHome::new().await;
    // Written and synced on the writable disk before the fork.
    let (parent, before) = counting_vm(&home, "parent", "before").await;

    let copies = parent.fork(&ForkOptions::count(3)).await.unwrap();
    let names: Vec<&str> = copies.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["parent-fork-1", "parent-fork-2", "parent-fork-3"]);

    let mut ids = HashSet::from([parent.id().clone()]);
    let mut identities = HashSet::from([identity(&parent).await]);
    for copy in &copies {
        let info = copy.info().await.unwrap();
        assert_eq!(info.status, Status::Running, "{}", copy.name());
        assert_eq!(info.config.image, parent.info().await.unwrap().config.image);
        let record = start_record(&sandbox_dir(&home, &info).join("runtime")).unwrap();
        assert_eq!(record.from, StartKind::Hibernation, "restored, not booted");
        assert!(ids.insert(info.id.clone()), "a fresh id");
        let id = identity(copy).await;
        assert_eq!(id.0, copy.name(), "its own hostname");
        assert!(identities.insert(id), "its own identity and random state");
        // The parent's files, and its processes counting on.
        assert_eq!(output(copy, &["cat", "/root/state"]).await, "before");
        let first = count(copy).await;
        assert!(first >= before, "{first} < {before}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(count(copy).await > first, "{} counts on", copy.name());
    }
    let machine_ids: HashSet<_> = identities.iter().map(|i| i.1.clone()).collect();
    assert_eq!(machine_ids.len(), 4);
    let parent_now = count(&parent).await;
    assert!(parent_now > before, "the parent went on");

    // From here each goes its own way.
    output(&copies[0], &["sh", "-c", "echo mine > /root/state"]).await;
    assert_eq!(output(&parent, &["cat", "/root/state"]).await, "before");
    assert_eq!(output(&copies[1], &["cat", "/root/state"]).await, "before");

    // A copy of a copy, named.
    let grand = copies[2]
        .fork(&ForkOptions::named(["grandchild"]))
        .await
        .unwrap();
    assert_eq!(grand.len(), 1);
    assert_eq!(output(&grand[0], &["hostname"]).await, "grandchild");
    assert!(count(&grand[0]).await >= before);

    for sb in copies.iter().chain(&grand).chain([&parent]) {
        sb.destroy().await.unwrap();
    }
    let left = std::fs::read_dir(home.path().join("sandboxes"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "nothing of the sandboxes is left");
    let scratch = std::fs::read_dir(home.path().join("snapshots").join("tmp"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(scratch, 0, "the saved guest was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_forks_change_nothing() {
    let home = TestHome::new().await;
    let parent = running_vm(&home, "p").await;
    let taken = home.builder("taken").driver("vm").create().await.unwrap();
    let listed = || async { home.backend.list(&Default::default()).await.unwrap().len() };
    let before = listed().await;

    for (opts, code) in [
        (ForkOptions::count(0), ErrorCode::InvalidArgument),
        (
            ForkOptions::count(burrow::MAX_FORK_COUNT + 1),
            ErrorCode::InvalidArgument,
        ),
        (ForkOptions::named(["a", "a"]), ErrorCode::InvalidArgument),
        (ForkOptions::named(["a/b/c"]), ErrorCode::InvalidName),
        // The second name is taken: the first copy is not kept either.
        (
            ForkOptions::named(["free", "taken"]),
            ErrorCode::AlreadyExists,
        ),
    ] {
        let err = parent.fork(&opts).await.unwrap_err();
        assert_eq!(err.code(), code, "{opts:?}: {err}");
        assert_eq!(listed().await, before, "{opts:?} left a sandbox");
    }
    assert!(home.backend.get("free").await.is_err());
    assert_eq!(taken.info().await.unwrap().status, Status::Running);

    // A parent with a call in flight cannot be saved: refused, and both
    // the call and the parent go on.
    let long = {
        let parent = parent.clone();
        tokio::spawn(async move { parent.exec(["sleep", "3"]).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let err = parent.fork(&ForkOptions::count(1)).await.unwrap_err();
    let burrow::Error::Guest { failure, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(failure.code(), burrow_protocol::GuestErrorCode::Unavailable);
    assert_eq!(long.await.unwrap().unwrap().status.code, Some(0));
    assert_eq!(listed().await, before);
    assert_eq!(output(&parent, &["echo", "alive"]).await, "alive");

    parent.stop().await.unwrap();
    let err = parent.fork(&ForkOptions::count(1)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert_eq!(listed().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_snapshot_restores_into_new_sandboxes_with_their_processes() {
    use burrow::{DriverKind, SnapshotKind, SnapshotOptions};
    let home = TestHome::new().await;
    let (src, before) = counting_vm(&home, "src", "saved").await;
    let snap = src
        .snapshot_with("whole", &SnapshotOptions::full())
        .await
        .unwrap();
    assert_eq!(snap.kind, SnapshotKind::Full);
    assert_eq!(snap.image, "snapshot:whole");
    assert_eq!(snap.driver, DriverKind::Vm);
    assert!(
        snap.digest.starts_with("sha256:") && snap.size > 0,
        "{snap:?}"
    );
    assert_eq!(snap.base_image, src.info().await.unwrap().config.image);
    // The source goes on; what it writes now is not in the snapshot.
    output(&src, &["sh", "-c", "echo later > /root/state"]).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(count(&src).await > before, "the source counts on");

    let mut identities = HashSet::from([identity(&src).await]);
    let mut restored = Vec::new();
    for name in ["from-a", "from-b"] {
        let sb = home
            .builder(name)
            .driver("vm")
            .image("snapshot:whole")
            .create()
            .await
            .unwrap();
        let info = sb.info().await.unwrap();
        assert_eq!(info.config.image, "snapshot:whole");
        let record = start_record(&sandbox_dir(&home, &info).join("runtime")).unwrap();
        assert_eq!(record.from, StartKind::Hibernation, "restored, not booted");
        let id = identity(&sb).await;
        assert_eq!(id.0, name);
        assert!(identities.insert(id), "its own identity");
        assert_eq!(output(&sb, &["cat", "/root/state"]).await, "saved");
        let first = count(&sb).await;
        assert!(first >= before, "{first} < {before}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(count(&sb).await > first, "{name} counts on");
        restored.push(sb);
    }

    // Kept while used; a container cannot restore it; a restart boots the
    // sandbox from its own disk.
    let err = home.backend.remove_snapshot("whole").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SnapshotInUse);
    let err = home
        .builder("from-c")
        .image("snapshot:whole")
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    assert!(home.backend.get("from-c").await.is_err());
    restored[0].restart().await.unwrap();
    assert_eq!(output(&restored[0], &["cat", "/root/state"]).await, "saved");

    // Bad: a taken name, a container's memory.
    let err = src
        .snapshot_with("whole", &SnapshotOptions::full())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    let container = home.builder("ctr").create().await.unwrap();
    let err = container
        .snapshot_with("ctr-whole", &SnapshotOptions::full())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unsupported);

    // Through the CLI.
    let out = home
        .cli()
        .args(["--json", "snapshot", "create", "src", "whole2", "--full"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let taken: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(taken["kind"], "full");
    let out = home
        .cli()
        .args(["snapshot", "rm", "whole2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for sb in restored.iter().chain([&src, &container]) {
        sb.destroy().await.unwrap();
    }
    home.backend.remove_snapshot("whole").await.unwrap();
    let left = std::fs::read_dir(home.path().join("snapshots/full"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "the saved guest went with the snapshot");
}

/// A fork killed while the parent's agent is suspended for the save (the
/// window held open by the `snapshot.suspended` fault point in the
/// parent's supervisor): no copy is made, the parent goes on once the save
/// it was in finishes, and the next fork works and removes the killed
/// one's saved guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_killed_mid_save_leaves_no_copy_and_the_parent_going_on() {
    use burrow::internal::fault::Fault;
    use burrow_test_support::fault::FaultWindow;
    use std::process::Stdio;

    let home = TestHome::new().await;
    // The parent's supervisor (started by this CLI) carries the fault point.
    let w = FaultWindow::new(home.path(), Fault::SnapshotSuspended.as_str());
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let out = w
        .arm(&mut home.cli())
        .args(["up", "held", "--driver", "vm", "--image", &image])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parent = burrow::SandboxHandle::get_in(home.dyn_backend(), "held")
        .await
        .unwrap()
        .sandbox()
        .await
        .unwrap();
    start_counter(&parent).await;

    let mut fork = home
        .cli()
        .args(["fork", "held", "--count", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        w.wait_open(Duration::from_secs(120)).await,
        "never suspended"
    );
    let _ = fork.kill();
    let _ = fork.wait();
    w.release();

    // The parent goes on: its counter counts, it answers.
    let first = count(&parent).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(count(&parent).await > first, "the parent counts on");
    let listed = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 1, "no copy: {listed:?}");

    // The next fork works, and sweeps the killed one's saved guest.
    let copies = parent.fork(&ForkOptions::count(1)).await.unwrap();
    assert!(count(&copies[0]).await >= first);
    let scratch: Vec<_> = std::fs::read_dir(home.path().join("snapshots/tmp"))
        .unwrap()
        .collect();
    assert!(scratch.is_empty(), "{scratch:?}");
    for sb in copies.iter().chain([&parent]) {
        sb.destroy().await.unwrap();
    }
}

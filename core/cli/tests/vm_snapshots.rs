#![allow(clippy::unwrap_used)]
//! Filesystem snapshots of running vm sandboxes, with real QEMU (TCG here):
//! the guest's agent writes its writable layer (the overlay upper on its
//! own disk, out of every path's reach once the overlay is the root) as
//! the same OCI layer a container's is, so a container and a vm both run
//! the snapshot. A stopped vm's is read by a guest booted with its disk
//! alone (a layer boot), which leaves the disk as it was.

use burrow_cli_testkit as common;

use burrow::{Backend, DriverKind, SnapshotKind};
use common::{sh_ok, TestHome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_vms_files_are_a_snapshot_either_driver_runs() {
    let home = TestHome::new().await;
    let vm = home.builder("vm-src").driver("vm").create().await.unwrap();
    sh_ok(
        &vm,
        "mkdir -p /work/d && echo from-the-vm > /work/d/f && ln -s d/f /work/l \
         && chown 1000:1000 /work/d/f && rm /bin/false && sync",
    )
    .await;
    let snap = vm.snapshot("vm-files").await.unwrap();
    assert_eq!(snap.kind, SnapshotKind::Filesystem);
    assert_eq!(snap.driver, DriverKind::Vm);
    assert!(snap.size > 0 && snap.digest.starts_with("sha256:"));
    // The source runs on.
    assert_eq!(sh_ok(&vm, "cat /work/d/f").await, "from-the-vm\n");

    // Without root an image is unpacked without `chown` (every file this
    // user's, root's in the sandbox): the copy's owner is root there.
    let expected = if common::is_rootless() {
        "from-the-vm\n0\ngone\n"
    } else {
        "from-the-vm\n1000\ngone\n"
    };
    let script = "cat /work/l; stat -c %u /work/d/f; test -e /bin/false || echo gone";
    let container = home
        .builder("ctr-from-vm")
        .image("snapshot:vm-files")
        .create()
        .await
        .unwrap();
    assert_eq!(sh_ok(&container, script).await, expected);
    let again = home
        .builder("vm-from-vm")
        .driver("vm")
        .image("snapshot:vm-files")
        .create()
        .await
        .unwrap();
    assert_eq!(sh_ok(&again, script).await, expected);

    // Written last, then the sandbox stops: the stopped one's layer has it.
    sh_ok(&vm, "echo after > /work/after && rm -rf /work/d && sync").await;
    let handle = vm.handle();
    vm.stop().await.unwrap();
    let disk = home
        .path()
        .join("sandboxes")
        .join(handle.id().as_str())
        .join("vm/data.ext4");
    let before = std::fs::read(&disk).unwrap();
    let stopped = handle.snapshot("vm-stopped").await.unwrap();
    assert_eq!(stopped.kind, SnapshotKind::Filesystem);
    assert!(stopped.size > 0);
    assert_ne!(stopped.digest, snap.digest);
    assert!(
        std::fs::read(&disk).unwrap() == before,
        "the layer boot changed the disk"
    );
    assert_eq!(handle.status().await.unwrap(), burrow::Status::Stopped);
    let after_script =
        "cat /work/after; test -e /work/d || echo no-d; test -e /bin/false || echo gone";
    let from_stopped = home
        .builder("ctr-from-stopped")
        .image("snapshot:vm-stopped")
        .create()
        .await
        .unwrap();
    assert_eq!(
        sh_ok(&from_stopped, after_script).await,
        "after\nno-d\ngone\n"
    );

    // A vm sandbox never started has an empty layer.
    let fresh = home
        .builder("vm-never-started")
        .driver("vm")
        .define()
        .await
        .unwrap();
    let empty = fresh.snapshot("vm-empty").await.unwrap();
    assert_eq!(empty.size, 1024, "an empty tar: its two end blocks");

    for sb in [&container, &again, &from_stopped] {
        sb.destroy().await.unwrap();
    }
    fresh.destroy().await.unwrap();
    handle.destroy().await.unwrap();
    for name in ["vm-files", "vm-stopped", "vm-empty"] {
        home.backend.remove_snapshot(name).await.unwrap();
    }
}

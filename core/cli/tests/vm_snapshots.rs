#![allow(clippy::unwrap_used)]
//! Filesystem snapshots of running vm sandboxes, with real QEMU (TCG here):
//! the guest's agent writes its writable layer (the overlay upper on its
//! own disk, out of every path's reach once the overlay is the root) as
//! the same OCI layer a container's is, so a container and a vm both run
//! the snapshot; a stopped vm's is `unsupported` (its disk is the guest's).

use burrow_cli_testkit as common;

use burrow::{Backend, DriverKind, ErrorCode, SnapshotKind};
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

    let expected = "from-the-vm\n1000\ngone\n";
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

    let handle = vm.handle();
    vm.stop().await.unwrap();
    let err = handle.snapshot("stopped").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unsupported);
    for sb in [&container, &again] {
        sb.destroy().await.unwrap();
    }
    handle.destroy().await.unwrap();
    home.backend.remove_snapshot("vm-files").await.unwrap();
}

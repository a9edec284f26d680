//! Issue 57, host-side walks of trees a guest can change: the writable
//! layer of a container sandbox was written by path (`lstat`, then `open`
//! of the same path), so a guest that swapped a file for a symlink between
//! the two had the host read whatever the link named into the snapshot,
//! where the tenant reads it back. A rootless sandbox is copied as it runs
//! (no delegated freezer); a root one is frozen, and the swap below is
//! made from the host in the same window all the same. The walk now goes
//! by descriptors (`openat(O_NOFOLLOW)` from its directory's descriptor).

use burrow::internal::fault::{Fault, LAYER_BAIT};
use burrow::SandboxHandle;
use burrow_cli_testkit::{busybox_rootfs, sh_ok, upper_dir, TestHome};
use burrow_test_support::fault::FaultWindow;

/// The `layer.walk_listed` fault point holds the walk with the bait looked
/// at (a regular file) and not yet opened; the bait then becomes a symlink
/// to a file of the host's. The snapshot holds no byte of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_swapped_for_a_symlink_mid_snapshot_is_never_followed() {
    let home = TestHome::new().await;
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("host-secret");
    std::fs::write(&secret, b"HOST-SECRET").unwrap();
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let create = home
        .cli()
        .args(["create", "--name", "walked", "--driver", "container"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stderr)
    );
    // The supervisor the start spawns inherits the armed fault point.
    let w = FaultWindow::new(home.path(), Fault::LayerWalkListed.as_str());
    let start = w
        .arm(&mut home.cli())
        .args(["start", "walked"])
        .output()
        .unwrap();
    assert!(
        start.status.success(),
        "{}",
        String::from_utf8_lossy(&start.stderr)
    );
    let sb = SandboxHandle::get_in(home.dyn_backend(), "walked")
        .await
        .unwrap()
        .connect()
        .await
        .unwrap();
    sh_ok(&sb, &format!("echo guest > /{LAYER_BAIT}")).await;

    let snapshot = tokio::spawn({
        let sb = sb.clone();
        async move { sb.snapshot("walked").await }
    });
    assert!(
        w.wait_open(std::time::Duration::from_secs(60)).await,
        "the walk never reached the bait"
    );
    // The guest's move, in the window.
    let bait = upper_dir(home.path(), sb.id()).join(LAYER_BAIT);
    std::fs::remove_file(&bait).unwrap();
    std::os::unix::fs::symlink(&secret, &bait).unwrap();
    w.release();
    snapshot.await.unwrap().unwrap();

    let copy = home
        .builder("from-walked")
        .driver("container")
        .image("snapshot:walked")
        .create()
        .await
        .unwrap();
    let seen = sh_ok(
        &copy,
        &format!("cat /{LAYER_BAIT} 2>/dev/null; echo; ls -la / | grep -c {LAYER_BAIT} || true"),
    )
    .await;
    assert!(
        !seen.contains("HOST-SECRET"),
        "the host's file was copied: {seen}"
    );
    copy.destroy().await.unwrap();
    sb.destroy().await.unwrap();
}

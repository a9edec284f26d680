//! Issue 56, item 5: `copy_out` unpacked the guest's archive with its
//! permissions, so a guest file of mode 6755 copied out by root became a
//! setuid-root program on the host, and the guest's absolute and escaping
//! symlinks (and its fifos) were recreated there. Now nothing the guest
//! sends lands setuid, setgid, sticky or world-writable; symlinks that are
//! absolute or lead out of the copy, fifos (and hard links and devices)
//! are left out and named by an `invalid_argument` error, and everything
//! else still arrives with its content and mode.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use burrow::ErrorCode;
use burrow_cli_testkit::{sh_ok, TestHome};

/// The guest's tree: every kind of entry the review planted, and plain
/// files beside them.
const PLANT: &str = "set -e
mkdir -p /out/t/sub
cd /out/t
echo suid > suid && chmod 6755 suid
echo open > open && chmod 0777 open
mkdir wdir && chmod 0777 wdir
mkdir sticky && chmod 1777 sticky
echo plain > plain && chmod 0644 plain
echo exe > exe && chmod 0755 exe
echo inner > sub/inner && chmod 0600 sub/inner
ln -s /etc/passwd abs
ln -s ../../.. up
ln -s ../../../etc/passwd sub/up
ln -s plain rel
ln -s ../plain sub/rel
mkfifo fifo
ln plain hard
mkdir -p /out/clean && echo c > /out/clean/c && chmod 2755 /out/clean";

/// Every path under `root`, `root` included.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    if fs::symlink_metadata(root).unwrap().is_dir() {
        for e in fs::read_dir(root).unwrap() {
            out.extend(walk(&e.unwrap().path()));
        }
    }
    out
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Nothing under `root` is setuid, setgid, sticky, world-writable, a fifo
/// or a device, and every symlink is relative and resolves inside `root`.
fn assert_harmless(root: &Path) {
    let real_root = fs::canonicalize(root).unwrap();
    for p in walk(root) {
        let m = fs::symlink_metadata(&p).unwrap();
        let t = m.file_type();
        assert!(
            !t.is_fifo() && !t.is_block_device() && !t.is_char_device() && !t.is_socket(),
            "{} is a special file",
            p.display()
        );
        if t.is_symlink() {
            let target = fs::read_link(&p).unwrap();
            assert!(
                target.is_relative(),
                "{} -> {}",
                p.display(),
                target.display()
            );
            let resolved = fs::canonicalize(&p).unwrap();
            assert!(
                resolved.starts_with(&real_root),
                "{} resolves to {}",
                p.display(),
                resolved.display()
            );
        } else {
            assert_eq!(
                m.mode() & 0o7002,
                0,
                "{} has mode {:o}",
                p.display(),
                m.mode() & 0o7777
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_files_never_land_setuid_escaping_or_special() {
    let home = TestHome::new().await;
    let sb = home.builder("cp").create().await.unwrap();
    sh_ok(&sb, PLANT).await;
    // The guest really holds what the review planted.
    let planted = sh_ok(
        &sb,
        "stat -c %a /out/t/suid && test -p /out/t/fifo && echo fifo",
    )
    .await;
    assert_eq!(planted, "6755\nfifo\n");

    let dst = tempfile::tempdir().unwrap();
    let err = sb.fs().copy_out("/out/t", dst.path()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let t = dst.path().join("t");
    assert_harmless(dst.path());
    // Left out: the fifo and the absolute and escaping symlinks.
    for gone in ["fifo", "abs", "up", "sub/up"] {
        assert!(
            fs::symlink_metadata(t.join(gone)).is_err(),
            "{gone} was created"
        );
    }
    // Copied, with their content; modes kept but for the dangerous bits.
    for (name, content, want) in [
        ("suid", "suid\n", 0o755),
        ("open", "open\n", 0o775),
        ("plain", "plain\n", 0o644),
        ("exe", "exe\n", 0o755),
        ("sub/inner", "inner\n", 0o600),
        // The agent archives a hard link as a copy of its own.
        ("hard", "plain\n", 0o644),
    ] {
        let p = t.join(name);
        assert_eq!(fs::read_to_string(&p).unwrap(), content, "{name}");
        assert_eq!(mode(&p), want, "{name}");
        assert_eq!(fs::metadata(&p).unwrap().nlink(), 1, "{name}");
    }
    assert_eq!(mode(&t.join("wdir")), 0o775);
    assert_eq!(mode(&t.join("sticky")), 0o775);
    // Relative symlinks inside the copy are kept.
    assert_eq!(fs::read_to_string(t.join("rel")).unwrap(), "plain\n");
    assert_eq!(fs::read_to_string(t.join("sub/rel")).unwrap(), "plain\n");

    // A file alone, and a tree with nothing to refuse, copy without error.
    let single = tempfile::tempdir().unwrap();
    sb.fs()
        .copy_out("/out/t/suid", single.path())
        .await
        .unwrap();
    assert_eq!(mode(&single.path().join("suid")), 0o755);
    assert_harmless(single.path());
    sb.fs().copy_out("/out/clean", single.path()).await.unwrap();
    assert_eq!(mode(&single.path().join("clean")), 0o755);
    assert_eq!(
        fs::read_to_string(single.path().join("clean/c")).unwrap(),
        "c\n"
    );
    assert_harmless(single.path());

    // A lone symlink to a host path is refused, nothing created.
    let lone = tempfile::tempdir().unwrap();
    let err = sb
        .fs()
        .copy_out("/out/t/abs", lone.path())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert_eq!(fs::read_dir(lone.path()).unwrap().count(), 0);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_out_never_writes_through_a_symlink_at_the_destination() {
    let home = TestHome::new().await;
    let sb = home.builder("cp2").create().await.unwrap();
    sh_ok(
        &sb,
        "mkdir -p /out/t/via && echo evil > /out/t/via/victim && echo new > /out/t/f",
    )
    .await;
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("victim"), b"keep").unwrap();
    let dst = tempfile::tempdir().unwrap();
    fs::create_dir(dst.path().join("t")).unwrap();
    // Already at the destination: a link out, where the guest has a
    // directory, and a link to a host file where the guest has a file.
    std::os::unix::fs::symlink(outside.path(), dst.path().join("t/via")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("victim"), dst.path().join("t/f")).unwrap();
    let err = sb.fs().copy_out("/out/t", dst.path()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert_eq!(
        fs::read(outside.path().join("victim")).unwrap(),
        b"keep",
        "written through a symlink"
    );
    let f = dst.path().join("t/f");
    assert!(fs::symlink_metadata(&f).unwrap().is_file());
    assert_eq!(fs::read(&f).unwrap(), b"new\n");
    sb.destroy().await.unwrap();
}

//! Images as ext4 disk images, for drivers that boot a guest from a block
//! device (the VM driver). Built without root with `mkfs.ext4 -d`, once per
//! image, cached next to the unpacked tree and shared read-only by every
//! sandbox of the image.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::PreparedImage;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Free space left in the image on top of its content, in bytes.
const HEADROOM: u64 = 64 << 20;

/// The ext4 disk image of `image` (built on first use; later calls return
/// the cached file). Blocking: call it from a blocking context.
pub fn disk_image(home: &Home, image: &PreparedImage) -> Result<PathBuf> {
    disk_image_in(&home.images_dir(), image)
}

/// [`disk_image`] with the cache under `images_dir` (the home's images
/// directory).
pub fn disk_image_in(images_dir: &Path, image: &PreparedImage) -> Result<PathBuf> {
    let dir = images_dir.join("ext4");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io("creating the disk image cache", Some(&dir), e))?;
    let key = cache_key(image);
    let target = disk_path_in(images_dir, &key);
    if target.is_file() {
        return Ok(target);
    }
    let lock_path = dir.join(format!("{key}.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io("opening a lock file", Some(&lock_path), e))?;
    lock.lock()
        .map_err(|e| Error::io("locking", Some(&lock_path), e))?;
    // Re-check under the lock: another process may have built it.
    if target.is_file() {
        return Ok(target);
    }
    let content = super::registry::tree_size(&image.rootfs);
    // ext4 metadata (inodes, journal, block rounding) on top of the content.
    let size = (content + content / 3 + HEADROOM).div_ceil(1 << 20) << 20;
    let tmp = dir.join(format!(".tmp-{key}-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let file = std::fs::File::create(&tmp)
        .map_err(|e| Error::io("creating the disk image", Some(&tmp), e))?;
    file.set_len(size)
        .map_err(|e| Error::io("sizing the disk image", Some(&tmp), e))?;
    drop(file);
    let out = mkfs_command()
        .args([
            "-q",
            "-F",
            "-L",
            "burrow-root",
            "-E",
            "root_owner=0:0",
            "-d",
        ])
        .arg(&image.rootfs)
        .arg(&tmp)
        .output()
        .map_err(|e| Error::io("running mkfs.ext4 (package e2fsprogs)", None, e))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            "building the ext4 disk image",
            Some(&image.rootfs),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ));
    }
    std::fs::rename(&tmp, &target)
        .map_err(|e| Error::io("publishing the disk image", Some(&target), e))?;
    Ok(target)
}

/// `mkfs.ext4`, which copies each file's owner from the tree it is given.
/// Without root an image's tree is this user's own (unpacked without
/// `chown`): built in a user namespace where this user is root, its files
/// are root's in the guest, as a rootless container sees them, rather than
/// the host user's uid. Where no user namespace can be made, as is.
fn mkfs_command() -> Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && user_namespaces_work() {
        let mut c = Command::new("unshare");
        c.args(["--user", "--map-root-user", "mkfs.ext4"]);
        return c;
    }
    Command::new("mkfs.ext4")
}

/// Whether `unshare --user --map-root-user` runs here (once per process).
fn user_namespaces_work() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        Command::new("unshare")
            .args(["--user", "--map-root-user", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Where the disk of the image with cache key `key` is kept.
pub(crate) fn disk_path_in(images_dir: &Path, key: &str) -> PathBuf {
    images_dir.join("ext4").join(format!("{key}.ext4"))
}

/// Content digest for OCI and registry images; for a rootfs directory, its
/// canonical path and modification time (a changed top level rebuilds).
fn cache_key(image: &PreparedImage) -> String {
    if let Some(d) = &image.digest {
        return d.strip_prefix("sha256:").unwrap_or(d).to_string();
    }
    let mtime = std::fs::metadata(&image.rootfs)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = Sha256::new();
    h.update(image.rootfs.as_os_str().as_encoded_bytes());
    h.update(mtime.to_le_bytes());
    hex::encode(&h.finalize()[..16])
}

/// Whether `path` looks like an ext4 image (superblock magic).
pub fn is_ext4(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut magic = [0u8; 2];
    f.seek(SeekFrom::Start(1024 + 0x38)).is_ok()
        && f.read_exact(&mut magic).is_ok()
        && magic == [0x53, 0xEF]
}

/// Copies `from` to a new file `to` without its holes: a clone where the
/// filesystem can (btrfs, XFS), else the data extents one by one.
pub(crate) fn copy_sparse(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    /// `FICLONE`: `_IOW(0x94, 9, int)`.
    const FICLONE: libc::c_ulong = 0x4004_9409;
    let src = std::fs::File::open(from)?;
    let len = src.metadata()?.len();
    let dst = std::fs::File::create(to)?;
    // SAFETY: FICLONE with the source's open fd.
    if unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) } == 0 {
        return Ok(());
    }
    dst.set_len(len)?;
    let mut pos: i64 = 0;
    while (pos as u64) < len {
        // SAFETY: lseek on an open fd.
        let data = unsafe { libc::lseek(src.as_raw_fd(), pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole is left
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut off_in, mut off_out) = (data, data);
        while off_in < hole {
            // SAFETY: both fds are open; the offsets are ours.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut off_in,
                    dst.as_raw_fd(),
                    &mut off_out,
                    (hole - off_in) as usize,
                    0,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the template's data disk shrank while it was copied",
                ));
            }
        }
        pos = hole;
    }
    Ok(())
}

/// A blank ext4 disk of `bytes` (sparse; the filesystem keeps no blocks for
/// root), made once per size under `images_dir` and copied for each disk
/// that starts blank: a copy of its few written blocks is a fraction of a
/// `mkfs.ext4`. Blocking.
pub(crate) fn blank_disk_in(images_dir: &Path, bytes: u64) -> Result<PathBuf> {
    let dir = images_dir.join("blank-ext4");
    let path = dir.join(format!("{bytes}.ext4"));
    if is_ext4(&path) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io("creating the blank disk directory", Some(&dir), e))?;
    // Made aside and renamed into place: a concurrent maker's file is
    // the same blank disk.
    let tmp = dir.join(format!(
        "{bytes}.ext4.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    format_blank(&tmp, bytes)?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| Error::io("publishing the blank disk", Some(&path), e))?;
    Ok(path)
}

/// Formats a new sparse file `path` of `bytes` as an empty ext4.
pub(crate) fn format_blank(path: &Path, bytes: u64) -> Result<()> {
    let file =
        std::fs::File::create(path).map_err(|e| Error::io("creating a disk", Some(path), e))?;
    file.set_len(bytes)
        .map_err(|e| Error::io("sizing a disk", Some(path), e))?;
    drop(file);
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-m", "0", "-L", "burrow-layer", "-E"])
        .arg("lazy_itable_init=1,lazy_journal_init=1,nodiscard")
        .arg(path)
        .output()
        .map_err(|e| Error::io("running mkfs.ext4 (package e2fsprogs)", None, e))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(path);
        return Err(Error::io(
            "formatting a disk",
            Some(path),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        ));
    }
    Ok(())
}

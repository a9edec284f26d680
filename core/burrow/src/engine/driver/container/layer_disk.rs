//! A container sandbox's writable layer on a disk of its own size: a
//! sparse ext4 image (`layer.ext4` in the sandbox directory, `disk_mb` in
//! size) attached to a loop device and mounted at `layer/`, which holds the
//! overlay's `upper/` and `work/`. The guest's writes past the size get
//! `ENOSPC` from the filesystem itself, and the host's file never holds
//! more. Root only: an unprivileged user can neither attach a loop device
//! nor mount ext4 (and overlayfs takes no FUSE upper), so a rootless
//! container's layer stays a directory (see `Driver::enforceable`).
//!
//! One superblock per image, whoever mounts it: the supervisor in its
//! private mount namespace at each start, the engine on the host for a
//! stopped sandbox's snapshot or fork. Two loop devices over one file
//! would be two filesystems writing the same blocks, so a mount always
//! reuses the loop device already attached to the image (found by the
//! image's device and inode) and attaches one only when there is none,
//! with the image's `flock` held across the find and the mount. Loop
//! devices are attached with autoclear: the last unmount, in whichever
//! namespace, detaches them; nothing is left behind by a supervisor that
//! dies (its namespace goes with it).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The image file in the sandbox directory.
pub(crate) const IMAGE: &str = "layer.ext4";
/// Its mount point in the sandbox directory.
pub(crate) const MOUNT: &str = "layer";

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LOOP_MAJOR: u32 = 7;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

fn zeroed_info() -> LoopInfo64 {
    // SAFETY: a plain C struct of integers and byte arrays: all zeroes is
    // a valid value.
    unsafe { std::mem::zeroed() }
}

/// Whether the sandbox's writable layer is on a disk of its own.
pub(crate) fn has_disk(sandbox_dir: &Path) -> bool {
    sandbox_dir.join(IMAGE).is_file()
}

/// Makes the sandbox's layer disk of `bytes` unless it has one (a sparse
/// file: only what is written takes the host's space): a copy of the
/// blank disk of that size cached under `images_dir`, or one formatted
/// here without a cache.
pub(crate) fn create(sandbox_dir: &Path, bytes: u64, images_dir: Option<&Path>) -> Result<()> {
    use crate::engine::image::ext4;
    let image = sandbox_dir.join(IMAGE);
    if image.is_file() {
        return Ok(());
    }
    // Made aside under a name of this thread's own, and published with a
    // link, which never replaces a name: two makers at once (the engine's
    // head start and the supervisor) end with one image, never one put
    // over another already attached.
    let tmp = sandbox_dir.join(format!(
        "{IMAGE}.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let made = match images_dir {
        Some(images) => ext4::blank_disk_in(images, bytes).and_then(|blank| {
            ext4::copy_sparse(&blank, &tmp)
                .map_err(|e| Error::io("copying a blank disk", Some(&blank), e))
        }),
        None => ext4::format_blank(&tmp, bytes),
    };
    let published = made.and_then(|()| match fs::hard_link(&tmp, &image) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(
            "publishing the writable layer's disk",
            Some(&image),
            e,
        )),
    });
    let _ = fs::remove_file(&tmp);
    published
}

/// The layer disk mounted at `layer/` in this mount namespace; detached
/// on drop if this call mounted it and was asked to ([`Mounted::keep`]
/// not called).
#[derive(Debug)]
pub(crate) struct Mounted {
    dir: PathBuf,
    ours: bool,
}

impl Mounted {
    /// Where the disk is mounted.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Leaves the mount in place (the supervisor's, for its run).
    pub(crate) fn keep(mut self) -> PathBuf {
        self.ours = false;
        self.dir.clone()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.ours {
            let _ = detach(&self.dir);
        }
    }
}

/// Attaches the sandbox's layer disk to a loop device unless one already
/// is, and returns the device open (None: it already was): while that is
/// open the device stays attached, for a [`mount`] to find.
pub(crate) fn attach_held(sandbox_dir: &Path) -> Result<Option<File>> {
    let (image, _lock) = open_locked(sandbox_dir)?;
    let meta = image
        .metadata()
        .map_err(|e| Error::io("reading the writable layer's disk", Some(sandbox_dir), e))?;
    if attached_loop(meta.dev(), meta.ino()).is_some() {
        return Ok(None);
    }
    attach(&image).map(|(device, _)| Some(device))
}

/// The sandbox's layer disk open for the loop device, and a descriptor of
/// its own holding the image's lock (a loop device keeps the file it was
/// given open, with any lock on it, while attached).
fn open_locked(sandbox_dir: &Path) -> Result<(File, File)> {
    let image_path = sandbox_dir.join(IMAGE);
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&image_path)
            .map_err(|e| Error::io("opening the writable layer's disk", Some(&image_path), e))
    };
    let lock = open()?;
    let image = open()?;
    // SAFETY: a valid descriptor; the lock goes with it.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::io(
            "locking the writable layer's disk",
            Some(&image_path),
            io::Error::last_os_error(),
        ));
    }
    Ok((image, lock))
}

/// Mounts the sandbox's layer disk at `layer/` unless it already is in
/// this mount namespace, over the loop device already attached to it if
/// there is one.
pub(crate) fn mount(sandbox_dir: &Path) -> Result<Mounted> {
    let image_path = sandbox_dir.join(IMAGE);
    let dir = sandbox_dir.join(MOUNT);
    let err = |doing: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |e: io::Error| Error::io(doing, Some(&path), e)
    };
    let (image, _lock) = open_locked(sandbox_dir)?;
    let meta = image
        .metadata()
        .map_err(err("reading the writable layer's disk", &image_path))?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .or_else(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => Ok(()),
            _ => Err(e),
        })
        .map_err(err("creating the writable layer's mount point", &dir))?;
    // A device found attached may be on its way out (its last mount, in
    // a namespace that just ended, let it go: autoclear detaches it a
    // moment later), so a failed open or mount looks again: by then it is
    // gone and a device is attached afresh. Never two devices with a
    // filesystem mounted: a device in its rundown holds no mount.
    let mut last = None;
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(5 << attempt));
        }
        let attached = attached_loop(meta.dev(), meta.ino());
        if let Some(minor) = attached {
            let mounted = fs::symlink_metadata(&dir)
                .map(|m| m.dev() == libc::makedev(LOOP_MAJOR, minor))
                .unwrap_or(false);
            if mounted {
                return Ok(Mounted { dir, ours: false });
            }
        }
        let device = match attached {
            Some(minor) => open_loop(minor).map(|d| (d, minor)),
            None => attach(&image),
        };
        let (device, minor) = match device {
            Ok(d) => d,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        match mount_device(minor, &dir) {
            // The mount holds the device now.
            Ok(()) => return Ok(Mounted { dir, ours: true }),
            // Nothing holds it but this descriptor: autoclear detaches it
            // as it closes.
            Err(e) => last = Some(err("mounting the writable layer", &dir)(e)),
        }
        drop(device);
    }
    Err(last.unwrap_or_else(|| {
        err("mounting the writable layer", &dir)(io::Error::other("no attempt was made"))
    }))
}

/// Mounts `/dev/loop<minor>`'s ext4 at `dir`.
fn mount_device(minor: u32, dir: &Path) -> io::Result<()> {
    let source = std::ffi::CString::new(format!("/dev/loop{minor}"))
        .map_err(|_| io::Error::other("NUL in a device path"))?;
    let c_dir = super::rootfs::cstr(dir)?;
    // SAFETY: valid NUL-terminated strings; no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            c_dir.as_ptr(),
            c"ext4".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs `f` on a thread of its own in a private mount namespace of its
/// own, where it may mount layer disks: the host's namespace never holds
/// them, so a process killed while `f` runs leaves no mount (and no loop
/// device) behind; its namespace goes with the thread. Root only (as
/// layer disks are).
pub(crate) fn in_own_namespace<T: Send>(f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("burrow-layer-ns".into())
            .spawn_scoped(scope, || {
                // This thread's own fs state first (CLONE_FS), as a mount
                // namespace of one thread needs.
                super::rootfs::enter_mount_namespace(libc::CLONE_FS, libc::MS_PRIVATE).map_err(
                    |e| Error::io("entering a mount namespace for the writable layer", None, e),
                )?;
                f()
            })
            .map_err(|e| Error::io("starting the writable layer's thread", None, e))?
            .join()
            .unwrap_or_else(|_| {
                Err(Error::io(
                    "reading the writable layer",
                    None,
                    io::Error::other("its thread panicked"),
                ))
            })
    })
}

/// Detaches the layer disk's mount in this namespace (none is fine).
pub(crate) fn release(sandbox_dir: &Path) -> Result<()> {
    detach(&sandbox_dir.join(MOUNT))
}

fn detach(dir: &Path) -> Result<()> {
    let c = super::rootfs::cstr(dir)
        .map_err(|e| Error::io("unmounting the writable layer", Some(dir), e))?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } != 0 {
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            return Err(Error::io("unmounting the writable layer", Some(dir), e));
        }
    }
    Ok(())
}

/// The minor of the loop device attached to the file `(dev, ino)`, if any.
fn attached_loop(dev: u64, ino: u64) -> Option<u32> {
    let entries = fs::read_dir("/sys/block").ok()?;
    entries.flatten().find_map(|entry| {
        let name = entry.file_name();
        let minor: u32 = name.to_str()?.strip_prefix("loop")?.parse().ok()?;
        // Only bound devices have a backing file.
        if !entry.path().join("loop/backing_file").exists() {
            return None;
        }
        let device = open_loop(minor).ok()?;
        let mut info = zeroed_info();
        // SAFETY: a valid descriptor and a loop_info64 to fill.
        let rc = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_GET_STATUS64, &mut info) };
        (rc == 0 && info.lo_device == dev && info.lo_inode == ino).then_some(minor)
    })
}

fn open_loop(minor: u32) -> Result<File> {
    let path = PathBuf::from(format!("/dev/loop{minor}"));
    File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io("opening a loop device", Some(&path), e))
}

/// Attaches `image` to a free loop device (autoclear), retrying when
/// another process takes the device offered first.
fn attach(image: &File) -> Result<(File, u32)> {
    let control = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/loop-control")
        .map_err(|e| Error::io("opening the loop control device", None, e))?;
    for _ in 0..16 {
        // SAFETY: a valid descriptor; the ioctl takes no argument.
        let minor = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if minor < 0 {
            return Err(Error::io(
                "finding a free loop device",
                None,
                io::Error::last_os_error(),
            ));
        }
        let device = open_loop(minor as u32)?;
        let mut config = LoopConfig {
            fd: image.as_raw_fd() as u32,
            block_size: 0,
            info: zeroed_info(),
            reserved: [0; 8],
        };
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: a valid descriptor and a filled loop_config.
        if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &config) } == 0 {
            return Ok((device, minor as u32));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(Error::io("attaching a loop device", None, e));
        }
    }
    Err(Error::io(
        "attaching a loop device",
        None,
        io::Error::other("every free loop device was taken first, 16 times"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_structs_have_their_sizes() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    /// Makers at once (the engine's head start and the supervisor) end
    /// with one whole image, none put over another, nothing left aside.
    #[test]
    fn concurrent_makers_publish_one_image() {
        let images = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| create(dir.path(), 64 << 20, Some(images.path())).unwrap());
            }
        });
        let image = dir.path().join(IMAGE);
        assert!(crate::engine::image::ext4::is_ext4(&image));
        assert_eq!(fs::metadata(&image).unwrap().len(), 64 << 20);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let blanks: Vec<_> = fs::read_dir(images.path().join("blank-ext4"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            blanks,
            [std::ffi::OsString::from(format!("{}.ext4", 64 << 20))]
        );
    }

    /// A mount over an image already attached (as it is while another
    /// mount namespace has it mounted) reuses that loop device, so there
    /// is one filesystem; with no mount and no holder left, autoclear lets
    /// the file go.
    #[test]
    fn a_mount_reuses_the_loop_device_already_attached() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Attaching needs root; the rootless layer is a directory.
            assert!(attach(&File::open("/dev/null").unwrap()).is_err());
            return;
        }
        // In a namespace of its own: a failed check leaves no mount here.
        in_own_namespace(reuse_checks).unwrap();
    }

    fn reuse_checks() -> Result<()> {
        let dir = tempfile::tempdir().unwrap();
        create(dir.path(), 64 << 20, None).unwrap();
        let image = fs::metadata(dir.path().join(IMAGE)).unwrap();
        let first = mount(dir.path()).unwrap();
        assert!(first.ours);
        let minor = attached_loop(image.dev(), image.ino()).unwrap();
        fs::write(first.dir().join("f"), b"x").unwrap();
        // Mounted already here: nothing more is done.
        let again = mount(dir.path()).unwrap();
        assert!(!again.ours);
        drop(again);
        // Another holder of the device (another namespace's mount).
        let holder = open_loop(minor).unwrap();
        drop(first);
        assert!(!dir.path().join(MOUNT).join("f").exists());
        let second = mount(dir.path()).unwrap();
        let mounted = fs::symlink_metadata(second.dir()).unwrap();
        assert_eq!(mounted.dev(), libc::makedev(LOOP_MAJOR, minor));
        assert_eq!(fs::read(second.dir().join("f")).unwrap(), b"x");
        drop(second);
        drop(holder);
        assert_eq!(attached_loop(image.dev(), image.ino()), None);
        Ok(())
    }
}

//! Mounting: the kernel's file systems, the disks and the overlay root,
//! the switch into it, and the guest's `/dev`, tmpfs and 9p mounts (steps
//! 1, 3, 4 and 5 of the setup). Each mount is a [`MountSpec`], a value the
//! tests check without mounting anything.

use std::ffi::CString;
use std::fmt;
use std::fs::{self, DirBuilder};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use burrow_protocol::vm::VmMount;

use super::{At, SetupError, Stage};
use crate::log::warning;
use crate::sys;

/// Where the image disk is mounted in the initramfs.
const IMAGE_DIR: &str = "/burrow/image";
/// Where the data disk is mounted in the initramfs.
const DATA_DIR: &str = "/burrow/data";
/// Where the overlay (the new root) is mounted in the initramfs.
const NEW_ROOT: &str = "/burrow/root";

/// Options of every 9p share.
const NINEP_OPTIONS: &str = "trans=virtio,version=9p2000.L,msize=262144";
/// Options of `/dev/pts` (as the container driver mounts it).
const DEVPTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620,gid=5";

/// One `mount(2)` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountSpec {
    source: String,
    target: PathBuf,
    /// `None` for a move.
    fstype: Option<&'static str>,
    flags: libc::c_ulong,
    data: Option<String>,
}

impl MountSpec {
    fn new(
        fstype: &'static str,
        source: impl Into<String>,
        target: impl Into<PathBuf>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> MountSpec {
        MountSpec {
            source: source.into(),
            target: target.into(),
            fstype: Some(fstype),
            flags,
            data: data.map(str::to_owned),
        }
    }

    /// Moves the mount at `from` to `to`.
    fn moving(from: impl Into<String>, to: impl Into<PathBuf>) -> MountSpec {
        MountSpec {
            source: from.into(),
            target: to.into(),
            fstype: None,
            flags: libc::MS_MOVE,
            data: None,
        }
    }
}

impl fmt::Display for MountSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = self.target.display();
        let Some(fstype) = self.fstype else {
            return write!(f, "mount --move {} {target}", self.source);
        };
        let mut options: Vec<&str> = Vec::new();
        for (flag, name) in [
            (libc::MS_RDONLY, "ro"),
            (libc::MS_NOSUID, "nosuid"),
            (libc::MS_NODEV, "nodev"),
            (libc::MS_NOEXEC, "noexec"),
        ] {
            if self.flags & flag != 0 {
                options.push(name);
            }
        }
        options.extend(self.data.as_deref());
        write!(f, "mount -t {fstype}")?;
        if !options.is_empty() {
            write!(f, " -o {}", options.join(","))?;
        }
        write!(f, " {} {target}", self.source)
    }
}

fn c_string(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Performs `spec`.
fn mount(spec: &MountSpec) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let source = c_string(spec.source.as_bytes())?;
    let target = c_string(spec.target.as_os_str().as_bytes())?;
    let fstype = spec.fstype.map(|t| c_string(t.as_bytes())).transpose()?;
    let data = spec
        .data
        .as_deref()
        .map(|d| c_string(d.as_bytes()))
        .transpose()?;
    // SAFETY: every pointer is a valid NUL-terminated string or null, alive
    // for the duration of the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            spec.flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>()),
        )
    };
    sys::cvt(r).map(drop)
}

/// Creates `dir` (and its parents) unless it exists.
pub(super) fn mkdir_p(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o755).create(dir)
}

/// Creates each target directory and mounts.
pub(super) fn mount_all(specs: &[MountSpec], stage: Stage) -> Result<(), SetupError> {
    for spec in specs {
        mkdir_p(&spec.target).at(stage, format_args!("creating {}", spec.target.display()))?;
        mount(spec).at(stage, spec)?;
    }
    Ok(())
}

/// The kernel's file systems, mounted in the initramfs first and moved
/// into the new root later.
fn api_mounts() -> [MountSpec; 3] {
    let hardened = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    [
        MountSpec::new("devtmpfs", "devtmpfs", "/dev", libc::MS_NOSUID, None),
        MountSpec::new("proc", "proc", "/proc", hardened, None),
        MountSpec::new("sysfs", "sysfs", "/sys", hardened, None),
    ]
}

/// Step 1: `/dev` (then the console), `/proc`, `/sys`.
pub(super) fn early_mounts() -> Result<(), SetupError> {
    let [dev, proc, sysfs] = api_mounts();
    mkdir_p(&dev.target).at(Stage::Early, "creating /dev")?;
    let mounted = match mount(&dev) {
        // Already there (a kernel that mounts devtmpfs itself).
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
        other => other,
    };
    // Even without devtmpfs the initramfs may have a /dev/console node:
    // try, so that the failure below reaches the host's console.
    let console = attach_console();
    mounted.at(Stage::Early, &dev)?;
    if let Err(e) = console {
        // Nowhere to log this but the inherited stderr, if any.
        warning!("vm: cannot open /dev/console: {e}");
    }
    mount_all(&[proc, sysfs], Stage::Early)
}

/// Puts `/dev/console` (the serial console) on fds 0, 1 and 2: the kernel
/// gives init those fds only when the initramfs has a `/dev/console` node.
fn attach_console() -> io::Result<()> {
    // Not CLOEXEC: its copies are the standard fds (one thread so far).
    // SAFETY: the path is a valid NUL-terminated string.
    let fd =
        sys::cvt(unsafe { libc::open(c"/dev/console".as_ptr(), libc::O_RDWR | libc::O_NOCTTY) })?;
    for target in 0..=2 {
        if fd != target {
            // SAFETY: dup2 onto a standard fd, which nothing else owns yet.
            sys::cvt(unsafe { libc::dup2(fd, target) })?;
        }
    }
    if fd > 2 {
        // SAFETY: `fd` was opened above and is not used again.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    Ok(())
}

/// Options of the overlay root.
fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> String {
    format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    )
}

/// The read-only image disk and the writable data disk.
fn disk_mounts(image: &Path, data: &Path) -> [MountSpec; 2] {
    [
        MountSpec::new(
            "ext4",
            image.display().to_string(),
            IMAGE_DIR,
            libc::MS_RDONLY,
            None,
        ),
        // The disk is made with lazily initialised inode tables, which read
        // as zeros anyway (a sparse file): no kernel thread zeroing them
        // behind the guest's back.
        MountSpec::new(
            "ext4",
            data.display().to_string(),
            DATA_DIR,
            0,
            Some("noinit_itable"),
        ),
    ]
}

/// The image disk, read-only (the first half of step 3; a template mounts
/// it before it is saved: every sandbox of the template has that image).
pub(super) fn mount_image(image: &Path) -> Result<(), SetupError> {
    let [image, _] = disk_mounts(image, Path::new(""));
    mount_all(&[image], Stage::Root)
}

/// Step 3: the disks (the image unless `image_mounted`) and the overlay
/// root at [`NEW_ROOT`].
pub(super) fn mount_root(image: &Path, data: &Path, image_mounted: bool) -> Result<(), SetupError> {
    let [image, data] = disk_mounts(image, data);
    if image_mounted {
        mount_all(&[data], Stage::Root)?;
    } else {
        mount_all(&[image, data], Stage::Root)?;
    }
    let (upper, work) = prepare_data(Path::new(DATA_DIR), Path::new(IMAGE_DIR))
        .at(Stage::Root, "preparing the data disk")?;
    // Out of reach of every path once the overlay is the root: kept for a
    // filesystem snapshot (`WriteLayer`).
    if let Err(e) = crate::layer::remember_upper(&upper) {
        crate::log::warning!("vm: the writable layer will not be snapshotable: {e}");
    }
    let overlay = MountSpec::new(
        "overlay",
        "overlay",
        NEW_ROOT,
        0,
        Some(&overlay_options(Path::new(IMAGE_DIR), &upper, &work)),
    );
    mount_all(&[overlay], Stage::Root)
}

/// A layer boot's only mount: the data disk, read-only, at [`DATA_DIR`].
/// Returns the upper directory to stream: the disk's, or an empty one in
/// the initramfs if the disk has none (a sandbox never started).
pub(super) fn mount_data_read_only(data: &Path) -> Result<PathBuf, SetupError> {
    let [_, mut spec] = disk_mounts(Path::new(""), data);
    spec.flags = libc::MS_RDONLY;
    spec.data = None;
    mount_all(&[spec], Stage::Root)?;
    let upper = Path::new(DATA_DIR).join("upper");
    if upper.is_dir() {
        return Ok(upper);
    }
    let empty = PathBuf::from("/burrow/empty-upper");
    mkdir_p(&empty).at(Stage::Root, "creating an empty upper directory")?;
    Ok(empty)
}

/// Creates the overlay's `upper/` and `work/` on the data disk unless they
/// exist (the disk is empty the first time, and keeps them afterwards).
/// A new `upper/` takes the mode and owner of the image's root directory,
/// since it becomes the guest's `/`; it is built under a temporary name and
/// renamed, so a crash never leaves a half-made one behind.
fn prepare_data(data: &Path, image: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let upper = data.join("upper");
    let work = data.join("work");
    if fs::symlink_metadata(&upper).is_err() {
        let root = fs::metadata(image)?;
        let tmp = data.join("upper.new");
        if fs::symlink_metadata(&tmp).is_ok() {
            fs::remove_dir(&tmp)?;
        }
        DirBuilder::new().mode(0o700).create(&tmp)?;
        std::os::unix::fs::chown(&tmp, Some(root.uid()), Some(root.gid()))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(root.mode() & 0o7777))?;
        fs::rename(&tmp, &upper)?;
    }
    if fs::symlink_metadata(&work).is_err() {
        DirBuilder::new().mode(0o700).create(&work)?;
    }
    Ok((upper, work))
}

/// Step 4: moves `/dev`, `/proc` and `/sys` into [`NEW_ROOT`] and makes it
/// the root (as busybox's `switch_root` does: the initramfs cannot be
/// unmounted, so the new root is moved over it).
pub(super) fn enter_root() -> Result<(), SetupError> {
    let root = Path::new(NEW_ROOT);
    let moves: Vec<MountSpec> = api_mounts()
        .iter()
        .map(|m| {
            let inside = m.target.strip_prefix("/").unwrap_or(&m.target);
            MountSpec::moving(m.target.display().to_string(), root.join(inside))
        })
        .collect();
    mount_all(&moves, Stage::SwitchRoot)?;
    std::env::set_current_dir(root).at(Stage::SwitchRoot, "entering the new root")?;
    mount(&MountSpec::moving(".", "/")).at(Stage::SwitchRoot, "moving the new root to /")?;
    std::os::unix::fs::chroot(".").at(Stage::SwitchRoot, "chroot")?;
    std::env::set_current_dir("/").at(Stage::SwitchRoot, "entering /")
}

/// `/dev/pts`, `/dev/ptmx` pointing into it, and the usual links to
/// `/proc/self/fd` (which devtmpfs lacks; bash's `<(...)` needs `/dev/fd`).
pub(super) fn mount_guest_dev(dev: &Path) -> io::Result<()> {
    let pts = MountSpec::new(
        "devpts",
        "devpts",
        dev.join("pts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(DEVPTS_OPTIONS),
    );
    mkdir_p(&pts.target)?;
    mount(&pts).map_err(|e| io::Error::new(e.kind(), format!("{pts}: {e}")))?;
    dev_links(dev)
}

/// Replaces `dev/ptmx` (devtmpfs's node, tied to no devpts instance we
/// chose) with a link to `pts/ptmx`, and adds `fd`, `stdin`, `stdout`,
/// `stderr` unless present.
fn dev_links(dev: &Path) -> io::Result<()> {
    let ptmx = dev.join("ptmx");
    match fs::remove_file(&ptmx) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::os::unix::fs::symlink("pts/ptmx", &ptmx)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        match std::os::unix::fs::symlink(target, dev.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The tmpfs mounts: `/dev/shm` and `/tmp`.
pub(super) fn scratch_mounts() -> [MountSpec; 2] {
    [
        MountSpec::new(
            "tmpfs",
            "shm",
            "/dev/shm",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=1777"),
        ),
        MountSpec::new(
            "tmpfs",
            "tmpfs",
            "/tmp",
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        ),
    ]
}

/// One virtio-9p share.
fn share_mount(m: &VmMount) -> MountSpec {
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if m.read_only {
        flags |= libc::MS_RDONLY;
    }
    MountSpec::new("9p", m.tag.clone(), &m.target, flags, Some(NINEP_OPTIONS))
}

/// The 9p shares, parents before children (so a share inside another is not
/// hidden by it), otherwise in the host's order.
pub(super) fn share_mounts(mounts: &[VmMount]) -> Vec<MountSpec> {
    let mut specs: Vec<MountSpec> = mounts.iter().map(share_mount).collect();
    specs.sort_by_key(|s| {
        s.target
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count()
    });
    specs
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::fixtures::write;

    #[test]
    fn overlay_and_disk_mounts() {
        assert_eq!(
            overlay_options(
                Path::new("/burrow/image"),
                Path::new("/burrow/data/upper"),
                Path::new("/burrow/data/work")
            ),
            "lowerdir=/burrow/image,upperdir=/burrow/data/upper,workdir=/burrow/data/work"
        );
        let [image, data] = disk_mounts(Path::new("/dev/vda"), Path::new("/dev/vdb"));
        assert_eq!(
            image.to_string(),
            "mount -t ext4 -o ro /dev/vda /burrow/image"
        );
        assert_eq!(
            data.to_string(),
            "mount -t ext4 -o noinit_itable /dev/vdb /burrow/data"
        );
        assert_eq!(MountSpec::moving(".", "/").to_string(), "mount --move . /");
    }

    #[test]
    fn share_mount_options() {
        let ro = share_mount(&VmMount {
            tag: "m0".into(),
            target: "/data".into(),
            read_only: true,
        });
        assert_eq!(ro.fstype, Some("9p"));
        assert_eq!(ro.source, "m0");
        assert_eq!(ro.target, Path::new("/data"));
        assert_eq!(
            ro.data.as_deref(),
            Some("trans=virtio,version=9p2000.L,msize=262144")
        );
        assert_ne!(ro.flags & libc::MS_RDONLY, 0);
        assert_eq!(
            ro.to_string(),
            "mount -t 9p -o ro,nosuid,nodev,trans=virtio,version=9p2000.L,msize=262144 m0 /data"
        );
        let rw = share_mount(&VmMount {
            tag: "m1".into(),
            target: "/src".into(),
            read_only: false,
        });
        assert_eq!(rw.flags & libc::MS_RDONLY, 0);
        assert_eq!(rw.data, ro.data);
    }

    #[test]
    fn shares_mount_parents_first() {
        let m = |tag: &str, target: &str| VmMount {
            tag: tag.into(),
            target: target.into(),
            read_only: false,
        };
        let specs = share_mounts(&[
            m("inner", "/a/b/"),
            m("deep", "/x/y/z"),
            m("outer", "/a"),
            m("other", "/c"),
        ]);
        let order: Vec<&str> = specs.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(order, ["outer", "other", "inner", "deep"]);
    }

    #[test]
    fn guest_mounts() {
        let [shm, tmp] = scratch_mounts();
        assert_eq!(
            shm.to_string(),
            "mount -t tmpfs -o nosuid,nodev,noexec,mode=1777 shm /dev/shm"
        );
        assert_eq!(
            tmp.to_string(),
            "mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp"
        );
        let [dev, proc, sysfs] = api_mounts();
        assert_eq!(dev.to_string(), "mount -t devtmpfs -o nosuid devtmpfs /dev");
        assert_eq!(
            proc.to_string(),
            "mount -t proc -o nosuid,nodev,noexec proc /proc"
        );
        assert_eq!(sysfs.target, Path::new("/sys"));
        assert!(DEVPTS_OPTIONS.starts_with("newinstance,ptmxmode=0666"));
    }

    #[test]
    fn dev_links_point_into_pts_and_proc() {
        let dev = tempfile::tempdir().expect("tempdir");
        let d = dev.path();
        write(&d.join("ptmx"), "a devtmpfs node");
        std::os::unix::fs::symlink("/somewhere", d.join("stdin")).expect("symlink");
        dev_links(d).expect("links");
        assert_eq!(
            fs::read_link(d.join("ptmx")).expect("link"),
            Path::new("pts/ptmx")
        );
        assert_eq!(
            fs::read_link(d.join("fd")).expect("link"),
            Path::new("/proc/self/fd")
        );
        assert_eq!(
            fs::read_link(d.join("stderr")).expect("link"),
            Path::new("/proc/self/fd/2")
        );
        // What was there is kept.
        assert_eq!(
            fs::read_link(d.join("stdin")).expect("link"),
            Path::new("/somewhere")
        );
        // Idempotent.
        dev_links(d).expect("links again");
    }

    #[test]
    fn data_disk_gets_upper_and_work_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (image, data) = (tmp.path().join("image"), tmp.path().join("data"));
        fs::create_dir_all(&image).expect("mkdir");
        fs::set_permissions(&image, fs::Permissions::from_mode(0o751)).expect("chmod");
        fs::create_dir_all(data.join("lost+found")).expect("mkdir");

        let (upper, work) = prepare_data(&data, &image).expect("prepared");
        assert_eq!(upper, data.join("upper"));
        assert_eq!(work, data.join("work"));
        let meta = fs::metadata(&upper).expect("upper");
        assert_eq!(
            meta.mode() & 0o7777,
            0o751,
            "upper takes the image root's mode"
        );
        assert_eq!(meta.uid(), fs::metadata(&image).expect("image").uid());
        assert!(work.is_dir());
        assert!(!data.join("upper.new").exists());

        // Second boot: what the guest wrote is kept.
        fs::write(upper.join("kept"), "x").expect("write");
        fs::set_permissions(&upper, fs::Permissions::from_mode(0o755)).expect("chmod");
        prepare_data(&data, &image).expect("prepared again");
        assert!(upper.join("kept").exists());
        let mode = fs::metadata(&upper).expect("upper").mode();
        assert_eq!(mode & 0o7777, 0o755, "an existing upper is left alone");

        // A leftover from a crash mid-creation is replaced.
        fs::remove_dir_all(&upper).expect("rm");
        fs::create_dir(data.join("upper.new")).expect("mkdir");
        prepare_data(&data, &image).expect("prepared after a crash");
        assert!(upper.is_dir());
    }
}

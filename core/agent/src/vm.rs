//! VM mode: the agent as the `/init` of a QEMU microVM.
//!
//! The contract is [`burrow_protocol::vm`]. [`setup`] runs first thing in
//! `main`, on the only thread, before the signal mask and the channel: it
//! turns the initramfs the kernel started us in into the sandbox's root
//! filesystem and says where the channel is and what processes start from.
//!
//! Steps, in order:
//! 1. `devtmpfs` on `/dev`, then `/dev/console` onto fds 0..=2 (so every
//!    later log line reaches the host's serial console), `proc`, `sysfs`;
//! 2. `/burrow/boot.json` is read and checked;
//! 3. the two disks are found by serial (waiting for them to probe), the
//!    image mounted read-only, the data disk read-write (`upper/` and
//!    `work/` created on first use), the overlay of both at `/burrow/root`;
//! 4. `/dev`, `/proc` and `/sys` are moved into the new root, which then
//!    becomes `/` (move mount + chroot: `pivot_root` does not work on the
//!    initramfs);
//! 5. inside it: `/dev/pts` (with `/dev/ptmx` pointing at it), the usual
//!    `/dev` links, `/dev/shm`, `/tmp`, the 9p shares, `/etc/hostname`,
//!    `/etc/hosts`, `/etc/resolv.conf`; the hostname; `lo` up; the working
//!    directory;
//! 6. the channel port is found by name.
//!
//! Everything after the switch works with real guest paths, so symlinks in
//! the image (an absolute `/etc/resolv.conf` link, say) resolve inside the
//! guest, never in the initramfs.
//!
//! Every failure is a [`SetupError`]; its [`Stage`] code is what the host
//! gets through the exit port (`main` logs the message to the console
//! first). The pure parts (sysfs lookups under a given root, mount specs,
//! the environment, the working directory, files under a given root) take
//! their inputs as parameters and are unit-tested.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fmt;
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use burrow_protocol::vm::{VmBoot, VmMount, VM_BOOT_PATH};

use crate::agent::ProcessBase;
use crate::log::{info, warning};
use crate::spawn::Credentials;
use crate::sys;

/// How long to wait for devices, which probe asynchronously, to show up
/// (and for the host end of the channel to be connected).
const DEVICE_WAIT: Duration = Duration::from_secs(5);

/// Where the image disk is mounted in the initramfs.
const IMAGE_DIR: &str = "/burrow/image";
/// Where the data disk is mounted in the initramfs.
const DATA_DIR: &str = "/burrow/data";
/// Where the overlay (the new root) is mounted in the initramfs.
const NEW_ROOT: &str = "/burrow/root";

/// Longest serial a virtio-blk disk reports (`VIRTIO_BLK_ID_BYTES`): a
/// longer one is cut, and would never match.
const MAX_SERIAL: usize = 20;
/// Longest hostname the kernel takes (`HOST_NAME_MAX`).
const MAX_HOSTNAME: usize = 64;

/// Options of every 9p share.
const NINEP_OPTIONS: &str = "trans=virtio,version=9p2000.L,msize=262144";
/// Options of `/dev/pts` (as the container driver mounts it).
const DEVPTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620,gid=5";

/// The part of the setup that failed. Its code is the agent's exit code
/// (QEMU's exit status is `2 * code + 1`), distinct from the agent's
/// ordinary exit codes (0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Mounting `devtmpfs`, `proc` or `sysfs` in the initramfs.
    Early = 10,
    /// Reading or checking `/burrow/boot.json`.
    Boot = 11,
    /// The disks did not show up.
    Disks = 12,
    /// Mounting the image, the data disk or the overlay.
    Root = 13,
    /// Moving `/dev`, `/proc`, `/sys` into the new root, or switching to it.
    SwitchRoot = 14,
    /// `/dev/pts`, `/dev/shm`, `/tmp` or a 9p share.
    Mounts = 15,
    /// The `/etc` files, the hostname or the loopback interface.
    System = 16,
    /// The channel port did not show up.
    Channel = 17,
}

/// Why the VM setup failed.
#[derive(Debug)]
pub struct SetupError {
    /// Where it failed.
    pub stage: Stage,
    /// What failed, for the console.
    pub message: String,
}

impl SetupError {
    fn new(stage: Stage, message: impl Into<String>) -> SetupError {
        SetupError {
            stage,
            message: message.into(),
        }
    }

    /// The exit code that tells the host where the setup failed.
    pub fn code(&self) -> i32 {
        self.stage as i32
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (exit code {})", self.message, self.code())
    }
}

/// Attaches a stage and a description to an error.
trait At<T> {
    fn at(self, stage: Stage, what: impl fmt::Display) -> Result<T, SetupError>;
}

impl<T, E: fmt::Display> At<T> for Result<T, E> {
    fn at(self, stage: Stage, what: impl fmt::Display) -> Result<T, SetupError> {
        self.map_err(|e| SetupError::new(stage, format!("{what}: {e}")))
    }
}

/// What `main` needs once the guest is set up.
#[derive(Debug)]
pub struct Guest {
    /// The channel's device (`/dev/vportNpM`).
    pub channel: PathBuf,
    /// Environment and identity of the processes the agent starts.
    pub base: ProcessBase,
}

/// Sets the microVM up (see the module documentation). Call on the only
/// thread, as PID 1 of a VM.
pub fn setup() -> Result<Guest, SetupError> {
    let started = Instant::now();
    early_mounts()?;
    let boot = read_boot(Path::new(VM_BOOT_PATH))?;

    let (image, data) = wait_for_disks(Path::new("/sys"), &boot)?;
    info!(
        "vm: image {} (serial {:?}), data {} (serial {:?})",
        image.display(),
        boot.root_serial,
        data.display(),
        boot.data_serial
    );
    mount_root(&image, &data)?;
    enter_root()?;

    mount_guest_dev(Path::new("/dev")).at(Stage::Mounts, "setting up /dev")?;
    mount_all(&scratch_mounts(), Stage::Mounts)?;
    mount_all(&share_mounts(&boot.mounts), Stage::Mounts)?;

    write_etc(Path::new("/"), &boot).at(Stage::System, "writing /etc")?;
    set_hostname(&boot.hostname).at(Stage::System, "setting the hostname")?;
    loopback_up().at(Stage::System, "bringing lo up")?;
    let cwd = working_dir(Path::new("/"), &boot.cwd);
    if let Err(e) = std::env::set_current_dir(&cwd) {
        warning!("vm: cannot enter {}: {e}; using /", cwd.display());
        std::env::set_current_dir("/").at(Stage::System, "entering /")?;
    }

    let channel = wait_for_port(Path::new("/sys"), Path::new("/dev"), &boot.channel)?;
    info!(
        "vm: set up in {} ms; channel {} ({:?})",
        started.elapsed().as_millis(),
        channel.display(),
        boot.channel
    );
    Ok(Guest {
        channel,
        base: ProcessBase {
            env: environment(&boot.env),
            user: Credentials::new(boot.uid, boot.gid),
        },
    })
}

/// Waits (a while) until the host end of the virtio console port is
/// connected. Until then reads on the port return 0, which the agent would
/// take for the host hanging up; the port reports that state as `POLLHUP`.
pub fn wait_for_host(port: &File) {
    let connected = sys::wait_until(DEVICE_WAIT, || {
        let mut fds = [sys::pollfd(
            Some(port.as_raw_fd()),
            libc::POLLIN | libc::POLLOUT,
        )];
        // A zero timeout and a sleep between tries (wait_until): while
        // POLLHUP is reported, poll would return at once anyway.
        sys::poll(&mut fds, Some(Instant::now())).is_ok() && fds[0].revents & libc::POLLHUP == 0
    });
    if !connected {
        warning!("vm: the host end of the channel is not connected; going on anyway");
    }
}

// ---------------------------------------------------------------- mounts

/// One `mount(2)` call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountSpec {
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
fn mkdir_p(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o755).create(dir)
}

/// Creates each target directory and mounts.
fn mount_all(specs: &[MountSpec], stage: Stage) -> Result<(), SetupError> {
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
fn early_mounts() -> Result<(), SetupError> {
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
        MountSpec::new("ext4", data.display().to_string(), DATA_DIR, 0, None),
    ]
}

/// Step 3: the disks and the overlay root at [`NEW_ROOT`].
fn mount_root(image: &Path, data: &Path) -> Result<(), SetupError> {
    mount_all(&disk_mounts(image, data), Stage::Root)?;
    let (upper, work) = prepare_data(Path::new(DATA_DIR), Path::new(IMAGE_DIR))
        .at(Stage::Root, "preparing the data disk")?;
    let overlay = MountSpec::new(
        "overlay",
        "overlay",
        NEW_ROOT,
        0,
        Some(&overlay_options(Path::new(IMAGE_DIR), &upper, &work)),
    );
    mount_all(&[overlay], Stage::Root)
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
fn enter_root() -> Result<(), SetupError> {
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
fn mount_guest_dev(dev: &Path) -> io::Result<()> {
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
fn scratch_mounts() -> [MountSpec; 2] {
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
fn share_mounts(mounts: &[VmMount]) -> Vec<MountSpec> {
    let mut specs: Vec<MountSpec> = mounts.iter().map(share_mount).collect();
    specs.sort_by_key(|s| {
        s.target
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count()
    });
    specs
}

// ------------------------------------------------------------ boot.json

/// Reads and checks the boot configuration.
fn read_boot(path: &Path) -> Result<VmBoot, SetupError> {
    let bytes = fs::read(path).at(Stage::Boot, format_args!("reading {}", path.display()))?;
    parse_boot(&bytes).map_err(|e| SetupError::new(Stage::Boot, format!("{}: {e}", path.display())))
}

/// Parses and checks the boot configuration.
fn parse_boot(bytes: &[u8]) -> Result<VmBoot, String> {
    let boot: VmBoot = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    for (what, serial) in [("root", &boot.root_serial), ("data", &boot.data_serial)] {
        if serial.is_empty() || serial.len() > MAX_SERIAL {
            return Err(format!(
                "the {what} serial {serial:?} must have 1 to {MAX_SERIAL} bytes (virtio-blk cuts longer ones)"
            ));
        }
    }
    if boot.root_serial == boot.data_serial {
        return Err(format!(
            "root and data disks have the same serial {:?}",
            boot.root_serial
        ));
    }
    if boot.channel.is_empty() {
        return Err("the channel name is empty".into());
    }
    if boot.hostname.is_empty() || boot.hostname.len() > MAX_HOSTNAME {
        return Err(format!(
            "the hostname {:?} must have 1 to {MAX_HOSTNAME} bytes",
            boot.hostname
        ));
    }
    for m in &boot.mounts {
        if !m.target.starts_with('/') || m.target.contains('\0') {
            return Err(format!(
                "mount target {:?} is not an absolute path",
                m.target
            ));
        }
        if m.tag.is_empty() || m.tag.contains('\0') {
            return Err(format!("invalid 9p tag {:?}", m.tag));
        }
    }
    Ok(boot)
}

/// The process environment base: the boot configuration's, minus entries
/// `execve` could not carry (which are logged).
fn environment(env: &BTreeMap<String, String>) -> Vec<(OsString, OsString)> {
    env.iter()
        .filter(|(k, v)| {
            let ok = !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0');
            if !ok {
                warning!("vm: dropping invalid environment variable {k:?}");
            }
            ok
        })
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

/// The default working directory: `cwd` if it is an absolute path to a
/// directory under `root`, else `/`.
fn working_dir(root: &Path, cwd: &str) -> PathBuf {
    match cwd.strip_prefix('/') {
        Some(rel) if root.join(rel).is_dir() => PathBuf::from(cwd),
        _ => {
            warning!("vm: working directory {cwd:?} does not exist; using /");
            PathBuf::from("/")
        }
    }
}

// -------------------------------------------------------------- devices

/// Calls `probe` every few milliseconds until it finds something or
/// `limit` has passed.
fn wait_for<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let mut found = None;
    sys::wait_until(limit, || {
        found = probe();
        found.is_some()
    });
    found
}

/// A sysfs attribute's text, without the trailing newline (or NULs).
fn attribute(path: &Path) -> Option<String> {
    let raw = fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&raw);
    Some(text.trim_end_matches(['\n', '\0']).to_owned())
}

/// `(entry, attribute)` for every entry of `dir` whose name starts with
/// `prefix`, sorted; entries without the attribute get an empty one.
fn entries_with(dir: &Path, prefix: &str, attr: &str) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix))
        .map(|name| {
            let value = attribute(&dir.join(&name).join(attr)).unwrap_or_default();
            (name, value)
        })
        .collect();
    found.sort();
    found
}

/// The virtio-blk disks (`block/vd*` under `sys`) and their serials.
fn list_disks(sys: &Path) -> Vec<(String, String)> {
    entries_with(&sys.join("block"), "vd", "serial")
}

/// The virtio console ports (`class/virtio-ports/*` under `sys`) and their
/// names (empty until the host named them).
fn list_ports(sys: &Path) -> Vec<(String, String)> {
    entries_with(&sys.join("class/virtio-ports"), "vport", "name")
}

/// The entry whose attribute is `value`.
fn find<'a>(entries: &'a [(String, String)], value: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|(_, v)| v == value)
        .map(|(name, _)| name.as_str())
}

/// What was found, for an error message.
fn describe(entries: &[(String, String)]) -> String {
    if entries.is_empty() {
        return "none".into();
    }
    let all: Vec<String> = entries.iter().map(|(n, v)| format!("{n} {v:?}")).collect();
    all.join(", ")
}

/// Waits for both disks (their sysfs entries and device nodes).
fn wait_for_disks(sys: &Path, boot: &VmBoot) -> Result<(PathBuf, PathBuf), SetupError> {
    let dev = Path::new("/dev");
    let node = |disks: &[(String, String)], serial: &str| {
        Some(dev.join(find(disks, serial)?)).filter(|p| p.exists())
    };
    wait_for(DEVICE_WAIT, || {
        let disks = list_disks(sys);
        Some((
            node(&disks, &boot.root_serial)?,
            node(&disks, &boot.data_serial)?,
        ))
    })
    .ok_or_else(|| {
        SetupError::new(
            Stage::Disks,
            format!(
                "no disks with serials {:?} (image) and {:?} (data) after {} s; found: {}",
                boot.root_serial,
                boot.data_serial,
                DEVICE_WAIT.as_secs(),
                describe(&list_disks(sys))
            ),
        )
    })
}

/// Waits for the console port named `name`; returns its device node.
fn wait_for_port(sys: &Path, dev: &Path, name: &str) -> Result<PathBuf, SetupError> {
    wait_for(DEVICE_WAIT, || {
        Some(dev.join(find(&list_ports(sys), name)?)).filter(|p| p.exists())
    })
    .ok_or_else(|| {
        SetupError::new(
            Stage::Channel,
            format!(
                "no virtio console port named {name:?} after {} s; found: {}",
                DEVICE_WAIT.as_secs(),
                describe(&list_ports(sys))
            ),
        )
    })
}

// --------------------------------------------------------------- system

/// The `/etc` files of the guest: name and content.
fn etc_files(boot: &VmBoot) -> Vec<(&'static str, String)> {
    let mut files = vec![
        ("hostname", format!("{}\n", boot.hostname)),
        ("hosts", boot.hosts.clone()),
    ];
    if let Some(resolv) = &boot.resolv_conf {
        files.push(("resolv.conf", resolv.clone()));
    }
    files
}

/// Writes the `/etc` files under `root`, replacing what the image had
/// there (a symlink is replaced, not followed).
fn write_etc(root: &Path, boot: &VmBoot) -> io::Result<()> {
    let etc = root.join("etc");
    mkdir_p(&etc)?;
    for (name, content) in etc_files(boot) {
        let path = etc.join(name);
        let described = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(described(e)),
            _ => {}
        }
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(described)?;
        io::Write::write_all(&mut file, content.as_bytes()).map_err(described)?;
    }
    Ok(())
}

fn set_hostname(name: &str) -> io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    sys::cvt(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// Brings the loopback interface up (`ip link set lo up`).
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket takes plain integers.
    let fd =
        sys::cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: socket just returned this fd; nobody else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is a valid value (empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into the
    // valid, exclusively borrowed ifreq.
    sys::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) })?;
    // SAFETY: SIOCGIFFLAGS filled in the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the valid ifreq.
    sys::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot() -> VmBoot {
        VmBoot {
            root_serial: "burrow-root".into(),
            data_serial: "burrow-data".into(),
            channel: "burrow.agent".into(),
            hostname: "box".into(),
            env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
            cwd: "/work".into(),
            uid: 1000,
            gid: 1000,
            hosts: "127.0.0.1 localhost box\n".into(),
            resolv_conf: None,
            mounts: vec![],
        }
    }

    fn write(path: &Path, content: &str) {
        fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }

    #[test]
    fn disks_are_found_by_serial() {
        let sys = tempfile::tempdir().expect("tempdir");
        let s = sys.path();
        // As virtio-blk reports it: no newline.
        write(&s.join("block/vda/serial"), "burrow-root");
        // Tolerate a newline and NUL padding.
        write(&s.join("block/vdb/serial"), "burrow-data\n");
        write(&s.join("block/vdc/serial"), "other\0\0\0");
        // No serial attribute, and not a virtio disk.
        fs::create_dir_all(s.join("block/vdd")).expect("mkdir");
        write(&s.join("block/loop0/serial"), "burrow-root");

        let disks = list_disks(s);
        assert_eq!(
            disks,
            [
                ("vda".to_string(), "burrow-root".to_string()),
                ("vdb".into(), "burrow-data".into()),
                ("vdc".into(), "other".into()),
                ("vdd".into(), String::new()),
            ]
        );
        assert_eq!(find(&disks, "burrow-root"), Some("vda"));
        assert_eq!(find(&disks, "burrow-data"), Some("vdb"));
        assert_eq!(find(&disks, "missing"), None);
        assert_eq!(
            find(&disks, ""),
            Some("vdd"),
            "only boot.json rules out empty serials"
        );
        assert!(describe(&disks).contains("vdb \"burrow-data\""));
        assert_eq!(list_disks(&s.join("nowhere")), []);
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn the_port_is_found_by_name() {
        let sys = tempfile::tempdir().expect("tempdir");
        let ports = sys.path().join("class/virtio-ports");
        write(&ports.join("vport0p0/name"), "org.qemu.guest_agent.0\n");
        write(&ports.join("vport0p1/name"), "burrow.agent\n");
        // Not named (yet).
        fs::create_dir_all(ports.join("vport1p1")).expect("mkdir");

        let found = list_ports(sys.path());
        assert_eq!(find(&found, "burrow.agent"), Some("vport0p1"));
        assert_eq!(find(&found, "burrow"), None);
        assert_eq!(found.len(), 3);
    }

    #[test]
    fn waiting_for_a_port_gives_its_device_node() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (sys, dev) = (tmp.path().join("sys"), tmp.path().join("dev"));
        write(
            &sys.join("class/virtio-ports/vport2p3/name"),
            "burrow.agent\n",
        );
        write(&dev.join("vport2p3"), "");
        assert_eq!(
            wait_for_port(&sys, &dev, "burrow.agent").expect("found"),
            dev.join("vport2p3")
        );
    }

    #[test]
    fn wait_for_polls_until_found() {
        let mut calls = 0;
        let got = wait_for(Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, Some(3));
        assert_eq!(wait_for(Duration::ZERO, || None::<()>), None);
    }

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
        assert_eq!(data.to_string(), "mount -t ext4 /dev/vdb /burrow/data");
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

    #[test]
    fn boot_json_is_parsed_and_checked() {
        let good = serde_json::to_vec(&boot()).expect("serialises");
        assert_eq!(parse_boot(&good).expect("valid"), boot());

        let bad = |f: fn(&mut VmBoot)| {
            let mut b = boot();
            f(&mut b);
            parse_boot(&serde_json::to_vec(&b).expect("serialises")).expect_err("invalid")
        };
        assert!(bad(|b| b.root_serial = "x".repeat(21)).contains("20 bytes"));
        assert!(bad(|b| b.data_serial.clear()).contains("data serial"));
        assert!(bad(|b| b.data_serial = b.root_serial.clone()).contains("same serial"));
        assert!(bad(|b| b.channel.clear()).contains("channel"));
        assert!(bad(|b| b.hostname = "h".repeat(65)).contains("hostname"));
        assert!(bad(|b| b.mounts = vec![VmMount {
            tag: "t".into(),
            target: "rel".into(),
            read_only: false
        }])
        .contains("absolute"));

        assert!(parse_boot(b"{").is_err());
        let mut extra = serde_json::to_value(boot()).expect("serialises");
        extra["surprise"] = 1.into();
        assert!(parse_boot(&serde_json::to_vec(&extra).expect("serialises")).is_err());
    }

    #[test]
    fn read_boot_reports_a_missing_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err = read_boot(&tmp.path().join("boot.json")).expect_err("missing");
        assert_eq!(err.stage, Stage::Boot);
        assert_eq!(err.code(), 11);
        assert!(err.to_string().contains("boot.json"));
    }

    #[test]
    fn environment_comes_from_the_boot_config() {
        let env = BTreeMap::from([
            ("PATH".to_string(), "/bin".to_string()),
            ("HOME".into(), "/home/u".into()),
            ("EMPTY".into(), String::new()),
            (String::new(), "nameless".into()),
            ("A=B".into(), "x".into()),
            ("NUL".into(), "a\0b".into()),
        ]);
        let got = environment(&env);
        assert_eq!(
            got,
            [
                (OsString::from("EMPTY"), OsString::from("")),
                ("HOME".into(), "/home/u".into()),
                ("PATH".into(), "/bin".into()),
            ]
        );
    }

    #[test]
    fn working_dir_falls_back_to_root() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        fs::create_dir_all(r.join("home/u")).expect("mkdir");
        write(&r.join("file"), "");
        assert_eq!(working_dir(r, "/home/u"), Path::new("/home/u"));
        assert_eq!(working_dir(r, "/"), Path::new("/"));
        assert_eq!(working_dir(r, "/missing"), Path::new("/"));
        assert_eq!(working_dir(r, "/file"), Path::new("/"));
        assert_eq!(working_dir(r, "home/u"), Path::new("/"));
        assert_eq!(working_dir(r, ""), Path::new("/"));
    }

    #[test]
    fn etc_files_replace_the_images() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let mut b = boot();

        // No /etc at all.
        write_etc(r, &b).expect("written");
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "box\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/hosts")).expect("read"),
            b.hosts
        );
        assert!(
            !r.join("etc/resolv.conf").exists(),
            "left alone without a network"
        );
        let mode = fs::metadata(r.join("etc/hosts")).expect("hosts").mode();
        assert_eq!(mode & 0o777, 0o644);

        // The image's resolv.conf is a symlink: replaced, its target untouched.
        write(&r.join("run/stub.conf"), "nameserver 127.0.0.53\n");
        std::os::unix::fs::symlink(r.join("run/stub.conf"), r.join("etc/resolv.conf"))
            .expect("symlink");
        b.resolv_conf = Some("nameserver 10.0.2.3\n".into());
        b.hostname = "other".into();
        write_etc(r, &b).expect("written again");
        let resolv = r.join("etc/resolv.conf");
        assert!(!fs::symlink_metadata(&resolv).expect("meta").is_symlink());
        assert_eq!(
            fs::read_to_string(resolv).expect("read"),
            "nameserver 10.0.2.3\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("run/stub.conf")).expect("read"),
            "nameserver 127.0.0.53\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("etc/hostname")).expect("read"),
            "other\n"
        );
    }

    #[test]
    fn stage_codes_are_distinct() {
        let stages = [
            Stage::Early,
            Stage::Boot,
            Stage::Disks,
            Stage::Root,
            Stage::SwitchRoot,
            Stage::Mounts,
            Stage::System,
            Stage::Channel,
        ];
        let mut codes: Vec<i32> = stages.iter().map(|s| *s as i32).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), stages.len());
        assert!(codes.iter().all(|&c| c > 2 && c < 128));
    }
}

//! The container's root filesystem: a persistent writable layer (overlayfs
//! upper) over a read-only lower layer whose files are owned by the
//! container's id range.
//!
//! The container runs in a user namespace that maps container uids and gids
//! `0..65536` to host ids `base..base+65536`. For image files to appear owned
//! by root inside, the lower layer must present them as owned by `base`: an
//! idmapped mount of the image directory does that for free ([`idmap`]);
//! where that is not possible, a shifted copy of the image is used
//! ([`shift`]). The upper and work directories belong to the sandbox, are
//! owned by `base:base`, and are kept across stop/start: that is the
//! writable layer.
//!
//! The merged overlay is mounted under a directory every user may traverse
//! (`/run/burrow/<container-id>`): runc mounts the rootfs from inside the
//! user namespace, where the 0700 burrow home is not searchable.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::engine::fault::Fault;
use crate::error::{Error, Result};

use super::{idmap, shift};

/// Number of ids mapped into the container (uids and gids `0..65536`).
pub(crate) const MAP_SIZE: u32 = burrow_layer::MAP_SIZE;
/// Host id of container root when nothing else is configured.
const DEFAULT_BASE: u32 = 100_000;
/// File in the sandbox directory recording the base its layer was made with.
const BASE_FILE: &str = "userns-base";

/// The host uid/gid container root maps to for this sandbox.
///
/// The base is recorded in the sandbox directory on first use and reused
/// afterwards, so the files of an existing writable layer keep their owners
/// even if the host default changes later.
pub(super) fn mapping_base(sandbox_dir: &Path) -> Result<u32> {
    let recorded = sandbox_dir.join(BASE_FILE);
    if let Some(base) = recorded_base(sandbox_dir) {
        return Ok(base);
    }
    let base = host_default_base()?;
    fs::write(&recorded, format!("{base}\n"))
        .map_err(|e| Error::io("recording the user namespace base", Some(&recorded), e))?;
    Ok(base)
}

/// Records `base` as the sandbox's (one that never started: a fork's copy
/// gets its parent's, whose writable layer's owners it takes over).
pub(super) fn record_base(sandbox_dir: &Path, base: u32) -> Result<()> {
    let recorded = sandbox_dir.join(BASE_FILE);
    fs::write(&recorded, format!("{base}\n"))
        .map_err(|e| Error::io("recording the user namespace base", Some(&recorded), e))
}

/// The base recorded for the sandbox, if it ever started as root.
pub(super) fn recorded_base(sandbox_dir: &Path) -> Option<u32> {
    fs::read_to_string(sandbox_dir.join(BASE_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|b| valid_base(*b))
}

fn valid_base(base: u32) -> bool {
    base > 0 && base.checked_add(MAP_SIZE).is_some()
}

/// `BURROW_USERNS_BASE`, else root's `/etc/subuid` range, else 100000.
fn host_default_base() -> Result<u32> {
    if let Ok(v) = std::env::var("BURROW_USERNS_BASE") {
        return v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|b| valid_base(*b))
            .ok_or_else(|| Error::InvalidConfig {
                field: "BURROW_USERNS_BASE".into(),
                reason: format!(
                    "{v:?} is not a host uid between 1 and {} ",
                    u32::MAX - MAP_SIZE
                ),
            });
    }
    let subuid = fs::read_to_string("/etc/subuid").unwrap_or_default();
    Ok(subuid_base(&subuid).unwrap_or(DEFAULT_BASE))
}

/// Root's first subordinate range of at least [`MAP_SIZE`] ids.
fn subuid_base(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut parts = line.trim().split(':');
        let (name, start, count) = (parts.next()?, parts.next()?, parts.next()?);
        let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
        ((name == "root" || name == "0") && count >= MAP_SIZE && valid_base(start)).then_some(start)
    })
}

/// Hands a freshly created (empty, root-owned) named volume to the guest's
/// root user, so the sandbox can write to it. A volume already in use keeps
/// its owners.
pub(super) fn adopt_fresh_volume(dir: &Path, base: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        fs::symlink_metadata(dir).map_err(|e| Error::io("reading the volume", Some(dir), e))?;
    let empty = fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false);
    if meta.is_dir() && meta.uid() == 0 && empty {
        std::os::unix::fs::lchown(dir, Some(base), Some(base))
            .map_err(|e| Error::io("handing the volume to the guest's root user", Some(dir), e))?;
    }
    Ok(())
}

/// Enters a mount namespace of its own (`unshare(extra | CLONE_NEWNS)`)
/// whose mounts all get `propagation` (`MS_PRIVATE`: nothing in or out;
/// `MS_SLAVE`: the host's changes still come in). Raw syscalls only: fit
/// for a `pre_exec` hook.
pub(crate) fn enter_mount_namespace(
    extra: libc::c_int,
    propagation: libc::c_ulong,
) -> io::Result<()> {
    // SAFETY: plain syscalls on a constant, NUL-terminated string.
    unsafe {
        if libc::unshare(extra | libc::CLONE_NEWNS) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | propagation,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(super) fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Mounts the merged rootfs at `<mount dir>/<id>` and returns it. Every
/// mount made is pushed to `mounts` (and recorded in `record`) before it is
/// made, so an interrupted assembly is still cleaned up.
#[allow(clippy::too_many_arguments)]
pub(super) async fn assemble(
    image_rootfs: &Path,
    images_dir: &Path,
    sandbox_dir: &Path,
    base: Option<u32>,
    disk_bytes: Option<u64>,
    id: &str,
    record: &Path,
    mounts: &mut Vec<PathBuf>,
) -> Result<PathBuf> {
    let source = fs::canonicalize(image_rootfs)
        .map_err(|e| Error::io("resolving the image rootfs", Some(image_rootfs), e))?;
    let Some(base) = base else {
        // Rootless: an image this user unpacked is root's in the
        // supervisor's namespace, which the container shares; one of
        // another owner (a root-owned directory) is copied, made root's.
        use std::os::unix::fs::MetadataExt;
        let own = fs::metadata(&source).is_ok_and(|m| m.uid() == 0);
        let lower = if own {
            source
        } else {
            let images = images_dir.to_path_buf();
            let owners = shift::Owners::Rootless {
                mapped: super::rootless::mapped_ids().min(u64::from(u32::MAX)) as u32,
            };
            tokio::task::spawn_blocking(move || shift::shifted_lower(&source, &images, owners))
                .await
                .map_err(|e| {
                    Error::io(
                        "preparing the image rootfs",
                        None,
                        io::Error::other(e.to_string()),
                    )
                })??
        };
        let (upper, work) = writable_layer(sandbox_dir, None, None, images_dir)?;
        let target = mount_point(id, record)?;
        mounts.push(target.clone());
        mount_overlay(&lower, &upper, &work, &target)?;
        return Ok(target);
    };
    let mut idmapped = None;
    if std::env::var("BURROW_ID_SHIFT").as_deref() != Ok("copy") {
        let view = mount_point(&format!("{id}.lower"), record)?;
        mounts.push(view.clone());
        let (src, dst) = (source.clone(), view.clone());
        match tokio::task::spawn_blocking(move || idmap::mount_idmapped(&src, &dst, base)).await {
            Ok(Ok(())) => idmapped = Some(view),
            outcome => {
                let why = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                    Ok(Ok(())) => String::new(),
                };
                tracing::info!(image = %source.display(), reason = %why, "no idmapped mount; using a shifted copy of the image");
                unmount(&view)?;
                mounts.pop();
            }
        }
    }
    let lower = match &idmapped {
        Some(view) => view.clone(),
        None => {
            let images = images_dir.to_path_buf();
            tokio::task::spawn_blocking(move || {
                shift::shifted_lower(&source, &images, shift::Owners::Shift(base))
            })
            .await
            .map_err(|e| {
                Error::io(
                    "preparing the image rootfs",
                    None,
                    io::Error::other(e.to_string()),
                )
            })??
        }
    };
    let (upper, work) = writable_layer(sandbox_dir, Some(base), disk_bytes, images_dir)?;
    let target = mount_point(id, record)?;
    mounts.push(target.clone());
    mount_overlay(&lower, &upper, &work, &target)?;
    if let Some(view) = idmapped {
        // overlayfs holds private clones of its layers: the view's own
        // mount is no longer needed. Its empty directory goes on a thread
        // of its own (an rmdir on the host's disk took 0.8 ms of the start);
        // it stays recorded, so teardown removes it if that did not.
        detach(&view)?;
        let _ = std::thread::Builder::new()
            .name("burrow-rmdir".into())
            .spawn(move || {
                let _ = fs::remove_dir(&view);
            });
    }
    tracing::debug!(lower = %lower.display(), rootfs = %target.display(), id_base = base, "rootfs mounted");
    Ok(target)
}

/// Creates the persistent upper and work directories (owned by `base`, or
/// by this user rootless): as root, on the sandbox's layer disk of
/// `disk_bytes` (made on the first start, mounted for the run; see
/// [`layer_disk`](super::layer_disk)), else (rootless, or a layer made
/// before it had a size) in the sandbox directory.
pub(super) fn writable_layer(
    sandbox_dir: &Path,
    base: Option<u32>,
    disk_bytes: Option<u64>,
    images_dir: &Path,
) -> Result<(PathBuf, PathBuf)> {
    let plain = sandbox_dir.join("upper");
    let on_disk = base.is_some()
        && (super::layer_disk::has_disk(sandbox_dir) || (disk_bytes.is_some() && !plain.exists()));
    let layer = if on_disk {
        if let Some(bytes) = disk_bytes {
            super::layer_disk::create(sandbox_dir, bytes, Some(images_dir))?;
        }
        super::layer_disk::mount(sandbox_dir)?.keep()
    } else {
        sandbox_dir.to_path_buf()
    };
    let upper = layer.join("upper");
    let work = layer.join("work");
    for dir in [&upper, &work] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| Error::io("creating the writable layer", Some(dir), e))?;
        let Some(base) = base else { continue };
        std::os::unix::fs::chown(dir, Some(base), Some(base)).map_err(|e| {
            Error::io(
                "handing the writable layer to the container's root",
                Some(dir),
                e,
            )
        })?;
    }
    Ok((upper, work))
}

/// Directory holding rootfs mount points: `BURROW_MOUNT_DIR`, else
/// `/run/burrow` as root and the user's runtime directory rootless.
pub(super) fn mount_dir() -> PathBuf {
    std::env::var_os("BURROW_MOUNT_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| match super::cgroups::rootless() {
            true => super::rootless::runtime_dir().join("mounts"),
            false => PathBuf::from("/run/burrow"),
        })
}

/// Creates `<mount_dir>/<container_id>` after checking that the container's
/// root will be able to reach it. It is recorded in `record` before it is
/// created, so teardown finds it even if this process dies right after.
pub(super) fn mount_point(container_id: &str, record: &Path) -> Result<PathBuf> {
    let dir = mount_dir();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&dir)
        .map_err(|e| Error::io("creating the rootfs mount directory", Some(&dir), e))?;
    // Rootless, the container's root is this user: the directory must be
    // this user's alone, and nothing else needs checking.
    let ancestors = match super::rootless::in_user_namespace() {
        true => {
            super::rootless::check_own_dir(&dir)?;
            None
        }
        false => Some(dir.ancestors()),
    };
    for ancestor in ancestors.into_iter().flatten() {
        let meta = fs::metadata(ancestor)
            .map_err(|e| Error::io("checking the rootfs mount directory", Some(ancestor), e))?;
        if meta.mode() & 0o001 == 0 {
            return Err(Error::Runtime {
                runtime: "container".into(),
                reason: format!(
                    "{} is not searchable by other users, so the container's (user-namespaced) root cannot reach its rootfs; \
                     allow o+x or set BURROW_MOUNT_DIR",
                    ancestor.display()
                ),
            });
        }
    }
    let target = dir.join(container_id);
    record_mount(record, &target)?;
    match fs::DirBuilder::new().mode(0o711).create(&target) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(Error::io(
                "creating the rootfs mount point",
                Some(&target),
                e,
            ))
        }
    }
    crate::engine::fault::point(Fault::SupervisorAfterMountPoint);
    Ok(target)
}

/// Mounts the overlay at `target`. Its layers are named to the kernel as
/// `/proc/self/fd/N` of descriptors open on them: the mount's options, in
/// the guest's mount table as in the host's, then show no host path (and
/// a path may hold the `,` and `:` that overlayfs's options cannot).
pub(super) fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()> {
    let open = |dir: &Path| {
        File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| Error::io("opening a layer of the rootfs", Some(dir), e))
    };
    let (lower, upper, work) = (open(lower)?, open(upper)?, open(work)?);
    // In a user namespace (rootless), overlayfs cannot write its
    // `trusted.*` attributes: without `userxattr` it cannot hide a lower
    // directory that is removed (rmdir fails with EIO); with it, the
    // attributes are `user.overlay.*` (Linux 5.11+).
    let userxattr = if super::rootless::in_user_namespace() {
        ",userxattr"
    } else {
        ""
    };
    let fd = |f: &File| format!("/proc/self/fd/{}", f.as_raw_fd());
    let data = format!(
        "lowerdir={},upperdir={},workdir={},index=off{userxattr}",
        fd(&lower),
        fd(&upper),
        fd(&work)
    );
    let data = CString::new(data).map_err(|_| Error::InvalidConfig {
        field: "home".into(),
        reason: "path contains NUL".into(),
    })?;
    let target_c = cstr(target).map_err(|e| Error::io("mounting the rootfs", Some(target), e))?;
    // SAFETY: all pointers are valid NUL-terminated strings for the call;
    // the layers' descriptors are open until it returns.
    let rc = unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            target_c.as_ptr(),
            c"overlay".as_ptr(),
            libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "mounting the overlay rootfs",
            Some(target),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Detaches a mount (if mounted) and removes the mount point. Idempotent.
pub(super) fn unmount(target: &Path) -> Result<()> {
    detach(target)?;
    match fs::remove_dir(target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(
            "removing the rootfs mount point",
            Some(target),
            e,
        )),
    }
}

/// Detaches every mount at `target` (none is fine).
fn detach(target: &Path) -> Result<()> {
    let c = cstr(target).map_err(|e| Error::io("unmounting the rootfs", Some(target), e))?;
    // A stacked mount point can hold several mounts: detach until none.
    for _ in 0..8 {
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } != 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::ENOENT) => break,
                // An unprivileged user outside the supervisor's namespace:
                // the mount lived in that namespace, gone with it.
                Some(libc::EPERM) if super::cgroups::rootless() => break,
                _ => return Err(Error::io("unmounting the rootfs", Some(target), e)),
            }
        }
    }
    Ok(())
}

/// Remembers a mount point in `file` so a later generation can remove it if
/// this one dies without cleaning up.
pub(super) fn record_mount(file: &Path, target: &Path) -> Result<()> {
    let mut f = File::options()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| Error::io("recording the rootfs mount", Some(file), e))?;
    f.write_all(target.as_os_str().as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .map_err(|e| Error::io("recording the rootfs mount", Some(file), e))
}

/// Unmounts every mount point recorded in `file` that lies in the mount
/// directory (never anything else, whatever the file says).
pub(super) fn unmount_recorded(file: &Path) {
    let Ok(text) = fs::read_to_string(file) else {
        return;
    };
    let dir = mount_dir();
    for line in text.lines() {
        let p = Path::new(line);
        if p.parent() == Some(dir.as_path())
            && p.file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"burrow-"))
        {
            if let Err(e) = unmount(p) {
                tracing::warn!(error = %e, "could not remove a stale rootfs mount");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn subuid_picks_roots_large_range() {
        assert_eq!(
            subuid_base("alice:100000:65536\nroot:200000:65536\n"),
            Some(200000)
        );
        assert_eq!(subuid_base("root:300000:1000\n"), None);
        assert_eq!(subuid_base("garbage\n0:400000:70000"), Some(400000));
        assert_eq!(subuid_base(""), None);
    }
}

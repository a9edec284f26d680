//! What a container binds from the host, placed so that the guest's mount
//! table says nothing of the host's layout.
//!
//! `/proc/self/mountinfo` shows, for each bind mount, the path of its
//! source inside the filesystem that holds it (the kernel computes it from
//! the source itself: binding through another path, a symlink or a file
//! descriptor shows the same). A bind of a file in the burrow home shows
//! the home (`/home/alice/.burrow/sandboxes/sb_.../hosts`), and an overlay
//! shows the paths it was given. So:
//!
//! - the generated `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf`
//!   live in a small tmpfs of the generation's own, mounted in the
//!   supervisor's private mount namespace at `<mount dir>/<container
//!   id>.etc`: the guest sees `/hosts` on `tmpfs`;
//! - the agent is bound from a link to it (a copy where a link cannot be
//!   made) in the mount directory, named by the binary's identity
//!   (`agent-<hash>`), shared by every sandbox: the guest sees
//!   `<mount dir>/agent-<hash>` (`/run/burrow/...` as root), not where
//!   burrow is installed;
//! - the overlay's layers are given as `/proc/self/fd/N` (see
//!   `rootfs::mount_overlay`).
//!
//! What still shows, for the same reason: the path, inside its filesystem,
//! of a host directory mounted into the sandbox and of a named volume
//! (`<home>/volumes/<name>`, relative to the filesystem holding the home);
//! the agent's link (`<mount dir>/agent-<hash>`, relative to the
//! filesystem holding the mount directory: `/burrow/...` when `/run` is a
//! tmpfs, `/run/burrow/...` when it is not); and the device, type and
//! options of each filesystem (`/dev/vda`, `ext4`, ...).

use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::rootfs;
use super::spec::FileMount;

/// Options of the generated files' tmpfs: a few small files.
const ETC_TMPFS: &std::ffi::CStr = c"size=256k,nr_inodes=64,mode=755";

/// The agent as the container binds it: a link to `agent_bin` (or a
/// copy) in the mount directory, made once per build of the agent.
pub(super) fn agent(agent_bin: &Path) -> Result<PathBuf> {
    agent_in(&rootfs::mount_dir(), agent_bin)
}

fn agent_in(dir: &Path, agent_bin: &Path) -> Result<PathBuf> {
    let meta = fs::metadata(agent_bin)
        .map_err(|e| Error::io("reading the guest agent", Some(agent_bin), e))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
    )
        .hash(&mut h);
    let staged = dir.join(format!("agent-{:016x}", h.finish()));
    if fs::metadata(&staged).is_ok_and(|m| m.len() == meta.len()) {
        return Ok(staged);
    }
    // The mount directory as `rootfs::mount_point` makes it.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(|e| Error::io("creating the rootfs mount directory", Some(dir), e))?;
    let fail = |e| {
        Error::io(
            "placing the guest agent for the container",
            Some(&staged),
            e,
        )
    };
    let tmp = dir.join(format!(".agent-{:016x}.{}", h.finish(), std::process::id()));
    let _ = fs::remove_file(&tmp);
    if fs::hard_link(agent_bin, &tmp).is_err() {
        // Another filesystem, or a file this user may not link: a copy.
        copy_executable(agent_bin, &tmp).map_err(fail)?;
    }
    publish(&tmp, &staged).map_err(fail)?;
    Ok(staged)
}

/// Gives the whole file `tmp` the name `staged` unless a concurrent start
/// gave it first, and never replaces it: a start that read the staged
/// file's identity (to prove, at hello, that the guest's first process
/// runs it) must find the same file bound. A link cannot replace a name;
/// a filesystem without links gets the atomic rename.
fn publish(tmp: &Path, staged: &Path) -> io::Result<()> {
    let linked = fs::hard_link(tmp, staged);
    let result = match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(_) => fs::rename(tmp, staged),
    };
    let _ = fs::remove_file(tmp);
    result
}

fn copy_executable(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = fs::File::open(from)?;
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .open(to)?;
    io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}

/// Mounts the generation's tmpfs for its generated files at `<mount
/// dir>/<id>.etc` (pushed to `mounts` and recorded in `record` first, as
/// the rootfs is) and writes `/etc/hosts`, `/etc/hostname` and, with
/// networking, `/etc/resolv.conf` in it. Returns the directory and the
/// files' mounts.
pub(super) fn generated_files(
    id: &str,
    record: &Path,
    mounts: &mut Vec<PathBuf>,
    hostname: &str,
    network: bool,
) -> Result<(PathBuf, Vec<FileMount>)> {
    let dir = rootfs::mount_point(&format!("{id}.etc"), record)?;
    mounts.push(dir.clone());
    let target = rootfs::cstr(&dir).map_err(|e| Error::io("mounting a tmpfs", Some(&dir), e))?;
    // SAFETY: valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            ETC_TMPFS.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "mounting the tmpfs of the generated guest files",
            Some(&dir),
            io::Error::last_os_error(),
        ));
    }
    let mut files = Vec::from(identity_files(hostname));
    if network {
        files.push((
            "resolv.conf",
            "/etc/resolv.conf",
            super::network::resolv_conf(),
        ));
    }
    let mounts = files
        .into_iter()
        .map(|(name, target, text)| {
            let source = dir.join(name);
            fs::write(&source, text)
                .map_err(|e| Error::io("writing a generated guest file", Some(&source), e))?;
            Ok(FileMount { source, target })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((dir, mounts))
}

/// The generated files that carry the hostname: the file's name in the
/// generated files' directory, its place in the guest, its contents.
pub(super) fn identity_files(hostname: &str) -> [(&'static str, &'static str, String); 2] {
    [
        ("hosts", "/etc/hosts", format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n")),
        ("hostname", "/etc/hostname", format!("{hostname}\n")),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_placed_once_per_build() {
        let mount_dir = tempfile::tempdir().unwrap();
        let dir = mount_dir.path();
        let src_dir = tempfile::tempdir().unwrap();
        let bin = src_dir.path().join("burrow-agent");
        fs::write(&bin, b"#!agent").unwrap();
        let placed = agent_in(dir, &bin).unwrap();
        assert_eq!(placed.parent(), Some(dir));
        let name = placed.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("agent-") && name.len() == 22, "{name}");
        assert_eq!(fs::read(&placed).unwrap(), b"#!agent");
        // Again: the same file; another build: another one.
        assert_eq!(agent_in(dir, &bin).unwrap(), placed);
        fs::remove_file(&bin).unwrap();
        fs::write(&bin, b"#!agent, rebuilt").unwrap();
        let rebuilt = agent_in(dir, &bin).unwrap();
        assert_ne!(rebuilt, placed);
        assert_eq!(fs::read(&rebuilt).unwrap(), b"#!agent, rebuilt");
        // Nothing half-made is left behind.
        let names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| n.starts_with("agent-")), "{names:?}");
    }

    /// Two starts placing the same build at once (copies: another
    /// filesystem, or a file this user may not link): the second keeps the
    /// first's file, which the first has already proven against.
    #[test]
    fn a_placed_agent_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let staged = dir.path().join("agent-0000000000000000");
        fs::write(&staged, b"#!agent").unwrap();
        let first = fs::metadata(&staged).unwrap().ino();
        let tmp = dir.path().join(".agent-0000000000000000.2");
        fs::write(&tmp, b"#!agent").unwrap();
        publish(&tmp, &staged).unwrap();
        assert_eq!(fs::metadata(&staged).unwrap().ino(), first);
        assert!(!tmp.exists());
    }
}

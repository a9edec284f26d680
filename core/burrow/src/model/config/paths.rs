//! Guest paths of a configuration: mount targets and the working directory.
//!
//! A mount target is refused unless it is written in its one canonical
//! spelling (absolute, no empty, `.` or `..` components, no trailing `/`),
//! so the string every driver hands to its runtime is the string checked
//! here. It may not be `/`, nor at or under a directory of
//! [`RESERVED_MOUNT_DIRS`]: the container driver runs the guest agent from
//! `/.burrow/agent` (a mount there would replace PID 1, which installs the
//! seccomp filter, with a file of the tenant's), and the runtime mounts the
//! kernel's file systems at `/proc`, `/sys` and `/dev` before the sandbox's
//! own mounts (a mount there would hide or replace them). The vm driver's
//! agent lives in the initramfs, out of reach of every guest path once the
//! overlay is the root, and its guest kernel is the boundary; the same
//! targets are refused for it so a configuration means the same under
//! every driver.
//!
//! The working directory may be spelled loosely (the drivers normalise
//! it) but may not be at or under `/proc`: a working directory there
//! (`/proc/self/fd/N`) is how a process escapes through a descriptor the
//! runtime leaked (CVE-2024-21626).

use crate::error::{Error, Result};

/// Guest directories no mount may be at or under (see the module docs).
pub const RESERVED_MOUNT_DIRS: [&str; 4] = ["/.burrow", "/proc", "/sys", "/dev"];

fn invalid(field: &str, reason: String) -> Error {
    Error::InvalidConfig {
        field: field.into(),
        reason,
    }
}

/// An absolute guest path of at most 4096 bytes, without NUL or `..`.
pub(super) fn check_guest_path(field: &str, p: &str) -> Result<()> {
    let ok = p.starts_with('/')
        && p.len() <= 4096
        && !p.contains('\0')
        && !p.split('/').any(|c| c == "..");
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{p:?} is not an absolute guest path without '..'"),
        ))
    }
}

/// `p` (absolute, without `..`) with repeated `/`, `.` components and a
/// trailing `/` taken out: `//proc/./sys/` is `/proc/sys`.
pub(super) fn normalize(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// Whether the normalised path `p` is `dir` or under it.
fn at_or_under(p: &str, dir: &str) -> bool {
    p.strip_prefix(dir)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Checks a mount target (see the module docs).
pub(super) fn check_mount_target(field: &str, target: &str) -> Result<()> {
    check_guest_path(field, target)?;
    let normal = normalize(target);
    if normal == "/" {
        return Err(invalid(
            field,
            "cannot mount over / (it holds the guest agent and the kernel's file systems)".into(),
        ));
    }
    if let Some(dir) = RESERVED_MOUNT_DIRS.iter().find(|d| at_or_under(&normal, d)) {
        return Err(invalid(
            field,
            format!("{target:?} is at or under {dir}, which belongs to burrow or the guest kernel"),
        ));
    }
    if normal != target {
        return Err(invalid(
            field,
            format!("{target:?} is not a canonical guest path; write it as {normal:?}"),
        ));
    }
    Ok(())
}

/// Checks the working directory (see the module docs).
pub(super) fn check_workdir(field: &str, workdir: &str) -> Result<()> {
    check_guest_path(field, workdir)?;
    if at_or_under(&normalize(workdir), "/proc") {
        return Err(invalid(
            field,
            format!("{workdir:?} is under /proc, which cannot be a working directory"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(target: &str) -> bool {
        match check_mount_target("mounts[0].target", target) {
            Err(Error::InvalidConfig { field, .. }) => {
                assert_eq!(field, "mounts[0].target");
                true
            }
            Err(e) => panic!("{target:?}: unexpected {e:?}"),
            Ok(()) => false,
        }
    }

    #[test]
    fn normalizing() {
        for (given, normal) in [
            ("/", "/"),
            ("//", "/"),
            ("/.", "/"),
            ("/./", "/"),
            ("//proc", "/proc"),
            ("/proc/.", "/proc"),
            ("/./proc", "/proc"),
            ("/proc/", "/proc"),
            ("/a//b/./c/", "/a/b/c"),
            ("/.burrow/agent", "/.burrow/agent"),
        ] {
            assert_eq!(normalize(given), normal, "{given:?}");
        }
    }

    #[test]
    fn the_agent_and_the_kernels_dirs_cannot_be_mount_targets() {
        for t in [
            "/",
            "//",
            "/.",
            "/./",
            "/.burrow",
            "/.burrow/",
            "/.burrow/agent",
            "/.burrow/x/y",
            "//.burrow",
            "/./.burrow",
            "/.burrow/.",
            "//.burrow//agent",
            "/proc",
            "/proc/",
            "//proc",
            "/proc/.",
            "/./proc",
            "/proc/sys",
            "/proc/sys/kernel",
            "/proc//sys",
            "/sys",
            "/sys/x",
            "/sys/fs/cgroup",
            "///sys",
            "/dev",
            "/dev/shm",
            "/dev/pts",
            "/dev/./shm",
            "/dev/",
            "/a/..",
            "/..",
            "relative",
            "",
            "/with\0nul",
        ] {
            assert!(refused(t), "{t:?} was accepted");
        }
    }

    #[test]
    fn non_canonical_spellings_are_refused() {
        for t in ["/data/", "//data", "/./data", "/data/.", "/a//b", "/a/./b"] {
            assert!(refused(t), "{t:?} was accepted");
        }
    }

    #[test]
    fn ordinary_targets_and_lookalikes_are_accepted() {
        for t in [
            "/data",
            "/mnt/data",
            "/.burrowed",
            "/.burrow2",
            "/burrow",
            "/procs",
            "/proc2/x",
            "/system",
            "/devices",
            "/home/dev",
            "/srv/proc",
            "/.hidden",
            "/a.b/..c",
        ] {
            assert!(!refused(t), "{t:?} was refused");
        }
    }

    #[test]
    fn workdirs_under_proc_are_refused() {
        for w in [
            "/proc",
            "/proc/self/fd/7",
            "//proc/./self",
            "/./proc/1/cwd",
            "/proc/",
        ] {
            assert_eq!(
                check_workdir("workdir", w).unwrap_err().code(),
                crate::ErrorCode::InvalidConfig,
                "{w:?}"
            );
        }
        for w in [
            "/",
            "/app",
            "/app/",
            "//srv/./x",
            "/procs",
            "/sys",
            "/dev/shm",
        ] {
            check_workdir("workdir", w).unwrap();
        }
    }
}

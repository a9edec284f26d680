//! Rootless operation: the supervisor of an unprivileged user enters a user
//! namespace of its own, in which that user is root, before anything else.
//!
//! The namespace maps root to the user and, where `/etc/subuid` and
//! `/etc/subgid` give the user subordinate ranges (and the distribution's
//! `newuidmap`/`newgidmap` are installed), ids `1..=N` to the first range,
//! as podman does. Without ranges it maps root alone (a single-id map the
//! kernel lets any user write). Inside it the driver works as it does for
//! root: a private mount namespace, the overlay rootfs, the OCI runtime
//! (which sees a user namespace and runs without cgroups of its own), pasta.
//! Containers then run in this namespace instead of one of their own: their
//! root is the user, never the host's root.
//!
//! `newuidmap` is a set-uid helper that must run outside the new namespace
//! (a set-uid bit means nothing inside it), so a child forked before the
//! unshare writes the maps once the parent has entered it.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A subordinate id range of `/etc/subuid` or `/etc/subgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u32,
    pub count: u32,
}

/// The first range of `user` (by name or by numeric id) in a subid file's
/// text (`name:start:count` lines).
pub(crate) fn subordinate_range(text: &str, name: Option<&str>, id: u32) -> Option<Range> {
    let id = id.to_string();
    text.lines().find_map(|line| {
        let mut f = line.trim().split(':');
        let (who, start, count) = (f.next()?, f.next()?, f.next()?);
        if who != id && Some(who) != name {
            return None;
        }
        let range = Range {
            start: start.parse().ok()?,
            count: count.parse().ok()?,
        };
        (range.count > 0).then_some(range)
    })
}

/// Whether this process runs in a user namespace other than the initial
/// one (its uid map is not the identity over all ids).
pub(crate) fn in_user_namespace() -> bool {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let full: Vec<&str> = map.split_whitespace().collect();
    full != ["0", "0", "4294967295"]
}

/// The host uid this namespace's root is (this process's own outside a
/// user namespace).
pub(crate) fn host_uid() -> u32 {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let root = map.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == "0").then(|| f.next()?.parse().ok())?
    });
    // SAFETY: getuid has no preconditions.
    root.unwrap_or_else(|| unsafe { libc::getuid() })
}

/// The user's runtime directory for burrow: `$XDG_RUNTIME_DIR/burrow`, else
/// `/tmp/burrow-<uid>` (0700; this user's own, never a link).
pub(crate) fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("burrow"),
        None => PathBuf::from(format!("/tmp/burrow-{}", host_uid())),
    }
}

/// Refuses a directory (or any of its ancestors up to the runtime
/// directory) that is a link, or that another user owns or may write to.
pub(crate) fn check_own_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let top = runtime_dir();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for d in dir.ancestors().take_while(|d| d.starts_with(&top)) {
        let meta = std::fs::symlink_metadata(d)
            .map_err(|e| Error::io("checking the rootfs mount directory", Some(d), e))?;
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
            return Err(Error::Runtime {
                runtime: "container".into(),
                reason: format!(
                    "{} is not a directory of this user's alone; remove it or set BURROW_MOUNT_DIR",
                    d.display()
                ),
            });
        }
    }
    Ok(())
}

/// The size of this process's uid map (1 for a single-id map).
pub(crate) fn mapped_ids() -> u64 {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    map.lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum()
}

/// Refuses an image user this namespace does not map (a user without
/// subordinate ids has root alone).
pub(crate) fn check_mapped(uid: u32, gid: u32, image: &str) -> Result<()> {
    let mapped = mapped_ids();
    if u64::from(uid.max(gid)) < mapped {
        return Ok(());
    }
    Err(Error::InvalidImage {
        image: image.to_owned(),
        reason: format!(
            "it runs as uid {uid}/gid {gid}, and this user's namespace maps {mapped} id(s): give the user subordinate ids (/etc/subuid, /etc/subgid; `burrow doctor` says how)"
        ),
    })
}

/// Removes `dir` as root of a user namespace of this user's (entered here:
/// call it only in a process of its own, single-threaded). Rootless
/// sandboxes leave files of their subordinate ids, and overlayfs work
/// directories of mode 0, which the user cannot remove from outside.
pub fn remove_in_user_namespace(dir: &Path) -> Result<()> {
    enter(&Mapping::for_current_user())?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(
            "removing a rootless sandbox's directory",
            Some(dir),
            e,
        )),
        _ => Ok(()),
    }
}

/// Removes a directory tree that rootless sandboxes may have left files in
/// that this user cannot remove by itself: tried directly first, then by
/// the supervisor program in a user namespace (`__remove DIR`).
pub(crate) async fn remove_tree(dir: &Path) -> Result<()> {
    let direct = std::fs::remove_dir_all(dir);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match direct {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if root || e.kind() != io::ErrorKind::PermissionDenied => {
            return Err(Error::io("removing a directory", Some(dir), e))
        }
        Err(_) => {}
    }
    helper(&["__remove".as_ref(), dir.as_os_str()], "removing").await
}

/// Runs the supervisor program's internal entry `args` (one that enters a
/// user namespace of this user's, as `__remove` and `__layer` do); `doing`
/// says what for, in errors.
pub(crate) async fn helper(args: &[&std::ffi::OsStr], doing: &str) -> Result<()> {
    let program = crate::engine::procs::supervisor_bin().ok_or_else(|| Error::Runtime {
        runtime: "supervisor".into(),
        reason: format!(
            "{doing} in a user namespace needs the supervisor program, which was not found"
        ),
    })?;
    let out = tokio::process::Command::new(&program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| {
            Error::io(
                format!("running the supervisor program for {doing}"),
                Some(&program),
                e,
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Runtime {
        runtime: "supervisor".into(),
        reason: format!(
            "{doing} in the user namespace failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings in `pwd`
    // point into `buf`, which outlives their use here.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

fn find_helper(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// How this user's namespace will be mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Root and the subordinate ranges, written by the set-uid helpers.
    Ranges {
        uid: u32,
        gid: u32,
        uids: Range,
        gids: Range,
        newuidmap: PathBuf,
        newgidmap: PathBuf,
    },
    /// Root alone (no ranges, or no helpers).
    Single { uid: u32, gid: u32 },
}

impl Mapping {
    /// The mapping this host offers the current user.
    pub(crate) fn for_current_user() -> Mapping {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let name = user_name(uid);
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let uids = subordinate_range(&read("/etc/subuid"), name.as_deref(), uid);
        let gids = subordinate_range(&read("/etc/subgid"), name.as_deref(), gid)
            .or_else(|| subordinate_range(&read("/etc/subgid"), name.as_deref(), uid));
        match (
            uids,
            gids,
            find_helper("newuidmap"),
            find_helper("newgidmap"),
        ) {
            (Some(uids), Some(gids), Some(newuidmap), Some(newgidmap)) => Mapping::Ranges {
                uid,
                gid,
                uids,
                gids,
                newuidmap,
                newgidmap,
            },
            _ => Mapping::Single { uid, gid },
        }
    }

    /// Ids mapped besides root.
    pub(crate) fn extra_ids(&self) -> u32 {
        match self {
            Mapping::Ranges { uids, gids, .. } => uids.count.min(gids.count),
            Mapping::Single { .. } => 0,
        }
    }
}

fn os_err(what: &str) -> Error {
    Error::io(what, None, io::Error::last_os_error())
}

/// Enters a new user namespace mapped by `mapping` (then a private mount
/// namespace is the caller's next step). Must run while the process is
/// single-threaded.
pub(crate) fn enter(mapping: &Mapping) -> Result<()> {
    match mapping {
        Mapping::Single { uid, gid } => {
            unshare_user()?;
            write_file("/proc/self/setgroups", "deny")?;
            write_file("/proc/self/uid_map", &format!("0 {uid} 1"))?;
            write_file("/proc/self/gid_map", &format!("0 {gid} 1"))?;
        }
        Mapping::Ranges {
            uid,
            gid,
            uids,
            gids,
            newuidmap,
            newgidmap,
        } => {
            let count = uids.count.min(gids.count);
            let uid_args = [0, *uid, 1, 1, uids.start, count].map(|n| n.to_string());
            let gid_args = [0, *gid, 1, 1, gids.start, count].map(|n| n.to_string());
            map_by_helpers(&[
                (newuidmap.as_path(), &uid_args),
                (newgidmap.as_path(), &gid_args),
            ])?;
        }
    }
    // Our ids are now root's in the namespace, with every capability in it.
    // SAFETY: plain syscalls on integers.
    unsafe {
        if libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0 {
            return Err(os_err("becoming root in the user namespace"));
        }
    }
    Ok(())
}

fn unshare_user() -> Result<()> {
    // SAFETY: unshare with a flag; single-threaded by the caller's contract.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return Err(Error::Runtime {
            runtime: "user namespace".into(),
            reason: format!(
                "an unprivileged user runs sandboxes in a user namespace, and this host refused one ({}); see `burrow doctor`",
                io::Error::last_os_error()
            ),
        });
    }
    Ok(())
}

fn write_file(path: &str, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| {
        Error::io(
            "writing the user namespace's maps",
            Some(Path::new(path)),
            e,
        )
    })
}

/// Forks a child that waits until this process has unshared its user
/// namespace, then runs each helper on it (`helper <pid> <args>...`).
fn map_by_helpers(helpers: &[(&Path, &[String; 6])]) -> Result<()> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() }.to_string();
    // Everything the child runs is prepared before the fork: it only reads,
    // forks and execs.
    let mut argvs = Vec::new();
    for (helper, args) in helpers {
        let mut argv = vec![
            cstring(helper.as_os_str().as_encoded_bytes())?,
            cstring(pid.as_bytes())?,
        ];
        for a in args.iter() {
            argv.push(cstring(a.as_bytes())?);
        }
        argvs.push(argv);
    }
    let mut fds = [0; 2];
    // SAFETY: a valid array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("creating a pipe for the user namespace's helper"));
    }
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the process is single-threaded (the caller's contract), so
    // the child may run ordinary code; it only calls async-signal-safe
    // functions anyway.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(os_err("forking the user namespace's helper"));
    }
    if child == 0 {
        // SAFETY: in the child: close, read, fork, execv, waitpid, _exit on
        // values prepared before the fork.
        unsafe {
            libc::close(wr);
            let mut b = 0u8;
            if libc::read(rd, (&mut b as *mut u8).cast(), 1) != 1 {
                libc::_exit(2);
            }
            for argv in &argvs {
                let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
                ptrs.push(std::ptr::null());
                let helper = libc::fork();
                if helper == 0 {
                    libc::execv(ptrs[0], ptrs.as_ptr());
                    libc::_exit(127);
                }
                let mut status = 0;
                if helper < 0
                    || libc::waitpid(helper, &mut status, 0) != helper
                    || !libc::WIFEXITED(status)
                    || libc::WEXITSTATUS(status) != 0
                {
                    libc::_exit(3);
                }
            }
            libc::_exit(0);
        }
    }
    // SAFETY: our copy of the read end.
    unsafe { libc::close(rd) };
    let entered = unshare_user();
    // Wake the child either way: on failure it maps nothing we live in.
    // SAFETY: a one-byte write and a close of our own descriptor.
    unsafe {
        let b = u8::from(entered.is_ok());
        if entered.is_ok() {
            libc::write(wr, (&b as *const u8).cast(), 1);
        }
        libc::close(wr);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    entered?;
    if waited != child || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(Error::Runtime {
            runtime: "newuidmap".into(),
            reason: format!(
                "mapping the user's subordinate ids into its namespace failed (helper status {status}); check /etc/subuid and /etc/subgid"
            ),
        });
    }
    Ok(())
}

fn cstring(bytes: &[u8]) -> Result<CString> {
    CString::new(bytes).map_err(|e| {
        Error::io(
            "preparing the user namespace's helper",
            None,
            io::Error::new(io::ErrorKind::InvalidInput, e),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_ranges_by_name_or_id() {
        let text = "alice:100000:65536\n1001:200000:1000\nbob:300000:0\n";
        assert_eq!(
            subordinate_range(text, Some("alice"), 1000),
            Some(Range {
                start: 100000,
                count: 65536
            })
        );
        assert_eq!(
            subordinate_range(text, Some("carol"), 1001),
            Some(Range {
                start: 200000,
                count: 1000
            })
        );
        // An empty range is no range.
        assert_eq!(subordinate_range(text, Some("bob"), 1002), None);
        assert_eq!(subordinate_range("", Some("alice"), 1000), None);
    }
}

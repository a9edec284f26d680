//! Which cgroup controllers this host offers us, so limits that cannot be
//! enforced are left out of the OCI config (the runtime would refuse the
//! whole container) and reported as plain-language notes instead.

use std::path::Path;

/// Controllers relevant to the limits we set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Controllers {
    /// The host runs cgroup v2 only.
    pub unified: bool,
    pub memory: bool,
    /// Memory+swap accounting (v1 `memory.memsw.*`, v2 `memory.swap.max`).
    pub swap: bool,
    pub cpu: bool,
    pub pids: bool,
    pub freezer: bool,
}

impl Controllers {
    /// Reads `/proc/self/mountinfo` and the cgroup files of this process.
    /// Rootless, only a cgroup v2 subtree delegated to the user (one whose
    /// files it may write, as systemd's user slices are) offers any.
    pub(super) fn detect() -> Controllers {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let rootless = rootless();
        let c = Self::from_host(
            &mountinfo,
            &own,
            |p| std::fs::read_to_string(p).ok(),
            |p| p.exists(),
        );
        if rootless && !(c.unified && delegated(&own)) {
            return Controllers::default();
        }
        c
    }

    fn from_host(
        mountinfo: &str,
        own_cgroup: &str,
        read: impl Fn(&Path) -> Option<String>,
        exists: impl Fn(&Path) -> bool,
    ) -> Controllers {
        let mut c = Controllers::default();
        let mut v1_memory_mount = None;
        let mut v2_root = None;
        for line in mountinfo.lines() {
            // "<id> <parent> <dev> <root> <mountpoint> <opts> ... - <fstype> <source> <super opts>"
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mountpoint = left.split(' ').nth(4).unwrap_or_default();
            let mut r = right.split(' ');
            let (fstype, _source, sopts) = (
                r.next().unwrap_or_default(),
                r.next(),
                r.next().unwrap_or_default(),
            );
            match fstype {
                "cgroup" => {
                    for opt in sopts.split(',') {
                        match opt {
                            "memory" => {
                                c.memory = true;
                                v1_memory_mount = Some(mountpoint.to_owned());
                            }
                            "cpu" => c.cpu = true,
                            "pids" => c.pids = true,
                            "freezer" => c.freezer = true,
                            _ => {}
                        }
                    }
                }
                "cgroup2" if mountpoint == "/sys/fs/cgroup" => {
                    v2_root = Some(mountpoint.to_owned())
                }
                _ => {}
            }
        }
        if let Some(m) = v1_memory_mount {
            c.swap = exists(&Path::new(&m).join("memory.memsw.limit_in_bytes"));
            return c;
        }
        if let Some(root) = v2_root {
            // Controllers available to children of our own cgroup.
            let own = own_cgroup
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            let dir = Path::new(&root).join(own.trim_start_matches('/'));
            let list = read(&dir.join("cgroup.controllers")).unwrap_or_default();
            let has = |n: &str| list.split_whitespace().any(|x| x == n);
            c = Controllers {
                unified: true,
                memory: has("memory"),
                swap: has("memory") && exists(&dir.join("memory.swap.max")),
                cpu: has("cpu"),
                pids: has("pids"),
                // The v2 freezer is built into every cgroup.
                freezer: exists(&dir.join("cgroup.freeze")),
            };
        }
        c
    }
}

/// Whether cgroups are an unprivileged user's: this process is not root,
/// or root of a user namespace only (the rootless supervisor).
pub(super) fn rootless() -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    euid != 0 || super::rootless::in_user_namespace()
}

/// Whether this process may create cgroups below its own (v2): the
/// directory and its `cgroup.subtree_control` are writable by it.
fn delegated(own_cgroup: &str) -> bool {
    let own = own_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    let dir = Path::new("/sys/fs/cgroup").join(own.trim_start_matches('/'));
    let writable = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            // SAFETY: access(2) on a valid NUL-terminated path.
            .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
    };
    writable(&dir) && writable(&dir.join("cgroup.subtree_control"))
}

/// Removes the cgroups the runtime left behind for containers whose id
/// `matches` (a runtime killed mid-creation, or a container that outlived a
/// dead supervisor). The runtime puts them at `burrow/<id>` either below our
/// own cgroup or below the hierarchy's root, so both places are swept.
///
/// Callers only name containers that must be gone (an abandoned or ended
/// generation, or earlier generations while the name's runtime lock is
/// held), so a process still inside is killed: a `runc init` whose `run`
/// was killed between joining the cgroups and writing its state waits on
/// its exec fifo forever, and `delete` does not know it. The cgroup is
/// removed once empty (retried for up to about 200 ms while the killed
/// processes exit).
pub(super) fn remove_leftovers(matches: impl Fn(&str) -> bool) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut found = Vec::new();
    for dir in parent_dirs(&mountinfo, &own) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_str().is_some_and(&matches) {
                found.push(entry.path());
            }
        }
    }
    for attempt in 0..40 {
        found.retain(|cgroup| {
            if std::fs::remove_dir(cgroup).is_ok() {
                return false;
            }
            let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on a pid read from the cgroup of a
                // container that must be gone.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            cgroup.exists()
        });
        if found.is_empty() {
            return;
        }
        if attempt < 39 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    for cgroup in found {
        tracing::debug!(cgroup = %cgroup.display(), "leftover cgroup not removed");
    }
}

/// The memory limit of process `pid`'s cgroup in bytes (`memory.max` on
/// cgroup v2, `memory.limit_in_bytes` on v1); `None` when unlimited or
/// unreadable.
pub(super) fn memory_limit(pid: i32) -> Option<u64> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let file = memory_limit_file(&mountinfo, &cgroup)?;
    parse_limit(&std::fs::read_to_string(file).ok()?)
}

/// Where the memory limit of the cgroup named in `cgroup` (a
/// `/proc/PID/cgroup`) is, given the mounts of `mountinfo`: the v1 memory
/// hierarchy if it is mounted, else the unified one.
fn memory_limit_file(mountinfo: &str, cgroup: &str) -> Option<std::path::PathBuf> {
    let (dir, v1) = cgroup_dir(mountinfo, cgroup, "memory")?;
    Some(dir.join(if v1 {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    }))
}

/// The directory of the cgroup named in `cgroup` (a `/proc/PID/cgroup`),
/// given the mounts of `mountinfo`: in the v1 hierarchy of `controller` if
/// it is mounted (then `true`), else in the unified one.
fn cgroup_dir(
    mountinfo: &str,
    cgroup: &str,
    controller: &str,
) -> Option<(std::path::PathBuf, bool)> {
    let mut v2 = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut l = left.split(' ');
        let root = l.nth(3).unwrap_or_default();
        let mountpoint = Path::new(l.next().unwrap_or_default());
        let mut r = right.split(' ');
        let (fstype, sopts) = (r.next().unwrap_or_default(), r.nth(1).unwrap_or_default());
        let relative = |path: &str| {
            let path = path.strip_prefix(root).unwrap_or(path);
            mountpoint.join(path.trim_start_matches('/'))
        };
        if fstype == "cgroup" && sopts.split(',').any(|o| o == controller) {
            let path = cgroup.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then_some(path)
            })?;
            return Some((relative(path), true));
        }
        if fstype == "cgroup2" {
            v2 = cgroup
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|path| (relative(path), false));
        }
    }
    v2
}

/// Keeps the kernel's cgroup migration lock in its fast state while a
/// container is being placed in its cgroups; stops when dropped.
///
/// Moving a process into a cgroup takes `cgroup_threadgroup_rwsem` for
/// writing, and that writer first waits out a whole RCU grace period
/// unless another migration ran within about the last one (the lock's
/// `rcu_sync`). The runtime's own placement of the container paid that
/// idle wait on every start: 9 to 14 ms of a 25 ms crun launch on this
/// host's kernel. Re-placing this process in the cgroup it is already in
/// (a migration that moves nothing) every 2 ms from the start of a launch
/// pays the wait once, beside the rootfs and config work, and keeps the
/// lock fast until the runtime's placement is done. Best effort: where the
/// file cannot be written nothing changes but the start's speed.
pub(crate) struct MigrationLockWarmer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl MigrationLockWarmer {
    /// Starts re-placing this process in its own cgroup every 2 ms, on a
    /// thread of its own (a write may block for a grace period).
    pub(crate) fn start() -> MigrationLockWarmer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("burrow-cgroup-warm".into())
            .spawn(move || {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
                let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
                let Some((dir, _)) = cgroup_dir(&mountinfo, &own, "pids") else {
                    return;
                };
                let Ok(mut procs) = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                else {
                    return;
                };
                let pid = std::process::id().to_string();
                while !flag.load(Ordering::Relaxed) {
                    use std::io::Write;
                    if procs.write_all(pid.as_bytes()).is_err() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "the cgroup lock warmer did not start");
        }
        MigrationLockWarmer { stop }
    }
}

impl Drop for MigrationLockWarmer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A limit file's value: `max` (v2) or the v1 "unlimited" (the largest
/// page-aligned 63-bit value) is `None`.
fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

/// Every `burrow` directory container cgroups may be created in.
fn parent_dirs(mountinfo: &str, own_cgroup: &str) -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mountpoint = Path::new(left.split(' ').nth(4).unwrap_or_default());
        let mut r = right.split(' ');
        let (fstype, sopts) = (r.next().unwrap_or_default(), r.nth(1).unwrap_or_default());
        let opts: Vec<&str> = sopts.split(',').collect();
        let own = own_cgroup.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let fits = match fstype {
                "cgroup2" => controllers.is_empty(),
                "cgroup" => {
                    !controllers.is_empty() && controllers.split(',').all(|c| opts.contains(&c))
                }
                _ => false,
            };
            fits.then_some(path)
        });
        if fstype == "cgroup" || fstype == "cgroup2" {
            dirs.push(mountpoint.join("burrow"));
            if let Some(own) = own.filter(|p| *p != "/") {
                dirs.push(mountpoint.join(own.trim_start_matches('/')).join("burrow"));
            }
        }
    }
    dirs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";

    #[test]
    fn hybrid_hosts_use_v1_controllers() {
        let c = Controllers::from_host(
            HYBRID,
            "",
            |_| None,
            |p| p.ends_with("memory.memsw.limit_in_bytes"),
        );
        assert_eq!(
            c,
            Controllers {
                unified: false,
                memory: true,
                swap: true,
                cpu: true,
                pids: false,
                freezer: true
            }
        );
    }

    #[test]
    fn the_memory_limit_is_read_from_the_process_cgroup() {
        let cgroup = "8:pids:/burrow/c-1\n4:memory:/outer/x/burrow/c-1\n0::/\n";
        assert_eq!(
            memory_limit_file(HYBRID, cgroup).unwrap(),
            Path::new("/sys/fs/cgroup/memory/outer/x/burrow/c-1/memory.limit_in_bytes")
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(
            memory_limit_file(unified, "0::/burrow/c-1\n").unwrap(),
            Path::new("/sys/fs/cgroup/burrow/c-1/memory.max")
        );
        assert_eq!(parse_limit("67108864\n"), Some(64 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
    }

    #[test]
    fn the_lock_warmer_writes_to_our_own_cgroup() {
        let cgroup = "8:pids:/outer/y\n4:memory:/outer/x\n0::/\n";
        let pids = "36 31 0:33 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids";
        assert_eq!(
            cgroup_dir(&format!("{HYBRID}\n{pids}"), cgroup, "pids").unwrap(),
            (Path::new("/sys/fs/cgroup/pids/outer/y").to_owned(), true)
        );
        // Without a v1 pids hierarchy: the unified one.
        assert_eq!(
            cgroup_dir(HYBRID, cgroup, "pids").unwrap(),
            (Path::new("/sys/fs/cgroup/unified").to_owned(), false)
        );
    }

    /// On this host: a running warmer moves this process nowhere.
    #[test]
    fn the_lock_warmer_leaves_the_process_where_it_is() {
        let before = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let warmer = MigrationLockWarmer::start();
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(warmer);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            std::fs::read_to_string("/proc/self/cgroup").unwrap(),
            before
        );
    }

    #[test]
    fn leftovers_are_swept_below_root_and_own_cgroup() {
        let own = "4:memory:/outer/x\n1:cpu:/\n0::/\n";
        let dirs = parent_dirs(HYBRID, own);
        let has = |p: &str| dirs.iter().any(|d| d == Path::new(p));
        assert!(has("/sys/fs/cgroup/memory/burrow"));
        assert!(has("/sys/fs/cgroup/memory/outer/x/burrow"));
        assert!(has("/sys/fs/cgroup/cpu/burrow"));
        assert!(has("/sys/fs/cgroup/unified/burrow"));
        assert!(!has("/sys/fs/cgroup/burrow"), "{dirs:?}");
    }

    #[test]
    fn unified_hosts_read_our_cgroup() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        let c = Controllers::from_host(
            mi,
            "0::/user.slice/x\n",
            |p| {
                (p == Path::new("/sys/fs/cgroup/user.slice/x/cgroup.controllers"))
                    .then(|| "cpu pids".to_owned())
            },
            |_| true,
        );
        assert_eq!(
            c,
            Controllers {
                unified: true,
                memory: false,
                swap: false,
                cpu: true,
                pids: true,
                freezer: true
            }
        );
    }
}

//! The default seccomp profile: Docker's default allowlist, resolved for the
//! fixed capability set the container driver grants.
//!
//! Docker's profile (moby `profiles/seccomp/default.json`) allows a list of
//! syscalls unconditionally and a few more depending on capabilities, kernel
//! version and architecture. Our containers always get the same capability
//! set (see [`super::spec::CAPABILITIES`]: no `CAP_SYS_ADMIN`, `CAP_SYS_PTRACE`
//! ...) on x86, so the conditions are evaluated here once: what remains is a
//! plain allowlist plus the argument filters for `clone`, `personality` and
//! `socket`. Everything else fails with `EPERM`, `clone3` with `ENOSYS` so
//! libc falls back to `clone`. Names the runtime's libseccomp does not know
//! are skipped by runc and crun, so newer syscalls may be listed.
//!
//! Only the native x86-64 syscall ABI is allowed: the 32-bit (`int 0x80`,
//! i386 binaries) and x32 ABIs are refused, a smaller kernel surface than
//! Docker's, and a much cheaper filter to build (libseccomp's rewriting of
//! the 32-bit multiplexed calls made up most of a container's start).
//! `BURROW_SECCOMP_COMPAT32=1` on the host allows them again, for images
//! that run 32-bit x86 binaries.
//!
//! The runtime installs it, so the sandbox's first process is filtered
//! from its first instruction whatever file it runs: crun from the program
//! `bpf` compiles (the `run.oci.seccomp_bpf_data` annotation, no
//! libseccomp build at start), runc and runsc from this profile's JSON (a
//! runtime that does not know the annotation reads the JSON too). The
//! agent installs the same program once more as its first step, a second
//! layer. A sandbox's `seccomp_allow` adds syscalls to both (the operator's
//! choice: `burrow serve` refuses it to every tenant but the default one).
//!
//! Unlike the Docker profile this list started from, `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register` are not allowed (they fail with
//! `EPERM`): io_uring has been the source of a long run of kernel privilege
//! escalations, its operations bypass the syscall filter (a ring can do what
//! the filter forbids as a syscall), and Docker, ChromeOS and Android block
//! it the same way. Programs that try it fall back to ordinary syscalls.

use serde_json::{json, Value};

/// Syscalls allowed without argument filters.
pub(super) const ALLOWED: &[&str] = &[
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "bind",
    "brk",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_time64",
    "futex_waitv",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "ioctl",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "_llseek",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "madvise",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "name_to_handle_at",
    "nanosleep",
    "newfstatat",
    "_newselect",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pselect6_time64",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "send",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setuid32",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    "socketcall",
    "socketpair",
    "splice",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
    // Docker allows these from kernel 4.8 on (ptrace can no longer bypass
    // seccomp there).
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    // x86 only.
    "arch_prctl",
    "modify_ldt",
    // Granted with CAP_SYS_CHROOT, which is in our capability set.
    "chroot",
];

/// Namespace-creating `clone` flags; `clone` is allowed only without them
/// (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
/// CLONE_NEWNET | CLONE_NEWCGROUP).
pub(super) const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// `personality` values Docker allows (PER_LINUX, UNAME26, PER_LINUX32,
/// PER_LINUX32|UNAME26, query).
pub(super) const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// `AF_VSOCK`: sockets of this family are refused.
pub(super) const AF_VSOCK: u64 = 40;

/// The `linux.seccomp` section of the OCI config for `runtime`, with the
/// syscalls `extra` names (the sandbox's `seccomp_allow`) allowed outright.
///
/// runsc applies it in gVisor's kernel, which answers every `SCMP_ACT_ERRNO`
/// with `EPERM` whatever `errnoRet` says, so `clone3` cannot fail with the
/// `ENOSYS` that makes libc fall back to `clone`: it would break every
/// thread. Under runsc `clone3` is allowed; the namespaces it can make are
/// gVisor's own, never the host's.
pub(super) fn profile(runtime: crate::model::OciRuntime, extra: &[String]) -> Value {
    let added = |name: &str| extra.iter().any(|e| e == name);
    let mut allowed: Vec<&str> = ALLOWED.to_vec();
    allowed.extend(
        extra
            .iter()
            .map(String::as_str)
            .filter(|e| !ALLOWED.contains(e)),
    );
    let mut rules = vec![json!({ "names": allowed, "action": "SCMP_ACT_ALLOW" })];
    if !added("clone") {
        rules.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{ "index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ" }],
        }));
    }
    if runtime == crate::model::OciRuntime::Runsc && !added("clone3") {
        rules.push(json!({ "names": ["clone3"], "action": "SCMP_ACT_ALLOW" }));
    } else if !added("clone3") {
        rules.push(
            json!({ "names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS }),
        );
    }
    if !added("personality") {
        for p in PERSONALITIES {
            rules.push(json!({
                "names": ["personality"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{ "index": 0, "value": p, "op": "SCMP_CMP_EQ" }],
            }));
        }
    }
    if !added("socket") {
        rules.push(json!({
            "names": ["socket"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{ "index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_NE" }],
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": libc::EPERM,
        "architectures": architectures(),
        "syscalls": rules,
    })
}

/// Whether the host allows the 32-bit syscall ABIs
/// (`BURROW_SECCOMP_COMPAT32=1`).
pub(super) fn compat32() -> bool {
    std::env::var("BURROW_SECCOMP_COMPAT32").is_ok_and(|v| v == "1")
}

/// The syscall ABIs the filter admits (see the module documentation).
fn architectures() -> Vec<&'static str> {
    if compat32() {
        vec!["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    } else {
        vec!["SCMP_ARCH_X86_64"]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn under_runsc_clone3_is_left_to_gvisor() {
        let clone3 = |runtime| {
            profile(runtime, &[])["syscalls"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["names"] == json!(["clone3"]))
                .unwrap()["action"]
                .clone()
        };
        assert_eq!(clone3(crate::model::OciRuntime::Runc), "SCMP_ACT_ERRNO");
        assert_eq!(clone3(crate::model::OciRuntime::Crun), "SCMP_ACT_ERRNO");
        assert_eq!(clone3(crate::model::OciRuntime::Runsc), "SCMP_ACT_ALLOW");
    }

    #[test]
    fn profile_denies_by_default_and_filters_clone() {
        let p = profile(crate::model::OciRuntime::Runc, &[]);
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], libc::EPERM);
        let rules = p["syscalls"].as_array().unwrap();
        let allowed: Vec<&str> = rules[0]["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for needed in [
            "read",
            "write",
            "execve",
            "epoll_wait",
            "futex",
            "exit_group",
        ] {
            assert!(allowed.contains(&needed), "{needed} must be allowed");
        }
        for denied in [
            "mount",
            "unshare",
            "setns",
            "bpf",
            "kexec_load",
            "init_module",
            "reboot",
            "clone",
            "clone3",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
        ] {
            assert!(
                !allowed.contains(&denied),
                "{denied} must not be allowed unconditionally"
            );
        }
        let mut seen = std::collections::HashSet::new();
        assert!(
            allowed.iter().all(|n| seen.insert(*n)),
            "duplicate syscall names"
        );
        assert!(rules
            .iter()
            .any(|r| r["names"][0] == "clone" && r["args"][0]["op"] == "SCMP_CMP_MASKED_EQ"));
    }

    #[test]
    fn added_syscalls_join_the_allowlist_once() {
        let extra = vec![
            "io_uring_setup".to_owned(),
            "socket".to_owned(),
            "read".to_owned(),
        ];
        let p = profile(crate::model::OciRuntime::Crun, &extra);
        let rules = p["syscalls"].as_array().unwrap();
        let allowed = rules[0]["names"].as_array().unwrap();
        assert_eq!(allowed.iter().filter(|n| *n == "io_uring_setup").count(), 1);
        assert_eq!(allowed.iter().filter(|n| *n == "read").count(), 1);
        // Added outright: its argument rule goes.
        assert!(allowed.iter().any(|n| n == "socket"));
        assert!(!rules.iter().any(|r| r["names"] == json!(["socket"])));
    }
}

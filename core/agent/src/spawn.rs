//! Starting a guest process: our own `fork` + `execve`, because the child
//! needs things `std::process::Command` cannot give together with a
//! central `waitpid(-1)` reaper (std waits for a child whose exec failed,
//! racing the reaper). The child becomes a session and process group leader
//! (`setsid`), optionally takes a pty as controlling terminal, and reports
//! a failed `chdir`/`execve` through a CLOEXEC pipe. In a microVM the agent
//! runs as root and the child drops to the sandbox's user ([`Credentials`])
//! right before `chdir` and `execve`.
//!
//! Everything the child touches is prepared before `fork`: between `fork`
//! and `execve` only async-signal-safe calls are made (no allocation, no
//! locks), since other threads may have held any lock at fork time.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::ptr;

use crate::mailbox::Mailbox;
use crate::reaper::Processes;
use crate::sys;

/// Search path when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The user and group a child switches to before `execve` (with no
/// supplementary groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Credentials {
    /// The credentials to switch to, or `None` for root (`0:0`), where the
    /// child keeps the agent's own (root's) identity untouched.
    pub fn new(uid: u32, gid: u32) -> Option<Credentials> {
        (uid != 0 || gid != 0).then_some(Credentials { uid, gid })
    }
}

/// Everything `execve` needs, as C strings.
#[derive(Debug)]
pub struct Plan {
    /// Paths to try in order (PATH lookup done up front).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    user: Option<Credentials>,
}

fn cstring(bytes: &[u8], what: &str) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| format!("{what} contains a NUL byte"))
}

impl Plan {
    /// Builds a plan. `env` is the complete environment; `user`, when set,
    /// the identity the process runs as. Errors are invalid arguments (empty
    /// argv, NUL bytes).
    pub fn new(
        argv: &[String],
        env: &[(OsString, OsString)],
        cwd: Option<&str>,
        user: Option<Credentials>,
    ) -> Result<Plan, String> {
        let program = match argv.first() {
            Some(p) if !p.is_empty() => p,
            _ => return Err("argv must name a program".into()),
        };
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_bytes(), "an argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                cstring(&kv, "the environment")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let candidates = if program.contains('/') {
            vec![cstring(program.as_bytes(), "the program")?]
        } else {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_os_str())
                .unwrap_or(OsStr::new(DEFAULT_PATH));
            path.as_bytes()
                .split(|&b| b == b':')
                .map(|dir| {
                    let dir = if dir.is_empty() { b".".as_slice() } else { dir };
                    let mut full = dir.to_vec();
                    full.push(b'/');
                    full.extend_from_slice(program.as_bytes());
                    cstring(&full, "PATH")
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let cwd = cwd.map(|c| cstring(c.as_bytes(), "cwd")).transpose()?;
        Ok(Plan {
            candidates,
            argv,
            envp,
            cwd,
            user,
        })
    }
}

/// The child's standard streams.
#[derive(Debug, Clone, Copy)]
pub enum Stdio<'a> {
    /// Separate fds for stdin, stdout and stderr.
    Fds {
        /// Child's fd 0.
        stdin: BorrowedFd<'a>,
        /// Child's fd 1.
        stdout: BorrowedFd<'a>,
        /// Child's fd 2.
        stderr: BorrowedFd<'a>,
    },
    /// A pty slave: all three streams, and the controlling terminal.
    Pty(BorrowedFd<'a>),
}

/// Forks and execs `plan`, tracked in `procs` with `mailbox` as the
/// destination of its exit status. Returns the pid (also its process group
/// and session id) once `execve` succeeded, or the `chdir`/`execve` error.
pub fn spawn(
    procs: &Processes,
    mailbox: Mailbox,
    plan: &Plan,
    stdio: Stdio<'_>,
) -> io::Result<libc::pid_t> {
    let argv: Vec<*const libc::c_char> = plan
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(Some(ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = plan
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(Some(ptr::null()))
        .collect();
    let (fds, ctty) = match stdio {
        Stdio::Fds {
            stdin,
            stdout,
            stderr,
        } => ([stdin, stdout, stderr].map(|f| f.as_raw_fd()), false),
        Stdio::Pty(slave) => ([slave.as_raw_fd(); 3], true),
    };
    if let (Some(user), true) = (plan.user, ctty) {
        // The terminal belongs to whoever uses it (as login(1) does), so the
        // process can reopen it by name (`ttyname`) after dropping root.
        // SAFETY: fchown on a borrowed, open fd has no memory effects.
        if unsafe { libc::fchown(fds[0], user.uid, user.gid) } == -1 {
            crate::log::warning!(
                "cannot hand the pty to {}:{}: {}",
                user.uid,
                user.gid,
                io::Error::last_os_error()
            );
        }
    }
    let (err_r, err_w) = sys::pipe()?;
    let child = Child {
        plan,
        argv: &argv,
        envp: &envp,
        fds,
        ctty,
        report: err_w.as_raw_fd(),
    };
    let pid = procs.spawn(mailbox, || {
        // SAFETY: the child only runs `Child::exec`, which makes
        // async-signal-safe calls on data prepared before the fork.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            // SAFETY: we are the freshly forked child (see above).
            0 => unsafe { child.exec() },
            pid => Ok(pid),
        }
    })?;
    drop(err_w);
    // The pipe closes on a successful execve (CLOEXEC) or carries an errno.
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match sys::read(err_r.as_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(e),
        }
    }
    match got {
        // The failed child exits with 127; the reaper collects it.
        4 => Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf))),
        _ => Ok(pid),
    }
}

/// Highest signal number on Linux.
const MAX_SIGNAL: libc::c_int = 64;

/// Resets `sig` to its default disposition (errors, e.g. for SIGKILL, are
/// harmless). Uses the raw syscall where the kernel's struct layout is known,
/// because libc's `sigaction` refuses the signals it reserves for itself
/// (32 and 33 in glibc), which may still arrive ignored from our parent.
///
/// # Safety
/// Call only in a forked child before `execve`: it changes dispositions
/// process-wide.
unsafe fn reset_signal(sig: libc::c_int) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        /// `struct sigaction` as the kernel takes it on these architectures.
        #[repr(C)]
        struct KernelSigaction {
            handler: libc::sighandler_t,
            flags: libc::c_ulong,
            restorer: usize,
            mask: u64,
        }
        let act = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: `act` is a valid kernel sigaction; the old action is not
        // requested; 8 is the kernel's sigset size.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &act as *const KernelSigaction,
                ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<u64>(),
            )
        };
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: setting the default disposition has no memory effects.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Switches to `user` with no supplementary groups: `setgroups(0)`, then
/// `setgid`, then `setuid` (which also drops every capability). Returns -1
/// with `errno` set on failure.
///
/// Raw syscalls rather than the libc functions: those broadcast the change
/// to every thread of the process (POSIX semantics), machinery a forked
/// child (one thread, possibly inconsistent libc state) should not touch.
/// The raw syscall changes the calling thread, which here is the whole
/// process.
///
/// # Safety
/// Call only in a forked child before `execve`.
#[cfg(target_pointer_width = "64")]
unsafe fn drop_privileges(user: Credentials) -> libc::c_long {
    // SAFETY: plain integer arguments; a zero-length group list is never read.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, 0, ptr::null::<libc::gid_t>()) == -1
            || libc::syscall(libc::SYS_setgid, user.gid) == -1
        {
            return -1;
        }
        libc::syscall(libc::SYS_setuid, user.uid)
    }
}

/// See the 64-bit version; on 32-bit targets the plain syscalls take 16-bit
/// ids, so use libc (whose setxid broadcast finds only this thread).
///
/// # Safety
/// Call only in a forked child before `execve`.
#[cfg(not(target_pointer_width = "64"))]
unsafe fn drop_privileges(user: Credentials) -> libc::c_long {
    // SAFETY: plain integer arguments; a zero-length group list is never read.
    unsafe {
        if libc::setgroups(0, ptr::null()) == -1 || libc::setgid(user.gid) == -1 {
            return -1;
        }
        libc::c_long::from(libc::setuid(user.uid))
    }
}

/// What the forked child needs, borrowed from the parent's prepared data.
struct Child<'a> {
    plan: &'a Plan,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    fds: [RawFd; 3],
    ctty: bool,
    report: RawFd,
}

impl Child<'_> {
    /// Runs in the forked child; never returns.
    ///
    /// # Safety
    /// Call only in a freshly forked child.
    unsafe fn exec(&self) -> ! {
        // SAFETY: we are a single-threaded fork child; every call below is
        // async-signal-safe and every pointer points into data the parent
        // prepared before forking, alive in our copy of its memory.
        unsafe {
            // Start the program with default signal handling and an empty
            // mask, whatever the agent did (it ignores SIGPIPE and blocks
            // SIGCHLD/SIGTERM/SIGINT) or inherited (ignored signals survive
            // execve).
            for sig in 1..=MAX_SIGNAL {
                reset_signal(sig);
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());

            if libc::setsid() == -1 {
                self.fail();
            }
            if self.ctty && libc::ioctl(self.fds[0], libc::TIOCSCTTY as _, 0) == -1 {
                self.fail();
            }
            // The sources are never 0..=2 (those are held by the agent), so
            // each dup2 really installs a fresh, non-CLOEXEC copy.
            for (target, &src) in self.fds.iter().enumerate() {
                if libc::dup2(src, target as libc::c_int) == -1 {
                    self.fail();
                }
            }
            // After the dup2s (which need nothing) and before chdir and
            // execve, which must be checked against the user's permissions.
            if let Some(user) = self.plan.user {
                if drop_privileges(user) == -1 {
                    self.fail();
                }
            }
            if let Some(cwd) = &self.plan.cwd {
                if libc::chdir(cwd.as_ptr()) == -1 {
                    self.fail();
                }
            }
            // Like execvp: EACCES on one candidate is reported only when no
            // later candidate runs; a missing one is skipped.
            let mut err = libc::ENOENT;
            let mut denied = false;
            for path in &self.plan.candidates {
                libc::execve(path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
                match *libc::__errno_location() {
                    libc::EACCES => denied = true,
                    libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                    other => {
                        err = other;
                        break;
                    }
                }
            }
            if denied && err == libc::ENOENT {
                err = libc::EACCES;
            }
            self.report(err)
        }
    }

    /// Reports the current errno and exits.
    unsafe fn fail(&self) -> ! {
        // SAFETY: reading errno is async-signal-safe.
        let err = unsafe { *libc::__errno_location() };
        // SAFETY: same child context as `exec`.
        unsafe { self.report(err) }
    }

    unsafe fn report(&self, err: libc::c_int) -> ! {
        let bytes = err.to_ne_bytes();
        // SAFETY: write and _exit are async-signal-safe; `bytes` is valid.
        unsafe {
            libc::write(self.report, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Credentials, Plan};

    #[test]
    fn root_keeps_its_identity() {
        assert_eq!(Credentials::new(0, 0), None);
        assert_eq!(
            Credentials::new(1000, 0),
            Some(Credentials { uid: 1000, gid: 0 })
        );
        assert_eq!(
            Credentials::new(0, 100),
            Some(Credentials { uid: 0, gid: 100 })
        );
    }

    #[test]
    fn plan_carries_the_user() {
        let user = Credentials::new(1000, 1000);
        let plan = Plan::new(&["true".into()], &[], None, user).expect("valid plan");
        assert_eq!(plan.user, user);
    }
}

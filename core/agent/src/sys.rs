//! Thin, safe wrappers over the few raw syscalls the agent needs beyond std:
//! CLOEXEC pipes, non-blocking fd I/O, `poll`, an eventfd waker, `kill`,
//! and [`exit_process`], the one way the agent ends.
//!
//! Invariant kept by every function here: each fd the agent creates is
//! CLOEXEC from the moment it exists, so a concurrent `fork` + `exec` in
//! another thread never leaks it into a guest process.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::log::{info, warning};

/// Turns a `-1` return value into the current `errno`.
pub fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Takes ownership of a freshly returned fd (or the error in `errno`).
fn owned(ret: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(ret)?;
    // SAFETY: the syscall just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A CLOEXEC pipe: `(read end, write end)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1, -1];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Pipe capacity asked for bulk streams: what an unprivileged process may
/// set by default (`/proc/sys/fs/pipe-max-size`).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Grows the pipe `fd` belongs to (either end) to [`PIPE_SIZE`], so bulk
/// output takes fewer wake-ups; anything but a pipe, or a refusal (a
/// lower limit, a user over its pipe quota), leaves it as it is.
pub fn grow_pipe(fd: BorrowedFd<'_>) {
    // SAFETY: F_SETPIPE_SZ takes an int and only resizes the pipe buffer.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
}

/// Opens `/dev/null` read-write (CLOEXEC). When the root filesystem has no
/// `/dev/null`, returns the read end of a pipe whose write end is already
/// closed: it reads as EOF, which is what a child's stdin needs.
pub fn dev_null() -> io::Result<OwnedFd> {
    // SAFETY: the path is a valid NUL-terminated string.
    let fd = unsafe {
        libc::open(
            c"/dev/null".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    match owned(fd) {
        Ok(fd) => Ok(fd),
        Err(_) => pipe().map(|(r, _w)| r),
    }
}

/// Makes `fd` non-blocking (or blocking again).
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL on a valid borrowed fd has no memory effects.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: F_SETFL with plain status flags on a valid borrowed fd.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// One `read(2)`; EINTR is retried.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// One `write(2)`; EINTR is retried.
pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Whether an error means "try again later" on a non-blocking fd.
pub fn would_block(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
}

/// A poll entry for `fd` (or an ignored slot when `fd` is `None`).
pub fn pollfd(fd: Option<RawFd>, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: fd.unwrap_or(-1),
        events,
        revents: 0,
    }
}

/// `poll(2)` until `deadline` (or forever). EINTR counts as a timeout; the
/// caller re-evaluates its state either way.
pub fn poll(fds: &mut [libc::pollfd], deadline: Option<Instant>) -> io::Result<()> {
    let timeout = match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Round up so we never wake a hair before the deadline and spin.
            let ms = left.as_millis() + u128::from(left.subsec_nanos() % 1_000_000 != 0);
            ms.min(i32::MAX as u128) as libc::c_int
        }
    };
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if r == -1 {
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(())
}

/// Whether a polled entry is ready for reading (or hung up / failed, which
/// a read then reports).
pub fn readable(p: &libc::pollfd) -> bool {
    p.fd >= 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Whether a polled entry is ready for writing (or failed, which a write
/// then reports).
pub fn writable(p: &libc::pollfd) -> bool {
    p.fd >= 0 && p.revents & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// An eventfd used to wake a thread blocked in [`poll`] when something was
/// put in its mailbox.
#[derive(Debug)]
pub struct Waker(OwnedFd);

impl Waker {
    /// A new, non-blocking, CLOEXEC eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no pointer arguments.
        owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).map(Waker)
    }

    /// Makes the fd readable until the next [`Waker::drain`].
    pub fn wake(&self) {
        // EAGAIN (counter saturated) still leaves the fd readable: ignore errors.
        let _ = write(self.0.as_fd(), &1u64.to_ne_bytes());
    }

    /// Resets the counter. Call before looking into the mailbox so that a
    /// wake-up racing with the look is never lost.
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        let _ = read(self.0.as_fd(), &mut buf);
    }

    /// The raw fd, for a poll set.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `kill(2)`. A negative `pid` addresses a process group.
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory effects; callers choose the target with care
    // (see `reaper::Processes::signal_group` and `shutdown`).
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Makes the calling thread's file system identity `uid`/`gid` (the
/// kernel keeps fsuid/fsgid per thread; the raw syscalls, not libc's
/// process-wide wrappers). Leaving uid 0 this way also drops the file
/// capabilities (DAC override, chown, ...) for this thread's file access.
pub fn set_fs_identity(uid: u32, gid: u32) {
    // SAFETY: setfsgid/setfsuid take plain ids and only change this
    // thread's credentials for file access; order: group first, while the
    // thread may still change it.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid as libc::c_long);
        libc::syscall(libc::SYS_setfsuid, uid as libc::c_long);
    }
}

/// Whether this process has no children left (live or unreaped). Leaves
/// exit statuses in place for the reaper (`WNOWAIT`).
///
/// As PID 1 this means "no process left in the sandbox": every process of
/// it descends from PID 1, and orphans are re-parented to it. Unlike
/// `kill(-1, 0)`, it is not fooled by a VM's kernel threads, which
/// `kill(-1, ..)` counts but never stops.
pub fn no_children() -> bool {
    // SAFETY: siginfo_t is plain data; waitid writes into it and nothing
    // else (WNOHANG: it never blocks; WNOWAIT: it reaps nothing).
    let rc = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
}

/// Sleeps in small steps until `done()` holds or `limit` has passed (a
/// limit too large to represent means no limit). Returns whether `done()` held.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now().checked_add(limit);
    loop {
        if done() {
            return true;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether [`exit_process`] ends the microVM rather than the process.
static VM_EXIT: AtomicBool = AtomicBool::new(false);

/// From now on [`exit_process`] ends the microVM the agent is the init of.
/// Call it before anything can fail, so that no exit path is left out.
pub fn set_vm_exit() {
    VM_EXIT.store(true, Ordering::SeqCst);
}

/// Ends the agent with exit code `code`: every exit path goes through here.
///
/// Normally this is `std::process::exit`. As a microVM's init (see
/// [`set_vm_exit`]) the process must not exit (the kernel would panic and
/// the host would only see a reset): instead it syncs, writes `code` to the
/// `isa-debug-exit` port (QEMU exits with `2 * code + 1`), and if the VM is
/// still running after that, reboots it (QEMU runs with `-no-reboot`, so the
/// reset ends it too).
///
/// SAFETY-CRITICAL: the port write and the reboot would hit the host if the
/// agent ran there by mistake. They are only attempted as PID 1, which the
/// agent refuses to be in VM mode anywhere but in a VM (see `main`).
pub fn exit_process(code: i32) -> ! {
    // SAFETY: getpid has no preconditions.
    if VM_EXIT.load(Ordering::SeqCst) && unsafe { libc::getpid() } == 1 {
        end_vm(code);
    }
    std::process::exit(code)
}

/// The VM half of [`exit_process`]; returns only when neither the exit port
/// nor the reboot worked.
fn end_vm(code: i32) {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    // The log is the serial console: let its last lines out before the VM
    // ends (QEMU exits at once on the port write).
    // SAFETY: tcdrain on fd 2 (the console, or a non-tty where it fails
    // harmlessly with ENOTTY).
    unsafe { libc::tcdrain(2) };
    debug_exit(code);
    info!("the exit port did not end the VM: rebooting");
    // SAFETY: reboot takes a plain command; as PID 1 of a VM, RESTART resets
    // the guest (the kernel runs with reboot=t), which ends QEMU.
    if unsafe { libc::reboot(libc::RB_AUTOBOOT) } == -1 {
        warning!("reboot failed: {}", io::Error::last_os_error());
    }
}

/// Writes the low byte of `code` to QEMU's `isa-debug-exit` port.
#[cfg(target_arch = "x86_64")]
fn debug_exit(code: i32) {
    use burrow_protocol::vm::VM_EXIT_PORT;
    // I/O permissions belong to the calling thread, which is the one that
    // writes the port right after.
    // SAFETY: ioperm takes plain integers; it only grants access to one port.
    if unsafe { libc::ioperm(VM_EXIT_PORT.into(), 1, 1) } == -1 {
        warning!(
            "ioperm({VM_EXIT_PORT:#x}) failed: {}",
            io::Error::last_os_error()
        );
        return;
    }
    let value = code as u8;
    // SAFETY: this thread may access the port (ioperm above). In a QEMU
    // microVM it is the isa-debug-exit device (which ends the VM); without
    // that device the write goes nowhere. No memory, stack or flags touched.
    unsafe {
        std::arch::asm!(
            "out dx, al",
            in("dx") VM_EXIT_PORT,
            in("al") value,
            options(nomem, nostack, preserves_flags)
        );
    }
}

/// No `isa-debug-exit` outside x86: the reboot ends the VM.
#[cfg(not(target_arch = "x86_64"))]
fn debug_exit(_code: i32) {}

/// Decodes a classic BPF program (hex of little-endian `struct sock_filter`s).
pub fn decode_bpf(hex: &str) -> Result<Vec<libc::sock_filter>, String> {
    let bytes = hex.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(16) || bytes.len() / 16 > 4096 {
        return Err(format!(
            "a program is 1 to 4096 instructions of 16 hex digits, not {} digits",
            bytes.len()
        ));
    }
    let digit = |b: u8| -> Result<u8, String> {
        (b as char)
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or_else(|| format!("{:?} is not a hex digit", b as char))
    };
    let mut raw = Vec::with_capacity(bytes.len() / 2);
    for pair in bytes.chunks(2) {
        raw.push(digit(pair[0])? << 4 | digit(pair[1])?);
    }
    Ok(raw
        .chunks(8)
        .map(|c| libc::sock_filter {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// Installs the seccomp filter `hex` on this process (and so on everything
/// it starts), after `no_new_privs`, which an unprivileged filter needs.
pub fn install_seccomp(hex: &str) -> Result<(), String> {
    let filter = decode_bpf(hex)?;
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `prog` points to `filter`, which outlives
    // the call (the kernel copies the program).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("no_new_privs: {}", io::Error::last_os_error()));
        }
        if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(format!("seccomp: {}", io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod bpf_tests {
    use super::decode_bpf;

    #[test]
    fn bpf_programs_decode_or_are_refused() {
        // ret ALLOW
        let p = decode_bpf("060000000000ff7f").unwrap();
        assert_eq!(
            (p[0].code, p[0].jt, p[0].jf, p[0].k),
            (6, 0, 0, 0x7fff_0000)
        );
        assert!(decode_bpf("").is_err());
        assert!(decode_bpf("0600").is_err());
        assert!(decode_bpf("060000000000ff7g").is_err());
        assert!(decode_bpf(&"0".repeat(16 * 4097)).is_err());
    }
}

//! Pseudo-terminals for interactive execs. Opened by hand instead of with
//! `openpty(3)`, which creates fds without CLOEXEC: another thread forking
//! in between would leak them into an unrelated guest process.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use burrow_protocol::TtySize;

use crate::sys;

/// Both ends of a new pty.
#[derive(Debug)]
pub struct Pty {
    /// The agent's end.
    pub master: OwnedFd,
    /// The process's end (its controlling terminal).
    pub slave: OwnedFd,
}

/// Opens a pty of `size`. The master is non-blocking; both ends are CLOEXEC.
pub fn open(size: TtySize) -> io::Result<Pty> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    let master = open_path(c"/dev/ptmx", flags).or_else(|_| open_path(c"/dev/pts/ptmx", flags))?;
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the valid pointer.
    sys::cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK as _, &unlock) })?;
    let slave = open_slave(&master)?;
    set_size(master.as_fd(), size)?;
    Ok(Pty { master, slave })
}

fn open_path(path: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated.
    let fd = sys::cvt(unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: open just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // TIOCGPTPEER (Linux 4.13+) opens the slave without a path lookup, which
    // also works where /dev/pts is not the pty's devpts instance.
    // SAFETY: TIOCGPTPEER takes its flags by value.
    let fd = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER as _, flags) };
    if fd >= 0 {
        // SAFETY: the ioctl just returned this fd to us.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int to the valid pointer.
    sys::cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN as _, &mut n) })?;
    let path = std::ffi::CString::new(format!("/dev/pts/{n}"))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    open_path(&path, flags)
}

/// Sets the window size (the kernel sends SIGWINCH to the foreground group).
pub fn set_size(master: BorrowedFd<'_>, size: TtySize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the valid pointer.
    sys::cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ as _, &ws) })?;
    Ok(())
}

/// The terminal's end-of-file character (VEOF, normally ^D), which is how
/// "stdin EOF" is said to a program reading a terminal.
pub fn eof_char(master: BorrowedFd<'_>) -> u8 {
    // SAFETY: an all-zero termios is valid storage for tcgetattr.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid storage; the fd is a pty master.
    if unsafe { libc::tcgetattr(master.as_raw_fd(), &mut t) } == 0 && t.c_cc[libc::VEOF] != 0 {
        t.c_cc[libc::VEOF]
    } else {
        0x04
    }
}

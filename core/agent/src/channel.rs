//! The protocol channel: setting it up at startup, the single writer thread
//! that owns its output half, and reading host frames from its input half.
//!
//! Only the writer thread ever writes to the channel, so frames from many
//! concurrent requests never interleave; everyone else hands it messages
//! through an [`Outbox`] (a bounded queue: a slow host slows producers down
//! instead of growing memory without limit).
//!
//! A frame the host began arrives whole at once; one that stops half-way
//! for [`STALL_POLLS`] seconds is given up as a broken channel (a guest
//! process that wrote a bare length word into the agent's input would
//! otherwise have the agent swallow the host's next frames as its body,
//! and every call wait for ever).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow_protocol::{
    decode, decode_frame, write_message, FrameError, GuestMsg, HostMsg, MAX_CHUNK,
};

use crate::log::{info, warning};
use crate::sys;

/// Frames the writer may buffer before producers block.
const OUTBOX_DEPTH: usize = 64;

/// Seconds a frame the host began may go without a byte more.
pub const STALL_POLLS: u32 = 10;

/// The input half of the channel as the agent reads it.
pub type Reader = BufReader<File>;

/// Both halves of the channel, as fresh CLOEXEC fds.
#[derive(Debug)]
pub struct Channel {
    /// Host frames come from here.
    pub reader: File,
    /// Guest frames go here (owned by the writer thread).
    pub writer: File,
}

/// Sets up the channel: stdin/stdout by default, else the file or character
/// device at `path`. Afterwards fds 0 and 1 point at `/dev/null`, so that no
/// child process can inherit (and corrupt) the channel; fd 2 stays the log.
pub fn open(path: Option<&Path>) -> io::Result<Channel> {
    match path {
        None => set_up(None),
        Some(path) => set_up(Some(
            File::options()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open(path)?,
        )),
    }
}

/// Sets up the channel on `file`, open already (a VM template's port).
pub fn adopt(file: File) -> io::Result<Channel> {
    set_up(Some(file))
}

fn set_up(file: Option<File>) -> io::Result<Channel> {
    ensure_std_fds();
    cloexec_inherited_fds();
    let (reader, writer) = match file {
        None => {
            // SAFETY: fds 0 and 1 are open (ensure_std_fds) and stay open for
            // the life of the process: they are redirected below, never closed.
            let (r, w) = unsafe { (BorrowedFd::borrow_raw(0), BorrowedFd::borrow_raw(1)) };
            // try_clone_to_owned duplicates with F_DUPFD_CLOEXEC.
            (
                File::from(r.try_clone_to_owned()?),
                File::from(w.try_clone_to_owned()?),
            )
        }
        Some(file) => {
            make_raw_if_tty(&file);
            let writer = file.try_clone()?;
            (file, writer)
        }
    };
    let null = sys::dev_null()?;
    for fd in [0, 1] {
        // SAFETY: dup2 onto fd 0/1, which we no longer use for the channel.
        sys::cvt(unsafe { libc::dup2(null.as_raw_fd(), fd) })?;
    }
    Ok(Channel { reader, writer })
}

/// Makes sure fds 0..=2 are open, so that no fd the agent opens later lands
/// on a standard stream number (a child's `dup2` onto 0/1/2 would then be a
/// no-op that keeps CLOEXEC set, and logs would go to a random file).
fn ensure_std_fds() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only queries the fd table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        // open returns the lowest free fd, which is `fd` since all lower
        // ones are open. Not CLOEXEC on purpose: these are the std fds.
        // SAFETY: valid NUL-terminated path.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
        if got == -1 {
            // No /dev/null (bare rootfs): occupy the slot with the root dir.
            // SAFETY: valid NUL-terminated path.
            unsafe { libc::open(c"/".as_ptr(), libc::O_PATH) };
        }
    }
}

/// Marks every fd above 2 that the agent inherited (from a runtime, a test
/// harness, a make jobserver...) CLOEXEC, so none reaches a guest process.
fn cloexec_inherited_fds() {
    // close_range(CLOSE_RANGE_CLOEXEC) needs Linux 5.11.
    // SAFETY: the syscall takes plain integers and only changes fd flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return;
    }
    // Older kernels: walk a generous range (no /proc needed).
    // SAFETY: getrlimit writes into the valid struct.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is valid storage.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(65536) as libc::c_int
    } else {
        1024
    };
    for fd in 3..max {
        // SAFETY: F_SETFD on a closed fd fails harmlessly with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// A virtio console port shows up as a tty; the line discipline would
/// mangle binary frames, so switch it to raw mode.
fn make_raw_if_tty(file: &File) {
    let fd = file.as_raw_fd();
    // SAFETY: isatty only queries the fd.
    if unsafe { libc::isatty(fd) } != 1 {
        return;
    }
    // SAFETY: an all-zero termios is a valid value for tcgetattr to overwrite.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid termios; the fd is a tty.
    let ok = unsafe {
        libc::tcgetattr(fd, &mut t) == 0 && {
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(fd, libc::TCSANOW, &t) == 0
        }
    };
    if !ok {
        warning!(
            "could not switch the channel tty to raw mode: {}",
            io::Error::last_os_error()
        );
    }
}

enum Out {
    Frame(GuestMsg),
    Flush(SyncSender<()>),
    /// The session's protocol version, for the frames queued after it.
    Version(u32),
}

/// Data buffers kept for reuse: a chunk sent is handed back by the writer
/// (allocating and freeing one per chunk would map and unmap its pages
/// every time).
type Pool = Arc<Mutex<Vec<Vec<u8>>>>;

/// Buffers the pool keeps at most.
const POOL_SIZE: usize = 16;

/// Handle for sending frames to the host; cheap to clone.
#[derive(Clone)]
pub struct Outbox(SyncSender<Out>, Pool);

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Outbox")
    }
}

impl Outbox {
    /// A buffer of [`MAX_CHUNK`] bytes (not zeroed: whatever it held) for
    /// a data frame's payload; the writer takes it back once sent.
    pub fn buffer(&self) -> Vec<u8> {
        let reused = self.1.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut buf = reused.unwrap_or_default();
        buf.resize(MAX_CHUNK, 0);
        buf
    }

    /// Queues a frame, blocking while the queue is full. Frames sent after
    /// the channel broke are dropped.
    pub fn send(&self, msg: GuestMsg) {
        let _ = self.0.send(Out::Frame(msg));
    }

    /// Sets the protocol version the frames queued from now on are encoded
    /// for (the version the host's hello settled on).
    pub fn set_version(&self, version: u32) {
        let _ = self.0.send(Out::Version(version));
    }

    /// Queues a frame unless the queue stays full until `deadline`.
    pub fn send_by(&self, msg: GuestMsg, deadline: Instant) -> bool {
        self.offer(Out::Frame(msg), deadline)
    }

    /// Waits until everything queued before this call has been written and
    /// flushed, at most until `deadline`.
    pub fn flush_by(&self, deadline: Instant) -> bool {
        let (tx, rx) = mpsc::sync_channel(1);
        if !self.offer(Out::Flush(tx), deadline) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left).is_ok()
    }

    fn offer(&self, mut item: Out, deadline: Instant) -> bool {
        loop {
            match self.0.try_send(item) {
                Ok(()) => return true,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

/// Starts the writer thread that owns `file`; returns once it runs, its
/// buffer allocated (a microVM template is saved right after: a restored
/// guest does not finish starting the thread).
pub fn start_writer(file: File) -> io::Result<Outbox> {
    // A pipe to the host holds more than its default 64 KiB: fewer
    // wake-ups on both sides of bulk output.
    sys::grow_pipe(file.as_fd());
    let (tx, rx) = mpsc::sync_channel(OUTBOX_DEPTH);
    let (started, running) = mpsc::sync_channel(1);
    let pool = Pool::default();
    let writer_pool = pool.clone();
    std::thread::Builder::new()
        .name("writer".into())
        .spawn(move || writer_loop(rx, file, started, writer_pool))?;
    running
        .recv()
        .map_err(|_| io::Error::other("the writer thread ended as it started"))?;
    Ok(Outbox(tx, pool))
}

fn writer_loop(rx: Receiver<Out>, file: File, started: mpsc::SyncSender<()>, pool: Pool) {
    let mut w = BufWriter::with_capacity(256 * 1024, file);
    let _ = started.send(());
    drop(started);
    let mut broken = false;
    // Until a hello settles it: protocol 1 (the hello itself is JSON).
    let mut version = 1;
    loop {
        // Write whatever is queued, and flush only when the queue runs dry:
        // bursts of small frames then cost one syscall.
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(_) => {
                if !broken {
                    if let Err(e) = w.flush() {
                        broken = true;
                        warning!("channel write failed, dropping further frames: {e}");
                    }
                }
                match rx.recv() {
                    Ok(item) => item,
                    Err(_) => return,
                }
            }
        };
        match item {
            Out::Frame(msg) => {
                if !broken {
                    if let Err(e) = write_message(&mut w, &msg, version) {
                        broken = true;
                        warning!("channel write failed, dropping further frames: {e}");
                    }
                }
                if let GuestMsg::Stdout { data, .. } | GuestMsg::Stderr { data, .. } = msg {
                    let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
                    if pool.len() < POOL_SIZE && data.0.capacity() >= MAX_CHUNK {
                        pool.push(data.0);
                    }
                }
            }
            Out::Flush(ack) => {
                if !broken && w.flush().is_err() {
                    broken = true;
                }
                let _ = ack.send(());
            }
            Out::Version(v) => version = v,
        }
    }
}

/// One frame read from the host.
#[derive(Debug)]
pub enum Incoming {
    /// A well-formed message.
    Msg(HostMsg),
    /// A complete frame whose body is not a valid `HostMsg`; the stream is
    /// still in sync.
    Malformed {
        /// The raw body, to salvage a request id from.
        body: Vec<u8>,
        /// Why it did not parse.
        error: FrameError,
    },
}

/// Blocking read of one host frame. `Ok(None)` is a clean end of stream.
/// Errors (`TooLarge`, `Truncated`, `Io`, a frame stalled half-way) leave
/// the stream out of sync.
pub fn read_frame(r: &mut Reader) -> Result<Option<Incoming>, FrameError> {
    Ok(read_raw(r)?.map(|(header, body)| incoming(header, body)))
}

/// Blocking read of one host frame's header and body, not decoded: as
/// [`burrow_protocol::read_raw`], and an `Io` error of kind `TimedOut`
/// once a frame has begun and [`STALL_POLLS`] seconds pass without a byte
/// more of it. Waiting for a frame to begin has no bound.
pub fn read_raw(r: &mut Reader) -> Result<Option<(burrow_protocol::Header, Vec<u8>)>, FrameError> {
    burrow_protocol::read_raw(&mut Guarded::new(r, STALL_POLLS, 1000))
}

/// Reads through a [`Reader`], bounding the wait for each read once the
/// first byte came.
struct Guarded<'a> {
    inner: &'a mut Reader,
    begun: bool,
    /// Quiet polls in a row that give a frame up, and each one's length.
    polls: u32,
    poll_ms: libc::c_int,
}

impl<'a> Guarded<'a> {
    fn new(inner: &'a mut Reader, polls: u32, poll_ms: libc::c_int) -> Self {
        Guarded {
            inner,
            begun: false,
            polls,
            poll_ms,
        }
    }

    /// Waits until the channel has bytes (or hung up, which the read then
    /// reports). A frozen guest's poll may come back with nothing at the
    /// thaw: that costs one poll, never the frame.
    fn wait_readable(&self) -> io::Result<()> {
        let fd = self.inner.get_ref().as_raw_fd();
        let mut quiet = 0;
        loop {
            let mut p = sys::pollfd(Some(fd), libc::POLLIN);
            // SAFETY: `p` is one valid, exclusively borrowed pollfd.
            match unsafe { libc::poll(&mut p, 1, self.poll_ms) } {
                n if n > 0 => return Ok(()),
                0 => {
                    quiet += 1;
                    if quiet >= self.polls {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the host stopped in the middle of a frame",
                        ));
                    }
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl Read for Guarded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.begun && self.inner.buffer().is_empty() {
            self.wait_readable()?;
        }
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.begun = true;
        }
        Ok(n)
    }
}

/// A host frame read raw ([`read_raw`]), as a message of the session.
pub fn incoming(header: burrow_protocol::Header, body: Vec<u8>) -> Incoming {
    if header.binary {
        // A binary frame owns its body; a bad one has no id to salvage.
        return match decode_frame(header, body) {
            Ok(msg) => Incoming::Msg(msg),
            Err(error) => Incoming::Malformed {
                body: Vec::new(),
                error,
            },
        };
    }
    match decode(&body) {
        Ok(msg) => Incoming::Msg(msg),
        Err(error) => Incoming::Malformed { body, error },
    }
}

/// Logs where the channel comes from (once, at startup).
pub fn describe(ch: &Channel, path: Option<&Path>) {
    match path {
        Some(p) => info!(
            "channel: {} (fd {})",
            p.display(),
            ch.reader.as_fd().as_raw_fd()
        ),
        None => info!("channel: stdin/stdout"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;
    use std::os::fd::OwnedFd;

    use super::*;

    fn pipe() -> (Reader, File) {
        let (r, w): (OwnedFd, OwnedFd) = sys::pipe().unwrap();
        (BufReader::new(File::from(r)), File::from(w))
    }

    #[test]
    fn a_frame_stalled_half_way_is_given_up() {
        let (mut r, mut w) = pipe();
        // A length word that promises 64 bytes, and 3 of them.
        w.write_all(&[0, 0, 0, 64, b'{', b'"', b't']).unwrap();
        let started = Instant::now();
        let got = burrow_protocol::read_raw(&mut Guarded::new(&mut r, 3, 20));
        match got {
            Err(FrameError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn waiting_between_frames_is_unbounded_and_a_slow_frame_is_fine() {
        let (mut r, mut w) = pipe();
        let writer = std::thread::spawn(move || {
            // Nothing for longer than the stall limit, then a frame that
            // comes in pieces, each within it.
            std::thread::sleep(Duration::from_millis(150));
            let frame = burrow_protocol::encode(&HostMsg::Cancel { id: 7 });
            for piece in frame.chunks(3) {
                w.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let got = burrow_protocol::read_raw(&mut Guarded::new(&mut r, 3, 20)).unwrap();
        let (header, body) = got.unwrap();
        assert!(matches!(
            incoming(header, body),
            Incoming::Msg(HostMsg::Cancel { id: 7 })
        ));
        writer.join().unwrap();
    }
}

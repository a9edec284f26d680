//! Links: where the stack's frames come from and go to. A packet socket
//! on the stack's end of a veth pair (containers), or a stream socket of
//! length-prefixed frames (QEMU's `-netdev stream`/`socket`, the vm
//! driver). Either is two bounded queues of frames to the stack's loop.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Frames queued in each direction at most.
const QUEUE: usize = 256;

/// A link to the guest: frames in, frames out.
#[derive(Debug)]
pub struct Link {
    pub(crate) rx: mpsc::Receiver<Vec<u8>>,
    pub(crate) tx: mpsc::Sender<Vec<u8>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Link {
    /// A link of two in-memory queues, and the guest's ends of them (for
    /// tests, which play the guest).
    pub fn pair() -> (Link, mpsc::Sender<Vec<u8>>, mpsc::Receiver<Vec<u8>>) {
        let (guest_tx, rx) = mpsc::channel(QUEUE);
        let (tx, guest_rx) = mpsc::channel(QUEUE);
        (
            Link {
                rx,
                tx,
                tasks: Vec::new(),
            },
            guest_tx,
            guest_rx,
        )
    }
}

/// A link over a packet socket (from [`crate::link::make_link`]) that
/// carries frames of at most `mtu` bytes of IP.
pub fn packet_link(fd: OwnedFd, mtu: usize) -> io::Result<Link> {
    set_nonblocking(&fd)?;
    // SAFETY: the descriptor is owned by the AsyncFd, never closed or
    // replaced while registered.
    let fd = std::sync::Arc::new(unsafe { AsyncFd::register(fd)? });
    let (in_tx, rx) = mpsc::channel(QUEUE);
    let (tx, mut out_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let reader = {
        let fd = fd.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; mtu + 14 + 4];
            loop {
                let Ok(mut guard) = fd.readable().await else {
                    return;
                };
                let got = guard.try_io(|fd| {
                    // SAFETY: `buf` is valid for writes of its length.
                    let n = unsafe {
                        libc::recv(
                            fd.as_raw_fd(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                            libc::MSG_TRUNC,
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                });
                match got {
                    Ok(Ok(n)) if n <= buf.len() => {
                        if in_tx.send(buf[..n].to_vec()).await.is_err() {
                            return;
                        }
                    }
                    // Larger than the link's frames: dropped.
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    // The interface went away with the sandbox.
                    Ok(Err(_)) => return,
                    Err(_would_block) => {}
                }
            }
        })
    };
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            loop {
                let Ok(mut guard) = fd.writable().await else {
                    return;
                };
                let sent = guard.try_io(|fd| {
                    // SAFETY: `frame` is valid for reads of its length.
                    let n = unsafe {
                        libc::send(
                            fd.as_raw_fd(),
                            frame.as_ptr().cast(),
                            frame.len(),
                            libc::MSG_NOSIGNAL,
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
                match sent {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    // A frame the interface refuses is lost, as on a wire.
                    Ok(Err(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => break,
                    Ok(Err(_)) => return,
                    Err(_would_block) => {}
                }
            }
        }
    });
    Ok(Link {
        rx,
        tx,
        tasks: vec![reader, writer],
    })
}

/// A link over a stream socket of frames each after its length (four
/// bytes, big-endian): QEMU's stream and socket network backends.
pub fn stream_link(stream: tokio::net::UnixStream, mtu: usize) -> Link {
    let (mut r, mut w) = stream.into_split();
    let (in_tx, rx) = mpsc::channel(QUEUE);
    let (tx, mut out_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    let max = mtu + 14 + 4;
    let reader = tokio::spawn(async move {
        loop {
            let mut len = [0u8; 4];
            if r.read_exact(&mut len).await.is_err() {
                return;
            }
            let len = u32::from_be_bytes(len) as usize;
            let mut frame = vec![0u8; len.min(max)];
            if r.read_exact(&mut frame).await.is_err() {
                return;
            }
            if len > max {
                // Skip the rest of an oversized frame.
                let mut rest = (&mut r).take((len - max) as u64);
                if tokio::io::copy(&mut rest, &mut tokio::io::sink())
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            if in_tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            let mut out = Vec::with_capacity(4 + frame.len());
            out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            out.extend_from_slice(&frame);
            if w.write_all(&out).await.is_err() {
                return;
            }
        }
    });
    Link {
        rx,
        tx,
        tasks: vec![reader, writer],
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on an owned descriptor.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

//! `Tunnel`: a TCP connection to `127.0.0.1:port` inside the guest, relayed
//! over the channel. Host->guest bytes arrive as `Data`, guest->host bytes
//! leave as `Stdout`; `Eof` half-closes in either direction. One thread per
//! tunnel polls the socket and the request's mailbox.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use burrow_protocol::{GuestError, GuestErrorCode, GuestMsg, Response};

use crate::agent::Ctx;
use crate::log::warning;
use crate::mailbox::{Event, Input};
use crate::sys;

/// Upper bound for connecting on the loopback interface.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves a `Tunnel` request.
pub fn run(ctx: &Ctx, port: u16) -> Result<Response, GuestError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let sock = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| {
        GuestError::new(
            GuestErrorCode::ConnectionRefused,
            format!("connecting to {addr}: {e}"),
        )
    })?;
    let _ = sock.set_nodelay(true);
    // An empty first chunk says "connected": the host need not wait to
    // learn that the connect did not fail.
    ctx.stdout(Vec::new());
    sock.set_nonblocking(true)
        .map_err(|e| GuestError::from_io(&e, "tunnel socket"))?;
    let mut tunnel = Tunnel {
        ctx,
        sock,
        reading: true,
        writing: true,
        host_eof: false,
        pending: Vec::new(),
        error: None,
    };
    tunnel.run();
    match tunnel.error {
        Some(e) => Err(GuestError::from_io(&e, &format!("tunnel to {addr}"))),
        None => Ok(Response::Done),
    }
}

struct Tunnel<'a> {
    ctx: &'a Ctx,
    sock: TcpStream,
    /// guest->host direction still open.
    reading: bool,
    /// host->guest direction still open.
    writing: bool,
    /// The host sent `Eof`: half-close once `pending` is written.
    host_eof: bool,
    pending: Vec<u8>,
    error: Option<io::Error>,
}

impl Tunnel<'_> {
    fn run(&mut self) {
        let mut buf = self.ctx.agent.out.buffer();
        while self.reading || self.writing {
            let mut events = 0;
            if self.reading && self.ctx.out_credit(1) > 0 {
                events |= libc::POLLIN;
            }
            if self.writing && !self.pending.is_empty() {
                events |= libc::POLLOUT;
            }
            let sock_fd = (events != 0).then(|| self.sock.as_raw_fd());
            let mut fds = [
                sys::pollfd(Some(self.ctx.inbox.wake_fd()), libc::POLLIN),
                sys::pollfd(sock_fd, events),
            ];
            if let Err(e) = sys::poll(&mut fds, None) {
                warning!("tunnel {}: poll failed: {e}", self.ctx.id);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if sys::readable(&fds[0]) {
                for event in self.ctx.inbox.drain() {
                    if let Event::Input(input) = event {
                        self.on_input(input);
                    }
                }
            }
            if self.reading && sys::readable(&fds[1]) {
                // Without credit a zero-length read would look like EOF.
                let room = self.ctx.out_credit(buf.len());
                if room > 0 {
                    self.read_sock(&mut buf, room);
                }
            }
            if self.writing && sys::writable(&fds[1]) {
                self.write_sock();
            }
            if self.writing && self.host_eof && self.pending.is_empty() {
                let _ = self.sock.shutdown(Shutdown::Write);
                self.writing = false;
            }
        }
    }

    fn on_input(&mut self, input: Input) {
        match input {
            Input::Data(data) => {
                let Some(data) = self.ctx.admit(data) else {
                    return;
                };
                if self.writing && !self.host_eof {
                    self.pending.extend_from_slice(&data);
                } else {
                    self.ctx.consumed(data.len());
                }
            }
            Input::Window(bytes) => self.ctx.granted(bytes),
            Input::Eof => self.host_eof = true,
            Input::Cancel => {
                let _ = self.sock.shutdown(Shutdown::Both);
                self.close_reading();
                self.writing = false;
            }
            _ => {}
        }
    }

    fn close_reading(&mut self) {
        if self.reading {
            self.reading = false;
            self.ctx.agent.out.send(GuestMsg::Eof { id: self.ctx.id });
        }
    }

    /// Reads at most `room` bytes into `buf` and sends them (the buffer
    /// goes out whole; a pooled one takes its place).
    fn read_sock(&mut self, buf: &mut Vec<u8>, room: usize) {
        match self.sock.read(&mut buf[..room]) {
            Ok(0) => self.close_reading(),
            Ok(n) => {
                let mut data = std::mem::replace(buf, self.ctx.agent.out.buffer());
                data.truncate(n);
                self.ctx.stdout(data);
            }
            Err(e) if sys::would_block(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => self.fail(e),
        }
    }

    fn write_sock(&mut self) {
        match self.sock.write(&self.pending) {
            Ok(n) => {
                self.pending.drain(..n);
                self.ctx.consumed(n);
            }
            Err(e) if sys::would_block(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                // The service stopped reading; it may still be sending.
                self.writing = false;
                self.ctx.consumed(self.pending.len());
                self.pending.clear();
            }
            Err(e) => self.fail(e),
        }
    }

    /// A hard error (reset): both directions are gone.
    fn fail(&mut self, e: io::Error) {
        self.close_reading();
        self.writing = false;
        self.pending.clear();
        self.error.get_or_insert(e);
    }
}

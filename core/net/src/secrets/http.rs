//! The guest's bytes on a connection of a sandbox with secrets, read as
//! HTTP/1 requests: in each request's head (request line and headers) the
//! placeholders of the secrets allowed for its host become their values;
//! a placeholder anywhere else (a head to another host, a body, a
//! connection that is not HTTP) is a [`Leak`], and the connection closes.
//!
//! The filter keeps only what it must: the head being read (at most
//! [`MAX_HEAD`]), a chunk-size line, and the last bytes it passed on, to
//! find a placeholder split between two reads. Bodies pass through as they
//! come, framed by `Content-Length` or chunked coding so that the next
//! request's head is found; what cannot be framed (an upgrade, `CONNECT`,
//! a malformed head or chunk, anything that is not HTTP) passes as opaque
//! bytes, still searched for placeholders.

use std::net::Ipv4Addr;
use std::sync::Arc;

use super::{Secret, PLACEHOLDER_DIGITS, PLACEHOLDER_PREFIX};

/// Longest request head read; a longer one passes as opaque bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers of a request head read.
const MAX_HEADERS: usize = 128;
/// Longest chunk-size or trailer line read.
const MAX_LINE: usize = 4096;
/// A placeholder's length.
const PLACEHOLDER_LEN: usize = PLACEHOLDER_PREFIX.len() + PLACEHOLDER_DIGITS;

/// Whom the requests on a connection go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// An intercepted HTTPS connection to this name (the far end's
    /// certificate proved it).
    Tls(String),
    /// A plain connection to `dst` (as the guest addressed it), an address
    /// the guest resolved from `names` (none for one it did not look up);
    /// `host_ip` is where the host side went (the host's loopback for the
    /// guest's gateway).
    Plain {
        /// The guest's destination.
        dst: Ipv4Addr,
        /// The host side's destination.
        host_ip: Ipv4Addr,
        /// The names the guest resolved `dst` from.
        names: Vec<String>,
    },
}

/// A placeholder on its way where its secret may not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The secret's name.
    pub secret: String,
    /// The host the request named (`None`: not in a request head, or a
    /// head without a host).
    pub host: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a request head.
    Head,
    /// This many body bytes left.
    Length(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// Bytes that are not framed as HTTP.
    Opaque,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// The chunk-size line.
    Size,
    /// This many chunk bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines, to the empty one.
    Trailer,
}

/// Reads one connection's guest-to-host bytes.
#[derive(Debug)]
pub struct Filter {
    secrets: Arc<[Secret]>,
    peer: Peer,
    state: State,
    /// The head read so far.
    head: Vec<u8>,
    /// The chunk line read so far (bounded).
    line: Vec<u8>,
    /// The verified host of the request whose body is passing.
    host: Option<String>,
    /// The last bytes passed outside a head.
    tail: Vec<u8>,
}

impl Filter {
    /// A filter of a new connection to `peer`.
    pub fn new(secrets: Arc<[Secret]>, peer: Peer) -> Filter {
        let host = match &peer {
            Peer::Tls(name) => Some(name.clone()),
            Peer::Plain { .. } => None,
        };
        Filter {
            secrets,
            peer,
            state: State::Head,
            head: Vec::new(),
            line: Vec::new(),
            host,
            tail: Vec::new(),
        }
    }

    /// Takes the guest's next bytes; appends what goes on to the far end
    /// to `out`. After a leak the filter must not be used again.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut at = 0;
        while at < input.len() {
            let rest = &input[at..];
            at += match self.state {
                State::Head => self.head_bytes(rest, out)?,
                State::Length(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    self.pass(&rest[..n], out)?;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Length(left)
                    };
                    n
                }
                State::Chunked(chunk) => self.chunk_bytes(chunk, rest, out)?,
                State::Opaque => {
                    self.pass(rest, out)?;
                    rest.len()
                }
            };
        }
        Ok(())
    }

    /// The guest ended its side: a head left unfinished goes on as opaque
    /// bytes (still searched).
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Leak> {
        if !self.head.is_empty() {
            let head = std::mem::take(&mut self.head);
            self.state = State::Opaque;
            self.pass(&head, out)?;
        }
        Ok(())
    }

    fn head_bytes(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<usize, Leak> {
        let before = self.head.len();
        self.head.extend_from_slice(rest);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let parsed = httparse::Request::new(&mut headers).parse(&self.head);
        match parsed {
            // A head longer than MAX_HEAD is opaque however it arrived.
            Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => {
                let mut head = std::mem::take(&mut self.head);
                head.truncate(n);
                self.finish_head(head, out)?;
                Ok(n - before)
            }
            Ok(httparse::Status::Partial) if self.head.len() <= MAX_HEAD => Ok(rest.len()),
            _ => {
                let head = std::mem::take(&mut self.head);
                self.state = State::Opaque;
                self.host = self.fixed_host();
                self.pass(&head, out)?;
                Ok(rest.len())
            }
        }
    }

    /// A whole head: its host verified, the next state from its framing,
    /// its placeholders replaced (or refused).
    fn finish_head(&mut self, mut head: Vec<u8>, out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        // It parsed complete a moment ago.
        let _ = req.parse(&head);
        let named = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("host"))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(host_of);
        self.state = framing(req.method.unwrap_or(""), req.headers);
        self.host = match &self.peer {
            Peer::Tls(name) => Some(name.clone()),
            Peer::Plain { .. } => named.as_deref().and_then(|h| self.verified(h)),
        };
        self.tail.clear();
        for secret in self.placeholders_in(&head) {
            if !self.host.as_deref().is_some_and(|h| secret.allowed(h)) {
                return Err(Leak {
                    secret: secret.name.clone(),
                    host: named.or_else(|| self.host.clone()),
                });
            }
        }
        for secret in self.secrets.iter() {
            if self.host.as_deref().is_some_and(|h| secret.allowed(h)) {
                head = replace_all(
                    &head,
                    secret.placeholder.as_bytes(),
                    secret.value.as_bytes(),
                );
            }
        }
        out.extend_from_slice(&head);
        Ok(())
    }

    /// The host of a plain request whose `Host` names `host`, if the
    /// connection really goes there: a name the guest resolved its
    /// address from, or the address itself (read as where the host side
    /// went: the gateway's requests are the loopback's).
    fn verified(&self, host: &str) -> Option<String> {
        let Peer::Plain {
            dst,
            host_ip,
            names,
        } = &self.peer
        else {
            return None;
        };
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return (ip == *dst).then(|| host_ip.to_string());
        }
        names.iter().any(|n| n == host).then(|| host.to_owned())
    }

    fn fixed_host(&self) -> Option<String> {
        match &self.peer {
            Peer::Tls(name) => Some(name.clone()),
            Peer::Plain { .. } => None,
        }
    }

    fn chunk_bytes(&mut self, chunk: Chunk, rest: &[u8], out: &mut Vec<u8>) -> Result<usize, Leak> {
        if let Chunk::Data(left) = chunk {
            let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
            self.pass(&rest[..n], out)?;
            let left = left - n as u64;
            self.state = State::Chunked(if left == 0 {
                Chunk::DataEnd
            } else {
                Chunk::Data(left)
            });
            return Ok(n);
        }
        // A line: passed on as it comes, read when whole.
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        self.pass(&rest[..n], out)?;
        self.line.extend_from_slice(&rest[..n]);
        if self.line.len() > MAX_LINE {
            self.line.clear();
            self.state = State::Opaque;
            return Ok(n);
        }
        if !self.line.ends_with(b"\n") {
            return Ok(n);
        }
        let line = std::mem::take(&mut self.line);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        self.state = match chunk {
            Chunk::Size => match chunk_size(text) {
                Some(0) => State::Chunked(Chunk::Trailer),
                Some(size) => State::Chunked(Chunk::Data(size)),
                None => State::Opaque,
            },
            Chunk::DataEnd if text.is_empty() => State::Chunked(Chunk::Size),
            Chunk::Trailer if text.is_empty() => State::Head,
            Chunk::Trailer => State::Chunked(Chunk::Trailer),
            Chunk::DataEnd | Chunk::Data(_) => State::Opaque,
        };
        Ok(n)
    }

    /// Passes bytes outside a head on, refusing a placeholder of a secret
    /// not allowed for the request's host (a placeholder is passed on
    /// unchanged where it is allowed: only heads are rewritten).
    fn pass(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(bytes);
        for secret in self.placeholders_in(&window) {
            if !self.host.as_deref().is_some_and(|h| secret.allowed(h)) {
                return Err(Leak {
                    secret: secret.name.clone(),
                    host: self.host.clone(),
                });
            }
        }
        out.extend_from_slice(bytes);
        let keep = window.len().min(PLACEHOLDER_LEN - 1);
        window.drain(..window.len() - keep);
        self.tail = window;
        Ok(())
    }

    /// The secrets whose placeholders are in `bytes`.
    fn placeholders_in<'a>(&'a self, bytes: &[u8]) -> Vec<&'a Secret> {
        let mut found = Vec::new();
        let prefix = PLACEHOLDER_PREFIX.as_bytes();
        let mut from = 0;
        while let Some(i) = find(&bytes[from..], prefix) {
            let at = from + i;
            if let Some(candidate) = bytes.get(at..at + PLACEHOLDER_LEN) {
                if let Some(s) = self
                    .secrets
                    .iter()
                    .find(|s| s.placeholder.as_bytes() == candidate)
                {
                    found.push(s);
                }
            }
            from = at + 1;
        }
        found
    }
}

/// How the body after a head is framed.
fn framing(method: &str, headers: &[httparse::Header<'_>]) -> State {
    let named = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if method.eq_ignore_ascii_case("CONNECT") || named("upgrade").next().is_some() {
        return State::Opaque;
    }
    if let Some(te) = named("transfer-encoding").next_back() {
        let last = te.rsplit(',').next().unwrap_or("").trim().to_owned();
        return if last == "chunked" {
            State::Chunked(Chunk::Size)
        } else {
            State::Opaque
        };
    }
    let lengths: Vec<String> = named("content-length").collect();
    match lengths.first() {
        None => State::Head,
        Some(first) if lengths.iter().all(|l| l == first) => match first.parse::<u64>() {
            Ok(0) => State::Head,
            Ok(n) if first.bytes().all(|b| b.is_ascii_digit()) => State::Length(n),
            _ => State::Opaque,
        },
        Some(_) => State::Opaque,
    }
}

/// A chunk-size line's size (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    let hex = text.split(';').next()?.trim();
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A `Host` header's host: lower case, without a port or a final dot.
fn host_of(value: &str) -> String {
    let v = value.trim();
    let host = match v.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => v,
    };
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&b| b == first) {
        let at = from + i;
        if hay[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut from = 0;
    while let Some(i) = find(&hay[from..], needle) {
        out.extend_from_slice(&hay[from..from + i]);
        out.extend_from_slice(with);
        from += i + needle.len();
    }
    out.extend_from_slice(&hay[from..]);
    out
}

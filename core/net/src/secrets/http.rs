//! The guest's bytes on a connection of a sandbox with secrets, read as
//! HTTP/1 requests. A placeholder becomes its value in one place only:
//! the value of a header the secret names (`Authorization` and
//! `Proxy-Authorization` unless it names others), in the head of a
//! request to a host the secret is for. Anything else with a placeholder
//! in it is a [`Leak`], and the connection closes before any of that
//! request goes on:
//! - a head to another host, and a head whose hosts disagree: on
//!   intercepted HTTPS a `Host` header or an absolute-form target naming
//!   another host than the TLS name (SNI), on plain HTTP an absolute-form
//!   target naming another host than `Host`, or two `Host` headers that
//!   differ (each is a way to have a server, a virtual host or a proxy
//!   take the value somewhere the secret is not for);
//! - a placeholder in the request line or in a header the secret does not
//!   name, even to the secret's host. Refusing rather than passing it
//!   unchanged: the head is held whole, so nothing of the request has
//!   left, and a placeholder there is either a mistake (a token put in a
//!   URL or an `X-Api-Key` the secret does not name), which the log then
//!   names instead of the far end answering 401, or a try at getting the
//!   value into a part of the request that servers echo (a 404 page
//!   quotes the path, a redirect repeats it);
//! - a placeholder in a body, or in bytes that are not HTTP, to a host
//!   the secret is not for.
//!
//! In a body to the secret's own host a placeholder passes unchanged: a
//! body is streamed (refusing would cut a request that has partly left)
//! and a placeholder is worth nothing without the stack.
//!
//! A request that got a value asks for an answer without content coding
//! (`Accept-Encoding: identity` in place of the guest's), so that the
//! answer can be read for the value ([`super::answer`]).
//!
//! The filter keeps only what it must: the head being read (at most
//! [`MAX_HEAD`]), a chunk-size line, and the last bytes it passed on, to
//! find a placeholder split between two reads. Bodies pass through as they
//! come, framed by `Content-Length` or chunked coding so that the next
//! request's head is found; what cannot be framed (an upgrade, `CONNECT`,
//! a malformed head or chunk, anything that is not HTTP) passes as opaque
//! bytes, still searched for placeholders.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use super::head::{host_of, splice, Head, Spot};
use super::{Secret, PLACEHOLDER_DIGITS, PLACEHOLDER_PREFIX};

/// Longest request head read; a longer one passes as opaque bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers of a request head read.
const MAX_HEADERS: usize = 128;
/// Longest chunk-size or trailer line read.
const MAX_LINE: usize = 4096;
/// A placeholder's length.
const PLACEHOLDER_LEN: usize = PLACEHOLDER_PREFIX.len() + PLACEHOLDER_DIGITS;
/// Most requests of a connection waiting for their answers that are
/// remembered (their methods and whether they carried a value).
pub const MAX_WAITING: usize = 1024;

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

/// A placeholder on its way where its secret may not go (or, from
/// [`super::answer`], its value on its way back to the guest unread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The secret's name.
    pub secret: String,
    /// The host the request named (`None`: not in a request head, or a
    /// head without a host).
    pub host: Option<String>,
    /// Where it was.
    pub place: Place,
}

/// Where a refused placeholder (or value) was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Going to a host the secret is not for.
    Elsewhere,
    /// In the request line of a request to its host.
    RequestLine,
    /// In this header of a request to its host, which the secret does not
    /// name.
    Header(String),
    /// In a request whose hosts disagree: it named `Leak::host` on a
    /// connection to this one (the TLS name, or the `Host` header).
    Misdirected(String),
    /// Coming back in an answer with this content or transfer coding,
    /// which cannot be read for the value.
    Coded(String),
    /// In a request behind [`MAX_WAITING`] others waiting for answers.
    Backlog,
}

/// What a request asked, for reading its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// A `HEAD` request (its answer has no body).
    pub head: bool,
    /// A `CONNECT` request (a 2xx answer starts a tunnel).
    pub connect: bool,
    /// The secret whose value it carried, and the host it went to.
    pub carried: Option<(String, Option<String>)>,
}

/// The requests of a connection waiting for their answers.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    pub queue: VecDeque<Asked>,
    /// More came than are remembered: answers are no longer told apart.
    pub lost: bool,
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
    /// Where the requests are told to the reader of their answers.
    waiting: Option<Arc<Mutex<Waiting>>>,
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
            waiting: None,
        }
    }

    /// The same filter telling `waiting` what each request asked (for the
    /// reader of the answers).
    pub(crate) fn telling(mut self, waiting: Arc<Mutex<Waiting>>) -> Filter {
        self.waiting = Some(waiting);
        self
    }

    /// Whom the requests go to.
    pub fn peer(&self) -> &Peer {
        &self.peer
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
    fn finish_head(&mut self, head: Vec<u8>, out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        // It parsed complete a moment ago.
        let _ = req.parse(&head);
        let method = req.method.unwrap_or("").to_owned();
        self.state = framing(&method, req.headers);
        let Some(read) = Head::read(&head) else {
            // httparse took what this reader does not: pass it as opaque
            // bytes (searched, never changed).
            self.state = State::Opaque;
            self.host = self.fixed_host();
            return self.pass(&head, out);
        };
        let hosts: Vec<String> = read
            .values("host")
            .map(|v| host_of(&String::from_utf8_lossy(v)))
            .collect();
        let absolute = read.absolute_host();
        // What the request names: an absolute-form target wins over Host
        // (RFC 9112, 3.2.2), as a server reads it.
        let named = absolute.clone().or_else(|| hosts.first().cloned());
        self.host = match &self.peer {
            Peer::Tls(name) => Some(name.clone()),
            Peer::Plain { .. } => named.as_deref().and_then(|h| self.verified(h)),
        };
        self.tail.clear();
        let found = self.placeholders_in(&head);
        let mut asked = Asked {
            head: method.eq_ignore_ascii_case("HEAD"),
            connect: method.eq_ignore_ascii_case("CONNECT"),
            carried: None,
        };
        let Some(&(_, first)) = found.first() else {
            self.tell(asked, false)?;
            out.extend_from_slice(&head);
            return Ok(());
        };
        if let Some((other, connection)) = self.disagreeing(&hosts, absolute.as_deref()) {
            return Err(Leak {
                secret: first.name.clone(),
                host: Some(other),
                place: Place::Misdirected(connection),
            });
        }
        let mut edits = Vec::new();
        for &(at, secret) in &found {
            let host = self.host.as_deref().filter(|h| secret.allowed(h));
            let Some(host) = host else {
                return Err(Leak {
                    secret: secret.name.clone(),
                    host: named.or_else(|| self.host.clone()),
                    place: Place::Elsewhere,
                });
            };
            let leak = |place| Leak {
                secret: secret.name.clone(),
                host: Some(host.to_owned()),
                place,
            };
            match read.spot(at, PLACEHOLDER_LEN) {
                Spot::Value(i) if secret.goes_in(read.name(i)) => {
                    edits.push((at..at + PLACEHOLDER_LEN, secret.value.as_bytes().to_vec()));
                }
                Spot::Value(i) | Spot::Header(i) => {
                    return Err(leak(Place::Header(shown_name(read.name(i)))))
                }
                Spot::RequestLine => return Err(leak(Place::RequestLine)),
            }
        }
        // Uncoded answers, so that they can be read for the value: every
        // Accept-Encoding out, one asking for identity in.
        for h in &read.headers {
            if head[h.name.clone()].eq_ignore_ascii_case(b"accept-encoding") {
                edits.push((h.line.clone(), Vec::new()));
            }
        }
        edits.push((
            read.end..read.end,
            b"Accept-Encoding: identity\r\n".to_vec(),
        ));
        edits.sort_by_key(|(r, _)| (r.start, r.end));
        asked.carried = Some((first.name.clone(), self.host.clone()));
        if let Err(mut leak) = self.tell(asked, true) {
            leak.secret = first.name.clone();
            return Err(leak);
        }
        out.extend_from_slice(&splice(&head, &edits));
        Ok(())
    }

    /// Another host a request with a placeholder names than its
    /// connection's, and the connection's: on intercepted HTTPS every
    /// `Host` and an absolute-form target's host must be the TLS name; on
    /// plain HTTP `Host` headers must agree, and with an absolute-form
    /// target's host.
    fn disagreeing(&self, hosts: &[String], absolute: Option<&str>) -> Option<(String, String)> {
        let named = hosts.iter().map(String::as_str).chain(absolute);
        match &self.peer {
            Peer::Tls(name) => named
                .into_iter()
                .find(|h| h != name)
                .map(|h| (h.to_owned(), name.clone())),
            Peer::Plain { .. } => {
                let first = hosts.first()?;
                named
                    .into_iter()
                    .find(|h| h != first)
                    .map(|h| (h.to_owned(), first.clone()))
            }
        }
    }

    /// Tells the reader of the answers what a request asked; a request
    /// that `carries` a value is refused behind too many waiting (its
    /// answer could no longer be told from the others).
    fn tell(&self, asked: Asked, carries: bool) -> Result<(), Leak> {
        let Some(waiting) = &self.waiting else {
            return Ok(());
        };
        let mut w = waiting.lock().unwrap_or_else(|p| p.into_inner());
        if w.lost || w.queue.len() >= MAX_WAITING {
            if carries {
                return Err(Leak {
                    secret: String::new(),
                    host: self.host.clone(),
                    place: Place::Backlog,
                });
            }
            w.lost = true;
            return Ok(());
        }
        w.queue.push_back(asked);
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
        for (_, secret) in self.placeholders_in(&window) {
            if !self.host.as_deref().is_some_and(|h| secret.allowed(h)) {
                return Err(Leak {
                    secret: secret.name.clone(),
                    host: self.host.clone(),
                    place: Place::Elsewhere,
                });
            }
        }
        out.extend_from_slice(bytes);
        let keep = window.len().min(PLACEHOLDER_LEN - 1);
        window.drain(..window.len() - keep);
        self.tail = window;
        Ok(())
    }

    /// The placeholders in `bytes`: where, and whose.
    fn placeholders_in<'a>(&'a self, bytes: &[u8]) -> Vec<(usize, &'a Secret)> {
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
                    found.push((at, s));
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

/// A header's name as a log shows it (bounded: the guest wrote it).
fn shown_name(name: &str) -> String {
    name.chars().take(64).collect()
}

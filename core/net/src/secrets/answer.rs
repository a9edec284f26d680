//! The far end's bytes on a connection that may have carried a secret's
//! value, read as HTTP/1 answers before the guest gets them: every form of
//! every value of the sandbox ([`super::redact`]) is masked in each
//! answer's status line, headers, body and trailers.
//!
//! **Which connections.** Intercepted HTTPS (only a secret's hosts are
//! intercepted), and plain connections whose address the guest resolved
//! from a name a secret is for (or that address itself is one): the only
//! ones a value can have gone out on. Others pass untouched.
//!
//! **Framing.** An answer's head is held whole (at most
//! [`super::http::MAX_HEAD`]) and masked; its body is masked as it streams
//! (`Content-Length` bodies keep their length; a chunked body is read
//! through its chunks, so a value split across chunks is still one, and
//! passed on in chunks of the stack's own, chunk extensions dropped). The
//! requests tell the answers apart: a `HEAD`'s, a `204`'s and a `304`'s
//! have no body, `1xx` come before the final one, a `101` or a `CONNECT`'s
//! `2xx` start bytes that are no longer HTTP. What cannot be read as HTTP
//! (a malformed or overlong head or chunk line, a body to the end of the
//! connection, a tunnel) is masked as a plain byte stream to the end.
//!
//! **Coded answers.** A compressed body hides the value from the matcher.
//! A request that carried a value asked for none ([`super::http`] sets
//! `Accept-Encoding: identity`); an answer to it that comes with a content
//! coding or a transfer coding other than `chunked` anyway is refused: the
//! connection closes before its head reaches the guest. Answers to
//! requests that carried no value pass as they come, masked as bytes (a
//! service that keeps a value it was sent and serves it compressed later,
//! to a request without one, is not caught).

use std::sync::{Arc, Mutex};

use super::http::{Asked, Filter, Leak, Peer, Place, Waiting, MAX_HEAD};
use super::redact::{Forms, Redactor};
use super::Secret;

/// Most headers of an answer head read.
const MAX_HEADERS: usize = 128;
/// Longest chunk-size or trailer line read.
const MAX_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading an answer's head.
    Head,
    /// This many body bytes left.
    Length(u64),
    /// In a chunked body.
    Chunked(Chunk),
    /// Bytes to the end of the connection.
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

/// Reads one connection's far-to-guest bytes.
#[derive(Debug)]
pub struct Answers {
    redactor: Redactor,
    waiting: Arc<Mutex<Waiting>>,
    state: State,
    /// The head read so far.
    head: Vec<u8>,
    /// The chunk line read so far.
    line: Vec<u8>,
}

/// The filter of a new connection to `peer` and, where a value may go out
/// on it, the reader of its answers.
pub fn pair(secrets: Arc<[Secret]>, peer: Peer, forms: Arc<Forms>) -> (Filter, Option<Answers>) {
    let may_carry = match &peer {
        Peer::Tls(_) => true,
        Peer::Plain { host_ip, names, .. } => {
            let ip = host_ip.to_string();
            secrets
                .iter()
                .any(|s| s.allowed(&ip) || names.iter().any(|n| s.allowed(n)))
        }
    };
    let filter = Filter::new(secrets, peer);
    if !may_carry {
        return (filter, None);
    }
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    let answers = Answers {
        redactor: Redactor::new(forms),
        waiting: waiting.clone(),
        state: State::Head,
        head: Vec::new(),
        line: Vec::new(),
    };
    (filter.telling(waiting), Some(answers))
}

impl Answers {
    /// Takes the far end's next bytes; appends what goes on to the guest
    /// to `out`. After a refusal it must not be used again.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut at = 0;
        while at < input.len() {
            let rest = &input[at..];
            at += match self.state {
                State::Head => self.head_bytes(rest, out)?,
                State::Length(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    self.redactor.push(&rest[..n], out);
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        self.redactor.flush(out);
                        State::Head
                    } else {
                        State::Length(left)
                    };
                    n
                }
                State::Chunked(chunk) => self.chunk_bytes(chunk, rest, out),
                State::Raw => {
                    self.redactor.push(rest, out);
                    rest.len()
                }
            };
        }
        Ok(())
    }

    /// The far end ended its side: what is held goes on.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let head = std::mem::take(&mut self.head);
        let line = std::mem::take(&mut self.line);
        self.redactor.push(&head, out);
        self.redactor.push(&line, out);
        if matches!(self.state, State::Chunked(_)) {
            let mut data = Vec::new();
            self.redactor.flush(&mut data);
            chunk_out(&data, out);
        } else {
            self.redactor.flush(out);
        }
    }

    /// Bytes held now (the head being read, a chunk line, the matcher's).
    pub fn holding(&self) -> usize {
        self.head.len() + self.line.len() + self.redactor.holding()
    }

    /// Bytes of a body or a stream the matcher holds (which a pause of the
    /// far end releases).
    pub fn releasable(&self) -> usize {
        match self.state {
            State::Head => 0,
            _ => self.redactor.holding(),
        }
    }

    /// The far end paused: what the matcher holds of a body or a stream
    /// goes on (a head stays held until whole).
    pub fn release(&mut self, out: &mut Vec<u8>) {
        match self.state {
            State::Head => {}
            State::Chunked(_) => {
                let mut data = Vec::new();
                self.redactor.release(&mut data);
                chunk_out(&data, out);
            }
            State::Length(_) | State::Raw => self.redactor.release(out),
        }
    }

    fn head_bytes(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<usize, Leak> {
        if self.lost() {
            self.state = State::Raw;
            return Ok(0);
        }
        let before = self.head.len();
        self.head.extend_from_slice(rest);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let parsed = httparse::Response::new(&mut headers).parse(&self.head);
        match parsed {
            Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => {
                let mut head = std::mem::take(&mut self.head);
                head.truncate(n);
                self.finish_head(&head, out)?;
                Ok(n - before)
            }
            Ok(httparse::Status::Partial) if self.head.len() <= MAX_HEAD => Ok(rest.len()),
            _ => {
                let head = std::mem::take(&mut self.head);
                self.state = State::Raw;
                self.redactor.push(&head, out);
                Ok(rest.len())
            }
        }
    }

    fn lost(&self) -> bool {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).lost
    }

    /// A whole head: the request it answers, the framing of its body, the
    /// refusal of a coded answer to a request that carried a value; then
    /// it goes on, masked.
    fn finish_head(&mut self, head: &[u8], out: &mut Vec<u8>) -> Result<(), Leak> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        // It parsed complete a moment ago.
        let _ = resp.parse(head);
        let code = resp.code.unwrap_or(0);
        let interim = (100..200).contains(&code) && code != 101;
        let asked = if interim {
            Asked::default()
        } else {
            let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            w.queue.pop_front().unwrap_or_default()
        };
        let named = |name: &'static str| {
            resp.headers
                .iter()
                .filter(move |h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
        };
        let no_body = interim || asked.head || code == 204 || code == 304;
        let mut coding: Vec<String> = named("content-encoding")
            .flat_map(|v| {
                v.split(',')
                    .map(|c| c.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty() && c != "identity")
            .collect();
        let transfer: Vec<String> = named("transfer-encoding")
            .flat_map(|v| {
                v.split(',')
                    .map(|c| c.trim().to_owned())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty())
            .collect();
        coding.extend(
            transfer
                .iter()
                .filter(|c| *c != "chunked" && *c != "identity")
                .cloned(),
        );
        self.state = if code == 101 || (asked.connect && (200..300).contains(&code)) {
            State::Raw
        } else if no_body {
            State::Head
        } else if let Some(last) = transfer.last() {
            if last == "chunked" {
                State::Chunked(Chunk::Size)
            } else {
                State::Raw
            }
        } else {
            let lengths: Vec<String> = named("content-length").collect();
            match lengths.first() {
                None => State::Raw,
                Some(first) if lengths.iter().all(|l| l == first) => match first.parse::<u64>() {
                    Ok(0) => State::Head,
                    Ok(n) if first.bytes().all(|b| b.is_ascii_digit()) => State::Length(n),
                    _ => State::Raw,
                },
                Some(_) => State::Raw,
            }
        };
        if let (Some((secret, host)), false, Some(c)) = (&asked.carried, no_body, coding.first()) {
            return Err(Leak {
                secret: secret.clone(),
                host: host.clone(),
                place: Place::Coded(c.chars().take(32).collect()),
            });
        }
        self.redactor.push(head, out);
        self.redactor.flush(out);
        Ok(())
    }

    fn chunk_bytes(&mut self, chunk: Chunk, rest: &[u8], out: &mut Vec<u8>) -> usize {
        if let Chunk::Data(left) = chunk {
            let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
            let mut data = Vec::with_capacity(n);
            self.redactor.push(&rest[..n], &mut data);
            chunk_out(&data, out);
            let left = left - n as u64;
            self.state = State::Chunked(if left == 0 {
                Chunk::DataEnd
            } else {
                Chunk::Data(left)
            });
            return n;
        }
        // A line: held until whole (the chunk framing is the stack's own).
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        self.line.extend_from_slice(&rest[..n]);
        if self.line.len() > MAX_LINE {
            let line = std::mem::take(&mut self.line);
            self.raw_from(&line, out);
            return n;
        }
        if !self.line.ends_with(b"\n") {
            return n;
        }
        let line = std::mem::take(&mut self.line);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        match chunk {
            Chunk::Size => match chunk_size(text) {
                Some(0) => {
                    let mut data = Vec::new();
                    self.redactor.flush(&mut data);
                    chunk_out(&data, out);
                    out.extend_from_slice(b"0\r\n");
                    self.state = State::Chunked(Chunk::Trailer);
                }
                Some(size) => self.state = State::Chunked(Chunk::Data(size)),
                None => self.raw_from(&line, out),
            },
            Chunk::DataEnd if text.is_empty() => self.state = State::Chunked(Chunk::Size),
            Chunk::Trailer if text.is_empty() => {
                out.extend_from_slice(b"\r\n");
                self.state = State::Head;
            }
            Chunk::Trailer => {
                // A trailer field: masked as a line of its own.
                self.redactor.push(&line, out);
                self.redactor.flush(out);
            }
            Chunk::DataEnd | Chunk::Data(_) => self.raw_from(&line, out),
        }
        n
    }

    /// A chunked body that is not: `bytes` and all that follows, masked
    /// as a stream.
    fn raw_from(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        self.state = State::Raw;
        self.redactor.push(bytes, out);
    }
}

/// `data` as one chunk (nothing when empty: an empty chunk ends a body).
fn chunk_out(data: &[u8], out: &mut Vec<u8>) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
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

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;

//! A request head as the secrets' filter reads it: where its request line
//! and each header's name and value are (byte ranges of the head as it
//! came, which is rewritten in place), the hosts it names, and the
//! rewriting itself.

use std::ops::Range;

/// One header line.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// The name.
    pub name: Range<usize>,
    /// The value, without surrounding blanks.
    pub value: Range<usize>,
    /// The whole line with its line end.
    pub line: Range<usize>,
}

/// Where a head's parts are.
#[derive(Debug, Clone)]
pub(crate) struct Head<'a> {
    pub bytes: &'a [u8],
    /// The request line with its line end.
    pub request_line: Range<usize>,
    /// The request target.
    pub target: Range<usize>,
    pub headers: Vec<Line>,
    /// Where the empty line that ends the head starts.
    pub end: usize,
}

/// Where a placeholder is in a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spot {
    /// In the request line.
    RequestLine,
    /// Inside the value of the header at this index.
    Value(usize),
    /// Elsewhere in the header at this index (its name, or across lines).
    Header(usize),
}

impl<'a> Head<'a> {
    /// Reads a whole head (one httparse accepted: lines end with LF or
    /// CRLF, no folded lines).
    pub fn read(bytes: &'a [u8]) -> Option<Head<'a>> {
        let mut lines = LineIter { bytes, at: 0 };
        let (first, first_text) = lines.next()?;
        let mut words = split_blanks(bytes, first_text);
        let _method = words.next()?;
        let target = words.next()?;
        let mut headers = Vec::new();
        loop {
            let (line, text) = lines.next()?;
            if text.is_empty() {
                return Some(Head {
                    bytes,
                    request_line: first,
                    target,
                    headers,
                    end: line.start,
                });
            }
            let colon = bytes[text.clone()].iter().position(|&b| b == b':')? + text.start;
            let mut value = colon + 1..text.end;
            while value.start < value.end && matches!(bytes[value.start], b' ' | b'\t') {
                value.start += 1;
            }
            while value.end > value.start && matches!(bytes[value.end - 1], b' ' | b'\t') {
                value.end -= 1;
            }
            headers.push(Line {
                name: text.start..colon,
                value,
                line,
            });
        }
    }

    /// A header's name.
    pub fn name(&self, i: usize) -> &'a str {
        std::str::from_utf8(&self.bytes[self.headers[i].name.clone()]).unwrap_or("")
    }

    /// The values of the headers named `name` (any case).
    pub fn values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a [u8]> + 's {
        self.headers
            .iter()
            .filter(move |h| self.bytes[h.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| &self.bytes[h.value.clone()])
    }

    /// The host of an absolute-form request target
    /// (`http://host:port/path`), as [`host_of`] gives it.
    pub fn absolute_host(&self) -> Option<String> {
        let target = &self.bytes[self.target.clone()];
        let text = std::str::from_utf8(target).ok()?;
        let (scheme, rest) = text.split_once("://")?;
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+')
        {
            return None;
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        // Userinfo is not allowed in an http(s) target; what follows its
        // `@` is the host a server would read.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        Some(host_of(authority))
    }

    /// Where the `len` bytes at `at` are.
    pub fn spot(&self, at: usize, len: usize) -> Spot {
        if at < self.request_line.end {
            return Spot::RequestLine;
        }
        for (i, h) in self.headers.iter().enumerate() {
            if h.line.contains(&at) {
                return if at >= h.value.start && at + len <= h.value.end {
                    Spot::Value(i)
                } else {
                    Spot::Header(i)
                };
            }
        }
        // The final empty line holds nothing; count it as the last header.
        Spot::Header(self.headers.len().saturating_sub(1))
    }
}

/// A `Host` header's host (or an authority's): lower case, without a port
/// or a final dot.
pub(crate) fn host_of(value: &str) -> String {
    let v = value.trim();
    let host = match v.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => v,
    };
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

struct LineIter<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Iterator for LineIter<'_> {
    /// The line with its end, and its text without it.
    type Item = (Range<usize>, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.bytes.get(self.at..)?;
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let start = self.at;
        let end = start + nl + 1;
        let mut text_end = start + nl;
        if text_end > start && self.bytes[text_end - 1] == b'\r' {
            text_end -= 1;
        }
        self.at = end;
        Some((start..end, start..text_end))
    }
}

/// The blank-separated words of `range` in `bytes`.
fn split_blanks(bytes: &[u8], range: Range<usize>) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut at = range.start;
    let end = range.end;
    std::iter::from_fn(move || {
        while at < end && matches!(bytes[at], b' ' | b'\t') {
            at += 1;
        }
        if at >= end {
            return None;
        }
        let start = at;
        while at < end && !matches!(bytes[at], b' ' | b'\t') {
            at += 1;
        }
        Some(start..at)
    })
}

/// `bytes` with each range replaced (ranges sorted, not overlapping).
pub(crate) fn splice(bytes: &[u8], edits: &[(Range<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let mut at = 0;
    for (range, with) in edits {
        out.extend_from_slice(&bytes[at..range.start]);
        out.extend_from_slice(with);
        at = range.end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

//! Splitting a streamed body into NDJSON lines, whatever the chunking.

use crate::error::{Error, Result};

/// Longest accepted line of a streamed answer (a log line is bounded by
/// what the supervisor writes; this only bounds a broken peer).
pub(crate) const MAX_LINE: usize = 16 << 20;

/// Collects chunks and hands out complete lines (without `\n` or `\r\n`).
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    /// How far `buf` is known to hold no `\n`.
    scanned: usize,
    max: usize,
}

impl LineSplitter {
    /// A splitter refusing lines longer than `max` bytes.
    pub(crate) fn new(max: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            scanned: 0,
            max,
        }
    }

    /// Adds a chunk; returns the lines it completed, in order. Empty lines
    /// are skipped.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.buf.extend_from_slice(chunk);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(pos) = self.buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + pos;
            let line = trim_cr(&self.buf[start..end]);
            if line.len() > self.max {
                return Err(too_long(self.max));
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line.to_vec());
            }
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > self.max {
            return Err(too_long(self.max));
        }
        Ok(lines)
    }

    /// The last line when the stream ended without a final newline.
    pub(crate) fn finish(self) -> Option<Vec<u8>> {
        let line = trim_cr(&self.buf);
        (!line.iter().all(u8::is_ascii_whitespace)).then(|| line.to_vec())
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn too_long(max: usize) -> Error {
    Error::protocol(format!(
        "the server sent a stream line longer than {max} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new(MAX_LINE);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(s.push(c).unwrap());
        }
        out.extend(s.finish());
        out.into_iter()
            .map(|l| String::from_utf8(l).unwrap())
            .collect()
    }

    #[test]
    fn lines_across_chunk_boundaries() {
        let text = b"{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":\"x\\ny\"}\n{\"d\":4}";
        let want = vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":\"x\\ny\"}", "{\"d\":4}"];
        // Every way of cutting the text in two and in three pieces.
        for i in 0..=text.len() {
            assert_eq!(all(&[&text[..i], &text[i..]]), want, "cut at {i}");
            for j in i..=text.len() {
                assert_eq!(
                    all(&[&text[..i], &text[i..j], &text[j..]]),
                    want,
                    "cut at {i}, {j}"
                );
            }
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(all(&bytes), want);
    }

    #[test]
    fn multibyte_utf8_split_inside_a_character() {
        let text = "{\"t\":\"€ü\"}\n".as_bytes();
        for i in 0..=text.len() {
            assert_eq!(all(&[&text[..i], &text[i..]]), vec!["{\"t\":\"€ü\"}"]);
        }
    }

    #[test]
    fn no_trailing_line_and_blank_lines() {
        assert!(all(&[b"\n\n", b"  \n"]).is_empty());
        assert!(all(&[]).is_empty());
        assert_eq!(all(&[b"x\n", b"\r\n"]), vec!["x"]);
    }

    #[test]
    fn overlong_lines_are_refused() {
        let mut s = LineSplitter::new(4);
        assert_eq!(s.push(b"abcd\nab").unwrap(), vec![b"abcd".to_vec()]);
        assert!(s.push(b"c").is_ok());
        let err = s.push(b"de").unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::Protocol);
        let mut s = LineSplitter::new(4);
        assert!(s.push(b"abcde\n").is_err());
    }
}

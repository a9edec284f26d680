//! Copying the guest's stderr into its log, line by line.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::RotatingFile;

/// Longest run of bytes [`capture`] holds back waiting for a newline.
const MAX_PENDING: usize = 16 * 1024;

/// A partial line older than this is written out by [`capture`] as it is
/// (the rest of the line follows it in the file).
const PARTIAL_FLUSH: Duration = Duration::from_millis(500);

/// Copies `reader` (the guest's stderr) into `sink` line by line until EOF;
/// returns the number of bytes copied. A partial line is written as it is
/// once it has waited [`PARTIAL_FLUSH`] or grown past 16 KiB (the rest of
/// the line follows it), and at EOF with a newline added.
pub async fn capture<R: AsyncRead + Unpin>(mut reader: R, sink: &RotatingFile) -> io::Result<u64> {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 8192];
    let mut total = 0u64;
    let result = loop {
        // `read` is cancel-safe: a timed-out read loses no bytes.
        let read = if pending.is_empty() {
            Some(reader.read(&mut chunk).await)
        } else {
            tokio::time::timeout(PARTIAL_FLUSH, reader.read(&mut chunk))
                .await
                .ok()
        };
        match read {
            Some(Ok(0)) => break Ok(total),
            Some(Ok(n)) => {
                total += n as u64;
                pending.extend_from_slice(&chunk[..n]);
                if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                    let rest = pending.split_off(end + 1);
                    for line in pending.split_inclusive(|b| *b == b'\n') {
                        sink.append(line)?;
                    }
                    pending = rest;
                }
                if pending.len() >= MAX_PENDING {
                    sink.append(&pending)?;
                    pending.clear();
                }
            }
            // A partial line waited long enough: out it goes.
            None => {
                sink.append(&pending)?;
                pending.clear();
            }
            Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Some(Err(e)) => break Err(e),
        }
    };
    if !pending.is_empty() {
        pending.push(b'\n');
        sink.append(&pending)?;
    }
    result
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::logs::fixtures::lines_of;
    use crate::engine::logs::rotated_path;

    #[tokio::test]
    async fn capture_copies_lines_partials_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.log");
        let sink = RotatingFile::with_max_bytes(&path, 1 << 20).unwrap();
        let (mut w, r) = tokio::io::duplex(64);
        let copy = async {
            use tokio::io::AsyncWriteExt;
            w.write_all(b"one\ntw").await.unwrap();
            tokio::time::sleep(PARTIAL_FLUSH * 2).await;
            // The partial line was written out while it waited.
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntw");
            w.write_all(b"o\nthree").await.unwrap();
            drop(w);
        };
        let (n, ()) = tokio::join!(capture(r, &sink), copy);
        assert_eq!(n.unwrap(), 13);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\nthree\n");
    }

    #[tokio::test]
    async fn capture_rotates_on_line_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.log");
        let sink = RotatingFile::with_max_bytes(&path, 10).unwrap();
        let data: &[u8] = b"aaaa\nbbbb\ncccc\ndddd\n";
        capture(data, &sink).await.unwrap();
        assert_eq!(lines_of(&rotated_path(&path)), ["aaaa", "bbbb"]);
        assert_eq!(lines_of(&path), ["cccc", "dddd"]);
    }
}

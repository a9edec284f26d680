//! Wire protocol between the burrow host (library and supervisor) and the
//! guest agent.
//!
//! The channel is a byte stream (container stdio pipes, a virtio console port,
//! or the supervisor's unix socket). It carries *frames*: a 4-byte big-endian
//! payload length followed by that many bytes of JSON. Frames larger than
//! [`MAX_FRAME_LEN`] are rejected before any allocation, so a malformed or
//! hostile peer produces a [`FrameError`], never a crash or an unbounded
//! buffer.
//!
//! The first frame in each direction is a hello carrying [`PROTOCOL_VERSION`];
//! a peer speaking another version is refused.
//!
//! Requests carry a caller-chosen `id`; every frame that belongs to a request
//! (streamed output, exit, response) carries the same id, so many requests can
//! be in flight on one channel. This crate has no async runtime in it: it
//! offers blocking `std::io` helpers and pure encode/decode functions that
//! async callers wrap.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

mod bytes;
mod messages;
pub mod vm;

pub use bytes::Bytes;
pub use messages::*;

/// Protocol version spoken by this build. Bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest accepted frame payload (4 MiB). Data chunks are far smaller
/// ([`MAX_CHUNK`]), so only a broken or hostile peer reaches this.
pub const MAX_FRAME_LEN: usize = 4 * 1024 * 1024;

/// Largest data chunk a sender puts in one frame (stdout, file content, tunnel).
pub const MAX_CHUNK: usize = 64 * 1024;

/// Errors reading or writing frames.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer announced a frame longer than [`MAX_FRAME_LEN`].
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
    TooLarge {
        /// Announced length.
        len: usize,
    },
    /// The payload is not a valid message of the expected type.
    #[error("malformed frame")]
    Malformed(#[source] serde_json::Error),
    /// The stream ended in the middle of a frame.
    #[error("channel closed in the middle of a frame")]
    Truncated,
    /// Underlying I/O failure.
    #[error("channel i/o error")]
    Io(#[source] std::io::Error),
}

/// Encodes one message as a complete frame (length prefix + JSON).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serialising our own message types to JSON cannot fail: they contain no
    // maps with non-string keys and no failing Serialize impls.
    let body = serde_json::to_vec(msg).unwrap_or_else(|_| b"null".to_vec());
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Parses the 4-byte length header, enforcing [`MAX_FRAME_LEN`].
pub fn decode_len(header: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge { len });
    }
    Ok(len)
}

/// Decodes a frame payload (without its length header).
pub fn decode<T: for<'de> Deserialize<'de>>(payload: &[u8]) -> Result<T, FrameError> {
    serde_json::from_slice(payload).map_err(FrameError::Malformed)
}

/// Blocking read of one frame. Returns `Ok(None)` on a clean end of stream
/// (EOF exactly at a frame boundary).
pub fn read_frame<R: Read, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<Option<T>, FrameError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let len = decode_len(header)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e)
        }
    })?;
    decode(&body).map(Some)
}

/// Blocking write of one frame (flushes).
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)).map_err(FrameError::Io)?;
    w.flush().map_err(FrameError::Io)
}

#[cfg(test)]
mod tests;

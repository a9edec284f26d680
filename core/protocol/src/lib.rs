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
//! The first frame in each direction is a hello carrying a protocol
//! version; the two peers settle on the lower of theirs, and a peer
//! speaking a version outside [`OLDEST_PROTOCOL_VERSION`]`..=`
//! [`PROTOCOL_VERSION`] is refused.
//!
//! From protocol 2 on, data frames (`Stdout`, `Stderr` and host `Data`)
//! travel as *binary frames*: the length word has its top bit set and the
//! body is a kind byte, the request id (8 bytes, big-endian) and the raw
//! payload, so bulk bytes cost no JSON or base64. Protocol 2 also adds
//! per-request flow control: a request states an initial credit
//! (`HostMsg::Request::window`), the sender of data never has more
//! unacknowledged payload bytes in flight than its credit, and the reader
//! grants more (`HostMsg::Window`, `GuestMsg::Window`) as it consumes them.
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

/// Highest protocol version spoken by this build. Bumped on any
/// incompatible change.
pub const PROTOCOL_VERSION: u32 = 2;

/// Oldest protocol version this build still speaks with a peer.
pub const OLDEST_PROTOCOL_VERSION: u32 = 1;

/// First protocol version with binary data frames and flow control.
pub const FLOW_CONTROL_VERSION: u32 = 2;

/// The credit a request of this build states (`HostMsg::Request::window`)
/// and keeps topped up: 1 MiB per direction. It bounds what an open
/// stream holds in memory on each hop, and is enough for about 100 Mbit/s
/// at 50 ms of round trip.
pub const DEFAULT_WINDOW: u32 = 1 << 20;

/// Top bit of a binary frame's length word.
const BINARY_FLAG: u32 = 1 << 31;

/// Kind byte and request id in front of a binary frame's payload.
pub const DATA_PREFIX_LEN: usize = 9;

/// Largest accepted frame payload (4 MiB). Data chunks are far smaller
/// ([`MAX_CHUNK`]), so only a broken or hostile peer reaches this.
pub const MAX_FRAME_LEN: usize = 4 * 1024 * 1024;

/// Largest data chunk a sender puts in one frame (stdout, file content,
/// tunnel): 256 KiB, a quarter of [`DEFAULT_WINDOW`].
pub const MAX_CHUNK: usize = 256 * 1024;

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
    /// A binary frame that is not a data frame this side reads.
    #[error("malformed data frame: {why}")]
    BadData {
        /// What is wrong with it.
        why: &'static str,
    },
}

/// What a frame's length word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Length of the body.
    pub len: usize,
    /// Whether the body is a binary data frame (else JSON).
    pub binary: bool,
}

/// Parses a 4-byte length word, enforcing [`MAX_FRAME_LEN`]. (A binary
/// frame too short for its prefix is read whole, then refused by
/// [`decode_frame`]: the stream stays in sync.)
pub fn decode_header(word: [u8; 4]) -> Result<Header, FrameError> {
    let raw = u32::from_be_bytes(word);
    let binary = raw & BINARY_FLAG != 0;
    let len = (raw & !BINARY_FLAG) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge { len });
    }
    Ok(Header { len, binary })
}

/// The kind byte of a binary data frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// `GuestMsg::Stdout`.
    Stdout = 1,
    /// `GuestMsg::Stderr`.
    Stderr = 2,
    /// `HostMsg::Data`.
    Input = 3,
}

impl DataKind {
    fn from_byte(b: u8) -> Option<DataKind> {
        match b {
            1 => Some(DataKind::Stdout),
            2 => Some(DataKind::Stderr),
            3 => Some(DataKind::Input),
            _ => None,
        }
    }
}

/// Parses the prefix of a binary frame: its kind and request id.
pub fn decode_data_prefix(prefix: [u8; DATA_PREFIX_LEN]) -> Result<(DataKind, u64), FrameError> {
    let kind = DataKind::from_byte(prefix[0]).ok_or(FrameError::BadData {
        why: "unknown kind",
    })?;
    let mut id = [0u8; 8];
    id.copy_from_slice(&prefix[1..]);
    Ok((kind, u64::from_be_bytes(id)))
}

/// A channel message: JSON, except its data frames, which travel binary
/// from protocol 2 on.
pub trait Message: Serialize + for<'de> Deserialize<'de> + Sized {
    /// The kind, request id and payload when this is a data frame.
    fn data(&self) -> Option<(DataKind, u64, &[u8])>;
    /// The data frame of `kind`; an error for a kind this side never reads.
    fn from_data(kind: DataKind, id: u64, payload: Vec<u8>) -> Result<Self, FrameError>;
}

impl Message for GuestMsg {
    fn data(&self) -> Option<(DataKind, u64, &[u8])> {
        match self {
            GuestMsg::Stdout { id, data } => Some((DataKind::Stdout, *id, &data.0)),
            GuestMsg::Stderr { id, data } => Some((DataKind::Stderr, *id, &data.0)),
            _ => None,
        }
    }

    fn from_data(kind: DataKind, id: u64, payload: Vec<u8>) -> Result<Self, FrameError> {
        match kind {
            DataKind::Stdout => Ok(GuestMsg::Stdout {
                id,
                data: Bytes(payload),
            }),
            DataKind::Stderr => Ok(GuestMsg::Stderr {
                id,
                data: Bytes(payload),
            }),
            DataKind::Input => Err(FrameError::BadData {
                why: "input sent by the guest",
            }),
        }
    }
}

impl Message for HostMsg {
    fn data(&self) -> Option<(DataKind, u64, &[u8])> {
        match self {
            HostMsg::Data { id, data } => Some((DataKind::Input, *id, &data.0)),
            _ => None,
        }
    }

    fn from_data(kind: DataKind, id: u64, payload: Vec<u8>) -> Result<Self, FrameError> {
        match kind {
            DataKind::Input => Ok(HostMsg::Data {
                id,
                data: Bytes(payload),
            }),
            DataKind::Stdout | DataKind::Stderr => Err(FrameError::BadData {
                why: "output sent by the host",
            }),
        }
    }
}

/// How a message goes on the wire for a peer of protocol `version`.
#[derive(Debug)]
pub enum Wire<'a> {
    /// A binary data frame: its length word and prefix, then the payload
    /// (written as is, without a copy).
    Data([u8; 4 + DATA_PREFIX_LEN], &'a [u8]),
    /// A whole JSON frame.
    Json(Vec<u8>),
}

/// The wire form of `msg` for a peer of protocol `version`: its data
/// frames binary from [`FLOW_CONTROL_VERSION`] on.
pub fn wire<M: Message>(msg: &M, version: u32) -> Wire<'_> {
    match msg.data() {
        Some((kind, id, payload)) if version >= FLOW_CONTROL_VERSION => {
            let len = (DATA_PREFIX_LEN + payload.len()) as u32;
            let mut head = [0u8; 4 + DATA_PREFIX_LEN];
            // A payload is at most a few MiB, far below the flag bit.
            head[..4].copy_from_slice(&(len | BINARY_FLAG).to_be_bytes());
            head[4] = kind as u8;
            head[5..].copy_from_slice(&id.to_be_bytes());
            Wire::Data(head, payload)
        }
        _ => Wire::Json(encode(msg)),
    }
}

/// Encodes a message as a complete frame for a peer of protocol
/// `version`: its data frames binary from [`FLOW_CONTROL_VERSION`] on.
pub fn encode_for<M: Message>(msg: &M, version: u32) -> Vec<u8> {
    match wire(msg, version) {
        Wire::Data(head, payload) => [&head[..], payload].concat(),
        Wire::Json(frame) => frame,
    }
}

/// Writes `msg` for a peer of protocol `version` (see [`wire`]), without
/// flushing.
pub fn write_message<W: Write, M: Message>(
    w: &mut W,
    msg: &M,
    version: u32,
) -> std::io::Result<()> {
    match wire(msg, version) {
        Wire::Data(head, payload) => {
            w.write_all(&head)?;
            w.write_all(payload)
        }
        Wire::Json(frame) => w.write_all(&frame),
    }
}

/// Decodes a frame body read after `header`.
pub fn decode_frame<M: Message>(header: Header, mut body: Vec<u8>) -> Result<M, FrameError> {
    if !header.binary {
        return decode(&body);
    }
    let mut prefix = [0u8; DATA_PREFIX_LEN];
    prefix.copy_from_slice(body.get(..DATA_PREFIX_LEN).ok_or(FrameError::BadData {
        why: "shorter than its prefix",
    })?);
    let (kind, id) = decode_data_prefix(prefix)?;
    body.drain(..DATA_PREFIX_LEN);
    M::from_data(kind, id, body)
}

/// Blocking read of one message frame, JSON or binary. Returns `Ok(None)`
/// on a clean end of stream.
pub fn read_message<R: Read, M: Message>(r: &mut R) -> Result<Option<M>, FrameError> {
    let Some((header, body)) = read_raw(r)? else {
        return Ok(None);
    };
    decode_frame(header, body).map(Some)
}

/// Blocking read of one frame's header and body, not decoded.
pub fn read_raw<R: Read>(r: &mut R) -> Result<Option<(Header, Vec<u8>)>, FrameError> {
    let mut word = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut word[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let header = decode_header(word)?;
    let mut body = vec![0u8; header.len];
    r.read_exact(&mut body).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e)
        }
    })?;
    Ok(Some((header, body)))
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

/// Parses the 4-byte length header of a JSON frame, enforcing
/// [`MAX_FRAME_LEN`] (a binary frame's word reads as too large).
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

/// Blocking read of one JSON frame. Returns `Ok(None)` on a clean end of
/// stream (EOF exactly at a frame boundary). A binary frame is malformed here.
pub fn read_frame<R: Read, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<Option<T>, FrameError> {
    match read_raw(r)? {
        None => Ok(None),
        Some((header, _)) if header.binary => Err(FrameError::BadData {
            why: "a data frame where a JSON frame belongs",
        }),
        Some((_, body)) => decode(&body).map(Some),
    }
}

/// Blocking write of one frame (flushes).
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)).map_err(FrameError::Io)?;
    w.flush().map_err(FrameError::Io)
}

#[cfg(test)]
mod tests;

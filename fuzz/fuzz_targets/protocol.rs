//! The agent channel's frames: what the guest agent and the supervisor
//! read from a peer they do not trust.
//!
//! Input: a mode byte, then bytes.
//! - even mode: one frame payload, decoded as every message type a peer
//!   reads: `HostMsg` (the agent, and the supervisor from its clients),
//!   `GuestMsg` (the supervisor and the host from the agent), `VmBoot`
//!   (the agent in a microVM, from its initramfs), `VmResume` (the agent
//!   of a restored microVM, from the host) and `VmTemplateReady` (the
//!   host, from a template's agent);
//!   `HostMsg` and `GuestMsg` are also decoded as the body of a binary
//!   data frame (protocol 2);
//! - odd mode: a byte stream read frame by frame with `read_message` (JSON
//!   and binary frames), as `HostMsg` and as `GuestMsg`, through a reader
//!   that returns short reads of `mode >> 1` bytes (0: as many as asked)
//!   and an `Interrupted` error now and then.
//!
//! Properties: no panic; whatever decodes encodes to a frame whose header
//! `decode_len` accepts and that decodes (and reads) back to an equal
//! value, with the same bytes when encoded again, for protocol 1 and for
//! protocol 2 (binary data frames); a stream ends cleanly only at a frame
//! boundary; only an announced length over the limit is `TooLarge`, a
//! malformed frame is consumed whole, and a reader that never fails
//! produces no `Io` error.

#![no_main]

use std::fmt::Debug;
use std::io::{self, Read};

use burrow_protocol::vm::{VmBoot, VmResume, VmTemplateReady};
use burrow_protocol::{
    decode, decode_frame, decode_header, decode_len, encode, encode_for, read_frame, read_message,
    FrameError, GuestMsg, Header, HostMsg, Message, MAX_FRAME_LEN, PROTOCOL_VERSION,
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = burrow_fuzz::mode(data) else {
        return;
    };
    if mode % 2 == 0 {
        message::<HostMsg>(rest);
        message::<GuestMsg>(rest);
        payload::<VmBoot>(rest);
        payload::<VmResume>(rest);
        payload::<VmTemplateReady>(rest);
    } else {
        let chunk = usize::from(mode >> 1);
        stream::<HostMsg>(rest, chunk);
        stream::<GuestMsg>(rest, chunk);
    }
});

trait Msg: Serialize + DeserializeOwned + PartialEq + Debug {}
impl<T: Serialize + DeserializeOwned + PartialEq + Debug> Msg for T {}

fn payload<T: Msg>(p: &[u8]) {
    if let Ok(msg) = decode::<T>(p) {
        round_trip(&msg);
    }
}

/// A channel message: as JSON, and as a binary data frame's body.
fn message<M: Msg + Message>(p: &[u8]) {
    payload::<M>(p);
    let binary = Header {
        len: p.len(),
        binary: true,
    };
    if let Ok(msg) = decode_frame::<M>(binary, p.to_vec()) {
        round_trip_v2(&msg);
    }
}

/// `msg` encoded for protocol 2 reads back to itself.
fn round_trip_v2<M: Msg + Message>(msg: &M) {
    round_trip(msg);
    let frame = encode_for(msg, PROTOCOL_VERSION);
    let header = decode_header(frame[..4].try_into().expect("a 4-byte header"))
        .expect("an encoded frame's header is accepted");
    assert_eq!(header.len, frame.len() - 4, "the header counts the payload");
    let mut r = io::Cursor::new(&frame);
    let read: Option<M> = read_message(&mut r).expect("an encoded frame reads");
    assert_eq!(read.as_ref(), Some(msg));
    assert_eq!(encode_for(read.as_ref().expect("read"), PROTOCOL_VERSION), frame);
    assert!(read_message::<_, M>(&mut r).expect("clean end").is_none());
}

/// Encodes `msg` and checks it decodes, and reads, back to itself.
fn round_trip<T: Msg>(msg: &T) {
    let frame = encode(msg);
    let header: [u8; 4] = frame[..4].try_into().expect("a 4-byte header");
    let len = decode_len(header).expect("an encoded frame's header is accepted");
    assert_eq!(len, frame.len() - 4, "the header counts the payload");
    let again: T = decode(&frame[4..]).expect("an encoded message decodes");
    assert_eq!(&again, msg, "decode(encode(m)) == m");
    assert_eq!(encode(&again), frame, "encoding is stable");
    let mut r = io::Cursor::new(&frame);
    let read: Option<T> = read_frame(&mut r).expect("an encoded frame reads");
    assert_eq!(read.as_ref(), Some(msg));
    assert!(read_frame::<_, T>(&mut r).expect("clean end").is_none());
}

/// A reader of `data` in reads of at most `chunk` bytes (0: no limit),
/// failing every third call with `Interrupted`.
struct Choppy<'a> {
    data: &'a [u8],
    pos: usize,
    chunk: usize,
    calls: usize,
}

impl Read for Choppy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls % 3 == 0 {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let left = &self.data[self.pos..];
        let mut n = buf.len().min(left.len());
        if self.chunk > 0 {
            n = n.min(self.chunk);
        }
        buf[..n].copy_from_slice(&left[..n]);
        self.pos += n;
        Ok(n)
    }
}

/// The length a frame's word announces (without the binary flag).
fn announced(word: &[u8]) -> usize {
    let w: [u8; 4] = word.try_into().expect("4 bytes");
    (u32::from_be_bytes(w) & 0x7fff_ffff) as usize
}

fn stream<T: Msg + Message>(data: &[u8], chunk: usize) {
    let mut r = Choppy {
        data,
        pos: 0,
        chunk,
        calls: 0,
    };
    // Where the frame being read starts.
    let mut start = 0;
    loop {
        let res = read_message::<_, T>(&mut r);
        match res {
            Ok(Some(msg)) => round_trip_v2(&msg),
            Ok(None) => {
                assert_eq!(start, data.len(), "a clean end only at a frame boundary");
                return;
            }
            // The frame was read whole: the stream is still in sync and
            // the agent reads on.
            Err(FrameError::Malformed(_) | FrameError::BadData { .. }) => {}
            Err(FrameError::TooLarge { len }) => {
                assert!(len > MAX_FRAME_LEN);
                assert_eq!(announced(&data[start..start + 4]), len);
                return;
            }
            Err(FrameError::Truncated) => {
                let left = data.len() - start;
                let announced = (left >= 4).then(|| announced(&data[start..start + 4]));
                assert!(
                    left < 4 || announced.is_some_and(|a| left - 4 < a),
                    "Truncated with a whole frame left"
                );
                return;
            }
            Err(FrameError::Io(e)) => panic!("an I/O error from a reader that never fails: {e}"),
        }
        // A frame was consumed whole: its header and payload.
        start += 4 + announced(&data[start..start + 4]);
        assert_eq!(r.pos, start, "read_frame consumed exactly one frame");
    }
}

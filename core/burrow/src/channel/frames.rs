//! Async reading and writing of protocol frames.

use burrow_protocol::{
    decode_data_prefix, decode_frame, decode_header, encode, wire, FrameError, Message, Wire,
    DATA_PREFIX_LEN,
};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads one message frame, JSON or binary; `Ok(None)` on a clean EOF at
/// a frame boundary. A binary frame's payload is read straight into its
/// own buffer.
pub async fn read_frame<R: AsyncRead + Unpin, M: Message>(
    r: &mut R,
) -> Result<Option<M>, FrameError> {
    let mut word = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut word[got..]).await.map_err(FrameError::Io)?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        got += n;
    }
    let header = decode_header(word)?;
    if header.binary && header.len >= DATA_PREFIX_LEN {
        let mut prefix = [0u8; DATA_PREFIX_LEN];
        read_exact(r, &mut prefix).await?;
        let (kind, id) = decode_data_prefix(prefix)?;
        let mut payload = vec![0u8; header.len - DATA_PREFIX_LEN];
        read_exact(r, &mut payload).await?;
        return M::from_data(kind, id, payload).map(Some);
    }
    let mut body = vec![0u8; header.len];
    read_exact(r, &mut body).await?;
    decode_frame(header, body).map(Some)
}

async fn read_exact<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<(), FrameError> {
    r.read_exact(buf).await.map(|_| ()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e)
        }
    })
}

/// Writes one JSON frame and flushes.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), FrameError> {
    w.write_all(&encode(msg)).await.map_err(FrameError::Io)?;
    w.flush().await.map_err(FrameError::Io)
}

/// Writes one message for a peer of protocol `version`, without flushing:
/// a data frame's payload goes out as is, not copied into a frame first.
pub async fn write_message<W: AsyncWrite + Unpin, M: Message>(
    w: &mut W,
    msg: &M,
    version: u32,
) -> std::io::Result<()> {
    match wire(msg, version) {
        Wire::Data(head, payload) => {
            w.write_all(&head).await?;
            w.write_all(payload).await
        }
        Wire::Json(frame) => w.write_all(&frame).await,
    }
}

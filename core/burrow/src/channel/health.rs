//! How an agent channel is doing, as its reader sees it: whether it ended
//! and how (closed between frames, or broken by bytes that are not the
//! protocol), and whether it is stuck in the middle of a frame.
//!
//! The guest is hostile, and a process in it that reaches the agent's end
//! of the channel (its file descriptor, its device) can write anything
//! into it. The reader stops at the first byte that is not a frame; the
//! supervisor hears it through [`AgentClient::ended`] and ends the run as
//! crashed, and through [`AgentClient::read_progress`] it sees a length
//! word that promised a body that never comes (the reader would otherwise
//! swallow the agent's next frames as that body, and every caller wait).
//!
//! [`AgentClient::ended`]: super::client::AgentClient::ended
//! [`AgentClient::read_progress`]: super::client::AgentClient::read_progress

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use burrow_protocol::FrameError;
use tokio::io::{AsyncRead, ReadBuf};

/// How an agent channel ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelEnd {
    /// The peer closed it (between frames, in the middle of one as a dying
    /// process does, or after saying `Fatal`), or reading it failed.
    Closed(String),
    /// The peer sent bytes that are not a frame of the protocol: a length
    /// beyond the limit, a body that does not decode. Nothing after them
    /// can be trusted to start at a frame boundary.
    Corrupt(String),
}

impl ChannelEnd {
    /// How reading ended with `error`.
    pub(super) fn of(error: &FrameError) -> ChannelEnd {
        match error {
            FrameError::TooLarge { .. } | FrameError::Malformed(_) | FrameError::BadData { .. } => {
                ChannelEnd::Corrupt(error_chain(error))
            }
            FrameError::Truncated | FrameError::Io(_) => ChannelEnd::Closed(error_chain(error)),
        }
    }
}

fn error_chain(error: &FrameError) -> String {
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// Bytes the reader consumed, and how many of them ended a whole frame.
#[derive(Debug, Default)]
pub(super) struct ReadProgress {
    read: AtomicU64,
    framed: AtomicU64,
}

impl ReadProgress {
    /// A frame was read whole: everything consumed so far is framed.
    pub(super) fn frame_done(&self) {
        self.framed
            .store(self.read.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Bytes consumed, and whether some of them start a frame not yet
    /// read whole.
    #[cfg_attr(not(feature = "local"), allow(dead_code))] // read by the supervisor
    pub(super) fn get(&self) -> (u64, bool) {
        let read = self.read.load(Ordering::SeqCst);
        (read, read > self.framed.load(Ordering::SeqCst))
    }
}

/// A reader that counts what it hands out into a [`ReadProgress`].
#[derive(Debug)]
pub(super) struct Counted<R> {
    inner: R,
    progress: Arc<ReadProgress>,
}

impl<R> Counted<R> {
    pub(super) fn new(inner: R, progress: Arc<ReadProgress>) -> Self {
        Counted { inner, progress }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len().saturating_sub(before) as u64;
        if got > 0 {
            self.progress.read.fetch_add(got, Ordering::SeqCst);
        }
        polled
    }
}

/// Watches a run's agent channel for a frame that stopped half-way: fed
/// one look per period ([`StallWatch::look`]), it says when the channel
/// has sat in the middle of a frame, without a byte more, for `limit`
/// looks in a row. Looks are taken only while the guest runs (a frozen
/// guest may stop anywhere), and a look after a long pause of the loop
/// counts once, so the guest always has `limit` periods of running time
/// to finish a frame it began.
#[cfg(feature = "local")]
#[derive(Debug)]
pub(crate) struct StallWatch {
    limit: u32,
    last: u64,
    still: u32,
}

#[cfg(feature = "local")]
impl StallWatch {
    /// A watch that fires after `limit` looks without progress.
    pub(crate) fn new(limit: u32) -> Self {
        StallWatch {
            limit,
            last: 0,
            still: 0,
        }
    }

    /// One look at `(bytes read, in the middle of a frame)`; true when the
    /// channel is stuck.
    pub(crate) fn look(&mut self, (read, mid_frame): (u64, bool)) -> bool {
        if mid_frame && read == self.last {
            self.still += 1;
        } else {
            self.still = 0;
        }
        self.last = read;
        self.still >= self.limit
    }

    /// Forgets what was seen (the guest was frozen, or just thawed).
    pub(crate) fn reset(&mut self) {
        self.still = 0;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use burrow_protocol::{encode, GuestMsg, PROTOCOL_VERSION};
    use tokio::io::{duplex, split, AsyncWriteExt};

    use super::*;
    use crate::channel::client::{AgentClient, Handshake};
    use crate::channel::frames::read_frame;

    /// A client connected to a scripted agent; the agent's write half.
    async fn connected() -> (AgentClient, tokio::io::WriteHalf<tokio::io::DuplexStream>) {
        let (ours, theirs) = duplex(1 << 16);
        let (mut their_rd, mut their_wr) = split(theirs);
        let hello = GuestMsg::Hello {
            version: PROTOCOL_VERSION,
            agent_version: "test".into(),
            identity: None,
        };
        their_wr.write_all(&encode(&hello)).await.unwrap();
        tokio::spawn(async move {
            while let Ok(Some(_)) = read_frame::<_, burrow_protocol::HostMsg>(&mut their_rd).await {
            }
        });
        let (rd, wr) = split(ours);
        let client = AgentClient::connect(rd, wr, Handshake::Agent, Duration::from_secs(5))
            .await
            .unwrap();
        (client, their_wr)
    }

    async fn ended(client: &AgentClient) -> ChannelEnd {
        tokio::time::timeout(Duration::from_secs(5), client.ended())
            .await
            .expect("the channel's end is heard")
    }

    #[tokio::test]
    async fn garbage_breaks_the_channel_and_fails_what_waits() {
        for garbage in [
            &b"this is not a frame\n"[..],
            // A length within the limit, a body that is not JSON.
            &[0, 0, 0, 4, b'n', b'o', b'p', b'e'][..],
            // A binary frame of an unknown kind.
            &[0x80, 0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 1][..],
        ] {
            let (client, mut agent) = connected().await;
            let pending = client.request(burrow_protocol::Request::Ping).unwrap();
            agent.write_all(garbage).await.unwrap();
            assert!(
                matches!(ended(&client).await, ChannelEnd::Corrupt(_)),
                "{garbage:?}"
            );
            assert!(client.is_closed());
            // The request in flight ends at once, and so does the next.
            let answer = tokio::time::timeout(Duration::from_secs(5), pending.response())
                .await
                .expect("the pending request ends");
            assert!(answer.is_err(), "{answer:?}");
            assert!(client.request(burrow_protocol::Request::Ping).is_err());
        }
    }

    #[tokio::test]
    async fn a_clean_close_is_closed_not_corrupt() {
        let (client, mut agent) = connected().await;
        agent.shutdown().await.unwrap();
        assert!(matches!(ended(&client).await, ChannelEnd::Closed(_)));
        // Asked again, the same answer.
        assert!(matches!(ended(&client).await, ChannelEnd::Closed(_)));
    }

    #[tokio::test]
    async fn a_half_frame_shows_as_progress_in_the_middle_of_a_frame() {
        let (client, mut agent) = connected().await;
        let wait = || tokio::time::sleep(Duration::from_millis(50));
        wait().await;
        let (at_rest, mid) = client.read_progress();
        assert!(!mid);
        // A length word that promises 4 MiB - 1 bytes, and no body.
        agent.write_all(&[0, 0x3f, 0xff, 0xff]).await.unwrap();
        wait().await;
        let (read, mid) = client.read_progress();
        assert_eq!(read, at_rest + 4);
        assert!(mid);
        // The first look is the baseline; two more without a byte fire.
        let mut watch = StallWatch::new(2);
        assert!(!watch.look((read, mid)));
        assert!(!watch.look((read, mid)));
        assert!(watch.look((read, mid)));
        watch.reset();
        assert!(!watch.look((read, mid)));
        // Progress, or rest between frames, is never a stall.
        assert!(!watch.look((read + 1, true)));
        assert!(!watch.look((read + 1, false)));
        assert!(!watch.look((read + 1, false)));
        assert!(!watch.look((read + 1, false)));
        assert!(!client.is_closed());
    }
}

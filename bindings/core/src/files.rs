//! Files read or written as streams: pull cursors of chunks, flow
//! controlled end to end (a language that stops pulling holds the guest's
//! reader), with an explicit `close` so that a language with a garbage
//! collector does not hold the guest's file until a collection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use burrow::{FileReader, FileWriter};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard};

use crate::failure::Failure;
use crate::objects::moved;
use crate::process::Owned;

/// A stream's core object, which `close` takes away: a call pending on it
/// ends at once (with [`Closing::closed`]), later calls fail the same way.
#[derive(Debug)]
struct Closable<T> {
    inner: Owned<Arc<Mutex<Option<T>>>>,
    closed: AtomicBool,
    notify: Notify,
}

impl<T> Closable<T> {
    fn new(val: T) -> Self {
        Closable {
            inner: Owned::new(Arc::new(Mutex::new(Some(val)))),
            closed: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    /// Runs `f` on the core object unless the stream is (or gets) closed:
    /// `None` then.
    async fn with<R>(
        &self,
        f: impl AsyncFnOnce(&mut OwnedMutexGuard<Option<T>>) -> Result<R, Failure>,
    ) -> Result<Option<R>, Failure> {
        let inner = self.inner.get().cloned().ok_or_else(moved)?;
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.closed.load(Ordering::Acquire) {
            return Ok(None);
        }
        tokio::select! {
            r = async {
                let mut slot = inner.lock_owned().await;
                if slot.is_none() { return Ok(None) }
                f(&mut slot).await.map(Some)
            } => r,
            () = notified => Ok(None),
        }
    }

    /// Closes the stream: a pending call ends; the core object, if the
    /// stream had not ended yet, is the caller's to abandon.
    async fn close(&self) -> Result<Option<T>, Failure> {
        let inner = self.inner.get().cloned().ok_or_else(moved)?;
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
        let taken = inner.lock().await.take();
        Ok(taken)
    }
}

fn closed() -> Failure {
    Failure::argument("file", "the stream was closed or finished")
}

/// A sandbox's file read as a stream.
#[derive(Debug)]
pub struct FileReadObj {
    reader: Closable<FileReader>,
}

impl FileReadObj {
    pub(crate) fn new(reader: FileReader) -> Self {
        FileReadObj {
            reader: Closable::new(reader),
        }
    }

    /// The next chunk, `None` at the end of the file (and after `close`).
    pub(crate) async fn next(&self) -> Result<Option<Vec<u8>>, Failure> {
        let chunk = self
            .reader
            .with(async |slot| {
                let reader = slot.as_mut().expect("checked by with");
                let chunk = reader.next_chunk().await?;
                if chunk.is_none() {
                    slot.take();
                }
                Ok(chunk)
            })
            .await?;
        Ok(chunk.flatten())
    }

    /// Abandons the rest of the read.
    pub(crate) async fn close(&self) -> Result<(), Failure> {
        self.reader.close().await.map(drop)
    }
}

/// A sandbox's file written as a stream: `write` each chunk (waiting for
/// the guest to take the one before), then `finish`.
#[derive(Debug)]
pub struct FileWriteObj {
    writer: Closable<FileWriter>,
}

impl FileWriteObj {
    pub(crate) fn new(writer: FileWriter) -> Self {
        FileWriteObj {
            writer: Closable::new(writer),
        }
    }

    /// Appends `data`.
    pub(crate) async fn write(&self, data: &[u8]) -> Result<(), Failure> {
        let done = self
            .writer
            .with(async |slot| {
                let writer = slot.as_mut().expect("checked by with");
                Ok(writer.write(data).await?)
            })
            .await?;
        done.ok_or_else(closed)
    }

    /// Ends the file; the bytes written.
    pub(crate) async fn finish(&self) -> Result<u64, Failure> {
        let written = self
            .writer
            .with(async |slot| {
                let writer = slot.take().expect("checked by with");
                Ok(writer.finish().await?)
            })
            .await?;
        written.ok_or_else(closed)
    }

    /// Abandons the write (what was written stays; a finished file is
    /// unchanged); once this returns, the sandbox writes nothing more of
    /// it.
    pub(crate) async fn close(&self) -> Result<(), Failure> {
        if let Some(writer) = self.writer.close().await? {
            writer.abandon().await;
        }
        Ok(())
    }
}

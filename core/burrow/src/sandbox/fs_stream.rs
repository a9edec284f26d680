//! Files as streams: read and write a sandbox's file chunk by chunk, with
//! memory flat in its size (flow control holds the guest's side while
//! the application takes its time).

use burrow_protocol::{GuestMsg, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::attempt::Attempt;
use super::fs::{guest_path, Fs};
use crate::error::{Error, Result};

/// A file of a sandbox being read chunk by chunk ([`Fs::open_read`]).
/// Dropping it before the end abandons the read in the guest.
#[derive(Debug)]
pub struct FileReader {
    attempt: Attempt,
    /// A chunk read while opening.
    first: Option<Vec<u8>>,
    done: bool,
}

impl FileReader {
    /// The next chunk (at most 256 KiB); `None` at the end of the file.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if let Some(chunk) = self.first.take() {
            return Ok(Some(chunk));
        }
        while !self.done {
            match self.attempt.next().await? {
                Some(GuestMsg::Stdout { data, .. }) => return Ok(Some(data.0)),
                Some(GuestMsg::Response { result: Ok(_), .. }) | None => self.done = true,
                Some(_) => {}
            }
        }
        Ok(None)
    }

    /// Copies the rest of the file into `to`; the number of bytes.
    pub async fn copy_to(mut self, to: &mut (impl AsyncWrite + Unpin)) -> Result<u64> {
        let mut n = 0u64;
        while let Some(chunk) = self.next_chunk().await? {
            to.write_all(&chunk)
                .await
                .map_err(|e| Error::io("writing a file read from the sandbox", None, e))?;
            n += chunk.len() as u64;
        }
        to.flush()
            .await
            .map_err(|e| Error::io("writing a file read from the sandbox", None, e))?;
        Ok(n)
    }
}

/// A file of a sandbox being written chunk by chunk ([`Fs::open_write`]).
/// The file is complete once [`FileWriter::finish`] returned; dropping
/// the writer before that abandons the write (what was written stays), as
/// [`FileWriter::abandon`] does, which also waits for the sandbox.
#[derive(Debug)]
pub struct FileWriter {
    attempt: Attempt,
    written: u64,
}

impl FileWriter {
    /// Appends `data` to the file; waits while the sandbox has not taken
    /// the previous megabyte yet (flow control).
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.attempt.send_data(data).await?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Ends the file and waits until the sandbox has it; the number of
    /// bytes written. A failure of the guest (a missing directory, no
    /// space) is the error here, whenever it happened.
    pub async fn finish(mut self) -> Result<u64> {
        self.attempt.send_eof().await?;
        while let Some(msg) = self.attempt.next().await? {
            if let GuestMsg::Response { result: Ok(_), .. } = msg {
                return Ok(self.written);
            }
        }
        Err(Error::protocol("write ended without a response"))
    }

    /// Abandons the write and waits until the sandbox let go of the file:
    /// what was written stays, and nothing more lands in it after this
    /// returns (dropping the writer abandons it too, without the wait).
    pub async fn abandon(self) {
        self.attempt.abandon().await;
    }
}

impl Fs<'_> {
    /// Opens a file for reading as a stream of chunks: a missing file or
    /// a directory is the error here.
    pub async fn open_read(&self, path: &str) -> Result<FileReader> {
        guest_path("path", path)?;
        let body = Request::ReadFile { path: path.into() };
        let mut reader = FileReader {
            attempt: Attempt::start(self.sandbox(), "read", body).await?,
            first: None,
            done: false,
        };
        // The first frame tells whether the file opened.
        reader.first = reader.next_chunk().await?;
        Ok(reader)
    }

    /// Opens a file for writing as a stream (created with `mode`, default
    /// 0644, or truncated; or appended to).
    pub async fn open_write(
        &self,
        path: &str,
        mode: Option<u32>,
        append: bool,
    ) -> Result<FileWriter> {
        guest_path("path", path)?;
        let body = Request::WriteFile {
            path: path.into(),
            mode,
            append,
        };
        Ok(FileWriter {
            attempt: Attempt::start(self.sandbox(), "write", body).await?,
            written: 0,
        })
    }

    /// Writes (creates or truncates) a file from everything `from` reads;
    /// the number of bytes.
    pub async fn write_from(&self, path: &str, from: &mut (impl AsyncRead + Unpin)) -> Result<u64> {
        let mut file = self.open_write(path, None, false).await?;
        let mut buf = vec![0u8; burrow_protocol::MAX_CHUNK];
        loop {
            let n = from
                .read(&mut buf)
                .await
                .map_err(|e| Error::io("reading what to write into the sandbox", None, e))?;
            if n == 0 {
                return file.finish().await;
            }
            file.write(&buf[..n]).await?;
        }
    }

    /// Reads a file into `to`; the number of bytes.
    pub async fn read_into(&self, path: &str, to: &mut (impl AsyncWrite + Unpin)) -> Result<u64> {
        self.open_read(path).await?.copy_to(to).await
    }
}

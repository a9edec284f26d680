//! Cross-process file locks (flock). Lock files are opened CLOEXEC (std's
//! default), so no child inherits a lock unless it is passed on purpose (the
//! runtime-lifetime lock, handed to the runtime process by the supervisor).

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// An exclusive flock, released when dropped (or when every process holding
/// the descriptor has exited).
#[derive(Debug)]
pub struct FileLock {
    file: File,
}

fn open_raw(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

fn open(path: &Path) -> Result<File> {
    open_raw(path).map_err(|e| Error::io("opening a lock file", Some(path), e))
}

/// Runs a blocking lock call off the async runtime.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Error::io(
            "lock task failed",
            None,
            std::io::Error::other(e.to_string()),
        )
    })?
}

impl FileLock {
    /// Blocks (off the async runtime) until the lock is held.
    pub async fn acquire(path: &Path) -> Result<FileLock> {
        let path = path.to_path_buf();
        off_runtime(move || FileLock::acquire_blocking(&path)).await
    }

    /// Blocks the calling thread until the lock is held (for code that runs
    /// off the async runtime already).
    pub fn acquire_blocking(path: &Path) -> Result<FileLock> {
        let file = open(path)?;
        file.lock()
            .map_err(|e| Error::io("locking", Some(path), e))?;
        Ok(FileLock { file })
    }

    /// Takes the lock of `path` and answers it only if, once held, it is
    /// still the file at `path`: `None` when the path's directory is gone,
    /// or when the holder we waited for deleted the file (with its
    /// directory) before letting it go — a lock nobody else can find.
    pub async fn acquire_linked(path: &Path) -> Result<Option<FileLock>> {
        let path = path.to_path_buf();
        off_runtime(move || {
            let file = match open_raw(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("opening a lock file", Some(&path), e)),
            };
            file.lock()
                .map_err(|e| Error::io("locking", Some(&path), e))?;
            let lock = FileLock { file };
            Ok(lock.is_at(&path).then_some(lock))
        })
        .await
    }

    /// Whether the locked file is (still) the file at `path`.
    pub fn is_at(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::metadata(path)) {
            (Ok(mine), Ok(there)) => mine.dev() == there.dev() && mine.ino() == there.ino(),
            _ => false,
        }
    }

    /// Takes the lock if it is free right now.
    pub fn try_acquire(path: &Path) -> Result<Option<FileLock>> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(FileLock { file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("locking", Some(path), e)),
        }
    }

    /// Polls until the lock is free or `timeout` passes (a blocking flock
    /// cannot be abandoned, polling can).
    pub async fn acquire_within(path: &Path, timeout: Duration) -> Result<Option<FileLock>> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(lock) = FileLock::try_acquire(path)? {
                return Ok(Some(lock));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The raw descriptor (to hand to the runtime process).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

//! Writing: [`RotatingFile`], an append-only log file with a size bound
//! and one rotated generation.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{max_bytes_from_env, rotated_path};
use crate::error::{Error, Result};

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// An append-only log file with a size bound: a write that would take the
/// file past `max_bytes` first renames it to `<name>.1` (replacing the
/// previous generation) and starts a new file. Each write lands whole in one
/// generation, so a file exceeds the bound only by a single write larger
/// than the bound itself.
///
/// Usable from many threads through `&RotatingFile` (which implements
/// [`std::io::Write`]); `Arc<RotatingFile>` is a `tracing_subscriber`
/// `MakeWriter` as it is. Rotation is tracked within this value: one writer
/// per file (the supervisor), however many readers.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    /// `None` after a failed rotation; reopened by the next write.
    file: Option<File>,
    size: u64,
}

impl RotatingFile {
    /// Opens (creating, mode 0600) `path` with the bound from the environment.
    pub fn open(path: impl Into<PathBuf>) -> Result<RotatingFile> {
        RotatingFile::with_max_bytes(path, max_bytes_from_env())
    }

    /// Opens (creating, mode 0600) `path` with an explicit bound (at least 1).
    pub fn with_max_bytes(path: impl Into<PathBuf>, max_bytes: u64) -> Result<RotatingFile> {
        let path = path.into();
        let file = open_append(&path).map_err(|e| Error::io("opening the log", Some(&path), e))?;
        let size = file
            .metadata()
            .map_err(|e| Error::io("reading the log's size", Some(&path), e))?
            .len();
        Ok(RotatingFile {
            path,
            max_bytes: max_bytes.max(1),
            current: Mutex::new(Current {
                file: Some(file),
                size,
            }),
        })
    }

    /// The current file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rotated generation (`<name>.1`).
    pub fn rotated_path(&self) -> PathBuf {
        rotated_path(&self.path)
    }

    /// The size bound.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Appends `data` as one record (rotating first when needed).
    pub fn append(&self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.file.is_some() && cur.size > 0 && cur.size + data.len() as u64 > self.max_bytes {
            // Close first: readers see the old generation complete once it
            // is renamed.
            cur.file = None;
            match std::fs::rename(&self.path, self.rotated_path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        if cur.file.is_none() {
            let file = open_append(&self.path)?;
            cur.size = file.metadata()?.len();
            cur.file = Some(file);
        }
        let Current { file, size } = &mut *cur;
        if let Some(f) = file.as_mut() {
            f.write_all(data)?;
            *size += data.len() as u64;
        }
        Ok(())
    }
}

impl Write for &RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Every write goes straight to the file.
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::logs::fixtures::lines_of;

    #[test]
    fn rotates_at_the_bound_and_keeps_one_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let f = RotatingFile::with_max_bytes(&path, 20).unwrap();
        (&f).write_all(b"0123456789\n").unwrap(); // 11 bytes
        (&f).write_all(b"abcdefgh\n").unwrap(); // 20: still fits
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 20);
        assert!(!f.rotated_path().exists());
        (&f).write_all(b"next\n").unwrap(); // would be 25: rotate first
        assert_eq!(lines_of(&f.rotated_path()), ["0123456789", "abcdefgh"]);
        assert_eq!(lines_of(&path), ["next"]);
        for i in 0..10 {
            (&f).write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        for p in [&path, &f.rotated_path()] {
            assert!(std::fs::metadata(p).unwrap().len() <= 20, "{}", p.display());
        }
        assert_eq!(lines_of(&path), ["line 8", "line 9"]);
        assert_eq!(lines_of(&f.rotated_path()), ["line 6", "line 7"]);
        // Only one rotated generation exists.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // A record larger than the bound lands whole in a fresh file.
        (&f).write_all(&[b'z'; 30]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 30);
    }

    #[test]
    fn reopening_continues_the_size_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, b"0123456789012345\n").unwrap(); // 17 bytes
        let f = RotatingFile::with_max_bytes(&path, 20).unwrap();
        (&f).write_all(b"more\n").unwrap();
        assert_eq!(lines_of(&f.rotated_path()), ["0123456789012345"]);
        assert_eq!(lines_of(&path), ["more"]);
    }

    #[test]
    fn writes_from_many_threads_stay_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let f = std::sync::Arc::new(RotatingFile::with_max_bytes(&path, 4096).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        (&*f)
                            .write_all(format!("thread {t} line {i:04}\n").as_bytes())
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut all = lines_of(&f.rotated_path());
        all.extend(lines_of(&path));
        assert!(!all.is_empty());
        assert!(
            all.iter()
                .all(|l| l.starts_with("thread ") && l.len() == 18),
            "{all:?}"
        );
    }
}

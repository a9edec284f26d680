//! `CopyIn` (a tar stream from the host unpacked into a guest directory) and
//! `CopyOut` (a guest path streamed to the host as a tar archive).
//!
//! Unpacking refuses every entry that could land outside the destination:
//! absolute paths, `..` components, hard links to outside, and paths that
//! go through a symlink leading outside (the `tar` crate's `unpack_in`
//! checks the last two as well; checking first gives the host a clear
//! `InvalidArgument` instead of an I/O error).

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use burrow_protocol::{GuestError, GuestErrorCode, Response, MAX_CHUNK};
use tar::{Archive, Builder, Entry, EntryType};

use crate::agent::{cancelled, Ctx};
use crate::fs::{abs_path, io_err};
use crate::mailbox::{Event, Input};

/// `CopyIn`: unpack the tar stream that follows into `path` (created if missing).
pub fn copy_in(ctx: &Ctx, path: &str) -> Result<Response, GuestError> {
    let dst = abs_path(path)?;
    fs::create_dir_all(&dst).map_err(|e| io_err(&e, &dst))?;
    let dst = dst.canonicalize().map_err(|e| io_err(&e, &dst))?;
    let mut input = InputReader {
        ctx,
        buf: Vec::new(),
        pos: 0,
        eof: false,
        cancelled: false,
    };
    let result = unpack(&mut input, &dst);
    if input.cancelled {
        return Err(cancelled());
    }
    result?;
    // Swallow the rest of the stream (end-of-archive blocks, padding) so the
    // response comes after the host's Eof.
    io::copy(&mut input, &mut io::sink()).map_err(|e| io_err(&e, &dst))?;
    if input.cancelled {
        return Err(cancelled());
    }
    Ok(Response::Done)
}

fn unpack(input: &mut InputReader<'_>, dst: &Path) -> Result<(), GuestError> {
    let mut archive = Archive::new(input);
    archive.set_overwrite(true);
    let tar_err = |e: io::Error| GuestError::from_io(&e, "unpacking");
    // Directories are applied last, deepest first, like `Archive::unpack`
    // does: a read-only directory must not block its own content.
    let mut dirs = Vec::new();
    for entry in archive.entries().map_err(tar_err)? {
        let mut entry = entry.map_err(tar_err)?;
        check_entry(dst, &entry)?;
        if entry.header().entry_type() == EntryType::Directory {
            dirs.push(entry);
        } else {
            entry.unpack_in(dst).map_err(tar_err)?;
        }
    }
    dirs.sort_by(|a, b| b.path_bytes().cmp(&a.path_bytes()));
    for mut dir in dirs {
        dir.unpack_in(dst).map_err(tar_err)?;
    }
    Ok(())
}

fn refuse(why: String) -> GuestError {
    GuestError::new(GuestErrorCode::InvalidArgument, why)
}

/// The entry path as a relative path of plain components, or a refusal.
fn relative(path: &Path) -> Result<PathBuf, GuestError> {
    let mut rel = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse(format!(
                    "archive entry {} is absolute",
                    path.display()
                )))
            }
            Component::ParentDir => {
                return Err(refuse(format!(
                    "archive entry {} escapes the destination",
                    path.display()
                )))
            }
        }
    }
    Ok(rel)
}

/// Refuses an entry that would be written outside `dst` (canonical).
fn check_entry<R: Read>(dst: &Path, entry: &Entry<'_, R>) -> Result<(), GuestError> {
    let path = entry
        .path()
        .map_err(|e| GuestError::from_io(&e, "archive entry path"))?;
    let rel = relative(&path)?;
    // Every existing ancestor inside dst that is a symlink must resolve to
    // a place inside dst, or the entry would be written through it.
    let mut cur = dst.to_path_buf();
    if let Some(parent) = rel.parent() {
        for part in parent.components() {
            cur.push(part);
            match fs::symlink_metadata(&cur) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let real = cur.canonicalize().map_err(|e| io_err(&e, &cur))?;
                    if !real.starts_with(dst) {
                        return Err(refuse(format!(
                            "archive entry {} goes through a symlink leading outside the destination",
                            path.display()
                        )));
                    }
                }
                Ok(_) => {}
                Err(_) => break, // not there yet: it will be created as a directory
            }
        }
    }
    if entry.header().entry_type() == EntryType::Link {
        if let Some(target) = entry
            .link_name()
            .map_err(|e| GuestError::from_io(&e, "archive link name"))?
        {
            relative(&target)?;
        }
    }
    Ok(())
}

/// Reads the `Data` frames of a request as one byte stream (EOF at `Eof`).
struct InputReader<'a> {
    ctx: &'a Ctx,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    cancelled: bool,
}

impl Read for InputReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.eof {
                return Ok(0);
            }
            match self.ctx.next_event() {
                Some(Event::Input(Input::Data(data))) => {
                    // Taken off the queue: the host may send the next.
                    if let Some(data) = self.ctx.admit(data) {
                        self.ctx.consumed(data.len());
                        self.buf = data;
                        self.pos = 0;
                    }
                }
                Some(Event::Input(Input::Eof)) => self.eof = true,
                Some(Event::Input(Input::Cancel)) | None => {
                    self.cancelled = true;
                    return Err(io::Error::other("request cancelled"));
                }
                Some(_) => {}
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// `CopyOut`: a tar archive of `path` with one top-level entry named after
/// its last component, as `Stdout` frames. Symlinks are archived as links.
pub fn copy_out(ctx: &Ctx, path: &str) -> Result<Response, GuestError> {
    let src = abs_path(path)?;
    let name = src.file_name().map(PathBuf::from).ok_or_else(|| {
        GuestError::new(
            GuestErrorCode::InvalidArgument,
            format!(
                "{} has no last component to name the archive entry",
                src.display()
            ),
        )
    })?;
    let meta = fs::symlink_metadata(&src).map_err(|e| io_err(&e, &src))?;
    let mut out = ChunkWriter::new(ctx);
    let mut builder = Builder::new(&mut out);
    builder.follow_symlinks(false);
    let result = if meta.is_dir() {
        builder.append_dir_all(&name, &src)
    } else {
        builder.append_path_with_name(&src, &name)
    };
    let result = result
        .and_then(|()| builder.into_inner())
        .and_then(|out| out.flush());
    if out.cancelled {
        return Err(cancelled());
    }
    result.map_err(|e| io_err(&e, &src))?;
    Ok(Response::Done)
}

/// Sends written bytes as `Stdout` frames of exactly [`MAX_CHUNK`] bytes
/// (the last one shorter). Fails once the request is cancelled.
pub(crate) struct ChunkWriter<'a> {
    ctx: &'a Ctx,
    buf: Vec<u8>,
    cancelled: bool,
}

impl<'a> ChunkWriter<'a> {
    /// A writer of `ctx`'s output.
    pub(crate) fn new(ctx: &'a Ctx) -> Self {
        ChunkWriter {
            ctx,
            buf: Vec::with_capacity(MAX_CHUNK),
            cancelled: false,
        }
    }

    /// Whether the request was cancelled while it wrote.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled
    }
}

impl ChunkWriter<'_> {
    /// Sends the buffer, as the credit allows.
    fn send(&mut self) -> io::Result<()> {
        let mut sent = 0;
        while sent < self.buf.len() {
            let room = match self.ctx.await_credit(self.buf.len() - sent) {
                Ok(room) if !self.cancelled => room,
                _ => {
                    self.cancelled = true;
                    return Err(io::Error::other("request cancelled"));
                }
            };
            self.ctx.stdout(self.buf[sent..sent + room].to_vec());
            sent += room;
        }
        self.buf.clear();
        Ok(())
    }
}

impl Write for ChunkWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(MAX_CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == MAX_CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            self.send()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::Path;

    #[test]
    fn entry_paths_must_stay_relative() {
        assert_eq!(relative(Path::new("./a/b")).expect("ok"), Path::new("a/b"));
        for bad in ["/etc/passwd", "../x", "a/../../x", "a/.."] {
            assert!(relative(Path::new(bad)).is_err(), "{bad}");
        }
    }
}

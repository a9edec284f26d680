//! Streaming file content: `ReadFile` (content out as `Stdout` frames) and
//! `WriteFile` (content in as `Data` frames until `Eof`).

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use burrow_protocol::{GuestError, GuestErrorCode, Response};

use crate::agent::{cancelled, Ctx};
use crate::fs::{abs_path, io_err};
use crate::mailbox::{Event, Input};

/// Mode of a file created by `WriteFile` without an explicit mode.
const DEFAULT_MODE: u32 = 0o644;

/// `ReadFile`: streams the file in chunks of at most [`MAX_CHUNK`].
pub fn read(ctx: &Ctx, path: &str) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    let mut file = File::open(&path).map_err(|e| io_err(&e, &path))?;
    let mut buf = ctx.agent.out.buffer();
    loop {
        let room = ctx.await_credit(buf.len())?;
        let n = match file.read(&mut buf[..room]) {
            Ok(0) => return Ok(Response::Done),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(&e, &path)),
        };
        let mut data = std::mem::replace(&mut buf, ctx.agent.out.buffer());
        data.truncate(n);
        ctx.stdout(data);
    }
}

/// `WriteFile`: creates (with `mode`, default 0644, exactly: not reduced by
/// the umask) or truncates the file, or appends to it, then writes the data
/// as it arrives. Answers `Done` after `Eof`. The parent must exist.
pub fn write(
    ctx: &Ctx,
    path: &str,
    mode: Option<u32>,
    append: bool,
) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    let mode = mode.unwrap_or(DEFAULT_MODE);
    if mode > 0o7777 {
        return Err(GuestError::new(
            GuestErrorCode::InvalidArgument,
            format!("invalid file mode {mode:o}"),
        ));
    }
    let mut file = open_for_write(&path, mode, append).map_err(|e| io_err(&e, &path))?;
    loop {
        match ctx.next_event() {
            Some(Event::Input(Input::Data(data))) => {
                if let Some(data) = ctx.admit(data) {
                    file.write_all(&data).map_err(|e| io_err(&e, &path))?;
                    ctx.consumed(data.len());
                }
            }
            Some(Event::Input(Input::Eof)) => break,
            Some(Event::Input(Input::Cancel)) | None => return Err(cancelled()),
            Some(_) => {}
        }
    }
    file.flush().map_err(|e| io_err(&e, &path))?;
    Ok(Response::Done)
}

fn open_for_write(path: &Path, mode: u32, append: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.write(true).mode(mode);
    if append {
        opts.append(true);
    } else {
        opts.truncate(true);
    }
    match opts.clone().create_new(true).open(path) {
        Ok(file) => {
            // The umask reduced the mode of the new file: set it exactly.
            file.set_permissions(Permissions::from_mode(mode))?;
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => opts.open(path),
        Err(e) => Err(e),
    }
}

//! `burrow logs`: print (or follow) a sandbox's captured log files under
//! `<home>/sandboxes/<id>/logs/`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::common::resolve;
use super::output::say;
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// Sandbox name or id.
    sandbox: String,
    /// Also print the supervisor's log.
    #[arg(long)]
    supervisor: bool,
    /// Keep printing new output until interrupted.
    #[arg(short = 'f', long)]
    follow: bool,
}

pub(crate) async fn logs(ctx: Ctx, args: LogsArgs) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let info = resolve(&backend, &args.sandbox).await?.info().await?;
    let dir = backend.home().sandbox_dir(&info.id).join("logs");
    let mut files = vec![("guest", dir.join("guest.log"))];
    if args.supervisor {
        files.push(("supervisor", dir.join("supervisor.log")));
    }
    if !args.follow && ctx.json {
        let mut body = json!({"sandbox_id": info.id, "name": info.name});
        for (label, path) in &files {
            body[*label] = String::from_utf8_lossy(&read_from(path, &mut 0)?).into();
        }
        ctx.print_json(&body)?;
        return Ok(0);
    }
    let mut offsets = vec![0u64; files.len()];
    // Which file printed last, and whether its output ended a line.
    let mut last: Option<usize> = None;
    let mut at_line_start = true;
    loop {
        for (i, (label, path)) in files.iter().enumerate() {
            let chunk = read_from(path, &mut offsets[i])?;
            if chunk.is_empty() {
                continue;
            }
            let mut text = Vec::new();
            if ctx.json {
                let line = json!({"source": label, "text": String::from_utf8_lossy(&chunk)});
                text.extend_from_slice(format!("{line}\n").as_bytes());
            } else {
                if files.len() > 1 && last != Some(i) {
                    let sep = match (last, at_line_start) {
                        (None, _) => "",
                        (Some(_), true) => "\n",
                        (Some(_), false) => "\n\n",
                    };
                    text.extend_from_slice(format!("{sep}==> {label} log <==\n").as_bytes());
                }
                text.extend_from_slice(&chunk);
                at_line_start = chunk.ends_with(b"\n");
            }
            last = Some(i);
            // Stop following once nobody reads our output.
            if std::io::stdout()
                .lock()
                .write_all(&text)
                .and_then(|()| std::io::stdout().flush())
                .is_err()
            {
                return Ok(0);
            }
        }
        if !args.follow {
            if !at_line_start && !ctx.json {
                say("");
            }
            return Ok(0);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What `path` holds past `*offset` (nothing when it does not exist yet);
/// advances the offset, and starts over when the file was truncated.
fn read_from(path: &Path, offset: &mut u64) -> anyhow::Result<Vec<u8>> {
    let io = |e| burrow::Error::Io {
        context: "reading the log".into(),
        path: Some(PathBuf::from(path)),
        source: e,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e).into()),
    };
    let len = file.metadata().map_err(io)?.len();
    if len < *offset {
        *offset = 0;
    }
    file.seek(SeekFrom::Start(*offset)).map_err(io)?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).map_err(io)?;
    *offset += buf.len() as u64;
    Ok(buf)
}

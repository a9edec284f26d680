//! File operations inside a sandbox.

#[cfg(feature = "copy")]
use std::path::Path;

use burrow_protocol::{DirEntry, FileStat, GuestMsg, Request, Response};

use super::attempt::Attempt;
use super::Sandbox;
use crate::error::{Error, Result};

#[cfg(feature = "copy")]
mod unpack;

/// File operations on one sandbox (`sandbox.fs()`).
#[derive(Debug, Clone, Copy)]
pub struct Fs<'a> {
    sandbox: &'a Sandbox,
}

pub(super) fn guest_path(argument: &str, p: &str) -> Result<()> {
    if p.starts_with('/') && !p.contains('\0') && p.len() <= 4096 {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            argument: argument.into(),
            reason: format!("{p:?} is not an absolute guest path"),
        })
    }
}

fn unexpected(op: &str, r: Response) -> Error {
    Error::protocol(format!("unexpected answer to {op}: {r:?}"))
}

impl<'a> Fs<'a> {
    pub(super) fn new(sandbox: &'a Sandbox) -> Self {
        Fs { sandbox }
    }

    pub(super) fn sandbox(&self) -> &'a Sandbox {
        self.sandbox
    }

    /// Streams a request's `Stdout` frames into a buffer and returns them
    /// with the response.
    async fn collect(
        &self,
        op: &'static str,
        body: Request,
        input: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Response)> {
        let mut attempt = Attempt::start(self.sandbox, op, body).await?;
        if let Some(data) = input {
            // The guest takes file content without sending anything back,
            // so this waits only for the guest's writes.
            attempt.send_data(data).await?;
            attempt.send_eof().await?;
        }
        let mut out = Vec::new();
        while let Some(msg) = attempt.next().await? {
            match msg {
                GuestMsg::Stdout { data, .. } => out.extend_from_slice(&data.0),
                GuestMsg::Response { result: Ok(r), .. } => return Ok((out, r)),
                _ => {}
            }
        }
        Err(Error::protocol(format!("{op} ended without a response")))
    }

    /// Reads a whole file.
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        guest_path("path", path)?;
        Ok(self
            .collect("read", Request::ReadFile { path: path.into() }, None)
            .await?
            .0)
    }

    /// Reads a whole file as UTF-8 (lossy).
    pub async fn read_to_string(&self, path: &str) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.read(path).await?).into_owned())
    }

    /// Writes (creates or truncates) a file.
    pub async fn write(&self, path: &str, data: impl AsRef<[u8]>) -> Result<()> {
        self.write_with(path, data.as_ref(), None, false).await
    }

    /// Writes a file with an explicit mode for a new file, or appends.
    pub async fn write_with(
        &self,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        append: bool,
    ) -> Result<()> {
        guest_path("path", path)?;
        self.collect(
            "write",
            Request::WriteFile {
                path: path.into(),
                mode,
                append,
            },
            Some(data),
        )
        .await?;
        Ok(())
    }

    /// Lists a directory.
    pub async fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        guest_path("path", path)?;
        match self
            .sandbox
            .call("list", Request::ListDir { path: path.into() })
            .await?
        {
            Response::Entries { entries } => Ok(entries),
            r => Err(unexpected("list", r)),
        }
    }

    /// Metadata of a path (symlinks not followed).
    pub async fn stat(&self, path: &str) -> Result<FileStat> {
        guest_path("path", path)?;
        match self
            .sandbox
            .call("stat", Request::Stat { path: path.into() })
            .await?
        {
            Response::Stat { stat } => Ok(stat),
            r => Err(unexpected("stat", r)),
        }
    }

    /// Whether a path exists.
    pub async fn exists(&self, path: &str) -> Result<bool> {
        guest_path("path", path)?;
        match self
            .sandbox
            .call("exists", Request::Exists { path: path.into() })
            .await?
        {
            Response::Exists { exists } => Ok(exists),
            r => Err(unexpected("exists", r)),
        }
    }

    /// Creates a directory (with parents when `parents`).
    pub async fn mkdir(&self, path: &str, parents: bool) -> Result<()> {
        guest_path("path", path)?;
        self.sandbox
            .call(
                "mkdir",
                Request::Mkdir {
                    path: path.into(),
                    parents,
                },
            )
            .await?;
        Ok(())
    }

    /// Removes a file or (with `recursive`) a directory tree.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        guest_path("path", path)?;
        self.sandbox
            .call(
                "remove",
                Request::Remove {
                    path: path.into(),
                    recursive,
                },
            )
            .await?;
        Ok(())
    }

    /// Renames a path.
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        guest_path("from", from)?;
        guest_path("to", to)?;
        self.sandbox
            .call(
                "rename",
                Request::Rename {
                    from: from.into(),
                    to: to.into(),
                },
            )
            .await?;
        Ok(())
    }

    /// Copies a host file or directory into the guest directory `guest_dir`
    /// (created if missing); the entry keeps its name. (Feature `copy`.)
    #[cfg(feature = "copy")]
    pub async fn copy_in(&self, host_path: &Path, guest_dir: &str) -> Result<()> {
        guest_path("guest_dir", guest_dir)?;
        let src = host_path.to_path_buf();
        let tarball = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let name = src.file_name().ok_or_else(|| Error::InvalidArgument {
                argument: "host_path".into(),
                reason: format!("{} has no file name", src.display()),
            })?;
            let meta = std::fs::symlink_metadata(&src)
                .map_err(|e| Error::io("reading the host path", Some(&src), e))?;
            let mut b = tar::Builder::new(Vec::new());
            b.follow_symlinks(false);
            let res = if meta.is_dir() {
                b.append_dir_all(name, &src)
            } else {
                b.append_path_with_name(&src, name)
            };
            res.map_err(|e| Error::io("archiving the host path", Some(&src), e))?;
            b.into_inner()
                .map_err(|e| Error::io("archiving the host path", Some(&src), e))
        })
        .await
        .map_err(|e| Error::io("archiving", None, std::io::Error::other(e.to_string())))??;
        self.collect(
            "copy_in",
            Request::CopyIn {
                path: guest_dir.into(),
            },
            Some(&tarball),
        )
        .await?;
        Ok(())
    }

    /// Copies a guest file or directory into the host directory `host_dir`
    /// (created if missing); the entry keeps its name. (Feature `copy`.)
    ///
    /// What the guest sends is untrusted and never lands as given: modes
    /// lose their setuid, setgid, sticky and world-writable bits (masked
    /// with `0o775`), files belong to the caller, symlinks are recreated
    /// only when relative and inside the copied entry, and nothing is
    /// written through a symlink. Hard links, device nodes, fifos and
    /// symlinks that are absolute or lead outside are left out: the rest is
    /// copied, then the call fails with [`Error::InvalidArgument`] naming
    /// them. An entry outside the one asked for is [`Error::Protocol`].
    #[cfg(feature = "copy")]
    pub async fn copy_out(&self, guest: &str, host_dir: &Path) -> Result<()> {
        guest_path("path", guest)?;
        // The agent names the archive's one top-level entry the same way.
        let name = Path::new(guest)
            .file_name()
            .ok_or_else(|| Error::InvalidArgument {
                argument: "path".into(),
                reason: format!("{guest:?} has no last component to copy"),
            })?
            .to_os_string();
        let (tarball, _) = self
            .collect("copy_out", Request::CopyOut { path: guest.into() }, None)
            .await?;
        let dir = host_dir.to_path_buf();
        tokio::task::spawn_blocking(move || -> Result<()> {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io("creating the host directory", Some(&dir), e))?;
            unpack::unpack(&tarball, &dir, &name)
        })
        .await
        .map_err(|e| Error::io("unpacking", None, std::io::Error::other(e.to_string())))?
    }
}

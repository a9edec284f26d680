//! One-shot filesystem requests: list, stat, exists, mkdir, remove, rename,
//! sync. Streaming ones live in `files` (read/write) and `archive` (tar).

use std::fs::{self, FileType, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use burrow_protocol::{DirEntry, FileKind, FileStat, GuestError, GuestErrorCode, Response};

/// Validates a path from the host: absolute, no NUL byte.
pub fn abs_path(path: &str) -> Result<PathBuf, GuestError> {
    if !path.starts_with('/') {
        return Err(GuestError::new(
            GuestErrorCode::InvalidArgument,
            format!("path must be absolute: {path:?}"),
        ));
    }
    if path.contains('\0') {
        return Err(GuestError::new(
            GuestErrorCode::InvalidArgument,
            "path contains a NUL byte",
        ));
    }
    Ok(PathBuf::from(path))
}

/// Maps an I/O error, naming the path.
pub fn io_err(err: &io::Error, path: &Path) -> GuestError {
    GuestError::from_io(err, &path.display().to_string())
}

fn kind(ft: FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

fn file_stat(path: &Path, meta: &Metadata) -> FileStat {
    let link_target = if meta.file_type().is_symlink() {
        fs::read_link(path)
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    } else {
        None
    };
    FileStat {
        kind: kind(meta.file_type()),
        size: meta.len(),
        mode: meta.permissions().mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.mtime(),
        link_target,
    }
}

/// `ListDir`: entries sorted by name; symlinks are not followed.
pub fn list_dir(path: &str) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    let rd = fs::read_dir(&path).map_err(|e| io_err(&e, &path))?;
    let mut entries = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| io_err(&e, &path))?;
        // A file removed between readdir and lstat is simply not listed.
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        entries.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind: kind(meta.file_type()),
            size: meta.len(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Response::Entries { entries })
}

/// `Stat`: lstat semantics; `link_target` for symlinks.
pub fn stat(path: &str) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    let meta = fs::symlink_metadata(&path).map_err(|e| io_err(&e, &path))?;
    Ok(Response::Stat {
        stat: file_stat(&path, &meta),
    })
}

/// `Exists`: lstat semantics (a dangling symlink exists).
pub fn exists(path: &str) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    match fs::symlink_metadata(&path) {
        Ok(_) => Ok(Response::Exists { exists: true }),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory =>
        {
            Ok(Response::Exists { exists: false })
        }
        Err(e) => Err(io_err(&e, &path)),
    }
}

/// `Mkdir`, optionally with parents (then an existing directory is fine).
pub fn mkdir(path: &str, parents: bool) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    let r = if parents {
        fs::create_dir_all(&path)
    } else {
        fs::create_dir(&path)
    };
    r.map_err(|e| io_err(&e, &path))?;
    Ok(Response::Done)
}

/// Whether `path` names the root directory (`/`, `/.`, `//`, `/a/..`).
fn is_root(path: &Path) -> bool {
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    depth == 0
}

/// `Remove`: files, symlinks (never followed) and directories (with their
/// content when `recursive`). Refuses the root directory.
pub fn remove(path: &str, recursive: bool) -> Result<Response, GuestError> {
    let path = abs_path(path)?;
    if is_root(&path) {
        return Err(GuestError::new(
            GuestErrorCode::InvalidArgument,
            "refusing to remove the root directory",
        ));
    }
    let meta = fs::symlink_metadata(&path).map_err(|e| io_err(&e, &path))?;
    let r = if !meta.is_dir() {
        fs::remove_file(&path)
    } else if recursive {
        // std's remove_dir_all does not follow symlinks inside the tree.
        fs::remove_dir_all(&path)
    } else {
        fs::remove_dir(&path)
    };
    r.map_err(|e| io_err(&e, &path))?;
    Ok(Response::Done)
}

/// `Rename`.
pub fn rename(from: &str, to: &str) -> Result<Response, GuestError> {
    let from = abs_path(from)?;
    let to = abs_path(to)?;
    fs::rename(&from, &to).map_err(|e| io_err(&e, &from))?;
    Ok(Response::Done)
}

/// `Sync`: flush all filesystem buffers.
pub fn sync() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute() {
        assert!(abs_path("/tmp").is_ok());
        for bad in ["", "tmp", "./x", "a/../b", "/a\0b"] {
            let err = abs_path(bad).expect_err(bad);
            assert_eq!(err.code, GuestErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn root_is_detected() {
        for root in ["/", "//", "/.", "/a/..", "/a/b/../.."] {
            assert!(is_root(Path::new(root)), "{root}");
        }
        for other in ["/a", "/a/b/..", "/../a"] {
            assert!(!is_root(Path::new(other)), "{other}");
        }
    }
}

//! Applying layer tarballs onto a root filesystem safely.
//!
//! An [`Unpacker`] owns one root directory under construction and applies
//! layers to it in order, with OCI whiteout semantics. Layers are untrusted:
//! no entry may create, change or delete anything outside the root. Entry
//! paths are split into plain components (`..` is refused, a leading `/` means
//! the root), and every parent directory is walked with `lstat` from the root
//! down: a parent that is a symlink is refused rather than followed, and the
//! final component is always replaced (unlinked, then created with
//! `O_CREAT|O_EXCL`), never written through. Symlinks are stored as they are
//! and never followed. Hard links must name an entry already extracted inside
//! the root. Device nodes and fifos are skipped.
//!
//! The root being built is private to its builder (a fresh temporary
//! directory, see `cache.rs`), so the only adversary is the layer content
//! itself, which is checked before each filesystem call.
//!
//! Directory modes are applied in [`Unpacker::finish`], after the last layer:
//! until then every directory stays `rwx` for its owner so later entries and
//! whiteouts can work without root.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tar::EntryType;

use super::digest::{Digest, HashingReader};
use crate::error::Error;

/// Longest entry path accepted, in bytes.
const MAX_PATH: usize = 4096;
/// Longest path component accepted, in bytes.
const MAX_NAME: usize = 255;
const OPAQUE: &[u8] = b".wh..wh..opq";
const WHITEOUT_PREFIX: &[u8] = b".wh.";

/// Layer compression, detected from the first bytes of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    /// A plain tar stream.
    None,
    /// gzip (one or more members).
    Gzip,
    /// zstd (one or more frames).
    Zstd,
}

impl Compression {
    /// Detects the compression from the stream's first bytes.
    pub(crate) fn sniff(magic: &[u8]) -> Compression {
        if magic.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The compression a layer media type declares, if it declares one.
    pub(crate) fn from_media_type(media_type: &str) -> Option<Compression> {
        if media_type.ends_with("+gzip") || media_type.ends_with(".gzip") {
            Some(Compression::Gzip)
        } else if media_type.ends_with("+zstd") {
            Some(Compression::Zstd)
        } else if media_type.ends_with(".tar") {
            Some(Compression::None)
        } else {
            None
        }
    }
}

/// Why a layer could not be applied.
#[derive(Debug)]
pub(crate) enum UnpackError {
    /// The layer content is unacceptable (bad entry, corrupt stream, ...).
    Invalid(String),
    /// A host filesystem operation failed.
    Io {
        /// What was being done.
        context: String,
        /// Where.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl UnpackError {
    /// The crate error for `image`; `what` prefixes an invalid-content reason
    /// (e.g. which layer).
    pub(crate) fn into_error(self, image: &str, what: &str) -> Error {
        match self {
            UnpackError::Invalid(reason) => Error::InvalidImage {
                image: image.to_owned(),
                reason: format!("{what}: {reason}"),
            },
            UnpackError::Io {
                context,
                path,
                source,
            } => Error::io(format!("{what}: {context}"), Some(&path), source),
        }
    }
}

fn host_err(context: &str, path: &Path) -> impl FnOnce(io::Error) -> UnpackError {
    let context = context.to_owned();
    let path = path.to_path_buf();
    move |source| UnpackError::Io {
        context,
        path,
        source,
    }
}

fn read_err(e: io::Error) -> UnpackError {
    UnpackError::Invalid(format!("reading the layer stream: {e}"))
}

#[derive(Debug, Clone, Copy)]
struct DirMeta {
    mode: u32,
    mtime: Option<u64>,
}

/// What the layer being applied has put in place so far (whiteouts only hide
/// lower layers' content, never the same layer's).
#[derive(Default)]
struct LayerState {
    written: HashSet<PathBuf>,
    ancestors: HashSet<PathBuf>,
}

impl LayerState {
    fn note(&mut self, rel: &Path) {
        self.written.insert(rel.to_path_buf());
        let mut p = rel.parent();
        while let Some(a) = p.filter(|a| !a.as_os_str().is_empty()) {
            if !self.ancestors.insert(a.to_path_buf()) {
                break;
            }
            p = a.parent();
        }
    }

    fn touched(&self, rel: &Path) -> bool {
        self.written.contains(rel) || self.ancestors.contains(rel)
    }
}

/// Applies layers onto one root directory. See the module docs.
#[derive(Debug)]
pub(crate) struct Unpacker {
    root: PathBuf,
    chown: bool,
    dirs: HashMap<PathBuf, DirMeta>,
}

impl Unpacker {
    /// An unpacker for the existing, empty directory `root`. Ownership from
    /// the layers is applied only when running as root.
    pub(crate) fn new(root: &Path) -> Unpacker {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        Unpacker {
            root: root.to_path_buf(),
            chown: euid == 0,
            dirs: HashMap::new(),
        }
    }

    /// Applies one layer tar stream, compressed with gzip or zstd or not at
    /// all (detected from its first bytes; `media_type` is only compared
    /// against it for the log). Reads `layer` to its end and returns the
    /// digest of the uncompressed tar stream (the layer's diff id).
    pub(crate) fn apply_layer<R: Read>(
        &mut self,
        mut layer: R,
        media_type: &str,
    ) -> Result<Digest, UnpackError> {
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < magic.len() {
            match layer.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_err(e)),
            }
        }
        let compression = Compression::sniff(&magic[..got]);
        if let Some(declared) =
            Compression::from_media_type(media_type).filter(|d| *d != compression)
        {
            tracing::debug!(media_type, ?declared, detected = ?compression, "layer compression differs from its media type");
        }
        let stream = io::Cursor::new(magic).take(got as u64).chain(layer);
        let decoded: Box<dyn Read + '_> = match compression {
            Compression::None => Box::new(stream),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(stream)),
            Compression::Zstd => {
                Box::new(zstd::stream::read::Decoder::new(stream).map_err(read_err)?)
            }
        };
        let mut tar_stream = HashingReader::new(decoded);
        let mut state = LayerState::default();
        {
            let mut archive = tar::Archive::new(&mut tar_stream);
            for entry in archive.entries().map_err(read_err)? {
                let mut entry = entry.map_err(read_err)?;
                self.apply_entry(&mut entry, &mut state)?;
            }
        }
        // The tar end marker may be followed by padding; the digest covers
        // the whole stream, and reading to the end lets a verifying reader
        // underneath check the compressed blob too.
        io::copy(&mut tar_stream, &mut io::sink()).map_err(read_err)?;
        Ok(tar_stream.finish().0)
    }

    fn apply_entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        state: &mut LayerState,
    ) -> Result<(), UnpackError> {
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let bad = |reason: &str| UnpackError::Invalid(format!("entry {shown:?}: {reason}"));
        let comps = split_path(&raw).map_err(|r| bad(&r))?;
        let header = entry.header();
        let mut kind = header.entry_type();
        // Pre-POSIX archives mark directories with a trailing slash only.
        if kind == EntryType::Regular && raw.ends_with(b"/") {
            kind = EntryType::Directory;
        }

        let Some((name, parent)) = comps.split_last() else {
            if kind == EntryType::Directory {
                let meta = dir_meta(header);
                self.dirs.insert(PathBuf::new(), meta);
                return Ok(());
            }
            return Err(bad("names the root itself"));
        };
        let name_bytes = name.as_bytes();
        if name_bytes == OPAQUE {
            return self.opaque(parent, state, &shown);
        }
        if let Some(hidden) = name_bytes.strip_prefix(WHITEOUT_PREFIX) {
            if hidden.starts_with(WHITEOUT_PREFIX) {
                tracing::debug!(entry = %shown, "skipping whiteout metadata entry");
                return Ok(());
            }
            if hidden.is_empty() || hidden == b"." || hidden == b".." {
                return Err(bad("whiteout of an invalid name"));
            }
            return self.whiteout(parent, OsStr::from_bytes(hidden), state, &shown);
        }

        let rel: PathBuf = comps.iter().collect();
        let (uid, gid) = owner(header).map_err(|r| bad(&r))?;
        let mode = header.mode().map_err(|e| bad(&format!("bad mode: {e}")))? & 0o7777;
        let mtime = header.mtime().ok();
        match kind {
            EntryType::Directory => {
                let dir = self.parent_dir(parent, state, &shown)?;
                let path = dir.join(name);
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove_existing(&path)?;
                        make_dir(&path)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => make_dir(&path)?,
                    Err(e) => return Err(host_err("inspecting", &path)(e)),
                }
                self.lchown(&path, uid, gid);
                self.dirs.insert(rel.clone(), DirMeta { mode, mtime });
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                let dir = self.parent_dir(parent, state, &shown)?;
                let path = dir.join(name);
                remove_existing(&path)?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(host_err("creating a file", &path))?;
                copy_data(entry, &mut file, &path)?;
                let mut mode = mode;
                if self.chown {
                    if let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), Some(gid)) {
                        tracing::debug!(entry = %shown, error = %e, "cannot chown; dropping setuid/setgid");
                        mode &= 0o1777;
                    }
                }
                set_mode(&file, mode, &path)?;
                if let Some(t) = mtime.and_then(epoch) {
                    if let Err(e) = file.set_modified(t) {
                        tracing::debug!(entry = %shown, error = %e, "cannot set mtime");
                    }
                }
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| bad("symlink without a target"))?
                    .into_owned();
                let dir = self.parent_dir(parent, state, &shown)?;
                let path = dir.join(name);
                remove_existing(&path)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)
                    .map_err(host_err("creating a symlink", &path))?;
                self.lchown(&path, uid, gid);
            }
            EntryType::Link => {
                let target_raw = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad("hard link without a target"))?
                    .into_owned();
                let target_comps =
                    split_path(&target_raw).map_err(|r| bad(&format!("hard link target: {r}")))?;
                let Some((target_name, target_parent)) = target_comps.split_last() else {
                    return Err(bad("hard link to the root"));
                };
                let missing = || bad("hard link target is not an entry extracted before it");
                let target_dir =
                    existing_dir(&self.root, target_parent, &shown)?.ok_or_else(missing)?;
                let target = target_dir.join(target_name);
                match fs::symlink_metadata(&target) {
                    Ok(m) if m.is_dir() => return Err(bad("hard link to a directory")),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing()),
                    Err(e) => return Err(host_err("inspecting", &target)(e)),
                }
                let dir = self.parent_dir(parent, state, &shown)?;
                let path = dir.join(name);
                if target.starts_with(&path) && path != target {
                    return Err(bad(
                        "hard link replacing a directory that holds its own target",
                    ));
                }
                if path != target {
                    remove_existing(&path)?;
                    // std's hard_link is linkat(..., 0): a symlink target is
                    // linked itself, never followed.
                    fs::hard_link(&target, &path)
                        .map_err(host_err("creating a hard link", &path))?;
                }
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                tracing::debug!(entry = %shown, kind = ?kind, "skipping device node or fifo");
                if let Some(dir) = existing_dir(&self.root, parent, &shown)? {
                    remove_existing(&dir.join(name))?;
                }
                return Ok(());
            }
            other => {
                tracing::debug!(entry = %shown, kind = ?other, "skipping unsupported tar entry type");
                return Ok(());
            }
        }
        state.note(&rel);
        Ok(())
    }

    /// The parent directory of an entry, creating missing directories.
    fn parent_dir(
        &mut self,
        comps: &[OsString],
        state: &mut LayerState,
        entry: &str,
    ) -> Result<PathBuf, UnpackError> {
        let mut path = self.root.clone();
        for (i, c) in comps.iter().enumerate() {
            path.push(c);
            match check_dir(&path, &comps[..=i], entry)? {
                true => {}
                false => {
                    make_dir(&path)?;
                    let rel: PathBuf = comps[..=i].iter().collect();
                    self.dirs.insert(
                        rel.clone(),
                        DirMeta {
                            mode: 0o755,
                            mtime: None,
                        },
                    );
                    state.note(&rel);
                }
            }
        }
        Ok(path)
    }

    fn whiteout(
        &mut self,
        parent: &[OsString],
        name: &OsStr,
        state: &LayerState,
        entry: &str,
    ) -> Result<(), UnpackError> {
        let rel: PathBuf = parent
            .iter()
            .map(OsString::as_os_str)
            .chain([name])
            .collect();
        // Whiteouts hide lower layers only: what this layer wrote stays.
        if state.written.contains(&rel) {
            return Ok(());
        }
        if let Some(dir) = existing_dir(&self.root, parent, entry)? {
            let path = dir.join(name);
            if state.ancestors.contains(&rel) {
                clear_lower(&path, &rel, state)?;
            } else {
                remove_existing(&path)?;
            }
        }
        Ok(())
    }

    fn opaque(
        &mut self,
        dir: &[OsString],
        state: &LayerState,
        entry: &str,
    ) -> Result<(), UnpackError> {
        if let Some(path) = existing_dir(&self.root, dir, entry)? {
            let rel: PathBuf = dir.iter().collect();
            clear_lower(&path, &rel, state)?;
        }
        Ok(())
    }

    fn lchown(&self, path: &Path, uid: u32, gid: u32) {
        if self.chown {
            if let Err(e) = std::os::unix::fs::lchown(path, Some(uid), Some(gid)) {
                tracing::debug!(path = %path.display(), error = %e, "cannot chown");
            }
        }
    }

    /// Applies directory modes and times, deepest first. Call once, after
    /// the last layer.
    pub(crate) fn finish(self) -> Result<(), UnpackError> {
        let mut dirs: Vec<_> = self.dirs.into_iter().collect();
        dirs.sort_by_key(|(rel, _)| std::cmp::Reverse(rel.components().count()));
        for (rel, meta) in dirs {
            let comps: Vec<OsString> = rel.iter().map(OsStr::to_os_string).collect();
            // Re-walked without following symlinks: a later layer may have
            // replaced the directory (or a parent) with something else.
            let path = match existing_dir(&self.root, &comps, &rel.to_string_lossy()) {
                Ok(Some(p)) => p,
                Ok(None) | Err(UnpackError::Invalid(_)) => continue,
                Err(e) => return Err(e),
            };
            let dir = match OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(d) => d,
                Err(e)
                    if e.raw_os_error() == Some(libc::ELOOP)
                        || e.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    continue
                }
                Err(e) => return Err(host_err("opening a directory", &path)(e)),
            };
            set_mode(&dir, meta.mode, &path)?;
            if let Some(t) = meta.mtime.and_then(epoch) {
                if let Err(e) = dir.set_modified(t) {
                    tracing::debug!(path = %path.display(), error = %e, "cannot set mtime");
                }
            }
        }
        Ok(())
    }
}

/// Splits a tar path into plain components. `.` and empty components are
/// dropped, a leading `/` is the root, `..` is refused.
fn split_path(raw: &[u8]) -> Result<Vec<OsString>, String> {
    if raw.len() > MAX_PATH {
        return Err(format!("path longer than {MAX_PATH} bytes"));
    }
    if raw.contains(&0) {
        return Err("path contains a NUL byte".into());
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("path has a `..` component".into()),
            c if c.len() > MAX_NAME => {
                return Err(format!("path component longer than {MAX_NAME} bytes"))
            }
            c => out.push(OsStr::from_bytes(c).to_os_string()),
        }
    }
    Ok(out)
}

/// The host path of the directory `comps` under `root` if it exists (as real
/// directories all the way down).
fn existing_dir(
    root: &Path,
    comps: &[OsString],
    entry: &str,
) -> Result<Option<PathBuf>, UnpackError> {
    let mut path = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        path.push(c);
        if !check_dir(&path, &comps[..=i], entry)? {
            return Ok(None);
        }
    }
    Ok(Some(path))
}

/// Whether `path` is a real directory (`false`: missing). A symlink or any
/// other file there is refused: entries are never written through them.
fn check_dir(path: &Path, rel: &[OsString], entry: &str) -> Result<bool, UnpackError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) => {
            let rel: PathBuf = rel.iter().collect();
            let what = if m.file_type().is_symlink() {
                "a symlink"
            } else {
                "not a directory"
            };
            Err(UnpackError::Invalid(format!(
                "entry {entry:?}: its parent {:?} is {what}; refusing to write through it",
                rel.display().to_string()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(host_err("inspecting", path)(e)),
    }
}

fn make_dir(path: &Path) -> Result<(), UnpackError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(host_err("creating a directory", path))
}

/// Removes whatever is at `path` (never following a symlink there).
fn remove_existing(path: &Path) -> Result<(), UnpackError> {
    remove_tree(path).map_err(host_err("removing", path))
}

/// Removes `path` and, if it is a directory, everything under it, making
/// directories writable on the way down so that trees with read-only
/// directories can be removed without root. Never follows symlinks; a missing
/// path is not an error.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)?;
        dir.set_permissions(fs::Permissions::from_mode(0o700))?;
    }
    for child in fs::read_dir(path)? {
        remove_tree(&child?.path())?;
    }
    match fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Removes everything under `dir` that the current layer did not put there.
fn clear_lower(dir: &Path, rel: &Path, state: &LayerState) -> Result<(), UnpackError> {
    for child in fs::read_dir(dir).map_err(host_err("listing", dir))? {
        let child = child.map_err(host_err("listing", dir))?;
        let path = child.path();
        let child_rel = rel.join(child.file_name());
        if state.touched(&child_rel) {
            let is_dir = child
                .file_type()
                .map_err(host_err("inspecting", &path))?
                .is_dir();
            if is_dir {
                clear_lower(&path, &child_rel, state)?;
            }
        } else {
            remove_existing(&path)?;
        }
    }
    Ok(())
}

fn copy_data(from: &mut impl Read, to: &mut File, path: &Path) -> Result<(), UnpackError> {
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_err(e)),
        };
        to.write_all(&buf[..n])
            .map_err(host_err("writing a file", path))?;
    }
}

fn set_mode(file: &File, mode: u32, path: &Path) -> Result<(), UnpackError> {
    match file.set_permissions(fs::Permissions::from_mode(mode)) {
        Ok(()) => Ok(()),
        // Special bits may be refused to an unprivileged owner.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && mode & !0o777 != 0 => file
            .set_permissions(fs::Permissions::from_mode(mode & 0o777))
            .map_err(host_err("setting the mode", path)),
        Err(e) => Err(host_err("setting the mode", path)(e)),
    }
}

fn owner(header: &tar::Header) -> Result<(u32, u32), String> {
    let uid = header.uid().map_err(|e| format!("bad uid: {e}"))?;
    let gid = header.gid().map_err(|e| format!("bad gid: {e}"))?;
    let uid = u32::try_from(uid).map_err(|_| format!("uid {uid} out of range"))?;
    let gid = u32::try_from(gid).map_err(|_| format!("gid {gid} out of range"))?;
    Ok((uid, gid))
}

fn dir_meta(header: &tar::Header) -> DirMeta {
    DirMeta {
        mode: header.mode().map(|m| m & 0o7777).unwrap_or(0o755),
        mtime: header.mtime().ok(),
    }
}

fn epoch(secs: u64) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_path_rules() {
        let ok = |s: &str| {
            split_path(s.as_bytes()).map(|v| {
                v.iter()
                    .map(|c| c.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(ok("a/b/c"), Ok(vec!["a".into(), "b".into(), "c".into()]));
        assert_eq!(ok("./a//b/"), Ok(vec!["a".into(), "b".into()]));
        assert_eq!(ok("/etc/passwd"), Ok(vec!["etc".into(), "passwd".into()]));
        assert_eq!(ok("./"), Ok(vec![]));
        assert!(ok("../x").is_err());
        assert!(ok("a/../b").is_err());
        assert!(ok("/abs/../../escape").is_err());
        assert!(ok(&"x".repeat(300)).is_err());
    }

    #[test]
    fn sniffing() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(
            Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(Compression::sniff(b"etc/"), Compression::None);
        assert_eq!(Compression::sniff(b""), Compression::None);
        assert_eq!(
            Compression::from_media_type("application/vnd.oci.image.layer.v1.tar+zstd"),
            Some(Compression::Zstd)
        );
        assert_eq!(
            Compression::from_media_type("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            Some(Compression::Gzip)
        );
    }

    #[test]
    fn remove_tree_handles_read_only_dirs_and_symlinks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).expect("mkdir");
        fs::write(outside.join("keep"), b"x").expect("write");
        let t = tmp.path().join("t");
        fs::create_dir_all(t.join("ro/sub")).expect("mkdir");
        fs::write(t.join("ro/sub/f"), b"x").expect("write");
        std::os::unix::fs::symlink(&outside, t.join("ro/link")).expect("symlink");
        fs::set_permissions(t.join("ro/sub"), fs::Permissions::from_mode(0o500)).expect("chmod");
        fs::set_permissions(t.join("ro"), fs::Permissions::from_mode(0o500)).expect("chmod");
        remove_tree(&t).expect("remove");
        assert!(!t.exists());
        assert!(outside.join("keep").exists());
        remove_tree(&t).expect("missing is fine");
    }
}

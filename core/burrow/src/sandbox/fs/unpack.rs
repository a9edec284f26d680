//! The host side of `copy_out`: a guest's tar archive unpacked into a host
//! directory. The guest is hostile and the host process may be root, so
//! nothing it sends may become a privileged, shared or escaping file:
//!
//! - every entry lies under `<dir>/<name>`, `name` the last component of
//!   the guest path asked for (an absolute path, a `..`, or another
//!   top-level name is [`Error::Protocol`]: the agent never sends one);
//! - files and directories get the entry's mode masked with `0o775`: never
//!   setuid, setgid, sticky or world-writable; owners are the caller's;
//! - a symlink is recreated only if its target is relative and stays in
//!   `<dir>/<name>` (leading `..` components only, no more than its depth
//!   allows): an absolute or escaping one is refused;
//! - hard links, device nodes, fifos and anything else are refused;
//! - no entry is ever written through a symlink: every directory on the
//!   way is checked with `lstat` to be a real directory (a symlink there is
//!   refused, never followed), a file is created with `O_CREAT|O_EXCL`
//!   (which never follows a symlink) after whatever was in its place is
//!   unlinked, and an existing directory is never replaced.
//!
//! A refused entry is skipped and everything else is copied; the copy then
//! fails with [`Error::InvalidArgument`] naming the entries left out.
//!
//! Directories are created `0o700` and get their modes (and times) last,
//! deepest first, so a read-only directory does not block its own content
//! and nobody else can write in the tree while it is built. The
//! destination directory itself, and what was already in it, belong to the
//! caller: another local user able to write there could race these checks
//! (as with any `tar -x`), the guest cannot.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tar::EntryType;

use crate::error::{Error, Result};

/// The mode bits a copied file or directory may keep.
const MODE_MASK: u32 = 0o775;
/// How many refused entries the error names (it counts them all).
const NAMED_REFUSALS: usize = 10;

/// An entry left out, and why.
struct Refusal {
    path: String,
    why: &'static str,
}

/// A directory whose mode and time are set at the end.
#[derive(Clone, Copy)]
struct DirMeta {
    mode: u32,
    mtime: Option<u64>,
}

/// Unpacks `tarball` into `dir` (an existing directory); every entry must
/// lie under `name`. See the module docs.
pub(super) fn unpack(tarball: &[u8], dir: &Path, name: &OsStr) -> Result<()> {
    let mut refused = Vec::new();
    let mut dirs: BTreeMap<Vec<OsString>, DirMeta> = BTreeMap::new();
    let mut archive = tar::Archive::new(io::Cursor::new(tarball));
    let bad_archive = |e: io::Error| Error::protocol(format!("the guest's archive: {e}"));
    for entry in archive.entries().map_err(bad_archive)? {
        let mut entry = entry.map_err(bad_archive)?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let comps = components(&raw, name)
            .map_err(|why| Error::protocol(format!("the guest sent entry {shown:?}: {why}")))?;
        let mut kind = entry.header().entry_type();
        if kind == EntryType::Regular && raw.ends_with(b"/") {
            kind = EntryType::Directory;
        }
        let mode = entry.header().mode().unwrap_or(0o644) & MODE_MASK;
        let mtime = entry.header().mtime().ok();
        let outcome = match kind {
            EntryType::Directory => {
                let made = make_dirs(dir, &comps, &mut dirs)?;
                if made.is_ok() {
                    dirs.insert(comps.clone(), DirMeta { mode, mtime });
                }
                Ok(made)
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                write_file(dir, &comps, &mut entry, mode, mtime, &mut dirs)
            }
            EntryType::Symlink => match entry.link_name_bytes() {
                Some(target) if link_stays_inside(&comps, &target) => {
                    write_symlink(dir, &comps, &target, &mut dirs)
                }
                _ => Ok(Err("a symlink whose target is absolute or leaves the copy")),
            },
            EntryType::Link => Ok(Err("a hard link")),
            EntryType::Char | EntryType::Block => Ok(Err("a device node")),
            EntryType::Fifo => Ok(Err("a fifo")),
            EntryType::XGlobalHeader => Ok(Ok(())),
            _ => Ok(Err("an entry of an unknown type")),
        };
        if let Err(why) = outcome? {
            refused.push(Refusal { path: shown, why });
        }
    }
    finish(dir, dirs)?;
    if refused.is_empty() {
        return Ok(());
    }
    let mut named: Vec<String> = refused
        .iter()
        .take(NAMED_REFUSALS)
        .map(|r| format!("{} ({})", r.path, r.why))
        .collect();
    if refused.len() > NAMED_REFUSALS {
        named.push(format!("and {} more", refused.len() - NAMED_REFUSALS));
    }
    Err(Error::InvalidArgument {
        argument: "path".into(),
        reason: format!(
            "{} entries were not copied to the host: {}; everything else was",
            refused.len(),
            named.join(", ")
        ),
    })
}

/// What one entry came to: `Err` for a refusal (the entry is skipped),
/// an outer `Err` for a failure that ends the copy.
type Outcome = Result<std::result::Result<(), &'static str>>;

/// The plain components of an entry path, the first one `name`.
fn components(raw: &[u8], name: &OsStr) -> std::result::Result<Vec<OsString>, &'static str> {
    if raw.starts_with(b"/") {
        return Err("an absolute path");
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("a '..' component"),
            c => out.push(OsStr::from_bytes(c).to_os_string()),
        }
    }
    match out.first() {
        Some(first) if first == name => Ok(out),
        _ => Err("a path outside the entry asked for"),
    }
}

/// Whether a symlink at `comps` with `target` resolves inside the copy
/// (`comps[0]`) whatever the symlinks inside it: leading `..` components
/// only climb real directories (each one was checked), and the rest only
/// descends.
fn link_stays_inside(comps: &[OsString], target: &[u8]) -> bool {
    if target.is_empty() || target.starts_with(b"/") {
        return false;
    }
    let mut at: Vec<&[u8]> = comps[..comps.len() - 1]
        .iter()
        .map(|c| c.as_bytes())
        .collect();
    let mut descending = false;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." if descending => return false,
            b".." => {
                if at.pop().is_none() {
                    return false;
                }
            }
            c => {
                descending = true;
                at.push(c);
            }
        }
    }
    at.first() == Some(&comps[0].as_bytes())
}

/// Makes every directory of `comps` under `dir` that is missing; each one
/// on the way must be a real directory.
fn make_dirs(
    dir: &Path,
    comps: &[OsString],
    dirs: &mut BTreeMap<Vec<OsString>, DirMeta>,
) -> Outcome {
    let mut path = dir.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        path.push(c);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => {
                return Ok(Err("a path through a symlink"));
            }
            Ok(_) => return Ok(Err("a path through something that is not a directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&path)
                    .map_err(|e| Error::io("creating a directory", Some(&path), e))?;
                // A directory the archive does not list gets the usual mode.
                dirs.entry(comps[..=i].to_vec()).or_insert(DirMeta {
                    mode: 0o755,
                    mtime: None,
                });
            }
            Err(e) => return Err(Error::io("inspecting", Some(&path), e)),
        }
    }
    Ok(Ok(()))
}

/// The host path for a non-directory entry at `comps`, its parents made
/// and whatever was in its place (never a directory) unlinked.
fn place(
    dir: &Path,
    comps: &[OsString],
    dirs: &mut BTreeMap<Vec<OsString>, DirMeta>,
) -> Result<std::result::Result<PathBuf, &'static str>> {
    if let Err(why) = make_dirs(dir, &comps[..comps.len() - 1], dirs)? {
        return Ok(Err(why));
    }
    let path: PathBuf = std::iter::once(dir.as_os_str())
        .chain(comps.iter().map(OsString::as_os_str))
        .collect();
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => Ok(Err("a file where the host has a directory")),
        // A symlink is unlinked itself; a file unlinked, not truncated (it
        // may be a hard link to something else).
        Ok(_) => fs::remove_file(&path)
            .map(|()| Ok(path.clone()))
            .map_err(|e| Error::io("replacing", Some(&path), e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Ok(path)),
        Err(e) => Err(Error::io("inspecting", Some(&path), e)),
    }
}

fn write_file(
    dir: &Path,
    comps: &[OsString],
    data: &mut impl Read,
    mode: u32,
    mtime: Option<u64>,
    dirs: &mut BTreeMap<Vec<OsString>, DirMeta>,
) -> Outcome {
    let path = match place(dir, comps, dirs)? {
        Ok(path) => path,
        Err(why) => return Ok(Err(why)),
    };
    let err = |context: &'static str| {
        let path = path.clone();
        move |e| Error::io(context, Some(&path), e)
    };
    // O_CREAT|O_EXCL: fails on anything there, a symlink included.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(err("creating a file"))?;
    io::copy(data, &mut file).map_err(err("writing a file"))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(err("setting the mode"))?;
    if let Some(t) = mtime.and_then(epoch) {
        file.set_modified(t).map_err(err("setting the time"))?;
    }
    Ok(Ok(()))
}

fn write_symlink(
    dir: &Path,
    comps: &[OsString],
    target: &[u8],
    dirs: &mut BTreeMap<Vec<OsString>, DirMeta>,
) -> Outcome {
    let path = match place(dir, comps, dirs)? {
        Ok(path) => path,
        Err(why) => return Ok(Err(why)),
    };
    std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)
        .map_err(|e| Error::io("creating a symlink", Some(&path), e))?;
    Ok(Ok(()))
}

/// Sets the directories' modes and times, deepest first, each on the
/// directory checked (by `lstat`, then by the opened descriptor's identity)
/// to be the real directory created or found, never through a symlink.
fn finish(dir: &Path, dirs: BTreeMap<Vec<OsString>, DirMeta>) -> Result<()> {
    let mut dirs: Vec<_> = dirs.into_iter().collect();
    dirs.sort_by_key(|(comps, _)| std::cmp::Reverse(comps.len()));
    for (comps, meta) in dirs {
        let path: PathBuf = std::iter::once(dir.as_os_str())
            .chain(comps.iter().map(OsString::as_os_str))
            .collect();
        let err = |context: &'static str| {
            let path = path.clone();
            move |e| Error::io(context, Some(&path), e)
        };
        let seen = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => m,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err("inspecting")(e)),
        };
        let handle = File::open(&path).map_err(err("opening a directory"))?;
        let opened = handle.metadata().map_err(err("inspecting"))?;
        if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
            continue;
        }
        handle
            .set_permissions(fs::Permissions::from_mode(meta.mode))
            .map_err(err("setting the mode"))?;
        if let Some(t) = meta.mtime.and_then(epoch) {
            handle.set_modified(t).map_err(err("setting the time"))?;
        }
    }
    Ok(())
}

fn epoch(secs: u64) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A tar archive of `entries`: (path, type, mode, link target, data).
    fn tarball(entries: &[(&str, EntryType, u32, &str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, mode, link, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            h.set_size(data.len() as u64);
            h.set_mtime(1_000_000);
            if !link.is_empty() {
                h.set_link_name(link).unwrap();
            }
            // set_path refuses `..` and absolute paths: write the bytes.
            let name = &mut h.as_old_mut().name;
            name.fill(0);
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn mode_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn refused_code(r: Result<()>) -> crate::ErrorCode {
        r.unwrap_err().code()
    }

    #[test]
    fn modes_lose_special_and_world_writable_bits() {
        let tmp = tempfile::tempdir().unwrap();
        let tar = tarball(&[
            ("t", EntryType::Directory, 0o1777, "", b""),
            ("t/suid", EntryType::Regular, 0o6755, "", b"#!/bin/sh\n"),
            ("t/open", EntryType::Regular, 0o777, "", b"o"),
            ("t/plain", EntryType::Regular, 0o644, "", b"p"),
            ("t/exe", EntryType::Regular, 0o755, "", b"e"),
            ("t/ro", EntryType::Directory, 0o555, "", b""),
            ("t/ro/in", EntryType::Regular, 0o444, "", b"i"),
        ]);
        unpack(&tar, tmp.path(), OsStr::new("t")).unwrap();
        let t = tmp.path().join("t");
        assert_eq!(mode_of(&t), 0o775);
        assert_eq!(mode_of(&t.join("suid")), 0o755);
        assert_eq!(mode_of(&t.join("open")), 0o775);
        assert_eq!(mode_of(&t.join("plain")), 0o644);
        assert_eq!(mode_of(&t.join("exe")), 0o755);
        assert_eq!(mode_of(&t.join("ro")), 0o555);
        assert_eq!(fs::read(t.join("ro/in")).unwrap(), b"i");
        assert_eq!(fs::read(t.join("plain")).unwrap(), b"p");
        let mtime = fs::metadata(t.join("plain")).unwrap().mtime();
        assert_eq!(mtime, 1_000_000);
        fs::set_permissions(t.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn links_devices_and_fifos_are_refused_and_the_rest_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let tar = tarball(&[
            ("t", EntryType::Directory, 0o755, "", b""),
            ("t/abs", EntryType::Symlink, 0o777, "/etc/passwd", b""),
            ("t/up", EntryType::Symlink, 0o777, "../../../etc", b""),
            ("t/out", EntryType::Symlink, 0o777, "..", b""),
            ("t/back", EntryType::Symlink, 0o777, "d/../..", b""),
            ("t/hard", EntryType::Link, 0o644, "t/file", b""),
            ("t/fifo", EntryType::Fifo, 0o666, "", b""),
            ("t/dev", EntryType::Block, 0o666, "", b""),
            ("t/chr", EntryType::Char, 0o666, "", b""),
            ("t/file", EntryType::Regular, 0o644, "", b"f"),
            ("t/d", EntryType::Directory, 0o755, "", b""),
            ("t/d/rel", EntryType::Symlink, 0o777, "../file", b""),
            ("t/d/same", EntryType::Symlink, 0o777, "./x/y", b""),
            ("t/d/top", EntryType::Symlink, 0o777, "../../t/file", b""),
        ]);
        let e = unpack(&tar, tmp.path(), OsStr::new("t")).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::InvalidArgument, "{e}");
        let t = tmp.path().join("t");
        for gone in ["abs", "up", "out", "back", "hard", "fifo", "dev", "chr"] {
            assert!(fs::symlink_metadata(t.join(gone)).is_err(), "{gone}");
        }
        assert_eq!(fs::read(t.join("file")).unwrap(), b"f");
        assert_eq!(
            fs::read_link(t.join("d/rel")).unwrap(),
            Path::new("../file")
        );
        assert_eq!(fs::read(t.join("d/rel")).unwrap(), b"f");
        assert!(fs::symlink_metadata(t.join("d/same")).is_ok());
        assert_eq!(fs::read(t.join("d/top")).unwrap(), b"f");
    }

    #[test]
    fn a_top_level_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for target in ["/etc/passwd", "sibling", "../x"] {
            let tar = tarball(&[("l", EntryType::Symlink, 0o777, target, b"")]);
            let e = unpack(&tar, tmp.path(), OsStr::new("l"));
            assert_eq!(refused_code(e), crate::ErrorCode::InvalidArgument);
            assert!(fs::symlink_metadata(tmp.path().join("l")).is_err());
        }
    }

    #[test]
    fn nothing_is_written_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("victim"), b"keep").unwrap();
        let dest = tmp.path().join("dest");
        fs::create_dir_all(dest.join("t")).unwrap();
        // What is already at the destination (or a crafted archive's own
        // in-tree link) is never followed.
        std::os::unix::fs::symlink(&outside, dest.join("t/via")).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), dest.join("t/victim")).unwrap();
        let tar = tarball(&[
            ("t/via/victim", EntryType::Regular, 0o644, "", b"evil"),
            ("t/via/new", EntryType::Regular, 0o644, "", b"evil"),
            ("t/victim", EntryType::Regular, 0o644, "", b"replaced"),
            ("t/in", EntryType::Symlink, 0o777, "sub", b""),
            ("t/in/x", EntryType::Regular, 0o644, "", b"x"),
        ]);
        let e = unpack(&tar, &dest, OsStr::new("t")).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::InvalidArgument);
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"keep");
        assert!(!outside.join("new").exists());
        // The symlink in the file's place was replaced, not followed.
        assert!(fs::symlink_metadata(dest.join("t/victim"))
            .unwrap()
            .is_file());
        assert_eq!(fs::read(dest.join("t/victim")).unwrap(), b"replaced");
        assert!(!dest.join("t/sub").exists());
    }

    #[test]
    fn a_hard_linked_file_at_the_destination_is_replaced_not_written() {
        let tmp = tempfile::tempdir().unwrap();
        let precious = tmp.path().join("precious");
        fs::write(&precious, b"keep").unwrap();
        let dest = tmp.path().join("dest");
        fs::create_dir(&dest).unwrap();
        fs::hard_link(&precious, dest.join("f")).unwrap();
        let tar = tarball(&[("f", EntryType::Regular, 0o644, "", b"new")]);
        unpack(&tar, &dest, OsStr::new("f")).unwrap();
        assert_eq!(fs::read(&precious).unwrap(), b"keep");
        assert_eq!(fs::read(dest.join("f")).unwrap(), b"new");
    }

    #[test]
    fn entries_outside_the_copy_are_a_protocol_error() {
        for path in ["/etc/x", "t/../../x", "../x", "other", "other/t", "."] {
            let tmp = tempfile::tempdir().unwrap();
            let tar = tarball(&[(path, EntryType::Regular, 0o644, "", b"x")]);
            let e = unpack(&tar, tmp.path(), OsStr::new("t"));
            assert_eq!(refused_code(e), crate::ErrorCode::Protocol, "{path}");
            assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0, "{path}");
        }
    }

    #[test]
    fn link_targets() {
        let comps = |p: &str| -> Vec<OsString> { p.split('/').map(OsString::from).collect() };
        for (at, target, ok) in [
            ("t/a", "b", true),
            ("t/a", "./b", true),
            ("t/a", "sub/b", true),
            ("t/d/a", "../b", true),
            ("t/d/a", "../../t/b", true),
            ("t/d/a", "../../u/b", false),
            ("t/d/a", "../../..", false),
            ("t/a", "..", false),
            ("t/a", "../t", true),
            ("t/a", "/etc/passwd", false),
            ("t/a", "", false),
            ("t/a", "x/../..", false),
            ("t/a", "x/../b", false),
            ("t", "t", true),
            ("t", "u", false),
        ] {
            assert_eq!(
                link_stays_inside(&comps(at), target.as_bytes()),
                ok,
                "{at} -> {target}"
            );
        }
    }
}

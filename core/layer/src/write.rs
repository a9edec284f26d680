//! An overlayfs upper directory written as an OCI layer (an uncompressed
//! tar): what the sandbox changed over its image.
//!
//! overlayfs marks a deleted lower file with a whiteout (a character device
//! 0:0) and a directory that hides the whole lower one with the `opaque`
//! extended attribute; OCI layers say the same with `.wh.NAME` and
//! `.wh..wh..opq` entries, which is what is written for them. Owners are
//! written as the guest sees them: the host ids of a sandbox's user
//! namespace (`base..base+65536`) less `base`. Entries come in name order,
//! so the same tree always gives the same layer (and digest).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::MAP_SIZE;

/// The ids a sandbox's writable layer is owned by on the host: `shift` is
/// the host id of guest root (0 where the writer runs in the sandbox's own
/// user namespace, as a rootless supervisor does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owners {
    /// The host id of the guest's root.
    pub shift: u32,
}

impl Owners {
    fn guest(self, host: u32) -> u64 {
        // An id outside the sandbox's range (a file the host put there)
        // is shown as the guest's root, which is what the guest sees of it.
        u64::from(
            host.checked_sub(self.shift)
                .filter(|id| *id < MAP_SIZE)
                .unwrap_or(0),
        )
    }
}

pub(crate) const WHITEOUT_PREFIX: &str = ".wh.";
pub(crate) const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// overlayfs' opaque-directory attribute, as root's overlay and a user
/// namespace's (`userxattr`) overlay name it.
const OPAQUE_XATTRS: [&str; 2] = ["trusted.overlay.opaque", "user.overlay.opaque"];

/// What a written layer holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LayerStats {
    /// Entries written (whiteouts included).
    pub entries: u64,
    /// Bytes of regular-file content.
    pub content_bytes: u64,
}

/// Writes the tree under `upper` as a layer to `out`. A missing `upper`
/// (a sandbox never started) is an empty layer.
///
/// The walk goes by descriptors, never by path below `upper`: each entry
/// is looked at (`fstatat` without following) and opened
/// (`openat(O_NOFOLLOW)`) relative to its directory's descriptor, and what
/// is opened is what is written. A guest that changes the tree while it is
/// walked (a sandbox copied as it runs) can make an entry vanish or be
/// skipped, never make the walk follow a symlink out of the tree.
pub fn write_layer(upper: &Path, owners: Owners, out: impl Write) -> io::Result<LayerStats> {
    write_layer_watched(upper, owners, out, &mut |_| {})
}

/// [`write_layer`], calling `listed` with each entry's path in the layer
/// once it has been looked at and before it is opened: the window a guest
/// that swaps an entry for a symlink would use (a test's fault point holds
/// it open).
pub fn write_layer_watched(
    upper: &Path,
    owners: Owners,
    out: impl Write,
    listed: &mut dyn FnMut(&Path),
) -> io::Result<LayerStats> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let walk = Walk {
        builder,
        owners,
        links: HashMap::new(),
        stats: LayerStats::default(),
        listed,
    };
    walk.run(upper)
}

impl<W: Write> Walk<'_, W> {
    fn run(mut self, upper: &Path) -> io::Result<LayerStats> {
        let walk = &mut self;
        // The top directory may be a symlink to one (an image named by a link
        // under `images/named`); nothing below it is followed.
        match open_dir(libc::AT_FDCWD, upper, true) {
            Ok(fd) => walk.dir(&fd, Path::new(""))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a directory", upper.display()),
                ))
            }
            Err(e) => return Err(e),
        }
        let stats = self.stats;
        self.builder.into_inner()?.flush()?;
        Ok(stats)
    }
}

/// What the walk needs of an entry's `stat`.
#[derive(Debug, Clone, Copy)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    nlink: u64,
    dev: u64,
    ino: u64,
    rdev: u64,
}

impl Meta {
    fn of(st: &libc::stat) -> Meta {
        Meta {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime: st.st_mtime,
            nlink: st.st_nlink,
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
        }
    }

    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
}

fn cstr(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Opens directory `name` of `dir` (`follow`: even through a symlink, for
/// the top only).
fn open_dir(dir: RawFd, name: &Path, follow: bool) -> io::Result<OwnedFd> {
    let c = cstr(name.as_os_str())?;
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    // SAFETY: a NUL-terminated path; the descriptor returned is ours.
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | nofollow,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `stat` of `name` in `dir`, not following a symlink; `None`: gone.
fn stat_at(dir: RawFd, name: &CString) -> io::Result<Option<Meta>> {
    // SAFETY: an all-zero stat is valid, filled in by the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated name, a writable stat.
    let rc = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        return Ok(Some(Meta::of(&st)));
    }
    match io::Error::last_os_error() {
        e if e.kind() == io::ErrorKind::NotFound => Ok(None),
        e => Err(e),
    }
}

/// Whether `e` says the entry changed since it was looked at (gone, or
/// now a symlink or another kind of file): it is skipped.
fn changed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ELOOP | libc::ENOTDIR | libc::ENXIO)
        )
}

struct Walk<'a, W: Write> {
    builder: tar::Builder<W>,
    owners: Owners,
    /// Files with more than one link already written: (dev, ino) -> path.
    links: HashMap<(u64, u64), PathBuf>,
    stats: LayerStats,
    /// See [`write_layer_watched`].
    listed: &'a mut dyn FnMut(&Path),
}

impl<W: Write> Walk<'_, W> {
    /// Writes the entries of the directory open as `dir` (at `rel` in the
    /// layer).
    fn dir(&mut self, dir: &OwnedFd, rel: &Path) -> io::Result<()> {
        // The directory the descriptor is, whatever its path now leads to.
        let listing = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let mut names: Vec<_> = fs::read_dir(&listing)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let c = cstr(&name)?;
            let rel = rel.join(&name);
            // Gone since the listing (a sandbox that is not frozen).
            let Some(meta) = stat_at(dir.as_raw_fd(), &c)? else {
                continue;
            };
            (self.listed)(&rel);
            self.entry(dir, &c, &rel, &meta)?;
        }
        Ok(())
    }

    fn header(&self, meta: &Meta, kind: tar::EntryType) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(meta.mode & 0o7777);
        h.set_uid(self.owners.guest(meta.uid));
        h.set_gid(self.owners.guest(meta.gid));
        h.set_mtime(u64::try_from(meta.mtime).unwrap_or(0));
        h.set_size(0);
        h
    }

    fn empty(&mut self, rel: &Path) -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(0);
        self.builder.append_data(&mut h, rel, io::empty())?;
        self.stats.entries += 1;
        Ok(())
    }

    fn entry(&mut self, dir: &OwnedFd, name: &CString, rel: &Path, meta: &Meta) -> io::Result<()> {
        let at = dir.as_raw_fd();
        match meta.kind() {
            libc::S_IFCHR if meta.rdev == 0 => {
                let file = rel.file_name().unwrap_or_default().to_string_lossy();
                let whiteout = rel.with_file_name(format!("{WHITEOUT_PREFIX}{file}"));
                self.empty(&whiteout)
            }
            libc::S_IFDIR => {
                let sub = match open_dir(
                    at,
                    Path::new(std::ffi::OsStr::from_bytes(name.as_bytes())),
                    false,
                ) {
                    Ok(fd) => fd,
                    Err(e) if changed(&e) => return Ok(()),
                    Err(e) => return Err(e),
                };
                // What was opened: its own stat, not the one looked at.
                let meta = Meta::of(&fstat(&sub)?);
                if meta.kind() != libc::S_IFDIR {
                    return Ok(());
                }
                let mut h = self.header(&meta, tar::EntryType::Directory);
                self.builder.append_data(&mut h, rel, io::empty())?;
                self.stats.entries += 1;
                if is_opaque(&sub) {
                    self.empty(&rel.join(OPAQUE_MARKER))?;
                }
                self.dir(&sub, rel)
            }
            libc::S_IFLNK => {
                let target = match read_link_at(at, name) {
                    Ok(t) => t,
                    Err(e) if changed(&e) || e.raw_os_error() == Some(libc::EINVAL) => {
                        return Ok(())
                    }
                    Err(e) => return Err(e),
                };
                let mut h = self.header(meta, tar::EntryType::Symlink);
                self.builder.append_link(&mut h, rel, target)?;
                self.stats.entries += 1;
                Ok(())
            }
            // Not content: a socket is recreated by whoever listens on it.
            libc::S_IFSOCK => Ok(()),
            libc::S_IFREG => self.file(at, name, rel),
            kind => {
                let kind = match kind {
                    libc::S_IFIFO => tar::EntryType::Fifo,
                    libc::S_IFCHR => tar::EntryType::Char,
                    _ => tar::EntryType::Block,
                };
                let mut h = self.header(meta, kind);
                if kind != tar::EntryType::Fifo {
                    h.set_device_major(libc::major(meta.rdev))?;
                    h.set_device_minor(libc::minor(meta.rdev))?;
                }
                self.builder.append_data(&mut h, rel, io::empty())?;
                self.stats.entries += 1;
                Ok(())
            }
        }
    }

    /// A regular file: opened without following (and without blocking,
    /// should it have become a fifo), then written as what was opened.
    fn file(&mut self, dir: RawFd, name: &CString, rel: &Path) -> io::Result<()> {
        // SAFETY: a NUL-terminated name; the descriptor returned is ours.
        let fd = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return if changed(&e) { Ok(()) } else { Err(e) };
        }
        // SAFETY: `fd` was just opened and is owned by no one else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let meta = Meta::of(&fstat(&file)?);
        if meta.kind() != libc::S_IFREG {
            return Ok(());
        }
        if meta.nlink > 1 {
            let key = (meta.dev, meta.ino);
            if let Some(first) = self.links.get(&key) {
                let mut h = self.header(&meta, tar::EntryType::Link);
                let first = first.clone();
                self.builder.append_link(&mut h, rel, first)?;
                self.stats.entries += 1;
                return Ok(());
            }
            self.links.insert(key, rel.to_path_buf());
        }
        // The size read now, and exactly that many bytes written: a file
        // still growing (a sandbox that is not frozen) is cut where it was
        // when looked at, never a corrupt tar.
        let size = file.metadata()?.len();
        let mut h = self.header(&meta, tar::EntryType::Regular);
        h.set_size(size);
        self.builder
            .append_data(&mut h, rel, PaddedReader::new(file, size))?;
        self.stats.entries += 1;
        self.stats.content_bytes += size;
        Ok(())
    }
}

fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is valid, filled in by the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor, a writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn read_link_at(dir: RawFd, name: &CString) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a NUL-terminated name, a writable buffer of its length.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// Exactly `size` bytes of `inner`: its bytes, then zeros if it shrank.
struct PaddedReader<R> {
    inner: io::Take<R>,
    left: u64,
}

impl<R: io::Read> PaddedReader<R> {
    fn new(inner: R, size: u64) -> Self {
        PaddedReader {
            inner: inner.take(size),
            left: size,
        }
    }
}

impl<R: io::Read> io::Read for PaddedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

fn is_opaque(dir: &OwnedFd) -> bool {
    OPAQUE_XATTRS.iter().any(|attr| {
        let Ok(attr) = CString::new(*attr) else {
            return false;
        };
        let mut value = [0u8; 4];
        // SAFETY: a NUL-terminated name, an open descriptor, a buffer
        // writable for its length.
        let n = unsafe {
            libc::fgetxattr(
                dir.as_raw_fd(),
                attr.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n == 1 && value[0] == b'y'
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entries(layer: &[u8]) -> Vec<(String, tar::EntryType, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(layer);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let kind = e.header().entry_type();
                let uid = e.header().uid().unwrap();
                let mut data = Vec::new();
                io::Read::read_to_end(&mut e, &mut data).unwrap();
                (path, kind, uid, data)
            })
            .collect()
    }

    #[test]
    fn files_links_and_whiteouts_become_layer_entries_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        fs::create_dir_all(upper.join("etc/app")).unwrap();
        fs::write(upper.join("etc/app/conf"), b"v=1").unwrap();
        fs::hard_link(upper.join("etc/app/conf"), upper.join("etc/app/alias")).unwrap();
        std::os::unix::fs::symlink("app/conf", upper.join("etc/link")).unwrap();
        let mut layer = Vec::new();
        let stats = write_layer(&upper, Owners { shift: 0 }, &mut layer).unwrap();
        let got: Vec<_> = entries(&layer)
            .into_iter()
            .map(|(p, k, _, d)| (p, k, d))
            .collect();
        assert_eq!(
            got,
            vec![
                ("etc".into(), tar::EntryType::Directory, vec![]),
                ("etc/app".into(), tar::EntryType::Directory, vec![]),
                (
                    "etc/app/alias".into(),
                    tar::EntryType::Regular,
                    b"v=1".to_vec()
                ),
                ("etc/app/conf".into(), tar::EntryType::Link, vec![]),
                ("etc/link".into(), tar::EntryType::Symlink, vec![]),
            ]
        );
        assert_eq!(stats.content_bytes, 3);
        // The same tree, the same bytes.
        let mut again = Vec::new();
        write_layer(&upper, Owners { shift: 0 }, &mut again).unwrap();
        assert_eq!(layer, again);
    }

    #[test]
    fn a_missing_upper_is_an_empty_layer() {
        let dir = tempfile::tempdir().unwrap();
        let mut layer = Vec::new();
        let stats = write_layer(&dir.path().join("none"), Owners { shift: 0 }, &mut layer).unwrap();
        assert_eq!(stats, LayerStats::default());
        assert!(entries(&layer).is_empty());
    }

    #[test]
    fn owners_are_shifted_back_into_the_guest_range() {
        let o = Owners { shift: 100_000 };
        assert_eq!(o.guest(100_000), 0);
        assert_eq!(o.guest(101_000), 1000);
        assert_eq!(o.guest(5), 0);
        assert_eq!(o.guest(100_000 + 70_000), 0);
    }

    #[test]
    fn a_file_that_shrinks_while_read_keeps_the_tar_whole() {
        let mut r = PaddedReader::new(&b"abc"[..], 5);
        let mut out = Vec::new();
        io::Read::read_to_end(&mut r, &mut out).unwrap();
        assert_eq!(out, b"abc\0\0");
    }

    /// The window a guest that changes its tree while it is copied would
    /// use: each entry is swapped, after it was looked at and before it is
    /// opened, for a symlink to a file of the host's (and a directory for
    /// one to a directory of the host's). Nothing of the host's is written.
    #[test]
    fn an_entry_swapped_for_a_symlink_mid_walk_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        fs::create_dir_all(host.join("secrets")).unwrap();
        fs::write(host.join("shadow"), b"host secret").unwrap();
        fs::write(host.join("secrets/key"), b"host key").unwrap();
        let upper = dir.path().join("upper");
        fs::create_dir_all(upper.join("d")).unwrap();
        fs::write(upper.join("d/inner"), b"guest").unwrap();
        fs::write(upper.join("f"), b"guest file").unwrap();
        let (u, h) = (upper.clone(), host.clone());
        let mut swap = move |rel: &Path| {
            let at = u.join(rel);
            let (target, is_dir) = match rel.to_str() {
                Some("f") => (h.join("shadow"), false),
                Some("d") => (h.join("secrets"), true),
                _ => return,
            };
            if is_dir {
                fs::remove_dir_all(&at).unwrap();
            } else {
                fs::remove_file(&at).unwrap();
            }
            std::os::unix::fs::symlink(target, &at).unwrap();
        };
        let mut layer = Vec::new();
        write_layer_watched(&upper, Owners { shift: 0 }, &mut layer, &mut swap).unwrap();
        let got = entries(&layer);
        for (path, _, _, data) in &got {
            assert!(
                !data.starts_with(b"host") && !path.contains("key"),
                "the host's {path} was written: {got:?}"
            );
        }
        // The swapped entries were skipped, not followed.
        assert!(
            got.iter().all(|(p, ..)| p != "f" && !p.starts_with("d/")),
            "{got:?}"
        );
    }
}

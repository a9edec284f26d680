//! The content-addressed cache of unpacked root filesystems.
//!
//! ```text
//! images/rootfs/<hex>/          the unpacked tree (read-only lower layer)
//! images/rootfs/<hex>.json      its ImageConfig; written last, so it is
//!                               also the completion marker
//! images/rootfs/<hex>.lock      flock serialising builders of <hex>
//! images/rootfs/.tmp-<hex>-*    a tree being built (or left by a crash)
//! ```
//!
//! `<hex>` is the manifest digest, so an entry never changes once complete.
//! A tree is built in a temporary directory beside its final place, flushed,
//! and renamed into place; then the marker is written (via its own temporary
//! file and rename). Readers trust an entry only when the marker exists, so
//! they see either nothing or a complete tree. Builders of the same digest,
//! in any process, are serialised by the lock file and re-check under it;
//! anything a crashed builder left (a temporary tree, a tree without marker)
//! is removed by the next builder while it holds the lock.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::digest::Digest;
use super::unpack::remove_tree;
use super::ImageConfig;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Largest marker file accepted.
const MAX_MARKER: u64 = 1 << 20;

/// The rootfs cache under a burrow home.
#[derive(Debug, Clone)]
pub(crate) struct RootfsCache {
    dir: PathBuf,
}

/// A complete cache entry.
#[derive(Debug, Clone)]
pub(crate) struct CachedRootfs {
    /// The unpacked tree.
    pub(crate) rootfs: PathBuf,
    /// The image defaults recorded with it.
    pub(crate) config: ImageConfig,
}

impl RootfsCache {
    /// The cache of `home` (its directory is created 0700 if missing).
    pub(crate) fn open(home: &Home) -> Result<RootfsCache> {
        let dir = home.images_dir().join("rootfs");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::io("creating the image cache", Some(&dir), e))?;
        Ok(RootfsCache { dir })
    }

    fn tree(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    fn marker(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.json", digest.hex()))
    }

    fn tmp_prefix(digest: &Digest) -> String {
        format!(".tmp-{}-", digest.hex())
    }

    /// The complete entry for `digest`, if there is one.
    pub(crate) fn lookup(&self, digest: &Digest) -> Result<Option<CachedRootfs>> {
        let marker = self.marker(digest);
        let data = match File::open(&marker) {
            Ok(f) => {
                let mut data = Vec::new();
                io::Read::read_to_end(&mut io::Read::take(f, MAX_MARKER), &mut data)
                    .map_err(|e| Error::io("reading the image cache", Some(&marker), e))?;
                data
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading the image cache", Some(&marker), e)),
        };
        let Ok(config) = serde_json::from_slice::<ImageConfig>(&data) else {
            return Ok(None);
        };
        let rootfs = self.tree(digest);
        match fs::symlink_metadata(&rootfs) {
            Ok(m) if m.is_dir() => Ok(Some(CachedRootfs { rootfs, config })),
            _ => Ok(None),
        }
    }

    /// Returns the entry for `digest`, building it with `build` if it is
    /// missing. `build` fills the empty directory it is given and returns the
    /// image defaults; if it fails, its directory is removed and nothing is
    /// cached.
    pub(crate) fn get_or_build(
        &self,
        digest: &Digest,
        build: impl FnOnce(&Path) -> Result<ImageConfig>,
    ) -> Result<CachedRootfs> {
        if let Some(hit) = self.lookup(digest)? {
            return Ok(hit);
        }
        let _lock = self.lock(digest)?;
        // Re-check only after acquiring the lock: another builder may have
        // finished while we waited, and its marker is written last.
        if let Some(hit) = self.lookup(digest)? {
            return Ok(hit);
        }
        // Nobody else builds this digest while we hold the lock, so anything
        // in progress for it is a crashed builder's leftover.
        self.remove_leftovers(digest)?;

        let tmp = self.dir.join(format!(
            "{}{}-{:016x}",
            Self::tmp_prefix(digest),
            std::process::id(),
            rand::random::<u64>()
        ));
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&tmp)
            .map_err(|e| Error::io("creating a temporary image directory", Some(&tmp), e))?;
        let built = build(&tmp).and_then(|config| {
            sync_filesystem(&tmp)?;
            let tree = self.tree(digest);
            fs::rename(&tmp, &tree)
                .map_err(|e| Error::io("moving an unpacked image into place", Some(&tree), e))?;
            Ok(config)
        });
        let config = match built {
            Ok(c) => c,
            Err(e) => {
                if let Err(cleanup) = remove_tree(&tmp) {
                    tracing::warn!(path = %tmp.display(), error = %cleanup, "cannot remove a failed image unpack");
                }
                return Err(e);
            }
        };
        self.write_marker(digest, &config)?;
        Ok(CachedRootfs {
            rootfs: self.tree(digest),
            config,
        })
    }

    /// Every digest with anything in the cache: a tree, a marker, or a
    /// builder's leftovers.
    pub(crate) fn digests(&self) -> Result<BTreeSet<Digest>> {
        let mut out = BTreeSet::new();
        let listing = fs::read_dir(&self.dir)
            .map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
        for entry in listing {
            let entry =
                entry.map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name.strip_prefix(".tmp-").unwrap_or(&name);
            let hex = stem.get(..64).unwrap_or_default();
            if let Ok(d) = Digest::parse(&format!("sha256:{hex}")) {
                if !name.ends_with(".lock") {
                    out.insert(d);
                }
            }
        }
        Ok(out)
    }

    /// Removes everything cached for `digest` (marker first, so readers stop
    /// trusting the tree) unless a builder holds it right now. Returns the
    /// bytes freed, or `None` if it was busy.
    pub(crate) fn remove(&self, digest: &Digest) -> Result<Option<u64>> {
        let lock_path = self.dir.join(format!("{}.lock", digest.hex()));
        let Some(_lock) = crate::engine::locks::FileLock::try_acquire(&lock_path)? else {
            return Ok(None);
        };
        let mut doomed = vec![self.marker(digest), self.tree(digest)];
        let prefix = Self::tmp_prefix(digest);
        let listing = fs::read_dir(&self.dir)
            .map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
        for entry in listing {
            let entry =
                entry.map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                doomed.push(entry.path());
            }
        }
        let mut freed = 0;
        for path in doomed {
            freed += super::registry::tree_size(&path);
            remove_tree(&path)
                .map_err(|e| Error::io("removing an unpacked image", Some(&path), e))?;
        }
        Ok(Some(freed))
    }

    fn lock(&self, digest: &Digest) -> Result<File> {
        let path = self.dir.join(format!("{}.lock", digest.hex()));
        // std opens with O_CLOEXEC: the lock never leaks into children.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("opening an image lock", Some(&path), e))?;
        loop {
            // SAFETY: the fd is valid for the lifetime of `file`; flock takes
            // no pointers.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(file);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::io("locking an image", Some(&path), e));
            }
        }
    }

    fn remove_leftovers(&self, digest: &Digest) -> Result<()> {
        let prefix = Self::tmp_prefix(digest);
        let listing = fs::read_dir(&self.dir)
            .map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
        let mut stale: Vec<PathBuf> = Vec::new();
        for entry in listing {
            let entry =
                entry.map_err(|e| Error::io("listing the image cache", Some(&self.dir), e))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                stale.push(entry.path());
            }
        }
        // A tree without its marker: the builder died between rename and
        // marker.
        stale.push(self.tree(digest));
        stale.push(self.marker(digest));
        for path in stale {
            if fs::symlink_metadata(&path).is_ok() {
                tracing::debug!(path = %path.display(), "removing an incomplete image unpack");
            }
            remove_tree(&path)
                .map_err(|e| Error::io("removing an incomplete image unpack", Some(&path), e))?;
        }
        Ok(())
    }

    fn write_marker(&self, digest: &Digest, config: &ImageConfig) -> Result<()> {
        let marker = self.marker(digest);
        let tmp = self.dir.join(format!(
            "{}{}.json",
            Self::tmp_prefix(digest),
            std::process::id()
        ));
        let data = serde_json::to_vec_pretty(config)
            .map_err(|e| Error::io("encoding an image config", Some(&marker), e.into()))?;
        let write = || -> io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            fs::rename(&tmp, &marker)?;
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::io("recording an unpacked image", Some(&marker), e)
        })
    }
}

/// Flushes the filesystem holding `path`, so a tree is durable before its
/// rename makes it visible (a marker must never outlive its content).
fn sync_filesystem(path: &Path) -> Result<()> {
    let dir =
        File::open(path).map_err(|e| Error::io("opening an unpacked image", Some(path), e))?;
    // SAFETY: the fd is valid for the lifetime of `dir`; syncfs takes no
    // pointers.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc != 0 {
        return Err(Error::io(
            "flushing an unpacked image",
            Some(path),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

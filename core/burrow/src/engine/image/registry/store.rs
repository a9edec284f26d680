//! The local image store shared by every sandbox and process of a home:
//!
//! ```text
//! images/blobs/sha256/<hex>            a verified blob (manifest, config, layer)
//! images/blobs/sha256/.tmp-<hex>-*     a download in progress, or left by a crash
//! images/blobs/locks/<hex>.lock        flock serialising "check, download, rename"
//! images/refs.json                     pulled references -> manifest digests
//! images/refs.lock                     flock serialising updates of refs.json
//! ```
//!
//! A blob appears under its digest only by an atomic rename of a temporary
//! file whose content was verified against the digest and size, while its
//! lock is held. Anyone holding a blob's lock may therefore treat every
//! temporary file of that digest as a leftover of a killed process and
//! remove it. Blobs are still verified before use, so a blob damaged on disk
//! later is found and fetched again, never unpacked.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::image::digest::{BlobDir, BlobError, Digest, HashingReader};
use crate::engine::locks::FileLock;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Largest refs.json read.
const MAX_REFS: u64 = 64 << 20;

/// The blob store of a home.
#[derive(Debug, Clone)]
pub(crate) struct BlobStore {
    blobs: BlobDir,
    dir: PathBuf,
    locks: PathBuf,
}

/// How a stored blob looked when checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlobState {
    /// Present, the right size, the right content.
    Good,
    /// Not there.
    Missing,
    /// There but damaged (wrong size or content); it has been removed.
    Corrupt,
}

fn mkdir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("creating the image store", Some(dir), e))
}

impl BlobStore {
    /// The store of `home` (directories created 0700 if missing).
    pub(crate) fn open(home: &Home) -> Result<BlobStore> {
        let root = home.images_dir().join("blobs");
        let store = BlobStore {
            dir: root.join("sha256"),
            locks: root.join("locks"),
            blobs: BlobDir::new(root),
        };
        mkdir(&store.dir)?;
        mkdir(&store.locks)?;
        Ok(store)
    }

    /// The blobs as a [`BlobDir`] (for verified reads and unpacking).
    pub(crate) fn blob_dir(&self) -> &BlobDir {
        &self.blobs
    }

    /// Where the blob with this digest lives.
    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.blobs.path(digest)
    }

    /// The directory holding all blobs.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock_path(&self, digest: &Digest) -> PathBuf {
        self.locks.join(format!("{}.lock", digest.hex()))
    }

    /// Waits for the blob's lock (any process).
    pub(crate) async fn lock(&self, digest: &Digest) -> Result<FileLock> {
        FileLock::acquire(&self.lock_path(digest)).await
    }

    /// Waits for the blob's lock, blocking the thread.
    pub(crate) fn lock_blocking(&self, digest: &Digest) -> Result<FileLock> {
        FileLock::acquire_blocking(&self.lock_path(digest))
    }

    /// Takes the blob's lock if it is free.
    pub(crate) fn try_lock(&self, digest: &Digest) -> Result<Option<FileLock>> {
        FileLock::try_acquire(&self.lock_path(digest))
    }

    /// Checks a stored blob against its digest and size, removing it if it
    /// is damaged. Call with the blob's lock held.
    pub(crate) fn check(&self, digest: &Digest, size: u64) -> Result<BlobState> {
        let path = self.path(digest);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BlobState::Missing),
            Err(e) => return Err(Error::io("reading a stored blob", Some(&path), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io("reading a stored blob", Some(&path), e))?;
        let intact = meta.is_file() && meta.len() == size && {
            let mut reader = HashingReader::new(file.take(size));
            io::copy(&mut reader, &mut io::sink())
                .map_err(|e| Error::io("reading a stored blob", Some(&path), e))?;
            let (got, n) = reader.finish();
            n == size && got == *digest
        };
        if intact {
            return Ok(BlobState::Good);
        }
        tracing::warn!(blob = %digest, path = %path.display(), "a stored blob is damaged; removing it to fetch it again");
        self.remove_blob_file(&path)?;
        Ok(BlobState::Corrupt)
    }

    fn remove_blob_file(&self, path: &Path) -> Result<()> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("removing a damaged blob", Some(path), e)),
        }
    }

    fn tmp_prefix(digest: &Digest) -> String {
        format!(".tmp-{}-", digest.hex())
    }

    /// Removes the temporary files of this digest (left by killed pulls).
    /// Call with the blob's lock held.
    pub(crate) fn remove_temps(&self, digest: &Digest) -> Result<()> {
        let prefix = Self::tmp_prefix(digest);
        for entry in
            fs::read_dir(&self.dir).map_err(|e| Error::io("listing blobs", Some(&self.dir), e))?
        {
            let entry = entry.map_err(|e| Error::io("listing blobs", Some(&self.dir), e))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                tracing::debug!(path = %entry.path().display(), "removing an interrupted download");
                self.remove_blob_file(&entry.path())?;
            }
        }
        Ok(())
    }

    /// A fresh temporary file for downloading this digest (create-new, 0600).
    pub(crate) fn temp_file(&self, digest: &Digest) -> Result<(File, PathBuf)> {
        let path = self.dir.join(format!(
            "{}{}-{:016x}",
            Self::tmp_prefix(digest),
            std::process::id(),
            rand::random::<u64>()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("creating a download file", Some(&path), e))?;
        Ok((file, path))
    }

    /// Makes a complete, verified temporary file the blob: flushed, then
    /// renamed into place.
    pub(crate) fn commit(&self, file: File, tmp: &Path, digest: &Digest) -> Result<()> {
        let dest = self.path(digest);
        let done = file
            .sync_all()
            .and_then(|()| fs::rename(tmp, &dest))
            .and_then(|()| File::open(&self.dir)?.sync_all());
        if let Err(e) = done {
            let _ = fs::remove_file(tmp);
            return Err(Error::io("storing a blob", Some(&dest), e));
        }
        Ok(())
    }

    /// Stores `data` (already known to hash to `digest`) unless an intact
    /// copy is there. Call with the blob's lock held.
    pub(crate) fn put(&self, digest: &Digest, data: &[u8]) -> Result<()> {
        if self.check(digest, data.len() as u64)? == BlobState::Good {
            return Ok(());
        }
        self.remove_temps(digest)?;
        let (mut file, tmp) = self.temp_file(digest)?;
        if let Err(e) = file.write_all(data) {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io("writing a blob", Some(&tmp), e));
        }
        self.commit(file, &tmp, digest)
    }

    /// Reads a small blob whose size is not known (a manifest found by
    /// digest only), verifying its content.
    pub(crate) fn read_unsized(&self, digest: &Digest, limit: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path(digest);
        let size = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading a stored blob", Some(&path), e)),
        };
        match self.blobs.read(digest, size, limit) {
            Ok(data) => Ok(Some(data)),
            Err(BlobError::Invalid(reason)) => {
                tracing::warn!(blob = %digest, reason, "ignoring a damaged stored manifest");
                Ok(None)
            }
            Err(BlobError::Io(path, e)) => Err(Error::io("reading a stored blob", Some(&path), e)),
        }
    }
}

/// One pulled reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RefEntry {
    /// The image manifest (for this host's platform).
    pub(crate) digest: String,
    /// The image index the reference pointed at, if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) index_digest: Option<String>,
    /// Bytes of the manifest, config and (compressed) layers.
    pub(crate) size: u64,
    /// When it was last resolved from the registry.
    pub(crate) pulled_at_ms: i64,
}

/// `images/refs.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RefsFile {
    #[serde(default)]
    pub(crate) version: u32,
    /// Pulled registry references (canonical form) -> their image.
    #[serde(default)]
    pub(crate) images: BTreeMap<String, RefEntry>,
    /// The manifest digest each reference (pulled, removed, or a local OCI
    /// layout) last resolved to, so the image of a sandbox whose reference
    /// was removed or changed can still be found (and kept) by prune.
    #[serde(default)]
    pub(crate) resolved: BTreeMap<String, String>,
}

fn refs_path(home: &Home) -> PathBuf {
    home.images_dir().join("refs.json")
}

/// Reads refs.json (empty when missing). A damaged file is an error, never
/// an empty index (prune would otherwise drop every image).
pub(crate) fn load_refs(home: &Home) -> Result<RefsFile> {
    let path = refs_path(home);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RefsFile::default()),
        Err(e) => return Err(Error::io("reading the image index", Some(&path), e)),
    };
    let mut data = Vec::new();
    file.take(MAX_REFS)
        .read_to_end(&mut data)
        .map_err(|e| Error::io("reading the image index", Some(&path), e))?;
    serde_json::from_slice(&data).map_err(|e| {
        Error::io(
            "reading the image index",
            Some(&path),
            io::Error::new(io::ErrorKind::InvalidData, e),
        )
    })
}

/// Applies `change` to refs.json under its lock (blocking) and writes it
/// back atomically if `change` returns true.
pub(crate) fn update_refs<T>(
    home: &Home,
    change: impl FnOnce(&mut RefsFile) -> (bool, T),
) -> Result<T> {
    let lock_path = home.images_dir().join("refs.lock");
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| Error::io("opening the image index lock", Some(&lock_path), e))?;
    lock.lock()
        .map_err(|e| Error::io("locking the image index", Some(&lock_path), e))?;
    let mut refs = load_refs(home)?;
    let (write, out) = change(&mut refs);
    if write {
        refs.version = 1;
        let path = refs_path(home);
        let tmp = home
            .images_dir()
            .join(format!(".refs.json.tmp-{}", std::process::id()));
        let data = serde_json::to_vec_pretty(&refs)
            .map_err(|e| Error::io("encoding the image index", Some(&path), e.into()))?;
        let written = (|| -> io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(home.images_dir())?.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io("writing the image index", Some(&path), e));
        }
    }
    drop(lock);
    Ok(out)
}

/// Records that `reference` resolved to `digest` (only written when it
/// changed).
pub(crate) fn note_resolved(home: &Home, reference: &str, digest: &Digest) -> Result<()> {
    let digest = digest.to_string();
    if load_refs(home)?.resolved.get(reference) == Some(&digest) {
        return Ok(());
    }
    update_refs(home, |refs| {
        let changed = refs.resolved.get(reference) != Some(&digest);
        if changed {
            refs.resolved.insert(reference.to_owned(), digest);
        }
        (changed, ())
    })
}

/// Sum of the sizes of the files under `path` (not following symlinks).
pub(crate) fn tree_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    if let Ok(rd) = fs::read_dir(path) {
        for e in rd.flatten() {
            total += tree_size(&e.path());
        }
    }
    total
}

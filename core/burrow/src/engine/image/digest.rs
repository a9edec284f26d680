//! Content digests and verified blob access.
//!
//! Every blob burrow reads from an image (manifest, config, layer) is checked
//! against the digest and size its descriptor names before anything is built
//! from it. Digests are also the only thing that turns into a path inside a
//! blob directory, so they are parsed strictly: `sha256:` and 64 lowercase hex
//! digits, nothing else.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// A validated `sha256:<64 lowercase hex>` content digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Digest {
    hex: String,
}

impl Digest {
    /// Parses a digest string; the reason is returned on failure.
    pub(crate) fn parse(s: &str) -> Result<Digest, String> {
        let Some((alg, hex)) = s.split_once(':') else {
            return Err(format!("digest {s:?} has no algorithm prefix"));
        };
        if alg != "sha256" {
            return Err(format!(
                "digest {s:?}: unsupported algorithm {alg:?} (only sha256)"
            ));
        }
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(format!("digest {s:?} is not 64 lowercase hex digits"));
        }
        Ok(Digest {
            hex: hex.to_owned(),
        })
    }

    /// The digest of `data`.
    pub(crate) fn of(data: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(data))
    }

    pub(crate) fn from_hasher(h: Sha256) -> Digest {
        Digest {
            hex: hex::encode(h.finalize()),
        }
    }

    /// The 64 hex digits (safe as a file name).
    pub(crate) fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

/// Why a blob could not be used.
#[derive(Debug)]
pub(crate) enum BlobError {
    /// The blob is missing, the wrong size or the wrong content.
    Invalid(String),
    /// Reading it failed for a host reason.
    Io(PathBuf, io::Error),
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobError::Invalid(reason) => f.write_str(reason),
            BlobError::Io(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

/// A directory of blobs laid out as `<root>/sha256/<hex>` (the OCI image
/// layout's `blobs/`, and the shape a registry puller's download cache uses).
#[derive(Debug, Clone)]
pub(crate) struct BlobDir {
    root: PathBuf,
}

impl BlobDir {
    pub(crate) fn new(root: impl Into<PathBuf>) -> BlobDir {
        BlobDir { root: root.into() }
    }

    /// The path of a blob. Only a validated [`Digest`] becomes a path
    /// component, so no descriptor can point outside `root`.
    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.root.join("sha256").join(digest.hex())
    }

    fn open_sized(&self, digest: &Digest, size: u64) -> Result<(File, PathBuf), BlobError> {
        let path = self.path(digest);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::Invalid(format!("blob {digest} is missing")));
            }
            Err(e) => return Err(BlobError::Io(path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| BlobError::Io(path.clone(), e))?;
        if !meta.is_file() {
            return Err(BlobError::Invalid(format!(
                "blob {digest} is not a regular file"
            )));
        }
        if meta.len() != size {
            return Err(BlobError::Invalid(format!(
                "blob {digest} is {} bytes, its descriptor says {size} (truncated or corrupt)",
                meta.len()
            )));
        }
        Ok((file, path))
    }

    /// Reads a whole blob of at most `limit` bytes and verifies it.
    pub(crate) fn read(
        &self,
        digest: &Digest,
        size: u64,
        limit: u64,
    ) -> Result<Vec<u8>, BlobError> {
        if size > limit {
            return Err(BlobError::Invalid(format!(
                "blob {digest} is {size} bytes, more than the {limit} allowed for it"
            )));
        }
        let (file, path) = self.open_sized(digest, size)?;
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(size.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| BlobError::Io(path, e))?;
        check(digest, size, data.len() as u64, &Digest::of(&data))?;
        Ok(data)
    }

    /// Opens a blob for streaming after verifying its whole content, and
    /// returns a reader that verifies it again as it is read (so a blob that
    /// changes between the two passes still never gets through unnoticed:
    /// the reader fails at its end, see [`VerifyingReader`]).
    pub(crate) fn open_verified(
        &self,
        digest: &Digest,
        size: u64,
    ) -> Result<VerifyingReader<File>, BlobError> {
        let (mut file, path) = self.open_sized(digest, size)?;
        let mut hasher = HashingWriter::new(io::sink());
        let n = io::copy(&mut (&mut file).take(size.saturating_add(1)), &mut hasher)
            .map_err(|e| BlobError::Io(path.clone(), e))?;
        check(digest, size, n, &hasher.finish().0)?;
        file.rewind().map_err(|e| BlobError::Io(path, e))?;
        Ok(VerifyingReader::new(file, digest.clone(), size))
    }
}

fn check(digest: &Digest, size: u64, got_size: u64, got: &Digest) -> Result<(), BlobError> {
    if got_size != size {
        return Err(BlobError::Invalid(format!(
            "blob {digest} has {got_size} bytes, its descriptor says {size} (truncated or corrupt)"
        )));
    }
    if got != digest {
        return Err(BlobError::Invalid(format!(
            "blob {digest} is corrupt: its content hashes to {got}"
        )));
    }
    Ok(())
}

/// Hashes (and counts) everything written through it to `inner`.
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// The digest and byte count of what was written, and the writer.
    pub(crate) fn finish(self) -> (Digest, u64, W) {
        (Digest::from_hasher(self.hasher), self.count, self.inner)
    }
}

impl<W: io::Write> io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Hashes everything read through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// The digest and byte count of what was read so far.
    pub(crate) fn finish(self) -> (Digest, u64) {
        (Digest::from_hasher(self.hasher), self.count)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// A reader of a blob with a known digest and size: it fails with
/// `InvalidData` as soon as more than `size` bytes arrive, and at the end of
/// the stream unless exactly `size` bytes hashing to `digest` were read. A
/// consumer that reads to the end therefore never accepts a corrupt blob.
pub(crate) struct VerifyingReader<R> {
    inner: HashingReader<R>,
    digest: Digest,
    size: u64,
    verified: bool,
}

impl<R> fmt::Debug for VerifyingReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyingReader")
            .field("digest", &self.digest)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl<R: Read> VerifyingReader<R> {
    pub(crate) fn new(inner: R, digest: Digest, size: u64) -> Self {
        VerifyingReader {
            inner: HashingReader::new(inner),
            digest,
            size,
            verified: false,
        }
    }

    /// The underlying reader (for a blob verified whole before, read again
    /// without a second check).
    pub(crate) fn into_inner(self) -> R {
        self.inner.inner
    }

    /// Reads whatever is left and reports whether the blob was intact.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        io::copy(&mut self, &mut io::sink())?;
        if self.verified {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "blob stream ended early",
            ))
        }
    }
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if self.inner.count > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "blob {} is longer than its descriptor's {} bytes",
                    self.digest, self.size
                ),
            ));
        }
        if n == 0 && !self.verified {
            let hasher = self.inner.hasher.clone();
            let got = Digest::from_hasher(hasher);
            if self.inner.count != self.size || got != self.digest {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "blob {} is corrupt: read {} of {} bytes hashing to {got}",
                        self.digest, self.inner.count, self.size
                    ),
                ));
            }
            self.verified = true;
        }
        Ok(n)
    }
}

/// Writes `data` as a blob under `dir` (used by the layout writer and, later,
/// a puller's download cache). Written to a temporary name and renamed, so a
/// reader never sees a partial blob under its digest.
pub(crate) fn write_blob(dir: &BlobDir, data: &[u8]) -> io::Result<Digest> {
    let digest = Digest::of(data);
    let path = dir.path(&digest);
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    if path.is_file() {
        return Ok(digest);
    }
    let tmp = parent.join(format!(
        ".tmp-{}-{}-{:016x}",
        digest.hex(),
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, &path)?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_only_sha256_lower_hex() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            Digest::parse(&good).map(|d| d.to_string()),
            Ok(good.clone())
        );
        for bad in [
            String::new(),
            "sha256:".into(),
            format!("sha256:{}", "A".repeat(64)),
            format!("sha256:{}", "a".repeat(63)),
            format!("sha256:{}", "a".repeat(65)),
            format!("sha512:{}", "a".repeat(128)),
            format!("sha256:../../{}", "a".repeat(58)),
            format!("sha256:{}/", "a".repeat(63)),
            "a".repeat(64),
        ] {
            assert!(Digest::parse(&bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn verifying_reader_rejects_wrong_content_and_length() {
        let data = b"hello world".to_vec();
        let d = Digest::of(&data);
        let ok = VerifyingReader::new(&data[..], d.clone(), data.len() as u64);
        assert!(ok.finish().is_ok());
        let mut bad = data.clone();
        bad[0] ^= 1;
        let r = VerifyingReader::new(&bad[..], d.clone(), data.len() as u64);
        assert!(r.finish().is_err());
        let r = VerifyingReader::new(&data[..5], d.clone(), data.len() as u64);
        assert!(r.finish().is_err());
        let long = [&data[..], b"x"].concat();
        let r = VerifyingReader::new(&long[..], d, data.len() as u64);
        assert!(r.finish().is_err());
    }

    #[test]
    fn blob_dir_verifies() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = BlobDir::new(tmp.path());
        let d = write_blob(&dir, b"content").expect("write");
        assert_eq!(dir.read(&d, 7, 100).expect("read"), b"content");
        assert!(matches!(dir.read(&d, 7, 3), Err(BlobError::Invalid(_))));
        assert!(matches!(dir.read(&d, 8, 100), Err(BlobError::Invalid(_))));
        std::fs::write(dir.path(&d), b"contenT").expect("corrupt");
        assert!(matches!(dir.read(&d, 7, 100), Err(BlobError::Invalid(_))));
        assert!(matches!(
            dir.open_verified(&d, 7),
            Err(BlobError::Invalid(_))
        ));
        let missing = Digest::of(b"nope");
        assert!(matches!(
            dir.read(&missing, 4, 100),
            Err(BlobError::Invalid(_))
        ));
    }
}

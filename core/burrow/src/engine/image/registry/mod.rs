//! Pulling images from registries into the local image store, and managing
//! what was pulled.
//!
//! A pull resolves a reference ([`ImageReference`], normalised as Docker
//! does) to an image manifest for this host's platform (descending through
//! image indexes and Docker manifest lists), makes sure the config and layer
//! blobs are in the content-addressed blob store (see `store.rs`: verified,
//! downloaded once per blob across processes, damaged copies fetched again),
//! and unpacks the layers once into the shared rootfs cache keyed by the
//! manifest digest (`cache.rs`, `unpack.rs`). The registry protocol and its
//! authentication are `oci-client`'s (`remote.rs`).
//!
//! [`PullPolicy`] decides when the registry is asked: `IfMissing` (default)
//! uses what was pulled before without touching the network, `Always`
//! resolves the reference again and reuses only blobs that verify, `Never`
//! uses only the local store.
//!
//! Plain HTTP is used only for registries listed as insecure, in
//! `$BURROW_INSECURE_REGISTRIES` (comma-separated `host[:port]`) or in
//! `$BURROW_HOME/registries.json` (`{"insecure": ["127.0.0.1:5000"]}`), or
//! when [`PullOptions::insecure`] asks for it. Credentials come from
//! [`PullOptions::credentials`], else from the Docker config file
//! (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, `auths`).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;
use tracing::Instrument;

use super::cache::RootfsCache;
use super::digest::Digest;
use super::oci::{
    layout_digest, no_platform, parse_manifest, select_platform, unpack_manifest, Parsed,
    MAX_INDEX_DEPTH, MAX_JSON,
};
use super::spec::{Descriptor, Manifest, Platform};
use super::{parse_reference, ImageSource, PreparedImage};
use crate::engine::fault::Fault;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

mod config;
mod push;
mod reference;
mod remote;
pub(crate) mod store;

pub use config::{INSECURE_REGISTRIES_ENV, REGISTRIES_FILE};
pub(crate) use push::push;
pub use push::PushReport;
pub use reference::ImageReference;
pub(crate) use store::{note_resolved, tree_size};

use remote::Remote;
use store::{load_refs, update_refs, BlobState, BlobStore, RefEntry};

/// How many blobs one pull downloads at once.
const PARALLEL_DOWNLOADS: usize = 3;
/// Attempts per blob download on transient (network) errors.
const DOWNLOAD_ATTEMPTS: u32 = 3;
/// Least time between two progress events of one blob.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// When a pull asks the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Use the image pulled before for this reference if there is one;
    /// otherwise pull it (the default).
    #[default]
    IfMissing,
    /// Resolve the reference at the registry again; blobs already stored
    /// (and intact) are reused.
    Always,
    /// Never contact a registry: the image must be in the local store.
    Never,
}

/// What a pull reports as it goes. The blob events (`LayerCached`,
/// `LayerProgress`, `LayerDone`) also cover the image config blob, whose
/// digest is not among `Resolved::layers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullEvent {
    /// The reference resolved to this image manifest with these layers
    /// (digest, compressed size), bottom first.
    Resolved {
        /// Canonical reference.
        reference: String,
        /// Image manifest digest.
        digest: String,
        /// Layers: digest and size.
        layers: Vec<(String, u64)>,
    },
    /// A blob was already in the store and verified.
    LayerCached {
        /// Blob digest.
        digest: String,
    },
    /// Bytes of a blob downloaded so far.
    LayerProgress {
        /// Blob digest.
        digest: String,
        /// Bytes received.
        done: u64,
        /// Blob size.
        total: u64,
    },
    /// A blob was downloaded, verified and stored.
    LayerDone {
        /// Blob digest.
        digest: String,
    },
    /// The layers are being unpacked into a root filesystem.
    Unpacking,
    /// The image is ready.
    Done {
        /// Image manifest digest.
        digest: String,
    },
}

/// Progress callback.
pub type PullProgress = Arc<dyn Fn(PullEvent) + Send + Sync>;

/// Options of [`pull`].
#[derive(Clone, Default)]
pub struct PullOptions {
    /// When to ask the registry.
    pub policy: PullPolicy,
    /// Username and password for this pull (else the Docker config file's,
    /// else anonymous).
    pub credentials: Option<(String, String)>,
    /// Use plain HTTP for this pull's registry, listed as insecure or not.
    pub insecure: bool,
    /// Called with each [`PullEvent`] (from the pulling task; keep it short).
    pub progress: Option<PullProgress>,
    /// An HTTP proxy every connection of the pull goes through (its URL,
    /// credentials in it): the outbound guard's, for a tenant's image.
    pub proxy: Option<String>,
}

impl std::fmt::Debug for PullOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullOptions")
            .field("policy", &self.policy)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|(u, _)| (u, "<redacted>")),
            )
            .field("insecure", &self.insecure)
            .field("progress", &self.progress.is_some())
            .field("proxy", &self.proxy.is_some())
            .finish()
    }
}

/// A pulled reference, as listed by [`list_images`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSummary {
    /// Canonical reference (`docker.io/library/python:latest`).
    pub reference: String,
    /// Image manifest digest (for this host's platform).
    pub digest: String,
    /// Bytes of the manifest, config and compressed layers.
    pub size: u64,
    /// When it was last resolved at the registry, ms since the epoch.
    pub pulled_at_ms: i64,
}

/// What [`prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Blobs removed from the store.
    pub blobs_removed: usize,
    /// Unpacked root filesystems removed.
    pub rootfs_removed: usize,
    /// VM boot templates removed (of removed images, or whose kernel,
    /// agent or QEMU changed).
    pub templates_removed: u64,
    /// Bytes freed (blobs, root filesystems, their disk images and boot
    /// templates, leftovers of killed pulls).
    pub bytes_freed: u64,
}

/// Pulls `reference` (a registry reference such as `python`,
/// `registry.example.com:5000/org/tool:1.2` or `name@sha256:...`) according
/// to `opts`, and returns its unpacked root filesystem and defaults.
pub async fn pull(home: &Home, reference: &str, opts: &PullOptions) -> Result<PreparedImage> {
    let parsed = ImageReference::parse(reference)?;
    let span = tracing::info_span!("image_pull", image = %parsed, policy = ?opts.policy);
    async move {
        let started = Instant::now();
        let _shared = StoreLock::shared(home).await?;
        let puller = Puller {
            home,
            image: reference,
            canonical: parsed.to_string(),
            parsed,
            opts,
            store: BlobStore::open(home)?,
            cache: RootfsCache::open(home)?,
            remote: OnceLock::new(),
        };
        let out = puller.run().await;
        match &out {
            Ok(p) => tracing::debug!(
                digest = p.digest.as_deref().unwrap_or_default(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "image ready"
            ),
            Err(e) => tracing::debug!(error = %e, "image pull failed"),
        }
        out
    }
    .instrument(span)
    .await
}

/// The references pulled into `home`, sorted.
pub fn list_images(home: &Home) -> Result<Vec<ImageSummary>> {
    Ok(load_refs(home)?
        .images
        .into_iter()
        .map(|(reference, e)| ImageSummary {
            reference,
            digest: e.digest,
            size: e.size,
            pulled_at_ms: e.pulled_at_ms,
        })
        .collect())
}

/// Forgets a pulled reference (its blobs and root filesystem stay until
/// [`prune`]). An unknown reference is [`Error::NotFound`].
pub fn remove_image(home: &Home, reference: &str) -> Result<()> {
    let canonical = ImageReference::parse(reference)?.to_string();
    let removed = update_refs(home, |refs| {
        let removed = refs.images.remove(&canonical).is_some();
        (removed, removed)
    })?;
    if removed {
        Ok(())
    } else {
        Err(Error::NotFound {
            what: format!("image {canonical} in the local image store"),
            name: None,
            id: None,
        })
    }
}

/// Removes every blob and unpacked root filesystem that no remaining pulled
/// reference and no reference in `in_use` (the images of existing
/// sandboxes: registry references, `oci:` layouts, as their configs hold
/// them) and no manifest in `digests` (the snapshots) needs, plus leftovers
/// of killed pulls. Waits for pulls in progress
/// to finish, and holds new ones off while it runs.
pub fn prune(home: &Home, in_use: &[String], digests: &[String]) -> Result<PruneReport> {
    let _exclusive = StoreLock::exclusive(home)?;
    let store = BlobStore::open(home)?;
    let cache = RootfsCache::open(home)?;
    let refs = load_refs(home)?;

    // Roots: manifests (or indexes) to keep.
    let mut roots: BTreeSet<Digest> = BTreeSet::new();
    for e in refs.images.values() {
        roots.extend(Digest::parse(&e.digest).ok());
        roots.extend(
            e.index_digest
                .as_deref()
                .and_then(|d| Digest::parse(d).ok()),
        );
    }
    for r in in_use {
        roots.extend(in_use_digest(home, &refs, r));
    }
    roots.extend(digests.iter().filter_map(|d| Digest::parse(d).ok()));

    // Everything the roots reference.
    let mut keep_blobs: BTreeSet<Digest> = BTreeSet::new();
    let mut keep_rootfs: BTreeSet<Digest> = BTreeSet::new();
    let mut pending: Vec<(Digest, usize)> = roots.into_iter().map(|d| (d, 0)).collect();
    while let Some((digest, depth)) = pending.pop() {
        if !keep_blobs.insert(digest.clone()) {
            continue;
        }
        // A root filesystem is kept even when its manifest blob is gone.
        keep_rootfs.insert(digest.clone());
        let Some(data) = store.read_unsized(&digest, MAX_JSON)? else {
            continue;
        };
        match parse_manifest("", &digest, &data) {
            Ok(Parsed::Index(index)) if depth < MAX_INDEX_DEPTH => {
                if let Some(d) = select_platform(&index.manifests, &Platform::host()) {
                    pending.extend(Digest::parse(&d.digest).ok().map(|d| (d, depth + 1)));
                }
            }
            Ok(Parsed::Manifest(m)) => {
                for d in std::iter::once(&m.config).chain(&m.layers) {
                    keep_blobs.extend(Digest::parse(&d.digest).ok());
                }
            }
            _ => {}
        }
    }

    let mut report = PruneReport::default();
    // Blobs and leftovers of killed downloads.
    let listing = fs::read_dir(store.dir())
        .map_err(|e| Error::io("listing the image store", Some(store.dir()), e))?;
    for entry in listing {
        let entry =
            entry.map_err(|e| Error::io("listing the image store", Some(store.dir()), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let (hex, temp) = match name.strip_prefix(".tmp-") {
            Some(rest) => (rest.get(..64).unwrap_or_default(), true),
            None => (name.as_str(), false),
        };
        let Ok(digest) = Digest::parse(&format!("sha256:{hex}")) else {
            continue;
        };
        if !temp && keep_blobs.contains(&digest) {
            continue;
        }
        // Someone holding the lock is downloading it right now.
        let Some(_lock) = store.try_lock(&digest)? else {
            continue;
        };
        let path = entry.path();
        let size = fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
        match fs::remove_file(&path) {
            Ok(()) => {
                report.bytes_freed += size;
                if !temp {
                    report.blobs_removed += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("removing a blob", Some(&path), e)),
        }
    }
    // Unpacked root filesystems, with the ext4 disks made of them.
    let mut removed_keys = Vec::new();
    for digest in cache.digests()? {
        if keep_rootfs.contains(&digest) {
            continue;
        }
        if let Some(freed) = cache.remove(&digest)? {
            report.rootfs_removed += 1;
            report.bytes_freed += freed;
            let disk = crate::engine::image::ext4::disk_path_in(&home.images_dir(), digest.hex());
            if let Ok(meta) = fs::metadata(&disk) {
                // A running VM keeps its open copy.
                if fs::remove_file(&disk).is_ok() {
                    report.bytes_freed += meta.len();
                }
            }
            removed_keys.push(digest.hex().to_owned());
        }
    }
    // What the drivers derived from those images (the vm driver's boot
    // templates; and its templates of a changed kernel, agent or QEMU).
    for driver in crate::engine::driver::all() {
        let (derived, freed) = driver.prune(&home.images_dir(), &removed_keys)?;
        report.templates_removed += derived;
        report.bytes_freed += freed;
    }
    // Forget resolutions whose images are gone.
    update_refs(home, |refs| {
        let before = refs.resolved.len();
        refs.resolved.retain(|_, d| {
            Digest::parse(d).is_ok_and(|d| keep_rootfs.contains(&d) || keep_blobs.contains(&d))
        });
        (refs.resolved.len() != before, ())
    })?;
    tracing::info!(
        blobs = report.blobs_removed,
        rootfs = report.rootfs_removed,
        templates = report.templates_removed,
        bytes = report.bytes_freed,
        "pruned the image store"
    );
    Ok(report)
}

/// The manifest digest a sandbox's image reference uses, if it can be told.
fn in_use_digest(home: &Home, refs: &store::RefsFile, reference: &str) -> Option<Digest> {
    if let Some(d) = refs.resolved.get(reference) {
        return Digest::parse(d).ok();
    }
    match parse_reference(home, reference) {
        Ok(ImageSource::Registry(_)) => {
            let parsed = ImageReference::parse(reference).ok()?;
            let canonical = parsed.to_string();
            refs.images
                .get(&canonical)
                .map(|e| e.digest.clone())
                .or_else(|| refs.resolved.get(&canonical).cloned())
                .and_then(|d| Digest::parse(&d).ok())
                .or_else(|| parsed.pinned())
        }
        Ok(ImageSource::OciLayout { path, tag }) => {
            layout_digest(reference, &path, tag.as_deref()).ok()
        }
        _ => None,
    }
}

/// The shared (pulls) / exclusive (prune) lock on the whole store.
#[derive(Debug)]
struct StoreLock(#[allow(dead_code)] fs::File);

impl StoreLock {
    fn open(home: &Home) -> Result<(fs::File, std::path::PathBuf)> {
        let path = home.images_dir().join("store.lock");
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("opening the image store lock", Some(&path), e))?;
        Ok((file, path))
    }

    async fn shared(home: &Home) -> Result<StoreLock> {
        let (file, path) = StoreLock::open(home)?;
        tokio::task::spawn_blocking(move || {
            file.lock_shared()
                .map_err(|e| Error::io("locking the image store", Some(&path), e))?;
            Ok(StoreLock(file))
        })
        .await
        .map_err(|e| {
            Error::io(
                "locking the image store",
                None,
                io::Error::other(e.to_string()),
            )
        })?
    }

    fn exclusive(home: &Home) -> Result<StoreLock> {
        let (file, path) = StoreLock::open(home)?;
        file.lock()
            .map_err(|e| Error::io("locking the image store", Some(&path), e))?;
        Ok(StoreLock(file))
    }
}

/// A resolved image: the manifest to build and where it came from.
struct Resolved {
    digest: Digest,
    index_digest: Option<Digest>,
    manifest: Manifest,
    manifest_size: u64,
    from_registry: bool,
}

impl Resolved {
    fn size(&self) -> u64 {
        self.manifest_size
            + self.manifest.config.size
            + self.manifest.layers.iter().map(|l| l.size).sum::<u64>()
    }
}

struct Puller<'a> {
    home: &'a Home,
    /// The reference as given.
    image: &'a str,
    parsed: ImageReference,
    canonical: String,
    opts: &'a PullOptions,
    store: BlobStore,
    cache: RootfsCache,
    remote: OnceLock<Remote>,
}

impl Puller<'_> {
    fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidImage {
            image: self.image.to_owned(),
            reason: reason.into(),
        }
    }

    fn emit(&self, event: PullEvent) {
        if let Some(progress) = &self.opts.progress {
            progress(event);
        }
    }

    fn remote(&self) -> Result<&Remote> {
        if let Some(r) = self.remote.get() {
            return Ok(r);
        }
        let r = Remote::new(self.home, self.image, &self.parsed, self.opts)?;
        Ok(self.remote.get_or_init(|| r))
    }

    async fn run(&self) -> Result<PreparedImage> {
        let policy = self.opts.policy;
        let local = match policy {
            PullPolicy::Always => None,
            _ => self.resolve_local()?,
        };
        let resolved = match local {
            Some(r) => r,
            None if policy == PullPolicy::Never => {
                return Err(self.invalid(format!(
                    "{} is not in the local image store, and the pull policy is never",
                    self.canonical
                )))
            }
            None => self.resolve_remote().await?,
        };
        let digest = resolved.digest.clone();
        self.emit(PullEvent::Resolved {
            reference: self.canonical.clone(),
            digest: digest.to_string(),
            layers: resolved
                .manifest
                .layers
                .iter()
                .map(|l| (l.digest.clone(), l.size))
                .collect(),
        });

        // Already unpacked: nothing to fetch (`Always` still checks blobs).
        if policy != PullPolicy::Always {
            if let Some(hit) = self.cache.lookup(&digest)? {
                self.record(&resolved).await?;
                self.emit(PullEvent::Done {
                    digest: digest.to_string(),
                });
                return Ok(self.prepared(hit.rootfs, hit.config, &digest));
            }
        }

        let blobs: Vec<Descriptor> = std::iter::once(resolved.manifest.config.clone())
            .chain(resolved.manifest.layers.iter().cloned())
            .collect();
        let mut downloads = Vec::with_capacity(blobs.len());
        for d in &blobs {
            downloads.push(self.ensure_blob(d));
        }
        futures_util::stream::iter(downloads)
            .buffer_unordered(PARALLEL_DOWNLOADS)
            .try_collect::<Vec<()>>()
            .await?;

        self.emit(PullEvent::Unpacking);
        let cache = self.cache.clone();
        let blob_dir = self.store.blob_dir().clone();
        let image = self.image.to_owned();
        let manifest = resolved.manifest.clone();
        let build_digest = digest.clone();
        let entry = tokio::task::spawn_blocking(move || {
            cache.get_or_build(&build_digest, |dir| {
                tracing::debug!(digest = %build_digest, dir = %dir.display(), "unpacking image");
                unpack_manifest(&image, &blob_dir, &manifest, dir, true)
            })
        })
        .await
        .map_err(|e| self.invalid(format!("image unpacking panicked: {e}")))??;
        self.record(&resolved).await?;
        self.emit(PullEvent::Done {
            digest: digest.to_string(),
        });
        Ok(self.prepared(entry.rootfs, entry.config, &digest))
    }

    fn prepared(
        &self,
        rootfs: std::path::PathBuf,
        config: super::ImageConfig,
        digest: &Digest,
    ) -> PreparedImage {
        PreparedImage {
            reference: self.image.to_owned(),
            rootfs,
            config,
            digest: Some(digest.to_string()),
        }
    }

    /// The image this reference resolved to before, from the local store
    /// only (its manifest blob must be there and intact).
    fn resolve_local(&self) -> Result<Option<Resolved>> {
        let refs = load_refs(self.home)?;
        let (mut top, mut index_digest) = match refs.images.get(&self.canonical) {
            Some(e) => match Digest::parse(&e.digest) {
                Ok(d) => (
                    d,
                    e.index_digest
                        .as_deref()
                        .and_then(|d| Digest::parse(d).ok()),
                ),
                Err(_) => return Ok(None),
            },
            None => match self.parsed.pinned() {
                Some(d) => (d, None),
                None => return Ok(None),
            },
        };
        for _ in 0..=MAX_INDEX_DEPTH {
            let Some(data) = self.store.read_unsized(&top, MAX_JSON)? else {
                return Ok(None);
            };
            match parse_manifest("", &top, &data) {
                Ok(Parsed::Manifest(manifest)) => {
                    return Ok(Some(Resolved {
                        digest: top,
                        index_digest,
                        manifest,
                        manifest_size: data.len() as u64,
                        from_registry: false,
                    }))
                }
                Ok(Parsed::Index(index)) => {
                    let Some(d) = select_platform(&index.manifests, &Platform::host()) else {
                        return Err(self.invalid(no_platform(&top, &index, &Platform::host())));
                    };
                    let next = Digest::parse(&d.digest).map_err(|r| self.invalid(r))?;
                    index_digest = Some(top);
                    top = next;
                }
                Err(reason) => return Err(self.invalid(reason)),
            }
        }
        Ok(None)
    }

    /// Resolves the reference at the registry, storing the manifests
    /// fetched on the way.
    async fn resolve_remote(&self) -> Result<Resolved> {
        let remote = self.remote()?;
        let platform = Platform::host();
        let mut reference = self.parsed.clone();
        let mut declared = String::new();
        let mut expected_size: Option<u64> = None;
        let mut index_digest = None;
        for _ in 0..=MAX_INDEX_DEPTH {
            let (data, digest) = remote.manifest(&reference).await?;
            if data.len() as u64 > MAX_JSON {
                return Err(
                    self.invalid(format!("manifest {digest} is larger than {MAX_JSON} bytes"))
                );
            }
            if let Some(size) = expected_size {
                if size != data.len() as u64 {
                    return Err(self.invalid(format!(
                        "manifest {digest} is {} bytes, its index entry says {size}",
                        data.len()
                    )));
                }
            }
            let parsed = parse_manifest(&declared, &digest, &data).map_err(|r| self.invalid(r))?;
            self.store_small(&digest, &data).await?;
            match parsed {
                Parsed::Manifest(manifest) => {
                    tracing::debug!(%digest, layers = manifest.layers.len(), "resolved");
                    return Ok(Resolved {
                        digest,
                        index_digest,
                        manifest,
                        manifest_size: data.len() as u64,
                        from_registry: true,
                    });
                }
                Parsed::Index(index) => {
                    let entry = select_platform(&index.manifests, &platform)
                        .ok_or_else(|| self.invalid(no_platform(&digest, &index, &platform)))?;
                    let next = Digest::parse(&entry.digest).map_err(|r| self.invalid(r))?;
                    tracing::debug!(index = %digest, manifest = %next, %platform, "picked a platform");
                    declared = entry.media_type.clone();
                    expected_size = Some(entry.size);
                    reference = self.parsed.with_digest(&next);
                    index_digest.get_or_insert(digest);
                }
            }
        }
        Err(self.invalid(format!("image indexes nest deeper than {MAX_INDEX_DEPTH}")))
    }

    /// Stores a small verified blob (a manifest or index).
    async fn store_small(&self, digest: &Digest, data: &[u8]) -> Result<()> {
        let _lock = self.store.lock(digest).await?;
        self.store.put(digest, data)
    }

    /// Makes sure the blob `desc` is in the store, intact: verified if it
    /// is there (and fetched again if damaged), downloaded otherwise. Other
    /// processes pulling the same blob wait on its lock and then find it.
    async fn ensure_blob(&self, desc: &Descriptor) -> Result<()> {
        let digest = Digest::parse(&desc.digest).map_err(|r| self.invalid(r))?;
        let _lock = self.store.lock(&digest).await?;
        let store = self.store.clone();
        let (check_digest, size) = (digest.clone(), desc.size);
        let state = tokio::task::spawn_blocking(move || store.check(&check_digest, size))
            .await
            .map_err(|e| Error::io("checking a blob", None, io::Error::other(e.to_string())))??;
        match state {
            BlobState::Good => {
                self.emit(PullEvent::LayerCached {
                    digest: digest.to_string(),
                });
                return Ok(());
            }
            BlobState::Corrupt => {
                tracing::warn!(blob = %digest, "fetching a damaged blob again")
            }
            BlobState::Missing => {}
        }
        if self.opts.policy == PullPolicy::Never {
            return Err(self.invalid(format!(
                "blob {digest} is not in the local image store (or was damaged), and the pull policy is never"
            )));
        }
        let remote = self.remote()?;
        self.store.remove_temps(&digest)?;
        let mut attempt = 1;
        loop {
            match self.download(remote, desc, &digest).await {
                Ok(()) => break,
                Err(Error::Io { source, .. })
                    if attempt < DOWNLOAD_ATTEMPTS
                        && source.kind() != io::ErrorKind::PermissionDenied =>
                {
                    tracing::warn!(blob = %digest, attempt, error = %source, "download failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        self.emit(PullEvent::LayerDone {
            digest: digest.to_string(),
        });
        Ok(())
    }

    /// Downloads one blob into a temporary file, verifies its size and
    /// digest, and renames it into place. The temporary file is removed on
    /// failure (and on cancellation); a killed process leaves it for the
    /// next holder of the blob's lock.
    async fn download(&self, remote: &Remote, desc: &Descriptor, digest: &Digest) -> Result<()> {
        let size = desc.size;
        let (file, tmp) = self.store.temp_file(digest)?;
        let guard = TempGuard(Some(tmp.clone()));
        let mut file = tokio::fs::File::from_std(file);
        let mut stream = remote
            .blob(&self.parsed, digest, size, &desc.media_type)
            .await?;
        let write_err = |e: io::Error| Error::io("writing a download", Some(&tmp), e);
        let fault_armed = crate::engine::fault::enabled(Fault::ImagePullMidDownload);
        let mut hasher = Sha256::new();
        let mut done: u64 = 0;
        let mut last_event = Instant::now();
        self.emit(PullEvent::LayerProgress {
            digest: digest.to_string(),
            done: 0,
            total: size,
        });
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| remote.stream_error(digest, e))?;
            done += chunk.len() as u64;
            if done > size {
                return Err(self.invalid(format!(
                    "the registry sent more than the {size} bytes of blob {digest}"
                )));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(write_err)?;
            if last_event.elapsed() >= PROGRESS_INTERVAL {
                last_event = Instant::now();
                self.emit(PullEvent::LayerProgress {
                    digest: digest.to_string(),
                    done,
                    total: size,
                });
            }
            if fault_armed && done < size {
                file.flush().await.map_err(write_err)?;
                crate::engine::fault::point(Fault::ImagePullMidDownload);
            }
        }
        file.flush().await.map_err(write_err)?;
        if done != size {
            return Err(Error::io(
                format!("downloading blob {digest}"),
                None,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the registry sent {done} of {size} bytes"),
                ),
            ));
        }
        let got = Digest::from_hasher(hasher);
        if got != *digest {
            return Err(self.invalid(format!(
                "the registry sent content hashing to {got} for blob {digest}"
            )));
        }
        self.emit(PullEvent::LayerProgress {
            digest: digest.to_string(),
            done,
            total: size,
        });
        let file = file.into_std().await;
        let store = self.store.clone();
        let commit_digest = digest.clone();
        let commit_tmp = tmp.clone();
        tokio::task::spawn_blocking(move || store.commit(file, &commit_tmp, &commit_digest))
            .await
            .map_err(|e| Error::io("storing a blob", None, io::Error::other(e.to_string())))??;
        guard.disarm();
        Ok(())
    }

    /// Records the reference in the image index (written only if changed).
    async fn record(&self, resolved: &Resolved) -> Result<()> {
        let home = self.home.clone();
        let canonical = self.canonical.clone();
        let entry = RefEntry {
            digest: resolved.digest.to_string(),
            index_digest: resolved.index_digest.as_ref().map(Digest::to_string),
            size: resolved.size(),
            pulled_at_ms: now_ms(),
        };
        let from_registry = resolved.from_registry;
        tokio::task::spawn_blocking(move || {
            let digest = entry.digest.clone();
            let current = load_refs(&home)?;
            let same =
                current.images.get(&canonical).is_some_and(|e| {
                    e.digest == entry.digest && e.index_digest == entry.index_digest
                }) && current.resolved.get(&canonical) == Some(&digest);
            if same && !from_registry {
                return Ok(());
            }
            update_refs(&home, |refs| {
                let mut entry = entry;
                if !from_registry {
                    if let Some(old) = refs.images.get(&canonical) {
                        entry.pulled_at_ms = old.pulled_at_ms;
                    }
                }
                refs.images.insert(canonical.clone(), entry);
                refs.resolved.insert(canonical, digest);
                (true, ())
            })
        })
        .await
        .map_err(|e| Error::io("recording an image", None, io::Error::other(e.to_string())))?
    }
}

/// Removes a temporary file unless disarmed.
struct TempGuard(Option<std::path::PathBuf>);

impl TempGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `pull`'s future must be `Send` (SDKs spawn it on multi-threaded runtimes).
#[allow(dead_code)]
fn assert_pull_is_send(home: &Home, opts: &PullOptions) {
    fn is_send<T: Send>(_: T) {}
    is_send(pull(home, "x", opts));
}

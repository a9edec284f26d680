//! OCI image layout directories: index -> manifest -> config + layers,
//! unpacked once into a content-addressed cache.
//!
//! Reading: [`prepare_layout`] (behind [`crate::engine::image::resolve::prepare`] for
//! `oci:PATH[:TAG]` references) selects a manifest by tag, or the only one;
//! descends through image indexes (OCI indexes and Docker manifest lists) to
//! the host platform's manifest; verifies every blob against its descriptor;
//! and unpacks the layers into `images/rootfs/<manifest hex>/` once (see
//! `cache.rs` and `unpack.rs`).
//!
//! Writing: [`LayoutWriter`] and [`write_layout`] create layouts, for tests
//! and for tools that import images.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::cache::RootfsCache;
use super::digest::{BlobDir, BlobError, Digest, VerifyingReader};
use super::spec::{self, ConfigFile, Index, Manifest};
use super::unpack::Unpacker;
use super::{ImageConfig, PreparedImage};
use crate::engine::paths::Home;
use crate::error::{Error, Result};

mod writer;

pub use super::spec::{Descriptor, Platform};
pub use writer::{
    write_layout, LayerCompression, LayerEntry, LayerEntryKind, LayerSpec, LayoutWriter,
    WrittenImage,
};

/// Largest manifest, index, config or `index.json` accepted.
pub(crate) const MAX_JSON: u64 = 4 << 20;
/// Largest `oci-layout` file accepted.
const MAX_LAYOUT_FILE: u64 = 64 << 10;
/// How deep image indexes may nest.
pub(crate) const MAX_INDEX_DEPTH: usize = 4;
/// Most layers one image may have.
const MAX_LAYERS: usize = 512;

/// Unpacks (or reuses) the image selected by `tag` in the layout at `layout`.
pub(super) fn prepare_layout(
    home: &Home,
    reference: &str,
    layout: &Path,
    tag: Option<&str>,
) -> Result<PreparedImage> {
    let span = tracing::debug_span!("prepare_oci_layout", image = reference, tag);
    let _entered = span.enter();
    let layout = Layout::open(reference, layout)?;
    let host = Platform::host();
    let selected = layout.select(tag, &host)?;
    let (digest, manifest) = layout.resolve_manifest(&selected, &host)?;
    let cache = RootfsCache::open(home)?;
    let entry = cache.get_or_build(&digest, |dir| {
        tracing::debug!(digest = %digest, dir = %dir.display(), "unpacking image");
        layout.unpack(&manifest, dir)
    })?;
    // Remembered so `prune` keeps this tree while a sandbox uses it, even if
    // the layout changes or goes away.
    if let Err(e) = super::registry::note_resolved(home, reference, &digest) {
        tracing::warn!(error = %e, "cannot record the image in the image index");
    }
    Ok(PreparedImage {
        reference: reference.to_owned(),
        rootfs: entry.rootfs,
        config: entry.config,
        digest: Some(digest.to_string()),
    })
}

/// The manifest digest the layout at `layout` selects for this host (what
/// [`prepare_layout`] would unpack), without unpacking anything.
pub(crate) fn layout_digest(reference: &str, layout: &Path, tag: Option<&str>) -> Result<Digest> {
    let layout = Layout::open(reference, layout)?;
    let host = Platform::host();
    let selected = layout.select(tag, &host)?;
    Ok(layout.resolve_manifest(&selected, &host)?.0)
}

/// Builds the root filesystem of the image `tag` selects in the layout at
/// `layout` into the empty `dir`, as [`prepare_layout`] does but without
/// the cache and the image index (the fuzz targets' way in).
pub(crate) fn unpack_layout(
    reference: &str,
    layout: &Path,
    tag: Option<&str>,
    dir: &Path,
) -> Result<ImageConfig> {
    let layout = Layout::open(reference, layout)?;
    let host = Platform::host();
    let selected = layout.select(tag, &host)?;
    let (_, manifest) = layout.resolve_manifest(&selected, &host)?;
    layout.unpack(&manifest, dir)
}

/// The manifest the layout at `layout` selects for this host, with the
/// layout's blob directory (for copying its blobs elsewhere).
pub(crate) fn layout_manifest(
    reference: &str,
    layout: &Path,
    tag: Option<&str>,
) -> Result<(Digest, Manifest, BlobDir)> {
    let layout = Layout::open(reference, layout)?;
    let host = Platform::host();
    let selected = layout.select(tag, &host)?;
    let (digest, manifest) = layout.resolve_manifest(&selected, &host)?;
    Ok((digest, manifest, layout.blobs))
}

/// An opened image layout directory.
struct Layout<'a> {
    image: &'a str,
    dir: PathBuf,
    blobs: BlobDir,
}

impl<'a> Layout<'a> {
    fn open(image: &'a str, dir: &Path) -> Result<Layout<'a>> {
        let layout = Layout {
            image,
            dir: dir.to_path_buf(),
            blobs: BlobDir::new(dir.join("blobs")),
        };
        let data = layout.read_file("oci-layout", MAX_LAYOUT_FILE)?;
        let file: spec::LayoutFile = serde_json::from_slice(&data).map_err(|e| {
            layout.invalid(format!("{}/oci-layout is not valid: {e}", dir.display()))
        })?;
        if file.image_layout_version != "1.0.0" {
            return Err(layout.invalid(format!(
                "unsupported imageLayoutVersion {:?} (only 1.0.0)",
                file.image_layout_version
            )));
        }
        Ok(layout)
    }

    fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::InvalidImage {
            image: self.image.to_owned(),
            reason: reason.into(),
        }
    }

    fn blob_err(&self, e: BlobError) -> Error {
        match e {
            BlobError::Invalid(reason) => self.invalid(reason),
            BlobError::Io(path, source) => Error::io("reading an image blob", Some(&path), source),
        }
    }

    /// Reads a small file at the top of the layout.
    fn read_file(&self, name: &str, limit: u64) -> Result<Vec<u8>> {
        let path = self.dir.join(name);
        let file = std::fs::File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => self.invalid(format!(
                "{} is not an OCI image layout: {name} is missing",
                self.dir.display()
            )),
            _ => Error::io("reading an OCI image layout", Some(&path), e),
        })?;
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, limit + 1), &mut data)
            .map_err(|e| Error::io("reading an OCI image layout", Some(&path), e))?;
        if data.len() as u64 > limit {
            return Err(self.invalid(format!("{name} is larger than {limit} bytes")));
        }
        Ok(data)
    }

    /// The `index.json` entry named by `tag`, or the only entry. Several
    /// entries that all name a platform (a layout listing one image per
    /// platform) are narrowed down to `platform`'s.
    fn select(&self, tag: Option<&str>, platform: &Platform) -> Result<Descriptor> {
        let data = self.read_file("index.json", MAX_JSON)?;
        let index: Index = serde_json::from_slice(&data)
            .map_err(|e| self.invalid(format!("index.json is not a valid image index: {e}")))?;
        let tags = || {
            let names: BTreeSet<&str> = index
                .manifests
                .iter()
                .filter_map(|d| d.annotations.get(spec::REF_NAME).map(String::as_str))
                .collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.into_iter().collect::<Vec<_>>().join(", ")
            }
        };
        let candidates: Vec<Descriptor> = match tag {
            None => index.manifests.clone(),
            Some(tag) => {
                let named = |key: &str| -> Vec<Descriptor> {
                    index
                        .manifests
                        .iter()
                        .filter(|d| d.annotations.get(key).is_some_and(|v| v == tag))
                        .cloned()
                        .collect()
                };
                let mut found = named(spec::REF_NAME);
                if found.is_empty() {
                    found = named(spec::CONTAINERD_NAME);
                }
                if found.is_empty() {
                    return Err(
                        self.invalid(format!("no manifest tagged {tag:?} (tags: {})", tags()))
                    );
                }
                found
            }
        };
        let ambiguous = |n: usize| match tag {
            Some(tag) => self.invalid(format!("tag {tag:?} names {n} different manifests")),
            None => self.invalid(format!(
                "the layout holds {n} manifests; select one with oci:PATH:TAG (tags: {})",
                tags()
            )),
        };
        let digests: BTreeSet<&str> = candidates.iter().map(|d| d.digest.as_str()).collect();
        match (candidates.first(), digests.len()) {
            (None, _) => Err(self.invalid("index.json lists no manifests")),
            (Some(only), 1) => Ok(only.clone()),
            (Some(_), n) if candidates.iter().all(|d| d.platform.is_some()) => {
                let picked = select_platform(&candidates, platform).ok_or_else(|| {
                    self.invalid(format!(
                        "none of the {n} manifests in index.json is for {platform}"
                    ))
                })?;
                // Only a choice between platforms; two images for the same
                // platform still need a tag.
                if candidates
                    .iter()
                    .any(|d| d.platform == picked.platform && d.digest != picked.digest)
                {
                    return Err(ambiguous(n));
                }
                Ok(picked.clone())
            }
            (Some(_), n) => Err(ambiguous(n)),
        }
    }

    /// Follows `desc` through image indexes to one image manifest for
    /// `platform`.
    fn resolve_manifest(
        &self,
        desc: &Descriptor,
        platform: &Platform,
    ) -> Result<(Digest, Manifest)> {
        let mut desc = desc.clone();
        for _ in 0..=MAX_INDEX_DEPTH {
            let digest =
                Digest::parse(&desc.digest).map_err(|r| self.invalid(format!("manifest: {r}")))?;
            let data = self
                .blobs
                .read(&digest, desc.size, MAX_JSON)
                .map_err(|e| self.blob_err(e))?;
            match parse_manifest(&desc.media_type, &digest, &data).map_err(|r| self.invalid(r))? {
                Parsed::Index(index) => {
                    desc = select_platform(&index.manifests, platform)
                        .ok_or_else(|| self.invalid(no_platform(&digest, &index, platform)))?
                        .clone();
                }
                Parsed::Manifest(manifest) => return Ok((digest, manifest)),
            }
        }
        Err(self.invalid(format!("image indexes nest deeper than {MAX_INDEX_DEPTH}")))
    }

    /// Builds the root filesystem of `manifest` into the empty `dir`.
    fn unpack(&self, manifest: &Manifest, dir: &Path) -> Result<ImageConfig> {
        unpack_manifest(self.image, &self.blobs, manifest, dir, false)
    }
}

/// The reason an index offers nothing for `platform`.
pub(crate) fn no_platform(digest: &Digest, index: &Index, platform: &Platform) -> String {
    let available: Vec<String> = index
        .manifests
        .iter()
        .map(|d| {
            d.platform
                .as_ref()
                .map_or_else(|| "unknown".to_owned(), Platform::to_string)
        })
        .collect();
    format!(
        "image index {digest} has no manifest for {platform} (it has: {})",
        available.join(", ")
    )
}

/// A parsed manifest-or-index blob.
pub(crate) enum Parsed {
    /// An OCI image index or Docker manifest list.
    Index(Index),
    /// An OCI or Docker schema2 image manifest.
    Manifest(Manifest),
}

/// Parses a manifest or index blob (already verified against `digest`)
/// that a descriptor or registry declared as `declared` (may be empty).
pub(crate) fn parse_manifest(
    declared: &str,
    digest: &Digest,
    data: &[u8],
) -> std::result::Result<Parsed, String> {
    let value: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| format!("manifest {digest} is not JSON: {e}"))?;
    let inner = value
        .get("mediaType")
        .and_then(|m| m.as_str())
        .map(str::to_owned);
    if !declared.is_empty() && inner.as_deref().is_some_and(|i| i != declared) {
        return Err(format!(
            "{digest}: descriptor says {declared:?} but the content says {:?}",
            inner.unwrap_or_default()
        ));
    }
    match kind_of(declared, inner.as_deref(), &value) {
        Kind::Index => {
            let index: Index = serde_json::from_value(value)
                .map_err(|e| format!("image index {digest} is not valid: {e}"))?;
            Ok(Parsed::Index(index))
        }
        Kind::Manifest => {
            let manifest: Manifest = serde_json::from_value(value)
                .map_err(|e| format!("image manifest {digest} is not valid: {e}"))?;
            if manifest.schema_version != 2 {
                return Err(format!(
                    "image manifest {digest} has schemaVersion {} (only 2)",
                    manifest.schema_version
                ));
            }
            if manifest.layers.len() > MAX_LAYERS {
                return Err(format!(
                    "image manifest {digest} has more than {MAX_LAYERS} layers"
                ));
            }
            Ok(Parsed::Manifest(manifest))
        }
        Kind::Other(m) => Err(format!("{digest} has unsupported media type {m:?}")),
    }
}

/// Builds the root filesystem of `manifest`, whose config and layer blobs
/// are in `blobs`, into the empty `dir`, and returns the image defaults.
/// Every blob is verified against its descriptor: before use, or, when the
/// caller has just verified them (`preverified`), while it is read (a
/// mismatch then fails the build, whose directory the cache discards).
pub(crate) fn unpack_manifest(
    image: &str,
    blobs: &BlobDir,
    manifest: &Manifest,
    dir: &Path,
    preverified: bool,
) -> Result<ImageConfig> {
    let invalid = |reason: String| Error::InvalidImage {
        image: image.to_owned(),
        reason,
    };
    let blob_err = |e: BlobError| match e {
        BlobError::Invalid(reason) => invalid(reason),
        BlobError::Io(path, source) => Error::io("reading an image blob", Some(&path), source),
    };
    let cfg = &manifest.config;
    if !cfg.media_type.is_empty()
        && cfg.media_type != spec::OCI_CONFIG
        && cfg.media_type != spec::DOCKER_CONFIG
    {
        return Err(invalid(format!(
            "not a container image: its config has media type {:?}",
            cfg.media_type
        )));
    }
    let cfg_digest =
        Digest::parse(&cfg.digest).map_err(|r| invalid(format!("image config: {r}")))?;
    let data = blobs
        .read(&cfg_digest, cfg.size, MAX_JSON)
        .map_err(blob_err)?;
    let config: ConfigFile = serde_json::from_slice(&data)
        .map_err(|e| invalid(format!("image config {cfg_digest} is not valid: {e}")))?;
    let diff_ids = config
        .rootfs
        .as_ref()
        .map(|r| {
            r.diff_ids
                .iter()
                .map(|d| Digest::parse(d))
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .transpose()
        .map_err(|r| invalid(format!("image config diff_ids: {r}")))?
        .unwrap_or_default();
    if !diff_ids.is_empty() && diff_ids.len() != manifest.layers.len() {
        return Err(invalid(format!(
            "the manifest has {} layers but the config lists {} diff_ids",
            manifest.layers.len(),
            diff_ids.len()
        )));
    }

    let mut unpacker = Unpacker::new(dir);
    for (i, layer) in manifest.layers.iter().enumerate() {
        let what = format!("layer {} of {}", i + 1, manifest.layers.len());
        let digest = Digest::parse(&layer.digest).map_err(|r| invalid(format!("{what}: {r}")))?;
        if !spec::is_layer_media_type(&layer.media_type) {
            return Err(invalid(format!(
                "{what} ({digest}) has unsupported media type {:?}",
                layer.media_type
            )));
        }
        let what = format!("{what} ({digest})");
        let mut blob = if preverified {
            let path = blobs.path(&digest);
            let file = std::fs::File::open(&path)
                .map_err(|e| Error::io("reading an image blob", Some(&path), e))?;
            VerifyingReader::new(file, digest.clone(), layer.size)
        } else {
            blobs.open_verified(&digest, layer.size).map_err(blob_err)?
        };
        let diff_id = unpacker
            .apply_layer(&mut blob, &layer.media_type)
            .map_err(|e| e.into_error(image, &what))?;
        blob.finish().map_err(|e| invalid(format!("{what}: {e}")))?;
        if let Some(expected) = diff_ids.get(i) {
            if *expected != diff_id {
                return Err(invalid(format!(
                    "{what}: uncompressed content hashes to {diff_id}, the config says {expected}"
                )));
            }
        }
    }
    unpacker
        .finish()
        .map_err(|e| e.into_error(image, "finishing the root filesystem"))?;
    Ok(config
        .config
        .map(|c| c.to_image_config())
        .unwrap_or_default())
}

enum Kind {
    Index,
    Manifest,
    Other(String),
}

fn kind_of(declared: &str, inner: Option<&str>, value: &serde_json::Value) -> Kind {
    let media_type = if declared.is_empty() {
        inner.unwrap_or_default()
    } else {
        declared
    };
    match media_type {
        spec::OCI_INDEX | spec::DOCKER_LIST => Kind::Index,
        spec::OCI_MANIFEST | spec::DOCKER_MANIFEST => Kind::Manifest,
        // No media type anywhere (allowed by OCI): go by shape.
        "" if value.get("manifests").is_some() => Kind::Index,
        "" if value.get("layers").is_some() => Kind::Manifest,
        other => Kind::Other(other.to_owned()),
    }
}

/// The index entry to use on `want`: an exact platform match, else
/// `linux/amd64`, else the only entry if it names no platform.
pub(crate) fn select_platform<'d>(
    manifests: &'d [Descriptor],
    want: &Platform,
) -> Option<&'d Descriptor> {
    let matching = |p: &Platform| {
        manifests
            .iter()
            .find(|d| d.platform.as_ref().is_some_and(|dp| dp.satisfies(p)))
    };
    matching(want)
        .or_else(|| matching(&Platform::linux_amd64()))
        .or_else(|| match manifests {
            [only] if only.platform.is_none() => Some(only),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, variant: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: spec::OCI_MANIFEST.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            annotations: Default::default(),
        }
    }

    #[test]
    fn platform_selection() {
        let list = [
            desc("arm64", Some("v8")),
            desc("amd64", None),
            desc("s390x", None),
        ];
        let pick = |want: Platform| {
            select_platform(&list, &want)
                .and_then(|d| d.platform.clone())
                .map(|p| p.architecture)
        };
        assert_eq!(pick(Platform::linux_amd64()).as_deref(), Some("amd64"));
        assert_eq!(pick(Platform::linux_arm64()).as_deref(), Some("arm64"));
        let riscv = Platform {
            architecture: "riscv64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(pick(riscv.clone()).as_deref(), Some("amd64"));
        assert!(select_platform(&list[..1], &riscv).is_none());
    }
}

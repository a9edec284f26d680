//! The image code's entry points for the fuzz targets (`fuzz/` at the top
//! of the repository), re-exported by [`crate::internal::fuzz`]: the
//! manifest and index parser, the layer unpacker and the layout reader,
//! without a home, a cache or a registry.

use std::path::Path;

use super::digest::Digest;
use super::oci::{self, Parsed, Platform};
use super::unpack::Unpacker;
use super::ImageConfig;
use crate::error::Result;

/// A manifest or index blob as [`parse_manifest`] read it, encoded again
/// as JSON (only what burrow reads of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedManifest {
    /// An OCI image index or a Docker manifest list.
    Index(Vec<u8>),
    /// An OCI or Docker schema2 image manifest.
    Manifest(Vec<u8>),
}

/// Parses a manifest or index blob whose descriptor (or registry) declared
/// it as `declared` (may be empty), and goes on as a pull does: an index
/// is searched for the host's platform, a manifest's digests are parsed.
pub fn parse_manifest(declared: &str, data: &[u8]) -> std::result::Result<ParsedManifest, String> {
    let digest = Digest::of(data);
    let encoded = |r: serde_json::Result<Vec<u8>>| r.map_err(|e| e.to_string());
    match oci::parse_manifest(declared, &digest, data)? {
        Parsed::Index(index) => {
            let host = Platform::host();
            match oci::select_platform(&index.manifests, &host) {
                Some(d) => {
                    let _ = Digest::parse(&d.digest);
                }
                None => {
                    let _ = oci::no_platform(&digest, &index, &host);
                }
            }
            Ok(ParsedManifest::Index(encoded(serde_json::to_vec(&index))?))
        }
        Parsed::Manifest(manifest) => {
            for d in std::iter::once(&manifest.config).chain(&manifest.layers) {
                let _ = Digest::parse(&d.digest);
            }
            Ok(ParsedManifest::Manifest(encoded(serde_json::to_vec(
                &manifest,
            ))?))
        }
    }
}

/// Applies `layers` (tar streams, compressed or not) in order onto the
/// empty directory `root`, then sets the directory modes, as an image
/// build does. Returns the diff id of each layer.
pub fn unpack_layers(root: &Path, layers: &[&[u8]]) -> Result<Vec<String>> {
    let mut unpacker = Unpacker::new(root);
    let mut diff_ids = Vec::with_capacity(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        let what = format!("layer {} of {}", i + 1, layers.len());
        let diff_id = unpacker
            .apply_layer(*layer, "")
            .map_err(|e| e.into_error("fuzz", &what))?;
        diff_ids.push(diff_id.to_string());
    }
    unpacker
        .finish()
        .map_err(|e| e.into_error("fuzz", "finishing the root filesystem"))?;
    Ok(diff_ids)
}

/// Builds the root filesystem of the image `tag` selects (or the only
/// one) in the OCI layout at `layout` into the empty directory `root`.
pub fn unpack_layout(layout: &Path, tag: Option<&str>, root: &Path) -> Result<ImageConfig> {
    oci::unpack_layout("fuzz", layout, tag, root)
}

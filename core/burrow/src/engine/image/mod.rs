//! Image resolution: turn an image reference into a root filesystem on disk
//! plus the image's default process settings.
//!
//! Sources: a plain rootfs directory, an OCI image layout directory
//! (`oci:PATH[:TAG]`, or a directory containing `oci-layout`), names
//! imported under `$BURROW_HOME/images/named/<name>`, snapshots
//! (`snapshot:NAME`, images of the store recorded by name), and registry
//! references (`python`, `registry.example.com:5000/org/tool:1.2`,
//! `name@sha256:...`), which a start pulls with the default
//! [`PullOptions`] (pull if missing).
//!
//! Public: the types of the local backend's image store, which
//! [`LocalBackend::pull_image`](crate::LocalBackend::pull_image),
//! `list_images`, `remove_image` and `prune_images` manage. Resolution,
//! unpacking, OCI layouts and disk images are the engine's own.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod cache;
pub(crate) mod digest;
pub(crate) mod ext4;
pub(crate) mod fuzz;
pub(crate) mod oci;
pub(crate) mod registry;
pub(crate) mod resolve;
pub(crate) mod snapshot;
mod spec;
mod unpack;

pub(crate) use registry::{list_images, prune, pull, remove_image};
pub use registry::{
    ImageReference, ImageSummary, PruneReport, PullEvent, PullOptions, PullPolicy, PullProgress,
    PushReport, INSECURE_REGISTRIES_ENV, REGISTRIES_FILE,
};
pub(crate) use resolve::{normalize_reference, parse_reference, prepare_under};

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// A directory that already is a root filesystem (used in place, read-only).
    RootfsDir(PathBuf),
    /// An OCI image layout directory and an optional tag
    /// (`org.opencontainers.image.ref.name`); without a tag the layout must
    /// hold exactly one manifest.
    OciLayout {
        /// Layout directory.
        path: PathBuf,
        /// Tag to select.
        tag: Option<String>,
    },
    /// A registry reference, as given (see [`ImageReference`] for its
    /// canonical form).
    Registry(String),
    /// A stored snapshot (`snapshot:NAME`), by name.
    Snapshot(String),
}

/// Defaults taken from the image configuration; explicit sandbox options win.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// Entrypoint.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// Command.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// Working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// User (`uid[:gid]` or name).
    #[serde(default)]
    pub user: Option<String>,
}

/// An image ready to be used as a sandbox's read-only lower layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedImage {
    /// The reference as given.
    pub reference: String,
    /// Read-only root filesystem directory.
    pub rootfs: PathBuf,
    /// Image defaults.
    pub config: ImageConfig,
    /// Content digest of the manifest, for OCI images.
    pub digest: Option<String>,
}

//! A small OCI image layout writer: blobs, layers from in-memory entries or
//! a directory, configs, manifests, indexes and `index.json`.
//!
//! In-memory entries are written verbatim (paths and link targets are not
//! normalised or checked), so tests can also build the hostile layers the
//! reader must refuse.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Descriptor, Platform};
use crate::engine::image::digest::{write_blob, BlobDir, Digest};
use crate::engine::image::spec::{self, ConfigFile, Index, Manifest, RootFs, RunConfig};
use crate::engine::image::ImageConfig;
use crate::error::{Error, Result};

/// How the writer compresses a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayerCompression {
    /// Plain tar.
    None,
    /// gzip (the default).
    #[default]
    Gzip,
    /// zstd.
    Zstd,
}

/// What a [`LayerEntry`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerEntryKind {
    /// A directory.
    Dir,
    /// A regular file with this content.
    File(Vec<u8>),
    /// A symlink to this target.
    Symlink(String),
    /// A hard link to this earlier entry.
    HardLink(String),
    /// A fifo.
    Fifo,
    /// A character device.
    CharDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
}

/// One tar entry of an in-memory layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerEntry {
    /// Path inside the layer, written verbatim.
    pub path: String,
    /// What it is.
    pub kind: LayerEntryKind,
    /// Permission bits (including setuid/setgid/sticky).
    pub mode: u32,
    /// Owner uid.
    pub uid: u64,
    /// Owner gid.
    pub gid: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

impl LayerEntry {
    fn new(path: impl Into<String>, kind: LayerEntryKind, mode: u32) -> LayerEntry {
        LayerEntry {
            path: path.into(),
            kind,
            mode,
            uid: 0,
            gid: 0,
            mtime: 1_700_000_000,
        }
    }

    /// A directory (0755).
    pub fn dir(path: impl Into<String>) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::Dir, 0o755)
    }

    /// A regular file (0644).
    pub fn file(path: impl Into<String>, data: impl Into<Vec<u8>>) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::File(data.into()), 0o644)
    }

    /// A symlink.
    pub fn symlink(path: impl Into<String>, target: impl Into<String>) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::Symlink(target.into()), 0o777)
    }

    /// A hard link to an earlier entry.
    pub fn hard_link(path: impl Into<String>, target: impl Into<String>) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::HardLink(target.into()), 0o644)
    }

    /// A fifo.
    pub fn fifo(path: impl Into<String>) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::Fifo, 0o644)
    }

    /// A character device.
    pub fn char_device(path: impl Into<String>, major: u32, minor: u32) -> LayerEntry {
        LayerEntry::new(path, LayerEntryKind::CharDevice { major, minor }, 0o666)
    }

    /// A whiteout deleting `path` from lower layers (`dir/.wh.name`).
    pub fn whiteout(path: &str) -> LayerEntry {
        let path = path.trim_end_matches('/');
        let (dir, name) = match path.rsplit_once('/') {
            Some((d, n)) => (format!("{d}/"), n),
            None => (String::new(), path),
        };
        LayerEntry::file(format!("{dir}.wh.{name}"), Vec::new())
    }

    /// An opaque marker hiding everything lower layers put in `dir`.
    pub fn opaque(dir: &str) -> LayerEntry {
        let dir = dir.trim_end_matches('/');
        let path = if dir.is_empty() {
            ".wh..wh..opq".to_owned()
        } else {
            format!("{dir}/.wh..wh..opq")
        };
        LayerEntry::file(path, Vec::new())
    }

    /// With these permission bits.
    pub fn mode(mut self, mode: u32) -> LayerEntry {
        self.mode = mode;
        self
    }

    /// With this owner.
    pub fn owner(mut self, uid: u64, gid: u64) -> LayerEntry {
        self.uid = uid;
        self.gid = gid;
        self
    }

    /// With this modification time.
    pub fn mtime(mut self, secs: u64) -> LayerEntry {
        self.mtime = secs;
        self
    }
}

#[derive(Debug, Clone)]
enum LayerContent {
    Entries(Vec<LayerEntry>),
    Dir(PathBuf),
}

/// A layer to write: in-memory entries or a directory tree, compressed.
#[derive(Debug, Clone)]
pub struct LayerSpec {
    content: LayerContent,
    compression: LayerCompression,
}

impl LayerSpec {
    /// A layer of these entries, in this order.
    pub fn entries(entries: impl IntoIterator<Item = LayerEntry>) -> LayerSpec {
        LayerSpec {
            content: LayerContent::Entries(entries.into_iter().collect()),
            compression: LayerCompression::default(),
        }
    }

    /// A layer holding the tree under `dir` (modes, owners and times kept;
    /// symlinks stored as symlinks).
    pub fn dir(dir: impl Into<PathBuf>) -> LayerSpec {
        LayerSpec {
            content: LayerContent::Dir(dir.into()),
            compression: LayerCompression::default(),
        }
    }

    /// With this compression.
    pub fn compression(mut self, compression: LayerCompression) -> LayerSpec {
        self.compression = compression;
        self
    }

    /// The uncompressed tar stream.
    fn tar(&self) -> std::io::Result<Vec<u8>> {
        let mut builder = tar::Builder::new(Vec::new());
        match &self.content {
            LayerContent::Dir(dir) => {
                builder.follow_symlinks(false);
                builder.mode(tar::HeaderMode::Complete);
                builder.append_dir_all("", dir)?;
            }
            LayerContent::Entries(entries) => {
                for e in entries {
                    append_entry(&mut builder, e)?;
                }
            }
        }
        builder.into_inner()
    }
}

fn append_entry(builder: &mut tar::Builder<Vec<u8>>, e: &LayerEntry) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    let (kind, data, link): (tar::EntryType, &[u8], Option<&str>) = match &e.kind {
        LayerEntryKind::Dir => (tar::EntryType::Directory, &[], None),
        LayerEntryKind::File(d) => (tar::EntryType::Regular, d, None),
        LayerEntryKind::Symlink(t) => (tar::EntryType::Symlink, &[], Some(t)),
        LayerEntryKind::HardLink(t) => (tar::EntryType::Link, &[], Some(t)),
        LayerEntryKind::Fifo => (tar::EntryType::Fifo, &[], None),
        LayerEntryKind::CharDevice { major, minor } => {
            h.set_device_major(*major)?;
            h.set_device_minor(*minor)?;
            (tar::EntryType::Char, &[], None)
        }
    };
    h.set_entry_type(kind);
    h.set_mode(e.mode);
    h.set_uid(e.uid);
    h.set_gid(e.gid);
    h.set_mtime(e.mtime);
    h.set_size(data.len() as u64);
    let link_len = link.map(str::len).unwrap_or(0);
    let raw_fits = e.path.len() <= 100 && link_len <= 100;
    if raw_fits {
        // Verbatim, unlike set_path, which refuses `..` and absolute paths.
        let old = h.as_old_mut();
        old.name[..e.path.len()].copy_from_slice(e.path.as_bytes());
        if let Some(l) = link {
            old.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        builder.append(&h, data)
    } else if let Some(l) = link {
        builder.append_link(&mut h, &e.path, l)
    } else {
        builder.append_data(&mut h, &e.path, data)
    }
}

fn compress(tar: &[u8], c: LayerCompression) -> std::io::Result<Vec<u8>> {
    match c {
        LayerCompression::None => Ok(tar.to_vec()),
        LayerCompression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(tar)?;
            enc.finish()
        }
        LayerCompression::Zstd => zstd::stream::encode_all(tar, 3),
    }
}

/// The blobs written for one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenImage {
    /// The image manifest (with its platform).
    pub manifest: Descriptor,
    /// The image config.
    pub config: Descriptor,
    /// The layers, bottom first.
    pub layers: Vec<Descriptor>,
}

/// Writes an OCI image layout directory. Blobs are written as they are
/// added; `index.json` by [`LayoutWriter::finish`].
#[derive(Debug)]
pub struct LayoutWriter {
    dir: PathBuf,
    blobs: BlobDir,
    index: Vec<Descriptor>,
    docker: bool,
}

impl LayoutWriter {
    /// Creates (or adds to) the layout at `dir`, writing `oci-layout`.
    pub fn create(dir: impl Into<PathBuf>) -> Result<LayoutWriter> {
        let dir = dir.into();
        let blobs = dir.join("blobs");
        std::fs::create_dir_all(blobs.join("sha256"))
            .map_err(|e| Error::io("creating an image layout", Some(&dir), e))?;
        let layout = serde_json::to_vec(&spec::LayoutFile {
            image_layout_version: "1.0.0".into(),
        })
        .map_err(json_err)?;
        let path = dir.join("oci-layout");
        std::fs::write(&path, layout)
            .map_err(|e| Error::io("writing an image layout", Some(&path), e))?;
        Ok(LayoutWriter {
            dir,
            blobs: BlobDir::new(blobs),
            index: Vec::new(),
            docker: false,
        })
    }

    /// Use Docker schema2 media types for manifests, configs, layers and
    /// indexes written from now on (default: OCI).
    pub fn docker_media_types(mut self, docker: bool) -> LayoutWriter {
        self.docker = docker;
        self
    }

    /// The layout directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file holding the blob with this digest.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        let d = Digest::parse(digest).map_err(|reason| Error::InvalidArgument {
            argument: "digest".into(),
            reason,
        })?;
        Ok(self.blobs.path(&d))
    }

    /// Writes one blob.
    pub fn write_blob(&self, media_type: &str, data: &[u8]) -> Result<Descriptor> {
        let digest = write_blob(&self.blobs, data)
            .map_err(|e| Error::io("writing a blob", Some(&self.dir), e))?;
        Ok(Descriptor {
            media_type: media_type.to_owned(),
            digest: digest.to_string(),
            size: data.len() as u64,
            platform: None,
            annotations: Default::default(),
        })
    }

    /// Writes the layers, config and manifest of one image for `platform`.
    /// The image is not listed in `index.json` until [`LayoutWriter::add`].
    pub fn write_image(
        &self,
        layers: &[LayerSpec],
        config: &ImageConfig,
        platform: &Platform,
    ) -> Result<WrittenImage> {
        let mut layer_descs = Vec::with_capacity(layers.len());
        let mut diff_ids = Vec::with_capacity(layers.len());
        for layer in layers {
            let tar = layer
                .tar()
                .map_err(|e| Error::io("building a layer", Some(&self.dir), e))?;
            diff_ids.push(Digest::of(&tar).to_string());
            let blob = compress(&tar, layer.compression)
                .map_err(|e| Error::io("compressing a layer", Some(&self.dir), e))?;
            let media_type = match (layer.compression, self.docker) {
                (LayerCompression::None, false) => spec::OCI_LAYER_TAR,
                (LayerCompression::Gzip, false) => spec::OCI_LAYER_GZIP,
                (LayerCompression::None, true) => "application/vnd.docker.image.rootfs.diff.tar",
                (LayerCompression::Gzip, true) => spec::DOCKER_LAYER_GZIP,
                (LayerCompression::Zstd, _) => spec::OCI_LAYER_ZSTD,
            };
            layer_descs.push(self.write_blob(media_type, &blob)?);
        }
        let config_file = ConfigFile {
            architecture: platform.architecture.clone(),
            os: platform.os.clone(),
            config: Some(RunConfig::from_image_config(config)),
            rootfs: Some(RootFs {
                kind: "layers".into(),
                diff_ids,
            }),
        };
        let config_json = serde_json::to_vec(&config_file).map_err(json_err)?;
        let config_desc = self.write_blob(
            if self.docker {
                spec::DOCKER_CONFIG
            } else {
                spec::OCI_CONFIG
            },
            &config_json,
        )?;
        let manifest_type = if self.docker {
            spec::DOCKER_MANIFEST
        } else {
            spec::OCI_MANIFEST
        };
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(manifest_type.into()),
            config: config_desc.clone(),
            layers: layer_descs.clone(),
        };
        let mut manifest_desc = self.write_blob(
            manifest_type,
            &serde_json::to_vec(&manifest).map_err(json_err)?,
        )?;
        manifest_desc.platform = Some(platform.clone());
        Ok(WrittenImage {
            manifest: manifest_desc,
            config: config_desc,
            layers: layer_descs,
        })
    }

    /// Writes an image index listing `manifests` (with their platforms).
    pub fn write_index(&self, manifests: &[Descriptor]) -> Result<Descriptor> {
        let media_type = if self.docker {
            spec::DOCKER_LIST
        } else {
            spec::OCI_INDEX
        };
        let index = Index {
            schema_version: 2,
            media_type: Some(media_type.into()),
            manifests: manifests.to_vec(),
        };
        self.write_blob(media_type, &serde_json::to_vec(&index).map_err(json_err)?)
    }

    /// Lists a manifest or index in `index.json`, tagged if `tag` is given.
    pub fn add(&mut self, desc: &Descriptor, tag: Option<&str>) {
        let mut desc = desc.clone();
        if let Some(tag) = tag {
            desc.annotations.insert(spec::REF_NAME.into(), tag.into());
        }
        self.index.push(desc);
    }

    /// Writes `index.json` (again, if called more than once).
    pub fn finish(&self) -> Result<()> {
        let index = Index {
            schema_version: 2,
            media_type: Some(spec::OCI_INDEX.into()),
            manifests: self.index.clone(),
        };
        let path = self.dir.join("index.json");
        let data = serde_json::to_vec_pretty(&index).map_err(json_err)?;
        let tmp = self.dir.join("index.json.tmp");
        std::fs::write(&tmp, data)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| Error::io("writing index.json", Some(&path), e))
    }
}

fn json_err(e: serde_json::Error) -> Error {
    Error::io("encoding image metadata", None, e.into())
}

/// Writes a layout at `dir` holding one image for the host platform, listed
/// in `index.json` (tagged if `tag` is given), with gzip layers.
pub fn write_layout(
    dir: impl Into<PathBuf>,
    layers: &[LayerSpec],
    config: &ImageConfig,
    tag: Option<&str>,
) -> Result<WrittenImage> {
    let mut w = LayoutWriter::create(dir)?;
    let image = w.write_image(layers, config, &Platform::host())?;
    w.add(&image.manifest, tag);
    w.finish()?;
    Ok(image)
}

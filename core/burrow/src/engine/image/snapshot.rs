//! Snapshot images: a sandbox's writable layer on top of its image's
//! layers, kept in the image store as an ordinary OCI image (manifest,
//! configuration and layers by digest), so that it is unpacked, cached,
//! pruned and pushed like any pulled image.
//!
//! The base comes into the store first: a pulled image is there already;
//! an OCI layout's blobs are copied in (verified); a plain root filesystem
//! directory becomes one layer of its own. The new layer is an uncompressed
//! tar, so its digest is also its diff id.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::Path;

use serde_json::{json, Value};

use super::cache::RootfsCache;
use super::digest::{BlobDir, Digest, HashingReader, HashingWriter};
use super::oci::{self, MAX_JSON};
use super::registry::store::{BlobState, BlobStore};
use super::spec::{Descriptor, Manifest, Platform};
use super::{parse_reference, pull, ImageSource, PreparedImage, PullOptions};
use crate::engine::paths::Home;
use crate::engine::snapshot::layer::{self, Owners};
use crate::error::{Error, Result};

/// The media type of the layers snapshots write.
pub(crate) const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// An image whose blobs are all in the store.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    pub(crate) layers: Vec<Descriptor>,
    /// The image configuration, whole (fields burrow does not read are kept).
    pub(crate) config: Value,
}

fn invalid(image: &str, reason: impl Into<String>) -> Error {
    Error::InvalidImage {
        image: image.to_owned(),
        reason: reason.into(),
    }
}

/// Reads an image of the store by its manifest digest.
pub(crate) fn stored(home: &Home, reference: &str, digest: &str) -> Result<(Digest, Manifest)> {
    let store = BlobStore::open(home)?;
    let digest = Digest::parse(digest).map_err(|r| invalid(reference, r))?;
    let data = store.read_unsized(&digest, MAX_JSON)?.ok_or_else(|| {
        invalid(
            reference,
            format!("its manifest {digest} is not in the image store"),
        )
    })?;
    match oci::parse_manifest("", &digest, &data) {
        Ok(oci::Parsed::Manifest(m)) => Ok((digest, m)),
        Ok(oci::Parsed::Index(_)) => Err(invalid(reference, format!("{digest} is an index"))),
        Err(reason) => Err(invalid(reference, reason)),
    }
}

fn read_config(home: &Home, reference: &str, manifest: &Manifest) -> Result<Value> {
    let store = BlobStore::open(home)?;
    let digest = Digest::parse(&manifest.config.digest).map_err(|r| invalid(reference, r))?;
    let data = store
        .blob_dir()
        .read(&digest, manifest.config.size, MAX_JSON)
        .map_err(|e| invalid(reference, format!("its configuration: {e}")))?;
    serde_json::from_slice(&data).map_err(|e| invalid(reference, format!("its configuration: {e}")))
}

/// The base of a snapshot of a sandbox whose image is `reference`; for a
/// sandbox of a snapshot, `stored_digest` is that snapshot's manifest.
/// `scratch` is a directory for temporary files on the store's filesystem.
pub(crate) async fn base(
    home: &Home,
    reference: &str,
    stored_digest: Option<&str>,
    scratch: &Path,
) -> Result<Base> {
    if let Some(d) = stored_digest {
        let (_, manifest) = stored(home, reference, d)?;
        let config = read_config(home, reference, &manifest)?;
        return Ok(Base {
            layers: manifest.layers,
            config,
        });
    }
    match parse_reference(home, reference)? {
        ImageSource::Registry(_) => {
            // Pulled at the sandbox's first start (or by `pull`): a snapshot
            // never reaches out to a registry.
            let never = PullOptions {
                policy: super::PullPolicy::Never,
                ..PullOptions::default()
            };
            let prepared = pull(home, reference, &never).await?;
            let digest = prepared
                .digest
                .ok_or_else(|| invalid(reference, "pulled without a digest"))?;
            let (_, manifest) = stored(home, reference, &digest)?;
            let config = read_config(home, reference, &manifest)?;
            Ok(Base {
                layers: manifest.layers,
                config,
            })
        }
        ImageSource::OciLayout { path, tag } => {
            let (home, reference, scratch) =
                (home.clone(), reference.to_owned(), scratch.to_owned());
            blocking("preparing a snapshot image", move || {
                import_layout(&home, &reference, &path, tag.as_deref(), &scratch)
            })
            .await
        }
        ImageSource::Snapshot(name) => Err(invalid(
            reference,
            format!("snapshot {name:?} was not looked up"),
        )),
        ImageSource::RootfsDir(dir) => {
            let (home, scratch) = (home.clone(), scratch.to_owned());
            blocking("preparing a snapshot image", move || {
                let tmp = scratch.join(format!("{}-base-{:016x}.tar", std::process::id(), rand::random::<u64>()));
                let written = write_file_hashed(&tmp, |out| {
                    layer::write_layer(&dir, Owners { shift: 0 }, out).map(drop)
                });
                let (digest, size) = match written {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = fs::remove_file(&tmp);
                        return Err(Error::io("writing the image directory as a layer", Some(&dir), e));
                    }
                };
                let desc = store_file(&home, &tmp, &digest, size)?;
                let platform = Platform::host();
                Ok(Base {
                    config: json!({
                        "architecture": platform.architecture,
                        "os": platform.os,
                        "config": {},
                        "rootfs": {"type": "layers", "diff_ids": [desc.digest.clone()]},
                        "history": [{"created_by": format!("burrow: the directory {}", dir.display())}],
                    }),
                    layers: vec![desc],
                })
            })
            .await
        }
    }
}

/// Runs `f` off the async runtime; `what` names it if the task dies.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::io(what, None, io::Error::other(e.to_string())))?
}

/// Copies the blobs of the layout's image for this host into the store.
fn import_layout(
    home: &Home,
    reference: &str,
    layout: &Path,
    tag: Option<&str>,
    scratch: &Path,
) -> Result<Base> {
    let (_, manifest, blobs) = oci::layout_manifest(reference, layout, tag)?;
    for desc in std::iter::once(&manifest.config).chain(&manifest.layers) {
        import_blob(home, reference, &blobs, desc, scratch)?;
    }
    let config = read_config(home, reference, &manifest)?;
    Ok(Base {
        layers: manifest.layers,
        config,
    })
}

fn import_blob(
    home: &Home,
    reference: &str,
    blobs: &BlobDir,
    desc: &Descriptor,
    scratch: &Path,
) -> Result<()> {
    let digest = Digest::parse(&desc.digest).map_err(|r| invalid(reference, r))?;
    let store = BlobStore::open(home)?;
    if fs::metadata(store.path(&digest)).is_ok_and(|m| m.len() == desc.size) {
        return Ok(());
    }
    let mut reader = blobs
        .open_verified(&digest, desc.size)
        .map_err(|e| invalid(reference, e.to_string()))?;
    let tmp = scratch.join(format!("{}-import-{}", std::process::id(), digest.hex()));
    let copied = File::create(&tmp).and_then(|mut f| {
        io::copy(&mut reader, &mut f)?;
        f.sync_all()
    });
    if let Err(e) = copied.and_then(|()| reader.finish()) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(
            "copying an image blob into the store",
            Some(&tmp),
            e,
        ));
    }
    store_file(home, &tmp, &digest, desc.size).map(drop)
}

/// Writes a new file at `path` through `write`, synced, returning the
/// digest and size of what was written.
pub(crate) fn write_file_hashed(
    path: &Path,
    write: impl FnOnce(&mut HashingWriter<BufWriter<File>>) -> io::Result<()>,
) -> io::Result<(Digest, u64)> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    write(&mut out)?;
    out.flush()?;
    let (digest, size, buf) = out.finish();
    buf.into_inner()
        .map_err(io::IntoInnerError::into_error)?
        .sync_all()?;
    Ok((digest, size))
}

/// The digest and size of a file's content.
pub(crate) fn hash_file(path: &Path) -> io::Result<(Digest, u64)> {
    let mut reader = HashingReader::new(BufReader::with_capacity(1 << 20, File::open(path)?));
    io::copy(&mut reader, &mut io::sink())?;
    Ok(reader.finish())
}

/// Moves the finished file `tmp` (content `digest`, `size` bytes) into the
/// store as a layer blob, unless an intact copy is there already (then
/// `tmp` is removed).
pub(crate) fn store_file(
    home: &Home,
    tmp: &Path,
    digest: &Digest,
    size: u64,
) -> Result<Descriptor> {
    let store = BlobStore::open(home)?;
    let desc = Descriptor {
        media_type: LAYER_TAR.to_owned(),
        digest: digest.to_string(),
        size,
        platform: None,
        annotations: Default::default(),
    };
    let _lock = store.lock_blocking(digest)?;
    if store.check(digest, size)? == BlobState::Good {
        let _ = fs::remove_file(tmp);
        return Ok(desc);
    }
    let dest = store.path(digest);
    fs::rename(tmp, &dest)
        .and_then(|()| File::open(store.dir())?.sync_all())
        .map_err(|e| {
            let _ = fs::remove_file(tmp);
            Error::io("storing a snapshot layer", Some(&dest), e)
        })?;
    Ok(desc)
}

fn put_json(store: &BlobStore, value: &impl serde::Serialize) -> Result<(Digest, u64)> {
    let data = serde_json::to_vec(value)
        .map_err(|e| Error::io("encoding a snapshot image", None, io::Error::other(e)))?;
    let digest = Digest::of(&data);
    let _lock = store.lock_blocking(&digest)?;
    store.put(&digest, &data)?;
    Ok((digest, data.len() as u64))
}

/// Stores the image of `base` plus `top` (an uncompressed layer already in
/// the store), returning its manifest's digest.
pub(crate) fn write_image(
    home: &Home,
    base: Base,
    top: Descriptor,
    created_by: &str,
) -> Result<Digest> {
    let store = BlobStore::open(home)?;
    let mut config = base.config;
    let Some(obj) = config.as_object_mut() else {
        return Err(invalid(
            created_by,
            "the base image's configuration is not an object",
        ));
    };
    let rootfs = obj
        .entry("rootfs")
        .or_insert_with(|| json!({"type": "layers", "diff_ids": []}));
    match rootfs.get_mut("diff_ids").and_then(Value::as_array_mut) {
        Some(ids) => ids.push(Value::String(top.digest.clone())),
        None => rootfs["diff_ids"] = json!([top.digest.clone()]),
    }
    let history = obj.entry("history").or_insert_with(|| json!([]));
    if let Some(h) = history.as_array_mut() {
        h.push(json!({
            "created": now_rfc3339(),
            "created_by": created_by,
        }));
    }
    let (config_digest, config_size) = put_json(&store, &config)?;
    let mut layers = base.layers;
    layers.push(top);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest.to_string(), "size": config_size},
        "layers": layers,
    });
    Ok(put_json(&store, &manifest)?.0)
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Unpacks (once, cached) the stored image `digest` for a sandbox whose
/// image is `reference` (`snapshot:NAME`).
pub(crate) async fn prepare_stored(
    home: &Home,
    reference: &str,
    digest: &str,
) -> Result<PreparedImage> {
    let (home, reference, digest) = (home.clone(), reference.to_owned(), digest.to_owned());
    blocking("preparing a snapshot image", move || {
        let (digest, manifest) = stored(&home, &reference, &digest)?;
        let blobs = BlobStore::open(&home)?.blob_dir().clone();
        let entry = RootfsCache::open(&home)?.get_or_build(&digest, |dir| {
            oci::unpack_manifest(&reference, &blobs, &manifest, dir, false)
        })?;
        Ok(PreparedImage {
            reference,
            rootfs: entry.rootfs,
            config: entry.config,
            digest: Some(digest.to_string()),
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}

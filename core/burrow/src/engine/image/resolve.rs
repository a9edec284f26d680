//! Resolving an image reference to a root filesystem on disk.

use std::path::PathBuf;

use super::{oci, pull, ImageConfig, ImageReference, ImageSource, PreparedImage, PullOptions};
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Parses a reference without touching the disk beyond `stat`.
pub fn parse_reference(home: &Home, reference: &str) -> Result<ImageSource> {
    let invalid = |reason: &str| Error::InvalidImage {
        image: reference.to_owned(),
        reason: reason.to_owned(),
    };
    if reference.is_empty() || reference.contains('\0') {
        return Err(invalid("empty reference"));
    }
    if let Some(name) = crate::model::snapshot_of_image(reference) {
        if let Err(e) = crate::model::validate_snapshot_name(name) {
            let reason = match e {
                Error::InvalidArgument { reason, .. } => reason,
                other => other.to_string(),
            };
            return Err(invalid(&format!("not a snapshot name: {reason}")));
        }
        return Ok(ImageSource::Snapshot(name.to_owned()));
    }
    if let Some(rest) = reference.strip_prefix("oci:") {
        // oci:PATH[:TAG] where the tag is after the last ':' that follows the
        // last '/'.
        let (path, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(rest[i + 1..].to_owned())),
            _ => (rest, None),
        };
        if path.is_empty() {
            return Err(invalid("oci: needs a layout directory"));
        }
        return Ok(ImageSource::OciLayout {
            path: PathBuf::from(path),
            tag: tag.filter(|t| !t.is_empty()),
        });
    }
    if reference.starts_with('/') || reference.starts_with("./") || reference.starts_with("../") {
        let path = PathBuf::from(reference);
        if path.join("oci-layout").is_file() {
            return Ok(ImageSource::OciLayout { path, tag: None });
        }
        return Ok(ImageSource::RootfsDir(path));
    }
    let named = home.images_dir().join("named").join(reference);
    if is_simple_name(reference) && named.exists() {
        if named.join("oci-layout").is_file() {
            return Ok(ImageSource::OciLayout {
                path: named,
                tag: None,
            });
        }
        return Ok(ImageSource::RootfsDir(named));
    }
    ImageReference::parse(reference)?;
    Ok(ImageSource::Registry(reference.to_owned()))
}

/// The reference with local paths made absolute (`./img` ->
/// `/abs/img`, `oci:rel:tag` -> `oci:/abs/rel:tag`) and registry references
/// in their canonical form (`python` -> `docker.io/library/python:latest`);
/// imported names are returned unchanged.
pub fn normalize_reference(home: &Home, reference: &str) -> Result<String> {
    let absolute = |p: &std::path::Path| {
        std::fs::canonicalize(p).map_err(|e| Error::InvalidImage {
            image: reference.to_owned(),
            reason: format!("{}: {e}", p.display()),
        })
    };
    let explicit_path =
        reference.starts_with('/') || reference.starts_with("./") || reference.starts_with("../");
    match parse_reference(home, reference)? {
        ImageSource::RootfsDir(p) if explicit_path => {
            Ok(absolute(&p)?.to_string_lossy().into_owned())
        }
        ImageSource::OciLayout { path, tag } if reference.starts_with("oci:") || explicit_path => {
            let abs = absolute(&path)?.to_string_lossy().into_owned();
            Ok(match tag {
                Some(t) if reference.starts_with("oci:") => format!("oci:{abs}:{t}"),
                _ if reference.starts_with("oci:") => format!("oci:{abs}"),
                _ => abs,
            })
        }
        ImageSource::Registry(r) => Ok(ImageReference::parse(&r)?.to_string()),
        _ => Ok(reference.to_owned()),
    }
}

fn is_simple_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Resolves and, for OCI layouts and registry images, unpacks (once,
/// cached) an image. Registry references are pulled if they are not in the
/// local image store yet ([`super::PullPolicy::IfMissing`]).
pub async fn prepare(home: &Home, reference: &str) -> Result<PreparedImage> {
    prepare_under(home, reference, None).await
}

/// [`prepare`] for a sandbox under an egress `ceiling` (a tenant's):
/// every connection of a pull goes through the outbound guard (a
/// [`GuardProxy`] of this process), which refuses the denied addresses the
/// ceiling's `pull_allow` does not name.
///
/// [`GuardProxy`]: burrow_net::outbound::proxy::GuardProxy
pub async fn prepare_under(
    home: &Home,
    reference: &str,
    ceiling: Option<&burrow_net::Ceiling>,
) -> Result<PreparedImage> {
    let source = parse_reference(home, reference)?;
    let invalid = |reason: String| Error::InvalidImage {
        image: reference.to_owned(),
        reason,
    };
    match source {
        ImageSource::RootfsDir(path) => {
            let rootfs = std::fs::canonicalize(&path)
                .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
            if !rootfs.is_dir() {
                return Err(invalid(format!("{} is not a directory", rootfs.display())));
            }
            Ok(PreparedImage {
                reference: reference.to_owned(),
                rootfs,
                config: ImageConfig::default(),
                digest: None,
            })
        }
        ImageSource::OciLayout { path, tag } => {
            let home = home.clone();
            let reference = reference.to_owned();
            tokio::task::spawn_blocking(move || {
                oci::prepare_layout(&home, &reference, &path, tag.as_deref())
            })
            .await
            .map_err(|e| invalid(format!("image preparation panicked: {e}")))?
        }
        ImageSource::Registry(_) => match ceiling {
            None => pull(home, reference, &PullOptions::default()).await,
            Some(c) => {
                let guard = burrow_net::outbound::Guard::new(c.pull_allow.clone());
                let proxy =
                    burrow_net::outbound::proxy::GuardProxy::start(std::sync::Arc::new(guard))
                        .await
                        .map_err(|e| Error::io("starting the outbound guard of a pull", None, e))?;
                let opts = PullOptions {
                    proxy: Some(proxy.url()),
                    ..PullOptions::default()
                };
                let pulled = pull(home, reference, &opts).await;
                drop(proxy);
                pulled
            }
        },
        ImageSource::Snapshot(name) => {
            let store = crate::engine::store::Store::open(home).await?;
            let snapshot = store
                .get_snapshot(&name)
                .await?
                .ok_or_else(|| crate::engine::store::snapshots::not_found(&name))?;
            if snapshot.kind == crate::model::SnapshotKind::Full {
                // A full snapshot's sandboxes run its base image (the saved
                // guest comes with the sandbox's directory).
                return Box::pin(prepare_under(home, &snapshot.base_image, ceiling)).await;
            }
            super::snapshot::prepare_stored(home, reference, &snapshot.digest).await
        }
    }
}

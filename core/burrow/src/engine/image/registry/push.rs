//! Pushing an image of the store (a snapshot) to a registry: every blob the
//! registry lacks, streamed from the store, then the manifest under the
//! reference's tag. The result is an ordinary OCI image: any backend pulls
//! it by that reference.

use std::io;

use futures_util::StreamExt;
use oci_client::RegistryOperation;

use super::remote::Remote;
use super::store::BlobStore;
use super::{ImageReference, PullOptions};
use crate::engine::image::digest::Digest;
use crate::engine::image::oci::{parse_manifest, Parsed, MAX_JSON};
use crate::engine::image::spec::Descriptor;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// How much of a blob each chunk of the upload carries.
const CHUNK: usize = 1 << 20;

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushReport {
    /// The reference pushed to, in its canonical form.
    pub reference: String,
    /// The manifest's digest (`reference` pinned to it pulls exactly this).
    pub digest: String,
    /// Blobs uploaded.
    pub blobs_pushed: usize,
    /// Blobs the registry had already.
    pub blobs_present: usize,
    /// Bytes uploaded.
    pub bytes_pushed: u64,
}

/// Pushes the image whose manifest is `digest` in the store to `target`
/// (a registry reference with a tag; `image` names it in errors).
pub(crate) async fn push(
    home: &Home,
    image: &str,
    digest: &str,
    target: &str,
    opts: &PullOptions,
) -> Result<PushReport> {
    let reference = ImageReference::parse(target)?;
    if reference.digest().is_some() {
        return Err(Error::InvalidImage {
            image: target.to_owned(),
            reason: "push to a tag, not a digest".into(),
        });
    }
    let store = BlobStore::open(home)?;
    let manifest_digest = Digest::parse(digest).map_err(|r| Error::InvalidImage {
        image: image.to_owned(),
        reason: r,
    })?;
    let body = store
        .read_unsized(&manifest_digest, MAX_JSON)?
        .ok_or_else(|| Error::InvalidImage {
            image: image.to_owned(),
            reason: format!("its manifest {manifest_digest} is not in the image store"),
        })?;
    let manifest = match parse_manifest("", &manifest_digest, &body) {
        Ok(Parsed::Manifest(m)) => m,
        Ok(Parsed::Index(_)) => {
            return Err(Error::InvalidImage {
                image: image.to_owned(),
                reason: format!("{manifest_digest} is an index"),
            })
        }
        Err(reason) => {
            return Err(Error::InvalidImage {
                image: image.to_owned(),
                reason,
            })
        }
    };
    let media_type = manifest
        .media_type
        .clone()
        .unwrap_or_else(|| crate::engine::image::spec::OCI_MANIFEST.to_owned());

    let remote = Remote::new(home, target, &reference, opts)?;
    let client_ref = reference.to_client();
    remote
        .client()
        .auth(&client_ref, remote.auth(), RegistryOperation::Push)
        .await
        .map_err(|e| remote.error(&format!("signing in to push to {reference}"), e))?;

    let mut report = PushReport {
        reference: reference.to_string(),
        digest: manifest_digest.to_string(),
        blobs_pushed: 0,
        blobs_present: 0,
        bytes_pushed: 0,
    };
    for desc in std::iter::once(&manifest.config).chain(&manifest.layers) {
        if push_blob(&remote, &store, &client_ref, desc).await? {
            report.blobs_pushed += 1;
            report.bytes_pushed += desc.size;
        } else {
            report.blobs_present += 1;
        }
    }
    let content_type = media_type.parse().map_err(|_| Error::InvalidImage {
        image: image.to_owned(),
        reason: format!("media type {media_type:?}"),
    })?;
    remote
        .client()
        .push_manifest_raw(&client_ref, body, content_type)
        .await
        .map_err(|e| remote.error(&format!("pushing the manifest to {reference}"), e))?;
    tracing::info!(reference = %report.reference, digest = %report.digest, pushed = report.blobs_pushed, present = report.blobs_present, "pushed");
    Ok(report)
}

/// Uploads one blob unless the registry has it; whether it was uploaded.
async fn push_blob(
    remote: &Remote,
    store: &BlobStore,
    reference: &oci_client::Reference,
    desc: &Descriptor,
) -> Result<bool> {
    let digest = Digest::parse(&desc.digest).map_err(|r| Error::InvalidImage {
        image: reference.to_string(),
        reason: r,
    })?;
    let has = remote
        .client()
        .blob_exists(reference, &digest.to_string())
        .await
        .map_err(|e| remote.error(&format!("looking for blob {digest}"), e))?;
    if has {
        return Ok(false);
    }
    // Verified before it leaves: a damaged blob is never published.
    let path = store.path(&digest);
    let reader = {
        let blobs = store.blob_dir().clone();
        let (digest, size) = (digest.clone(), desc.size);
        tokio::task::spawn_blocking(move || blobs.open_verified(&digest, size))
            .await
            .map_err(|e| Error::io("reading a blob", None, io::Error::other(e.to_string())))?
            .map_err(|e| Error::InvalidImage {
                image: reference.to_string(),
                reason: format!("{}: {e}", path.display()),
            })?
    };
    let file = tokio::fs::File::from_std(reader.into_inner());
    let chunks = futures_util::stream::unfold(file, |mut file| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), file))
            }
            Err(e) => Some((
                Err(oci_client::errors::OciDistributionError::IoError(e)),
                file,
            )),
        }
    })
    .boxed();
    remote
        .client()
        .push_blob_stream(reference, chunks, &digest.to_string(), Some(desc.size))
        .await
        .map_err(|e| remote.error(&format!("pushing blob {digest}"), e))?;
    Ok(true)
}

//! A container sandbox's writable layer (its overlay upper directory) as
//! the host sees it: seeded for a copy that never ran, read for a
//! snapshot, removed with the sandbox; on a layer disk of its own where
//! the sandbox has one ([`layer_disk`]).

use std::path::PathBuf;

use crate::error::{Error, Result};

use super::{layer_disk, rootfs, rootless};

/// Gives a container sandbox that never ran (`sandbox_dir`) the writable
/// layer `layer` (written by `engine::snapshot::layer` from its parent's,
/// `parent_dir`): unpacked into its upper directory, owned as the parent's
/// were (rootless, by the supervisor program in a user namespace).
pub(crate) async fn seed_writable_layer(
    parent_dir: &std::path::Path,
    sandbox_dir: &std::path::Path,
    layer: &std::path::Path,
    images_dir: &std::path::Path,
) -> Result<()> {
    let upper = sandbox_dir.join("upper");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return rootless::helper(
            &["__unlayer".as_ref(), layer.as_os_str(), upper.as_os_str()],
            "unpacking the writable layer",
        )
        .await;
    }
    let owners = layer_owners(parent_dir);
    if let Some(base) = rootfs::recorded_base(parent_dir) {
        rootfs::record_base(sandbox_dir, base)?;
    }
    // A parent with a layer disk gives its copy one of the same size.
    let disk = std::fs::metadata(parent_dir.join(layer_disk::IMAGE))
        .ok()
        .map(|m| m.len());
    let layer = layer.to_path_buf();
    let sandbox_dir = sandbox_dir.to_path_buf();
    let images_dir = images_dir.to_path_buf();
    crate::engine::image::snapshot::blocking("unpacking the writable layer", move || {
        if let Some(bytes) = disk {
            layer_disk::create(&sandbox_dir, bytes, Some(&images_dir))?;
        }
        with_writable_layer(&sandbox_dir, |upper, _| {
            let file = std::fs::File::open(&layer)
                .map_err(|e| Error::io("reading the writable layer", Some(&layer), e))?;
            burrow_layer::unpack_layer(
                std::io::BufReader::new(file),
                upper,
                owners,
                "trusted.overlay.opaque",
            )
            .map_err(|e| Error::io("unpacking the writable layer", Some(upper), e))
        })
    })
    .await
}

/// A container sandbox's writable layer (its overlay upper directory) and
/// the host ids its files are owned by, as this process sees them: in a
/// rootless supervisor's user namespace the guest's own ids, as root the
/// sandbox's range from its recorded base. A layer on a disk of its own
/// is mounted here for as long as the [`WritableLayer`] lives, unless it
/// already was.
pub(crate) fn writable_layer_of(
    sandbox_dir: &std::path::Path,
) -> Result<(WritableLayer, crate::engine::snapshot::layer::Owners)> {
    let owners = layer_owners(sandbox_dir);
    if !layer_disk::has_disk(sandbox_dir) {
        let upper = sandbox_dir.join("upper");
        return Ok((
            WritableLayer {
                upper,
                _mounted: None,
            },
            owners,
        ));
    }
    let mounted = layer_disk::mount(sandbox_dir)?;
    let upper = mounted.dir().join("upper");
    Ok((
        WritableLayer {
            upper,
            _mounted: Some(mounted),
        },
        owners,
    ))
}

/// Runs `f` with a container sandbox's writable layer (as
/// [`writable_layer_of`]), from the host: a layer disk is mounted for `f`
/// alone, in a mount namespace of its own
/// ([`layer_disk::in_own_namespace`]).
pub(crate) fn with_writable_layer<T: Send>(
    sandbox_dir: &std::path::Path,
    f: impl FnOnce(&std::path::Path, crate::engine::snapshot::layer::Owners) -> Result<T> + Send,
) -> Result<T> {
    if !layer_disk::has_disk(sandbox_dir) {
        let (writable, owners) = writable_layer_of(sandbox_dir)?;
        return f(&writable.upper, owners);
    }
    layer_disk::in_own_namespace(|| {
        let (writable, owners) = writable_layer_of(sandbox_dir)?;
        f(&writable.upper, owners)
    })
}

fn layer_owners(sandbox_dir: &std::path::Path) -> crate::engine::snapshot::layer::Owners {
    let shift = if rootless::in_user_namespace() {
        0
    } else {
        rootfs::recorded_base(sandbox_dir).unwrap_or(0)
    };
    crate::engine::snapshot::layer::Owners { shift }
}

/// A sandbox's overlay upper directory, readable while this lives.
#[derive(Debug)]
pub(crate) struct WritableLayer {
    /// The upper directory.
    pub upper: PathBuf,
    _mounted: Option<layer_disk::Mounted>,
}

/// Removes a sandbox's directory, its layer disk's mount in this
/// namespace first.
pub(crate) async fn remove_sandbox_dir(dir: &std::path::Path) -> Result<()> {
    layer_disk::release(dir)?;
    rootless::remove_tree(dir).await
}

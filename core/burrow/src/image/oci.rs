//! OCI image layout directories: index -> manifest -> config + layers,
//! unpacked once into a content-addressed cache.

use std::path::Path;

use crate::error::Result;
use crate::paths::Home;

use super::PreparedImage;

/// Unpacks (or reuses) the image selected by `tag` in the layout at `layout`.
pub(super) fn prepare_layout(
    home: &Home,
    reference: &str,
    layout: &Path,
    tag: Option<&str>,
) -> Result<PreparedImage> {
    let _ = (home, layout, tag, super::unpack::apply_layer);
    Err(crate::Error::InvalidImage {
        image: reference.to_owned(),
        reason: "OCI layouts are not supported yet".into(),
    })
}

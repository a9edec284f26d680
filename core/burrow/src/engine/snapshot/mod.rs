//! Snapshots: the pieces the drivers and the local backend share (the
//! backend's operations are in `engine::local::snapshots`, the image side
//! in `engine::image::snapshot`).

pub(crate) mod layer;

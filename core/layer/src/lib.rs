//! A sandbox's writable layer (an overlayfs upper directory) as an OCI
//! layer tar and back: [`write_layer`] (whiteouts, opaque directories,
//! owners shifted into the guest's range, hard links, name order) and
//! [`unpack_layer`], its inverse. Shared by the engine (container sandboxes'
//! snapshots and forks) and the guest agent (a vm's, whose upper is on its
//! own disk).

mod unpack;
mod write;

pub use unpack::unpack_layer;
pub use write::{write_layer, write_layer_watched, LayerStats, Owners};

/// How many ids a sandbox's user namespace maps (guest ids `0..MAP_SIZE`).
pub const MAP_SIZE: u32 = 65536;

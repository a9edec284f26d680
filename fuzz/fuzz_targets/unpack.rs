//! The image layer unpacker: untrusted tar streams (plain, gzip or zstd)
//! applied as layers onto a fresh root, with OCI whiteouts, opaque
//! directories, hard links and symlinks.
//!
//! Input: a mode byte, then
//! - even mode: one layer's raw bytes;
//! - odd mode: the DNA of one to three layers
//!   (`burrow_fuzz::tarball::Archive`): entries named `../x`, `/abs`,
//!   `.wh.name`, `.wh..wh..opq`, over-long names, links pointing out of
//!   the root (relatively and to the sentinel's absolute path), every
//!   header flavour, truncated and padded archives.
//!
//! Properties: no panic; accepted or refused, nothing is written outside
//! the root: nothing new next to it, the sentinel directory beside it
//! untouched, nothing new at the top of the host's `/` (see
//! `burrow_fuzz::arena`); refusals are typed errors.

#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use burrow::internal::fuzz::unpack_layers;
use burrow::ErrorCode;
use burrow_fuzz::arena::Arena;
use burrow_fuzz::tarball::Archive;
use libfuzzer_sys::fuzz_target;

fn arena() -> &'static Arena {
    static ARENA: OnceLock<Arena> = OnceLock::new();
    ARENA.get_or_init(|| Arena::new("unpack", &[]))
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = burrow_fuzz::mode(data) else {
        return;
    };
    let arena = arena();
    let layers: Vec<Vec<u8>> = if mode % 2 == 0 {
        vec![rest.to_vec()]
    } else {
        let mut u = Unstructured::new(rest);
        let Ok(archive) = Archive::arbitrary(&mut u) else {
            return;
        };
        let sentinel = arena.sentinel();
        archive.layers.iter().map(|l| l.render(&sentinel)).collect()
    };
    arena.reset();
    let refs: Vec<&[u8]> = layers.iter().map(Vec::as_slice).collect();
    if let Err(e) = unpack_layers(arena.root(), &refs) {
        assert!(
            matches!(e.code(), ErrorCode::InvalidImage | ErrorCode::Io),
            "{e}"
        );
    }
    arena.check();
});

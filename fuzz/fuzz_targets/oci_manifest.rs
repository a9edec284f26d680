//! OCI image manifests, indexes and whole image layouts: what an image
//! pull or an `oci:` reference reads from a registry or a directory.
//!
//! Input: a mode byte, then
//! - even mode: a selector byte for the media type a descriptor declared
//!   (`MANIFEST_MEDIA`), then a manifest or index blob, parsed as a pull
//!   parses it;
//! - odd mode: the DNA of an image layout (`burrow_fuzz::layout::Image`),
//!   written with real digests into a scratch directory and unpacked the
//!   way `oci:PATH[:TAG]` is.
//!
//! Properties: no panic; a blob that parses encodes to JSON that parses
//! as the same kind and encodes to the same bytes; an unpack, accepted or
//! refused, writes nothing outside its root (see `burrow_fuzz::arena`),
//! and refuses with a typed error.

#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use burrow::internal::fuzz::{parse_manifest, unpack_layout, ParsedManifest};
use burrow::ErrorCode;
use burrow_fuzz::arena::Arena;
use burrow_fuzz::layout::{Image, MANIFEST_MEDIA};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = burrow_fuzz::mode(data) else {
        return;
    };
    if mode % 2 == 0 {
        let Some((media, blob)) = burrow_fuzz::mode(rest) else {
            return;
        };
        manifest(
            MANIFEST_MEDIA[usize::from(media) % MANIFEST_MEDIA.len()],
            blob,
        );
    } else {
        let mut u = Unstructured::new(rest);
        if let Ok(image) = Image::arbitrary(&mut u) {
            layout(&image);
        }
    }
});

fn manifest(declared: &str, blob: &[u8]) {
    let Ok(parsed) = parse_manifest(declared, blob) else {
        return;
    };
    let (ParsedManifest::Index(json) | ParsedManifest::Manifest(json)) = &parsed;
    let again = parse_manifest(declared, json)
        .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(json)));
    assert_eq!(again, parsed, "parse(encode(parse(blob))) == parse(blob)");
}

fn arena() -> &'static Arena {
    static ARENA: OnceLock<Arena> = OnceLock::new();
    ARENA.get_or_init(|| Arena::new("oci", &["layout"]))
}

fn layout(image: &Image) {
    let arena = arena();
    arena.reset();
    let dir = arena.base().join("layout");
    image.write(&dir, &arena.sentinel());
    if let Err(e) = unpack_layout(&dir, image.tag(), arena.root()) {
        assert!(
            matches!(e.code(), ErrorCode::InvalidImage | ErrorCode::Io),
            "{e}"
        );
    }
    arena.check();
}

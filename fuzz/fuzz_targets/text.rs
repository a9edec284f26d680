//! Text a person writes: durations (`parse_duration`: CLI flags, the
//! `burrow serve` configuration) and image references
//! (`ImageReference::parse`, and the local engine's `parse_reference`,
//! which also knows `oci:PATH[:TAG]` and paths).
//!
//! Input: UTF-8 (lossily). The whole text goes to every parser; a text
//! with a `|` is also read as two durations `a|b`.
//!
//! Properties: no panic, and refusals are typed (`invalid_image`); a
//! parsed duration, written back in whole seconds plus nanoseconds or in
//! milliseconds, parses to the same value; durations with units add up
//! (`a` then `b` is `a + b`, or too large); a parsed reference prints in
//! a canonical form that parses to the same reference and prints the
//! same; `parse_reference` hands a registry reference on only when
//! `ImageReference::parse` accepts it, and never yields an empty tag.

#![no_main]

use std::sync::OnceLock;

use burrow::image::{ImageReference, ImageSource};
use burrow::internal::image::parse_reference;
use burrow::internal::Home;
use burrow::{parse_duration, ErrorCode, ParseDurationError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    duration(&text);
    if let Some((a, b)) = text.split_once('|') {
        durations_add_up(a, b);
    }
    reference(&text);
});

fn duration(text: &str) {
    let Ok(d) = parse_duration(text) else {
        return;
    };
    let exact = format!("{}.{:09}s", d.as_secs(), d.subsec_nanos());
    assert_eq!(parse_duration(&exact), Ok(d), "{text:?} -> {exact:?}");
    let bare = format!("{}.{:09}", d.as_secs(), d.subsec_nanos());
    assert_eq!(parse_duration(&bare), Ok(d), "{text:?} -> {bare:?}");
    if d.subsec_nanos() % 1_000_000 == 0 {
        let ms = format!("{}ms", d.as_millis());
        assert_eq!(parse_duration(&ms), Ok(d), "{text:?} -> {ms:?}");
    }
}

/// `a` and `b` each with a unit at its end: `ab` is their sum.
fn durations_add_up(a: &str, b: &str) {
    let has_unit = |s: &str| s.ends_with(|c: char| c.is_ascii_alphabetic());
    let starts_with_number = |s: &str| s.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if a != a.trim() || b != b.trim() || !has_unit(a) || !has_unit(b) || !starts_with_number(b) {
        return;
    }
    let (Ok(x), Ok(y)) = (parse_duration(a), parse_duration(b)) else {
        return;
    };
    let joined = format!("{a}{b}");
    match x.checked_add(y) {
        Some(sum) => assert_eq!(parse_duration(&joined), Ok(sum), "{joined:?}"),
        None => assert!(
            matches!(
                parse_duration(&joined),
                Err(ParseDurationError::TooLarge { .. })
            ),
            "{joined:?}"
        ),
    }
}

fn home() -> &'static Home {
    static HOME: OnceLock<Home> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("burrow-fuzz-home-{}", std::process::id()));
        Home::at(dir).expect("a burrow home for parse_reference")
    })
}

fn reference(text: &str) {
    match ImageReference::parse(text) {
        Ok(r) => {
            let canonical = r.to_string();
            let again = ImageReference::parse(&canonical)
                .unwrap_or_else(|e| panic!("{text:?} -> {canonical:?}: {e}"));
            assert_eq!(again, r, "{text:?} -> {canonical:?}");
            assert_eq!(again.to_string(), canonical);
            assert!(r.tag().is_some() || r.digest().is_some());
        }
        Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{e}"),
    }
    match parse_reference(home(), text) {
        Ok(ImageSource::Registry(r)) => {
            assert_eq!(r, text);
            ImageReference::parse(&r).expect("a registry source is a valid reference");
        }
        Ok(ImageSource::OciLayout { path, tag }) => {
            assert!(!path.as_os_str().is_empty());
            assert!(tag.is_none_or(|t| !t.is_empty()));
        }
        Ok(ImageSource::RootfsDir(p)) => assert!(!p.as_os_str().is_empty()),
        Ok(ImageSource::Snapshot(name)) => {
            assert_eq!(format!("snapshot:{name}"), text);
            burrow::validate_snapshot_name(&name).expect("a snapshot source has a valid name");
        }
        Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{e}"),
    }
}

#![allow(clippy::unwrap_used)]
//! The redactor against encodings written here independently of it, and
//! the property that matters for streams: the output does not depend on
//! how the input was cut, and never holds a form.

use std::sync::Arc;

use super::{Forms, Redactor, MASK, WINDOW};

/// A value with characters each encoding treats differently.
const VALUE: &str = "ghp_Va/ue+Th\"at\\Never&Enters<the>Guest~7f3a";

fn b64(bytes: &[u8], url: bool, pad: bool) -> String {
    let abc: Vec<char> = if url {
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    }
    .chars()
    .collect();
    let mut out = String::new();
    for g in bytes.chunks(3) {
        let n = (u32::from(g[0]) << 16)
            | (u32::from(*g.get(1).unwrap_or(&0)) << 8)
            | u32::from(*g.get(2).unwrap_or(&0));
        for i in 0..=g.len() {
            out.push(abc[((n >> (18 - 6 * i)) & 63) as usize]);
        }
        if pad {
            out.extend(std::iter::repeat_n('=', 3 - g.len()));
        }
    }
    out
}

fn hex(bytes: &[u8], upper: bool) -> String {
    bytes
        .iter()
        .map(|b| {
            if upper {
                format!("{b:02X}")
            } else {
                format!("{b:02x}")
            }
        })
        .collect()
}

/// Every byte but letters and digits escaped, upper-case (a stricter
/// encoder than the redactor's own form: the runs between escapes differ).
fn pct_all(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn pct_go(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn json_go(s: &str) -> String {
    // Go's encoding/json: quotes and backslashes escaped, <>& as \u00XX.
    serde_json::to_string(s)
        .unwrap()
        .trim_matches('"')
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The spellings of VALUE an answer may carry, as other programs write
/// them.
fn spellings() -> Vec<String> {
    let v = VALUE.as_bytes();
    let mut out = vec![
        VALUE.to_owned(),
        serde_json::to_string(VALUE).unwrap(),
        json_go(VALUE),
        serde_json::to_string(VALUE).unwrap().replace('/', "\\/"),
        hex(v, false),
        hex(v, true),
        pct_go(v),
        pct_go(v).to_lowercase(),
    ];
    for url in [false, true] {
        for pad in [false, true] {
            out.push(b64(v, url, pad));
            // Inside a longer encoded text, at each alignment.
            for before in ["x", "xy", "xyz"] {
                let mut text = before.as_bytes().to_vec();
                text.extend_from_slice(v);
                text.extend_from_slice(b" and more");
                out.push(b64(&text, url, pad));
            }
        }
    }
    out
}

fn forms() -> Arc<Forms> {
    Arc::new(Forms::new([VALUE.as_bytes()]))
}

/// `input` through a redactor in the pieces `cuts` makes, flushed.
fn through(forms: &Arc<Forms>, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut r = Redactor::new(forms.clone());
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts {
        r.push(&input[at..c], &mut out);
        assert!(r.holding() < WINDOW, "holds {}", r.holding());
        at = c;
    }
    r.push(&input[at..], &mut out);
    r.flush(&mut out);
    out
}

/// Whether `out` shows any 8-byte piece of a spelling (case folded for
/// hex, url-safe read as standard for base64).
fn shows_a_piece(out: &[u8], spelling: &str) -> bool {
    let fold = |s: &[u8]| -> Vec<u8> {
        s.iter()
            .map(|b| match b {
                b'-' => b'+',
                b'_' => b'/',
                _ => *b,
            })
            .collect()
    };
    let out = fold(out);
    let spelling = fold(spelling.as_bytes());
    // The encodings of a longer text hold the value's characters between
    // others: only the characters the value decides are its.
    spelling.windows(WINDOW).any(|w| {
        out.windows(WINDOW)
            .any(|o| o.eq_ignore_ascii_case(w) && !w.contains(&b'='))
    })
}

#[test]
fn every_spelling_is_masked_however_the_stream_is_cut() {
    let forms = forms();
    for spelling in spellings() {
        let input = format!("<p>{spelling}</p>\n");
        let whole = through(&forms, input.as_bytes(), &[]);
        assert_eq!(whole.len(), input.len());
        assert!(whole.starts_with(b"<p>") && whole.ends_with(b"</p>\n"));
        // Bytes change only to the mask.
        for (a, b) in input.bytes().zip(&whole) {
            assert!(a == *b || *b == MASK);
        }
        // What is masked is the value's, not the encoding of "x" before
        // it and " and more" after (those survive around the mask).
        let v = String::from_utf8_lossy(&whole);
        assert!(
            v.matches('*').count() >= spelling.len().min(VALUE.len()),
            "{spelling}: {v}"
        );
        for cut in 0..=input.len() {
            assert_eq!(
                through(&forms, input.as_bytes(), &[cut]),
                whole,
                "{spelling} cut at {cut}"
            );
        }
    }
}

#[test]
fn no_piece_of_the_value_survives_in_any_spelling() {
    let forms = forms();
    let all = spellings();
    let input = all.join("\r\n");
    let out = through(&forms, input.as_bytes(), &[]);
    // The value's own spellings: none of their 8-byte pieces is left,
    // save where a longer text's neighbours share the character.
    for s in all.iter().take(8) {
        assert!(
            !shows_a_piece(&out, s),
            "{s} in {}",
            String::from_utf8_lossy(&out)
        );
    }
    assert!(!String::from_utf8_lossy(&out).contains(VALUE));
}

#[test]
fn random_cuts_into_many_pieces_give_the_same_bytes() {
    let forms = forms();
    let input = spellings().join(" | ").repeat(2);
    let whole = through(&forms, input.as_bytes(), &[]);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        let mut cuts = Vec::new();
        let mut at = 0;
        loop {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            at += 1 + (seed % 40) as usize;
            if at >= input.len() {
                break;
            }
            cuts.push(at);
        }
        assert_eq!(through(&forms, input.as_bytes(), &cuts), whole);
    }
}

#[test]
fn a_stricter_encoder_still_leaves_no_run_of_eight() {
    // Every punctuation escaped (`_` and `~` too): the text differs from
    // the redactor's percent form around those, but each 8-byte piece the
    // two share is masked.
    let forms = forms();
    let input = pct_all(VALUE.as_bytes());
    let out = through(&forms, input.as_bytes(), &[]);
    assert!(!shows_a_piece(&out, &pct_go(VALUE.as_bytes())));
    let masked = out.iter().filter(|&&b| b == MASK).count();
    assert!(
        masked > input.len() / 2,
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn text_without_a_form_passes_at_once_and_unchanged() {
    let forms = forms();
    let mut r = Redactor::new(forms.clone());
    let mut out = Vec::new();
    let event = b"data: {\"delta\": \"hello\"}\n\n";
    r.push(event, &mut out);
    assert_eq!(out, event, "an event stream is not delayed");
    assert_eq!(r.holding(), 0);
    // A tail that begins the value is held, then released masked.
    out.clear();
    r.push(b"token ghp_Va", &mut out);
    assert_eq!(out, b"token ");
    assert_eq!(r.holding(), 6);
    r.push(&VALUE.as_bytes()[6..], &mut out);
    r.push(b".", &mut out);
    r.flush(&mut out);
    assert_eq!(
        out,
        format!("token {}.", "*".repeat(VALUE.len())).as_bytes()
    );
}

#[test]
fn a_cut_shows_at_most_seven_bytes_of_a_value() {
    let forms = forms();
    for n in 1..VALUE.len() {
        // A truncating echo: the value's first n bytes end the message.
        let input = format!("echo: {}", &VALUE[..n]);
        let out = String::from_utf8(through(&forms, input.as_bytes(), &[])).unwrap();
        let shown = out.trim_start_matches("echo: ").trim_start_matches('*');
        assert!(n < WINDOW || shown.is_empty(), "{n}: {out}");
        // And one that starts in the middle of it.
        let input = format!("{} (cut)", &VALUE[n..]);
        let out = String::from_utf8(through(&forms, input.as_bytes(), &[])).unwrap();
        assert!(
            VALUE.len() - n < WINDOW || out.starts_with('*'),
            "{n}: {out}"
        );
    }
}

#[test]
fn short_values_are_matched_whole() {
    let forms = Arc::new(Forms::new([b"abc".as_slice()]));
    let out = through(&forms, b"xabcx 616263 YWJj ab", &[2]);
    assert_eq!(out, b"x***x ****** **** ab");
}

#[test]
fn memory_is_bounded_whatever_the_value() {
    // The worst a value can make the matcher hold: every byte continues
    // a piece.
    let value = "a".repeat(super::super::MAX_VALUE);
    let forms = Arc::new(Forms::new([value.as_bytes()]));
    let mut r = Redactor::new(forms);
    let mut out = Vec::new();
    for _ in 0..64 {
        r.push(&[b'a'; 4096], &mut out);
        assert!(r.holding() < WINDOW);
    }
    r.flush(&mut out);
    assert!(out.iter().all(|&b| b == MASK));
    assert_eq!(out.len(), 64 * 4096);
    // A sandbox's worst forms: 32 values of 16 KiB.
    let values: Vec<Vec<u8>> = (0..32u8)
        .map(|i| {
            (0..super::super::MAX_VALUE)
                .map(|j| b' ' + ((j * 31 + usize::from(i) * 7) % 90) as u8)
                .collect()
        })
        .collect();
    let forms = Forms::new(values.iter().map(Vec::as_slice));
    let bytes: usize = values.iter().map(Vec::len).sum();
    assert!(forms.pieces() <= 16 * bytes, "{forms:?}");
}

#[test]
fn a_release_shows_what_is_held_and_matching_goes_on() {
    let forms = forms();
    let mut r = Redactor::new(forms);
    let mut out = Vec::new();
    r.push(b"x ghp_Va", &mut out);
    assert_eq!(out, b"x ");
    r.release(&mut out);
    assert_eq!(out, b"x ghp_Va");
    assert_eq!(r.holding(), 0);
    // The rest of the value, after the pause: masked but for what no
    // piece of eight covers beyond the cut.
    out.clear();
    r.push(&VALUE.as_bytes()[6..], &mut out);
    r.flush(&mut out);
    assert_eq!(out, "*".repeat(VALUE.len() - 6).as_bytes());
}

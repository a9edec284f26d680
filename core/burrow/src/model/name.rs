//! Sandbox names: reusable lookup keys.

use crate::error::{Error, Result};

/// Longest accepted name, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Longest accepted scope (the part of a scoped name before its `/`).
pub const MAX_SCOPE_BYTES: usize = 32;

/// Checks a sandbox name: 1..=128 UTF-8 bytes, no control characters, no
/// invisible or text-reordering characters (Unicode format characters and
/// the like: a name must read as what it is), and not `.` or `..` (names
/// appear in paths, logs and URLs), optionally in a scope:
/// `<scope>/<name>`, one `/`, the scope as [`validate_scope`] says.
/// `burrow serve` keeps each tenant's sandboxes in its tenant's scope.
pub fn validate_name(name: &str) -> Result<()> {
    match name.split_once('/') {
        Some((scope, base)) => {
            validate_scope(scope)?;
            validate_base(base)?;
            if name.len() > MAX_NAME_BYTES + 1 + MAX_SCOPE_BYTES {
                return Err(Error::InvalidName {
                    reason: format!("the scoped name is {} bytes long", name.len()),
                });
            }
            Ok(())
        }
        None => validate_base(name),
    }
}

/// Checks a name without a scope: as [`validate_name`], and no `/`.
pub fn validate_base(name: &str) -> Result<()> {
    let fail = |reason: String| Err(Error::InvalidName { reason });
    if name.is_empty() {
        return fail("the name is empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return fail(format!(
            "the name is {} bytes long; at most {MAX_NAME_BYTES} UTF-8 bytes are allowed",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return fail(format!("the name contains the control character {c:?}"));
    }
    if let Some(c) = name.chars().find(|c| is_hidden_char(*c)) {
        return fail(format!(
            "the name contains U+{:04X}, an invisible or text-reordering character",
            u32::from(c)
        ));
    }
    if name.contains('/') {
        return fail("the name contains '/'".into());
    }
    if name == "." || name == ".." {
        return fail(format!("{name:?} is reserved"));
    }
    if name.trim() != name {
        return fail("the name starts or ends with whitespace".into());
    }
    Ok(())
}

/// Whether `c` is invisible or changes how the text around it is shown:
/// every Unicode format character (general category `Cf`, Unicode 15: the
/// bidirectional embeddings, overrides and isolates, the zero-width space,
/// joiners and marks, the word joiner and invisible operators, the byte
/// order mark, the Arabic and Mongolian marks, the interlinear annotation
/// and tag characters, ...), the line and paragraph separators, and the
/// Hangul fillers (letters that show as nothing). A name holding one can
/// look like another name, or make the text after it read backwards, in a
/// terminal, a log or the console.
pub(crate) fn is_hidden_char(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x115F..=0x1160
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0x3164
            | 0xFEFF
            | 0xFFA0
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

/// Checks a scope (a `burrow serve` tenant's name): 1..=32 bytes of
/// lowercase ASCII letters, digits and `-`, starting with a letter or a
/// digit; not `pool` (the local backend's warm sandboxes are named
/// `pool/<pool>/<id>`).
pub fn validate_scope(scope: &str) -> Result<()> {
    let ok = scope != "pool"
        && !scope.is_empty()
        && scope.len() <= MAX_SCOPE_BYTES
        && scope.as_bytes()[0].is_ascii_alphanumeric()
        && scope
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        return Ok(());
    }
    Err(Error::InvalidName {
        reason: format!(
            "{scope:?} is not a scope: 1..={MAX_SCOPE_BYTES} lowercase letters, digits and '-', starting with a letter or a digit"
        ),
    })
}

/// A name's scope and the name in it (`None` for an unscoped name).
pub fn split_scope(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((scope, base)) => (Some(scope), base),
        None => (None, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(validate_name("worker").is_ok());
        assert!(validate_name(&"a".repeat(128)).is_ok());
        // 42 three-byte characters = 126 bytes, fine; 43 = 129 bytes, not.
        assert!(validate_name(&"€".repeat(42)).is_ok());
        for bad in [
            String::new(),
            "a".repeat(129),
            "€".repeat(43),
            "a/b/c".into(),
            "A/b".into(),
            "/b".into(),
            "a/".into(),
            "a/..".into(),
            "..".into(),
            "x\n".into(),
            " x".into(),
        ] {
            let err = validate_name(&bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidName, "{bad:?}");
        }
        // 128 bytes of multi-byte UTF-8 (32 four-byte characters) is accepted.
        assert!(validate_name(&"😀".repeat(32)).is_ok());
        // A scope: lowercase, digits and '-', at most 32 bytes.
        assert!(validate_name("team-1/worker").is_ok());
        assert!(validate_name(&format!("{}/{}", "t".repeat(32), "a".repeat(128))).is_ok());
        assert!(validate_name(&format!("{}/a", "t".repeat(33))).is_err());
        assert_eq!(split_scope("team/w"), (Some("team"), "w"));
        assert_eq!(split_scope("w"), (None, "w"));
        assert!(validate_base("team/w").is_err());
        assert!(validate_name("pool/w").is_err());
    }

    #[test]
    fn invisible_and_reordering_characters_are_refused() {
        // The bidi controls, zero-width characters and other format
        // characters the review named, and the rest of the class.
        let refused = [
            0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066,
            0x2067, 0x2068, 0x2069, 0xFEFF, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x061C, 0x180E,
            0x00AD, 0x0600, 0x06DD, 0x070F, 0x08E2, 0x206A, 0x206F, 0xFFF9, 0xFFFB, 0x110BD,
            0x13430, 0x1343F, 0x1BCA0, 0x1D173, 0xE0001, 0xE0020, 0xE007F, 0x2028, 0x2029, 0x3164,
            0x115F, 0xFFA0,
        ];
        for cp in refused {
            let c = char::from_u32(cp).unwrap();
            for name in [
                format!("a{c}b"),
                format!("{c}ab"),
                format!("ab{c}"),
                format!("team/a{c}b"),
            ] {
                let err = validate_name(&name).unwrap_err();
                assert_eq!(err.code(), crate::ErrorCode::InvalidName, "U+{cp:04X}");
            }
            assert!(is_hidden_char(c), "U+{cp:04X}");
        }
        // "evil\u{202E}txt.exe" shows as "evilexe.txt".
        assert!(validate_base("evil\u{202E}txt.exe").is_err());
        // Visible text of any script, emoji with their variation selector
        // and joiner-free sequences, and ordinary spaces stay accepted.
        for ok in [
            "データ",
            "ملف",
            "файл-1",
            "a b",
            "❤\u{FE0F}",
            "naïve",
            "x\u{0301}",
        ] {
            validate_name(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for cp in [
            0x0041, 0x00A0, 0x2010, 0x2027, 0x202F, 0x2065, 0x2070, 0xFE0F, 0xFFFC,
        ] {
            let c = char::from_u32(cp).unwrap();
            assert!(!is_hidden_char(c), "U+{cp:04X}");
        }
    }
}

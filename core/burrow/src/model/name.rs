//! Sandbox names: reusable lookup keys.

use crate::error::{Error, Result};

/// Longest accepted name, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Checks a sandbox name: 1..=128 UTF-8 bytes, no control characters, no
/// `/`, and not `.` or `..` (names appear in paths, logs and URLs).
pub fn validate_name(name: &str) -> Result<()> {
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
            "a/b".into(),
            "..".into(),
            "x\n".into(),
            " x".into(),
        ] {
            let err = validate_name(&bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidName, "{bad:?}");
        }
        // 128 bytes of multi-byte UTF-8 (32 four-byte characters) is accepted.
        assert!(validate_name(&"😀".repeat(32)).is_ok());
    }
}

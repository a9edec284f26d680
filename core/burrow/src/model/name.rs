//! Sandbox names: reusable lookup keys.

use crate::error::{Error, Result};

/// Longest accepted name, in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Longest accepted scope (the part of a scoped name before its `/`).
pub const MAX_SCOPE_BYTES: usize = 32;

/// Checks a sandbox name: 1..=128 UTF-8 bytes, no control characters, and
/// not `.` or `..` (names appear in paths, logs and URLs), optionally in a
/// scope: `<scope>/<name>`, one `/`, the scope as [`validate_scope`] says.
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
}

//! Snapshots: a sandbox's state saved under a name, usable as an image.

use serde::{Deserialize, Serialize};

use super::{DriverKind, SandboxId};
use crate::error::{Error, Result};

/// Longest accepted snapshot name, in bytes.
pub const MAX_SNAPSHOT_NAME: usize = 128;

/// The image reference prefix that names a snapshot (`snapshot:NAME`).
pub const SNAPSHOT_IMAGE_PREFIX: &str = "snapshot:";

/// Checks a snapshot name: 1..=128 bytes of ASCII letters, digits, `_`,
/// `-` and `.`, starting with a letter or a digit (names appear in image
/// references, paths and URLs), optionally in a scope as a sandbox name
/// may be (`<scope>/<name>`: see [`super::name::validate_scope`]).
pub fn validate_snapshot_name(name: &str) -> Result<()> {
    match name.split_once('/') {
        Some((scope, base)) => {
            super::name::validate_scope(scope).map_err(|e| Error::InvalidArgument {
                argument: "snapshot name".into(),
                reason: match e {
                    Error::InvalidName { reason } => reason,
                    other => other.to_string(),
                },
            })?;
            validate_snapshot_base(base)
        }
        None => validate_snapshot_base(name),
    }
}

/// Checks a snapshot name without a scope (see [`validate_snapshot_name`]).
pub fn validate_snapshot_base(name: &str) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::InvalidArgument {
            argument: "snapshot name".into(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("the name is empty".into());
    }
    if name.len() > MAX_SNAPSHOT_NAME {
        return fail(format!(
            "the name is {} bytes long; at most {MAX_SNAPSHOT_NAME} are allowed",
            name.len()
        ));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return fail(format!("{name:?} does not start with a letter or a digit"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return fail(format!(
            "{name:?} contains {c:?}; letters, digits, '_', '-' and '.' are allowed"
        ));
    }
    Ok(())
}

/// The snapshot an image reference names (`snapshot:NAME`), if it names
/// one.
pub fn snapshot_of_image(image: &str) -> Option<&str> {
    image.strip_prefix(SNAPSHOT_IMAGE_PREFIX)
}

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnapshotKind {
    /// The sandbox's files: its writable layer over its image, as an OCI
    /// image (usable wherever an image is, pushable to a registry).
    #[default]
    Filesystem,
    /// A running vm sandbox whole: its files, memory and processes.
    /// Restored into a new sandbox with its processes running.
    Full,
}

impl SnapshotKind {
    /// The kind as a string.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotKind::Filesystem => "filesystem",
            SnapshotKind::Full => "full",
        }
    }

    /// Parses [`SnapshotKind::as_str`] output.
    pub fn parse(s: &str) -> Option<Self> {
        [SnapshotKind::Filesystem, SnapshotKind::Full]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// How to take a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SnapshotOptions {
    /// What to save (files only, the default; or a running vm whole).
    #[serde(default)]
    pub kind: SnapshotKind,
}

impl SnapshotOptions {
    /// Files only.
    pub fn filesystem() -> Self {
        SnapshotOptions::default()
    }
    /// Files, memory and processes (a running vm sandbox).
    pub fn full() -> Self {
        SnapshotOptions {
            kind: SnapshotKind::Full,
        }
    }
}

/// A stored snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SnapshotInfo {
    /// Its name (unique in the backend).
    pub name: String,
    /// What it holds.
    pub kind: SnapshotKind,
    /// The image reference that creates sandboxes from it
    /// (`snapshot:NAME`).
    pub image: String,
    /// The content digest of its OCI image manifest (`sha256:...`).
    pub digest: String,
    /// Bytes it adds to the store: its own layer (and, for a full
    /// snapshot, the saved memory); the base image's layers are shared.
    pub size: u64,
    /// The sandbox it was taken from (which may be gone since).
    pub source_id: SandboxId,
    /// That sandbox's name at the time.
    pub source_name: String,
    /// That sandbox's image.
    pub base_image: String,
    /// The driver that ran it.
    pub driver: DriverKind,
    /// When it was taken, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn names() {
        for good in ["a", "base-1", "v1.2_x", &"a".repeat(128)] {
            assert!(validate_snapshot_name(good).is_ok(), "{good}");
        }
        for bad in [
            String::new(),
            "a".repeat(129),
            ".hidden".into(),
            "-x".into(),
            "a/b/c".into(),
            "a:b".into(),
            "a b".into(),
            "é".into(),
            "a\0".into(),
        ] {
            let e = validate_snapshot_name(&bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn image_references() {
        assert_eq!(snapshot_of_image("snapshot:base"), Some("base"));
        assert_eq!(snapshot_of_image("busybox"), None);
        assert_eq!(SnapshotKind::parse("full"), Some(SnapshotKind::Full));
        assert_eq!(SnapshotKind::parse("memory"), None);
    }
}

//! Sandbox ids: opaque, random, never reused.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Opaque identity of one persisted sandbox. A recreated name gets a new id;
/// ids are 128 random bits and are never reused.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxId(String);

const PREFIX: &str = "sb_";
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

impl SandboxId {
    /// A fresh random id.
    pub fn new() -> Self {
        let bits: u128 = rand::random();
        let mut s = String::with_capacity(PREFIX.len() + 26);
        s.push_str(PREFIX);
        for i in (0..26).rev() {
            let idx = ((bits >> (i * 5)) & 31) as usize;
            s.push(ALPHABET[idx] as char);
        }
        SandboxId(s)
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SandboxId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SandboxId({})", self.0)
    }
}

impl FromStr for SandboxId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let body = s.strip_prefix(PREFIX).ok_or_else(|| bad_id(s))?;
        if body.len() != 26 || !body.bytes().all(|b| ALPHABET.contains(&b)) {
            return Err(bad_id(s));
        }
        // 26 base32 digits hold 130 bits; the top digit may only carry 3.
        if !matches!(body.as_bytes()[0], b'0'..=b'7') {
            return Err(bad_id(s));
        }
        Ok(SandboxId(s.to_owned()))
    }
}

fn bad_id(s: &str) -> Error {
    Error::InvalidArgument {
        argument: "id".into(),
        reason: format!("{s:?} is not a sandbox id (expected sb_ followed by 26 base32 digits)"),
    }
}

impl TryFrom<String> for SandboxId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

impl From<SandboxId> for String {
    fn from(id: SandboxId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_differ() {
        let a = SandboxId::new();
        let b = SandboxId::new();
        assert_ne!(a, b);
        assert_eq!(a.as_str().parse::<SandboxId>().unwrap(), a);
        assert_eq!(a.as_str().len(), 29);
    }

    #[test]
    fn bad_ids_are_rejected() {
        for s in [
            "",
            "sb_",
            "xx_0000000000000000000000000",
            "sb_0000000000000000000000000u",
            "sb_z0000000000000000000000000",
        ] {
            let err = s.parse::<SandboxId>().unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{s}");
        }
    }
}

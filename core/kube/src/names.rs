//! Kubernetes object names for burrow names, ids and runs.
//!
//! A burrow name is 1..128 UTF-8 bytes of almost anything; an object name
//! is a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most
//! 253 characters). The record of a name is the object `n-<base32(name)>`:
//! lowercase RFC 4648 base32 without padding is a bijection from byte
//! strings to `[a-z2-7]*`, so two names never share an object, and the
//! longest name (128 bytes) gives 2 + 205 characters. Because the object
//! name is a function of the burrow name, the API server's create conflict
//! on it is the name claim: of concurrent creates, exactly one wins.
//!
//! A run is the pod `<id>-g<generation>` (`sb_` becomes `sb-`): one pod per
//! generation, never reused, at most 40 characters (a valid hostname).

use burrow::SandboxId;

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The record object's name for a burrow `name`.
pub fn record_name(name: &str) -> String {
    let mut out = String::with_capacity(2 + name.len() * 8 / 5 + 1);
    out.push_str("n-");
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in name.as_bytes() {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// The burrow name a record object's name stands for, if it is one.
pub fn name_of_record(object: &str) -> Option<String> {
    let encoded = object.strip_prefix("n-")?;
    let mut bytes = Vec::with_capacity(encoded.len() * 5 / 8);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for c in encoded.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        buffer = (buffer << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
        }
    }
    // Leftover bits must be the zero padding of the last character, and
    // fewer than 5 (else a character too many was appended).
    if bits >= 5 || buffer & ((1 << bits) - 1) != 0 {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The pod of run `generation` of sandbox `id`.
pub fn pod_name(id: &SandboxId, generation: u64) -> String {
    format!("{}-g{generation}", id.as_str().replace('_', "-"))
}

/// Label values (at most 63 characters) naming a sandbox and a run.
pub fn id_label(id: &SandboxId) -> String {
    id.as_str().replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::is_dns_subdomain;

    #[test]
    fn names_map_to_valid_distinct_objects_and_back() {
        let long = "é".repeat(64); // 128 bytes
        let names = [
            "a", "A", "web", "Web", "web.1", "we/b", "x y", "日本", "-", "--", "a-", "_", &long,
        ];
        let mut seen = std::collections::HashSet::new();
        for name in names {
            let object = record_name(name);
            assert!(is_dns_subdomain(&object), "{name:?} -> {object}");
            assert!(seen.insert(object.clone()), "collision on {object}");
            assert_eq!(name_of_record(&object).as_deref(), Some(name), "{object}");
        }
        assert_eq!(record_name(&long).len(), 207);
    }

    #[test]
    fn exhaustive_short_names_do_not_collide() {
        // Every 1- and 2-byte ASCII string: a bijection on these too.
        let mut seen = std::collections::HashSet::new();
        for a in 0x20u8..0x7f {
            let one = (a as char).to_string();
            assert!(seen.insert(record_name(&one)));
            for b in 0x20u8..0x7f {
                let two: String = [a as char, b as char].iter().collect();
                let object = record_name(&two);
                assert!(seen.insert(object.clone()));
                assert_eq!(name_of_record(&object), Some(two));
            }
        }
    }

    #[test]
    fn foreign_objects_are_not_records() {
        for object in ["web", "n-", "n-A", "n-1", "n-b", "n-ab", "x-me"] {
            let decoded = name_of_record(object);
            assert!(
                decoded.as_deref().is_none_or(|n| record_name(n) == object),
                "{object} decoded to {decoded:?}"
            );
        }
        assert_eq!(name_of_record("n-"), Some(String::new()));
        assert_eq!(name_of_record("n-ab"), None, "padding bits set");
    }

    #[test]
    fn pods_are_hostnames() {
        let id = SandboxId::new();
        let pod = pod_name(&id, 12_345);
        assert!(pod.len() <= 63 && is_dns_subdomain(&pod), "{pod}");
        assert_eq!(id_label(&id).len(), id.as_str().len());
    }
}

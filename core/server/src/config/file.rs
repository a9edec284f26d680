//! The raw inputs, checked against the known settings: the file, read and
//! flattened to dotted keys, and the names of the `BURROW_SERVE_*`
//! environment variables. An unknown key or variable is an error with the
//! closest known one as a suggestion.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::error::{ConfigError, Origin};
use super::settings::{SETTINGS, TABLES};
use super::{CONFIG_ENV, ENV_PREFIX};

/// Rejects `BURROW_SERVE_*` variables that no setting reads.
pub(super) fn check_env_names(env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let known: Vec<&str> = SETTINGS
        .iter()
        .map(|s| s.env)
        .chain([CONFIG_ENV])
        .filter(|name| name.starts_with(ENV_PREFIX))
        .collect();
    for name in env.keys() {
        if name.starts_with(ENV_PREFIX) && !known.contains(&name.as_str()) {
            return Err(ConfigError::UnknownEnv {
                name: name.clone(),
                suggestion: closest(name, known.iter().copied()),
            });
        }
    }
    Ok(())
}

/// The candidate closest to `word` by edit distance, if close enough to be a
/// plausible typo.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let leaf = word.rsplit('.').next().unwrap_or(word);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        // A known key in the wrong table (`gateway.idle_timeout`) is a match.
        let d = if word.contains('.') && c.rsplit('.').next() == Some(leaf) {
            0
        } else {
            edit_distance(word, c)
        };
        if best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    let limit = (word.chars().count() / 3).clamp(1, 4);
    best.filter(|(d, _)| *d <= limit).map(|(_, c)| c.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Reads the file and flattens it to `dotted.key -> value`, rejecting
/// unknown keys.
pub(super) fn read_file(path: &Path) -> Result<BTreeMap<String, toml::Value>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            reason: toml_reason(&text, &e),
        })?;
    let known: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let unknown = |key: String| ConfigError::UnknownKey {
        path: path.to_path_buf(),
        suggestion: closest(&key, known.iter().copied()),
        key,
    };
    let mut values = BTreeMap::new();
    for (key, value) in table {
        if TABLES.contains(&key.as_str()) {
            let toml::Value::Table(inner) = value else {
                return Err(ConfigError::Invalid {
                    origin: Origin::File(path.to_path_buf()),
                    reason: format!(
                        "expected a table ([{key}]), found {} `{value}`",
                        value.type_str()
                    ),
                    key,
                });
            };
            for (sub, value) in inner {
                let full = format!("{key}.{sub}");
                if !known.contains(full.as_str()) {
                    return Err(unknown(full));
                }
                values.insert(full, value);
            }
        } else if known.contains(key.as_str()) && !key.contains('.') {
            values.insert(key, value);
        } else {
            return Err(unknown(key));
        }
    }
    Ok(values)
}

/// One-line reason of a TOML error: `line L, column C: message`.
fn toml_reason(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

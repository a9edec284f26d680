//! Forks: a running sandbox copied into new sandboxes.

use serde::{Deserialize, Serialize};

use super::validate_name;
use crate::error::{Error, Result};

/// The most copies one fork makes.
pub const MAX_FORK_COUNT: u32 = 64;

/// How to fork a running sandbox ([`crate::Backend::fork`]).
///
/// A vm sandbox's copies are the running guest itself (memory, processes
/// and files, each with its own identity); a container's start from a copy
/// of the parent's files (its processes are not copied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ForkOptions {
    /// How many copies: 1 to [`MAX_FORK_COUNT`]. With `names` it may be
    /// left 0 (one per name); else it must be their number.
    #[serde(default)]
    pub count: u32,
    /// The copies' names; empty: `<parent>-fork-<n>`, numbered from 1 past
    /// the names taken.
    #[serde(default)]
    pub names: Vec<String>,
    /// The copies survive the process that forked them (as a detached
    /// create's).
    #[serde(default)]
    pub detached: bool,
}

impl ForkOptions {
    /// `count` copies with names chosen for them.
    pub fn count(count: u32) -> Self {
        ForkOptions {
            count,
            names: Vec::new(),
            detached: false,
        }
    }

    /// One copy for each of `names`.
    pub fn named<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        ForkOptions {
            count: names.len() as u32,
            names,
            detached: false,
        }
    }

    /// Survive the forking process (or not).
    #[must_use]
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// How many copies: one per name if there are names, else `count`.
    pub fn copies(&self) -> usize {
        if self.names.is_empty() {
            self.count as usize
        } else {
            self.names.len()
        }
    }

    /// Checks the count and the names (valid, distinct, as many as the
    /// count).
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::InvalidArgument {
                argument: "fork".into(),
                reason,
            })
        };
        let copies = self.copies();
        if copies == 0 || copies > MAX_FORK_COUNT as usize {
            return bad(format!("count {copies} is outside 1..={MAX_FORK_COUNT}"));
        }
        if !self.names.is_empty() && self.count != 0 && self.names.len() != self.count as usize {
            return bad(format!(
                "{} names for a count of {}",
                self.names.len(),
                self.count
            ));
        }
        for (i, name) in self.names.iter().enumerate() {
            validate_name(name)?;
            if self.names[..i].contains(name) {
                return bad(format!("the name {name:?} is given twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn counts_and_names_are_checked() {
        assert!(ForkOptions::count(1).validate().is_ok());
        assert!(ForkOptions::count(MAX_FORK_COUNT).validate().is_ok());
        assert!(ForkOptions::named(["a", "b"]).validate().is_ok());
        let by_names: ForkOptions = serde_json::from_str(r#"{"names":["a","b"]}"#).unwrap();
        assert!(by_names.validate().is_ok());
        assert_eq!(by_names.copies(), 2);
        let bad = [
            ForkOptions::count(0),
            ForkOptions::count(MAX_FORK_COUNT + 1),
            ForkOptions::named(["a", "a"]),
            ForkOptions {
                count: 3,
                ..ForkOptions::named(["a", "b"])
            },
            ForkOptions::named(Vec::<String>::new()),
        ];
        for opts in bad {
            let e = opts.validate().unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{opts:?}");
        }
        let e = ForkOptions::named(["ok", "a/b/c"]).validate().unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidName);
    }
}

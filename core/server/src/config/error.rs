//! What is wrong with a configuration, and where the value came from.

use std::fmt;
use std::path::PathBuf;

use super::settings::Setting;

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A key in this configuration file.
    File(PathBuf),
    /// This environment variable.
    Env(String),
    /// This command-line flag of `burrow serve` (`--tls-cert`).
    Flag(String),
    /// The built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "in configuration file {}", path.display()),
            Origin::Env(name) => write!(f, "from environment variable {name}"),
            Origin::Flag(flag) => write!(f, "from flag {flag}"),
            Origin::Default => f.write_str("(built-in default)"),
        }
    }
}

/// A configuration that cannot be used; the server must not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file has a key no setting uses (a typo, or a key in the wrong table).
    #[error(
        "unknown key `{key}` in configuration file {}{}",
        path.display(),
        did_you_mean(suggestion.as_deref(), "`")
    )]
    UnknownKey {
        /// The configuration file.
        path: PathBuf,
        /// Dotted path of the key, e.g. `reaper.idle_timout`.
        key: String,
        /// The closest known key, if one is close.
        suggestion: Option<String>,
    },
    /// A value is malformed or out of range.
    #[error("invalid `{key}` {origin}: {reason}")]
    Invalid {
        /// Where the value came from.
        origin: Origin,
        /// Dotted path of the setting's key in the file, e.g. `gateway.lease_ttl`.
        key: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A setting that goes with another one is missing (`tls.key` without
    /// `tls.cert`, or the other way round).
    #[error("`{key}` is not set, but `{with}` is ({origin}): {reason}")]
    Missing {
        /// Dotted path of the missing setting, e.g. `tls.key`.
        key: String,
        /// The setting that is set and needs it.
        with: String,
        /// Where that one came from.
        origin: Origin,
        /// What to do.
        reason: String,
    },
    /// The configuration file cannot be read.
    #[error("cannot read configuration file {}: {error}", path.display())]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The configuration file is not valid TOML.
    #[error("configuration file {} is not valid TOML: {reason}", path.display())]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// The backend type is not one this server supports.
    #[error(
        "unknown backend type \"{value}\" for `backend` {origin}; supported: local, kubernetes"
    )]
    UnknownBackend {
        /// Where the value came from.
        origin: Origin,
        /// The backend type asked for.
        value: String,
    },
    /// A `BURROW_SERVE_*` environment variable that no setting uses.
    #[error(
        "unknown environment variable {name}: no burrow serve setting reads it{}",
        did_you_mean(suggestion.as_deref(), "")
    )]
    UnknownEnv {
        /// The variable's name.
        name: String,
        /// The closest known variable, if one is close.
        suggestion: Option<String>,
    },
}

fn did_you_mean(suggestion: Option<&str>, quote: &str) -> String {
    match suggestion {
        Some(s) => format!("; did you mean {quote}{s}{quote}?"),
        None => String::new(),
    }
}

/// [`ConfigError::Invalid`] for setting `s`.
pub(super) fn invalid(origin: &Origin, s: Setting, reason: String) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.clone(),
        key: s.key.to_owned(),
        reason,
    }
}

//! The tools' arguments: their JSON schemas are the tools' contract
//! (unknown fields are refused).

use serde::Deserialize;

/// `create` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The sandbox's name (a plain name: no `/`).
    pub name: String,
    /// The image (a registry reference, or a named image; a host directory
    /// or a snapshot only where the server allows it).
    pub image: String,
    /// CPU limit in cores (absent: the server's maximum, if it has one).
    pub cpus: Option<f64>,
    /// Memory limit in MiB (absent: the server's maximum, if it has one).
    pub memory_mb: Option<u64>,
    /// Network rules the sandbox may reach (`tcp:example.com:443`, ...);
    /// absent: no network.
    pub network_allow: Option<Vec<String>>,
    /// Seconds idle before the sandbox is stopped (its files stay).
    pub idle_timeout_s: Option<u64>,
}

/// Arguments naming a sandbox.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameArgs {
    /// The sandbox's name.
    pub name: String,
}

/// `exec` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The sandbox's name.
    pub name: String,
    /// The command and its arguments.
    pub argv: Vec<String>,
}

/// Arguments naming a file in a sandbox.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    /// The sandbox's name.
    pub name: String,
    /// An absolute path in the sandbox.
    pub path: String,
}

/// `fs_write` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The sandbox's name.
    pub name: String,
    /// An absolute path in the sandbox.
    pub path: String,
    /// The content: text, or base64 when `base64` is true.
    pub content: String,
    /// Whether `content` is base64 (for binary files).
    #[serde(default)]
    pub base64: bool,
}

/// `fs_remove` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    /// The sandbox's name.
    pub name: String,
    /// An absolute path in the sandbox.
    pub path: String,
    /// Remove a directory and what it holds.
    #[serde(default)]
    pub recursive: bool,
}

/// `logs` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    /// The sandbox's name.
    pub name: String,
    /// The last this many lines (default 100, at most 1000).
    pub tail: Option<usize>,
}

/// `read` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The process, as `spawn` gave it.
    pub process: u64,
}

/// The largest file `fs_read` returns and `fs_write` takes.
pub const MAX_FILE: usize = 4 * 1024 * 1024;

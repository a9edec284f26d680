//! Layout of the burrow home directory.
//!
//! ```text
//! $BURROW_HOME/            0700
//!   state.db               SQLite state (WAL)
//!   locks/                 per-name transition and runtime-lifetime lock files
//!   run/                   supervisor sockets (short hashed names, 0600)
//!   sandboxes/<id>/        per-sandbox writable layer, runtime state, logs
//!   volumes/<name>/        named volumes (kept when sandboxes are removed)
//!   images/                image cache
//! ```

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::model::SandboxId;

/// The burrow home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

/// Longest unix socket path the kernel accepts (sun_path minus the NUL).
const MAX_SOCKET_PATH: usize = 107;

impl Home {
    /// The home at [`Home::default_root`].
    pub fn from_env() -> Result<Home> {
        Home::at(Home::default_root()?)
    }

    /// `$BURROW_HOME`, else `$XDG_DATA_HOME/burrow`, else `~/.local/share/burrow`.
    pub fn default_root() -> Result<PathBuf> {
        if let Some(h) = std::env::var_os("BURROW_HOME").filter(|h| !h.is_empty()) {
            return Ok(PathBuf::from(h));
        }
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
            return Ok(PathBuf::from(x).join("burrow"));
        }
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::InvalidConfig {
                field: "home".into(),
                reason: "neither BURROW_HOME nor HOME is set".into(),
            })?;
        Ok(PathBuf::from(home).join(".local/share/burrow"))
    }

    /// A home at an explicit path (created 0700 if missing).
    pub fn at(root: impl Into<PathBuf>) -> Result<Home> {
        let root = root.into();
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("resolving the current directory", None, e))?
                .join(root)
        };
        let home = Home { root };
        for dir in [
            home.root.clone(),
            home.locks_dir(),
            home.run_dir(),
            home.sandboxes_dir(),
            home.volumes_dir(),
            home.images_dir(),
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Error::io("creating the burrow home", Some(&dir), e))?;
        }
        std::fs::set_permissions(&home.root, std::fs::Permissions::from_mode(0o700)).map_err(
            |e| {
                Error::io(
                    "restricting the burrow home to its owner",
                    Some(&home.root),
                    e,
                )
            },
        )?;
        let probe = home.socket_path(&SandboxId::new());
        if probe.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(Error::InvalidConfig {
                field: "home".into(),
                reason: format!(
                    "{} is too long for unix socket paths under it (at most {} bytes are left for the home); set BURROW_HOME to a shorter path",
                    home.root.display(),
                    MAX_SOCKET_PATH - (probe.as_os_str().len() - home.root.as_os_str().len())
                ),
            });
        }
        Ok(home)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The SQLite database file.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("state.db")
    }
    /// Lock files.
    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }
    /// Supervisor sockets.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    /// Per-sandbox directories.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.root.join("sandboxes")
    }
    /// Named volumes.
    pub fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }
    /// Image cache.
    pub fn images_dir(&self) -> PathBuf {
        self.root.join("images")
    }
    /// Directory of one sandbox's own state (writable layer, logs).
    pub fn sandbox_dir(&self, id: &SandboxId) -> PathBuf {
        self.sandboxes_dir().join(id.as_str())
    }
    /// The per-name transition lock file.
    pub fn name_lock_path(&self, name: &str) -> PathBuf {
        self.locks_dir().join(format!("{}.name", short_hash(name)))
    }
    /// The per-name runtime-lifetime lock file.
    pub fn runtime_lock_path(&self, name: &str) -> PathBuf {
        self.locks_dir()
            .join(format!("{}.runtime", short_hash(name)))
    }
    /// The supervisor socket of a sandbox (hashed so any home fits).
    pub fn socket_path(&self, id: &SandboxId) -> PathBuf {
        self.run_dir()
            .join(format!("{}.sock", short_hash(id.as_str())))
    }
    /// A named volume's directory.
    pub fn volume_path(&self, volume: &str) -> PathBuf {
        self.volumes_dir().join(volume)
    }
}

/// First 16 hex digits of SHA-256: stable, short, filesystem-safe.
pub fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    hex::encode(&digest[..8])
}

//! Which backend a process uses when it is not given one: the one selection
//! shared by the handles ([`crate::Sandbox::get`], builders without
//! `.backend(..)`), the `burrow` CLI and the language bindings.
//!
//! `$BURROW_URL` set and not empty: the `burrow serve` there, with the token
//! `$BURROW_TOKEN`. Otherwise the local backend of `$BURROW_HOME` (else
//! `$XDG_DATA_HOME/burrow`, else `~/.local/share/burrow`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::Backend;
use crate::error::{Error, Result};

/// Environment variable with the URL of a `burrow serve`.
pub const ENV_URL: &str = "BURROW_URL";
/// Environment variable with the API token of that server.
pub const ENV_TOKEN: &str = "BURROW_TOKEN";

/// A backend selection: what [`BackendSelection::from_env`] reads, before
/// anything is opened. Comparable, so a caller that caches backends (the
/// Python binding, per process) can tell when the environment changed.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendSelection {
    /// The `burrow serve` at `url`.
    Remote {
        /// `$BURROW_URL`.
        url: String,
        /// `$BURROW_TOKEN` (unset or empty: none).
        token: Option<String>,
    },
    /// The local backend of a home.
    Local {
        /// The home (`None`: the default home, see
        /// `LocalBackend::default_home`).
        home: Option<PathBuf>,
    },
}

impl std::fmt::Debug for BackendSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never print the token.
            BackendSelection::Remote { url, token } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("token", &token.as_ref().map(|_| "<redacted>"))
                .finish(),
            BackendSelection::Local { home } => {
                f.debug_struct("Local").field("home", home).finish()
            }
        }
    }
}

impl BackendSelection {
    /// The selection of the environment: [`BackendSelection::Remote`] when
    /// `$BURROW_URL` is set and not empty, else the local backend of the
    /// default home. A variable that is not UTF-8 is
    /// [`Error::InvalidConfig`] for it, never a silent fallback to
    /// the local backend.
    pub fn from_env() -> Result<BackendSelection> {
        Self::from_env_or_home(None)
    }

    /// As [`BackendSelection::from_env`], with `home` (when given) as the
    /// local home instead of the default one. `$BURROW_URL` still wins: a
    /// remote server has its own home.
    pub fn from_env_or_home(home: Option<PathBuf>) -> Result<BackendSelection> {
        Ok(match var(ENV_URL)? {
            Some(url) => BackendSelection::Remote {
                url,
                token: var(ENV_TOKEN)?,
            },
            None => BackendSelection::Local { home },
        })
    }

    /// Whether this selects a `burrow serve`.
    pub fn is_remote(&self) -> bool {
        matches!(self, BackendSelection::Remote { .. })
    }

    /// Opens a new backend for this selection (the local one with the host
    /// defaults of the environment). A selection this build cannot serve
    /// (without the `remote` or `local` feature) is
    /// [`Error::InvalidConfig`].
    pub async fn open(&self) -> Result<Arc<dyn Backend>> {
        match self {
            BackendSelection::Remote { url, token } => open_remote(url, token.clone()),
            BackendSelection::Local { home } => open_local(home.as_ref()).await,
        }
    }
}

/// `name`'s value; unset and empty are both `None`.
fn var(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::InvalidConfig {
            field: name.into(),
            reason: "not valid UTF-8".into(),
        }),
    }
}

/// The default backend of this process: the `burrow serve` at `$BURROW_URL`
/// when that is set (and not empty), with the token `$BURROW_TOKEN`; else the
/// local backend of the default home (`$BURROW_HOME`, ...; the same one as
/// `LocalBackend::shared`). Opened once per selection: the same environment
/// gives the same backend, a changed one a new backend. The handles use it
/// when they are given no backend.
pub async fn default_backend() -> Result<Arc<dyn Backend>> {
    static SHARED: tokio::sync::Mutex<Option<(BackendSelection, Arc<dyn Backend>)>> =
        tokio::sync::Mutex::const_new(None);
    let selection = BackendSelection::from_env()?;
    let mut slot = SHARED.lock().await;
    if let Some((s, b)) = slot.as_ref() {
        if *s == selection {
            return Ok(b.clone());
        }
    }
    let backend = match &selection {
        BackendSelection::Local { home: None } => shared_local().await?,
        other => other.open().await?,
    };
    *slot = Some((selection, backend.clone()));
    Ok(backend)
}

#[cfg(feature = "remote")]
fn open_remote(url: &str, token: Option<String>) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(crate::RemoteBackend::build(
        url, token, ENV_URL, ENV_TOKEN,
    )?))
}

#[cfg(not(feature = "remote"))]
fn open_remote(_url: &str, _token: Option<String>) -> Result<Arc<dyn Backend>> {
    Err(Error::InvalidConfig {
        field: ENV_URL.into(),
        reason: "this build of burrow has no remote backend (the `remote` feature)".into(),
    })
}

#[cfg(feature = "local")]
async fn open_local(home: Option<&PathBuf>) -> Result<Arc<dyn Backend>> {
    let home = match home {
        Some(h) => h.clone(),
        None => crate::LocalBackend::default_home()?,
    };
    Ok(Arc::new(crate::LocalBackend::open_at(home).await?))
}

#[cfg(feature = "local")]
async fn shared_local() -> Result<Arc<dyn Backend>> {
    Ok(crate::LocalBackend::shared().await?)
}

#[cfg(not(feature = "local"))]
async fn open_local(_home: Option<&PathBuf>) -> Result<Arc<dyn Backend>> {
    Err(Error::InvalidConfig {
        field: ENV_URL.into(),
        reason: "not set, and this build of burrow has no local backend (the `local` feature)"
            .into(),
    })
}

#[cfg(not(feature = "local"))]
async fn shared_local() -> Result<Arc<dyn Backend>> {
    open_local(None).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_never_printed() {
        let s = BackendSelection::Remote {
            url: "http://127.0.0.1:7878".into(),
            token: Some("s3cret".into()),
        };
        let shown = format!("{s:?}");
        assert!(
            shown.contains("127.0.0.1:7878") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(s.is_remote());
        assert!(!BackendSelection::Local { home: None }.is_remote());
    }

    #[cfg(feature = "local")]
    #[tokio::test]
    async fn a_local_selection_opens_that_home() {
        let dir = tempfile::tempdir().unwrap();
        let s = BackendSelection::Local {
            home: Some(dir.path().to_owned()),
        };
        let backend = s.open().await.unwrap();
        assert!(backend.list(&Default::default()).await.unwrap().is_empty());
        assert!(dir.path().join("state.db").exists());
    }

    #[cfg(feature = "remote")]
    #[tokio::test]
    async fn a_remote_selection_is_checked_when_opened() {
        let bad = BackendSelection::Remote {
            url: "ftp://127.0.0.1".into(),
            token: None,
        };
        match bad.open().await.unwrap_err() {
            Error::InvalidConfig { field, .. } => assert_eq!(field, ENV_URL),
            other => panic!("unexpected {other:?}"),
        }
    }
}

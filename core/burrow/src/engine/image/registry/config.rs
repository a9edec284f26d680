//! Registry settings from the environment: which registries may be reached
//! over plain HTTP, and credentials from the Docker config file.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use super::reference::DOCKER_HUB;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Environment variable listing registries (`host[:port]`, comma-separated)
/// that are reached over plain HTTP.
pub const INSECURE_REGISTRIES_ENV: &str = "BURROW_INSECURE_REGISTRIES";
/// File under the burrow home with registry settings.
pub const REGISTRIES_FILE: &str = "registries.json";

/// Largest config file read.
const MAX_CONFIG: u64 = 1 << 20;

/// `$BURROW_HOME/registries.json`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistriesFile {
    /// Registries (`host[:port]`) reached over plain HTTP.
    #[serde(default)]
    insecure: Vec<String>,
}

/// The registries that may be reached over plain HTTP: the environment's
/// and the home's `registries.json`. A malformed file is an
/// [`Error::InvalidConfig`].
pub(crate) fn insecure_registries(home: &Home) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    if let Ok(list) = std::env::var(INSECURE_REGISTRIES_ENV) {
        out.extend(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(normalize_host),
        );
    }
    let path = home.root().join(REGISTRIES_FILE);
    let invalid = |reason: String| Error::InvalidConfig {
        field: REGISTRIES_FILE.into(),
        reason: format!("{}: {reason}", path.display()),
    };
    if let Some(data) = read_small(&path).map_err(|e| invalid(e.to_string()))? {
        let file: RegistriesFile =
            serde_json::from_slice(&data).map_err(|e| invalid(e.to_string()))?;
        for host in file.insecure {
            let host = host.trim();
            if host.is_empty() || host.contains(['/', ' ']) {
                return Err(invalid(format!(
                    "insecure registry {host:?} is not host[:port]"
                )));
            }
            out.insert(normalize_host(host));
        }
    }
    Ok(out)
}

fn read_small(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut data = Vec::new();
    file.take(MAX_CONFIG + 1).read_to_end(&mut data)?;
    if data.len() as u64 > MAX_CONFIG {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_CONFIG} bytes"
        )));
    }
    Ok(Some(data))
}

/// A registry key as written in configs (`https://host:port/v1/`, `host`)
/// reduced to `host[:port]`, with Docker Hub's aliases mapped to
/// `docker.io`.
pub(crate) fn normalize_host(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or_default();
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DOCKER_HUB.to_owned()
        }
        h => h.to_owned(),
    }
}

/// The Docker config file: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker/config.json"))
}

#[derive(Debug, Default, Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

/// Credentials for `registry` from the Docker config file, if it has any.
/// An unreadable or malformed file is logged and ignored (as the Docker CLI
/// does); credential helpers are not run.
pub(crate) fn docker_credentials(registry: &str) -> Option<(String, String)> {
    let path = docker_config_path()?;
    docker_credentials_in(&path, registry)
}

fn docker_credentials_in(path: &Path, registry: &str) -> Option<(String, String)> {
    let data = match read_small(path) {
        Ok(Some(d)) => d,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the Docker config file");
            return None;
        }
    };
    let config: DockerConfig = match serde_json::from_slice(&data) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring a malformed Docker config file");
            return None;
        }
    };
    let want = normalize_host(registry);
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| normalize_host(key) == want)
        .map(|(_, a)| a);
    let Some(entry) = entry else {
        if config.creds_store.is_some() || config.cred_helpers.contains_key(registry) {
            tracing::debug!(
                registry,
                "the Docker config names a credential helper; burrow does not run credential helpers"
            );
        }
        return None;
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok());
        match decoded.as_deref().and_then(|d| d.split_once(':')) {
            Some((user, pass)) => return Some((user.to_owned(), pass.to_owned())),
            None => {
                tracing::warn!(path = %path.display(), registry, "the Docker config's auth entry is not base64 user:password");
                return None;
            }
        }
    }
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Some((u.clone(), p.clone()));
    }
    if entry.identity_token.is_some() {
        tracing::debug!(
            registry,
            "the Docker config holds an identity token; burrow does not use identity tokens"
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_normalise() {
        assert_eq!(normalize_host("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(normalize_host("127.0.0.1:5000"), "127.0.0.1:5000");
        assert_eq!(
            normalize_host("http://reg.example:5000/v2/"),
            "reg.example:5000"
        );
    }

    #[test]
    fn docker_config_auths() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("config.json");
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{b64}"}},"https://index.docker.io/v1/":{{"username":"bob","password":"pw"}}}},"credsStore":"desktop"}}"#
            ),
        )
        .expect("write");
        assert_eq!(
            docker_credentials_in(&path, "reg.example:5000"),
            Some(("alice".into(), "s3cr:et".into()))
        );
        assert_eq!(
            docker_credentials_in(&path, "docker.io"),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(docker_credentials_in(&path, "other:1"), None);
        std::fs::write(&path, b"{not json").expect("write");
        assert_eq!(docker_credentials_in(&path, "reg.example:5000"), None);
    }

    #[test]
    fn registries_file_is_strict() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = Home::at(tmp.path().join("h")).expect("home");
        let file = home.root().join(REGISTRIES_FILE);
        std::fs::write(&file, r#"{"insecure": ["127.0.0.1:5000"]}"#).expect("write");
        let set = insecure_registries(&home).expect("read");
        assert!(set.contains("127.0.0.1:5000"), "{set:?}");
        for bad in [
            r#"{"insecure": ["x"], "other": 1}"#,
            r#"{"insecure": "x"}"#,
            "not json",
            r#"{"insecure": ["http://x/y"]}"#,
        ] {
            std::fs::write(&file, bad).expect("write");
            let err = insecure_registries(&home).expect_err(bad);
            assert_eq!(err.code(), crate::error::ErrorCode::InvalidConfig, "{bad}");
        }
    }
}

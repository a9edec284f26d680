//! Sealing a sandbox's secrets: at create, each secret gets its placeholder
//! and the sandbox its CA; the values and the CA's key are sealed with
//! ChaCha20-Poly1305 under a key kept in a file beside the database
//! (`secrets.key`, mode 0600, made on first use), with the sandbox's id as
//! associated data (a sealed blob moved to another row does not open).
//! Only the supervisor opens them, to give its network stack.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use burrow_net::secrets::tls::{generate_authority, host_roots, AuthorityPem, Interceptor};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use serde::{Deserialize, Serialize};

use crate::engine::paths::Home;
use crate::error::{Error, Result};
use crate::model::{SandboxConfig, SandboxId};

/// The key file's name under the burrow home.
const KEY_FILE: &str = "secrets.key";
/// Where extra CA certificates (PEM) for the far ends of intercepted HTTPS
/// come from, beside the host's trust store.
pub const EXTRA_CA_ENV: &str = "BURROW_SECRETS_EXTRA_CA";

/// What is sealed.
#[derive(Serialize, Deserialize)]
struct Sealed {
    values: BTreeMap<String, String>,
    ca_cert: String,
    ca_key: String,
}

/// A run's secrets: what its stack needs, and the CA certificate for the
/// guest's trust store.
#[derive(Debug, Clone)]
pub(crate) struct RunSecrets {
    pub(crate) stack: Arc<burrow_net::secrets::Secrets>,
    pub(crate) ca_cert: String,
}

/// Why sealed secrets did not open.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Why(String);

fn store_err(what: String, why: &str) -> Error {
    Error::store(what, Why(why.to_owned()))
}

fn key_path(home: &Home) -> PathBuf {
    home.root().join(KEY_FILE)
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(what, Some(path), e)
}

/// The key, made on first use: written to a file of its own, then linked
/// into place, so a racing process reads a whole key or makes none.
fn key(home: &Home, create: bool) -> Result<LessSafeKey> {
    let path = key_path(home);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let tmp = home
                .root()
                .join(format!(".{KEY_FILE}.{}", std::process::id()));
            let fresh: [u8; 32] = rand::random();
            {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .map_err(|e| io("creating the secrets key", &tmp, e))?;
                f.write_all(&fresh)
                    .and_then(|()| f.sync_all())
                    .map_err(|e| io("writing the secrets key", &tmp, e))?;
            }
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => fresh.to_vec(),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::read(&path).map_err(|e| io("reading the secrets key", &path, e))?
                }
                Err(e) => return Err(io("placing the secrets key", &path, e)),
            }
        }
        Err(e) => return Err(io("reading the secrets key", &path, e)),
    };
    let unbound = UnboundKey::new(&CHACHA20_POLY1305, &bytes).map_err(|_| {
        store_err(
            format!("the secrets key {}", path.display()),
            "it is not 32 bytes",
        )
    })?;
    Ok(LessSafeKey::new(unbound))
}

/// Gives each secret of `config` its placeholder and the sandbox its CA,
/// and seals the values and the CA's key for `id`; the values are taken
/// out of `config`. `None` when it has no secrets.
pub(crate) fn seal_new(
    home: &Home,
    id: &SandboxId,
    config: &mut SandboxConfig,
) -> Result<Option<String>> {
    if config.secrets.is_empty() {
        return Ok(None);
    }
    let mut values = BTreeMap::new();
    for (i, s) in config.secrets.iter_mut().enumerate() {
        let value = s.value.take().ok_or_else(|| Error::InvalidConfig {
            field: format!("secrets[{i}].value"),
            reason: "no value given".into(),
        })?;
        values.insert(s.name.clone(), value.expose().to_owned());
        s.placeholder = Some(crate::model::new_placeholder());
    }
    let ca = generate_authority(id.as_str()).map_err(|e| Error::Runtime {
        runtime: "secrets".into(),
        reason: e.to_string(),
    })?;
    let plain = serde_json::to_vec(&Sealed {
        values,
        ca_cert: ca.cert,
        ca_key: ca.key,
    })
    .map_err(|e| Error::store("encoding secrets", e))?;
    seal(home, id, plain).map(Some)
}

/// The secrets sealed for `from`, sealed again for `to` (a fork's copy:
/// the same values, placeholders and authority, which its files and
/// memory already hold).
pub(crate) fn reseal(
    home: &Home,
    from: &SandboxId,
    to: &SandboxId,
    sealed: &str,
) -> Result<String> {
    let plain = unseal(home, from, sealed)?;
    seal(home, to, plain)
}

fn seal(home: &Home, id: &SandboxId, plain: Vec<u8>) -> Result<String> {
    let key = key(home, true)?;
    let nonce_bytes: [u8; NONCE_LEN] = rand::random();
    let mut data = plain;
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce_bytes),
        Aad::from(id.as_str().as_bytes()),
        &mut data,
    )
    .map_err(|_| store_err("sealing secrets".into(), "the cipher refused"))?;
    let mut blob = nonce_bytes.to_vec();
    blob.extend_from_slice(&data);
    Ok(base64::engine::general_purpose::STANDARD.encode(blob))
}

/// Opens the sealed secrets of `id` for a run of `config`.
pub(crate) fn open(
    home: &Home,
    id: &SandboxId,
    config: &SandboxConfig,
    sealed: &str,
) -> Result<RunSecrets> {
    let plain = unseal(home, id, sealed)?;
    let sealed: Sealed =
        serde_json::from_slice(&plain).map_err(|e| Error::store("reading secrets", e))?;
    run_secrets(home, id, config, sealed)
}

/// The plain content of secrets sealed for `id`.
fn unseal(home: &Home, id: &SandboxId, sealed: &str) -> Result<Vec<u8>> {
    let cannot = |why: &str| cannot_open(home, id, why);
    let blob = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .map_err(|_| cannot("the sealed secrets are not base64"))?;
    if blob.len() < NONCE_LEN {
        return Err(cannot("the sealed secrets are cut short"));
    }
    let (nonce, data) = blob.split_at(NONCE_LEN);
    let key = key(home, false)?;
    let mut data = data.to_vec();
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| cannot("bad nonce"))?;
    let plain = key
        .open_in_place(nonce, Aad::from(id.as_str().as_bytes()), &mut data)
        .map_err(|_| cannot("they do not open with this key (was the key file replaced?)"))?;
    Ok(plain.to_vec())
}

fn cannot_open(home: &Home, id: &SandboxId, why: &str) -> Error {
    store_err(
        format!(
            "opening the secrets of {id} with {}",
            key_path(home).display()
        ),
        why,
    )
}

/// Continues [`open`]: the secrets' values and authority.
fn run_secrets(
    home: &Home,
    id: &SandboxId,
    config: &SandboxConfig,
    sealed: Sealed,
) -> Result<RunSecrets> {
    let cannot = |why: &str| cannot_open(home, id, why);
    let mut list = Vec::new();
    for s in &config.secrets {
        let (Some(placeholder), Some(value)) = (&s.placeholder, sealed.values.get(&s.name)) else {
            return Err(cannot(&format!("secret {} has no sealed value", s.name)));
        };
        list.push(burrow_net::secrets::Secret {
            name: s.name.clone(),
            placeholder: placeholder.clone(),
            value: value.clone(),
            hosts: s.parsed_hosts(),
            headers: s.headers.clone(),
        });
    }
    let ca = AuthorityPem {
        cert: sealed.ca_cert,
        key: sealed.ca_key,
    };
    let tls = Interceptor::new(id.as_str(), &ca, host_roots(&extra_roots())).map_err(|e| {
        Error::Runtime {
            runtime: "secrets".into(),
            reason: e.to_string(),
        }
    })?;
    Ok(RunSecrets {
        stack: Arc::new(burrow_net::secrets::Secrets::new(list, Some(tls))),
        ca_cert: ca.cert,
    })
}

/// The PEM bundles named by [`EXTRA_CA_ENV`] (a path, or several
/// separated by `:`); one that cannot be read is left out with a warning.
fn extra_roots() -> Vec<Vec<u8>> {
    let Some(list) = std::env::var_os(EXTRA_CA_ENV) else {
        return Vec::new();
    };
    std::env::split_paths(&list)
        .filter_map(|p| match std::fs::read(&p) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "{EXTRA_CA_ENV}: not read");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::model::Secret;

    #[test]
    fn sealed_values_open_only_for_their_sandbox_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let id = SandboxId::new();
        let mut config = SandboxConfig::new("img");
        config.secrets = vec![Secret::new("GH", "ghp_secret_value", ["api.github.com"])];
        let sealed = seal_new(&home, &id, &mut config).unwrap().unwrap();
        assert!(!sealed.contains("ghp_secret_value"));
        assert!(config.secrets[0].value.is_none());
        let placeholder = config.secrets[0].placeholder.clone().unwrap();
        assert!(burrow_net::secrets::is_placeholder(&placeholder));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(key_path(&home)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);

        let run = open(&home, &id, &config, &sealed).unwrap();
        assert_eq!(run.stack.list[0].value, "ghp_secret_value");
        assert_eq!(run.stack.list[0].placeholder, placeholder);
        assert!(run.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));

        // Another sandbox's id, or another key: nothing opens.
        let other = SandboxId::new();
        assert!(matches!(
            open(&home, &other, &config, &sealed),
            Err(Error::Store { .. })
        ));
        std::fs::remove_file(key_path(&home)).unwrap();
        assert!(open(&home, &id, &config, &sealed).is_err());
        key(&home, true).unwrap();
        assert!(matches!(
            open(&home, &id, &config, &sealed),
            Err(Error::Store { .. })
        ));
    }
}

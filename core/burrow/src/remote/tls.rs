//! TLS of `https://` server URLs: the roots a server's certificate is
//! checked against (the system's, plus the certificates of
//! `$BURROW_CA_CERT` for a private CA), and what a failed handshake is.
//!
//! A certificate the client does not trust is [`Error::Io`] (code `io`),
//! as a refused connection is: the connection could not be made and
//! nothing was sent. It is not retried: the client retries only `503`
//! answers, never a connection that failed.

use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

/// Environment variable naming a PEM file of CA certificates trusted for
/// `https://` server URLs, besides the system's.
pub const ENV_CA_CERT: &str = "BURROW_CA_CERT";

/// Largest `$BURROW_CA_CERT` file read.
const MAX_CA_FILE: u64 = 4 << 20;

/// The system's trust store (as rustls-native-certs reads it: the
/// system's, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), read once per process.
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if !found.errors.is_empty() {
            tracing::debug!(errors = ?found.errors, "some system CA certificates were not read");
        }
        found.certs
    })
}

/// The client configuration of `https://` URLs: the system's roots and
/// those of `$BURROW_CA_CERT` (when set and not empty). A file there that
/// cannot be read or holds no certificate is [`Error::InvalidConfig`] for
/// `BURROW_CA_CERT`.
pub(crate) fn client_config() -> Result<Arc<ClientConfig>> {
    let ca_file = match std::env::var_os(ENV_CA_CERT) {
        Some(v) if !v.is_empty() => Some(std::path::PathBuf::from(v)),
        _ => None,
    };
    client_config_with(ca_file.as_deref())
}

fn invalid(reason: String) -> Error {
    Error::InvalidConfig {
        field: ENV_CA_CERT.into(),
        reason,
    }
}

/// [`client_config`] with `ca_file` in place of `$BURROW_CA_CERT`.
pub(crate) fn client_config_with(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(native_roots().iter().cloned());
    if let Some(path) = ca_file {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| invalid(format!("{shown}: {e}")))?;
        if !meta.is_file() || meta.len() > MAX_CA_FILE {
            return Err(invalid(format!(
                "{shown} is not a PEM file of CA certificates (a regular file of at most \
                 {MAX_CA_FILE} bytes)"
            )));
        }
        let pem = std::fs::read(path).map_err(|e| invalid(format!("{shown}: {e}")))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("{shown} is not PEM: {e}")))?;
        if certs.is_empty() {
            return Err(invalid(format!(
                "{shown} holds no PEM CERTIFICATE block (the CA certificates to trust)"
            )));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| invalid(format!("{shown}: a certificate that cannot be used: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::protocol(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The API is HTTP/1.1 (with upgrades for the runtime stream).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name the server's certificate must hold (and the SNI): a DNS name
/// or an IP address. `None` for a host that is neither.
pub(crate) fn server_name(host: &str) -> Option<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).ok()
}

/// The error of a failed TLS handshake with the server at `url`: an
/// [`Error::Io`] whose source is the handshake's error (rustls' reason
/// inside), its context saying whether the certificate was not trusted.
pub(crate) fn handshake_error(url: &str, source: io::Error) -> Error {
    let rustls_error = source
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    let context = match rustls_error {
        Some(rustls::Error::InvalidCertificate(_)) => format!(
            "cannot connect to the burrow server at {url}: its TLS certificate is not trusted \
             (for a private CA, name its PEM file in {ENV_CA_CERT})"
        ),
        _ => format!("cannot connect to the burrow server at {url}: the TLS handshake failed"),
    };
    Error::Io {
        context,
        path: None,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn a_ca_file_that_cannot_be_used_is_invalid_config() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for path in [
            dir.path().join("missing.pem"),
            dir.path().to_path_buf(),
            empty,
            broken,
        ] {
            let err = client_config_with(Some(&path)).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidConfig, "{path:?}");
            match err {
                Error::InvalidConfig { field, .. } => assert_eq!(field, ENV_CA_CERT),
                other => panic!("{other:?}"),
            }
        }
        assert!(client_config_with(None).is_ok());
    }

    #[test]
    fn server_names() {
        assert!(server_name("burrow.example.com").is_some());
        assert!(server_name("127.0.0.1").is_some());
        assert!(server_name("::1").is_some());
        assert!(server_name("bad host").is_none());
    }

    #[test]
    fn an_untrusted_certificate_is_an_io_error() {
        let untrusted = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let err = handshake_error("https://h:1", untrusted);
        assert_eq!(err.code(), ErrorCode::Io);
        assert!(err.to_string().contains(ENV_CA_CERT), "{err}");
        let other = io::Error::new(io::ErrorKind::UnexpectedEof, "eof");
        let err = handshake_error("https://h:1", other);
        assert_eq!(err.code(), ErrorCode::Io);
        assert!(err.to_string().contains("https://h:1"), "{err}");
    }
}

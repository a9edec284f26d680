//! The registry side of a pull, through `oci-client` (the distribution
//! protocol, token and basic auth), and the mapping of its errors onto
//! burrow's codes:
//!
//! - the registry refused access (401/403, a failed token exchange):
//!   [`Error::Io`] with [`std::io::ErrorKind::PermissionDenied`];
//! - the registry cannot be reached (DNS, connection, TLS handshake, a plain
//!   HTTP registry that is not listed as insecure, timeouts, 5xx):
//!   [`Error::Io`] with the underlying kind;
//! - the image does not exist, or the registry sent content that is not a
//!   usable image (unknown manifest or blob, wrong digest, bad manifest):
//!   [`Error::InvalidImage`].

use std::io;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, SizedStream};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::Client;

use super::config::{docker_credentials, insecure_registries};
use super::reference::{ImageReference, DOCKER_HUB};
use super::PullOptions;
use crate::engine::image::digest::Digest;
use crate::engine::image::spec;
use crate::engine::paths::Home;
use crate::error::{Error, Result};

/// Manifest media types asked for.
const ACCEPT: &[&str] = &[
    spec::OCI_INDEX,
    spec::OCI_MANIFEST,
    spec::DOCKER_LIST,
    spec::DOCKER_MANIFEST,
];

const USER_AGENT: &str = concat!("burrow/", env!("CARGO_PKG_VERSION"));

/// A connection to one registry repository.
pub(crate) struct Remote {
    client: Client,
    auth: RegistryAuth,
    /// The reference as the user gave it (for errors).
    image: String,
    registry: String,
    plain_http: bool,
}

/// Makes ring rustls's process-wide crypto provider (once; a provider the
/// embedding application installed first is kept). The registry client's
/// TLS is built without a provider of its own.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Err only if another thread installed one meanwhile: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("registry", &self.registry)
            .field("auth", &self.auth)
            .field("plain_http", &self.plain_http)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A client for `reference`'s registry: plain HTTP only if `opts.insecure`
    /// or the registry is listed as insecure; credentials from `opts`, else
    /// the Docker config file, else anonymous.
    pub(crate) fn new(
        home: &Home,
        image: &str,
        reference: &ImageReference,
        opts: &PullOptions,
    ) -> Result<Remote> {
        let registry = reference.registry().to_owned();
        let resolved = reference.to_client().resolve_registry().to_owned();
        let insecure = insecure_registries(home)?;
        let plain_http = opts.insecure || insecure.contains(&registry);
        let protocol = if opts.insecure {
            ClientProtocol::Http
        } else if plain_http {
            ClientProtocol::HttpsExcept(vec![registry.clone(), resolved])
        } else {
            ClientProtocol::Https
        };
        let credentials = opts
            .credentials
            .clone()
            .or_else(|| docker_credentials(&registry))
            .or_else(|| {
                // Docker Hub is also keyed under its legacy name.
                (registry == DOCKER_HUB)
                    .then(|| docker_credentials("index.docker.io"))
                    .flatten()
            });
        let auth = match credentials {
            Some((user, pass)) => RegistryAuth::Basic(user, pass),
            None => RegistryAuth::Anonymous,
        };
        let config = ClientConfig {
            protocol,
            // burrow chooses the platform itself (see `select_platform`).
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(120)),
            user_agent: USER_AGENT,
            // Every connection (redirects too) through the guard's proxy.
            http_proxy: opts.proxy.clone(),
            https_proxy: opts.proxy.clone(),
            ..ClientConfig::default()
        };
        install_tls_provider();
        let client = Client::try_from(config).map_err(|e| {
            Error::io(
                format!("setting up a registry client for {registry}"),
                None,
                io::Error::other(e.to_string()),
            )
        })?;
        tracing::debug!(registry, plain_http, auth = ?auth, "registry client ready");
        Ok(Remote {
            client,
            auth,
            image: image.to_owned(),
            registry,
            plain_http,
        })
    }

    /// The registry client.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The credentials it uses.
    pub(crate) fn auth(&self) -> &RegistryAuth {
        &self.auth
    }

    /// Fetches the manifest or index `reference` names, verified against
    /// its digest (the pinned one, else the one the registry reports), and
    /// returns it with its digest and declared media type.
    pub(crate) async fn manifest(&self, reference: &ImageReference) -> Result<(Vec<u8>, Digest)> {
        let (body, _) = self
            .client
            .pull_manifest_raw(&reference.to_client(), &self.auth, ACCEPT)
            .await
            .map_err(|e| self.error(&format!("fetching the manifest of {reference}"), e))?;
        let digest = Digest::of(&body);
        if let Some(pinned) = reference.digest() {
            if digest.to_string() != pinned {
                return Err(Error::InvalidImage {
                    image: self.image.clone(),
                    reason: format!(
                        "the registry sent a manifest hashing to {digest} for {pinned}"
                    ),
                });
            }
        }
        Ok((body.to_vec(), digest))
    }

    /// Starts streaming a blob of `reference`'s repository.
    pub(crate) async fn blob(
        &self,
        reference: &ImageReference,
        digest: &Digest,
        size: u64,
        media_type: &str,
    ) -> Result<SizedStream> {
        let desc = OciDescriptor {
            media_type: media_type.to_owned(),
            digest: digest.to_string(),
            size: i64::try_from(size).unwrap_or(i64::MAX),
            ..OciDescriptor::default()
        };
        self.client
            .pull_blob_stream(&reference.to_client(), &desc)
            .await
            .map_err(|e| self.error(&format!("fetching blob {digest}"), e))
    }

    /// A stream error while a blob downloads.
    pub(crate) fn stream_error(&self, digest: &Digest, e: io::Error) -> Error {
        let what = format!("downloading blob {digest}");
        let inner = e.get_ref();
        if inner.is_some_and(|i| i.is::<oci_client::errors::DigestError>()) {
            return Error::InvalidImage {
                image: self.image.clone(),
                reason: format!("{what}: content mismatch: {e}"),
            };
        }
        let kind = match inner {
            Some(i) if e.kind() == io::ErrorKind::Other => io_kind_of_source(i).unwrap_or(e.kind()),
            _ => e.kind(),
        };
        let detail = inner.map_or_else(|| e.to_string(), |i| chain(i));
        let scheme = if self.plain_http { "http" } else { "https" };
        Error::io(
            format!("{what} from {scheme}://{}: {detail}", self.registry),
            None,
            io::Error::new(kind, detail),
        )
    }

    /// Maps an `oci-client` error (see the module docs).
    pub(crate) fn error(&self, what: &str, e: OciDistributionError) -> Error {
        let scheme = if self.plain_http { "http" } else { "https" };
        let io_err = |kind: io::ErrorKind, detail: String| {
            Error::io(
                format!("{what} from {scheme}://{}: {detail}", self.registry),
                None,
                io::Error::new(kind, detail.clone()),
            )
        };
        let denied = |detail: String| {
            io_err(
                io::ErrorKind::PermissionDenied,
                format!(
                    "access denied ({detail}); pass credentials or add them to the Docker config file"
                ),
            )
        };
        let invalid = |reason: String| Error::InvalidImage {
            image: self.image.clone(),
            reason: format!("{what}: {reason}"),
        };
        match e {
            OciDistributionError::UnauthorizedError { .. } => denied("401 unauthorized".into()),
            OciDistributionError::AuthenticationFailure(m) => {
                denied(format!("authentication failed: {}", m.trim()))
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let text = envelope.to_string();
                if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    denied(text)
                } else if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NotFound
                    )
                }) {
                    invalid(format!("not found in {}: {text}", self.registry))
                } else if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
                {
                    io_err(io::ErrorKind::QuotaExceeded, text)
                } else {
                    invalid(text)
                }
            }
            OciDistributionError::ServerError { code, message, .. } => match code {
                401 | 403 => denied(format!("HTTP {code}")),
                404 => invalid(format!("not found in {} (HTTP 404)", self.registry)),
                _ => io_err(
                    io::ErrorKind::Other,
                    format!("HTTP {code}: {}", message.trim()),
                ),
            },
            OciDistributionError::RequestError(re) => {
                let kind = io_kind(&re).unwrap_or(if re.is_timeout() {
                    io::ErrorKind::TimedOut
                } else if re.is_connect() {
                    io::ErrorKind::ConnectionRefused
                } else {
                    io::ErrorKind::Other
                });
                io_err(kind, chain(&re))
            }
            OciDistributionError::IoError(ioe) => io_err(ioe.kind(), ioe.to_string()),
            OciDistributionError::DigestError(d) => invalid(format!("content mismatch: {d}")),
            OciDistributionError::ImageManifestNotFoundError(m) => invalid(m),
            other => invalid(other.to_string()),
        }
    }
}

/// The kind of the first I/O error in `e`'s source chain.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(ioe) = err.downcast_ref::<io::Error>() {
            return Some(ioe.kind());
        }
        cur = err.source();
    }
    None
}

/// The kind of the first I/O error among `e`'s sources (not `e` itself).
fn io_kind_of_source(e: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<io::ErrorKind> {
    e.source().and_then(io_kind)
}

/// `e` and its sources, `: `-joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        let s = err.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = err.source();
    }
    out
}

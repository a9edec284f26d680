//! TLS on the server's TCP listeners: the certificate and key of `[tls]`,
//! read at startup and read again whenever the files change, and a
//! listener that hands axum only connections whose handshake finished.
//!
//! Reload: [`ReloadingCert`] is rustls' certificate resolver. It holds the
//! pair in use; a task ([`ServerTls::watch`]) looks at the two files once a
//! second (device, inode, size, modification and change times, following
//! symlinks: a Kubernetes Secret volume swaps a symlink) and, when they
//! changed, reads them again. A pair that loads (a certificate, a key, the
//! key the certificate's) replaces the one in use for the handshakes that
//! follow; established connections keep the session they have. A pair that
//! does not load keeps the one in use and is logged once, as a warning, for
//! as long as the files stay as they are; a pair seen changing (a rotation
//! that writes one file, then the other) is given one more look before it
//! is called bad.
//!
//! Handshakes run in tasks of their own, bounded by [`HANDSHAKE_TIMEOUT`]:
//! a client that says nothing, a plain HTTP client or a failed handshake
//! never holds up the accept loop.

use std::fs::Metadata;
use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Longest a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are looked at.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// Largest certificate or key file read (a chain is a few KiB).
const MAX_FILE: u64 = 1 << 20;

/// Why the certificate or the key cannot be used. Each variant names the
/// file; [`TlsError::setting`] says which setting names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read (missing, unreadable, too large).
    #[error("cannot read the TLS {what} {}: {error}", path.display())]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The certificate file has no certificate, or one that does not
    /// parse.
    #[error("no usable certificate in {}: {reason}", path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key file has no private key, or one rustls cannot use.
    #[error("no usable private key in {}: {reason}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the certificate's.
    #[error(
        "the private key {} does not match the certificate {} (it is another \
         certificate's key)",
        key.display(),
        cert.display()
    )]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// rustls refused the server configuration (its crypto provider
    /// offers no protocol version it can use).
    #[error("cannot set up TLS: {reason}")]
    Setup {
        /// What rustls said.
        reason: String,
    },
}

impl TlsError {
    /// The setting whose file is at fault: `tls.cert` or `tls.key`.
    pub fn setting(&self) -> &'static str {
        match self {
            TlsError::Read { what: "key", .. }
            | TlsError::Key { .. }
            | TlsError::Mismatch { .. } => "tls.key",
            _ => "tls.cert",
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let fail = |error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(fail)?;
    if !meta.is_file() {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    if meta.len() > MAX_FILE {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} bytes; a PEM file here is at most {MAX_FILE}",
                meta.len()
            ),
        )));
    }
    std::fs::read(path).map_err(fail)
}

/// Reads and checks the pair of `config`: a certificate chain, a private
/// key, and the key the certificate's.
pub fn load_pair(config: &TlsConfig, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read("certificate", &config.cert)?;
    let key_pem = read("key", &config.key)?;
    let bad_cert = |reason: String| TlsError::Certificate {
        path: config.cert.clone(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_cert(format!("not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(bad_cert(
            "no PEM CERTIFICATE block (the file should hold the server's certificate, then its \
             intermediates)"
                .into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Key {
        path: config.key.clone(),
        reason: match e {
            pem::Error::NoItemsFound => "no PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY \
                                         block"
                .into(),
            e => format!("not PEM: {e}"),
        },
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::Key {
            path: config.key.clone(),
            reason: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key that cannot say its public half is taken on trust, as
        // rustls itself does.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::Mismatch {
            cert: config.cert.clone(),
            key: config.key.clone(),
        }),
        // The end-entity certificate itself does not parse.
        Err(e) => Err(bad_cert(format!("the first certificate: {e}"))),
    }
}

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Both files' stamps (`None`: the file is not there or cannot be
/// looked at), following symlinks.
type Stamps = (Option<Stamp>, Option<Stamp>);

fn stamps(config: &TlsConfig) -> Stamps {
    let stamp = |p: &Path| std::fs::metadata(p).ok().map(|m| Stamp::of(&m));
    (stamp(&config.cert), stamp(&config.key))
}

/// What the watcher knows about the files.
#[derive(Debug)]
struct Watch {
    /// The stamps of the pair in use.
    served: Stamps,
    /// Stamps of a pair that failed to load once (looked at again at the
    /// next tick before it is called bad).
    failed_once: Option<Stamps>,
    /// Stamps of the bad pair already warned about.
    warned: Option<Stamps>,
}

/// rustls' certificate resolver: the pair in use, replaced when the files
/// change (see the [module documentation](self)).
#[derive(Debug)]
pub struct ReloadingCert {
    config: TlsConfig,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    watch: Mutex<Watch>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// What one look at the files did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Nothing changed (or a bad pair already reported is still there).
    Unchanged,
    /// The new pair is in use.
    Reloaded,
    /// The files changed but do not load; the previous pair stays in use.
    Kept,
}

impl ReloadingCert {
    fn new(config: &TlsConfig) -> Result<ReloadingCert, TlsError> {
        let provider = provider();
        // The stamps first: a change racing the read is seen next time.
        let served = stamps(config);
        let pair = load_pair(config, &provider)?;
        Ok(ReloadingCert {
            config: config.clone(),
            provider,
            current: RwLock::new(Arc::new(pair)),
            watch: Mutex::new(Watch {
                served,
                failed_once: None,
                warned: None,
            }),
        })
    }

    /// Looks at the files once, and loads them if they changed.
    pub fn check(&self) -> Reload {
        let mut w = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        let now = stamps(&self.config);
        if now == w.served || w.warned == Some(now) {
            w.failed_once = None;
            return Reload::Unchanged;
        }
        match load_pair(&self.config, &self.provider) {
            Ok(pair) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(pair);
                *w = Watch {
                    served: now,
                    failed_once: None,
                    warned: None,
                };
                tracing::info!(
                    cert = %self.config.cert.display(),
                    key = %self.config.key.display(),
                    "TLS certificate reloaded: new connections get it"
                );
                Reload::Reloaded
            }
            Err(error) => {
                // Files still being written (one of the pair, or half of
                // one): one more look before they are called bad.
                if w.failed_once != Some(now) {
                    w.failed_once = Some(now);
                    return Reload::Unchanged;
                }
                w.warned = Some(now);
                w.failed_once = None;
                tracing::warn!(
                    error = %burrow::error::report(&error),
                    "the TLS certificate or key changed but cannot be used; still serving the \
                     previous certificate"
                );
                Reload::Kept
            }
        }
    }
}

/// The server side of TLS: the configuration every TCP listener's
/// handshakes use, with a certificate that follows the files.
#[derive(Debug, Clone)]
pub struct ServerTls {
    cert: Arc<ReloadingCert>,
    config: Arc<rustls::ServerConfig>,
}

impl ServerTls {
    /// Reads the pair of `config`; a pair that cannot be used is the error
    /// naming the file and why.
    pub fn load(config: &TlsConfig) -> Result<ServerTls, TlsError> {
        let cert = Arc::new(ReloadingCert::new(config)?);
        let mut server = rustls::ServerConfig::builder_with_provider(cert.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup {
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(cert.clone());
        // The API is HTTP/1.1 (with upgrades for the runtime stream).
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            cert,
            config: Arc::new(server),
        })
    }

    /// The certificate resolver (for tests and `check`).
    pub fn cert(&self) -> &Arc<ReloadingCert> {
        &self.cert
    }

    /// Looks at the files every [`RELOAD_INTERVAL`] until `stop` resolves.
    pub fn watch(&self, stop: impl Future<Output = ()> + Send + 'static) {
        let cert = self.cert.clone();
        tokio::spawn(async move {
            let watch = async move {
                let mut tick = tokio::time::interval(RELOAD_INTERVAL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let cert = cert.clone();
                    // Small files, but file I/O: off the async workers.
                    let _ = tokio::task::spawn_blocking(move || cert.check()).await;
                }
            };
            tokio::select! {
                () = watch => {}
                () = stop => {}
            }
        });
    }

    /// A listener of TLS connections over `tcp` (`nodelay` set on each).
    pub fn listener(&self, tcp: TcpListener) -> TlsListener {
        TlsListener {
            tcp,
            config: self.config.clone(),
            handshakes: JoinSet::new(),
        }
    }
}

/// An [`axum::serve::Listener`] of TLS connections: TCP connections are
/// accepted as they come, each handshake runs in a task of its own (at most
/// [`HANDSHAKE_TIMEOUT`]), and `accept` returns the connections whose
/// handshake succeeded. Dropping it (axum does at shutdown) closes the
/// port and abandons the handshakes in progress.
#[derive(Debug)]
pub struct TlsListener {
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, std::net::SocketAddr)>>,
}

impl TlsListener {
    fn start_handshake(&mut self, tcp: TcpStream, peer: std::net::SocketAddr) {
        // Small request/answer exchanges: no Nagle delay.
        let _ = tcp.set_nodelay(true);
        let acceptor = TlsAcceptor::from(self.config.clone());
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => Some((tls, peer)),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    None
                }
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // Both branches are cancel-safe: a connection accepted or a
        // handshake finished while axum stops polling stays here.
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((tcp, peer)) => self.start_handshake(tcp, peer),
                    Err(e) => accept_error(e).await,
                },
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(conn)) = done {
                        return conn;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// As axum's own listener: connection errors are the peer's; others (out
/// of file descriptors) are logged and waited out.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept error");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests;

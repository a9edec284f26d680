//! HTTPS to the hosts a secret is for: the stack reads the name the guest
//! asks for in its ClientHello (SNI), connects to the far end as a TLS
//! client that checks the far end's certificate for that name against the
//! host's trust store, and answers the guest as that name with a
//! certificate of the sandbox's own CA (whose certificate, not key, is in
//! the guest's trust store). Only HTTP/1.1 is offered on either side, so
//! the requests can be read. Connections to other names pass untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Longest ClientHello read (in one or more records).
pub const MAX_HELLO: usize = 64 * 1024;
/// How long a host certificate issued to the guest is used before a new one.
const LEAF_REUSE: Duration = Duration::from_secs(24 * 3600);
/// How long a host certificate is valid.
const LEAF_VALIDITY: time::Duration = time::Duration::days(30);
/// Host certificates kept at most.
const MAX_LEAVES: usize = 256;

/// Something TLS could not do: what, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct TlsError {
    /// What failed.
    pub what: &'static str,
    /// Why.
    pub reason: String,
}

fn err(what: &'static str) -> impl FnOnce(rcgen::Error) -> TlsError {
    move |e| TlsError {
        what,
        reason: e.to_string(),
    }
}

/// What the first bytes of a connection are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet to tell.
    Incomplete,
    /// Not a TLS ClientHello.
    NotTls,
    /// A ClientHello asking for this name (`None`: no name, or one that
    /// is not a valid domain).
    Tls(Option<String>),
}

/// Reads the ClientHello at the start of `buf`.
pub fn client_hello(buf: &[u8]) -> Hello {
    // The handshake bytes of the records so far.
    let mut hs = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            return if at == 0 && !buf.is_empty() && buf[0] != 0x16 {
                Hello::NotTls
            } else {
                Hello::Incomplete
            };
        };
        if header[0] != 0x16 || header[1] != 3 || header[2] > 4 {
            return Hello::NotTls;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16384 + 2048 {
            return Hello::NotTls;
        }
        let Some(body) = buf.get(at + 5..at + 5 + len) else {
            return if at + 5 + len > MAX_HELLO {
                Hello::NotTls
            } else {
                Hello::Incomplete
            };
        };
        hs.extend_from_slice(body);
        at += 5 + len;
        if hs.len() < 4 {
            continue;
        }
        if hs[0] != 1 {
            return Hello::NotTls;
        }
        let need = 4 + (usize::from(hs[1]) << 16 | usize::from(hs[2]) << 8 | usize::from(hs[3]));
        if need > MAX_HELLO {
            return Hello::NotTls;
        }
        if hs.len() >= need {
            return match server_name(&hs[4..need]) {
                Some(name) => Hello::Tls(name),
                None => Hello::NotTls,
            };
        }
    }
}

/// The SNI host name of a ClientHello's body; `None` when it is malformed,
/// `Some(None)` when it names no (valid) host.
fn server_name(body: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // version, random
    let sid = r.u8()?;
    r.take(usize::from(sid))?;
    let suites = r.u16()?;
    r.take(usize::from(suites))?;
    let compression = r.u8()?;
    r.take(usize::from(compression))?;
    if r.0.is_empty() {
        return Some(None);
    }
    let ext_len = r.u16()?;
    let mut exts = Reader(r.take(usize::from(ext_len))?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let len = exts.u16()?;
        let data = exts.take(usize::from(len))?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let list_len = list.u16()?;
        let mut names = Reader(list.take(usize::from(list_len))?);
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let len = names.u16()?;
            let name = names.take(usize::from(len))?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok();
                return Some(name.and_then(|n| crate::policy::domain(n).ok()));
            }
        }
        return Some(None);
    }
    Some(None)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// A sandbox's CA: its certificate (what the guest trusts) and key (what
/// never leaves the host), both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthorityPem {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for AuthorityPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityPem").finish_non_exhaustive()
    }
}

/// The CA's parameters: `label` names it (the sandbox's id). An issuer
/// needs only its name, key usages and key, so the same label rebuilds it
/// from the stored key.
fn authority_params(label: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "burrow");
    dn.push(DnType::CommonName, format!("burrow sandbox CA {label}"));
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(3650);
    p
}

/// A new CA for the sandbox `label`.
pub fn generate_authority(label: &str) -> Result<AuthorityPem, TlsError> {
    let key = KeyPair::generate().map_err(err("generating the CA key"))?;
    let cert = authority_params(label)
        .self_signed(&key)
        .map_err(err("signing the CA certificate"))?;
    Ok(AuthorityPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The host's trust store (as rustls-native-certs reads it: the system's,
/// or `SSL_CERT_FILE`/`SSL_CERT_DIR`), and the certificates of `extra`
/// PEM bundles. Certificates that do not parse are skipped.
pub fn host_roots(extra: &[Vec<u8>]) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    for pem in extra {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .filter_map(Result::ok)
            .collect();
        roots.add_parsable_certificates(certs);
    }
    roots
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Speaks TLS to both ends of the intercepted connections of one sandbox.
pub struct Interceptor {
    issuer: Issuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, (Instant, Arc<ServerConfig>)>>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor").finish_non_exhaustive()
    }
}

impl Interceptor {
    /// The interceptor of the sandbox `label` with its CA, checking far
    /// ends against `roots`.
    pub fn new(label: &str, ca: &AuthorityPem, roots: RootCertStore) -> Result<Self, TlsError> {
        let key = KeyPair::from_pem(&ca.key).map_err(err("reading the CA key"))?;
        let issuer = Issuer::new(authority_params(label), key);
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError {
                what: "configuring TLS",
                reason: e.to_string(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Interceptor {
            issuer,
            leaves: Mutex::new(HashMap::new()),
            client: Arc::new(client),
        })
    }

    /// The client side's configuration (to the far end).
    pub fn client(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// The server side's configuration for `name` (to the guest), with a
    /// certificate for it from the sandbox's CA.
    pub fn server(&self, name: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, cfg)) = leaves.get(name) {
            if at.elapsed() < LEAF_REUSE {
                return Ok(cfg.clone());
            }
        }
        let cfg = Arc::new(self.issue(name)?);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(name.to_owned(), (Instant::now(), cfg.clone()));
        Ok(cfg)
    }

    fn issue(&self, name: &str) -> Result<ServerConfig, TlsError> {
        let key = KeyPair::generate().map_err(err("generating a host key"))?;
        let mut p = CertificateParams::new(vec![name.to_owned()])
            .map_err(err("naming a host certificate"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        p.distinguished_name = dn;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + LEAF_VALIDITY;
        let cert = p
            .signed_by(&key, &self.issuer)
            .map_err(err("signing a host certificate"))?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(vec![cert.der().clone()], key_der)
            })
            .map_err(|e| TlsError {
                what: "configuring TLS",
                reason: e.to_string(),
            })?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

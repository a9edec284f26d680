//! TLS for the tests of `burrow serve`'s HTTPS listeners: a test CA (rcgen)
//! issuing server certificates for 127.0.0.1 and localhost, PEM files
//! replaced the way a rotation replaces them, and a small blocking HTTPS
//! client that keeps its connection open between requests.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use super::serve::Resp;

/// A certificate authority of a test.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// A server certificate and its key, PEM.
#[derive(Clone)]
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        TestCa {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A server certificate for 127.0.0.1 and localhost (IP and DNS
    /// names), with a key of its own.
    pub fn leaf(&self) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("leaf params");
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes the CA's certificate to `path` (for `BURROW_CA_CERT`).
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("writing the CA certificate");
    }

    /// A rustls client configuration trusting this CA only.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.pem.as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA root");
        }
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    }
}

/// Replaces `path` with a new file holding `text` (written aside, then
/// renamed over it: a new inode, as a rotation or a Secret update does).
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("writing a TLS file");
    std::fs::rename(&tmp, path).expect("renaming a TLS file");
}

/// Writes `leaf`'s certificate and key to `cert` and `key`.
pub fn install(leaf: &Leaf, cert: &Path, key: &Path) {
    replace_file(cert, &leaf.cert);
    replace_file(key, &leaf.key);
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A blocking HTTPS connection kept open between requests (HTTP/1.1
/// keep-alive).
pub struct HttpsConn {
    stream: BufReader<Tls>,
    authority: String,
}

impl HttpsConn {
    /// Connects to `authority` (`127.0.0.1:PORT`) checking the server's
    /// certificate for `name` with `config`, and finishes the handshake:
    /// a certificate the client does not trust is the error here.
    pub fn open(
        authority: &str,
        name: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<HttpsConn> {
        let sock = TcpStream::connect(authority)?;
        sock.set_read_timeout(Some(Duration::from_secs(30)))?;
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(conn, sock);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(HttpsConn {
            stream: BufReader::new(tls),
            authority: authority.to_owned(),
        })
    }

    /// Sends `GET path` (with `token`) on this connection and reads the
    /// whole answer, leaving the connection open.
    pub fn get(&mut self, path: &str, token: Option<&str>) -> std::io::Result<Resp> {
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n", self.authority);
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        let w = self.stream.get_mut();
        w.write_all(req.as_bytes())?;
        w.flush()?;
        read_answer(&mut self.stream)
    }
}

fn bad(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Reads one answer (its length given by `Content-Length` or chunks).
fn read_answer(r: &mut impl BufRead) -> std::io::Result<Resp> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16)
                .map_err(|_| bad(format!("bad chunk size {size:?}")))?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let n: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

//! The far namespace's HTTP and HTTPS servers: each answers a request
//! with its head, and keeps every head it got, so a test can see what
//! reached the far end (a secret's value, never a placeholder elsewhere).
//! The HTTPS ones have certificates of the far CA, which the stack's
//! interceptor trusts as the host's store would a public CA.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// Every head the far servers got: (server address, head).
pub static HEADS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The far CA (its certificate PEM) and its issuer.
pub struct FarCa {
    pub cert_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

pub fn far_ca() -> &'static FarCa {
    static CA: OnceLock<FarCa> = OnceLock::new();
    CA.get_or_init(|| {
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "far test CA");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        FarCa {
            cert_pem: cert.pem(),
            issuer: rcgen::Issuer::new(p, key),
        }
    })
}

fn server_config(names: &[&str]) -> Arc<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.use_authority_key_identifier_extension = true;
    let cert = p.signed_by(&key, &far_ca().issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)
    .unwrap();
    Arc::new(cfg)
}

/// Answers one request on `stream` with its head.
fn echo<S: Read + Write>(mut stream: S, server: &str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    HEADS
        .lock()
        .unwrap()
        .push((server.to_owned(), text.clone()));
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(reply.as_bytes());
    let _ = stream.flush();
}

/// Starts the echo servers (in the calling thread's namespace): plain on
/// port 8080 of both addresses, HTTPS on 443 (198.18.0.2 as `a.test`,
/// 198.18.0.3 as `b.test` and `x.c.test`).
pub fn serve() {
    for ip in ["198.18.0.2", "198.18.0.3"] {
        let l = TcpListener::bind((ip.parse::<Ipv4Addr>().unwrap(), 8080)).unwrap();
        let server = format!("{ip}:8080");
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let server = server.clone();
                std::thread::spawn(move || echo(c, &server));
            }
        });
    }
    for (ip, names) in [
        ("198.18.0.2", &["a.test"][..]),
        ("198.18.0.3", &["b.test", "x.c.test"][..]),
    ] {
        let cfg = server_config(names);
        let l = TcpListener::bind((ip.parse::<Ipv4Addr>().unwrap(), 443)).unwrap();
        let server = format!("{ip}:443");
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (cfg, server) = (cfg.clone(), server.clone());
                std::thread::spawn(move || tls_echo(c, cfg, &server));
            }
        });
    }
}

fn tls_echo(c: TcpStream, cfg: Arc<rustls::ServerConfig>, server: &str) {
    let Ok(conn) = rustls::ServerConnection::new(cfg) else {
        return;
    };
    echo(rustls::StreamOwned::new(conn, c), server);
}

/// The heads `server` got.
pub fn heads(server: &str) -> Vec<String> {
    HEADS
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| s == server)
        .map(|(_, h)| h.clone())
        .collect()
}

//! The pair's checks, the reload's rules, and handshakes through the
//! listener, with certificates made by rcgen.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A CA and leaf certificates it issues for 127.0.0.1 and localhost.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// (certificate PEM, key PEM) of a server certificate.
    fn leaf(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn client(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// Replaces `path` by a new file (a new inode, as a rotation does).
fn put(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn files(dir: &tempfile::TempDir, cert: &str, key: &str) -> TlsConfig {
    let config = TlsConfig {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    put(&config.cert, cert);
    put(&config.key, key);
    config
}

fn end_entity(cert: &ReloadingCert) -> Vec<u8> {
    cert.current.read().unwrap().cert[0].to_vec()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[test]
fn a_pair_is_checked_and_a_bad_one_names_its_file() {
    let ca = Ca::new("ca");
    let (cert, key) = ca.leaf();
    let (_, other_key) = ca.leaf();
    let dir = tempfile::tempdir().unwrap();
    let p = provider();

    let good = files(&dir, &cert, &key);
    let pair = load_pair(&good, &p).unwrap();
    assert_eq!(pair.cert.len(), 1);

    // Missing files: the one that is missing.
    let missing = TlsConfig {
        cert: dir.path().join("nope.crt"),
        key: good.key.clone(),
    };
    let e = load_pair(&missing, &p).unwrap_err();
    assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
    assert_eq!(e.setting(), "tls.cert");
    assert!(e.to_string().contains("nope.crt"), "{e}");
    let missing = TlsConfig {
        cert: good.cert.clone(),
        key: dir.path().join("nope.key"),
    };
    let e = load_pair(&missing, &p).unwrap_err();
    assert_eq!(e.setting(), "tls.key");

    // A directory is not a file.
    let dir_cert = TlsConfig {
        cert: dir.path().to_path_buf(),
        key: good.key.clone(),
    };
    assert!(matches!(
        load_pair(&dir_cert, &p).unwrap_err(),
        TlsError::Read { .. }
    ));

    // No certificate in the certificate file (a key there instead).
    let swapped = files(&dir, &key, &key);
    let e = load_pair(&swapped, &p).unwrap_err();
    assert!(matches!(e, TlsError::Certificate { .. }), "{e:?}");
    assert_eq!(e.setting(), "tls.cert");

    // No key in the key file.
    let no_key = files(&dir, &cert, &cert);
    let e = load_pair(&no_key, &p).unwrap_err();
    assert!(matches!(e, TlsError::Key { .. }), "{e:?}");
    assert_eq!(e.setting(), "tls.key");

    // Another certificate's key.
    let mismatch = files(&dir, &cert, &other_key);
    let e = load_pair(&mismatch, &p).unwrap_err();
    assert!(matches!(e, TlsError::Mismatch { .. }), "{e:?}");
    assert_eq!(e.setting(), "tls.key");

    // Garbage in a certificate block.
    let broken = files(
        &dir,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        &key,
    );
    let e = load_pair(&broken, &p).unwrap_err();
    assert!(matches!(e, TlsError::Certificate { .. }), "{e:?}");

    // A chain (leaf then CA) is kept whole.
    let chained = files(&dir, &format!("{cert}{}", ca.pem), &key);
    assert_eq!(load_pair(&chained, &p).unwrap().cert.len(), 2);
}

#[test]
fn a_changed_pair_is_reloaded_and_a_bad_one_kept_out_and_reported_once() {
    let ca = Ca::new("ca");
    let (cert1, key1) = ca.leaf();
    let (cert2, key2) = ca.leaf();
    let (cert3, _) = ca.leaf();
    let dir = tempfile::tempdir().unwrap();
    let config = files(&dir, &cert1, &key1);
    let tls = ServerTls::load(&config).unwrap();
    let cert = tls.cert();
    assert_eq!(end_entity(cert), der_of(&cert1));
    assert_eq!(cert.check(), Reload::Unchanged);

    put(&config.cert, &cert2);
    put(&config.key, &key2);
    assert_eq!(cert.check(), Reload::Reloaded);
    assert_eq!(end_entity(cert), der_of(&cert2));
    assert_eq!(cert.check(), Reload::Unchanged);

    // A certificate with the previous key: one more look, then kept out,
    // reported once while the files stay so.
    put(&config.cert, &cert3);
    assert_eq!(cert.check(), Reload::Unchanged);
    assert_eq!(cert.check(), Reload::Kept);
    for _ in 0..3 {
        assert_eq!(cert.check(), Reload::Unchanged);
    }
    assert_eq!(end_entity(cert), der_of(&cert2));

    // A file that goes away is the same.
    std::fs::remove_file(&config.key).unwrap();
    assert_eq!(cert.check(), Reload::Unchanged);
    assert_eq!(cert.check(), Reload::Kept);
    assert_eq!(end_entity(cert), der_of(&cert2));

    // Half a rotation (the certificate first) then the key: no report.
    put(&config.key, &key1);
    put(&config.cert, &cert1);
    assert_eq!(cert.check(), Reload::Reloaded);
    assert_eq!(end_entity(cert), der_of(&cert1));
}

/// A server of `tls` answering every request with `ok`.
async fn serve(tls: &ServerTls) -> std::net::SocketAddr {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { "ok" });
    let listener = tls.listener(tcp);
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// One request over TLS; the answer's text.
async fn get(connector: &tokio_rustls::TlsConnector, addr: std::net::SocketAddr) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    let _ = tls.read_to_string(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_plain_clients_do_not_hold_up_the_others() {
    let ca = Ca::new("ca");
    let (cert, key) = ca.leaf();
    let dir = tempfile::tempdir().unwrap();
    let tls = ServerTls::load(&files(&dir, &cert, &key)).unwrap();
    let addr = serve(&tls).await;

    // Clients that never finish a handshake, held open.
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    // A plain HTTP client: the connection ends, with no HTTP answer.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
        .await
        .expect("the plain client's connection ends");
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");

    // Meanwhile a TLS client is served at once.
    let text = tokio::time::timeout(Duration::from_secs(5), get(&ca.client(), addr))
        .await
        .expect("served while others stall");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("ok"), "{text}");

    // A client of another CA fails its handshake; the server goes on.
    let stranger = Ca::new("other").client();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    assert!(stranger.connect(name, tcp).await.is_err());
    assert!(get(&ca.client(), addr).await.starts_with("HTTP/1.1 200"));
    drop(silent);
}

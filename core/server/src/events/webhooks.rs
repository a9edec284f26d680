//! Webhook URLs and the one request a delivery attempt makes, through the
//! outbound guard (see [`crate::outbound`]): a receiver at a denied address
//! is never connected to, and whatever kept an attempt from an answer is
//! recorded as the same [`NOT_REACHED`](crate::outbound::NOT_REACHED) (the
//! detail goes to the server's log), so deliveries tell nothing of what
//! listens where.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, Request, Uri};
use burrow::Error;
use burrow_net::outbound::Guard;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::store::DueDelivery;

/// The longest webhook URL.
pub const MAX_URL: usize = 2048;

/// How much of a receiver's answer is read (the rest is dropped).
const MAX_ANSWER: usize = 64 * 1024;

fn bad_url(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        argument: "url".into(),
        reason: reason.into(),
    }
}

/// Where a webhook posts: `http://` or `https://`, a host, no user info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https`.
    pub tls: bool,
    /// The host (an IPv6 address without brackets).
    pub host: String,
    /// The port (80 or 443 unless given).
    pub port: u16,
    /// The authority as written (the `Host` header).
    pub authority: String,
    /// Path and query (`/` at least).
    pub path: String,
}

impl Endpoint {
    /// Parses a webhook URL; a bad one is `invalid_argument` (`url`).
    pub fn parse(url: &str) -> Result<Endpoint, Error> {
        if url.len() > MAX_URL {
            return Err(bad_url(format!("longer than {MAX_URL} bytes")));
        }
        let uri: Uri = url
            .parse()
            .map_err(|e| bad_url(format!("{url:?} is not a URL: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(bad_url(format!(
                    "{url:?}: the scheme must be http or https"
                )))
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| bad_url(format!("{url:?} names no host")))?;
        if authority.as_str().contains('@') {
            return Err(bad_url(format!("{url:?}: user info is not allowed")));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad_url(format!("{url:?} names no host")));
        }
        Ok(Endpoint {
            tls,
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            authority: authority.as_str().to_owned(),
            path: uri
                .path_and_query()
                .map_or("/".to_owned(), |p| p.as_str().to_owned()),
        })
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    /// The receiver answered with this status.
    Answered(u16),
    /// No answer: what the delivery records (always
    /// [`NOT_REACHED`](crate::outbound::NOT_REACHED)).
    Failed(String),
}

/// Posts delivery `d` through `guard` (the whole exchange within
/// `timeout`).
pub async fn post(d: &DueDelivery, timeout: Duration, guard: &Guard) -> Posted {
    let why = match tokio::time::timeout(timeout, send(d, guard)).await {
        Ok(Ok(status)) => return Posted::Answered(status),
        Ok(Err(e)) => e,
        Err(_) => format!("no answer within {} ms", timeout.as_millis()),
    };
    tracing::warn!(
        delivery = d.id,
        attempt = d.attempt,
        "a webhook delivery got no answer: {why}"
    );
    Posted::Failed(crate::outbound::NOT_REACHED.to_owned())
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The TLS settings of https webhooks: the system's roots (or the file
/// `SSL_CERT_FILE` names), ring's algorithms.
fn tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no trusted root certificates on this host".to_owned());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

async fn send(d: &DueDelivery, guard: &Guard) -> Result<u16, String> {
    let to = Endpoint::parse(&d.url).map_err(|e| e.to_string())?;
    let tcp = guard
        .connect(&to.host, to.port)
        .await
        .map_err(|e| e.to_string())?;
    let io: Box<dyn Io> = if to.tls {
        let name = rustls::pki_types::ServerName::try_from(to.host.clone())
            .map_err(|e| format!("{}: {e}", to.host))?;
        let tls = tokio_rustls::TlsConnector::from(tls()?)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", to.authority))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP with {}: {e}", to.authority))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let req = Request::post(to.path.as_str())
        .header(header::HOST, to.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("burrow/", env!("CARGO_PKG_VERSION")),
        )
        .header("burrow-event-id", d.event_id.to_string())
        .header("burrow-event-type", d.event_type.as_str())
        .header("burrow-delivery", d.id.to_string())
        .header("burrow-attempt", d.attempt.to_string())
        .header(
            "burrow-signature",
            super::deliver::signature(&d.secret, t, d.body.as_bytes()),
        )
        .body(Full::new(Bytes::from(d.body.clone())))
        .map_err(|e| e.to_string())?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| format!("posting to {}: {e}", to.authority))?;
    let status = res.status().as_u16();
    // Read a little of the answer, so the receiver is not cut off
    // mid-write; what it says is not kept.
    let mut body = res.into_body();
    let mut read = 0;
    while read < MAX_ANSWER {
        match body.frame().await {
            Some(Ok(f)) => read += f.data_ref().map_or(0, |b| b.len()),
            _ => break,
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls() {
        let e = Endpoint::parse("http://127.0.0.1:9000/hook?x=1").unwrap();
        assert_eq!(
            e,
            Endpoint {
                tls: false,
                host: "127.0.0.1".into(),
                port: 9000,
                authority: "127.0.0.1:9000".into(),
                path: "/hook?x=1".into(),
            }
        );
        let e = Endpoint::parse("https://[::1]").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.path.as_str()),
            (true, "::1", 443, "/")
        );
        let long = format!("http://h/{}", "a".repeat(MAX_URL));
        for bad in [
            "ftp://h/",
            "/relative",
            "http://user:pw@h/",
            "not a url",
            "",
            long.as_str(),
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert_eq!(err.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
    }
}

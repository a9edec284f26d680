//! A server without authentication (`auth.required = false`) is for one
//! machine: it answers only what a local program sends it.
//!
//! Its requests must name a loopback host (`localhost`, `*.localhost`,
//! `127.0.0.0/8`, `[::1]`), so a page whose DNS name was rebound to
//! 127.0.0.1 gets nothing (its `Host` is its own name); must not come from
//! a page of another site (`Sec-Fetch-Site`, `Origin`), so a page on the
//! Internet cannot drive the server through the browser of whoever runs it;
//! and a body must be JSON (`Content-Type: application/json`), which a
//! cross-site form cannot send. The configuration refuses `auth.required =
//! false` with `allow_public`.

use std::net::IpAddr;

use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use burrow::Error;

use crate::app::ApiError;

/// Whether `host` (a `Host` header: a name or address, maybe a port) is a
/// loopback name.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // [::1] or [::1]:port
        Some(rest) => rest.split_once(']').map_or(rest, |(addr, _)| addr),
        None => match host.rsplit_once(':') {
            Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Checks a request to a server without authentication: `Ok` to go on, or
/// the answer that refuses it (`forbidden`, or `415` for a body that is
/// not JSON).
#[allow(clippy::result_large_err)]
pub fn admit(method: &Method, path: &str, headers: &HeaderMap) -> Result<(), Response> {
    let refuse = |reason: &str| {
        ApiError::from(Error::Forbidden {
            operation: format!("{method} {path}"),
            reason: reason.to_owned(),
        })
        .into_response()
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !is_loopback_host(host) {
        return Err(refuse(
            "this server has no authentication: it answers only requests to a loopback name (localhost, 127.0.0.1, [::1])",
        ));
    }
    if crate::console::auth::cross_site(headers) {
        return Err(refuse(
            "this server has no authentication: it answers no request another site's page made",
        ));
    }
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || headers.contains_key(header::TRANSFER_ENCODING)
        || headers.contains_key(header::CONTENT_TYPE);
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if has_body && !json && !path.starts_with("/gw/") {
        return Err(ApiError::with_status(
            Error::InvalidArgument {
                argument: "content-type".into(),
                reason: "a request body is JSON (application/json)".into(),
            },
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        )
        .into_response());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn loopback_names() {
        for ok in [
            "localhost",
            "LOCALHOST:7878",
            "sb_x.localhost:8081",
            "127.0.0.1",
            "127.0.0.1:7878",
            "127.9.9.9:1",
            "[::1]:7878",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
            "localhost.",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.com",
            "localhost.evil.com",
            "evil.com:7878",
            "10.0.0.1:7878",
            "[::2]:1",
            "0.0.0.0:7878",
            "127.0.0.1.nip.io",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn rebound_cross_site_and_form_requests_are_refused() {
        let post = Method::POST;
        let code = |r: Result<(), Response>| r.err().map(|r| r.status().as_u16());
        let ok = headers(&[
            ("host", "127.0.0.1:7878"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(code(admit(&post, "/v1/sandboxes", &ok)), None);
        let rebound = headers(&[("host", "attacker.example:7878")]);
        assert_eq!(
            code(admit(&Method::GET, "/v1/sandboxes", &rebound)),
            Some(403)
        );
        let cross = headers(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "https://attacker.example"),
        ]);
        assert_eq!(
            code(admit(&post, "/v1/sandboxes/x/stop", &cross)),
            Some(403)
        );
        let form = headers(&[
            ("host", "localhost:7878"),
            ("content-type", "text/plain"),
            ("content-length", "20"),
        ]);
        assert_eq!(code(admit(&post, "/v1/sandboxes", &form)), Some(415));
        // A program's request without a body needs no content type.
        let bare = headers(&[("host", "localhost:7878")]);
        assert_eq!(code(admit(&post, "/v1/sandboxes/x/start", &bare)), None);
    }
}

//! What crosses the gateway between a browser and a sandbox: the one
//! place that decides which headers go in and come out.
//!
//! A target is code nobody vouches for, and the console lives on the API's
//! origin. So, whichever origin a call came through:
//! - going in, the caller's credentials for burrow (`Authorization`,
//!   `Cookie`, the console's CSRF header) are removed: a target never sees
//!   an API token, a console session or a preview cookie;
//! - coming out, headers that would act on the browser's state for the
//!   whole origin (`Set-Cookie`, `Service-Worker-Allowed`,
//!   `Clear-Site-Data`) are removed.
//!
//! On the API's origin (`/gw/{id}/...`, for programs with a bearer token)
//! every answer also carries `Content-Security-Policy: sandbox` and
//! `X-Content-Type-Options: nosniff`: a browser that opens one anyway
//! renders it in an opaque origin with no scripts, no storage of the
//! console's origin, no service worker and no same-site requests. Pages
//! are meant for the gateway's own origin ([`super::host`]), one origin per
//! target.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};

/// The origin a gateway call came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `/gw/{id}/...` on an API listener: the console's origin.
    Api,
    /// `{id}.{domain}` on a gateway listener: the target's own origin.
    Own,
}

/// Request headers that carry a caller's credentials for burrow.
const CREDENTIALS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::COOKIE,
    HeaderName::from_static(crate::console::auth::CSRF_HEADER),
];

/// Answer headers that act on the browser's state for a whole origin.
const ORIGIN_WIDE: [&str; 4] = [
    "set-cookie",
    "set-cookie2",
    "service-worker-allowed",
    "clear-site-data",
];

/// Removes the caller's credentials for burrow from a request to a target.
pub fn inbound(h: &mut HeaderMap) {
    for name in CREDENTIALS {
        h.remove(name);
    }
}

/// Makes a target's answer safe for `origin`.
pub fn outbound(h: &mut HeaderMap, origin: Origin) {
    for name in ORIGIN_WIDE {
        h.remove(name);
    }
    if origin == Origin::Api {
        // Appended, not replaced: policies in several headers all apply,
        // so a target's own cannot loosen this one.
        h.append(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("sandbox"),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn credentials_never_reach_a_target() {
        let mut h = headers(&[
            ("authorization", "Bearer secret"),
            ("cookie", "burrow_console=abc; other=1"),
            ("Cookie", "burrow_preview=def"),
            ("x-burrow-csrf", "xyz"),
            ("accept", "text/html"),
        ]);
        inbound(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn a_target_cannot_set_origin_wide_state() {
        for origin in [Origin::Api, Origin::Own] {
            let mut h = headers(&[
                ("set-cookie", "burrow_console=evil; Path=/"),
                ("Set-Cookie", "x=1"),
                ("service-worker-allowed", "/"),
                ("clear-site-data", "\"cookies\""),
                ("content-type", "text/html"),
            ]);
            outbound(&mut h, origin);
            for gone in ORIGIN_WIDE {
                assert!(!h.contains_key(gone), "{origin:?} kept {gone}");
            }
            assert!(h.contains_key("content-type"));
            let csp: Vec<_> = h.get_all(header::CONTENT_SECURITY_POLICY).iter().collect();
            match origin {
                Origin::Api => assert_eq!(csp, vec!["sandbox"]),
                Origin::Own => assert!(csp.is_empty()),
            }
        }
    }

    #[test]
    fn a_targets_own_policy_cannot_loosen_the_sandbox() {
        let mut h = headers(&[(
            "content-security-policy",
            "sandbox allow-scripts allow-same-origin",
        )]);
        outbound(&mut h, Origin::Api);
        let csp: Vec<_> = h.get_all(header::CONTENT_SECURITY_POLICY).iter().collect();
        assert_eq!(csp.len(), 2);
        assert!(csp.iter().any(|v| *v == "sandbox"));
    }
}

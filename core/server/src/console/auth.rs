//! The console's login: an API token traded for a session cookie.
//!
//! `POST /ui/api/login` (JSON `{"token": ...}`) checks the token and opens a
//! session in the database (so that any replica knows it): the cookie
//! `burrow_console` (HttpOnly, SameSite=Strict, Secure over TLS) stands for
//! the token from then on, with the token's tenant and role, until it
//! expires, the user logs out, or the token is revoked. A request that
//! changes something must also carry the session's CSRF token in
//! `X-Burrow-Csrf` (a cross-site form cannot set it), and a request another
//! site's page made (`Origin`, `Sec-Fetch-Site`) is refused whatever its
//! method, so a cross-site WebSocket cannot open a terminal either.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use burrow::Error;
use serde::{Deserialize, Serialize};

use crate::app::{unauthorized, ApiError, ApiResult, AppState};
use crate::routes::json_body;
use crate::store::{ms, now_ms};
use crate::tenancy::Caller;

/// The session cookie's name over plain HTTP.
pub const COOKIE: &str = "burrow_console";
/// The session cookie's name over TLS: `__Host-` makes browsers refuse it
/// unless it is `Secure`, `Path=/` and without `Domain`, so no other host
/// (a sandbox's origin under the same domain) can set or shadow it.
pub const TLS_COOKIE: &str = "__Host-burrow_console";
/// The header carrying the session's CSRF token.
pub const CSRF_HEADER: &str = "x-burrow-csrf";
/// How long a login lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The console login of a cookie-authenticated request (in its
/// extensions).
#[derive(Debug, Clone)]
pub struct Login {
    /// The session's id (the cookie's value).
    pub id: String,
    /// Its CSRF token.
    pub csrf: String,
}

/// Who is logged in, as the console shows it.
#[derive(Debug, Serialize)]
pub struct SessionView {
    /// The token's name (`null`: the server has no auth).
    pub token: Option<String>,
    /// The tenant.
    pub tenant: String,
    /// The role.
    pub role: &'static str,
    /// What requests that change something carry in `X-Burrow-Csrf`
    /// (`null`: no cookie session).
    pub csrf: Option<String>,
    /// Whether the server asks for a login at all.
    pub auth: bool,
}

fn view(caller: &Caller, csrf: Option<String>, auth: bool) -> SessionView {
    SessionView {
        token: caller.token.clone(),
        tenant: caller.tenant.clone(),
        role: caller.role.as_str(),
        csrf,
        auth,
    }
}

/// The console's session cookie of a request (named as [`cookie_name`]
/// says for a server with or without TLS), if it has one.
pub fn cookie(headers: &HeaderMap, tls: bool) -> Option<&str> {
    cookie_named(headers, cookie_name(tls))
}

/// The console cookie's name on a server with (or without) TLS.
pub fn cookie_name(tls: bool) -> &'static str {
    if tls {
        TLS_COOKIE
    } else {
        COOKIE
    }
}

/// The value of the cookie `name` of a request, if it has a non-empty one.
pub fn cookie_named<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// Whether another site's page made the request: a `Sec-Fetch-Site` other
/// than `same-origin` or `none` (typed by the user), or an `Origin` that
/// is not this host's.
pub fn cross_site(headers: &HeaderMap) -> bool {
    let text = |h| headers.get(h).and_then(|v: &HeaderValue| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if !matches!(site, "same-origin" | "none") {
            return true;
        }
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (Some(origin), Some(host)) => {
            let origin_host = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            origin_host != Some(host)
        }
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn forbidden(req: &Request, reason: &str) -> Response {
    ApiError::from(Error::Forbidden {
        operation: format!("{} {}", req.method(), req.uri().path()),
        reason: reason.to_owned(),
    })
    .into_response()
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Admits a request by its console cookie (one without a bearer token):
/// its caller, with the [`Login`] put in the request; or the answer that
/// refuses it.
pub async fn admit_cookie(state: &AppState, req: &mut Request) -> Result<Caller, Response> {
    let tls = state.config.tls.is_some();
    let Some(id) = cookie(req.headers(), tls).map(str::to_owned) else {
        return Err(unauthorized(
            "an API token is required (Authorization: Bearer <token>)",
        ));
    };
    let (caller, csrf) = match state.store.console_caller(&id).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(unauthorized("the console session has ended: log in again")),
        Err(e) => return Err(ApiError::from(e).into_response()),
    };
    if cross_site(req.headers()) {
        return Err(forbidden(
            req,
            "a console session is used only by the console's own pages",
        ));
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let sent = req.headers().get(CSRF_HEADER).map(HeaderValue::as_bytes);
    if !reads && !sent.is_some_and(|s| same(s, csrf.as_bytes())) {
        return Err(forbidden(
            req,
            "the X-Burrow-Csrf header is missing or wrong",
        ));
    }
    req.extensions_mut().insert(Login { id, csrf });
    Ok(caller)
}

fn set_cookie(state: &AppState, value: &str, max_age: u64) -> HeaderValue {
    let tls = state.config.tls.is_some();
    let secure = if tls { "; Secure" } else { "" };
    let name = cookie_name(tls);
    let v = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    // Hex and fixed words only.
    HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static(""))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: String,
}

/// `POST /ui/api/login`.
pub async fn login(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next() == Some("application/json"));
    if !json {
        // A cross-site form cannot send JSON without the server's consent.
        return Err(ApiError::with_status(
            Error::InvalidArgument {
                argument: "content-type".into(),
                reason: "a login is a JSON body (application/json)".into(),
            },
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ));
    }
    if cross_site(&headers) {
        return Err(Error::Forbidden {
            operation: "POST /ui/api/login".into(),
            reason: "a login comes from the console's own pages".into(),
        }
        .into());
    }
    let b: LoginBody = json_body(&body)?;
    let expires = now_ms() + ms(SESSION_TTL);
    let (Some(session), Some(caller)) = (
        state
            .store
            .create_console_session(&b.token, expires)
            .await?,
        state.store.check_token(&b.token).await?,
    ) else {
        state.metrics.inc(&state.metrics.auth_failures);
        return Err(Error::Unauthorized {
            reason: "unknown or revoked API token".into(),
        }
        .into());
    };
    let cookie = set_cookie(&state, &session.id, SESSION_TTL.as_secs());
    let body = view(&caller, Some(session.csrf), true);
    Ok(([(header::SET_COOKIE, cookie)], Json(body)).into_response())
}

/// `GET /ui/api/session`: who the console is logged in as.
pub async fn session(
    State(state): State<Arc<AppState>>,
    Extension(transport): Extension<crate::app::Transport>,
    caller: Caller,
    login: Option<Extension<Login>>,
) -> Json<SessionView> {
    let auth = state.config.auth.required && transport == crate::app::Transport::Tcp;
    Json(view(&caller, login.map(|l| l.0.csrf), auth))
}

/// `POST /ui/api/logout`: ends the cookie's session.
pub async fn logout(
    State(state): State<Arc<AppState>>,
    login: Option<Extension<Login>>,
) -> ApiResult<Response> {
    if let Some(Extension(login)) = login {
        state.store.delete_console_session(&login.id).await?;
    }
    let cookie = set_cookie(&state, "", 0);
    Ok((StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; burrow_console=abc; b=2")]);
        assert_eq!(cookie(&h, false), Some("abc"));
        let h = headers(&[("cookie", "a=1"), ("cookie", "burrow_console=x")]);
        assert_eq!(cookie(&h, false), Some("x"));
        assert_eq!(
            cookie(&headers(&[("cookie", "burrow_console=")]), false),
            None
        );
        assert_eq!(
            cookie(&headers(&[("cookie", "xburrow_console=1")]), false),
            None
        );
        // Over TLS only the __Host- cookie counts: a plain one could have
        // been set by another host of the domain.
        let h = headers(&[(
            "cookie",
            "burrow_console=tossed; __Host-burrow_console=real",
        )]);
        assert_eq!(cookie(&h, true), Some("real"));
        assert_eq!(
            cookie(&headers(&[("cookie", "burrow_console=t")]), true),
            None
        );
    }

    #[test]
    fn requests_of_other_sites_are_cross_site() {
        let host = ("host", "127.0.0.1:8080");
        assert!(!cross_site(&headers(&[host])));
        assert!(!cross_site(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!cross_site(&headers(&[
            host,
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(!cross_site(&headers(&[host, ("sec-fetch-site", "none")])));
        assert!(cross_site(&headers(&[
            host,
            ("origin", "http://evil.test")
        ])));
        assert!(cross_site(&headers(&[host, ("origin", "null")])));
        assert!(cross_site(&headers(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(cross_site(&headers(&[
            host,
            ("sec-fetch-site", "same-site")
        ])));
        assert!(cross_site(&headers(&[("origin", "http://127.0.0.1:8080")])));
    }

    #[test]
    fn csrf_tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}

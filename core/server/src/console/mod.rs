//! The web console under `/ui/`: a single-page app whose files are built
//! from `console/` (Vite) and embedded in the binary at build time, its
//! login ([`auth`]), and the few endpoints the lifecycle API has no
//! browser-shaped twin for: files ([`files`]) and a terminal over a
//! WebSocket ([`terminal`]). Everything else the console reads and does
//! goes through the ordinary `/v1` API with its cookie, under the same
//! roles, tenants, quotas and audit as a token.

pub mod auth;
mod files;
mod terminal;

use std::sync::Arc;

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use burrow::Error;

use crate::app::{ApiError, AppState};

// `ASSETS`: the console's files, `(path under /ui/, contents)`, by path.
include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// The console's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { page("index.html") }))
        .route(
            "/ui/{*path}",
            get(|Path(path): Path<String>| async move { page(&path) }),
        )
        .route("/ui/api/login", post(auth::login))
        .route("/ui/api/session", get(auth::session))
        .route("/ui/api/logout", post(auth::logout))
        .route("/ui/api/sandboxes/{id}/files", get(files::list))
        .route(
            "/ui/api/sandboxes/{id}/files/content",
            get(files::download).put(files::upload),
        )
        .route("/ui/api/sandboxes/{id}/terminal", get(terminal::open))
}

/// Whether `path` is open to anybody: the console's pages and files (they
/// hold no data) and its login.
pub fn is_open(path: &str) -> bool {
    path == "/ui"
        || path == "/ui/api/login"
        || (path.starts_with("/ui/") && !path.starts_with("/ui/api/"))
}

/// Whether this binary carries the console.
pub fn embedded() -> bool {
    asset("index.html").is_some()
}

fn asset(path: &str) -> Option<&'static [u8]> {
    ASSETS
        .binary_search_by(|(p, _)| (*p).cmp(path))
        .ok()
        .map(|i| ASSETS[i].1)
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "map") => "application/json",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// What the pages may load and talk to: this origin only (its WebSocket
/// included), inline styles (the terminal sets them), no framing.
const CSP: &str = "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

/// `GET /ui/{path}`: the file at `path`, or the app's page for any other
/// path (the app routes it), or a 404 for `api/...` no route has.
fn page(path: &str) -> Response {
    if path.starts_with("api/") {
        return ApiError::with_status(
            Error::InvalidArgument {
                argument: "path".into(),
                reason: format!("no route for /ui/{path}"),
            },
            StatusCode::NOT_FOUND,
        )
        .into_response();
    }
    let (name, body) = match asset(path) {
        Some(body) => (path, body),
        None => match asset("index.html") {
            Some(body) => ("index.html", body),
            None => return not_built(),
        },
    };
    // Vite names what it builds after its contents: those never change.
    let cache = if name.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut res = (
        [
            (header::CONTENT_TYPE, content_type(name)),
            (header::CACHE_CONTROL, cache),
        ],
        body,
    )
        .into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    res
}

/// The page of a binary built without the console (`501`: this build
/// does not implement it).
fn not_built() -> Response {
    let body = "<!doctype html><html lang=\"en\"><title>burrow console</title>\
                <h1>This burrow was built without its console</h1>\
                <p>Build the console (<code>cargo xtask console</code>), then build burrow \
                again: the console's files are embedded at build time.</p></html>";
    (
        StatusCode::NOT_IMPLEMENTED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_sorted_for_the_lookup() {
        assert!(ASSETS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn only_pages_and_the_login_are_open() {
        for open in [
            "/ui",
            "/ui/",
            "/ui/assets/x.js",
            "/ui/sandboxes/sb_1",
            "/ui/api/login",
        ] {
            assert!(is_open(open), "{open}");
        }
        for closed in [
            "/ui/api/session",
            "/ui/api/logout",
            "/ui/api/sandboxes/x/terminal",
            "/uix",
            "/v1/sandboxes",
        ] {
            assert!(!is_open(closed), "{closed}");
        }
    }

    #[test]
    fn unknown_api_paths_are_errors_and_other_paths_the_app() {
        assert_eq!(page("api/nothing").status(), StatusCode::NOT_FOUND);
        let app = page("sandboxes/sb_1");
        if embedded() {
            assert_eq!(app.status(), StatusCode::OK);
            assert_eq!(app.headers()[header::CACHE_CONTROL], "no-cache");
        } else {
            assert_eq!(app.status(), StatusCode::NOT_IMPLEMENTED);
        }
    }
}

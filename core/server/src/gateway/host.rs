//! The gateway's own origin: `gateway.listen`, routed by host name.
//!
//! Each target has an origin of its own: `{id}.{domain}` for the target,
//! `{port}-{id}.{domain}` for another port of a sandbox target. Nothing of
//! the API or the console is served here, and the console's cookie is
//! never admitted, so a page a sandbox serves can neither read nor act as
//! the console's viewer, nor reach another target's origin state.
//!
//! A call is admitted by, in order: a server without auth (every call is
//! the default tenant's admin, as on the API); an API token in
//! `Authorization: Bearer` (programs; the role must allow gateway calls);
//! or a preview cookie of this very origin, made by trading a preview
//! link's token at [`EXCHANGE_PATH`] ([`super::previews`]). A cookie
//! request another site made (`Sec-Fetch-Site` other than `same-origin`
//! or `none`) is refused: sibling origins under one domain are the same
//! *site*, and one sandbox's page must not ride another's cookie.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use burrow::Error;

use super::origin::Origin;
use super::previews::EXCHANGE_PATH;
use super::{ours, serve, Via};
use crate::app::{bearer, unauthorized, ApiError, ApiResult, AppState};
use crate::targets::{check_target_id, not_found};
use crate::tenancy::{Caller, Role};

/// The preview cookie's name over plain HTTP.
pub const PREVIEW_COOKIE: &str = "burrow_preview";
/// The preview cookie's name over TLS (`__Host-`: host-only, `Secure`,
/// `Path=/`; no sibling origin can set or shadow it).
pub const TLS_PREVIEW_COOKIE: &str = "__Host-burrow_preview";

/// The router of a gateway listener: every request goes to [`handle`].
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// A host name's label, split: the port it names (if any) and the target.
fn parse_label(label: &str) -> Option<(Option<u16>, String)> {
    let label = label.to_ascii_lowercase();
    let (port, id) = match label.split_once('-') {
        Some((p, id)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (
            Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
            id.to_owned(),
        ),
        _ => (None, label),
    };
    check_target_id(&id).ok()?;
    Some((port, id))
}

async fn handle(State(state): State<Arc<AppState>>, req: Request) -> Response {
    match routed(&state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn routed(state: &Arc<AppState>, req: Request) -> ApiResult<Response> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default()
        .to_owned();
    let target = state
        .config
        .gateway
        .domain
        .as_ref()
        .and_then(|d| d.label_of(&host))
        .and_then(parse_label);
    let Some((port, id)) = target else {
        return Err(Error::NotFound {
            what: format!("gateway origin {host:?}"),
            name: None,
            id: None,
        }
        .into());
    };
    if req.uri().path() == EXCHANGE_PATH {
        // Logged as every call of this origin: traded (as the link's
        // tenant and id) or refused, never with the token.
        let (method, client) = (
            req.method().clone(),
            crate::audit::client_of(req.extensions()),
        );
        let res = exchange(state, &id, port, req)
            .await
            .unwrap_or_else(IntoResponse::into_response);
        let who = crate::audit::Who::new(res.extensions().get::<Caller>(), client);
        crate::audit::gateway_call(state, &who, &id, port, &method, EXCHANGE_PATH, &res).await;
        return Ok(res);
    }
    let (method, headers) = (req.method().clone(), req.headers().clone());
    let (path, client) = (
        req.uri().path().to_owned(),
        crate::audit::client_of(req.extensions()),
    );
    // Every call is logged, refused or answered (queued: off its path).
    let (caller, res) = match admit(state, &id, port, &method, &headers).await {
        Ok(caller) => {
            let via = Via {
                origin: Origin::Own,
                port,
            };
            let served = match ours(state, &caller, &id).await {
                Ok(()) => serve(state, &id, req, via).await,
                Err(e) => Err(e),
            };
            (
                Some(caller),
                served.unwrap_or_else(IntoResponse::into_response),
            )
        }
        Err(res) => (None, res),
    };
    let who = crate::audit::Who::new(caller.as_ref(), client);
    crate::audit::gateway_call(state, &who, &id, port, &method, &path, &res).await;
    Ok(res)
}

/// Who may make this call on target `id` (`port`): the caller, or the
/// answer that refuses it.
async fn admit(
    state: &AppState,
    id: &str,
    port: Option<u16>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Caller, Response> {
    if !state.config.auth.required {
        crate::loopback::admit(method, &format!("/gw/{id}"), headers)?;
        return Ok(Caller::local());
    }
    if let Some(token) = bearer(headers) {
        let caller = match state.caller(token).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                state.metrics.inc(&state.metrics.auth_failures);
                return Err(unauthorized("unknown or revoked API token"));
            }
            Err(e) => return Err(ApiError::from(e).into_response()),
        };
        if !caller.allows(method, &format!("/gw/{id}")) {
            return Err(ApiError::from(Error::Forbidden {
                operation: format!("{method} /gw/{id}"),
                reason: format!("the role {} may not do this", caller.role.as_str()),
            })
            .into_response());
        }
        return Ok(caller);
    }
    let tls = state.config.tls.is_some();
    let Some(cookie) = crate::console::auth::cookie_named(headers, cookie_name(tls)) else {
        state.metrics.inc(&state.metrics.auth_failures);
        return Err(unauthorized(
            "an API token (Authorization: Bearer <token>) or a preview link is required",
        ));
    };
    let grant = match state.store.preview_caller(cookie).await {
        Ok(Some(g)) if g.target_id == id && g.port == port => g,
        Ok(_) => {
            state.metrics.inc(&state.metrics.auth_failures);
            return Err(unauthorized(
                "the preview has ended or is for another origin: open a new preview link",
            ));
        }
        Err(e) => return Err(ApiError::from(e).into_response()),
    };
    if crate::console::auth::cross_site(headers) {
        return Err(ApiError::from(Error::Forbidden {
            operation: format!("{method} /gw/{id}"),
            reason: "a preview cookie is used only by its own origin's pages".into(),
        })
        .into_response());
    }
    Ok(Caller {
        token: Some(grant.id),
        tenant: grant.tenant,
        role: Role::Operator,
    })
}

fn cookie_name(tls: bool) -> &'static str {
    if tls {
        TLS_PREVIEW_COOKIE
    } else {
        PREVIEW_COOKIE
    }
}

/// `GET {EXCHANGE_PATH}?token=...`: trades a preview link's token for this
/// origin's cookie, once, and sends the browser to `/`.
async fn exchange(
    state: &AppState,
    id: &str,
    port: Option<u16>,
    req: Request,
) -> ApiResult<Response> {
    if req.method() != Method::GET {
        return Err(Error::InvalidArgument {
            argument: "method".into(),
            reason: format!("{EXCHANGE_PATH} takes GET"),
        }
        .into());
    }
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let token = query.get("token").map(String::as_str).unwrap_or_default();
    let refused = || unauthorized("the preview link is unknown, used, revoked or expired");
    if token.is_empty() {
        return Ok(refused());
    }
    let Some((grant, cookie)) = state.store.exchange_preview(token).await? else {
        state.metrics.inc(&state.metrics.auth_failures);
        return Ok(refused());
    };
    if grant.target_id != id || grant.port != port {
        // Traded, so spent: a link opened on another origin is gone.
        return Err(not_found(id).into());
    }
    let tls = state.config.tls.is_some();
    let max_age = ((grant.expires_at - crate::store::now_ms()) / 1000).max(1);
    let secure = if tls { "; Secure" } else { "" };
    let set = format!(
        "{}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
        cookie_name(tls)
    );
    let mut res = StatusCode::SEE_OTHER.into_response();
    let h = res.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static("/"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Ok(v) = HeaderValue::from_str(&set) {
        h.insert(header::SET_COOKIE, v);
    }
    // Who traded it, for the audit log.
    res.extensions_mut().insert(Caller {
        token: Some(grant.id),
        tenant: grant.tenant,
        role: Role::Operator,
    });
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GatewayDomain;

    #[test]
    fn host_names_route_to_targets_and_ports() {
        let d = GatewayDomain::parse("localhost:8081").unwrap();
        let id = "sb_0123456789abcdefghjkmnpqrs";
        let route = |host: &str| d.label_of(host).and_then(parse_label);
        assert_eq!(
            route(&format!("{id}.localhost:8081")),
            Some((None, id.into()))
        );
        assert_eq!(route(&format!("{id}.LOCALHOST")), Some((None, id.into())));
        assert_eq!(
            route(&format!("8080-{id}.localhost:8081")),
            Some((Some(8080), id.into()))
        );
        assert_eq!(
            route(&format!("{}.localhost", id.to_uppercase())),
            Some((None, id.into()))
        );
        for bad in [
            "localhost:8081".to_owned(),
            format!("{id}.example.com"),
            format!("a.{id}.localhost"),
            format!("{id}localhost"),
            format!("0-{id}.localhost"),
            format!("99999-{id}.localhost"),
            "sb_short.localhost".into(),
            format!("{id}.localhost.evil.com"),
        ] {
            assert_eq!(route(&bad), None, "{bad}");
        }
    }
}

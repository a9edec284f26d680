//! Gateway targets (`/v1/gateway/targets`): what `/gw/{id}/...` proxies to.
//!
//! - `PUT /v1/gateway/targets/{sandbox_id}` `{"port": 8080}`: a port inside
//!   a sandbox; the gateway starts the sandbox on demand, the reaper
//!   reclaims it when idle.
//! - `POST /v1/gateway/targets` `{"url": "http://10.0.0.5:9000"}`: a remote
//!   endpoint, proxied only (no workload: never started, never reclaimed).
//!
//! Both take optional `metadata` (any JSON object, returned as is) and
//! `headers` (added to every proxied request, e.g. upstream credentials;
//! stored, never returned). A header may not be `Host` (the target's own
//! authority is sent) nor a hop-by-hop or framing header (`Connection`,
//! `Transfer-Encoding`, `Content-Length`, ...): `invalid_argument`.
//!
//! A URL target is called through the outbound guard (see
//! [`crate::outbound`]): one at the server's host or a private address is
//! reached only where `[outbound] allow` names it, and one written as such
//! an address is refused when it is registered.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use burrow::Error;
use serde::{Deserialize, Serialize};

use crate::app::{ApiResult, AppState};
use crate::routes::{json_body, parse_id};
use crate::store::{now_ms, ColdStart, RuntimeRow, Target, TargetKind};
use crate::tenancy::{Caller, Engine};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxTargetBody {
    port: u16,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UrlTargetBody {
    url: String,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// A target as the API shows it (headers are never shown).
#[derive(Debug, Serialize)]
pub struct TargetView {
    id: String,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    metadata: serde_json::Value,
    created_at_ms: i64,
    /// Absent until the first gateway call.
    runtime: Option<RuntimeRow>,
    /// Gateway calls in flight.
    leases: i64,
    /// The last cold starts (calls that started the workload), oldest
    /// first.
    cold_starts: Vec<ColdStart>,
}

/// The view of `t` with its runtime row, its live leases and its cold
/// starts.
async fn view_of(state: &AppState, t: Target) -> ApiResult<TargetView> {
    let rt = state.store.runtime(&t.id).await?;
    let leases = state.store.target_leases(&t.id, now_ms()).await?;
    let cold_starts = state.store.cold_starts(&t.id).await?;
    Ok(TargetView {
        leases,
        cold_starts,
        ..view(t, rt)
    })
}

fn view(t: Target, runtime: Option<RuntimeRow>) -> TargetView {
    let (kind, port, command, url) = match t.kind {
        TargetKind::Sandbox { port, command } => ("sandbox", Some(port), command, None),
        TargetKind::Url { url } => ("url", None, None, Some(url)),
    };
    TargetView {
        id: t.id,
        kind,
        port,
        command,
        url,
        metadata: t.metadata,
        created_at_ms: t.created_at,
        runtime,
        leases: 0,
        cold_starts: Vec::new(),
    }
}

fn check_metadata(m: Option<serde_json::Value>) -> Result<serde_json::Value, Error> {
    match m {
        None => Ok(serde_json::json!({})),
        Some(v @ serde_json::Value::Object(_)) => Ok(v),
        Some(_) => Err(Error::InvalidArgument {
            argument: "metadata".into(),
            reason: "must be a JSON object".into(),
        }),
    }
}

/// Headers a target may not set: the target's authority (`Host`), the
/// hop-by-hop ones (RFC 9110 7.6.1) and the message's framing.
const RESERVED_HEADERS: [&str; 12] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

fn check_headers(h: BTreeMap<String, String>) -> Result<Vec<(String, String)>, Error> {
    h.into_iter()
        .map(|(k, v)| {
            let bad = |reason: &str| Error::InvalidArgument {
                argument: format!("headers.{k}"),
                reason: reason.into(),
            };
            axum::http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| bad("not a header name"))?;
            if RESERVED_HEADERS
                .iter()
                .any(|r| r.eq_ignore_ascii_case(k.trim()))
            {
                return Err(bad(
                    "the gateway sets this header itself (the target's Host, hop-by-hop and framing headers)",
                ));
            }
            axum::http::HeaderValue::from_str(&v).map_err(|_| bad("not a header value"))?;
            Ok((k.to_ascii_lowercase(), v))
        })
        .collect()
}

/// Checks a URL target's address: `http://host[:port][/path]`, exactly the
/// grammar the OpenAPI document's pattern states: a host of
/// `[A-Za-z0-9.-]` (no IPv6 literal), a port up to 65535, a path
/// of RFC 3986 path characters (`%` included), no query, no fragment.
fn check_url(url: &str) -> Result<String, Error> {
    let bad = |reason: &str| Error::InvalidArgument {
        argument: "url".into(),
        reason: format!("{url:?}: {reason}"),
    };
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(bad("only http:// targets are supported"));
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let end = authority.find(':').unwrap_or(authority.len());
    let (host, port) = authority.split_at(end);
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(bad(
            "no host, or a host other than letters, digits, '.' and '-' (IPv6 literals are not supported)",
        ));
    }
    if !port.is_empty() {
        let digits = port.strip_prefix(':').unwrap_or("x");
        let ok = (1..=5).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && digits.parse::<u32>().is_ok_and(|p| p <= 65535);
        if !ok {
            return Err(bad("the port is not a number up to 65535"));
        }
    }
    if !path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%/".contains(&b))
    {
        return Err(bad(
            "the path has characters other than RFC 3986's (a target URL has no query)",
        ));
    }
    url.parse::<axum::http::Uri>()
        .map_err(|_| bad("not a URL"))?;
    Ok(url.trim_end_matches('/').to_owned())
}

/// `PUT /v1/gateway/targets/{sandbox_id}`.
pub async fn put_sandbox(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<TargetView>> {
    let sid = parse_id(&id)?;
    let b: SandboxTargetBody = json_body(&body)?;
    if b.port == 0 {
        return Err(Error::InvalidArgument {
            argument: "port".into(),
            reason: "must be 1..=65535".into(),
        }
        .into());
    }
    if b.command.as_ref().is_some_and(|c| c.is_empty()) {
        return Err(Error::InvalidArgument {
            argument: "command".into(),
            reason: "an empty argv (leave it out for none)".into(),
        }
        .into());
    }
    // The sandbox must exist (in the caller's tenant).
    engine.get_by_id(&sid).await?;
    let t = Target {
        id: id.clone(),
        kind: TargetKind::Sandbox {
            port: b.port,
            command: b.command,
        },
        metadata: check_metadata(b.metadata)?,
        headers: check_headers(b.headers)?,
        created_at: now_ms(),
        tenant: caller.tenant,
    };
    state.store.put_target(&t).await?;
    state.gateway.forget(&id);
    let t = state.store.get_target(&id).await?.unwrap_or(t);
    Ok(Json(view_of(&state, t).await?))
}

/// `POST /v1/gateway/targets`.
pub async fn create_url(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Response> {
    let b: UrlTargetBody = json_body(&body)?;
    let url = check_url(&b.url)?;
    if let Ok(uri) = url.parse::<axum::http::Uri>() {
        if let Some(host) = uri.host() {
            crate::outbound::refuse_internal(
                &state.config,
                host,
                uri.port_u16().unwrap_or(80),
                "url",
            )
            .await?;
        }
    }
    let t = Target {
        id: format!(
            "tg_{}",
            burrow::SandboxId::new().as_str().trim_start_matches("sb_")
        ),
        kind: TargetKind::Url { url },
        metadata: check_metadata(b.metadata)?,
        headers: check_headers(b.headers)?,
        created_at: now_ms(),
        tenant: caller.tenant,
    };
    state.store.put_target(&t).await?;
    Ok((StatusCode::CREATED, Json(view(t, None))).into_response())
}

/// `GET /v1/gateway/targets`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    let mut out = Vec::new();
    let targets = state.store.list_targets().await?;
    for t in targets.into_iter().filter(|t| t.tenant == caller.tenant) {
        out.push(view_of(&state, t).await?);
    }
    Ok(Json(serde_json::json!({ "targets": out })))
}

/// A gateway target that does not exist.
pub(crate) fn not_found(id: &str) -> Error {
    Error::NotFound {
        what: format!("gateway target {id}"),
        name: None,
        id: None,
    }
}

/// Checks a target id's shape: a sandbox id, or `tg_` and the same 26
/// digits (a URL target's). Anything else is `invalid_argument`, before
/// the database is asked.
pub(crate) fn check_target_id(id: &str) -> Result<(), Error> {
    let as_sandbox = match id.strip_prefix("tg_") {
        Some(digits) => format!("sb_{digits}"),
        None => id.to_owned(),
    };
    as_sandbox
        .parse::<burrow::SandboxId>()
        .map(|_| ())
        .map_err(|_| Error::InvalidArgument {
            argument: "id".into(),
            reason: format!("{id:?} is not a target id (sb_... or tg_...)"),
        })
}

/// The target `id` of the caller's tenant (another tenant's is
/// `not_found`, as one that does not exist).
pub(crate) async fn target_of(state: &AppState, caller: &Caller, id: &str) -> ApiResult<Target> {
    check_target_id(id)?;
    match state.store.get_target(id).await? {
        Some(t) if t.tenant == caller.tenant => Ok(t),
        _ => Err(not_found(id).into()),
    }
}

/// `GET /v1/gateway/targets/{id}`.
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<TargetView>> {
    let t = target_of(&state, &caller, &id).await?;
    Ok(Json(view_of(&state, t).await?))
}

/// `DELETE /v1/gateway/targets/{id}` (the sandbox itself is left alone).
pub async fn delete(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    target_of(&state, &caller, &id).await?;
    if !state.store.delete_target(&id).await? {
        return Err(not_found(&id).into());
    }
    state.gateway.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_targets_are_checked() {
        assert_eq!(
            check_url("http://127.0.0.1:9000/").unwrap(),
            "http://127.0.0.1:9000"
        );
        for good in [
            "http://h:80/a/b%20c",
            "http://a-b.c",
            "http://h:65535/p;x=1@y",
        ] {
            check_url(good).unwrap();
        }
        for bad in [
            "https://x",
            "ftp://x",
            "x",
            "http://x/?q=1",
            "",
            "http://",
            "http://x:65536",
            "http://x:",
            "http://x#f",
            "http://u@x",
            "http://[::1]:80",
            "http://[db5b8:]",
            "http://x/a b",
            "HTTP://x",
        ] {
            let e = check_url(bad).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
        let h = [("X-Key".to_string(), "v".to_string())].into();
        assert_eq!(
            check_headers(h).unwrap(),
            vec![("x-key".into(), "v".into())]
        );
        let h = [("bad header".to_string(), "v".to_string())].into();
        assert!(check_headers(h).is_err());
        for reserved in [
            "Host",
            "host",
            "Connection",
            "Transfer-Encoding",
            "TE",
            "Upgrade",
            "Proxy-Authorization",
            "Keep-Alive",
            "Content-Length",
        ] {
            let h = [(reserved.to_string(), "v".to_string())].into();
            let e = check_headers(h).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{reserved}");
        }
        assert!(check_metadata(Some(serde_json::json!([1]))).is_err());
        for good in [
            "sb_01h2x3y4z5a6b7c8d9e0f1g2h3",
            "tg_01h2x3y4z5a6b7c8d9e0f1g2h3",
        ] {
            check_target_id(good).unwrap();
        }
        for bad in [
            "",
            "tg_",
            "tg_a\0b",
            "xx_01h2x3y4z5a6b7c8d9e0f1g2h3",
            "tg_sb_01h2x3y4z5a6b7c8d9e0f1g2h3",
        ] {
            let e = check_target_id(bad).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad:?}");
        }
    }
}

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
//! stored, never returned).

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
use crate::store::{now_ms, RuntimeRow, Target, TargetKind};

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

fn check_headers(h: BTreeMap<String, String>) -> Result<Vec<(String, String)>, Error> {
    h.into_iter()
        .map(|(k, v)| {
            let bad = |reason: &str| Error::InvalidArgument {
                argument: format!("headers.{k}"),
                reason: reason.into(),
            };
            axum::http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| bad("not a header name"))?;
            axum::http::HeaderValue::from_str(&v).map_err(|_| bad("not a header value"))?;
            Ok((k.to_ascii_lowercase(), v))
        })
        .collect()
}

/// Checks a URL target's address: `http://host[:port][/path]`.
fn check_url(url: &str) -> Result<String, Error> {
    let bad = |reason: &str| Error::InvalidArgument {
        argument: "url".into(),
        reason: format!("{url:?}: {reason}"),
    };
    let uri: axum::http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// targets are supported"));
    }
    if uri.authority().is_none() {
        return Err(bad("no host"));
    }
    if uri.query().is_some() {
        return Err(bad("a target URL has no query"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// `PUT /v1/gateway/targets/{sandbox_id}`.
pub async fn put_sandbox(
    State(state): State<Arc<AppState>>,
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
    // The sandbox must exist.
    state.engine.get_by_id(&sid).await?;
    let t = Target {
        id: id.clone(),
        kind: TargetKind::Sandbox {
            port: b.port,
            command: b.command,
        },
        metadata: check_metadata(b.metadata)?,
        headers: check_headers(b.headers)?,
        created_at: now_ms(),
    };
    state.store.put_target(&t).await?;
    state.gateway.forget(&id);
    let t = state.store.get_target(&id).await?.unwrap_or(t);
    let rt = state.store.runtime(&id).await?;
    Ok(Json(view(t, rt)))
}

/// `POST /v1/gateway/targets`.
pub async fn create_url(State(state): State<Arc<AppState>>, body: Bytes) -> ApiResult<Response> {
    let b: UrlTargetBody = json_body(&body)?;
    let t = Target {
        id: format!(
            "tg_{}",
            burrow::SandboxId::new().as_str().trim_start_matches("sb_")
        ),
        kind: TargetKind::Url {
            url: check_url(&b.url)?,
        },
        metadata: check_metadata(b.metadata)?,
        headers: check_headers(b.headers)?,
        created_at: now_ms(),
    };
    state.store.put_target(&t).await?;
    Ok((StatusCode::CREATED, Json(view(t, None))).into_response())
}

/// `GET /v1/gateway/targets`.
pub async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<serde_json::Value>> {
    let mut out = Vec::new();
    for t in state.store.list_targets().await? {
        let rt = state.store.runtime(&t.id).await?;
        out.push(view(t, rt));
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

/// `GET /v1/gateway/targets/{id}`.
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<Json<TargetView>> {
    let t = state
        .store
        .get_target(&id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    let rt = state.store.runtime(&id).await?;
    Ok(Json(view(t, rt)))
}

/// `DELETE /v1/gateway/targets/{id}` (the sandbox itself is left alone).
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
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
        for bad in ["https://x", "ftp://x", "x", "http://x/?q=1", ""] {
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
        assert!(check_metadata(Some(serde_json::json!([1]))).is_err());
    }
}

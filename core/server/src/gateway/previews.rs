//! Preview links: `POST /v1/gateway/targets/{id}/previews` makes one,
//! `DELETE /v1/gateway/targets/{id}/previews/{preview}` revokes it.
//!
//! A link opens a private target in a browser on the gateway's own origin:
//! `{scheme}://{id}.{domain}/__burrow/preview?token=...` (or
//! `{port}-{id}.` for one port of a sandbox target). Its token is good
//! once, for a short time ([`DEFAULT_TTL`], at most [`MAX_TTL`]); the
//! gateway trades it for a cookie of that origin alone ([`super::host`]).
//! Programs keep using bearer tokens.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use burrow::Error;
use serde::{Deserialize, Serialize};

use crate::app::{ApiResult, AppState};
use crate::routes::json_body;
use crate::store::{ms, now_ms, TargetKind};
use crate::targets::target_of;
use crate::tenancy::Caller;

/// How long a link lives unless asked otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15 * 60);
/// The longest a link (and the cookie it is traded for) lives.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The path of the gateway's origins that trades a link's token.
pub const EXCHANGE_PATH: &str = "/__burrow/preview";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewBody {
    /// One port of a sandbox target (default: the target's own).
    #[serde(default)]
    port: Option<u16>,
    /// How long the link lives (`10m`, `1h`; default 15m, at most 24h).
    #[serde(default)]
    ttl: Option<String>,
}

/// A link as made (its token is shown this once).
#[derive(Debug, Serialize)]
pub struct PreviewView {
    /// What revokes it.
    pub id: String,
    /// The link to open in a browser.
    pub url: String,
    /// Its token (also in `url`).
    pub token: String,
    /// The origin the link opens (`{scheme}://{label}.{domain}`).
    pub origin: String,
    /// When it (and the cookie it is traded for) stops working (ms since
    /// the epoch).
    pub expires_at: i64,
}

/// `POST /v1/gateway/targets/{id}/previews`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<PreviewView>)> {
    let b: PreviewBody = json_body(&body)?;
    let target = target_of(&state, &caller, &id).await?;
    let Some(domain) = &state.config.gateway.domain else {
        return Err(Error::Unsupported {
            operation: "preview links (the server has no gateway listener: gateway.listen)".into(),
        }
        .into());
    };
    if b.port == Some(0) || (b.port.is_some() && matches!(target.kind, TargetKind::Url { .. })) {
        return Err(Error::InvalidArgument {
            argument: "port".into(),
            reason: "a port is 1..=65535, of a sandbox target".into(),
        }
        .into());
    }
    let ttl = match &b.ttl {
        Some(t) => burrow::parse_duration(t).map_err(|e| Error::InvalidArgument {
            argument: "ttl".into(),
            reason: e.to_string(),
        })?,
        None => DEFAULT_TTL,
    };
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(Error::InvalidArgument {
            argument: "ttl".into(),
            reason: "a preview link lives more than 0s and at most 24h".into(),
        }
        .into());
    }
    let expires_at = now_ms() + ms(ttl);
    let preview = state
        .store
        .create_preview(
            &caller.tenant,
            &id,
            b.port,
            caller.token.as_deref(),
            expires_at,
        )
        .await?;
    let label = match b.port {
        Some(p) => format!("{p}-{id}"),
        None => id.clone(),
    };
    let scheme = if state.config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let origin = format!("{scheme}://{}", domain.authority(&label));
    Ok((
        StatusCode::CREATED,
        Json(PreviewView {
            url: format!("{origin}{EXCHANGE_PATH}?token={}", preview.token),
            id: preview.id,
            token: preview.token,
            origin,
            expires_at: preview.expires_at,
        }),
    ))
}

/// `DELETE /v1/gateway/targets/{id}/previews/{preview}`: the link, and the
/// cookie it was traded for, stop working at once.
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path((id, preview)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    target_of(&state, &caller, &id).await?;
    if state
        .store
        .revoke_preview(&caller.tenant, &id, &preview)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound {
            what: format!("preview link {preview}"),
            name: None,
            id: None,
        }
        .into())
    }
}

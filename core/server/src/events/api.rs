//! `GET /v1/events` and `/v1/webhooks`.
//!
//! The event stream is NDJSON (one event per line) or, when the request
//! accepts `text/event-stream`, server-sent events (`id:`, `event:` the
//! type, `data:` the event; a comment every 15 s while idle). It starts
//! after `after` (or the `Last-Event-ID` header: a reconnecting
//! `EventSource` resumes by itself), gives at most `limit` events and
//! ends, or with `follow=true` stays open and gives each event as it comes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use burrow::Error;
use rand::RngCore;
use serde::{Deserialize, Serialize};

use super::event_types;
use super::webhooks::Endpoint;
use crate::app::{ApiResult, AppState};
use crate::routes::{json_body, tokio_stream_from};
use crate::store::{Delivery, EventRow, Webhook};
use crate::tenancy::{Caller, Role, DEFAULT_TENANT};

/// Webhooks a tenant may have.
pub const MAX_WEBHOOKS: u64 = 16;

/// A stream follower's look at the table when nothing woke it (another
/// replica's pump wakes nobody here).
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// A comment line on an idle SSE stream, this often.
const KEEPALIVE: Duration = Duration::from_secs(15);

fn bad(argument: &str, reason: String) -> Error {
    Error::InvalidArgument {
        argument: argument.to_owned(),
        reason,
    }
}

/// The query of a paged read (the audit log's, the events', a webhook's
/// deliveries): `after`, `limit`, and the others `extra` takes (`false`:
/// not a parameter); a bad or unknown one is `invalid_argument`.
pub(crate) fn paging(
    raw: &str,
    what: &str,
    mut extra: impl FnMut(&str, &str) -> Result<bool, Error>,
) -> Result<(i64, u32), Error> {
    let (mut after, mut limit) = (0, 100);
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        match k.as_ref() {
            "after" => after = parse_after(&v)?,
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| bad("limit", format!("{v:?} is not 1..=1000")))?;
            }
            other => {
                if !extra(other, &v)? {
                    return Err(bad(other, format!("not a parameter of {what}")));
                }
            }
        }
    }
    Ok((after, limit))
}

fn parse_after(v: &str) -> Result<i64, Error> {
    v.parse()
        .ok()
        .filter(|n: &i64| *n >= 0)
        .ok_or_else(|| bad("after", format!("{v:?} is not an id (0 or more)")))
}

/// Whose events a caller reads: its tenant's; the server's admins (the
/// default tenant's) any tenant's, or every tenant's.
fn readable_tenant(caller: &Caller, asked: Option<String>) -> Result<Option<String>, Error> {
    let server_admin = caller.role == Role::Admin && caller.tenant == DEFAULT_TENANT;
    match (server_admin, asked) {
        (true, t) => Ok(t),
        (false, Some(t)) if t != caller.tenant => Err(Error::Forbidden {
            operation: "GET /v1/events".into(),
            reason: "only the server's admins read other tenants' events".into(),
        }),
        (false, _) => Ok(Some(caller.tenant.clone())),
    }
}

/// `GET /v1/events`.
pub async fn stream(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let (mut follow, mut tenant) = (false, None);
    let (mut after, limit) = paging(raw.as_deref().unwrap_or(""), "the event stream", |k, v| {
        match k {
            "follow" => {
                follow = match v {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(bad("follow", format!("{v:?} is not true or false"))),
                }
            }
            "tenant" => {
                crate::tenancy::check_tenant_filter(v)?;
                tenant = Some(v.to_owned());
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Some(v) = headers.get("last-event-id") {
        after = parse_after(v.to_str().unwrap_or("-"))?;
    }
    let tenant = readable_tenant(&caller, tenant)?;
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let frame = move |e: &EventRow| -> Bytes {
        if sse {
            Bytes::from(format!(
                "id: {}\nevent: {}\ndata: {}\n\n",
                e.id, e.kind, e.body
            ))
        } else {
            Bytes::from(format!("{}\n", e.body))
        }
    };
    // The first page is read here, so a database error is this answer's.
    let first = state
        .store
        .events_after(tenant.as_deref(), after, limit)
        .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut page = first;
        let mut shutdown = state.shutdown.subscribe();
        let mut idle_since = tokio::time::Instant::now();
        loop {
            for e in &page {
                if tx.send(Ok(frame(e))).await.is_err() {
                    return;
                }
                after = e.id;
            }
            if !follow {
                return;
            }
            if !page.is_empty() {
                idle_since = tokio::time::Instant::now();
            } else if sse && idle_since.elapsed() >= KEEPALIVE {
                if tx
                    .send(Ok(Bytes::from_static(b": keepalive\n\n")))
                    .await
                    .is_err()
                {
                    return;
                }
                idle_since = tokio::time::Instant::now();
            }
            if page.len() < limit as usize {
                tokio::select! {
                    _ = state.wakers.events.notified() => {}
                    _ = tokio::time::sleep(FOLLOW_POLL) => {}
                    _ = tx.closed() => return,
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
            page = match state
                .store
                .events_after(tenant.as_deref(), after, limit)
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "reading events for a stream failed");
                    Vec::new()
                }
            };
        }
    });
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    Ok((
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        Body::from_stream(tokio_stream_from(rx)),
    )
        .into_response())
}

/// `POST /v1/webhooks` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookBody {
    url: String,
    #[serde(default)]
    types: Vec<String>,
    secret: Option<String>,
}

/// A webhook as made: with its secret (shown this once).
#[derive(Debug, Serialize)]
struct Created {
    #[serde(flatten)]
    webhook: Webhook,
    secret: String,
}

fn check_types(types: &[String]) -> Result<(), Error> {
    let known = event_types();
    for (i, t) in types.iter().enumerate() {
        if !known.contains(t) {
            return Err(bad(
                "types",
                format!("{t:?} is not an event type (one of {})", known.join(", ")),
            ));
        }
        if types[..i].contains(t) {
            return Err(bad("types", format!("{t:?} is named twice")));
        }
    }
    Ok(())
}

fn check_secret(secret: Option<String>) -> Result<String, Error> {
    match secret {
        Some(s) if (16..=256).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(s)
        }
        Some(_) => Err(bad(
            "secret",
            "must be 16 to 256 printable ASCII characters without spaces".into(),
        )),
        None => {
            let mut b = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut b);
            Ok(format!("whsec_{}", hex::encode(b)))
        }
    }
}

/// `POST /v1/webhooks`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Response> {
    let b: WebhookBody = json_body(&body)?;
    let to = Endpoint::parse(&b.url)?;
    crate::outbound::refuse_internal(&state.config, &to.host, to.port, "url").await?;
    check_types(&b.types)?;
    let secret = check_secret(b.secret)?;
    let have = state.store.webhooks(&caller.tenant).await?.len() as u64;
    if have >= MAX_WEBHOOKS {
        return Err(Error::QuotaExceeded {
            quota: "webhooks".into(),
            limit: MAX_WEBHOOKS,
            reason: format!("the tenant has {have} webhooks"),
        }
        .into());
    }
    let webhook = state
        .store
        .create_webhook(&caller.tenant, &b.url, &b.types, &secret)
        .await?;
    Ok((StatusCode::CREATED, Json(Created { webhook, secret })).into_response())
}

/// A webhook that does not exist (or is another tenant's).
fn not_found(id: &str) -> Error {
    Error::NotFound {
        what: format!("webhook {id}"),
        name: None,
        id: None,
    }
}

/// `GET /v1/webhooks`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    let hooks = state.store.webhooks(&caller.tenant).await?;
    Ok(Json(serde_json::json!({ "webhooks": hooks })))
}

/// `GET /v1/webhooks/{id}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Webhook>> {
    let hook = state.store.webhook(&caller.tenant, &id).await?;
    Ok(Json(hook.ok_or_else(|| not_found(&id))?))
}

/// `DELETE /v1/webhooks/{id}`.
pub async fn remove(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if state.store.remove_webhook(&caller.tenant, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id).into())
    }
}

/// A page of a webhook's deliveries.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeliveryPage {
    /// The deliveries, oldest first, with their attempts.
    pub deliveries: Vec<Delivery>,
    /// The `after` of the next page (`None`: this page was the last one
    /// so far).
    pub next: Option<i64>,
}

/// `GET /v1/webhooks/{id}/deliveries`.
pub async fn deliveries(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<DeliveryPage>> {
    let (after, limit) = paging(raw.as_deref().unwrap_or(""), "the delivery log", |_, _| {
        Ok(false)
    })?;
    if state.store.webhook(&caller.tenant, &id).await?.is_none() {
        return Err(not_found(&id).into());
    }
    let deliveries = state.store.deliveries(&id, after, limit).await?;
    let next = (deliveries.len() == limit as usize)
        .then(|| deliveries.last().map(|d| d.id))
        .flatten();
    Ok(Json(DeliveryPage { deliveries, next }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_webhook_definitions_are_typed_errors() {
        assert!(check_types(&["sandbox.running".into(), "sandbox.removed".into()]).is_ok());
        for bad in [
            vec!["sandbox.nope".to_owned()],
            vec!["sandbox.running".into(), "sandbox.running".into()],
        ] {
            assert_eq!(
                check_types(&bad).unwrap_err().code(),
                burrow::ErrorCode::InvalidArgument
            );
        }
        assert!(check_secret(None).unwrap().starts_with("whsec_"));
        assert_eq!(check_secret(Some("s".repeat(16))).unwrap(), "s".repeat(16));
        for bad in ["short", "has a space in it!!", &"x".repeat(257)] {
            let e = check_secret(Some(bad.to_owned())).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
        let (after, limit) = paging("after=5&limit=7", "x", |_, _| Ok(false)).unwrap();
        assert_eq!((after, limit), (5, 7));
        for q in ["after=-1", "limit=0", "limit=1001", "nope=1"] {
            let e = paging(q, "x", |_, _| Ok(false)).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{q}");
        }
    }
}

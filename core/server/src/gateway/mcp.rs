//! MCP sessions that outlive their server (streamable HTTP, `Mcp-Session-Id`).
//!
//! A stateful MCP server ends its sessions with its process, and clients do
//! not initialize again when a server answers `404` for a session that
//! died with a reclaimed workload. So the gateway keeps, per target, each
//! session a client opened through it: the client's `initialize` request
//! (recognized by shape: a `POST` without a session id that accepts an
//! event stream and carries a JSON-RPC `initialize`) and the id the answer
//! gave. A later call carrying that id goes to the server under the id the
//! *current* server gave the session. When the server answers `404` (the
//! session is not there: a new process after a stop reclaim or a crash),
//! the gateway replays the `initialize` request and the `initialized`
//! notification to it, maps the client's id to the new one, and sends the
//! call again: the client never sees the `404`. A hibernated vm's server
//! keeps its sessions, so nothing is replayed.
//!
//! - Only the session is carried over: what the server kept *in* it (a
//!   subscription, a counter, an open resource) starts anew.
//! - A call is sent again only when its body was kept: a `POST` up to
//!   [`MAX_RESEND`] bytes (MCP messages are small) or a `DELETE`.
//! - A client's standalone event stream (`GET` with a kept session id) is
//!   answered `405` by the gateway (as the transport allows): an open
//!   stream would either keep the workload awake or wake it at each
//!   reconnection. Server messages travel on the streams of calls.
//! - Sessions live in the database (any replica re-establishes any of them)
//!   until `gateway.mcp_session_ttl` after their last call, or until the
//!   client ends one (`DELETE`), or its target is removed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use burrow::{Error, SandboxId};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;

use super::{connect, unreached, upstream_error, upstream_headers};
use crate::app::{ApiError, ApiResult, AppState};
use crate::store::{ms, now_ms, McpSession, Target};

/// The session header (header names are matched without case).
pub(super) const SESSION: &str = "mcp-session-id";
const PROTOCOL: &str = "mcp-protocol-version";
/// The largest `initialize` request the gateway keeps.
const MAX_INITIALIZE: u64 = 256 * 1024;
/// The largest call body kept to be sent again after a re-established
/// session.
pub const MAX_RESEND: u64 = 8 * 1024 * 1024;
/// The most of a replayed `initialize` answer read.
const MAX_REPLY: usize = 1024 * 1024;
/// The bound on replaying a session to a new server.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);
/// How stale a session's last-use stamp may get before a call renews it.
const TOUCH_EVERY_MS: i64 = 60_000;

/// A session of a target: (target id, client's session id).
type SessionKey = (String, String);

/// Per replica: one re-establishment at a time per session (calls of other
/// replicas are settled by the database's conditional update).
#[derive(Default)]
pub struct Replays {
    locks: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl Replays {
    fn lock_of(&self, target: &str, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the locks nobody holds (bounded by the sessions in replay).
        m.retain(|_, l| Arc::strong_count(l) > 1);
        m.entry((target.to_owned(), session.to_owned()))
            .or_default()
            .clone()
    }
}

/// What the gateway does with one call of a sandbox target.
pub(super) enum Call {
    /// Not MCP, or a session the gateway does not keep: passed on as is.
    Plain,
    /// A client's `initialize`: a session its answer opens is kept.
    Initialize(String),
    /// A call of a kept session, passed on under the server's id.
    Session {
        session: McpSession,
        /// The call's method (a `DELETE` ends the session).
        method: Method,
        /// The request again, if its body was kept.
        again: Option<Box<Again>>,
    },
}

/// What it takes to send a call again.
pub(super) struct Again {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// Where a call goes: the sandbox's run the gateway reached.
pub(super) struct Upstream<'a> {
    pub state: &'a Arc<AppState>,
    pub target: &'a Target,
    pub sid: &'a SandboxId,
    pub generation: i64,
    pub port: u16,
}

fn oldest_live(state: &AppState) -> i64 {
    now_ms() - ms(state.config.gateway.mcp_session_ttl)
}

fn session_id(h: &HeaderMap) -> Option<&str> {
    h.get(SESSION).and_then(|v| v.to_str().ok())
}

fn accepts_events(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// The gateway's own answer to a client's standalone event stream on a kept
/// session (`405`, before the call is counted or the workload started), or
/// `None` for any other call.
pub(super) async fn refuse_stream(
    state: &AppState,
    id: &str,
    method: &Method,
    headers: &HeaderMap,
) -> ApiResult<Option<Response>> {
    let Some(session) = session_id(headers).filter(|_| method == Method::GET) else {
        return Ok(None);
    };
    if !accepts_events(headers) {
        return Ok(None);
    }
    if state
        .store
        .mcp_session(id, session, oldest_live(state))
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": "this gateway carries server messages on the streams of calls only"},
    });
    let mut r = (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body)).into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    Ok(Some(r))
}

fn bad_body(e: impl std::fmt::Display) -> ApiError {
    Error::InvalidArgument {
        argument: "body".into(),
        reason: format!("the request body could not be read: {e}"),
    }
    .into()
}

/// Sorts a call (its upstream `parts` already made), reading its body
/// where the gateway needs it, and puts a kept session's server id in its
/// header. Returns the body to send.
pub(super) async fn classify(
    state: &AppState,
    id: &str,
    parts: &mut Parts,
    body: Body,
) -> ApiResult<(Call, Body)> {
    let length = content_length(&parts.headers);
    if let Some(client_id) = session_id(&parts.headers) {
        let Some(session) = state
            .store
            .mcp_session(id, client_id, oldest_live(state))
            .await?
        else {
            return Ok((Call::Plain, body));
        };
        if let Ok(v) = HeaderValue::from_str(&session.upstream) {
            parts.headers.insert(SESSION, v);
        }
        let keep = match parts.method {
            Method::POST => length.is_some_and(|n| n <= MAX_RESEND),
            Method::DELETE => length.unwrap_or(0) == 0,
            _ => false,
        };
        if !keep {
            let method = parts.method.clone();
            let call = Call::Session {
                session,
                method,
                again: None,
            };
            return Ok((call, body));
        }
        let bytes = axum::body::to_bytes(body, MAX_RESEND as usize)
            .await
            .map_err(bad_body)?;
        let again = Again {
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
            body: bytes.clone(),
        };
        let call = Call::Session {
            session,
            method: parts.method.clone(),
            again: Some(Box::new(again)),
        };
        return Ok((call, Body::from(bytes)));
    }
    let maybe_initialize = parts.method == Method::POST
        && accepts_events(&parts.headers)
        && length.is_some_and(|n| n <= MAX_INITIALIZE);
    if !maybe_initialize {
        return Ok((Call::Plain, body));
    }
    let bytes = axum::body::to_bytes(body, MAX_INITIALIZE as usize)
        .await
        .map_err(bad_body)?;
    let is_initialize = serde_json::from_slice::<serde_json::Value>(&bytes)
        .is_ok_and(|v| v.get("method").and_then(|m| m.as_str()) == Some("initialize"));
    let call = match (is_initialize, std::str::from_utf8(&bytes)) {
        (true, Ok(text)) => Call::Initialize(text.to_owned()),
        _ => Call::Plain,
    };
    Ok((call, Body::from(bytes)))
}

impl Call {
    /// Follows up the server's answer: keeps a session an `initialize`
    /// opened; for a kept session, re-establishes it and sends the call
    /// again if the server no longer has it, and gives the client its own
    /// id back. Returns the answer to relay and the connection it came on.
    pub(super) async fn answer(
        self,
        up: &Upstream<'_>,
        res: hyper::Response<Incoming>,
        conn: SendRequest<Body>,
    ) -> ApiResult<(hyper::Response<Incoming>, SendRequest<Body>)> {
        match self {
            Call::Plain => Ok((res, conn)),
            Call::Initialize(initialize) => {
                let opened = res.status().is_success().then(|| session_id(res.headers()));
                if let Some(Some(sid)) = opened {
                    let now = now_ms();
                    up.state
                        .store
                        .put_mcp_session(&McpSession {
                            target_id: up.target.id.clone(),
                            session: sid.to_owned(),
                            tenant: up.target.tenant.clone(),
                            upstream: sid.to_owned(),
                            initialize,
                            created_at: now,
                            last_used_at: now,
                        })
                        .await?;
                }
                Ok((res, conn))
            }
            Call::Session {
                session,
                method,
                again,
            } => {
                let (mut res, conn) = match again {
                    Some(again) if res.status() == StatusCode::NOT_FOUND => {
                        drop(res);
                        let upstream = reestablish(up, &session, &again.uri).await?;
                        again.send(up, &upstream).await?
                    }
                    _ => (res, conn),
                };
                let store = &up.state.store;
                let now = now_ms();
                if method == Method::DELETE && res.status().is_success() {
                    store
                        .delete_mcp_session(&up.target.id, &session.session)
                        .await?;
                } else if session.last_used_at < now - TOUCH_EVERY_MS {
                    store
                        .touch_mcp_session(&up.target.id, &session.session, now)
                        .await?;
                }
                if res.headers().contains_key(SESSION) {
                    if let Ok(v) = HeaderValue::from_str(&session.session) {
                        res.headers_mut().insert(SESSION, v);
                    }
                }
                Ok((res, conn))
            }
        }
    }
}

impl Again {
    /// Sends the call again under the server's session id `upstream`.
    async fn send(
        self,
        up: &Upstream<'_>,
        upstream: &str,
    ) -> ApiResult<(hyper::Response<Incoming>, SendRequest<Body>)> {
        let mut req = hyper::Request::builder()
            .method(self.method)
            .uri(self.uri)
            .body(Body::from(self.body))
            .map_err(|e| upstream_error(up.state, &up.target.id, &e.to_string()))?;
        *req.headers_mut() = self.headers;
        if let Ok(v) = HeaderValue::from_str(upstream) {
            req.headers_mut().insert(SESSION, v);
        }
        let mut conn = connect_to(up).await?;
        let res = conn
            .send_request(req)
            .await
            .map_err(|e| upstream_error(up.state, &up.target.id, &e.to_string()))?;
        Ok((res, conn))
    }
}

async fn connect_to(up: &Upstream<'_>) -> ApiResult<SendRequest<Body>> {
    let tenant = &up.target.tenant;
    connect(
        up.state,
        tenant,
        &up.target.id,
        up.sid,
        up.generation,
        up.port,
    )
    .await
    .map_err(|e| unreached(up.state, &up.target.id, e))
}

/// The server's id for `session` after it was found missing: re-established
/// by this call, or by another call (of any replica) meanwhile.
async fn reestablish(up: &Upstream<'_>, session: &McpSession, path: &Uri) -> ApiResult<String> {
    let store = &up.state.store;
    let target = &up.target.id;
    let lock = up.state.gateway.replays.lock_of(target, &session.session);
    let _turn = lock.lock().await;
    let now = store
        .mcp_session(target, &session.session, 0)
        .await?
        .map(|s| s.upstream);
    if let Some(now) = now.filter(|u| *u != session.upstream) {
        return Ok(now);
    }
    let new = tokio::time::timeout(REPLAY_TIMEOUT, replay(up, &session.initialize, path))
        .await
        .map_err(|_| {
            upstream_error(
                up.state,
                target,
                "replaying an MCP session's initialize timed out",
            )
        })??;
    // Tests hold a replay here while another replica's goes first.
    burrow::internal::fault::hold(burrow::internal::fault::Fault::GatewayMcpBeforeRemap).await;
    if store
        .remap_mcp_session(target, &session.session, &session.upstream, &new, now_ms())
        .await?
    {
        up.state.metrics.inc(&up.state.metrics.gw_mcp_replays);
        return Ok(new);
    }
    // Another replica re-established it first: its server session is the
    // one kept (this one is left to the server's own expiry).
    Ok(store
        .mcp_session(target, &session.session, 0)
        .await?
        .map_or(new, |s| s.upstream))
}

/// Replays the client's `initialize` and `initialized` to the server;
/// returns the new session's id.
async fn replay(up: &Upstream<'_>, initialize: &str, path: &Uri) -> ApiResult<String> {
    let fail = |detail: String| {
        upstream_error(
            up.state,
            &up.target.id,
            &format!("re-establishing an MCP session: {detail}"),
        )
    };
    let request_id = serde_json::from_str::<serde_json::Value>(initialize)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    let res = post(up, path, initialize.to_owned(), None, None).await?;
    if !res.status().is_success() {
        return Err(fail(format!("initialize answered {}", res.status())));
    }
    let new = session_id(res.headers())
        .ok_or_else(|| fail("the answer to initialize carries no session id".into()))?
        .to_owned();
    let reply = read_reply(res, &request_id).await.map_err(fail)?;
    if let Some(e) = reply.get("error") {
        return Err(fail(format!("initialize failed: {e}")));
    }
    let version = reply
        .pointer("/result/protocolVersion")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let res = post(up, path, note.to_owned(), Some(&new), version.as_deref()).await?;
    if !res.status().is_success() {
        return Err(fail(format!("initialized answered {}", res.status())));
    }
    let _ = res.into_body().collect().await;
    Ok(new)
}

/// A `POST` of `body` to the server at `path` with an MCP client's headers.
async fn post(
    up: &Upstream<'_>,
    path: &Uri,
    body: String,
    session: Option<&str>,
    version: Option<&str>,
) -> ApiResult<hyper::Response<Incoming>> {
    let mut headers = HeaderMap::new();
    upstream_headers(
        &mut headers,
        &format!("127.0.0.1:{}", up.port),
        &up.target.id,
        super::Via::API,
        &up.target.headers,
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    for (name, value) in [(SESSION, session), (PROTOCOL, version)] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert(name, v);
        }
    }
    let mut req = hyper::Request::builder()
        .method(Method::POST)
        .uri(path.clone())
        .body(Body::from(body))
        .map_err(|e| upstream_error(up.state, &up.target.id, &e.to_string()))?;
    *req.headers_mut() = headers;
    let mut conn = connect_to(up).await?;
    conn.send_request(req)
        .await
        .map_err(|e| upstream_error(up.state, &up.target.id, &e.to_string()))
}

/// The JSON-RPC answer to request `id` in a server's reply: a JSON body, or
/// an event stream read until that answer's event.
async fn read_reply(
    res: hyper::Response<Incoming>,
    id: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    let is_stream = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = res.into_body();
    let mut seen = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the answer to initialize: {e}"))?;
        if let Some(data) = frame.data_ref() {
            seen.extend_from_slice(data);
        }
        if seen.len() > MAX_REPLY {
            return Err(format!(
                "the answer to initialize is over {MAX_REPLY} bytes"
            ));
        }
        if is_stream {
            if let Some(v) = answer_in_events(&seen, id) {
                return Ok(v);
            }
        }
    }
    if is_stream {
        return Err("the event stream ended without the answer to initialize".into());
    }
    serde_json::from_slice(&seen).map_err(|e| format!("the answer to initialize: {e}"))
}

/// The JSON-RPC answer to `id` among the complete events of `stream` (SSE:
/// events end with a blank line; an event's `data:` lines joined).
fn answer_in_events(stream: &[u8], id: &serde_json::Value) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(stream).replace("\r\n", "\n");
    let complete = &text[..text.rfind("\n\n")?];
    complete.split("\n\n").find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let v: serde_json::Value = serde_json::from_str(&data.join("\n")).ok()?;
        let answers =
            v.get("id") == Some(id) && (v.get("result").is_some() || v.get("error").is_some());
        answers.then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_found_among_complete_events_only() {
        let id = serde_json::json!(0);
        let stream = b"event: message\r\nid: 1\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-06-18\"}}\n\n";
        let v = answer_in_events(stream, &id).unwrap();
        assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
        // The same event, not ended yet.
        let cut = &stream[..stream.len() - 1];
        assert_eq!(answer_in_events(cut, &id), None);
        // Another request's answer is not this one's.
        assert_eq!(answer_in_events(stream, &serde_json::json!(1)), None);
        // Data split over lines is joined.
        let split = b"data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":0,\"error\":{\"code\":1}}\n\n";
        assert!(answer_in_events(split, &id).unwrap().get("error").is_some());
    }
}

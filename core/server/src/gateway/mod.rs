//! The demand gateway: `/gw/{id}/...` proxies HTTP to a port inside a
//! sandbox (through the agent channel, so the sandbox needs no network) or
//! to a registered URL.
//!
//! Each call, for as long as it runs (including a streamed response),
//! holds its target's call lock, which keeps every replica's reaper off
//! it whatever the timers do ([`crate::store::CallLocks`]), and a request
//! lease, heartbeated, that `burrow serve status` shows; at the end the
//! lease is closed with `last_used_at` stamped, then the lock let go
//! ([`call`]). The warm path is two statements, and the lock's (on the
//! replica's lock session, taken in parallel, only for a target's first
//! call in flight): one opens the lease, stamps `last_used_at` if the
//! target is ready and reads the target's version (the target itself
//! comes from a per-replica cache, read again only when that version
//! moved: changed through any replica); one closes the lease and stamps
//! `last_used_at`. It never answers 503. A target that is not
//! ready is started by the one call that wins the start claim (one
//! statement); calls arriving while that start runs get `503` with
//! `Retry-After` and `burrow-sandbox-state: starting` — they never reached
//! the workload, so retrying is safe. The start runs in its own task (a
//! caller that disconnects does not cancel it), is bounded by
//! `startup_timeout`, and holds no database connection while it waits. A
//! failed start kills the workload, records the error (state `failed`) and
//! answers `502`; the next call starts again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use burrow::{Error, ErrorCode, Sandbox, SandboxId};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::app::{ApiError, ApiResult, AppState};
use crate::routes::parse_id;
use crate::store::{Target, TargetKind};
use crate::targets::not_found;
use crate::tenancy::Caller;

mod call;
pub mod host;
mod mcp;
pub mod origin;
pub mod previews;
mod start;

use call::{open_call, GuardedBody, LeaseGuard};
use origin::Origin;
use start::start;

/// How a call reached the gateway: through which origin, and for which
/// port of a sandbox target (`None`: the target's own).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Via {
    origin: Origin,
    port: Option<u16>,
}

impl Via {
    /// `/gw/{id}/...` on an API listener, the target's own port.
    const API: Via = Via {
        origin: Origin::Api,
        port: None,
    };
}

/// Per-target cache: the target as last read (with its version), the live
/// handle of the current generation and idle HTTP connections over tunnels
/// into it.
#[derive(Default)]
pub struct Gateway {
    targets: Mutex<HashMap<String, (i64, Arc<Target>)>>,
    entries: Mutex<HashMap<String, Entry>>,
    client: OnceLock<Client<crate::outbound::GuardedConnector, Body>>,
    replays: mcp::Replays,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

struct Entry {
    generation: i64,
    sandbox: Sandbox,
    idle: Vec<SendRequest<Body>>,
}

impl Gateway {
    /// Drops everything cached for a target (changed, removed).
    pub fn forget(&self, id: &str) {
        if let Ok(mut t) = self.targets.lock() {
            t.remove(id);
        }
        self.forget_runtime(id);
    }

    /// Drops the handle and the connections of a target's run (reclaimed).
    pub fn forget_runtime(&self, id: &str) {
        if let Ok(mut e) = self.entries.lock() {
            e.remove(id);
        }
    }

    /// The tenant of a cached target, at whatever version (a target's
    /// tenant never changes: a sandbox target's is its sandbox's, a URL
    /// target's id is new for each).
    fn cached_tenant(&self, id: &str) -> Option<String> {
        let t = self.targets.lock().ok()?;
        t.get(id).map(|(_, t)| t.tenant.clone())
    }

    /// The cached target, if it is at `version`.
    fn target(&self, id: &str, version: i64) -> Option<Arc<Target>> {
        let t = self.targets.lock().ok()?;
        t.get(id)
            .filter(|(v, _)| *v == version)
            .map(|(_, t)| t.clone())
    }

    fn remember_target(&self, version: i64, target: Target) -> Arc<Target> {
        let target = Arc::new(target);
        if let Ok(mut t) = self.targets.lock() {
            t.insert(target.id.clone(), (version, target.clone()));
        }
        target
    }

    fn put_back(&self, id: &str, generation: i64, conn: SendRequest<Body>) {
        if let Ok(mut e) = self.entries.lock() {
            if let Some(entry) = e.get_mut(id).filter(|e| e.generation == generation) {
                if entry.idle.len() < 32 {
                    entry.idle.push(conn);
                }
            }
        }
    }

    fn take_idle(&self, id: &str, generation: i64) -> Option<SendRequest<Body>> {
        let mut e = self.entries.lock().ok()?;
        let entry = e.get_mut(id).filter(|e| e.generation == generation)?;
        while let Some(c) = entry.idle.pop() {
            if !c.is_closed() {
                return Some(c);
            }
        }
        None
    }

    fn sandbox(&self, id: &str, generation: i64) -> Option<Sandbox> {
        let e = self.entries.lock().ok()?;
        e.get(id)
            .filter(|e| e.generation == generation)
            .map(|e| e.sandbox.clone())
    }

    fn remember(&self, id: &str, generation: i64, sandbox: Sandbox) {
        if let Ok(mut e) = self.entries.lock() {
            e.insert(
                id.to_owned(),
                Entry {
                    generation,
                    sandbox,
                    idle: Vec::new(),
                },
            );
        }
    }

    /// The client of URL targets: every connection through the outbound
    /// guard (see [`crate::outbound`]).
    fn client(
        &self,
        config: &crate::ServeConfig,
    ) -> &Client<crate::outbound::GuardedConnector, Body> {
        self.client.get_or_init(|| {
            Client::builder(TokioExecutor::new())
                .build(crate::outbound::GuardedConnector::new(config))
        })
    }
}
/// `ANY /gw/{id}[/{*rest}]`.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let id = params.get("id").cloned().unwrap_or_default();
    let served = async {
        ours(&state, &caller, &id).await?;
        serve(&state, &id, req, Via::API).await
    };
    match served.await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// Whether `path` is a gateway call's on an API listener (`/gw/{id}...`).
pub fn is_gateway_path(path: &str) -> bool {
    path == "/gw" || path.starts_with("/gw/")
}

/// Whether target `id` is the caller's tenant's: another tenant's is
/// `not_found`, as one that does not exist, before anything is touched.
async fn ours(state: &AppState, caller: &Caller, id: &str) -> ApiResult<()> {
    if let Some(tenant) = state.gateway.cached_tenant(id) {
        if tenant == caller.tenant {
            return Ok(());
        }
        return Err(not_found(id).into());
    }
    crate::targets::target_of(state, caller, id).await?;
    Ok(())
}

async fn serve(state: &Arc<AppState>, id: &str, mut req: Request, via: Via) -> ApiResult<Response> {
    if let Some(r) = mcp::refuse_stream(state, id, req.method(), req.headers()).await? {
        return Ok(r);
    }
    let (target, lease, ready) = open_call(state, id).await?;
    let path_and_query = match via.origin {
        Origin::Api => forwarded_path(req.uri()),
        Origin::Own => req
            .uri()
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
    };
    // A protocol upgrade (WebSocket, ...): the client's side of it, relayed
    // once the target agrees (101).
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .cloned()
        .map(|proto| (proto, hyper::upgrade::on(&mut req)));
    match &target.kind {
        TargetKind::Url { .. } if via.port.is_some() => Err(not_found(id).into()),
        TargetKind::Url { url } => {
            let uri: Uri = format!("{url}{path_and_query}")
                .parse()
                .map_err(|_| bad_path(&path_and_query))?;
            let (mut parts, body) = req.into_parts();
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            upstream_headers(&mut parts.headers, &authority, id, via, &target.headers);
            keep_upgrade(&mut parts.headers, &upgrade);
            parts.uri = uri;
            let res = state
                .gateway
                .client(&state.config)
                .request(Request::from_parts(parts, body))
                .await
                .map_err(|e| upstream_error(state, id, &e.to_string()))?;
            state.metrics.inc(&state.metrics.gw_warm);
            Ok(respond(res, lease, None, upgrade, via.origin))
        }
        TargetKind::Sandbox { port, command } => {
            let sid = parse_id(id)?;
            // The target's own port is what a start waits for; a call for
            // another port of it goes there once it runs.
            let (port, to) = (*port, via.port.unwrap_or(*port));
            // Cold: this call ran a start (not one that converged on a
            // start someone else finished meanwhile).
            let (began, began_ms) = (std::time::Instant::now(), crate::store::now_ms());
            let (mut generation, mut cold) = match ready {
                Some(g) => (g, false),
                None => {
                    let r = start(state, &target.tenant, id, &sid, port, command, None).await?;
                    (r.generation, r.started)
                }
            };
            let tenant = &target.tenant;
            let conn = match connect(state, tenant, id, &sid, generation, to).await {
                Ok(c) => c,
                Err(e) if !cold && gone(&e) => {
                    // Ready on record but not running (stopped outside the
                    // gateway, crashed): start it, once.
                    let r = start(
                        state,
                        &target.tenant,
                        id,
                        &sid,
                        port,
                        command,
                        Some(generation),
                    )
                    .await?;
                    (generation, cold) = (r.generation, r.started);
                    connect(state, tenant, id, &sid, generation, to)
                        .await
                        .map_err(|e| unreached(state, id, e))?
                }
                Err(e) => return Err(unreached(state, id, e)),
            };
            if cold {
                note_cold_start(state, id, began_ms, began.elapsed());
            }
            let uri: Uri = path_and_query
                .parse()
                .map_err(|_| bad_path(&path_and_query))?;
            let (mut parts, body) = req.into_parts();
            upstream_headers(
                &mut parts.headers,
                &format!("127.0.0.1:{to}"),
                id,
                via,
                &target.headers,
            );
            keep_upgrade(&mut parts.headers, &upgrade);
            parts.uri = uri;
            parts.version = axum::http::Version::HTTP_11;
            let (mcp, body) = mcp::classify(state, id, &mut parts, body).await?;
            let mut conn = conn;
            let res = conn
                .send_request(Request::from_parts(parts, body))
                .await
                .map_err(|e| upstream_error(state, id, &e.to_string()))?;
            let upstream = mcp::Upstream {
                state,
                target: &target,
                sid: &sid,
                generation,
                port,
            };
            let (res, conn) = mcp.answer(&upstream, res, conn).await?;
            state.metrics.inc(if cold {
                &state.metrics.gw_cold
            } else {
                &state.metrics.gw_warm
            });
            // An upgraded connection is never reused, nor one the target
            // said it closes.
            // Idle connections are kept per target and generation: only
            // those to the target's own port.
            let back = (upgrade.is_none() && keeps_alive(&res) && to == port)
                .then(|| (state.clone(), id.to_owned(), generation, conn));
            Ok(respond(res, lease, back, upgrade, via.origin))
        }
    }
}

/// The path and query the target gets: the request's own after
/// `/gw/{id}`, as sent (percent-encoding kept: `%2F` stays one segment,
/// `%3F` is no query), `/` when nothing follows the id.
fn forwarded_path(uri: &Uri) -> String {
    let path = uri.path();
    let after_id = path
        .strip_prefix("/gw/")
        .and_then(|p| p.find('/').map(|i| &p[i..]))
        .unwrap_or("/");
    match uri.query() {
        Some(q) => format!("{after_id}?{q}"),
        None => after_id.to_owned(),
    }
}

fn bad_path(rest: &str) -> ApiError {
    Error::InvalidArgument {
        argument: "path".into(),
        reason: format!("{rest:?} is not a valid request path"),
    }
    .into()
}

/// A target that did not answer: one answer whatever the reason (refused
/// by the outbound guard, a closed port, a reset), so a call tells nothing
/// of the network behind the server; the reason goes to the server's log.
fn upstream_error(state: &AppState, id: &str, detail: &str) -> ApiError {
    state.metrics.inc(&state.metrics.gw_failed);
    tracing::info!(target = %id, error = %detail, "a gateway target did not answer");
    ApiError::bad_gateway(Error::Protocol {
        reason: format!("gateway target {id} did not answer"),
    })
}

/// A connection into a sandbox that could not be made: the tenant's own
/// refusal (its quota, when the connection would have woken the target)
/// as such, anything else as [`upstream_error`].
fn unreached(state: &AppState, id: &str, e: Error) -> ApiError {
    if e.code() == ErrorCode::QuotaExceeded {
        return e.into();
    }
    upstream_error(state, id, &e.to_string())
}

/// The engine as `tenant` sees it: the gateway's handles of its sandboxes
/// act through it, so that whatever starts one (a tunnel that wakes a
/// reclaimed target included) is its start, within its quota and policy.
async fn tenants_engine(state: &AppState, tenant: &str) -> Result<Arc<dyn burrow::Backend>, Error> {
    Caller {
        token: None,
        tenant: tenant.to_owned(),
        role: crate::tenancy::Role::Admin,
    }
    .engine(state)
    .await
}

/// Whether the target keeps the connection open after this response.
fn keeps_alive<B>(res: &hyper::Response<B>) -> bool {
    let says = |token: &str| {
        res.headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match res.version() {
        axum::http::Version::HTTP_10 => says("keep-alive"),
        _ => !says("close"),
    }
}

/// Errors that mean "the sandbox is not running (any more)".
fn gone(e: &Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::InvalidState | ErrorCode::Protocol | ErrorCode::Io | ErrorCode::Starting
    )
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in listed {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(n);
    }
}

fn upstream_headers(
    h: &mut HeaderMap,
    authority: &str,
    id: &str,
    via: Via,
    extra: &[(String, String)],
) {
    strip_hop_by_hop(h);
    // The client's credentials are for burrow, never for the target.
    origin::inbound(h);
    if let Ok(v) = HeaderValue::from_str(authority) {
        h.insert(header::HOST, v);
    }
    h.remove("x-forwarded-prefix");
    if via.origin == Origin::Api {
        if let Ok(v) = HeaderValue::from_str(&format!("/gw/{id}")) {
            h.insert("x-forwarded-prefix", v);
        }
    }
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.insert(k, v);
        }
    }
}

/// Puts the upgrade request back after the hop-by-hop headers were stripped.
fn keep_upgrade(h: &mut HeaderMap, upgrade: &Option<(HeaderValue, hyper::upgrade::OnUpgrade)>) {
    if let Some((proto, _)) = upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, proto.clone());
    }
}

fn respond(
    mut res: hyper::Response<Incoming>,
    lease: LeaseGuard,
    back: Option<(Arc<AppState>, String, i64, SendRequest<Body>)>,
    upgrade: Option<(HeaderValue, hyper::upgrade::OnUpgrade)>,
    origin: Origin,
) -> Response {
    if let (Some((_, client)), axum::http::StatusCode::SWITCHING_PROTOCOLS) =
        (upgrade, res.status())
    {
        // Relay both upgraded connections; the lease lives as long as the
        // relay does.
        let upstream = hyper::upgrade::on(&mut res);
        tokio::spawn(async move {
            let _lease = lease;
            if let (Ok(c), Ok(u)) = (client.await, upstream.await) {
                let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
            }
        });
        let (mut parts, _) = res.into_parts();
        origin::outbound(&mut parts.headers, origin);
        via(&mut parts.headers);
        return Response::from_parts(parts, Body::empty());
    }
    let (mut parts, inner) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    origin::outbound(&mut parts.headers, origin);
    via(&mut parts.headers);
    let body = GuardedBody::new(inner, lease, back);
    Response::from_parts(parts, Body::new(body))
}

/// Marks a relayed answer as the target's own (RFC 9110 7.6.3: a proxy
/// appends itself to `Via`): the gateway's own errors carry no `Via`, so a
/// client can tell a target's `404` from an unknown target's.
fn via(h: &mut HeaderMap) {
    h.append(header::VIA, HeaderValue::from_static("1.1 burrow"));
}

/// An HTTP connection into the sandbox of `tenant`: an idle one of this
/// generation, or a new one over a fresh tunnel.
async fn connect(
    state: &Arc<AppState>,
    tenant: &str,
    id: &str,
    sid: &SandboxId,
    generation: i64,
    port: u16,
) -> Result<SendRequest<Body>, Error> {
    while let Some(mut c) = state.gateway.take_idle(id, generation) {
        if tokio::time::timeout(Duration::from_secs(1), c.ready())
            .await
            .is_ok_and(|r| r.is_ok())
        {
            return Ok(c);
        }
    }
    let sandbox = match state.gateway.sandbox(id, generation) {
        Some(s) => s,
        None => {
            let engine = tenants_engine(state, tenant).await?;
            let info = engine.get_by_id(sid).await?;
            if info.status != burrow::Status::Running {
                return Err(Error::InvalidState {
                    operation: "proxy".into(),
                    name: info.name,
                    id: info.id,
                    status: info.status,
                });
            }
            let s = Sandbox::from_info(engine, &info);
            state.gateway.remember(id, generation, s.clone());
            s
        }
    };
    let tunnel = sandbox.tunnel(port).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tunnel))
        .await
        .map_err(|e| Error::Protocol {
            reason: format!("HTTP handshake over the tunnel: {e}"),
        })?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(sender)
}
/// Keeps a cold start in the target's history (the console plots it), off
/// the call's path.
fn note_cold_start(state: &Arc<AppState>, id: &str, at_ms: i64, took: Duration) {
    let (state, id) = (state.clone(), id.to_owned());
    let start = crate::store::ColdStart {
        at_ms,
        ms: crate::store::ms(took),
    };
    tokio::spawn(async move {
        if let Err(e) = state.store.record_cold_start(&id, start).await {
            tracing::warn!(target = %id, error = %e, "recording a cold start failed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_gets_the_path_as_sent() {
        for (sent, forwarded) in [
            ("/gw/tg_x", "/"),
            ("/gw/tg_x/", "/"),
            ("/gw/tg_x/a/b?q=1", "/a/b?q=1"),
            ("/gw/tg_x/a%2Fb/%3F%20c", "/a%2Fb/%3F%20c"),
            ("/gw/tg_x?q", "/?q"),
        ] {
            let uri: Uri = sent.parse().unwrap();
            assert_eq!(forwarded_path(&uri), forwarded, "{sent}");
        }
    }

    #[test]
    fn only_connections_the_target_keeps_open_go_back_to_the_pool() {
        let res = |version, connection: Option<&str>| {
            let mut b = hyper::Response::builder().version(version);
            if let Some(c) = connection {
                b = b.header(header::CONNECTION, c);
            }
            b.body(()).unwrap()
        };
        use axum::http::Version;
        assert!(keeps_alive(&res(Version::HTTP_11, None)));
        assert!(keeps_alive(&res(Version::HTTP_11, Some("keep-alive"))));
        assert!(!keeps_alive(&res(Version::HTTP_11, Some("close"))));
        assert!(!keeps_alive(&res(Version::HTTP_11, Some("x-foo, Close"))));
        assert!(!keeps_alive(&res(Version::HTTP_10, None)));
        assert!(keeps_alive(&res(Version::HTTP_10, Some("Keep-Alive"))));
    }
}

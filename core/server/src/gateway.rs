//! The demand gateway: `/gw/{id}/...` proxies HTTP to a port inside a
//! sandbox (through the agent channel, so the sandbox needs no network) or
//! to a registered URL.
//!
//! Each call holds a request lease, heartbeated while the call runs
//! (including a streamed response), closed at the end with `last_used_at`
//! stamped. The warm path is two statements: one opens the lease, stamps
//! `last_used_at` if the target is ready and reads the target's version
//! (the target itself comes from a per-replica cache, read again only when
//! that version moved: changed through any replica); one closes the lease
//! and stamps `last_used_at`. It never answers 503. A target that is not
//! ready is started by the one call that wins the start claim (one
//! statement); calls arriving while that start runs get `503` with
//! `Retry-After` and `burrow-sandbox-state: starting` — they never reached
//! the workload, so retrying is safe. The start runs in its own task (a
//! caller that disconnects does not cancel it), is bounded by
//! `startup_timeout`, and holds no database connection while it waits. A
//! failed start kills the workload, records the error (state `failed`) and
//! answers `502`; the next call starts again.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use burrow::{Error, ErrorCode, GuestErrorCode, Sandbox, SandboxId, StartOptions};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::app::{ApiError, ApiResult, AppState};
use crate::routes::parse_id;
use crate::store::{ms, now_ms, CallHold, RuntimeState, Target, TargetKind};
use crate::targets::not_found;

/// A `starting` row older than `startup_timeout` plus this is stranded (its
/// replica died mid-start) and may be claimed again.
const STALE_MARGIN: Duration = Duration::from_secs(5);
/// How often a start probes the target port.
const PORT_POLL: Duration = Duration::from_millis(50);

/// Per-target cache: the target as last read (with its version), the live
/// handle of the current generation and idle HTTP connections over tunnels
/// into it.
#[derive(Default)]
pub struct Gateway {
    targets: Mutex<HashMap<String, (i64, Arc<Target>)>>,
    entries: Mutex<HashMap<String, Entry>>,
    client: OnceLock<Client<HttpConnector, Body>>,
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

    fn client(&self) -> &Client<HttpConnector, Body> {
        self.client
            .get_or_init(|| Client::builder(TokioExecutor::new()).build_http())
    }
}

/// What a call holds for its duration (until the response body is
/// finished or dropped): its call lock, the fact the reaper checks
/// ([`crate::store::CallLocks`]), and its lease, which `burrow serve status`
/// shows and a heartbeat renews (no guard: a lease whose heartbeats are
/// late expires and is swept, and the call goes on).
struct LeaseGuard {
    state: Arc<AppState>,
    lease: String,
    target: String,
    call: Option<CallHold>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl LeaseGuard {
    /// Holds `lease` (already opened) and `call` until dropped.
    fn hold(state: &Arc<AppState>, lease: String, target: &str, call: CallHold) -> LeaseGuard {
        let ttl = ms(state.config.gateway.lease_ttl);
        let every = state.config.gateway.heartbeat_interval;
        let (st, l) = (state.clone(), lease.clone());
        let heartbeat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Tests stall the heartbeats here, past the lease's expiry.
                burrow::internal::fault::hold("gateway.before_heartbeat").await;
                if let Err(e) = st.store.heartbeat_lease(&l, now_ms() + ttl).await {
                    tracing::warn!(lease = %l, error = %e, "lease heartbeat failed");
                }
            }
        });
        LeaseGuard {
            state: state.clone(),
            lease,
            target: target.to_owned(),
            call: Some(call),
            heartbeat,
        }
    }
}

/// How long a call waits for a target whose lock a reaper holds without
/// having claimed it (it lets go within a statement or two) before it is
/// answered 503.
const RECLAIM_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often it looks again meanwhile.
const RECLAIM_LOCK_POLL: Duration = Duration::from_millis(10);

/// Counts the call as in flight on `id` (the lock the reaper respects).
/// While a reclaim holds the target, answers 503 + Retry-After, like a
/// call arriving during a start: the call never reached the workload.
async fn enter_call(state: &Arc<AppState>, id: &str) -> ApiResult<CallHold> {
    let end = Instant::now() + RECLAIM_LOCK_WAIT;
    loop {
        if let Some(hold) = state.store.calls().enter(id).await? {
            return Ok(hold);
        }
        let reaping = state
            .store
            .runtime(id)
            .await?
            .is_some_and(|r| r.state == RuntimeState::Reaping);
        if reaping || Instant::now() > end {
            state.metrics.inc(&state.metrics.gw_busy);
            let id: SandboxId = parse_id(id)?;
            let name = state
                .engine
                .get_by_id(&id)
                .await
                .map(|i| i.name)
                .unwrap_or_default();
            return Err(ApiError::busy(
                Error::Starting { name, id },
                state.retry_after_secs(),
                "reaping",
            ));
        }
        tokio::time::sleep(RECLAIM_LOCK_POLL).await;
    }
}

/// Takes the call's lock and opens its lease, stamping a ready target, at
/// once (the lease comes with the stamp: a reclaim claim re-checks it; the
/// lock keeps any claim off while the call runs), and finds the target:
/// from the cache if its version is the one the statement read, else from
/// the database. Returns the target, the lease, and the generation if the
/// target is ready.
///
/// The lock and the stamp go in parallel, and the call goes on only with
/// both: a claim that came first makes the row `reaping` (no stamp: the
/// call is answered 503), a stamp that came first makes the claim find the
/// row in use (and the reaper lets the lock go).
async fn open_call(
    state: &Arc<AppState>,
    id: &str,
) -> ApiResult<(Arc<Target>, LeaseGuard, Option<i64>)> {
    crate::targets::check_target_id(id)?;
    let now = now_ms();
    let expires = now + ms(state.config.gateway.lease_ttl);
    let (call, open) = tokio::join!(
        enter_call(state, id),
        state.store.open_call(id, state.replica(), expires, now)
    );
    let Some(open) = open? else {
        state.gateway.forget(id);
        return Err(not_found(id).into());
    };
    let call = match call {
        Ok(c) => c,
        Err(e) => {
            let (st, id) = (state.clone(), id.to_owned());
            tokio::spawn(async move {
                let _ = st.store.close_lease(&open.lease, &id, now_ms()).await;
            });
            return Err(e);
        }
    };
    let lease = LeaseGuard::hold(state, open.lease, id, call);
    let target = match state.gateway.target(id, open.target_version) {
        Some(t) => t,
        None => match state.store.get_target_versioned(id).await? {
            Some((t, version)) => state.gateway.remember_target(version, t),
            // Deleted since (the lease is closed as it drops).
            None => {
                state.gateway.forget(id);
                return Err(not_found(id).into());
            }
        },
    };
    Ok((target, lease, open.ready))
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.heartbeat.abort();
        let (st, lease, target, call) = (
            self.state.clone(),
            std::mem::take(&mut self.lease),
            std::mem::take(&mut self.target),
            self.call.take(),
        );
        tokio::spawn(async move {
            if let Err(e) = st.store.close_lease(&lease, &target, now_ms()).await {
                tracing::warn!(lease, error = %e, "closing a lease failed; it will expire");
            }
            // After the stamp: a reaper that gets the lock next sees the
            // call's end as the last use.
            if let Some(call) = call {
                call.release().await;
            }
        });
    }
}

/// The upstream response body, holding the lease (and, for a sandbox, the
/// connection to return to the pool once the body is complete).
struct GuardedBody {
    inner: Incoming,
    lease: Option<LeaseGuard>,
    back: Option<(Arc<AppState>, String, i64, SendRequest<Body>)>,
}

impl GuardedBody {
    fn finish(&mut self) {
        if let Some((st, id, generation, conn)) = self.back.take() {
            st.gateway.put_back(&id, generation, conn);
        }
        self.lease.take();
    }
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            this.finish();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
        // Otherwise the connection is mid-response: it is dropped, not reused.
    }
}

/// `ANY /gw/{id}[/{*rest}]`.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let id = params.get("id").cloned().unwrap_or_default();
    match serve(&state, &id, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(state: &Arc<AppState>, id: &str, mut req: Request) -> ApiResult<Response> {
    let (target, lease, ready) = open_call(state, id).await?;
    let path_and_query = forwarded_path(req.uri());
    // A protocol upgrade (WebSocket, ...): the client's side of it, relayed
    // once the target agrees (101).
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .cloned()
        .map(|proto| (proto, hyper::upgrade::on(&mut req)));
    match &target.kind {
        TargetKind::Url { url } => {
            let uri: Uri = format!("{url}{path_and_query}")
                .parse()
                .map_err(|_| bad_path(&path_and_query))?;
            let (mut parts, body) = req.into_parts();
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            upstream_headers(&mut parts.headers, &authority, id, &target.headers);
            keep_upgrade(&mut parts.headers, &upgrade);
            parts.uri = uri;
            let res = state
                .gateway
                .client()
                .request(Request::from_parts(parts, body))
                .await
                .map_err(|e| upstream_error(state, id, &e.to_string()))?;
            state.metrics.inc(&state.metrics.gw_warm);
            Ok(respond(res, lease, None, upgrade))
        }
        TargetKind::Sandbox { port, command } => {
            let sid = parse_id(id)?;
            let port = *port;
            let (mut generation, mut cold) = match ready {
                Some(g) => (g, false),
                None => (start(state, id, &sid, port, command, None).await?, true),
            };
            let conn = match connect(state, id, &sid, generation, port).await {
                Ok(c) => c,
                Err(e) if !cold && gone(&e) => {
                    // Ready on record but not running (stopped outside the
                    // gateway, crashed): start it, once.
                    generation = start(state, id, &sid, port, command, Some(generation)).await?;
                    cold = true;
                    connect(state, id, &sid, generation, port)
                        .await
                        .map_err(|e| upstream_error(state, id, &e.to_string()))?
                }
                Err(e) => return Err(upstream_error(state, id, &e.to_string())),
            };
            let uri: Uri = path_and_query
                .parse()
                .map_err(|_| bad_path(&path_and_query))?;
            let (mut parts, body) = req.into_parts();
            upstream_headers(
                &mut parts.headers,
                &format!("127.0.0.1:{port}"),
                id,
                &target.headers,
            );
            keep_upgrade(&mut parts.headers, &upgrade);
            parts.uri = uri;
            parts.version = axum::http::Version::HTTP_11;
            let mut conn = conn;
            let res = conn
                .send_request(Request::from_parts(parts, body))
                .await
                .map_err(|e| upstream_error(state, id, &e.to_string()))?;
            state.metrics.inc(if cold {
                &state.metrics.gw_cold
            } else {
                &state.metrics.gw_warm
            });
            // An upgraded connection is never reused, nor one the target
            // said it closes.
            let back = (upgrade.is_none() && keeps_alive(&res))
                .then(|| (state.clone(), id.to_owned(), generation, conn));
            Ok(respond(res, lease, back, upgrade))
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

fn upstream_error(state: &AppState, id: &str, detail: &str) -> ApiError {
    state.metrics.inc(&state.metrics.gw_failed);
    ApiError::bad_gateway(Error::Protocol {
        reason: format!("gateway target {id} did not answer: {detail}"),
    })
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

fn upstream_headers(h: &mut HeaderMap, authority: &str, id: &str, extra: &[(String, String)]) {
    strip_hop_by_hop(h);
    // The client's credentials are for burrow, never for the target.
    h.remove(header::AUTHORIZATION);
    if let Ok(v) = HeaderValue::from_str(authority) {
        h.insert(header::HOST, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("/gw/{id}")) {
        h.insert("x-forwarded-prefix", v);
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
        via(&mut parts.headers);
        return Response::from_parts(parts, Body::empty());
    }
    let (mut parts, inner) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    via(&mut parts.headers);
    let body = GuardedBody {
        inner,
        lease: Some(lease),
        back,
    };
    Response::from_parts(parts, Body::new(body))
}

/// Marks a relayed answer as the target's own (RFC 9110 7.6.3: a proxy
/// appends itself to `Via`): the gateway's own errors carry no `Via`, so a
/// client can tell a target's `404` from an unknown target's.
fn via(h: &mut HeaderMap) {
    h.append(header::VIA, HeaderValue::from_static("1.1 burrow"));
}

/// An HTTP connection into the sandbox: an idle one of this generation, or
/// a new one over a fresh tunnel.
async fn connect(
    state: &Arc<AppState>,
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
            let info = state.engine.get_by_id(sid).await?;
            if info.status != burrow::Status::Running {
                return Err(Error::InvalidState {
                    operation: "proxy".into(),
                    name: info.name,
                    id: info.id,
                    status: info.status,
                });
            }
            let s = Sandbox::from_info(state.engine.clone(), &info);
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

/// Makes the target ready: wins the start claim and runs the start, or
/// answers 503 while someone else's start (or a reclaim) is under way.
/// Returns the generation that is ready.
async fn start(
    state: &Arc<AppState>,
    id: &str,
    sid: &SandboxId,
    port: u16,
    command: &Option<Vec<String>>,
    stale_ready: Option<i64>,
) -> ApiResult<i64> {
    let now = now_ms();
    let stale_before = now - ms(state.config.gateway.startup_timeout + STALE_MARGIN);
    let claimed = state
        .store
        .claim_start(id, state.replica(), now, stale_before, stale_ready)
        .await?;
    let Some(generation) = claimed else {
        let row = state.store.runtime(id).await?;
        if let Some(row) = row.as_ref().filter(|r| r.state == RuntimeState::Ready) {
            // Someone else's start finished in between.
            return Ok(row.generation);
        }
        let reaping = row.is_some_and(|r| r.state == RuntimeState::Reaping);
        state.metrics.inc(&state.metrics.gw_busy);
        let name = state
            .engine
            .get_by_id(sid)
            .await
            .map(|i| i.name)
            .unwrap_or_default();
        return Err(ApiError::busy(
            Error::Starting {
                name,
                id: sid.clone(),
            },
            state.retry_after_secs(),
            if reaping { "reaping" } else { "starting" },
        ));
    };
    // The start is its own task: the caller giving up does not cancel it.
    let task = tokio::spawn(run_start(
        state.clone(),
        id.to_owned(),
        sid.clone(),
        port,
        command.clone(),
        generation,
    ));
    match task.await {
        Ok(Ok(())) => Ok(generation),
        Ok(Err(e)) => {
            state.metrics.inc(&state.metrics.gw_failed);
            Err(ApiError::bad_gateway(e))
        }
        Err(e) => Err(ApiError::bad_gateway(Error::Protocol {
            reason: format!("the start task failed: {e}"),
        })),
    }
}

async fn run_start(
    state: Arc<AppState>,
    id: String,
    sid: SandboxId,
    port: u16,
    command: Option<Vec<String>>,
    generation: i64,
) -> Result<(), Error> {
    let t0 = Instant::now();
    let limit = state.config.gateway.startup_timeout;
    let engine = state.engine.clone();
    let mut name = String::new();
    // Where a start that runs out of time was: its error says so.
    let phase = Mutex::new("starting the sandbox");
    let set_phase = |p| {
        if let Ok(mut g) = phase.lock() {
            *g = p;
        }
    };
    let work = async {
        let info = engine.get_by_id(&sid).await?;
        name = info.name.clone();
        let opts = StartOptions::default().detached(true);
        let info = engine.connect_or_start(&info.name, &sid, opts).await?;
        let sandbox = Sandbox::from_info(engine.clone(), &info);
        if let Some(argv) = &command {
            set_phase(
                "running the target's command, which has not returned (it must start \
                 the service in the background and exit)",
            );
            let out = sandbox.exec(argv.iter().cloned()).await?;
            if !out.success() {
                return Err(Error::StartFailed {
                    name: info.name.clone(),
                    id: info.id.clone(),
                    reason: format!(
                        "the target's command {argv:?} failed ({:?}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ),
                });
            }
        }
        // Ready means the service accepts connections, not just "booted".
        set_phase("waiting for the port to accept connections");
        loop {
            match sandbox.tunnel(port).await {
                Ok(t) => {
                    drop(t);
                    return Ok::<_, Error>(sandbox);
                }
                Err(Error::Guest { source, .. })
                    if source.code() == GuestErrorCode::ConnectionRefused =>
                {
                    tokio::time::sleep(PORT_POLL).await;
                }
                Err(e) => return Err(e),
            }
        }
    };
    let outcome = match tokio::time::timeout(limit, work).await {
        Ok(Ok(sandbox)) => {
            state.gateway.remember(&id, generation, sandbox);
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Timeout {
            operation: format!(
                "starting gateway target {id} (port {port}): {}",
                phase.lock().map(|p| *p).unwrap_or("starting")
            ),
            after: limit,
        }),
    };
    let now = now_ms();
    match outcome {
        Ok(()) => {
            state.metrics.inc(&state.metrics.starts_ok);
            state
                .metrics
                .add(&state.metrics.start_ms_sum, t0.elapsed().as_millis() as u64);
            finish(&state, &id, generation, now, Ok(())).await;
            Ok(())
        }
        Err(e) => {
            state.metrics.inc(&state.metrics.starts_failed);
            tracing::warn!(target = %id, error = %e, "gateway start failed");
            // A failed start leaves nothing running.
            if !name.is_empty() {
                if let Err(k) = engine.kill(&name, &sid).await {
                    tracing::warn!(target = %id, error = %k, "removing the workload of a failed start failed");
                }
            }
            finish(&state, &id, generation, now, Err(e.to_string())).await;
            Err(Error::StartFailed {
                name,
                id: sid,
                reason: e.to_string(),
            })
        }
    }
}

async fn finish(state: &AppState, id: &str, generation: i64, now: i64, r: Result<(), String>) {
    // Retried: a start must never be left `starting` for a database hiccup.
    for attempt in 0..5u32 {
        match state
            .store
            .finish_start(id, generation, now, r.clone())
            .await
        {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(target = %id, attempt, error = %e, "recording the end of a start failed");
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
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

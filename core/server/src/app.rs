//! Shared state, the error answer, authentication and the router.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Router};
use burrow::api::{ErrorBody, ErrorEnvelope};
use burrow::{Backend, Error};

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::store::{hash_token, Store, StoreError};
use crate::tenancy::Caller;

/// Everything a request handler needs.
#[derive(Debug)]
pub struct AppState {
    /// The engine (the local backend).
    pub engine: Arc<dyn Backend>,
    /// The server's own tables.
    pub store: Store,
    /// The configuration.
    pub config: ServeConfig,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// The gateway's per-target connection cache.
    pub gateway: crate::gateway::Gateway,
    /// Set once when the server shuts down (long-lived streams end).
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Per-token request rate limits, if configured.
    pub rate_limiter: Option<crate::ratelimit::RateLimiter>,
    /// Wakes this replica's event streams and deliverer.
    pub wakers: crate::events::Wakers,
    tokens: Mutex<HashMap<String, (Instant, Caller)>>,
}

/// How long a checked token is trusted without asking the database again
/// (a revocation takes effect within this time).
const TOKEN_CACHE: Duration = Duration::from_secs(5);

impl AppState {
    /// Builds the state.
    pub fn new(engine: Arc<dyn Backend>, store: Store, config: ServeConfig) -> Arc<AppState> {
        Arc::new(AppState {
            engine,
            store,
            metrics: Metrics::default(),
            gateway: crate::gateway::Gateway::default(),
            shutdown: tokio::sync::watch::channel(false).0,
            rate_limiter: config
                .auth
                .requests_per_minute
                .map(crate::ratelimit::RateLimiter::new),
            wakers: crate::events::Wakers::default(),
            config,
            tokens: Mutex::default(),
        })
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.config.replica_id
    }

    /// The `Retry-After` value in whole seconds.
    pub fn retry_after_secs(&self) -> u64 {
        self.config.gateway.retry_after.as_secs().max(1)
    }

    /// Who holds `secret` (cached for [`TOKEN_CACHE`]).
    pub(crate) async fn caller(&self, secret: &str) -> Result<Option<Caller>, StoreError> {
        let key = hash_token(secret);
        if let Ok(cache) = self.tokens.lock() {
            if let Some((at, caller)) = cache.get(&key) {
                if at.elapsed() < TOKEN_CACHE {
                    return Ok(Some(caller.clone()));
                }
            }
        }
        let caller = self.store.check_token(secret).await?;
        if let Ok(mut cache) = self.tokens.lock() {
            match &caller {
                Some(c) => {
                    cache.insert(key, (Instant::now(), c.clone()));
                }
                None => {
                    cache.remove(&key);
                }
            }
        }
        Ok(caller)
    }
}

/// How a connection reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP listener: a token is required (unless auth is switched off).
    Tcp,
    /// A unix socket: file permissions are the access control.
    Unix,
}

/// An error answer: the core's error as an [`ErrorEnvelope`] with the status
/// of [`burrow::api::http_status`]; `starting` and pool exhaustion also carry
/// `Retry-After`.
#[derive(Debug)]
pub struct ApiError {
    error: Error,
    retry_after: Option<u64>,
    state_header: Option<&'static str>,
    status: Option<StatusCode>,
}

impl ApiError {
    /// `error`, answered with `status` rather than the one of its code.
    pub fn with_status(error: Error, status: StatusCode) -> ApiError {
        ApiError {
            error,
            retry_after: None,
            state_header: None,
            status: Some(status),
        }
    }

    /// A `503` that tells the client to come back after `secs`.
    pub fn busy(error: Error, secs: u64, state: &'static str) -> ApiError {
        ApiError {
            error,
            retry_after: Some(secs),
            state_header: Some(state),
            status: None,
        }
    }

    /// A `429` `rate_limited`, with `Retry-After` (whole seconds, rounded
    /// up).
    pub fn rate_limited(wait: Duration) -> ApiError {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        ApiError {
            error: Error::RateLimited { retry_after_ms: ms },
            retry_after: Some(ms.div_ceil(1000)),
            state_header: None,
            status: Some(StatusCode::TOO_MANY_REQUESTS),
        }
    }

    /// A `502`: the gateway could not get an answer from its target.
    pub fn bad_gateway(error: Error) -> ApiError {
        ApiError {
            error,
            retry_after: None,
            state_header: None,
            status: Some(StatusCode::BAD_GATEWAY),
        }
    }

    /// The error inside.
    pub fn error(&self) -> &Error {
        &self.error
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError {
            error,
            retry_after: None,
            state_header: None,
            status: None,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let pool = e.is_pool_timeout();
        ApiError {
            error: Error::Store {
                reason: e.to_string(),
                source: None,
            },
            // A pool exhausted for a moment: the client may retry.
            retry_after: pool.then_some(1),
            state_header: None,
            status: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut status = StatusCode::from_u16(burrow::api::http_status(self.error.code()))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.retry_after.is_some() {
            status = StatusCode::SERVICE_UNAVAILABLE;
        }
        if let Some(s) = self.status {
            status = s;
        }
        let body = ErrorEnvelope {
            error: ErrorBody::from(&self.error),
        };
        let code = body.error.code.clone();
        let mut res = (status, axum::Json(body)).into_response();
        res.extensions_mut()
            .insert(crate::audit::AnsweredCode(code));
        let h = res.headers_mut();
        if let Some(s) = self.retry_after.or_else(|| (status == 503).then_some(1)) {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(state) = self.state_header {
            h.insert(
                burrow::api::HEADER_SANDBOX_STATE,
                HeaderValue::from_static(state),
            );
        }
        res
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

pub(crate) fn unauthorized(reason: &str) -> Response {
    ApiError::from(Error::Unauthorized {
        reason: reason.to_owned(),
    })
    .into_response()
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Requires a valid API token on TCP connections (health endpoints
/// excepted), puts its [`Caller`] in the request and refuses what its role
/// may not do (`forbidden`).
async fn authenticate(
    State(state): State<Arc<AppState>>,
    Extension(transport): Extension<Transport>,
    req: Request,
    next: Next,
) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let client = crate::audit::client_of(req.extensions());
    let (caller, res) = admit(&state, transport, req, next).await;
    crate::audit::answered(&state, caller.as_ref(), client, &method, &path, &res).await;
    res
}

/// [`authenticate`]'s admission: the caller (if it is one) and the answer.
async fn admit(
    state: &Arc<AppState>,
    transport: Transport,
    mut req: Request,
    next: Next,
) -> (Option<Caller>, Response) {
    let path = req.uri().path();
    let open = matches!(path, "/healthz" | "/readyz") || crate::console::is_open(path);
    if open || transport == Transport::Unix {
        return (Some(Caller::local()), next.run(req).await);
    }
    if !state.config.auth.required {
        if let Err(res) = crate::loopback::admit(req.method(), path, req.headers()) {
            return (None, res);
        }
        return (Some(Caller::local()), next.run(req).await);
    }
    let caller = match bearer(req.headers()) {
        Some(token) => match state.caller(token).await {
            Ok(Some(caller)) => caller,
            Ok(None) => {
                state.metrics.inc(&state.metrics.auth_failures);
                return (None, unauthorized("unknown or revoked API token"));
            }
            Err(e) => return (None, ApiError::from(e).into_response()),
        },
        // The console's cookie never admits a gateway call: a sandbox's
        // page must not act as the console's viewer.
        None if crate::gateway::is_gateway_path(req.uri().path()) => {
            state.metrics.inc(&state.metrics.auth_failures);
            return (
                None,
                unauthorized("a gateway call needs an API token (Authorization: Bearer <token>)"),
            );
        }
        // The web console's login, in its cookie.
        None => match crate::console::auth::admit_cookie(state, &mut req).await {
            Ok(caller) => caller,
            Err(res) => {
                state.metrics.inc(&state.metrics.auth_failures);
                return (None, res);
            }
        },
    };
    if !caller.allows(req.method(), req.uri().path()) {
        let res = ApiError::from(Error::Forbidden {
            operation: format!("{} {}", req.method(), req.uri().path()),
            reason: format!("the role {} may not do this", caller.role.as_str()),
        })
        .into_response();
        return (Some(caller), res);
    }
    if let (Some(limiter), Some(token)) = (&state.rate_limiter, &caller.token) {
        if let Err(wait) = limiter.take(token) {
            state.metrics.inc(&state.metrics.rate_limited);
            return (Some(caller), ApiError::rate_limited(wait).into_response());
        }
    }
    req.extensions_mut().insert(caller.clone());
    (Some(caller), next.run(req).await)
}

/// Every (method, path template) [`router`] serves, as `openapi.json`
/// documents it: the operations of `/v1/sandboxes/{id}/{op}` one by one,
/// and `ANY` for the gateway (every method). A unit test checks this list
/// against the real router; `tests/openapi.rs` checks the document against it.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/capabilities"),
    ("POST", "/v1/sandboxes"),
    ("GET", "/v1/sandboxes"),
    ("GET", "/v1/sandboxes/by-name/{name}"),
    ("GET", "/v1/sandboxes/{id}"),
    ("PATCH", "/v1/sandboxes/{id}"),
    ("DELETE", "/v1/sandboxes/{id}"),
    ("POST", "/v1/sandboxes/{id}/start"),
    ("POST", "/v1/sandboxes/{id}/connect-or-start"),
    ("POST", "/v1/sandboxes/{id}/stop"),
    ("POST", "/v1/sandboxes/{id}/restart"),
    ("POST", "/v1/sandboxes/{id}/kill"),
    ("POST", "/v1/sandboxes/{id}/drain"),
    ("POST", "/v1/sandboxes/{id}/detach"),
    ("POST", "/v1/sandboxes/{id}/pause"),
    ("POST", "/v1/sandboxes/{id}/resume"),
    ("POST", "/v1/sandboxes/{id}/touch"),
    ("POST", "/v1/sandboxes/{id}/wait"),
    ("POST", "/v1/sandboxes/{id}/destroy"),
    ("POST", "/v1/sandboxes/{id}/snapshot"),
    ("POST", "/v1/sandboxes/{id}/fork"),
    ("GET", "/v1/sandboxes/{id}/metrics"),
    ("GET", "/v1/sandboxes/{id}/logs"),
    ("GET", "/v1/sandboxes/{id}/runs"),
    ("GET", "/v1/sandboxes/{id}/runtime"),
    ("GET", "/v1/snapshots"),
    ("GET", "/v1/snapshots/{name}"),
    ("DELETE", "/v1/snapshots/{name}"),
    ("POST", "/v1/pools"),
    ("GET", "/v1/pools"),
    ("GET", "/v1/pools/{name}"),
    ("PATCH", "/v1/pools/{name}"),
    ("DELETE", "/v1/pools/{name}"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/events"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{id}"),
    ("DELETE", "/v1/webhooks/{id}"),
    ("GET", "/v1/webhooks/{id}/deliveries"),
    ("GET", "/v1/gateway/targets"),
    ("POST", "/v1/gateway/targets"),
    ("PUT", "/v1/gateway/targets/{id}"),
    ("GET", "/v1/gateway/targets/{id}"),
    ("DELETE", "/v1/gateway/targets/{id}"),
    ("POST", "/v1/gateway/targets/{id}/previews"),
    ("DELETE", "/v1/gateway/targets/{id}/previews/{preview}"),
    ("ANY", "/gw/{id}"),
    ("ANY", "/gw/{id}/"),
    ("ANY", "/gw/{id}/{*rest}"),
    ("POST", "/ui/api/login"),
    ("GET", "/ui/api/session"),
    ("POST", "/ui/api/logout"),
    ("GET", "/ui/api/sandboxes/{id}/files"),
    ("GET", "/ui/api/sandboxes/{id}/files/content"),
    ("PUT", "/ui/api/sandboxes/{id}/files/content"),
    ("GET", "/ui/api/sandboxes/{id}/terminal"),
    // After the console's API: the audit log names a request by the first
    // template that matches it.
    ("GET", "/ui"),
    ("GET", "/ui/"),
    ("GET", "/ui/{*path}"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/v1/openapi.json"),
];

/// The whole HTTP surface, for connections arriving over `transport`.
pub fn router(state: Arc<AppState>, transport: Transport) -> Router {
    let gw = any(crate::gateway::handle);
    Router::new()
        .merge(crate::routes::routes())
        .merge(crate::console::routes())
        .route("/gw/{id}", gw.clone())
        .route("/gw/{id}/", gw.clone())
        .route("/gw/{id}/{*rest}", gw)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::render))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/sessions", post(crate::sessions::open))
        .route("/v1/audit", get(crate::audit::list))
        .route("/v1/events", get(crate::events::api::stream))
        .route(
            "/v1/webhooks",
            get(crate::events::api::list).post(crate::events::api::create),
        )
        .route(
            "/v1/webhooks/{id}",
            get(crate::events::api::get).delete(crate::events::api::remove),
        )
        .route(
            "/v1/webhooks/{id}/deliveries",
            get(crate::events::api::deliveries),
        )
        // Every answer is an error envelope, a path or method no route
        // has too.
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .layer(Extension(transport))
        .with_state(state)
}

/// A path no route has: `404`, with the error envelope every other answer
/// carries (code `invalid_argument`, subject `path`).
async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        error: Error::InvalidArgument {
            argument: "path".into(),
            reason: format!("no route for {method} {}", uri.path()),
        },
        retry_after: None,
        state_header: None,
        status: Some(StatusCode::NOT_FOUND),
    }
}

/// A route that exists without this method: `405`, as an error envelope.
async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        error: Error::InvalidArgument {
            argument: "method".into(),
            reason: format!("{} does not take {method}", uri.path()),
        },
        retry_after: None,
        state_header: None,
        status: Some(StatusCode::METHOD_NOT_ALLOWED),
    }
}

async fn readyz(State(state): State<Arc<AppState>>) -> ApiResult<&'static str> {
    state.store.ping().await?;
    Ok("ready\n")
}

async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::body::Body;
    use http_body_util::BodyExt;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    use super::*;

    /// The methods of an OpenAPI path item; `ANY` in [`ROUTES`] is all of them.
    const METHODS: [&str; 8] = [
        "GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE",
    ];

    struct Server {
        _dir: tempfile::TempDir,
        base: String,
        client: Client<HttpConnector, Body>,
        id: String,
    }

    /// A real server (engine on a temporary home, SQLite store) on a
    /// loopback port, routed as a unix-socket connection would be (no token
    /// needed), so every answer comes from routing and handlers.
    async fn server() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let env: BTreeMap<String, String> = [
            ("BURROW_HOME", dir.path().join("home").display().to_string()),
            (
                "BURROW_SERVE_DATABASE",
                format!("sqlite://{}", dir.path().join("serve.db").display()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let config = ServeConfig::load(None, &env).unwrap();
        let store = crate::serve::open_store(&config).await.unwrap();
        let engine = burrow::LocalBackend::open_at(&config.home).await.unwrap();
        let state = AppState::new(Arc::new(engine), store, config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = router(state, Transport::Unix);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Server {
            _dir: dir,
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
            // Well-formed, so handlers get past parsing it (and then find
            // no such sandbox or target).
            id: burrow::SandboxId::new().to_string(),
        }
    }

    /// Whether the router serves `method` on `template`: it answers with a
    /// handler rather than its fallbacks (405, or 404 with the subject
    /// `path`), and the `{op}` route does not refuse the operation as
    /// unknown. A HEAD answer has no body to tell by: its GET is asked.
    async fn served(s: &Server, method: &str, template: &str) -> bool {
        let res = request(s, method, template).await;
        let status = res.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return false;
        }
        if method == "HEAD" {
            return status != StatusCode::NOT_FOUND || Box::pin(served(s, "GET", template)).await;
        }
        let json = res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        // Only complete error bodies are read (session and log answers stream).
        if json && status.is_client_error() {
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            let env: ErrorEnvelope = serde_json::from_slice(&bytes).unwrap();
            let fallback = env.error.code == "invalid_argument"
                && matches!(env.error.subject.as_deref(), Some("operation" | "path"));
            return !fallback;
        }
        status != StatusCode::NOT_FOUND
    }

    async fn request(
        s: &Server,
        method: &str,
        template: &str,
    ) -> hyper::Response<hyper::body::Incoming> {
        let path = template
            .replace("{id}", &s.id)
            .replace("{name}", "nobody")
            .replace("{*rest}", "a/b");
        let req = axum::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", s.base))
            .body(Body::empty())
            .unwrap();
        s.client.request(req).await.unwrap()
    }

    fn methods(m: &str) -> Vec<&str> {
        if m == "ANY" {
            METHODS.to_vec()
        } else {
            vec![m]
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn routes_are_exactly_what_the_router_serves() {
        let s = server().await;
        // The check can say no.
        for (m, p) in [
            ("GET", "/v1/nothing-here"),
            ("POST", "/v1/sandboxes/{id}/frobnicate"),
            ("PUT", "/healthz"),
        ] {
            assert!(!served(&s, m, p).await, "{m} {p} should not be served");
        }
        // Every entry is served.
        for (m, p) in ROUTES {
            for m in methods(m) {
                assert!(
                    served(&s, m, p).await,
                    "ROUTES has {m} {p}, the router does not serve it"
                );
            }
        }
        // On those paths, no other method is (HEAD comes with GET in axum).
        let mut paths: Vec<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
        paths.sort_unstable();
        paths.dedup();
        for p in paths {
            let listed: Vec<&str> = ROUTES
                .iter()
                .filter(|(_, q)| *q == p)
                .flat_map(|(m, _)| methods(m))
                .collect();
            for m in METHODS {
                if listed.contains(&m) || (m == "HEAD" && listed.contains(&"GET")) {
                    continue;
                }
                assert!(
                    !served(&s, m, p).await,
                    "the router serves {m} {p}, ROUTES lacks it"
                );
            }
        }
    }
}

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
    tokens: Mutex<HashMap<String, Instant>>,
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
            config,
            metrics: Metrics::default(),
            gateway: crate::gateway::Gateway::default(),
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

    async fn token_ok(&self, secret: &str) -> Result<bool, StoreError> {
        let key = hash_token(secret);
        if let Ok(cache) = self.tokens.lock() {
            if cache.get(&key).is_some_and(|t| t.elapsed() < TOKEN_CACHE) {
                return Ok(true);
            }
        }
        let ok = self.store.check_token(secret).await?.is_some();
        if let Ok(mut cache) = self.tokens.lock() {
            if ok {
                cache.insert(key, Instant::now());
            } else {
                cache.remove(&key);
            }
        }
        Ok(ok)
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
    /// A `503` that tells the client to come back after `secs`.
    pub fn busy(error: Error, secs: u64, state: &'static str) -> ApiError {
        ApiError {
            error,
            retry_after: Some(secs),
            state_header: Some(state),
            status: None,
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
        let mut res = (status, axum::Json(body)).into_response();
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

fn unauthorized(reason: &str) -> Response {
    ApiError::from(Error::Unauthorized {
        reason: reason.to_owned(),
    })
    .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Requires a valid API token on TCP connections (health endpoints excepted).
async fn authenticate(
    State(state): State<Arc<AppState>>,
    Extension(transport): Extension<Transport>,
    req: Request,
    next: Next,
) -> Response {
    let open = matches!(req.uri().path(), "/healthz" | "/readyz");
    if open || transport == Transport::Unix || !state.config.auth.required {
        return next.run(req).await;
    }
    let Some(token) = bearer(req.headers()) else {
        state.metrics.inc(&state.metrics.auth_failures);
        return unauthorized("an API token is required (Authorization: Bearer <token>)");
    };
    match state.token_ok(token).await {
        Ok(true) => next.run(req).await,
        Ok(false) => {
            state.metrics.inc(&state.metrics.auth_failures);
            unauthorized("unknown or revoked API token")
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The whole HTTP surface, for connections arriving over `transport`.
pub fn router(state: Arc<AppState>, transport: Transport) -> Router {
    let gw = any(crate::gateway::handle);
    Router::new()
        .merge(crate::routes::routes())
        .route("/gw/{id}", gw.clone())
        .route("/gw/{id}/", gw.clone())
        .route("/gw/{id}/{*rest}", gw)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::render))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/sessions", post(crate::sessions::open))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .layer(Extension(transport))
        .with_state(state)
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

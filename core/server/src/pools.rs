//! `/v1/pools`: warm pools of the server's engine. A create through the
//! API whose configuration a pool serves claims one of its sandboxes, as a
//! create of the local backend does; replicas on one host share the pools
//! with the engine's state.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use burrow::api::{PoolList, PoolPatch};
use burrow::{PoolInfo, PoolSpec};

use crate::app::{ApiResult, AppState};
use crate::routes::json_body;
use crate::tenancy::Engine;

pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    body: Bytes,
) -> ApiResult<Response> {
    state.metrics.inc(&state.metrics.api_requests);
    let spec: PoolSpec = json_body(&body)?;
    let info = engine.create_pool(spec).await?;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    engine: Engine,
) -> ApiResult<Json<PoolList>> {
    state.metrics.inc(&state.metrics.api_requests);
    Ok(Json(PoolList {
        pools: engine.list_pools().await?,
    }))
}

pub(crate) async fn get_one(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
) -> ApiResult<Json<PoolInfo>> {
    state.metrics.inc(&state.metrics.api_requests);
    Ok(Json(engine.get_pool(&name).await?))
}

pub(crate) async fn scale(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<PoolInfo>> {
    state.metrics.inc(&state.metrics.api_requests);
    let patch: PoolPatch = json_body(&body)?;
    Ok(Json(engine.scale_pool(&name, patch.size).await?))
}

pub(crate) async fn remove(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    state.metrics.inc(&state.metrics.api_requests);
    engine.remove_pool(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

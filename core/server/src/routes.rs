//! The lifecycle API (`/v1/sandboxes...`): one handler per operation, each a
//! thin call into the engine. Operations by id act through the engine's
//! id-addressed methods, so `?name=` is checked atomically and a replaced
//! name answers `sandbox_replaced`, as with the local backend.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use burrow::api::{
    self, IdentityQuery, LogFrame, RuntimeQuery, SandboxList, StartBody, StopBody, WaitBody,
};
use burrow::{CreateRequest, Error, Modify, SandboxId, SandboxInfo, StartOptions, StopOptions};
use serde::de::DeserializeOwned;

use crate::app::{ApiError, ApiResult, AppState};
use crate::tenancy::{Caller, Engine};

/// The `/v1` routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/capabilities", get(capabilities))
        .route("/v1/sandboxes", post(create).get(list))
        .route("/v1/sandboxes/by-name/{name}", get(get_by_name))
        .route(
            "/v1/sandboxes/{id}",
            get(get_one).patch(modify).delete(remove),
        )
        .route("/v1/sandboxes/{id}/metrics", get(metrics))
        .route("/v1/sandboxes/{id}/logs", get(logs))
        .route("/v1/sandboxes/{id}/runs", get(runs))
        .route("/v1/sandboxes/{id}/runtime", get(runtime))
        .route("/v1/sandboxes/{id}/{op}", post(operation))
        .route("/v1/snapshots", get(list_snapshots))
        .route(
            "/v1/snapshots/{name}",
            get(get_snapshot).delete(remove_snapshot),
        )
        .route(
            "/v1/pools",
            post(crate::pools::create).get(crate::pools::list),
        )
        .route(
            "/v1/pools/{name}",
            get(crate::pools::get_one)
                .patch(crate::pools::scale)
                .delete(crate::pools::remove),
        )
        .route(
            "/v1/gateway/targets",
            get(crate::targets::list).post(crate::targets::create_url),
        )
        .route(
            "/v1/gateway/targets/{id}",
            put(crate::targets::put_sandbox)
                .get(crate::targets::get_one)
                .delete(crate::targets::delete),
        )
        .route(
            "/v1/gateway/targets/{id}/previews",
            post(crate::gateway::previews::create),
        )
        .route(
            "/v1/gateway/targets/{id}/previews/{preview}",
            axum::routing::delete(crate::gateway::previews::revoke),
        )
}

/// Parses a JSON body into `T`; bad JSON is `invalid_argument`, its
/// argument the path of the field that is wrong (`config.cpus`) or `body`
/// when it is the whole; a bad `network` is `invalid_config`, its field
/// that path (`config.network.deny[1]`), as the core's API has it.
pub fn json_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, Error> {
    let body: &[u8] = if body.is_empty() { b"{}" } else { body };
    let mut value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| Error::InvalidArgument {
            argument: "body".into(),
            reason: e.to_string(),
        })?;
    structs_are_objects(&value)?;
    integral_numbers(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let in_network = e
            .path()
            .iter()
            .any(|s| matches!(s, serde_path_to_error::Segment::Map { key } if key == "network"));
        let (path, reason) = (e.path().to_string(), e.into_inner().to_string());
        if in_network {
            // A network rule that does not parse, as the core's API says it.
            return Error::InvalidConfig {
                field: path,
                reason,
            };
        }
        Error::InvalidArgument {
            argument: if path == "." { "body".into() } else { path },
            reason,
        }
    })
}

/// serde reads a struct from a JSON array too (its fields in order): every
/// body, its `config` and each of its `mounts` must be an object, as the
/// document says.
fn structs_are_objects(v: &serde_json::Value) -> Result<(), Error> {
    let not_object = |argument: String| Error::InvalidArgument {
        argument,
        reason: "must be a JSON object".into(),
    };
    let body = v.as_object().ok_or_else(|| not_object("body".into()))?;
    if let Some(config) = body.get("config") {
        let config = config
            .as_object()
            .ok_or_else(|| not_object("config".into()))?;
        if let Some(mounts) = config.get("mounts").and_then(|m| m.as_array()) {
            if let Some(i) = mounts.iter().position(|m| !m.is_object()) {
                return Err(not_object(format!("config.mounts[{i}]")));
            }
        }
    }
    Ok(())
}

/// JSON Schema's integers include `60589.0`: a number without a fraction
/// (exactly representable, |n| <= 2^53) becomes an integer before the body
/// meets its type; a float field takes it all the same.
fn integral_numbers(v: &mut serde_json::Value) {
    use serde_json::Value;
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f.abs() <= EXACT {
                    // Exact: checked just above.
                    #[allow(clippy::cast_possible_truncation)]
                    let i = f as i64;
                    *v = if i >= 0 {
                        Value::from(i.unsigned_abs())
                    } else {
                        Value::from(i)
                    };
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_numbers),
        Value::Object(o) => o.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// Parses a sandbox id from the path.
pub fn parse_id(id: &str) -> Result<SandboxId, Error> {
    id.parse().map_err(|_| Error::InvalidArgument {
        argument: "id".into(),
        reason: format!("{id:?} is not a sandbox id"),
    })
}

/// The name to check the id against: the caller's, or the current one.
async fn name_of(engine: &Engine, id: &SandboxId, q: &IdentityQuery) -> Result<String, Error> {
    match &q.name {
        Some(n) => Ok(n.clone()),
        None => Ok(engine.get_by_id(id).await?.name),
    }
}

fn count(state: &AppState) {
    state.metrics.inc(&state.metrics.api_requests);
}

async fn create(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    body: Bytes,
) -> ApiResult<Response> {
    count(&state);
    let req: CreateRequest = json_body(&body)?;
    let info = engine.create(req).await?;
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

async fn list(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<SandboxList>> {
    count(&state);
    let filter = api::parse_list_query(q.as_deref().unwrap_or(""))?;
    Ok(Json(SandboxList {
        sandboxes: engine.list(&filter).await?,
    }))
}

async fn get_by_name(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
) -> ApiResult<Json<SandboxInfo>> {
    count(&state);
    Ok(Json(engine.get(&name).await?))
}

async fn get_one(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    Query(q): Query<IdentityQuery>,
) -> ApiResult<Json<SandboxInfo>> {
    count(&state);
    let id = parse_id(&id)?;
    Ok(Json(match &q.name {
        Some(n) => engine.status(n, &id).await?,
        None => engine.get_by_id(&id).await?,
    }))
}

async fn modify(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    Query(q): Query<IdentityQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    count(&state);
    let id = parse_id(&id)?;
    let changes: Modify = json_body(&body)?;
    let name = name_of(&engine, &id, &q).await?;
    Ok(Json(engine.modify(&name, &id, &changes).await?).into_response())
}

async fn remove(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    Query(q): Query<IdentityQuery>,
) -> ApiResult<StatusCode> {
    count(&state);
    let id = parse_id(&id)?;
    let name = name_of(&engine, &id, &q).await?;
    engine.remove(&name, &id).await?;
    forget(&state, &id).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Drops what the server keeps about a removed sandbox.
async fn forget(state: &AppState, id: &SandboxId) {
    let _ = state.store.detach(id.as_str()).await;
    let _ = state.store.delete_target(id.as_str()).await;
    state.gateway.forget(id.as_str());
}

async fn operation(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    caller: Caller,
    Path((id, op)): Path<(String, String)>,
    Query(q): Query<IdentityQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    count(&state);
    let id = parse_id(&id)?;
    let e = &engine;
    let info = match op.as_str() {
        "start" | "connect-or-start" => {
            let b: StartBody = json_body(&body)?;
            let name = name_of(&engine, &id, &q).await?;
            if let Some(s) = &b.session {
                if !state
                    .store
                    .session_live(s, &caller.tenant, crate::store::now_ms())
                    .await?
                {
                    return Err(Error::InvalidArgument {
                        argument: "session".into(),
                        reason: format!("no live session {s:?}"),
                    }
                    .into());
                }
            }
            let mut opts = StartOptions::default();
            opts.detached = b.detached;
            let info = if op == "start" {
                e.start(&name, &id, opts).await?
            } else {
                e.connect_or_start(&name, &id, opts).await?
            };
            crate::sessions::note_start(&state, &caller, &info, b.session.as_deref()).await?;
            info
        }
        "stop" | "restart" => {
            let b: StopBody = json_body(&body)?;
            if u128::from(b.grace_ms) > burrow::MAX_DURATION.as_millis() {
                return Err(Error::InvalidArgument {
                    argument: "grace_ms".into(),
                    reason: format!("more than {} ms", burrow::MAX_DURATION.as_millis()),
                }
                .into());
            }
            let name = name_of(&engine, &id, &q).await?;
            let opts = StopOptions::with_grace(Duration::from_millis(b.grace_ms));
            if op == "stop" {
                e.stop(&name, &id, opts).await?
            } else {
                e.restart(&name, &id, opts).await?
            }
        }
        "kill" => e.kill(&name_of(&engine, &id, &q).await?, &id).await?,
        "drain" => {
            let name = name_of(&engine, &id, &q).await?;
            e.request_drain(&name, &id).await?
        }
        "detach" => {
            let info = e.detach(&name_of(&engine, &id, &q).await?, &id).await?;
            state.store.detach(id.as_str()).await?;
            info
        }
        "pause" => e.pause(&name_of(&engine, &id, &q).await?, &id).await?,
        "resume" => e.resume(&name_of(&engine, &id, &q).await?, &id).await?,
        "wait" => {
            let b: WaitBody = json_body(&body)?;
            let name = name_of(&engine, &id, &q).await?;
            e.wait_for_status(&name, &id, &b.statuses).await?
        }
        "snapshot" => {
            let b: api::SnapshotBody = json_body(&body)?;
            let name = name_of(&engine, &id, &q).await?;
            let opts = match b.kind {
                burrow::SnapshotKind::Full => burrow::SnapshotOptions::full(),
                _ => burrow::SnapshotOptions::filesystem(),
            };
            let snap = e.snapshot(&name, &id, &b.snapshot, &opts).await?;
            return Ok((StatusCode::CREATED, Json(snap)).into_response());
        }
        "fork" => {
            let opts: burrow::ForkOptions = json_body(&body)?;
            let name = name_of(&engine, &id, &q).await?;
            let sandboxes = e.fork(&name, &id, &opts).await?;
            return Ok((StatusCode::CREATED, Json(SandboxList { sandboxes })).into_response());
        }
        "touch" => {
            e.touch(&name_of(&engine, &id, &q).await?, &id).await?;
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        "destroy" => {
            e.destroy(&name_of(&engine, &id, &q).await?, &id).await?;
            forget(&state, &id).await;
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        other => {
            return Err(Error::InvalidArgument {
                argument: "operation".into(),
                reason: format!("unknown operation {other:?}"),
            }
            .into())
        }
    };
    Ok(Json(info).into_response())
}

async fn list_snapshots(
    State(state): State<Arc<AppState>>,
    engine: Engine,
) -> ApiResult<Json<api::SnapshotList>> {
    count(&state);
    Ok(Json(api::SnapshotList {
        snapshots: engine.list_snapshots().await?,
    }))
}

async fn get_snapshot(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
) -> ApiResult<Json<burrow::SnapshotInfo>> {
    count(&state);
    Ok(Json(engine.get_snapshot(&name).await?))
}

async fn remove_snapshot(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    count(&state);
    engine.remove_snapshot(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn capabilities(
    State(state): State<Arc<AppState>>,
    engine: Engine,
) -> ApiResult<Json<burrow::Capabilities>> {
    count(&state);
    Ok(Json(engine.capabilities().await?))
}

async fn metrics(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    Query(q): Query<IdentityQuery>,
) -> ApiResult<Json<burrow::Metrics>> {
    count(&state);
    let id = parse_id(&id)?;
    let name = name_of(&engine, &id, &q).await?;
    Ok(Json(engine.metrics(&name, &id).await?))
}

/// `GET /v1/sandboxes/{id}/runs?name=&limit=`.
async fn runs(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<api::RunList>> {
    count(&state);
    let id = parse_id(&id)?;
    let (mut q, mut limit) = (IdentityQuery::default(), api::MAX_RUNS);
    for (k, v) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "name" => q.name = Some(v.into_owned()),
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=api::MAX_RUNS).contains(n))
                    .ok_or_else(|| Error::InvalidArgument {
                        argument: "limit".into(),
                        reason: format!("{v:?} is not 1..={}", api::MAX_RUNS),
                    })?;
            }
            other => {
                return Err(Error::InvalidArgument {
                    argument: other.to_owned(),
                    reason: "not a parameter of runs (name, limit)".into(),
                }
                .into())
            }
        }
    }
    let name = name_of(&engine, &id, &q).await?;
    Ok(Json(api::RunList {
        runs: engine.runs(&name, &id, limit).await?,
    }))
}

async fn logs(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    count(&state);
    let id = parse_id(&id)?;
    let (name, rest) = split_name(raw.as_deref().unwrap_or(""));
    let opts = api::parse_logs_query(&rest)?;
    let name = name_of(&engine, &id, &IdentityQuery { name }).await?;
    let mut stream = engine.logs(&name, &id, &opts).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            let frame = match item {
                Ok(line) => LogFrame::Line(line),
                Err(e) => LogFrame::Error((&e).into()),
            };
            let mut bytes = serde_json::to_vec(&frame).unwrap_or_default();
            bytes.push(b'\n');
            // The client went away: stop following.
            if tx.send(Ok(Bytes::from(bytes))).await.is_err() {
                break;
            }
        }
    });
    let body = Body::from_stream(tokio_stream_from(rx));
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )],
        body,
    )
        .into_response())
}

/// Takes `name` out of a query string; returns it and the rest.
fn split_name(raw: &str) -> (Option<String>, String) {
    let mut name = None;
    let mut rest = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        if k == "name" {
            name = Some(v.into_owned());
        } else {
            rest.append_pair(&k, &v);
        }
    }
    (name, rest.finish())
}

/// An mpsc receiver as a `Stream` for streamed bodies.
pub fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// `GET /v1/sandboxes/{id}/runtime`: upgrades the connection to a
/// protocol stream relayed to the sandbox's supervisor, runtime requests
/// only ([`crate::runtime_relay`]).
async fn runtime(
    State(state): State<Arc<AppState>>,
    engine: Engine,
    Path(id): Path<String>,
    Query(q): Query<RuntimeQuery>,
    mut req: Request,
) -> ApiResult<Response> {
    count(&state);
    let id = parse_id(&id)?;
    // What does not exist (or is another tenant's) is that first.
    let name = name_of(
        &engine,
        &id,
        &IdentityQuery {
            name: q.name.clone(),
        },
    )
    .await?;
    let wants_upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(api::UPGRADE_PROTOCOL));
    if !wants_upgrade {
        return Err(ApiError::from(Error::InvalidArgument {
            argument: "upgrade".into(),
            reason: format!("this endpoint needs `Upgrade: {}`", api::UPGRADE_PROTOCOL),
        }));
    }
    let stream = engine.open_runtime(&name, &id, q.wake).await?;
    let generation = stream.generation;
    let audit = crate::audit::StreamAudit::of(&state, &req, &id.to_string());
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let io = hyper_util::rt::TokioIo::new(upgraded);
        let (client_rd, client_wr) = tokio::io::split(io);
        // Frame by frame: lifecycle control frames are refused there.
        crate::runtime_relay::relay(client_rd, client_wr, stream, Some(&audit)).await;
    });
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = res.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(
        header::UPGRADE,
        HeaderValue::from_static(api::UPGRADE_PROTOCOL),
    );
    h.insert(api::HEADER_GENERATION, HeaderValue::from(generation));
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_objects_at_every_struct() {
        let body = |s: &str| Bytes::from(s.to_owned());
        for bad in [
            "[null, null]",
            "1",
            r#"{"name":"a","detached":true,"config":["img"]}"#,
            r#"{"name":"a","detached":true,"config":{"image":"i","mounts":[["/h","/t"]]}}"#,
        ] {
            let e = json_body::<serde_json::Value>(&body(bad)).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
        let m: Modify = json_body(&body("{}")).unwrap();
        assert!(m.is_empty());
        let e = json_body::<Modify>(&body("[null, null]")).unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument);
        let s: StopBody = json_body(&body(r#"{"grace_ms": 60589.0}"#)).unwrap();
        assert_eq!(s.grace_ms, 60589);
        // Parsed exactly (serde_json's float_roundtrip): a large integral
        // float is an integer, as JSON Schema reads it.
        let s: StopBody = json_body(&body(r#"{"grace_ms": 2251799813685247.0}"#)).unwrap();
        assert_eq!(s.grace_ms, 2_251_799_813_685_247);
    }

    #[test]
    fn a_bad_field_is_named_by_its_path() {
        let body = |s: &str| Bytes::from(s.to_owned());
        let argument = |e: Error| match e {
            Error::InvalidArgument { argument, .. }
            | Error::InvalidConfig {
                field: argument, ..
            } => argument,
            other => panic!("not invalid_argument or invalid_config: {other:?}"),
        };
        let e = json_body::<CreateRequest>(&body(
            r#"{"name":"a","config":{"image":"i","network":{"allow":["pypi.org"],"deny":["x.org","0000"]}}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig);
        assert_eq!(argument(e), "config.network.deny[1]");
        let e = json_body::<Modify>(&body(r#"{"network":{"allow":["a.org:9-8"]}}"#)).unwrap_err();
        assert_eq!(argument(e), "network.allow[0]");
        let e = json_body::<Modify>(&body(r#"{"memory_mb":"x"}"#)).unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument);
        assert_eq!(argument(e), "memory_mb");
        let e = json_body::<Modify>(&body("{")).unwrap_err();
        assert_eq!(argument(e), "body");
    }
}

//! Client sessions: how attached sandboxes work through a server.
//!
//! A remote backend holds one `POST /v1/sessions` answer open for as long
//! as its process lives. Attached starts name that session; when its
//! connection closes (the client process exited, however it died) the
//! server stops the sandboxes attached through it with reason
//! `owner_exited`, exactly as a local supervisor does when its owner dies.
//! Sessions live in the database, so a start may reach another replica than
//! the session; a replica that dies stops heartbeating its sessions, and any
//! replica ends them once they expire.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use burrow::api::SessionFrame;
use burrow::{SandboxId, SandboxInfo, StopOptions};

use crate::app::{ApiResult, AppState};
use crate::store::{ms, now_ms};
use crate::tenancy::Caller;

/// How often the open answer carries a heartbeat line (a closed connection
/// is noticed at the next write).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a session outlives its last database heartbeat.
const SESSION_TTL: Duration = Duration::from_secs(15);
/// How often the database row is heartbeated.
const DB_HEARTBEAT: Duration = Duration::from_secs(5);

fn frame(f: &SessionFrame) -> Bytes {
    let mut v = serde_json::to_vec(f).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// `POST /v1/sessions`.
pub async fn open(State(state): State<Arc<AppState>>, caller: Caller) -> ApiResult<Response> {
    let id = state
        .store
        .open_session(state.replica(), &caller.tenant, now_ms() + ms(SESSION_TTL))
        .await?;
    state.metrics.inc(&state.metrics.sessions_open);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let _ = tx.try_send(Ok(frame(&SessionFrame::Opened {
        session: id.clone(),
    })));
    let mut shutdown = state.shutdown.subscribe();
    tokio::spawn(async move {
        let mut last_db = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                // The server is going away: the stream ends here, and the
                // session is left to expire (its sandboxes stop with it, or
                // with this process, their owner).
                _ = shutdown.wait_for(|s| *s) => {
                    state.metrics.sessions_open.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            }
            if tx.send(Ok(frame(&SessionFrame::Heartbeat))).await.is_err() {
                break;
            }
            if last_db.elapsed() >= DB_HEARTBEAT {
                last_db = tokio::time::Instant::now();
                match state
                    .store
                    .heartbeat_session(&id, now_ms() + ms(SESSION_TTL))
                    .await
                {
                    Ok(true) => {}
                    // Ended elsewhere (expired while the database was away).
                    Ok(false) => break,
                    Err(e) => tracing::warn!(session = %id, error = %e, "session heartbeat failed"),
                }
            }
        }
        state.metrics.sessions_open.fetch_sub(1, Ordering::Relaxed);
        end(&state, &id).await;
    });
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )],
        Body::from_stream(crate::routes::tokio_stream_from(rx)),
    )
        .into_response())
}

/// After a start through the API: an attached sandbox started with a
/// session is tied to it (by its engine's name: `info` is as `caller`
/// sees it); a detached one is tied to nothing.
pub async fn note_start(
    state: &AppState,
    caller: &Caller,
    info: &SandboxInfo,
    session: Option<&str>,
) -> Result<(), crate::store::StoreError> {
    match (info.detached, session) {
        (false, Some(s)) => {
            let name = match caller.scope() {
                Some(scope) => format!("{scope}/{}", info.name),
                None => info.name.clone(),
            };
            state.store.attach(info.id.as_str(), &name, s).await
        }
        (true, _) => state.store.detach(info.id.as_str()).await,
        (false, None) => Ok(()),
    }
}

/// Ends a session: its attached sandboxes stop with reason `owner_exited`.
pub async fn end(state: &AppState, session: &str) {
    let attached = match state.store.end_session(session).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(session, error = %e, "ending a session failed; it will expire");
            return;
        }
    };
    for (id, name) in attached {
        let Ok(id) = id.parse::<SandboxId>() else {
            continue;
        };
        match state.engine.status(&name, &id).await {
            Ok(info) if !info.detached && info.status.has_runtime() => {}
            _ => continue,
        }
        let opts = StopOptions::default().owner_exited(true);
        if let Err(e) = state.engine.stop(&name, &id, opts).await {
            tracing::warn!(sandbox = %id, error = %e, "stopping a sandbox of an ended session failed");
        }
    }
}

/// Ends the sessions whose replica stopped heartbeating them.
pub async fn sweep(state: &AppState) {
    match state.store.expired_sessions(now_ms()).await {
        Ok(ids) => {
            for id in ids {
                end(state, &id).await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "sweeping expired sessions failed"),
    }
}

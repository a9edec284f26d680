//! One client connection to the supervisor socket: identity check, then
//! requests relayed to the agent (ids rewritten, so many clients share the
//! one agent channel) and control requests handled here.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use burrow_protocol::{
    encode, Control, GuestError, GuestErrorCode, GuestMsg, HostMsg, Request, Response,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::{Command, Shared};
use crate::model::ExitReason;
use crate::runtime::frames::read_frame;

const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let (mut rd, wr) = stream.into_split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<GuestMsg>();
    let writer = tokio::spawn(async move {
        let mut w = BufWriter::new(wr);
        while let Some(msg) = out_rx.recv().await {
            if w.write_all(&encode(&msg)).await.is_err() {
                return;
            }
            while let Ok(more) = out_rx.try_recv() {
                if w.write_all(&encode(&more)).await.is_err() {
                    return;
                }
            }
            if w.flush().await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });

    // Hello: the client states which runtime it expects to reach.
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_frame::<_, HostMsg>(&mut rd)).await;
    let fatal = |code, msg: String| GuestMsg::Fatal {
        error: GuestError::new(code, msg),
    };
    match hello {
        Ok(Ok(Some(HostMsg::Hello { version, expect }))) => {
            if version != PROTOCOL_VERSION {
                let _ = out_tx.send(fatal(
                    GuestErrorCode::Protocol,
                    format!("protocol {version} is not {PROTOCOL_VERSION}"),
                ));
                drop(out_tx);
                let _ = writer.await;
                return;
            }
            if let Some(e) = expect.filter(|e| *e != shared.identity) {
                let _ = out_tx.send(fatal(
                    GuestErrorCode::IdentityMismatch,
                    format!(
                        "this is {} generation {}, not {} generation {}",
                        shared.identity.sandbox_id,
                        shared.identity.generation,
                        e.sandbox_id,
                        e.generation
                    ),
                ));
                drop(out_tx);
                let _ = writer.await;
                return;
            }
            let _ = out_tx.send(GuestMsg::Hello {
                version: PROTOCOL_VERSION,
                agent_version: shared.agent.hello().agent_version.clone(),
                identity: Some(shared.identity.clone()),
            });
        }
        _ => {
            let _ = out_tx.send(fatal(
                GuestErrorCode::Protocol,
                "expected a hello frame".into(),
            ));
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    }

    // client request id -> agent request id
    let routes: Arc<std::sync::Mutex<HashMap<u64, u64>>> = Arc::default();
    loop {
        let msg = match read_frame::<_, HostMsg>(&mut rd).await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                let _ = out_tx.send(fatal(GuestErrorCode::Protocol, format!("bad frame: {e}")));
                break;
            }
        };
        let route = |id: u64| {
            routes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .copied()
        };
        match msg {
            HostMsg::Hello { .. } => {
                let _ = out_tx.send(fatal(GuestErrorCode::Protocol, "duplicate hello".into()));
                break;
            }
            HostMsg::Request { id, mut body } => {
                // Announce the request before looking at `closing`: the idle
                // reaper sets `closing` before it looks at `in_flight`, so
                // either it sees this request or this request sees the
                // reclaim (then it is refused unrun, and safe to retry).
                shared.in_flight.fetch_add(1, Ordering::SeqCst);
                let release = |shared: &Shared| {
                    let left = shared.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
                    let _ = shared.idle.send(left);
                };
                let refusal = if shared.closing.load(Ordering::SeqCst) {
                    Some((
                        GuestErrorCode::Unavailable,
                        "the sandbox is draining or stopping".to_string(),
                    ))
                } else if shared.paused.load(Ordering::SeqCst) {
                    Some((
                        GuestErrorCode::Unavailable,
                        "the sandbox is paused".to_string(),
                    ))
                } else if route(id).is_some() {
                    Some((
                        GuestErrorCode::InvalidArgument,
                        format!("request id {id} is already in flight"),
                    ))
                } else {
                    None
                };
                if let Some((code, why)) = refusal {
                    release(&shared);
                    let _ = out_tx.send(GuestMsg::Response {
                        id,
                        result: Err(GuestError::new(code, why)),
                    });
                    continue;
                }
                // Ping is a health check, not use; everything else is activity.
                let activity = !matches!(body, Request::Ping);
                if let Request::Exec(exec) = &mut body {
                    // The persisted environment (as last reloaded) under the
                    // request's own.
                    for (k, v) in shared.env.read().unwrap_or_else(|p| p.into_inner()).iter() {
                        exec.env.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                let mut handle = match shared.agent.request(body) {
                    Ok(h) => h,
                    Err(_) => {
                        release(&shared);
                        let _ = out_tx.send(GuestMsg::Response {
                            id,
                            result: Err(GuestError::new(
                                GuestErrorCode::Unavailable,
                                "the guest agent is gone",
                            )),
                        });
                        continue;
                    }
                };
                if activity {
                    shared.touch();
                }
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id, handle.id());
                let out = out_tx.clone();
                let shared2 = shared.clone();
                let routes2 = routes.clone();
                tokio::spawn(async move {
                    let mut answered = false;
                    while let Some(m) = handle.next().await {
                        let m = match m {
                            GuestMsg::Stdout { data, .. } => GuestMsg::Stdout { id, data },
                            GuestMsg::Stderr { data, .. } => GuestMsg::Stderr { id, data },
                            GuestMsg::Eof { .. } => GuestMsg::Eof { id },
                            GuestMsg::Response { result, .. } => {
                                answered = true;
                                GuestMsg::Response { id, result }
                            }
                            other => other,
                        };
                        let _ = out.send(m);
                    }
                    if !answered {
                        let _ = out.send(GuestMsg::Response {
                            id,
                            result: Err(GuestError::new(
                                GuestErrorCode::Aborted,
                                "the guest agent went away",
                            )),
                        });
                    }
                    routes2
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&id);
                    let left = shared2.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
                    let _ = shared2.idle.send(left);
                });
            }
            HostMsg::Control { id, body } => handle_control(id, body, &shared, &out_tx),
            HostMsg::Data { id, data } => {
                forward(&shared, route(id), |aid| HostMsg::Data { id: aid, data })
            }
            HostMsg::Eof { id } => forward(&shared, route(id), |aid| HostMsg::Eof { id: aid }),
            HostMsg::Signal { id, signal } => forward(&shared, route(id), |aid| HostMsg::Signal {
                id: aid,
                signal,
            }),
            HostMsg::Resize { id, size } => {
                forward(&shared, route(id), |aid| HostMsg::Resize { id: aid, size })
            }
            HostMsg::Cancel { id } => {
                forward(&shared, route(id), |aid| HostMsg::Cancel { id: aid })
            }
        }
    }
    // The client went away: abandon whatever it still had running.
    let left: Vec<u64> = routes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .copied()
        .collect();
    for aid in left {
        let _ = shared.agent.send(HostMsg::Cancel { id: aid });
    }
    drop(out_tx);
    let _ = writer.await;
}

fn forward(shared: &Shared, agent_id: Option<u64>, make: impl FnOnce(u64) -> HostMsg) {
    // Frames for unknown or finished requests are dropped: the request may
    // have just ended, which is not an error.
    if let Some(aid) = agent_id {
        let _ = shared.agent.send(make(aid));
    }
}

fn handle_control(
    id: u64,
    body: Control,
    shared: &Arc<Shared>,
    out: &mpsc::UnboundedSender<GuestMsg>,
) {
    if let Control::Status = body {
        let _ = out.send(GuestMsg::Response {
            id,
            result: Ok(Response::Supervisor {
                pid: std::process::id(),
                in_flight: shared.in_flight.load(Ordering::SeqCst),
            }),
        });
        return;
    }
    let (tx, rx) = oneshot::channel();
    let cmd = match body {
        Control::Status => return,
        Control::Stop {
            grace_ms,
            owner_exited,
        } => Command::Stop {
            grace: Duration::from_millis(grace_ms),
            reason: if owner_exited {
                ExitReason::OwnerExited
            } else {
                ExitReason::Stopped
            },
            reply: Some(tx),
        },
        Control::Kill => Command::Kill { reply: Some(tx) },
        Control::Drain => Command::Drain { reply: tx },
        Control::Detach => Command::Detach { reply: tx },
        Control::Touch => Command::Touch { reply: tx },
        Control::Pause => Command::Pause { reply: tx },
        Control::Resume => Command::Resume { reply: tx },
        Control::Reload => Command::Reload { reply: tx },
        Control::Metrics => Command::Metrics { reply: tx },
    };
    let _ = shared.commands.send(cmd);
    let out = out.clone();
    tokio::spawn(async move {
        // A dropped reply means the run ended meanwhile: for a stop or kill
        // that is success, for anything else the sandbox is gone.
        let result = rx.await.unwrap_or(Ok(Response::Done));
        let _ = out.send(GuestMsg::Response { id, result });
    });
}

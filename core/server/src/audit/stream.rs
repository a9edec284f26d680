//! The audit of the runtime stream (`GET /v1/sandboxes/{id}/runtime`): one
//! entry per action-shaped request that crosses the relay (an exec, a
//! shell, a file read or written, a directory made, a path removed or
//! renamed, a copy in or out, a tunnel), never one per frame, and one per
//! lifecycle control the relay refuses.
//!
//! An entry is queued as the request crosses (outcome `pending`, so a
//! shell or a tunnel shows while it runs) and its outcome when the
//! runtime answers it (`ok`, or `error` with the runtime's error code);
//! what is still pending when the stream ends is `interrupted`. An entry
//! names the program (`argv[0]`, never the arguments), the path or the
//! port: never the environment, the input, the output or a file's bytes.
//! Metadata reads (list, stat, exists), `ping` and `sync` are not
//! logged.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::Request as HttpRequest;
use burrow_protocol::{GuestMsg, Request};

use super::{short, Who};
use crate::app::AppState;
use crate::store::{AuditEntry, Outcome, Store};
use crate::tenancy::Caller;

/// The operation and the object of an action-shaped request; `None` for
/// a request that is not logged.
pub fn action_of(body: &Request) -> Option<(&'static str, Option<String>)> {
    let path = |p: &str| Some(short(p));
    Some(match body {
        Request::Exec(e) => {
            let op = if e.tty.is_some() { "shell" } else { "exec" };
            (op, e.argv.first().map(|a| short(a)))
        }
        Request::ReadFile { path: p } => ("fs.read", path(p)),
        Request::WriteFile { path: p, .. } => ("fs.write", path(p)),
        Request::Mkdir { path: p, .. } => ("fs.mkdir", path(p)),
        Request::Remove { path: p, .. } => ("fs.remove", path(p)),
        Request::Rename { from, to } => ("fs.rename", Some(short(&format!("{from} -> {to}")))),
        Request::CopyIn { path: p } => ("copy_in", path(p)),
        Request::CopyOut { path: p } => ("copy_out", path(p)),
        Request::Tunnel { port } => ("tunnel", Some(port.to_string())),
        Request::UdpTunnel { port } => ("tunnel", Some(format!("{port}/udp"))),
        Request::WriteLayer => ("fs.layer", None),
        // Metadata reads and no-ops; the lifecycle requests are refused
        // (and logged) before they get here.
        Request::Ping
        | Request::ListDir { .. }
        | Request::Stat { .. }
        | Request::Exists { .. }
        | Request::Sync
        | Request::Suspend
        | Request::Shutdown { .. } => return None,
    })
}

/// The audit of one runtime stream: who opened it, on which sandbox, and
/// the actions of it still waiting for their answer.
#[derive(Debug)]
pub struct StreamAudit {
    store: Store,
    who: Who,
    sandbox: String,
    /// Request id on the stream -> the key of its pending entry.
    pending: Mutex<HashMap<u64, String>>,
}

/// The first fields of a frame the runtime sends: enough to tell an
/// answer from the rest without decoding a frame's data.
#[derive(serde::Deserialize)]
struct Head {
    t: String,
    #[serde(default)]
    id: Option<u64>,
}

impl StreamAudit {
    /// The audit of a stream opened by `who` on `sandbox`.
    pub fn new(store: Store, who: Who, sandbox: String) -> StreamAudit {
        StreamAudit {
            store,
            who,
            sandbox,
            pending: Mutex::default(),
        }
    }

    /// The audit of the stream `req` opens on `sandbox`: its caller (as
    /// the handlers take it: the unix socket's and a server's without
    /// auth is [`Caller::local`]) and client address.
    pub fn of(state: &AppState, req: &HttpRequest, sandbox: &str) -> StreamAudit {
        let caller = req
            .extensions()
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(Caller::local);
        let who = Who::new(Some(&caller), super::client_of(req.extensions()));
        StreamAudit::new(state.store.clone(), who, sandbox.to_owned())
    }

    fn entry(&self, operation: &str, object: Option<String>) -> AuditEntry {
        let mut e = AuditEntry::new(operation, object);
        self.who.stamp(&mut e);
        e.sandbox = Some(self.sandbox.clone());
        e
    }

    /// Request `id` is about to cross to the runtime (called before it is
    /// passed on, so its answer cannot come first).
    pub async fn request(&self, id: u64, body: &Request) {
        let Some((operation, object)) = action_of(body) else {
            return;
        };
        let key = format!("act_{:032x}", rand::random::<u128>());
        let mut e = self.entry(operation, object);
        e.outcome = Outcome::Pending;
        e.action = Some(key.clone());
        self.store.queue_audit(e).await;
        // An id used again before its answer (a client breaking the
        // protocol): the first one is not waited for any more.
        let replaced = self.lock().insert(id, key);
        if let Some(old) = replaced {
            self.store
                .queue_audit_outcome(old, Outcome::Interrupted, None)
                .await;
        }
    }

    /// A lifecycle control (or request) `what` the relay refused.
    pub async fn refused(&self, what: &str) {
        let mut e = self.entry("control", Some(short(what)));
        e.outcome = Outcome::Refused;
        e.code = Some("unsupported".into());
        self.store.queue_audit(e).await;
    }

    /// Whether an action waits for its answer (the runtime's frames need
    /// a look only then).
    pub fn waiting(&self) -> bool {
        !self.lock().is_empty()
    }

    /// A JSON frame of the runtime (its body): the outcome of the action
    /// it answers, if it answers one.
    pub async fn answered(&self, body: &[u8]) {
        let Ok(head) = serde_json::from_slice::<Head>(body) else {
            return;
        };
        let Some(id) = head.id.filter(|_| head.t == "response") else {
            return;
        };
        let Some(key) = self.lock().remove(&id) else {
            return;
        };
        let (outcome, code) = match burrow_protocol::decode::<GuestMsg>(body) {
            Ok(GuestMsg::Response { result: Ok(_), .. }) => (Outcome::Ok, None),
            Ok(GuestMsg::Response { result: Err(e), .. }) => {
                let code = serde_json::to_value(e.code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned));
                (Outcome::Error, code)
            }
            _ => (Outcome::Interrupted, None),
        };
        self.store.queue_audit_outcome(key, outcome, code).await;
    }

    /// The stream ended: what still waits for its answer was interrupted.
    pub async fn end(&self) {
        let left: Vec<String> = self.lock().drain().map(|(_, k)| k).collect();
        for key in left {
            self.store
                .queue_audit_outcome(key, Outcome::Interrupted, None)
                .await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, String>> {
        // A panic elsewhere while it was held leaves a map still usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use burrow_protocol::{ExecRequest, TtySize};

    use super::*;

    #[test]
    fn actions_name_the_program_the_path_or_the_port_only() {
        let exec = Request::Exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "echo s3cret".into()],
            env: [("TOKEN".to_string(), "hush".to_string())].into(),
            ..Default::default()
        });
        assert_eq!(action_of(&exec), Some(("exec", Some("sh".into()))));
        let shell = Request::Exec(ExecRequest {
            tty: Some(TtySize { rows: 1, cols: 1 }),
            ..Default::default()
        });
        assert_eq!(action_of(&shell), Some(("shell", None)));
        let write = Request::WriteFile {
            path: "/tmp/f".into(),
            mode: None,
            append: false,
        };
        assert_eq!(action_of(&write), Some(("fs.write", Some("/tmp/f".into()))));
        assert_eq!(
            action_of(&Request::Tunnel { port: 8080 }),
            Some(("tunnel", Some("8080".into())))
        );
        assert_eq!(
            action_of(&Request::UdpTunnel { port: 53 }),
            Some(("tunnel", Some("53/udp".into())))
        );
        assert_eq!(
            action_of(&Request::CopyOut { path: "/a".into() }),
            Some(("copy_out", Some("/a".into())))
        );
        for quiet in [
            Request::Ping,
            Request::Stat { path: "/".into() },
            Request::ListDir { path: "/".into() },
            Request::Sync,
        ] {
            assert_eq!(action_of(&quiet), None, "{quiet:?}");
        }
        // A long path is cut short.
        let long = Request::ReadFile {
            path: format!("/{}", "é".repeat(1000)),
        };
        let (_, object) = action_of(&long).unwrap();
        assert!(object.unwrap().chars().count() <= super::super::MAX_OBJECT);
    }
}

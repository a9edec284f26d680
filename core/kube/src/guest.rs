//! Reaching a run's guest: one exec session per (backend, run).
//!
//! The backend execs a session agent (`/.burrow/agent` on the exec stream's
//! stdin and stdout) in the run's pod through the API server, and puts a
//! [`Relay`] over it: the relay checks each client's identity (sandbox id
//! and generation) at hello, numbers requests per client and hands out
//! in-process streams ([`Relay::connect`]), so exec, spawn, fs and tunnels
//! behave as with the local supervisor. The session's processes are its
//! own: they end when the session does (the backend process exits, or the
//! run is stopped).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use burrow::relay::Relay;
use burrow::{Error, Result, SandboxId};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncBufReadExt;

use crate::pods::{AGENT_PATH, CALLS_LOCK, MAIN};

/// The relays of this backend, by run.
#[derive(Debug, Default)]
pub struct Guests {
    relays: Mutex<HashMap<(SandboxId, u64), Relay>>,
}

impl Guests {
    /// The live relay of a run, if this backend has one.
    pub fn get(&self, id: &SandboxId, generation: u64) -> Option<Relay> {
        let relays = self.relays.lock().unwrap_or_else(|e| e.into_inner());
        relays
            .get(&(id.clone(), generation))
            .filter(|r| !r.is_agent_gone())
            .cloned()
    }

    /// Keeps `relay` as the one of its run (the first one kept wins).
    pub fn keep(&self, id: &SandboxId, relay: Relay) -> Relay {
        let mut relays = self.relays.lock().unwrap_or_else(|e| e.into_inner());
        relays.retain(|_, r| !r.is_agent_gone());
        relays
            .entry((id.clone(), relay.generation()))
            .or_insert(relay)
            .clone()
    }

    /// Forgets (and closes to new requests) every relay of `id`.
    pub fn forget(&self, id: &SandboxId) {
        let mut relays = self.relays.lock().unwrap_or_else(|e| e.into_inner());
        relays.retain(|(rid, _), r| {
            if rid == id {
                r.set_closing(true);
                false
            } else {
                true
            }
        });
    }

    /// Every live relay (for the idle clock and drains).
    pub fn all(&self) -> Vec<(SandboxId, Relay)> {
        let relays = self.relays.lock().unwrap_or_else(|e| e.into_inner());
        relays
            .iter()
            .filter(|(_, r)| !r.is_agent_gone())
            .map(|((id, _), r)| (id.clone(), r.clone()))
            .collect()
    }
}

/// Execs a session agent in `pod` and connects a relay for run
/// `generation` of `id` over it (the agent's hello within `hello_timeout`),
/// adding `env` to every exec (the record's: a claimed warm sandbox's
/// processes get its claimer's, not the pod's).
pub async fn session(
    pods: &Api<Pod>,
    pod: &str,
    id: &SandboxId,
    generation: u64,
    hello_timeout: Duration,
    env: std::collections::BTreeMap<String, String>,
) -> Result<Relay> {
    let params = AttachParams::default()
        .container(MAIN)
        .stdin(true)
        .stdout(true)
        .stderr(true);
    // Its requests in flight hold the pod's calls lock: a reclaim from any
    // process sees them (`reclaim_lock`).
    let mut attached = pods
        .exec(pod, vec![AGENT_PATH, "--calls-lock", CALLS_LOCK], &params)
        .await
        .map_err(|e| runtime_error(format!("exec of the session agent in pod {pod}: {e}")))?;
    let (Some(stdin), Some(stdout)) = (attached.stdin(), attached.stdout()) else {
        return Err(runtime_error(format!(
            "the exec stream of pod {pod} has no stdin or stdout"
        )));
    };
    if let Some(stderr) = attached.stderr() {
        let pod = pod.to_string();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(pod = %pod, "session agent: {line}");
            }
        });
    }
    // The exec's own task ends with the stream; keep its handle until then.
    tokio::spawn(async move {
        let _ = attached.join().await;
    });
    Relay::builder(id, generation)
        .hello_timeout(hello_timeout)
        .env(env)
        .connect(stdout, stdin)
        .await
}

/// The exclusive calls lock of a pod, held while a reclaim deletes it (the
/// lock's holder in the pod exits when this is dropped, or with the pod).
pub struct ReclaimLock {
    _attached: kube::api::AttachedProcess,
    _stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
}

impl std::fmt::Debug for ReclaimLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReclaimLock").finish_non_exhaustive()
    }
}

/// Takes the calls lock of `pod` for a reclaim, without waiting: `None`
/// while any session of any process has requests in flight there (a
/// fact of the pod's kernel, not of anyone's clock).
pub async fn reclaim_lock(pods: &Api<Pod>, pod: &str) -> Result<Option<ReclaimLock>> {
    let params = AttachParams::default()
        .container(MAIN)
        .stdin(true)
        .stdout(true)
        .stderr(false);
    let mut attached = pods
        .exec(pod, vec![AGENT_PATH, "--reclaim-lock", CALLS_LOCK], &params)
        .await
        .map_err(|e| runtime_error(format!("exec of the reclaim lock in pod {pod}: {e}")))?;
    let (Some(stdin), Some(stdout)) = (attached.stdin(), attached.stdout()) else {
        return Err(runtime_error(format!(
            "the exec stream of pod {pod} has no stdin or stdout"
        )));
    };
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .map_err(|e| runtime_error(format!("reading the reclaim lock of pod {pod}: {e}")))?;
    match line.trim() {
        "held" => Ok(Some(ReclaimLock {
            _attached: attached,
            _stdin: Box::new(stdin),
        })),
        "busy" => Ok(None),
        other => Err(runtime_error(format!(
            "the reclaim lock of pod {pod} answered {other:?}"
        ))),
    }
}

/// A failure of the cluster's runtime side (a pod, an exec).
pub fn runtime_error(reason: String) -> Error {
    Error::Runtime {
        runtime: "kubernetes".into(),
        reason,
    }
}

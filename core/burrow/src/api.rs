//! The HTTP API of `burrow serve` as data: paths, headers, request bodies and
//! the error body. The server (`burrow-server`) and the remote backend
//! ([`crate::remote`]) both use these types, so the two sides cannot drift.
//!
//! Every sandbox operation is addressed by id (`/v1/sandboxes/{id}/...`).
//! Operations of a handle also pass the name the handle captured
//! (`?name=...`): the server then acts only if that name still belongs to
//! that id, exactly like the local backend's id-addressed methods, and
//! answers `sandbox_replaced` otherwise. Name lookups are explicit
//! (`/v1/sandboxes/by-name/{name}`).
//!
//! | method | path | body | answer |
//! |---|---|---|---|
//! | POST | /v1/sandboxes | [`CreateRequest`] | 201 [`SandboxInfo`] |
//! | GET | /v1/sandboxes?status=..&label=k=v | | [`SandboxList`] |
//! | GET | /v1/sandboxes/by-name/{name} | | [`SandboxInfo`] |
//! | GET | /v1/sandboxes/{id}[?name=] | | [`SandboxInfo`] |
//! | POST | /v1/sandboxes/{id}/start, /connect-or-start | [`StartBody`] | [`SandboxInfo`] |
//! | POST | /v1/sandboxes/{id}/stop, /restart | [`StopBody`] | [`SandboxInfo`] |
//! | POST | /v1/sandboxes/{id}/kill, /drain, /detach, /pause, /resume | | [`SandboxInfo`] |
//! | POST | /v1/sandboxes/{id}/touch | | 204 |
//! | POST | /v1/sandboxes/{id}/wait | [`WaitBody`] | [`SandboxInfo`] |
//! | POST | /v1/sandboxes/{id}/snapshot | [`SnapshotBody`] | 201 [`crate::SnapshotInfo`] |
//! | POST | /v1/sandboxes/{id}/fork | [`crate::ForkOptions`] | 201 [`SandboxList`] |
//! | GET | /v1/snapshots, /v1/snapshots/{name} | | [`SnapshotList`], [`crate::SnapshotInfo`] |
//! | DELETE | /v1/snapshots/{name} | | 204 |
//! | POST | /v1/pools | [`crate::PoolSpec`] | 201 [`crate::PoolInfo`] |
//! | GET | /v1/pools, /v1/pools/{name} | | [`PoolList`], [`crate::PoolInfo`] |
//! | PATCH | /v1/pools/{name} | [`PoolPatch`] | [`crate::PoolInfo`] (scaled) |
//! | DELETE | /v1/pools/{name} | | 204 |
//! | PATCH | /v1/sandboxes/{id} | [`Modify`] | [`ModifyPlan`] |
//! | DELETE | /v1/sandboxes/{id} | | 204 (remove) |
//! | POST | /v1/sandboxes/{id}/destroy | | 204 |
//! | GET | /v1/sandboxes/{id}/metrics | | [`Metrics`] |
//! | GET | /v1/sandboxes/{id}/logs?source=&follow=&tail=&since_ms= | | NDJSON of [`LogFrame`] |
//! | GET | /v1/sandboxes/{id}/runtime?wake= | upgrade | 101, then protocol bytes |
//! | POST | /v1/sessions | | NDJSON of [`SessionFrame`], held open |
//!
//! Errors answer with the status of [`http_status`] and an [`ErrorBody`].

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::ListFilter;
use crate::error::{Error, ErrorCode, GuestFailure};
use crate::logs::{LogLine, LogOptions, LogSource};
use crate::model::{SandboxId, SandboxInfo, Status};

pub use crate::model::Modify;

pub use crate::backend::{CreateRequest, Metrics};
pub use crate::model::ModifyPlan;

/// Path prefix of this API version.
pub const PREFIX: &str = "/v1";
/// Response header carrying the runtime generation a runtime stream reaches.
pub const HEADER_GENERATION: &str = "burrow-generation";
/// Response header of a gateway `503`: what the sandbox is doing
/// (`starting`, `reaping`). The call never reached the workload, so it is
/// safe to retry after `Retry-After`.
pub const HEADER_SANDBOX_STATE: &str = "burrow-sandbox-state";
/// The `Upgrade` protocol token of a runtime stream.
pub const UPGRADE_PROTOCOL: &str = "burrow-protocol";
/// Path prefix of the demand gateway (`/gw/{id}/...`).
pub const GATEWAY_PREFIX: &str = "/gw";

/// `GET /v1/sandboxes` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxList {
    /// The sandboxes passing the filter.
    pub sandboxes: Vec<SandboxInfo>,
}

/// `GET /v1/sandboxes/{id}/runs` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunList {
    /// The runs, newest first.
    pub runs: Vec<crate::RunInfo>,
}

/// The most runs one `runs` answer gives (and its default; `?limit=`
/// asks for fewer).
pub const MAX_RUNS: usize = 100;

/// Body of `start` and `connect-or-start`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// See [`crate::StartOptions::detached`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<bool>,
    /// The client session an attached start belongs to: the sandbox stops
    /// (reason `owner_exited`) when that session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// Body of `stop` and `restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopBody {
    /// Time between SIGTERM and SIGKILL, in milliseconds.
    pub grace_ms: u64,
}

/// Body of `wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitBody {
    /// Wait until the status is one of these.
    pub statuses: Vec<Status>,
}

/// Body of `snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotBody {
    /// The snapshot's name.
    pub snapshot: String,
    /// What to save (default: the files).
    #[serde(default)]
    pub kind: crate::SnapshotKind,
}

/// Answer of `GET /v1/snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotList {
    /// Every snapshot, by name.
    pub snapshots: Vec<crate::SnapshotInfo>,
}

/// Answer of `GET /v1/pools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolList {
    /// Every pool, by name.
    pub pools: Vec<crate::PoolInfo>,
}

/// Body of `PATCH /v1/pools/{name}`: the pool's new size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolPatch {
    /// How many warm sandboxes to keep.
    pub size: u32,
}

/// Query of operations by id: the name the caller's handle captured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityQuery {
    /// Act only if this name still belongs to the id (else
    /// `sandbox_replaced`); absent: act on the id whatever its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Query of `runtime`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeQuery {
    /// See [`IdentityQuery::name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Start a reclaimed sandbox again first (demand start).
    #[serde(default)]
    pub wake: bool,
}

/// One line of the `logs` stream: a log line, or the error that ended it.
// Frames are transient (built, sent or read, dropped): their size does not
// matter, and boxing would only complicate building them.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFrame {
    /// A line.
    Line(LogLine),
    /// The stream failed.
    Error(ErrorBody),
}

/// One line of a session stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionFrame {
    /// First line: the session's id.
    Opened {
        /// Pass as [`StartBody::session`].
        session: String,
    },
    /// Sent periodically so idle connections stay open.
    Heartbeat,
}

/// Encodes a [`ListFilter`] as a query string (without `?`).
pub fn list_query(filter: &ListFilter) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for s in &filter.statuses {
        q.append_pair("status", s.as_str());
    }
    for (k, v) in &filter.labels {
        q.append_pair("label", &format!("{k}={v}"));
    }
    q.finish()
}

/// Decodes the query of `GET /v1/sandboxes`.
pub fn parse_list_query(query: &str) -> Result<ListFilter, Error> {
    let mut filter = ListFilter::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "status" => {
                let s: Status = v.parse().map_err(|_| bad_query("status", &v))?;
                filter.statuses.push(s);
            }
            "label" => {
                let (lk, lv) = v.split_once('=').ok_or_else(|| bad_query("label", &v))?;
                filter.labels.insert(lk.to_owned(), lv.to_owned());
            }
            other => {
                return Err(Error::InvalidArgument {
                    argument: other.to_owned(),
                    reason: "unknown query parameter".into(),
                })
            }
        }
    }
    Ok(filter)
}

/// Encodes [`LogOptions`] as a query string (without `?`).
pub fn logs_query(opts: &LogOptions) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for s in &opts.sources {
        q.append_pair("source", s.as_str());
    }
    if opts.follow {
        q.append_pair("follow", "true");
    }
    if let Some(t) = opts.tail {
        q.append_pair("tail", &t.to_string());
    }
    if let Some(ms) = opts
        .since
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    {
        q.append_pair("since_ms", &ms.as_millis().to_string());
    }
    q.finish()
}

/// Decodes the query of `logs`.
pub fn parse_logs_query(query: &str) -> Result<LogOptions, Error> {
    let mut opts = LogOptions::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "source" => opts.sources.push(
                v.parse::<LogSource>()
                    .map_err(|_| bad_query("source", &v))?,
            ),
            "since_ms" => {
                let ms: u64 = v.parse().map_err(|_| bad_query("since_ms", &v))?;
                opts.since = Some(std::time::UNIX_EPOCH + Duration::from_millis(ms));
            }
            "follow" => opts.follow = parse_bool("follow", &v)?,
            "tail" => opts.tail = Some(v.parse().map_err(|_| bad_query("tail", &v))?),
            other => {
                return Err(Error::InvalidArgument {
                    argument: other.to_owned(),
                    reason: "unknown query parameter".into(),
                })
            }
        }
    }
    Ok(opts)
}

fn parse_bool(what: &str, v: &str) -> Result<bool, Error> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(bad_query(what, v)),
    }
}

fn bad_query(what: &str, value: &str) -> Error {
    Error::InvalidArgument {
        argument: what.to_owned(),
        reason: format!("{value:?} is not acceptable"),
    }
}

/// The HTTP status an error code answers with.
pub fn http_status(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::NotFound => 404,
        ErrorCode::AlreadyExists
        | ErrorCode::SandboxReplaced
        | ErrorCode::InvalidState
        | ErrorCode::PortUnavailable
        | ErrorCode::SnapshotInUse => 409,
        ErrorCode::InvalidName
        | ErrorCode::InvalidConfig
        | ErrorCode::InvalidImage
        | ErrorCode::InvalidArgument => 422,
        ErrorCode::Starting => 503,
        ErrorCode::StartFailed | ErrorCode::Protocol => 502,
        ErrorCode::Timeout => 504,
        ErrorCode::Unauthorized => 401,
        ErrorCode::Forbidden => 403,
        // The server adds `Retry-After` to a `rate_limited` answer itself.
        ErrorCode::QuotaExceeded | ErrorCode::RateLimited => 429,
        ErrorCode::Unsupported => 501,
        ErrorCode::RuntimeUnavailable | ErrorCode::Guest | ErrorCode::Store | ErrorCode::Io => 500,
    }
}

/// The JSON body of every error answer: `{"error": {...}}`. The code is
/// the contract; the other fields carry what the variant carries, so the
/// remote backend rebuilds the same [`Error`] the server saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// See [`ErrorEnvelope`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The stable code (`not_found`, `sandbox_replaced`, ...).
    pub code: String,
    /// Human-readable message (not for matching).
    pub message: String,
    /// Sandbox name involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Sandbox id involved (for `sandbox_replaced`: the id the caller held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<SandboxId>,
    /// For `sandbox_replaced`: the id that now owns the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_id: Option<SandboxId>,
    /// For `invalid_state`: the sandbox's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// For `invalid_state` and `forbidden`: the refused operation; for
    /// `timeout`: what timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// For `invalid_config`/`invalid_argument`: the field or argument; for
    /// `invalid_image`: the image; for `runtime_unavailable`: the runtime;
    /// for `not_found`: what was looked up; for `io`: the context; for
    /// `quota_exceeded`: the quota (`sandboxes`, `cpus`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The reason, where the variant has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `timeout`: the deadline in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
    /// For `guest`: the agent's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<burrow_protocol::GuestError>,
    /// For `io`: the path involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// For `snapshot_in_use`: the sandboxes that use the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxes: Option<Vec<String>>,
    /// For `quota_exceeded`: the quota's limit, in its own unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// For `rate_limited`: how long to wait before sending again, in
    /// milliseconds (the answer's `Retry-After` says it in seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// The `subject` of an `already_exists` answer about a snapshot (one about
/// a sandbox has none, and carries the sandbox's id).
const SNAPSHOT_SUBJECT: &str = "snapshot";
/// The subject of an error about a pool.
const POOL_SUBJECT: &str = "pool";

impl From<&Error> for ErrorBody {
    fn from(e: &Error) -> Self {
        let mut b = ErrorBody {
            code: e.code().as_str().to_owned(),
            message: crate::error::report(e),
            name: e.name().map(str::to_owned),
            id: e.sandbox_id().cloned(),
            status: e.status(),
            ..ErrorBody::default()
        };
        match e {
            Error::SandboxReplaced { actual, .. } => b.actual_id = Some(actual.clone()),
            Error::NotFound { what, .. } => b.subject = Some(what.clone()),
            Error::InvalidState { operation, .. } => b.operation = Some(operation.to_string()),
            Error::InvalidName { reason } | Error::Protocol { reason } => {
                b.reason = Some(reason.clone())
            }
            Error::Unauthorized { reason } => b.reason = Some(reason.clone()),
            Error::InvalidConfig { field, reason } => {
                b.subject = Some(field.clone());
                b.reason = Some(reason.clone());
            }
            Error::InvalidImage { image, reason } => {
                b.subject = Some(image.clone());
                b.reason = Some(reason.clone());
            }
            Error::PortUnavailable { address, reason } => {
                b.subject = Some(address.clone());
                b.reason = Some(reason.clone());
            }
            Error::InvalidArgument { argument, reason } => {
                b.subject = Some(argument.clone());
                b.reason = Some(reason.clone());
            }
            Error::StartFailed { reason, .. } => b.reason = Some(reason.clone()),
            Error::Timeout { operation, after } => {
                b.operation = Some(operation.clone());
                b.after_ms = Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
            }
            Error::Runtime { runtime, reason } => {
                b.subject = Some(runtime.clone());
                b.reason = Some(reason.clone());
            }
            Error::Guest { operation, failure } => {
                b.operation = Some(operation.clone());
                b.guest = Some(failure.0.clone());
            }
            Error::Store { reason, source } => {
                b.reason = Some(match source {
                    Some(s) => format!("{reason}: {s}"),
                    None => reason.clone(),
                })
            }
            Error::Io {
                context,
                path,
                source,
            } => {
                b.subject = Some(context.clone());
                b.path = path.clone();
                b.reason = Some(source.to_string());
            }
            Error::Unsupported { operation } => b.operation = Some(operation.clone()),
            Error::Forbidden { operation, reason } => {
                b.operation = Some(operation.clone());
                b.reason = Some(reason.clone());
            }
            Error::QuotaExceeded {
                quota,
                limit,
                reason,
            } => {
                b.subject = Some(quota.clone());
                b.limit = Some(*limit);
                b.reason = Some(reason.clone());
            }
            Error::RateLimited { retry_after_ms } => b.retry_after_ms = Some(*retry_after_ms),
            Error::SnapshotExists { name } => {
                b.subject = Some(SNAPSHOT_SUBJECT.to_owned());
                b.name = Some(name.clone());
            }
            Error::PoolExists { name } => {
                b.subject = Some(POOL_SUBJECT.to_owned());
                b.name = Some(name.clone());
            }
            Error::SnapshotInUse { name, sandboxes } => {
                b.subject = Some(SNAPSHOT_SUBJECT.to_owned());
                b.name = Some(name.clone());
                b.sandboxes = Some(sandboxes.clone());
            }
            _ => {}
        }
        b
    }
}

impl ErrorBody {
    /// Rebuilds the error the server saw. A code this client does not know
    /// (a newer server) becomes [`Error::Protocol`] naming it.
    pub fn into_error(self) -> Error {
        let reason = self.reason.clone().unwrap_or_else(|| self.message.clone());
        let subject = self.subject.clone().unwrap_or_default();
        let name = self.name.clone().unwrap_or_default();
        let id = self.id.clone();
        let Some(code) = ErrorCode::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == self.code)
        else {
            return Error::Protocol {
                reason: format!(
                    "server error with unknown code {:?}: {}",
                    self.code, self.message
                ),
            };
        };
        let missing = |field: &str| Error::Protocol {
            reason: format!(
                "server error {} without its {field}: {}",
                self.code, self.message
            ),
        };
        match code {
            ErrorCode::SandboxReplaced => match (id, self.actual_id) {
                (Some(expected), Some(actual)) => Error::SandboxReplaced {
                    name,
                    expected,
                    actual,
                },
                _ => missing("ids"),
            },
            ErrorCode::AlreadyExists => match id {
                Some(id) => Error::AlreadyExists { name, id },
                None if subject == SNAPSHOT_SUBJECT => Error::SnapshotExists { name },
                None if subject == POOL_SUBJECT => Error::PoolExists { name },
                None => missing("id"),
            },
            ErrorCode::SnapshotInUse => Error::SnapshotInUse {
                name,
                sandboxes: self.sandboxes.unwrap_or_default(),
            },
            ErrorCode::NotFound => Error::NotFound {
                what: subject,
                name: self.name,
                id,
            },
            ErrorCode::InvalidState => match (id, self.status) {
                (Some(id), Some(status)) => Error::InvalidState {
                    operation: self.operation.unwrap_or_default().into(),
                    name,
                    id,
                    status,
                },
                _ => missing("id and status"),
            },
            ErrorCode::InvalidName => Error::InvalidName { reason },
            ErrorCode::InvalidConfig => Error::InvalidConfig {
                field: subject,
                reason,
            },
            ErrorCode::InvalidImage => Error::InvalidImage {
                image: subject,
                reason,
            },
            ErrorCode::PortUnavailable => Error::PortUnavailable {
                address: subject,
                reason,
            },
            ErrorCode::InvalidArgument => Error::InvalidArgument {
                argument: subject,
                reason,
            },
            ErrorCode::Starting => match id {
                Some(id) => Error::Starting { name, id },
                None => missing("id"),
            },
            ErrorCode::StartFailed => match id {
                Some(id) => Error::StartFailed { name, id, reason },
                None => missing("id"),
            },
            ErrorCode::Timeout => Error::Timeout {
                operation: self.operation.unwrap_or_default(),
                after: Duration::from_millis(self.after_ms.unwrap_or(0)),
            },
            ErrorCode::RuntimeUnavailable => Error::Runtime {
                runtime: subject,
                reason,
            },
            ErrorCode::Guest => match self.guest {
                Some(g) => Error::Guest {
                    operation: self.operation.unwrap_or_default(),
                    failure: GuestFailure(g),
                },
                None => missing("guest error"),
            },
            ErrorCode::Protocol => Error::Protocol { reason },
            ErrorCode::Store => Error::Store {
                reason,
                source: None,
            },
            ErrorCode::Io => Error::Io {
                context: subject,
                path: self.path,
                source: std::io::Error::other(reason),
            },
            ErrorCode::Unauthorized => Error::Unauthorized { reason },
            ErrorCode::Unsupported => Error::Unsupported {
                operation: self.operation.unwrap_or_default(),
            },
            ErrorCode::Forbidden => Error::Forbidden {
                operation: self.operation.unwrap_or_default(),
                reason,
            },
            // Numbers a server left out read as 0, like a timeout's.
            ErrorCode::QuotaExceeded => Error::QuotaExceeded {
                quota: subject,
                limit: self.limit.unwrap_or(0),
                reason,
            },
            ErrorCode::RateLimited => Error::RateLimited {
                retry_after_ms: self.retry_after_ms.unwrap_or(0),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Error> {
        let id = SandboxId::new();
        let other = SandboxId::new();
        vec![
            Error::SandboxReplaced {
                name: "w".into(),
                expected: id.clone(),
                actual: other,
            },
            Error::AlreadyExists {
                name: "w".into(),
                id: id.clone(),
            },
            Error::not_found_id(&id),
            Error::InvalidState {
                operation: "exec".into(),
                name: "w".into(),
                id: id.clone(),
                status: Status::Stopped,
            },
            Error::InvalidName { reason: "r".into() },
            Error::InvalidConfig {
                field: "cpus".into(),
                reason: "r".into(),
            },
            Error::InvalidImage {
                image: "x".into(),
                reason: "r".into(),
            },
            Error::PortUnavailable {
                address: "127.0.0.1:80/tcp".into(),
                reason: "r".into(),
            },
            Error::InvalidArgument {
                argument: "path".into(),
                reason: "r".into(),
            },
            Error::Starting {
                name: "w".into(),
                id: id.clone(),
            },
            Error::StartFailed {
                name: "w".into(),
                id,
                reason: "r".into(),
            },
            Error::Timeout {
                operation: "start".into(),
                after: Duration::from_millis(1500),
            },
            Error::Runtime {
                runtime: "runc".into(),
                reason: "r".into(),
            },
            Error::Guest {
                operation: "read".into(),
                failure: GuestFailure(burrow_protocol::GuestError::new(
                    burrow_protocol::GuestErrorCode::NotFound,
                    "nope",
                )),
            },
            Error::protocol("bad frame"),
            Error::Store {
                reason: "locked".into(),
                source: None,
            },
            Error::Io {
                context: "reading".into(),
                path: Some("/x".into()),
                source: std::io::Error::other("boom"),
            },
            Error::Unauthorized { reason: "r".into() },
            Error::unsupported("pause"),
            Error::SnapshotInUse {
                name: "base".into(),
                sandboxes: vec!["a".into(), "b, c".into()],
            },
            Error::SnapshotExists {
                name: "base".into(),
            },
            Error::PoolExists { name: "web".into() },
            Error::Forbidden {
                operation: "pool.create".into(),
                reason: "role viewer".into(),
            },
            Error::QuotaExceeded {
                quota: "memory_mb".into(),
                limit: 4096,
                reason: "5120 requested".into(),
            },
            Error::RateLimited {
                retry_after_ms: 2500,
            },
        ]
    }

    #[test]
    fn every_code_survives_the_wire() {
        let all = samples();
        let codes: std::collections::HashSet<_> = all.iter().map(Error::code).collect();
        assert_eq!(codes.len(), ErrorCode::ALL.len(), "a sample per code");
        for e in all {
            let body = ErrorBody::from(&e);
            let json = serde_json::to_string(&ErrorEnvelope { error: body }).unwrap();
            let back: ErrorEnvelope = serde_json::from_str(&json).unwrap();
            let again = back.error.into_error();
            assert_eq!(again.code(), e.code(), "{json}");
            assert_eq!(again.sandbox_id(), e.sandbox_id(), "{json}");
            assert_eq!(again.name(), e.name(), "{json}");
            assert_eq!(again.status(), e.status(), "{json}");
            assert_eq!(again.to_string(), e.to_string(), "{json}");
            assert_eq!(
                crate::error::report(&again),
                crate::error::report(&e),
                "{json}"
            );
        }
    }

    #[test]
    fn tenant_errors_keep_their_fields_and_statuses() {
        // The sample of `code`, its body as JSON, and the error rebuilt from it.
        let wire = |code| {
            let e = samples().into_iter().find(|e| e.code() == code).unwrap();
            let json = serde_json::to_value(ErrorBody::from(&e)).unwrap();
            let body: ErrorBody = serde_json::from_value(json.clone()).unwrap();
            (json, body.into_error())
        };
        let (json, e) = wire(ErrorCode::Forbidden);
        assert_eq!(json["operation"], "pool.create");
        assert!(matches!(&e, Error::Forbidden { operation, reason }
            if operation == "pool.create" && reason == "role viewer"));
        let (json, e) = wire(ErrorCode::QuotaExceeded);
        assert_eq!(
            (json["subject"].as_str(), json["limit"].as_u64()),
            (Some("memory_mb"), Some(4096))
        );
        assert!(
            matches!(&e, Error::QuotaExceeded { quota, limit: 4096, reason }
            if quota == "memory_mb" && reason == "5120 requested")
        );
        let (json, e) = wire(ErrorCode::RateLimited);
        assert_eq!(json["retry_after_ms"], 2500);
        assert!(matches!(
            e,
            Error::RateLimited {
                retry_after_ms: 2500
            }
        ));
        let statuses = [
            ErrorCode::Forbidden,
            ErrorCode::QuotaExceeded,
            ErrorCode::RateLimited,
        ];
        assert_eq!(statuses.map(http_status), [403, 429, 429]);
    }

    #[test]
    fn unknown_codes_become_protocol_errors() {
        let body = ErrorBody {
            code: "brand_new".into(),
            message: "m".into(),
            ..ErrorBody::default()
        };
        assert_eq!(body.into_error().code(), ErrorCode::Protocol);
    }

    #[test]
    fn list_and_logs_queries_round_trip() {
        let mut f = ListFilter::default();
        f.statuses.push(Status::Running);
        f.labels.insert("team".into(), "a=b&c".into());
        assert_eq!(parse_list_query(&list_query(&f)).unwrap(), f);
        let o = LogOptions {
            sources: vec![LogSource::Supervisor, LogSource::Stdout],
            follow: true,
            tail: Some(5),
            since: Some(std::time::UNIX_EPOCH + Duration::from_millis(1_796_319_601_123)),
        };
        assert_eq!(parse_logs_query(&logs_query(&o)).unwrap(), o);
        let err = parse_list_query("status=bogus").unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        let err = parse_logs_query("colour=red").unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
    }
}

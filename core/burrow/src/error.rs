//! The crate's one error type. Every variant has a stable machine-readable
//! [`ErrorCode`]; SDKs map codes (never message text) to their own typed
//! errors, and `ErrorCode::ALL` is the single list they are checked against.

use std::path::PathBuf;

use crate::model::{SandboxId, Status};

/// Result alias for burrow operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

listed_enum! {
    /// Stable, machine-readable error codes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[non_exhaustive]
    pub enum ErrorCode {
        /// See [`Error::SandboxReplaced`].
        SandboxReplaced = "sandbox_replaced",
        /// See [`Error::AlreadyExists`].
        AlreadyExists = "already_exists",
        /// See [`Error::NotFound`].
        NotFound = "not_found",
        /// See [`Error::InvalidState`].
        InvalidState = "invalid_state",
        /// See [`Error::InvalidName`].
        InvalidName = "invalid_name",
        /// See [`Error::InvalidConfig`].
        InvalidConfig = "invalid_config",
        /// See [`Error::InvalidImage`].
        InvalidImage = "invalid_image",
        /// See [`Error::InvalidArgument`].
        InvalidArgument = "invalid_argument",
        /// See [`Error::Starting`].
        Starting = "starting",
        /// See [`Error::StartFailed`].
        StartFailed = "start_failed",
        /// See [`Error::Timeout`].
        Timeout = "timeout",
        /// See [`Error::Runtime`].
        RuntimeUnavailable = "runtime_unavailable",
        /// See [`Error::Guest`].
        Guest = "guest",
        /// See [`Error::Protocol`].
        Protocol = "protocol",
        /// See [`Error::Store`].
        Store = "store",
        /// See [`Error::Io`].
        Io = "io",
        /// See [`Error::Unauthorized`].
        Unauthorized = "unauthorized",
        /// See [`Error::Unsupported`].
        Unsupported = "unsupported",
        /// See [`Error::PortUnavailable`].
        PortUnavailable = "port_unavailable",
        /// See [`Error::SnapshotInUse`].
        SnapshotInUse = "snapshot_in_use",
        /// See [`Error::Forbidden`].
        Forbidden = "forbidden",
        /// See [`Error::QuotaExceeded`].
        QuotaExceeded = "quota_exceeded",
        /// See [`Error::RateLimited`].
        RateLimited = "rate_limited",
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors returned by burrow.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The receiver was bound to sandbox `expected`, but its name now belongs
    /// to another sandbox (`actual`). Nothing was touched.
    #[error("sandbox {name:?} was replaced: this handle is bound to {expected}, the name now belongs to {actual}")]
    SandboxReplaced {
        /// The name.
        name: String,
        /// The id the receiver captured.
        expected: SandboxId,
        /// The id that now owns the name.
        actual: SandboxId,
    },
    /// A sandbox with this name already exists.
    #[error("a sandbox named {name:?} already exists ({id})")]
    AlreadyExists {
        /// The name.
        name: String,
        /// The existing sandbox.
        id: SandboxId,
    },
    /// No sandbox (or other object) with this name or id.
    #[error("{what} not found")]
    NotFound {
        /// What was looked up (`sandbox named "x"`, `sandbox sb_...`, `image ...`).
        what: String,
        /// The name, when looked up by name or known.
        name: Option<String>,
        /// The id, when looked up by id.
        id: Option<SandboxId>,
    },
    /// The operation is not allowed in the sandbox's current status.
    #[error("cannot {operation} sandbox {name:?} ({id}): it is {status}")]
    InvalidState {
        /// The attempted operation.
        operation: std::borrow::Cow<'static, str>,
        /// The sandbox name.
        name: String,
        /// The sandbox id.
        id: SandboxId,
        /// Its status at the time.
        status: Status,
    },
    /// A sandbox name is not acceptable.
    #[error("invalid sandbox name: {reason}")]
    InvalidName {
        /// Why.
        reason: String,
    },
    /// A configuration value is not acceptable.
    #[error("invalid configuration for {field}: {reason}")]
    InvalidConfig {
        /// Which field.
        field: String,
        /// Why.
        reason: String,
    },
    /// The image reference cannot be resolved or its content is unusable.
    #[error("invalid image {image:?}: {reason}")]
    InvalidImage {
        /// The reference as given.
        image: String,
        /// Why.
        reason: String,
    },
    /// An argument of an operation is not acceptable (path, argv, ...).
    #[error("invalid argument {argument}: {reason}")]
    InvalidArgument {
        /// Which argument.
        argument: String,
        /// Why.
        reason: String,
    },
    /// A published port's host address cannot be listened on (another
    /// process has it, or the address is not this host's): the start did
    /// not happen.
    #[error("host port {address} cannot be published: {reason}")]
    PortUnavailable {
        /// The host address (`127.0.0.1:8080/tcp`).
        address: String,
        /// Why.
        reason: String,
    },
    /// A snapshot with this name already exists (code `already_exists`).
    #[error("a snapshot named {name:?} already exists")]
    SnapshotExists {
        /// The snapshot name.
        name: String,
    },
    /// A pool with this name already exists (code `already_exists`).
    #[error("a pool named {name:?} already exists")]
    PoolExists {
        /// The pool name.
        name: String,
    },
    /// The snapshot cannot be removed: sandboxes were created from it and
    /// still exist. Nothing was removed.
    #[error("snapshot {name:?} is in use by {} sandbox(es): {}", sandboxes.len(), sandboxes.join(", "))]
    SnapshotInUse {
        /// The snapshot name.
        name: String,
        /// The names of the sandboxes that use it.
        sandboxes: Vec<String>,
    },
    /// The sandbox is being started by another caller.
    #[error("sandbox {name:?} ({id}) is starting")]
    Starting {
        /// The name.
        name: String,
        /// The id.
        id: SandboxId,
    },
    /// A start failed; the sandbox was recorded as Crashed with this reason.
    #[error("sandbox {name:?} ({id}) failed to start: {reason}")]
    StartFailed {
        /// The name.
        name: String,
        /// The id.
        id: SandboxId,
        /// Why (from the supervisor, e.g. the runtime's error output).
        reason: String,
    },
    /// An operation did not finish in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What timed out.
        operation: String,
        /// The deadline.
        after: std::time::Duration,
    },
    /// The selected isolation runtime is missing or unusable on this host.
    #[error("runtime {runtime:?} is unavailable: {reason}")]
    Runtime {
        /// Runtime name (`runc`, `crun`, ...).
        runtime: String,
        /// Why.
        reason: String,
    },
    /// The guest agent answered with an error (file not found, ...).
    ///
    /// The agent's error is in the text, so it is not also a
    /// [`std::error::Error::source`]: a chain prints it once.
    #[error("guest error ({}) in {operation}: {}", .failure.code_str(), .failure.message())]
    Guest {
        /// The operation.
        operation: String,
        /// The agent's error.
        failure: GuestFailure,
    },
    /// The peer broke the protocol (bad frame, wrong identity, wrong version).
    #[error("protocol error: {reason}")]
    Protocol {
        /// Why.
        reason: String,
    },
    /// The state database failed or is unusable.
    #[error("state database error: {reason}")]
    Store {
        /// What failed.
        reason: String,
        /// Underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A host I/O operation failed.
    #[error("{context}{}", .path.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default())]
    Io {
        /// What was being done.
        context: String,
        /// The path involved, if any.
        path: Option<PathBuf>,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A `burrow serve` server refused the credentials (missing, unknown or
    /// revoked API token).
    #[error("unauthorized: {reason}")]
    Unauthorized {
        /// Why.
        reason: String,
    },
    /// The backend does not support this operation at all (see
    /// [`crate::Backend::capabilities`]). Nothing was changed.
    #[error("{operation} is not supported by this backend")]
    Unsupported {
        /// The operation (`pause`, `modify`, ...).
        operation: String,
    },
    /// A `burrow serve` server accepted the credentials, but their role or
    /// tenant may not do this operation. Nothing was changed.
    #[error("{operation} is forbidden: {reason}")]
    Forbidden {
        /// The refused operation (`create`, `pool.create`, ...).
        operation: String,
        /// Why.
        reason: String,
    },
    /// The operation would exceed a quota of the caller's tenant. Nothing
    /// was changed.
    #[error("quota {quota} exceeded (limit {limit}): {reason}")]
    QuotaExceeded {
        /// Which quota (`sandboxes`, `running`, `millicpus`, `memory_mb`,
        /// `starts_per_minute`, ...).
        quota: String,
        /// The quota's limit, in its own unit.
        limit: u64,
        /// Why (what the operation would have brought it to).
        reason: String,
    },
    /// Too many requests from this caller's token: the request was not
    /// served; sending it again after `retry_after_ms` may be.
    #[error("rate limited: retry after {retry_after_ms} ms")]
    RateLimited {
        /// How long to wait before sending again, in milliseconds.
        retry_after_ms: u64,
    },
}

/// The agent's error as carried inside [`Error::Guest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFailure(pub burrow_protocol::GuestError);

impl GuestFailure {
    /// The guest error class (`not_found`, `permission_denied`, ...).
    pub fn code(&self) -> burrow_protocol::GuestErrorCode {
        self.0.code
    }
    fn code_str(&self) -> String {
        serde_json::to_value(self.0.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
    /// The agent's message.
    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl std::fmt::Display for GuestFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code_str(), self.0.message)
    }
}

impl std::error::Error for GuestFailure {}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::SandboxReplaced { .. } => ErrorCode::SandboxReplaced,
            Error::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::InvalidState { .. } => ErrorCode::InvalidState,
            Error::InvalidName { .. } => ErrorCode::InvalidName,
            Error::InvalidConfig { .. } => ErrorCode::InvalidConfig,
            Error::InvalidImage { .. } => ErrorCode::InvalidImage,
            Error::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Error::Starting { .. } => ErrorCode::Starting,
            Error::StartFailed { .. } => ErrorCode::StartFailed,
            Error::Timeout { .. } => ErrorCode::Timeout,
            Error::Runtime { .. } => ErrorCode::RuntimeUnavailable,
            Error::Guest { .. } => ErrorCode::Guest,
            Error::Protocol { .. } => ErrorCode::Protocol,
            Error::Store { .. } => ErrorCode::Store,
            Error::Io { .. } => ErrorCode::Io,
            Error::Unauthorized { .. } => ErrorCode::Unauthorized,
            Error::Unsupported { .. } => ErrorCode::Unsupported,
            Error::PortUnavailable { .. } => ErrorCode::PortUnavailable,
            Error::SnapshotExists { .. } | Error::PoolExists { .. } => ErrorCode::AlreadyExists,
            Error::SnapshotInUse { .. } => ErrorCode::SnapshotInUse,
            Error::Forbidden { .. } => ErrorCode::Forbidden,
            Error::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            Error::RateLimited { .. } => ErrorCode::RateLimited,
        }
    }

    /// The sandbox id this error is about, where one applies.
    pub fn sandbox_id(&self) -> Option<&SandboxId> {
        match self {
            Error::SandboxReplaced { expected, .. } => Some(expected),
            Error::AlreadyExists { id, .. }
            | Error::InvalidState { id, .. }
            | Error::Starting { id, .. }
            | Error::StartFailed { id, .. } => Some(id),
            Error::NotFound { id, .. } => id.as_ref(),
            _ => None,
        }
    }

    /// The sandbox name this error is about, where one applies.
    pub fn name(&self) -> Option<&str> {
        match self {
            Error::SandboxReplaced { name, .. }
            | Error::AlreadyExists { name, .. }
            | Error::InvalidState { name, .. }
            | Error::Starting { name, .. }
            | Error::StartFailed { name, .. } => Some(name),
            Error::NotFound { name, .. } => name.as_deref(),
            _ => None,
        }
    }

    /// The sandbox status this error is about, where one applies.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::InvalidState { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn io(
        context: impl Into<String>,
        path: Option<&std::path::Path>,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            context: context.into(),
            path: path.map(|p| p.to_path_buf()),
            source,
        }
    }

    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub(crate) fn store(
        reason: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Store {
            reason: reason.into(),
            source: Some(Box::new(source)),
        }
    }

    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub(crate) fn not_found_id(id: &SandboxId) -> Self {
        Error::NotFound {
            what: format!("sandbox {id}"),
            name: None,
            id: Some(id.clone()),
        }
    }

    /// [`Error::Unsupported`] for `operation`.
    pub fn unsupported(operation: impl Into<String>) -> Self {
        Error::Unsupported {
            operation: operation.into(),
        }
    }

    pub(crate) fn protocol(reason: impl Into<String>) -> Self {
        Error::Protocol {
            reason: reason.into(),
        }
    }
}

/// The whole text of `err`: its own message, then each
/// [`source`](std::error::Error::source) after `": "`, every part once. A
/// source whose text the message before it already holds is not repeated
/// (some libraries put their source's text in their own message and also
/// return it as the source). What the CLI prints and what a binding's
/// error message carries.
pub fn report(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut last = text.clone();
    let mut cur = err.source();
    while let Some(e) = cur {
        let part = e.to_string();
        if !part.is_empty() && !last.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        last = part;
        cur = e.source();
    }
    text
}

/// A network rule that does not parse is an invalid `network` field.
impl From<crate::NetworkRuleError> for Error {
    fn from(e: crate::NetworkRuleError) -> Self {
        Error::InvalidConfig {
            field: "network".into(),
            reason: e.to_string(),
        }
    }
}

#[cfg(feature = "local")]
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::store("query failed", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_their_wire_names() {
        // ALL is generated from the enum's declaration (listed_enum!), so
        // it holds every code; this checks the strings.
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "duplicate code {c}");
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
        }
        assert_eq!(seen.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn tenant_errors_have_their_codes() {
        let cases = [
            (
                Error::Forbidden {
                    operation: "create".into(),
                    reason: "role viewer".into(),
                },
                ErrorCode::Forbidden,
                "forbidden",
            ),
            (
                Error::QuotaExceeded {
                    quota: "cpus".into(),
                    limit: 8,
                    reason: "9 requested".into(),
                },
                ErrorCode::QuotaExceeded,
                "quota_exceeded",
            ),
            (
                Error::RateLimited {
                    retry_after_ms: 1500,
                },
                ErrorCode::RateLimited,
                "rate_limited",
            ),
        ];
        for (e, code, wire) in cases {
            assert_eq!(e.code(), code);
            assert_eq!(code.as_str(), wire);
            assert!(ErrorCode::ALL.contains(&code));
            assert_eq!((e.sandbox_id(), e.name(), e.status()), (None, None, None));
        }
    }

    #[test]
    fn report_says_each_part_once() {
        let io = Error::io(
            "reading the config",
            Some(std::path::Path::new("/x")),
            std::io::Error::from_raw_os_error(2),
        );
        assert_eq!(
            report(&io),
            "reading the config (/x): No such file or directory (os error 2)"
        );
        let guest = Error::Guest {
            operation: "exec".into(),
            failure: GuestFailure(burrow_protocol::GuestError::new(
                burrow_protocol::GuestErrorCode::NotFound,
                "starting hi: No such file or directory (os error 2)",
            )),
        };
        assert!(std::error::Error::source(&guest).is_none());
        assert_eq!(
            report(&guest),
            "guest error (not_found) in exec: starting hi: No such file or directory (os error 2)"
        );
        // A source that repeats its text in its wrapper's message.
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Loud(#[source] std::io::Error);
        let store = Error::store("opening db", Loud(std::io::Error::other("locked")));
        assert_eq!(
            report(&store),
            "state database error: opening db: outer: locked"
        );
    }
}

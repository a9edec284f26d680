//! Message types. `HostMsg` flows host -> guest (and client -> supervisor),
//! `GuestMsg` flows guest -> host (and supervisor -> client).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Bytes;

/// A process, named so that a later process of its pid is not it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
}

/// Identity of one runtime: the sandbox id and its runtime generation.
/// The supervisor announces it in its hello so a client can refuse to talk to
/// the wrong sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Opaque sandbox id (`SandboxId` as a string).
    pub sandbox_id: String,
    /// Runtime generation (incremented on every start).
    pub generation: u64,
}

/// Frames sent by the host side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case", deny_unknown_fields)]
pub enum HostMsg {
    /// First frame on a channel.
    Hello {
        /// The protocol version the host speaks on this channel: from a
        /// client of a supervisor, the highest it speaks (answered with the
        /// version the channel then uses, or refused); to an agent, which
        /// says hello first, the lower of the agent's and the host's.
        version: u32,
        /// The identity the client expects (supervisor socket only). The
        /// supervisor refuses the connection when it does not match.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<Identity>,
    },
    /// Start a request. Ends with exactly one [`GuestMsg::Response`] of the same id.
    Request {
        /// Caller-chosen id, unique among the caller's in-flight requests.
        id: u64,
        /// What to do.
        body: Request,
        /// Flow control (protocol 2): the request's initial credit, in
        /// payload bytes, in each direction. The guest sends at most this
        /// many `Stdout`/`Stderr` bytes (both streams count against one
        /// window) until the host grants more with [`HostMsg::Window`]; the
        /// host sends at most this many `Data` bytes until the guest grants
        /// more with [`GuestMsg::Window`]. `None`: no flow control (as in
        /// protocol 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u32>,
    },
    /// A control request handled by the supervisor itself (never forwarded to
    /// the agent; the agent rejects it with `unsupported`).
    Control {
        /// Caller-chosen id.
        id: u64,
        /// What to do.
        body: Control,
    },
    /// Input for a running exec/shell (stdin), a file being written, or a tunnel.
    Data {
        /// Request id.
        id: u64,
        /// Payload, at most [`crate::MAX_CHUNK`] bytes.
        data: Bytes,
    },
    /// End of input for a request (stdin EOF, end of file content, tunnel half-close).
    Eof {
        /// Request id.
        id: u64,
    },
    /// Deliver a signal to the process of an exec/shell request.
    Signal {
        /// Request id.
        id: u64,
        /// Signal number (e.g. 15).
        signal: i32,
    },
    /// Resize the pty of a shell request.
    Resize {
        /// Request id.
        id: u64,
        /// Terminal size.
        size: TtySize,
    },
    /// Abandon a request: kill its process / close its tunnel. The request
    /// still ends with a response.
    Cancel {
        /// Request id.
        id: u64,
    },
    /// Flow control (protocol 2): the host consumed `bytes` more of the
    /// request's output, and the guest may send that many more.
    Window {
        /// Request id.
        id: u64,
        /// Credit granted, in payload bytes.
        bytes: u32,
    },
}

/// Frames sent by the guest side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case", deny_unknown_fields)]
pub enum GuestMsg {
    /// First frame on a channel.
    Hello {
        /// Protocol version of the sender.
        version: u32,
        /// Agent build version (crate version).
        agent_version: String,
        /// Set by the supervisor: which runtime this is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<Identity>,
    },
    /// Standard output of an exec/shell, content of a file read, tunnel data.
    Stdout {
        /// Request id.
        id: u64,
        /// Payload.
        data: Bytes,
    },
    /// Standard error of an exec.
    Stderr {
        /// Request id.
        id: u64,
        /// Payload.
        data: Bytes,
    },
    /// The guest side closed its half of a tunnel / output stream.
    Eof {
        /// Request id.
        id: u64,
    },
    /// Final frame of a request.
    Response {
        /// Request id.
        id: u64,
        /// Outcome.
        result: Result<Response, GuestError>,
    },
    /// The channel cannot be used (bad hello, identity mismatch, malformed
    /// frame). Sent right before the sender closes the channel.
    Fatal {
        /// Why.
        error: GuestError,
    },
    /// Flow control (protocol 2): the guest consumed `bytes` more of the
    /// request's input, and the host may send that many more.
    Window {
        /// Request id.
        id: u64,
        /// Credit granted, in payload bytes.
        bytes: u32,
    },
}

/// Requests served by the guest agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Health check. Response: [`Response::Pong`].
    Ping,
    /// Run a process. Output arrives as `Stdout`/`Stderr` frames; the final
    /// response is [`Response::Exit`].
    Exec(ExecRequest),
    /// Stream a file's content as `Stdout` frames. Response: [`Response::Done`].
    ReadFile {
        /// Absolute guest path.
        path: String,
    },
    /// Write a file from the `Data` frames that follow, until `Eof`.
    /// Response (after `Eof`): [`Response::Done`].
    WriteFile {
        /// Absolute guest path.
        path: String,
        /// Permission bits for a newly created file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
        /// Append instead of truncating.
        #[serde(default)]
        append: bool,
    },
    /// List a directory. Response: [`Response::Entries`].
    ListDir {
        /// Absolute guest path.
        path: String,
    },
    /// Stat a path (without following a final symlink). Response: [`Response::Stat`].
    Stat {
        /// Absolute guest path.
        path: String,
    },
    /// Whether a path exists. Response: [`Response::Exists`].
    Exists {
        /// Absolute guest path.
        path: String,
    },
    /// Create a directory. Response: [`Response::Done`].
    Mkdir {
        /// Absolute guest path.
        path: String,
        /// Create missing parents, and succeed if it already exists.
        #[serde(default)]
        parents: bool,
    },
    /// Remove a file or directory. Response: [`Response::Done`].
    Remove {
        /// Absolute guest path.
        path: String,
        /// Remove directories with their content.
        #[serde(default)]
        recursive: bool,
    },
    /// Rename a path. Response: [`Response::Done`].
    Rename {
        /// Absolute guest source path.
        from: String,
        /// Absolute guest destination path.
        to: String,
    },
    /// Unpack a tar stream (sent as `Data` frames until `Eof`) into a guest
    /// directory. Response: [`Response::Done`].
    CopyIn {
        /// Absolute guest destination directory (created if missing).
        path: String,
    },
    /// Stream a guest path as a tar archive in `Stdout` frames. The archive
    /// holds one top-level entry named after the path's last component.
    /// Response: [`Response::Done`].
    CopyOut {
        /// Absolute guest path.
        path: String,
    },
    /// Open a TCP connection to `127.0.0.1:port` inside the guest. Bytes flow
    /// as `Data` (host->guest) and `Stdout` (guest->host) frames; either side
    /// half-closes with `Eof`. Response: [`Response::Done`] when both
    /// directions are closed, or an error if the connect fails.
    Tunnel {
        /// TCP port inside the guest.
        port: u16,
    },
    /// Exchange UDP datagrams with `127.0.0.1:port` inside the guest, from a
    /// socket of its own: each `Data` frame is one datagram sent, each
    /// `Stdout` frame one received (the first, empty, says the socket is
    /// ready). `Eof` or `Cancel` ends it. Response: [`Response::Done`].
    UdpTunnel {
        /// UDP port inside the guest.
        port: u16,
    },
    /// Flush filesystem buffers (sync). Response: [`Response::Done`].
    Sync,
    /// Stream the guest's own writable layer (a VM's overlay upper, on its
    /// data disk) as an uncompressed OCI layer tar in `Stdout` frames: what
    /// the guest changed over its image, as the host writes a container's
    /// (see `burrow_layer`). Each file as it is when read (the guest runs).
    /// Response: [`Response::Done`]; `Unsupported` from an agent whose
    /// writable layer is the host's (a container's).
    WriteLayer,
    /// The host is about to save the whole VM (hibernation, a full
    /// snapshot, a fork). Refused while other requests are in flight. The
    /// agent syncs, answers [`Response::Done`], and then reads nothing but,
    /// from whichever host restores the VM, one [`crate::vm::VmResume`]
    /// frame (fresh entropy and the time, applied at once) followed by a
    /// new session: its hello, then the host's. Any other frame is the
    /// host that saved the VM letting this guest run on: the session goes
    /// on, that frame its next. Processes keep running throughout.
    Suspend,
    /// Terminate every guest process (SIGTERM, then SIGKILL after
    /// `grace_ms`), sync, answer [`Response::Done`], then exit the agent.
    Shutdown {
        /// Milliseconds to wait between SIGTERM and SIGKILL.
        grace_ms: u64,
    },
}

/// A process to run in the guest.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Program and arguments; `argv[0]` is looked up in `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// Extra environment on top of the sandbox environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (default: the sandbox workdir, else `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Keep stdin open for `Data` frames; when false stdin is `/dev/null`.
    #[serde(default)]
    pub stdin: bool,
    /// Kill the process (SIGKILL to its process group) after this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Run on a pseudo-terminal of this size (interactive shell). Output then
    /// arrives only as `Stdout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
}

/// Terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// Requests handled by the supervisor (see [`HostMsg::Control`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Control {
    /// Graceful stop: guest processes get SIGTERM, then SIGKILL after
    /// `grace_ms`. Response [`Response::Done`] once the runtime has exited.
    Stop {
        /// Grace period in milliseconds.
        grace_ms: u64,
        /// Record the stop as the owner's exit (reason `owner_exited`)
        /// rather than a requested stop: a server stopping the attached
        /// sandboxes of a client session that ended.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        owner_exited: bool,
    },
    /// Immediate kill of the runtime. Response [`Response::Done`] once exited.
    Kill,
    /// Supervisor status. Response: [`Response::Supervisor`].
    Status,
    /// Stop accepting new requests; stop the runtime (reason `drain`) once
    /// the requests in flight have finished. Response [`Response::Done`] as
    /// soon as the sandbox is Draining.
    Drain,
    /// Stop watching the owner process: the sandbox survives it from now on.
    /// Response [`Response::Done`].
    Detach,
    /// Hand this warm sandbox to a claim (a pool's sandbox given to a
    /// create): its run counts from now (max duration and idleness), its
    /// configuration is read again (as [`Control::Reload`]), its hostname
    /// becomes `name`'s, and, with an `owner`, that process is watched
    /// from now on: the sandbox stops (reason `owner_exited`) when it
    /// exits, as an attached sandbox does with the process that started
    /// it; an owner already gone, or a pid now another process's (`start`
    /// differs), stops it at once. Response [`Response::Done`].
    Claim {
        /// The sandbox's name from now on (its hostname is derived from it).
        name: String,
        /// The claiming process, for an attached claim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<Owner>,
    },
    /// Explicit keepalive: counts as activity for the idle timeout.
    /// Response [`Response::Done`].
    Touch,
    /// Suspend every guest process (status Paused). Response
    /// [`Response::Done`] once frozen and recorded.
    Pause,
    /// Continue after `Pause` (status Running). Response [`Response::Done`].
    Resume,
    /// Re-read the persisted configuration and apply what can change live
    /// (cpus, memory, env of future execs, idle timeout, max duration).
    /// Response [`Response::Done`].
    Reload,
    /// Resource usage of the runtime. Response [`Response::Metrics`].
    Metrics,
    /// Write the sandbox's writable layer (what it changed over its image)
    /// as an uncompressed OCI layer tar to `layer`, a host path that must
    /// not exist yet, with the guest frozen for the copy where the host can
    /// freeze it (a paused one stays paused). Response [`Response::Layer`]
    /// once the file is complete and synced.
    Snapshot {
        /// Where to write the layer (a host path).
        layer: String,
    },
    /// Save the whole running guest into `dir`, a host directory that must
    /// not exist yet: its machine state, every RAM page included, and a
    /// copy of its writable disk, the guest stopped for the save and then
    /// let run on (a fork's copies and a full snapshot restore from it).
    /// Refused `unsupported` where the driver cannot (a container, a VM
    /// not restored from a boot template or sharing a host directory);
    /// `unavailable` while the sandbox is paused or requests are in flight
    /// in the guest. Response [`Response::Done`].
    SaveGuest {
        /// Where to save it (a host path).
        dir: String,
    },
}

/// Resource usage of a running sandbox; `None` where the host does not
/// expose a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// Total CPU time consumed, in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Current memory usage in bytes.
    pub memory_bytes: Option<u64>,
    /// Memory limit in bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Bytes read from block devices.
    pub io_read_bytes: Option<u64>,
    /// Bytes written to block devices.
    pub io_write_bytes: Option<u64>,
    /// Number of processes.
    pub pids: Option<u64>,
    /// Bytes the sandbox's writable layer takes on the host's disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// The writable layer's limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_limit_bytes: Option<u64>,
    /// What went through the sandbox's network stack since it started
    /// (absent without a network, or where the driver has no stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkCounters>,
}

/// A sandbox's network counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCounters {
    /// Bytes the guest sent (TCP payload and UDP datagrams).
    pub bytes_out: u64,
    /// Bytes the guest received.
    pub bytes_in: u64,
    /// Connections and UDP flows opened.
    pub connections: u64,
    /// Connections, flows, DNS names and DNS answers refused by the policy.
    pub refusals: u64,
    /// DNS questions the guest asked.
    pub dns_queries: u64,
}

/// Successful outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    /// Answer to `Ping`.
    Pong,
    /// The request finished; nothing to report.
    Done,
    /// An exec/shell process ended.
    Exit(ExitStatus),
    /// Directory listing.
    Entries {
        /// Entries, sorted by name.
        entries: Vec<DirEntry>,
    },
    /// File metadata.
    Stat {
        /// The metadata.
        stat: FileStat,
    },
    /// Answer to `Exists`.
    Exists {
        /// Whether the path exists.
        exists: bool,
    },
    /// Resource usage.
    Metrics {
        /// The snapshot.
        metrics: Metrics,
    },
    /// Answer to [`Control::Snapshot`]: the layer written.
    Layer {
        /// `sha256:<hex>` of the layer file's content.
        digest: String,
        /// Its size in bytes.
        size: u64,
    },
    /// Supervisor status.
    Supervisor {
        /// Supervisor process id.
        pid: u32,
        /// Requests currently in flight through the supervisor.
        in_flight: u32,
    },
}

/// How a guest process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitStatus {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// Whether the request's timeout killed it.
    #[serde(default)]
    pub timed_out: bool,
}

/// Kind of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Anything else (device, fifo, socket).
    Other,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirEntry {
    /// File name (no directory part).
    pub name: String,
    /// Kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
}

/// File metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileStat {
    /// Kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Symlink target, for symlinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
}

/// Machine-readable error class from the guest or supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuestErrorCode {
    /// Path or program does not exist.
    NotFound,
    /// Permission denied.
    PermissionDenied,
    /// Path already exists.
    AlreadyExists,
    /// A path component is not a directory / the path is a directory.
    NotADirectory,
    /// The path is a directory where a file was expected.
    IsADirectory,
    /// Directory not empty (non-recursive remove).
    NotEmpty,
    /// Bad request (relative path, empty argv, unknown request id, ...).
    InvalidArgument,
    /// The request is not served here.
    Unsupported,
    /// Protocol violation (bad hello, version mismatch, malformed frame).
    Protocol,
    /// The connection's expected identity does not match this runtime.
    IdentityMismatch,
    /// The runtime is shutting down, draining or paused and takes no new
    /// work: the request was refused without being run.
    Unavailable,
    /// The request was cut off: the runtime went away while it ran.
    Aborted,
    /// Connection refused (tunnel).
    ConnectionRefused,
    /// Any other I/O error.
    Io,
}

/// An error answered by the guest agent or the supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
#[serde(deny_unknown_fields)]
pub struct GuestError {
    /// Class.
    pub code: GuestErrorCode,
    /// Human-readable detail.
    pub message: String,
}

impl GuestError {
    /// Builds an error.
    pub fn new(code: GuestErrorCode, message: impl Into<String>) -> Self {
        GuestError {
            code,
            message: message.into(),
        }
    }

    /// Maps an I/O error to the closest code.
    pub fn from_io(err: &std::io::Error, context: &str) -> Self {
        use std::io::ErrorKind as K;
        let code = match err.kind() {
            K::NotFound => GuestErrorCode::NotFound,
            K::PermissionDenied => GuestErrorCode::PermissionDenied,
            K::AlreadyExists => GuestErrorCode::AlreadyExists,
            K::NotADirectory => GuestErrorCode::NotADirectory,
            K::IsADirectory => GuestErrorCode::IsADirectory,
            K::DirectoryNotEmpty => GuestErrorCode::NotEmpty,
            K::InvalidInput => GuestErrorCode::InvalidArgument,
            K::ConnectionRefused => GuestErrorCode::ConnectionRefused,
            _ => GuestErrorCode::Io,
        };
        GuestError::new(code, format!("{context}: {err}"))
    }
}

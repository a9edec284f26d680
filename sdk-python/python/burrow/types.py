"""Value types of the burrow API: frozen dataclasses and enums.

Enum values are the core's strings (``Status.RUNNING.value == "running"``).
Times are timezone-aware UTC datetimes. Every duration is a number of
seconds (a float): in configurations (``config`` is the core's
configuration as a dict, its durations turned from the core's milliseconds
into seconds), in run timings and in :class:`Ping`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = [
    "Status",
    "ExitReason",
    "Driver",
    "IdleAction",
    "LogSource",
    "Applies",
    "FileKind",
    "RunInfo",
    "SandboxInfo",
    "ExecResult",
    "ExitStatus",
    "DirEntry",
    "FileStat",
    "FieldChange",
    "ModifyPlan",
    "LogLine",
    "Metrics",
    "Ping",
    "SnapshotKind",
    "SnapshotInfo",
    "PoolInfo",
]


class Status(str, enum.Enum):
    """Lifecycle status of a sandbox."""

    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    PAUSED = "paused"
    STOPPED = "stopped"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value


class ExitReason(str, enum.Enum):
    """Why a run ended."""

    COMPLETED = "completed"
    STOPPED = "stopped"
    KILLED = "killed"
    IDLE_TIMEOUT = "idle_timeout"
    MAX_DURATION = "max_duration"
    CRASHED = "crashed"
    DRAIN = "drain"
    OWNER_EXITED = "owner_exited"
    START_FAILED = "start_failed"
    #: Reclaimed after being idle, its whole guest saved
    #: (``idle_action="hibernate"``): the next start resumes it.
    HIBERNATED = "hibernated"

    def __str__(self) -> str:
        return self.value


class Driver(str, enum.Enum):
    """Isolation driver."""

    CONTAINER = "container"
    VM = "vm"

    def __str__(self) -> str:
        return self.value


class IdleAction(str, enum.Enum):
    """What idle reclaim does with a sandbox (its ``idle_action``)."""

    #: Stop it (the default): the next start boots it again.
    STOP = "stop"
    #: Save the whole running guest (the vm driver) and resume it at the
    #: next start; where it cannot be saved, stop it as with ``STOP``.
    HIBERNATE = "hibernate"

    def __str__(self) -> str:
        return self.value


class LogSource(str, enum.Enum):
    """Which log: the programs' output (``stdout``, ``stderr``), the guest's
    log, the supervisor's events."""

    STDOUT = "stdout"
    STDERR = "stderr"
    GUEST = "guest"
    SUPERVISOR = "supervisor"

    def __str__(self) -> str:
        return self.value


class Applies(str, enum.Enum):
    """Where a configuration change takes effect."""

    LIVE = "live"
    FUTURE_EXECS = "future_execs"
    NEXT_START = "next_start"
    IMMEDIATELY = "immediately"

    def __str__(self) -> str:
        return self.value


class FileKind(str, enum.Enum):
    """Kind of a file in the sandbox."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


def _time(ms: Optional[int]) -> Optional[datetime]:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


def _req_time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


#: The durations of the core's configuration (milliseconds in its serde form).
_CONFIG_DURATIONS = ("idle_timeout", "max_duration", "startup_timeout")


def _seconds(ms: Any) -> Any:
    """Milliseconds of the core as seconds (a float); anything else as it is."""
    if isinstance(ms, (int, float)) and not isinstance(ms, bool):
        return ms / 1000.0
    return ms


def _config(d: Mapping[str, Any]) -> Dict[str, Any]:
    """The core's configuration with its durations in seconds."""
    config = dict(d)
    for key in _CONFIG_DURATIONS:
        if key in config:
            config[key] = _seconds(config[key])
    return config


@dataclass(frozen=True)
class RunInfo:
    """One run (runtime generation) of a sandbox."""

    generation: int
    started_at: datetime
    running_at: Optional[datetime]
    ended_at: Optional[datetime]
    exit_reason: Optional[ExitReason]
    detail: Optional[str]
    #: Phase durations of the start, in seconds (``{"total": 0.41, ...}``).
    timings: Dict[str, Any] = field(default_factory=dict)
    supervisor_pid: Optional[int] = None

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> RunInfo:
        reason = d.get("exit_reason")
        timings = d.get("timings")
        return cls(
            generation=int(d["generation"]),
            started_at=_req_time(d["started_at_ms"]),
            running_at=_time(d.get("running_at_ms")),
            ended_at=_time(d.get("ended_at_ms")),
            exit_reason=ExitReason(reason) if reason is not None else None,
            detail=d.get("detail"),
            timings=(
                {str(k): _seconds(v) for k, v in timings.items()}
                if isinstance(timings, dict)
                else {}
            ),
            supervisor_pid=d.get("supervisor_pid"),
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A snapshot of one sandbox. ``config`` is the core's configuration
    (its serde form) with every duration in seconds
    (``config["idle_timeout"] == 300.0``)."""

    id: str
    name: str
    status: Status
    generation: int
    config: Dict[str, Any]
    detached: bool
    created_at: datetime
    last_run: Optional[RunInfo]
    updated_at: Optional[datetime] = None

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> SandboxInfo:
        run = d.get("last_run")
        return cls(
            id=str(d["id"]),
            name=str(d["name"]),
            status=Status(d["status"]),
            generation=int(d["generation"]),
            config=_config(d["config"]),
            detached=bool(d["detached"]),
            created_at=_req_time(d["created_at_ms"]),
            last_run=RunInfo._from_core(run) if run is not None else None,
            updated_at=_time(d.get("updated_at_ms")),
        )


@dataclass(frozen=True)
class ExecResult:
    """The collected result of a command. A non-zero exit is not an
    exception: check ``ok`` or call ``check()``."""

    stdout: bytes
    stderr: bytes
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    #: Output went past the ``output_limit`` given: ``stdout`` or
    #: ``stderr`` holds only its first bytes.
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """Exited with code 0."""
        return self.exit_code == 0

    @property
    def stdout_text(self) -> str:
        """Stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        """Stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr.decode("utf-8", errors="replace")

    def check(self) -> ExecResult:
        """Returns self if the command exited with 0, else raises
        :class:`burrow.errors.CommandFailedError`."""
        if not self.ok:
            from .errors import CommandFailedError

            raise CommandFailedError(self)
        return self


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended."""

    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool

    @property
    def ok(self) -> bool:
        """Exited with code 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class DirEntry:
    """One directory entry (the core reports name, kind and size)."""

    name: str
    kind: FileKind
    size: int

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> DirEntry:
        return cls(name=str(d["name"]), kind=FileKind(d["kind"]), size=int(d["size"]))


@dataclass(frozen=True)
class FileStat:
    """Metadata of a path in the sandbox (symlinks not followed)."""

    kind: FileKind
    size: int
    mode: int
    uid: int
    gid: int
    mtime: datetime
    link_target: Optional[str] = None

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> FileStat:
        return cls(
            kind=FileKind(d["kind"]),
            size=int(d["size"]),
            mode=int(d["mode"]),
            uid=int(d["uid"]),
            gid=int(d["gid"]),
            mtime=datetime.fromtimestamp(int(d["mtime"]), tz=timezone.utc),
            link_target=d.get("link_target"),
        )


@dataclass(frozen=True)
class FieldChange:
    """Where one field's change of a modify lands."""

    field: str
    applies: Applies
    note: Optional[str] = None


@dataclass(frozen=True)
class ModifyPlan:
    """The result of a modify: what changed where, and the new snapshot."""

    changes: List[FieldChange]
    info: SandboxInfo

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> ModifyPlan:
        return cls(
            changes=[
                FieldChange(field=str(c["field"]), applies=Applies(c["applies"]), note=c.get("note"))
                for c in d["changes"]
            ],
            info=SandboxInfo._from_core(d["info"]),
        )


@dataclass(frozen=True)
class LogLine:
    """One log line (without its newline). ``time_ms``: when it was written,
    in milliseconds since the Unix epoch (``None`` for the guest's log)."""

    source: LogSource
    text: str
    time_ms: Optional[int] = None

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> LogLine:
        t = d.get("time_ms")
        return cls(
            source=LogSource(d["source"]),
            text=str(d["text"]),
            time_ms=None if t is None else int(t),
        )


@dataclass(frozen=True)
class Metrics:
    """Resource usage of a running sandbox (``None`` when unknown)."""

    cpu_usage_ns: Optional[int]
    memory_bytes: Optional[int]
    memory_limit_bytes: Optional[int]
    io_read_bytes: Optional[int]
    io_write_bytes: Optional[int]
    pids: Optional[int]
    #: Bytes the writable layer takes on the host's disk.
    disk_bytes: Optional[int] = None
    #: The writable layer's limit in bytes (``disk_mb``).
    disk_limit_bytes: Optional[int] = None

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> Metrics:
        return cls(
            cpu_usage_ns=d.get("cpu_usage_ns"),
            memory_bytes=d.get("memory_bytes"),
            memory_limit_bytes=d.get("memory_limit_bytes"),
            io_read_bytes=d.get("io_read_bytes"),
            io_write_bytes=d.get("io_write_bytes"),
            pids=d.get("pids"),
            disk_bytes=d.get("disk_bytes"),
            disk_limit_bytes=d.get("disk_limit_bytes"),
        )


@dataclass(frozen=True)
class Ping:
    """The result of a ping: the round trip to the guest agent."""

    #: Seconds (a float).
    latency: float


@dataclass(frozen=True)
class NetworkPolicy:
    """A sandbox's network policy: what ``allow`` rules match and no
    ``deny`` rule does (``NetworkPolicy(allow=["pypi.org",
    "*.github.com"], deny=["tcp:*:25"])``). A rule is
    ``[tcp:|udp:]HOST[:PORTS]``; one that does not parse is
    :class:`~burrow.errors.InvalidConfigError` at create or modify. See
    docs/networking.md."""

    allow: Sequence[str] = ()
    deny: Sequence[str] = ()

    def _to_core(self) -> Dict[str, Any]:
        return {"allow": list(self.allow), "deny": list(self.deny)}


@dataclass(frozen=True)
class Secret:
    """A secret the sandbox never holds (``Secret("GITHUB_TOKEN", token,
    ["api.github.com"])``): the guest's variable ``name`` holds a
    placeholder, which the sandbox's network stack replaces with ``value``
    in the values of the request headers ``headers`` names (empty:
    ``Authorization`` and ``Proxy-Authorization``; ``Secret("KEY", key,
    ["api.example.com"], headers=["X-Api-Key"])``) of HTTP requests (HTTPS
    included) to ``hosts`` only (``"api.github.com"``, ``"*.example.com"``,
    an IPv4 address); a placeholder in the request line or another header,
    or sent anywhere else, closes the connection. The sandbox needs a
    network. At most 16 headers, never one that routes or frames a request
    (``Host``, ``Content-Length``, ...): :class:`~burrow.errors.InvalidConfigError`.
    The value is never read back (``info().config["secrets"]`` has each
    name, hosts, headers where named, and placeholder) and not in ``repr``.
    See docs/networking.md."""

    name: str
    value: str = field(repr=False)
    hosts: Sequence[str] = ()
    headers: Sequence[str] = ()

    def _to_core(self) -> Dict[str, Any]:
        if isinstance(self.hosts, str):
            raise TypeError("a secret's hosts are a list of strings")
        if isinstance(self.headers, str):
            raise TypeError("a secret's headers are a list of strings")
        return {
            "name": self.name,
            "value": self.value,
            "hosts": list(self.hosts),
            "headers": list(self.headers),
        }


@dataclass(frozen=True)
class Capabilities:
    """What the backend can do beyond the lifecycle every backend has. An
    operation it lacks raises :class:`~burrow.errors.UnsupportedError`.
    The local backend of an unprivileged user without a delegated cgroup
    lacks ``pause``; a Kubernetes-backed server lacks several."""

    #: ``pause`` and ``resume``.
    pause: bool
    #: Live changes of a running sandbox's limits and environment (``modify``).
    modify_live: bool
    #: ``metrics``.
    metrics: bool
    #: ``logs``, including following.
    logs: bool
    #: Idle timeouts and demand start.
    idle_reclaim: bool
    #: Sandboxes attached to (and stopped with) their creating process.
    attached: bool
    #: Files written outside volumes survive a stop.
    persistent_layer: bool
    #: Network policies (:class:`NetworkPolicy`) are enforced.
    network_policy: bool = False
    #: Published ports (``ports=``) are served.
    published_ports: bool = False
    #: Secrets (``secrets=``) go into the sandboxes' requests to their hosts.
    secrets: bool = False
    #: Filesystem snapshots (``snapshot()``, ``snapshot:NAME`` images).
    snapshots: bool = False
    #: Full snapshots (memory and processes too) of running sandboxes.
    full_snapshots: bool = False
    #: Forks of running sandboxes (``fork()``).
    fork: bool = False
    #: Warm pools (``create_pool()``): a create of a pool's configuration
    #: claims one of its running sandboxes.
    pools: bool = False

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> Capabilities:
        return cls(
            pause=bool(d["pause"]),
            modify_live=bool(d["modify_live"]),
            metrics=bool(d["metrics"]),
            logs=bool(d["logs"]),
            idle_reclaim=bool(d["idle_reclaim"]),
            attached=bool(d["attached"]),
            persistent_layer=bool(d.get("persistent_layer", True)),
            network_policy=bool(d.get("network_policy", False)),
            published_ports=bool(d.get("published_ports", False)),
            secrets=bool(d.get("secrets", False)),
            snapshots=bool(d.get("snapshots", False)),
            full_snapshots=bool(d.get("full_snapshots", False)),
            fork=bool(d.get("fork", False)),
            pools=bool(d.get("pools", False)),
        )


class SnapshotKind(str, enum.Enum):
    """What a snapshot holds."""

    #: The sandbox's files: its writable layer over its image, an OCI image.
    FILESYSTEM = "filesystem"
    #: A running vm sandbox whole: files, memory and processes.
    FULL = "full"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SnapshotInfo:
    """A stored snapshot. Create sandboxes from it with ``image=info.image``
    (``"snapshot:NAME"``)."""

    name: str
    kind: SnapshotKind
    #: The image reference that creates sandboxes from it.
    image: str
    #: The content digest of its OCI image manifest (``sha256:...``).
    digest: str
    #: Bytes it adds to the store (the base image's layers are shared).
    size: int
    #: The sandbox it was taken from (which may be gone since).
    source_id: str
    source_name: str
    #: That sandbox's image.
    base_image: str
    driver: Driver
    created_at: datetime

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> SnapshotInfo:
        return cls(
            name=str(d["name"]),
            kind=SnapshotKind(d["kind"]),
            image=str(d["image"]),
            digest=str(d["digest"]),
            size=int(d["size"]),
            source_id=str(d["source_id"]),
            source_name=str(d["source_name"]),
            base_image=str(d["base_image"]),
            driver=Driver(d["driver"]),
            created_at=_req_time(d["created_at_ms"]),
        )


@dataclass(frozen=True)
class PoolInfo:
    """A warm pool as it stands (:meth:`Sandbox.create_pool`): sandboxes of
    one configuration kept started and unclaimed. A create of that
    configuration (but for its labels, environment, timeouts, idle action
    and demand start) claims one of them instead of starting; a ``define``
    never does."""

    name: str
    #: What its sandboxes run (the core's configuration as a dict,
    #: durations in seconds).
    config: Dict[str, Any]
    #: How many warm sandboxes it keeps.
    size: int
    #: Warm sandboxes running and unclaimed now.
    warm: int
    #: Warm sandboxes still starting.
    starting: int
    #: Creates that claimed one of its sandboxes.
    claims: int
    #: Creates of its configuration that found none warm and started cold.
    misses: int
    #: How long its last refill took to start its sandboxes, in seconds
    #: (``None`` before the first).
    last_refill: Optional[float]
    created_at: datetime

    @classmethod
    def _from_core(cls, d: Mapping[str, Any]) -> PoolInfo:
        last = d.get("last_refill_ms")
        return cls(
            name=str(d["name"]),
            config=_config(d["config"]),
            size=int(d["size"]),
            warm=int(d["warm"]),
            starting=int(d["starting"]),
            claims=int(d["claims"]),
            misses=int(d["misses"]),
            last_refill=None if last is None else last / 1000.0,
            created_at=_req_time(d["created_at_ms"]),
        )

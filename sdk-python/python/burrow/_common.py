"""Argument shaping shared by the async API and the synchronous facade.

Only Python-side conversions live here (types, defaults, sentinel handling);
every value judgement is the core's.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from datetime import timedelta
from typing import (
    Any,
    AsyncIterable,
    AsyncIterator,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Union,
)

from . import _native
from .types import (
    DirEntry,
    Driver,
    ExecResult,
    ExitStatus,
    FileStat,
    IdleAction,
    LogLine,
    LogSource,
    Metrics,
    ModifyPlan,
    Ping,
    SandboxInfo,
    Status,
)

#: One volume: ``(source, target)`` or ``(source, target, read_only)``;
#: source is an absolute host path or a volume name (no ``/``).
Volume = Union[Tuple[str, str], Tuple[str, str, bool]]
Statuses = Union[Status, str, Sequence[Union[Status, str]]]
Argv = Union[str, Sequence[str]]
Data = Union[bytes, bytearray, memoryview, str]
#: A duration: a number of seconds (``300``, ``0.5``), a ``timedelta``, or
#: the core's duration text (``"5m"``, ``"1h30m"``).
Duration = Union[float, int, str, timedelta]


class _Unset:
    """Marks a keyword left out (distinct from an explicit ``None``)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


def configure(
    home: Optional[Union[str, "os.PathLike[str]"]] = None,
    burrow_bin: Optional[Union[str, "os.PathLike[str]"]] = None,
    agent_bin: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> None:
    """Sets the burrow home and binaries explicitly (optional; call before
    the first sandbox call). ``home`` replaces ``$BURROW_HOME`` for this
    process's calls; ``burrow_bin`` and ``agent_bin`` set ``BURROW_BIN`` and
    ``BURROW_AGENT_BIN`` in this process's environment (inherited by the
    supervisors it spawns)."""
    if burrow_bin is not None:
        os.environ["BURROW_BIN"] = os.fspath(burrow_bin)
    if agent_bin is not None:
        os.environ["BURROW_AGENT_BIN"] = os.fspath(agent_bin)
    if home is not None:
        _native.configure(os.fspath(home))


def seconds(d: Optional[Duration]) -> Optional[Union[float, str]]:
    """A duration as the core takes it: seconds (a float) or duration text
    (the core parses and judges it)."""
    if d is None:
        return None
    if isinstance(d, timedelta):
        return d.total_seconds()
    if isinstance(d, str):
        return d
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError(
            f"a duration is a number of seconds, a timedelta or duration text, not {type(d).__name__}"
        )
    return float(d)


def memory_of(memory: Any, memory_mb: Any, unset: Any = None) -> Any:
    """The memory limit in MiB from ``memory`` or its alias ``memory_mb``
    (``unset``: what "not given" is)."""
    if memory is unset:
        return memory_mb
    if memory_mb is not unset and memory_mb != memory:
        raise TypeError("memory and memory_mb are the same option (MiB): give one of them")
    return memory


def build_kwargs(
    *,
    image: Optional[str],
    driver: Optional[Union[str, Driver]],
    cpus: Optional[float],
    memory: Optional[int],
    memory_mb: Optional[int],
    pids_limit: Optional[int],
    disk_mb: Optional[int],
    best_effort_limits: bool,
    default_limits: bool,
    seccomp_allow: Optional[Sequence[str]],
    env: Optional[Mapping[str, str]],
    workdir: Optional[str],
    labels: Optional[Mapping[str, str]],
    volumes: Optional[Sequence[Volume]],
    network: Any,
    ports: Optional[Sequence[str]],
    secrets: Optional[Sequence[Any]],
    idle_timeout: Optional[Duration],
    idle_action: Optional[Union[str, IdleAction]],
    max_duration: Optional[Duration],
    startup_timeout: Optional[Duration],
    demand_start: Optional[bool],
    detached: bool,
) -> Dict[str, Any]:
    vols: Optional[List[Tuple[str, str, bool]]] = None
    if volumes is not None:
        vols = []
        for v in volumes:
            if not isinstance(v, tuple) or len(v) not in (2, 3):
                raise TypeError(
                    "a volume is (source, target) or (source, target, read_only), "
                    f"not {v!r}"
                )
            ro = bool(v[2]) if len(v) == 3 else False
            vols.append((os.fspath(v[0]), str(v[1]), ro))
    return {
        "image": None if image is None else os.fspath(image),
        "driver": None if driver is None else str(Driver(driver) if isinstance(driver, Driver) else driver),
        "cpus": None if cpus is None else float(cpus),
        "memory_mb": memory_of(memory, memory_mb),
        "pids_limit": pids_limit,
        "disk_mb": disk_mb,
        "best_effort_limits": bool(best_effort_limits),
        "default_limits": None if default_limits is None else bool(default_limits),
        "seccomp_allow": None if seccomp_allow is None else syscall_list(seccomp_allow),
        "env": None if env is None else dict(env),
        "workdir": workdir,
        "labels": None if labels is None else dict(labels),
        "volumes": vols,
        "network": network_json(network),
        "ports": None if ports is None else port_list(ports),
        "secrets": None if secrets is None else secret_list(secrets),
        "idle_timeout": seconds(idle_timeout),
        "idle_action": idle_action_name(idle_action),
        "max_duration": seconds(max_duration),
        "startup_timeout": seconds(startup_timeout),
        "demand_start": demand_start,
        "detached": bool(detached),
    }


def syscall_list(names: Sequence[str]) -> List[str]:
    """The syscall names of ``seccomp_allow=`` (x86-64 names: the core
    checks each one)."""
    return _strings(
        names, 'seccomp_allow is a list of syscall names (["io_uring_setup"])', "a syscall name"
    )


def _strings(values: Sequence[str], not_a_list: str, item: str) -> List[str]:
    """``values`` as a list of strings: a lone string is ``not_a_list``'s
    TypeError, an item of another type ``item``'s."""
    if isinstance(values, (str, bytes)):
        raise TypeError(not_a_list)
    out = []
    for v in values:
        if not isinstance(v, str):
            raise TypeError(f"{item} is a string, not {type(v).__name__}")
        out.append(v)
    return out


def network_json(network: Any) -> Any:
    """The core's JSON of a ``network=`` argument: ``False``/``True``,
    ``"none"``/``"all"``, or a :class:`NetworkPolicy` (or a mapping with
    only ``allow`` and ``deny``)."""
    from .types import NetworkPolicy

    if isinstance(network, bool) or network in ("none", "all"):
        return network
    if isinstance(network, NetworkPolicy):
        return network._to_core()
    if isinstance(network, Mapping):
        extra = set(network) - {"allow", "deny"}
        if extra:
            raise TypeError(f"a network policy has allow and deny only, not {sorted(extra)}")
        return NetworkPolicy(
            allow=tuple(network.get("allow") or ()), deny=tuple(network.get("deny") or ())
        )._to_core()
    raise TypeError(
        'network is True/False, "all"/"none" or a NetworkPolicy, '
        f"not {type(network).__name__}"
    )


def port_list(ports: Sequence[str]) -> List[str]:
    """Published ports (``"8080:80"``, ``"0.0.0.0:5353:53/udp"``)."""
    return _strings(
        ports,
        'ports is a list of "[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]" strings',
        "a published port",
    )


def secret_list(secrets: Sequence[Any]) -> List[Dict[str, Any]]:
    """The core's JSON of ``secrets=`` (a list of :class:`Secret`)."""
    from .types import Secret

    if isinstance(secrets, (str, Secret)):
        raise TypeError("secrets is a list of Secret")
    out = []
    for s in secrets:
        if not isinstance(s, Secret):
            raise TypeError(f"a secret is a burrow.Secret, not {type(s).__name__}")
        out.append(s._to_core())
    return out


def idle_action_name(action: Optional[Union[str, IdleAction]]) -> Optional[str]:
    """The core's name of an idle action (``"stop"``, ``"hibernate"``); the
    core judges the value."""
    if action is None:
        return None
    return action.value if isinstance(action, IdleAction) else str(action)


def status_list(statuses: Optional[Statuses]) -> Optional[List[str]]:
    if statuses is None:
        return None
    if isinstance(statuses, (Status, str)):
        return [str(statuses.value if isinstance(statuses, Status) else statuses)]
    return [s.value if isinstance(s, Status) else str(s) for s in statuses]


def source_name(source: Optional[Union[LogSource, str]]) -> Optional[str]:
    if source is None:
        return None
    return source.value if isinstance(source, LogSource) else str(source)


def argv_list(argv: Argv) -> List[str]:
    """A list of arguments; a string runs through ``sh -c``."""
    if isinstance(argv, str):
        return ["sh", "-c", argv]
    if isinstance(argv, (bytes, bytearray)):
        raise TypeError("argv must be a str or a sequence of str, not bytes")
    return [str(a) if isinstance(a, os.PathLike) else a for a in argv]


def to_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes or str, not {type(data).__name__}")


#: How much of a file object ``Fs.write_stream`` asks for at a time (the
#: core's largest chunk).
STREAM_CHUNK = 256 * 1024


class Readable(Protocol):
    """A binary file object (``open(p, "rb")``, ``io.BytesIO``, a pipe):
    what ``Fs.write_stream`` reads with ``read(n)`` until it returns empty.
    In the async API ``read`` may also be a coroutine (aiofiles)."""

    def read(self, size: int = ..., /) -> Any: ...


#: What the synchronous ``Fs.write_stream`` writes: bytes (or text, UTF-8),
#: a binary file object, or an iterable of chunks.
ByteSource = Union[Data, Readable, Iterable[Data]]
#: What the async ``Fs.write_stream`` writes: also an async iterable.
AsyncByteSource = Union[Data, Readable, AsyncIterable[Data], Iterable[Data]]


def chunks(source: ByteSource) -> Iterator[bytes]:
    """The chunks of ``source`` (see :data:`ByteSource`)."""
    if isinstance(source, (bytes, bytearray, memoryview, str)):
        if len(source):
            yield to_bytes(source)
        return
    read = getattr(source, "read", None)
    if callable(read):
        while True:
            block = read(STREAM_CHUNK)
            if not block:
                return
            yield to_bytes(block)
    if not isinstance(source, Iterable):
        raise TypeError(
            f"expected bytes, a binary file or an iterable of bytes, not {type(source).__name__}"
        )
    for block in source:
        yield to_bytes(block)


async def achunks(source: AsyncByteSource) -> AsyncIterator[bytes]:
    """The chunks of ``source`` (see :data:`AsyncByteSource`); a plain
    file object is read in a worker thread, off the event loop."""
    if isinstance(source, AsyncIterable):
        async for block in source:
            yield to_bytes(block)
        return
    read = getattr(source, "read", None)
    if callable(read) and not isinstance(source, (bytes, bytearray, memoryview, str)):
        coroutine = inspect.iscoroutinefunction(read)
        while True:
            if coroutine:
                block = await read(STREAM_CHUNK)
            else:
                block = await asyncio.to_thread(read, STREAM_CHUNK)
            if not block:
                return
            yield to_bytes(block)
    for chunk in chunks(source):
        yield chunk


def modify_changes(
    *,
    cpus: Any,
    memory: Any,
    memory_mb: Any,
    env_set: Optional[Mapping[str, str]],
    env_unset: Optional[Sequence[str]],
    labels_set: Optional[Mapping[str, str]],
    labels_unset: Optional[Sequence[str]],
    idle_timeout: Any,
    idle_action: Any,
    max_duration: Any,
    network: Any = UNSET,
) -> Dict[str, Any]:
    changes: Dict[str, Any] = {}
    if network is not UNSET:
        changes["network"] = network_json(network)
    for key, value in (
        ("cpus", cpus),
        ("memory_mb", memory_of(memory, memory_mb, UNSET)),
    ):
        if value is not UNSET:
            changes[key] = value
    # A present None clears the timeout.
    for key, value in (("idle_timeout", idle_timeout), ("max_duration", max_duration)):
        if value is not UNSET:
            changes[key] = seconds(value)
    if idle_action is not UNSET:
        # None (null) leaves it unchanged in the core, like leaving it out.
        changes["idle_action"] = idle_action_name(idle_action)
    if env_set is not None:
        changes["env_set"] = dict(env_set)
    if env_unset is not None:
        changes["env_unset"] = list(env_unset)
    if labels_set is not None:
        changes["labels_set"] = dict(labels_set)
    if labels_unset is not None:
        changes["labels_unset"] = list(labels_unset)
    return changes


# Conversions of native results ------------------------------------------------


def info(d: Any) -> SandboxInfo:
    return SandboxInfo._from_core(d)


def ping(latency: Any) -> Ping:
    return Ping(latency=float(latency))


def infos(ds: Any) -> List[SandboxInfo]:
    return [SandboxInfo._from_core(d) for d in ds]


def exec_result(t: Any) -> ExecResult:
    stdout, stderr, code, signal, timed_out, truncated = t
    return ExecResult(
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        exit_code=code,
        signal=signal,
        timed_out=bool(timed_out),
        truncated=bool(truncated),
    )


def exit_status(t: Any) -> ExitStatus:
    code, signal, timed_out = t
    return ExitStatus(exit_code=code, signal=signal, timed_out=bool(timed_out))


def dir_entries(ds: Any) -> List[DirEntry]:
    return [DirEntry._from_core(d) for d in ds]


def file_stat(d: Any) -> FileStat:
    return FileStat._from_core(d)


def plan(d: Any) -> ModifyPlan:
    return ModifyPlan._from_core(d)


def metrics(d: Any) -> Metrics:
    return Metrics._from_core(d)


def log_lines(ds: Any) -> List[LogLine]:
    return [LogLine._from_core(d) for d in ds]


def log_line(d: Any) -> LogLine:
    return LogLine._from_core(d)



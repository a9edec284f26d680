"""The calls of the core, as methods: each builds one operation of the
binding core (``burrow._core.call``, JSON tagged by ``op``) and wraps the
objects it returns. No validation and no lifecycle logic: every check and
every error is the core's.

Every object has a mode, given by the entry point that made it: ``ASYNC``
(its calls return awaitables bound to the running loop) or ``SYNC`` (they
block, GIL released, and return the value; refused inside a running event
loop). ``burrow._api`` uses ``ASYNC``; ``burrow.sync`` is generated from it
(``scripts/gen-python-sync.py``) and uses ``SYNC``. Structured values are
the core's serde form as plain dicts (see ``burrow.types``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _core

configure = _core.configure
error_codes = _core.error_codes
in_flight = _core.in_flight
_at_exit = _core._at_exit

T = TypeVar("T")
#: A duration as the core takes it: seconds, or duration text ("5m").
Seconds = Union[float, str]


def _no_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "burrow.sync blocks: it cannot be used inside a running event loop "
        "(use the async API, `burrow.Sandbox`)"
    )


def _call(
    target: Optional[_core.NativeObject],
    op: str,
    data: Optional[bytes],
    blocking: bool,
    args: Dict[str, Any],
) -> Any:
    """Runs ``op`` with the arguments that are not ``None``."""
    if blocking:
        _no_loop()
    body = {k: v for k, v in args.items() if v is not None}
    body["op"] = op
    return _core.call(target, json.dumps(body), data, blocking=blocking)


def _wrap(res: Any, blocking: bool, make: Callable[[Any], T]) -> Any:
    """The object a call returns, wrapped by ``make`` (after the await)."""
    if blocking:
        return make(res)

    async def later() -> T:
        return make(await res)

    return later()


class Calls:
    """The calls on the module, in one mode."""

    def __init__(self, blocking: bool) -> None:
        self._b = blocking

    def _sandbox(self, res: Any) -> Any:
        return _wrap(res, self._b, lambda o: NativeSandbox(o, self._b))

    def build(
        self,
        name: str,
        mode: str,
        *,
        image: Optional[str] = None,
        driver: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        disk_mb: Optional[int] = None,
        best_effort_limits: bool = False,
        default_limits: Optional[bool] = None,
        seccomp_allow: Optional[Sequence[str]] = None,
        env: Optional[Dict[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Dict[str, str]] = None,
        volumes: Optional[Sequence[Tuple[str, str, bool]]] = None,
        network: Any = False,
        ports: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Dict[str, Any]]] = None,
        idle_timeout: Optional[Seconds] = None,
        idle_action: Optional[str] = None,
        max_duration: Optional[Seconds] = None,
        startup_timeout: Optional[Seconds] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
    ) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        vols = None
        if volumes is not None:
            vols = [{"source": s, "target": t, "read_only": ro} for (s, t, ro) in volumes]
        args = dict(
            name=name, mode=mode, image=image, driver=driver, cpus=cpus, memory_mb=memory_mb,
            pids_limit=pids_limit, disk_mb=disk_mb, best_effort_limits=best_effort_limits,
            default_limits=default_limits, seccomp_allow=seccomp_allow,
            env=env, workdir=workdir, labels=labels, volumes=vols,
            network=network, ports=ports, secrets=secrets, idle_timeout=idle_timeout, idle_action=idle_action,
            max_duration=max_duration, startup_timeout=startup_timeout,
            demand_start=demand_start, detached=detached,
        )  # fmt: skip
        return self._sandbox(_call(None, "build", None, self._b, args))

    def get(self, name: str) -> Any:
        return self._sandbox(_call(None, "get", None, self._b, {"name": name}))

    def get_by_id(self, id: str) -> Any:
        return self._sandbox(_call(None, "get_by_id", None, self._b, {"id": id}))

    def list(
        self, statuses: Optional[Sequence[str]] = None, labels: Optional[Dict[str, str]] = None
    ) -> Any:
        return _call(None, "list", None, self._b, {"statuses": statuses, "labels": labels})

    def start(self, name: str) -> Any:
        return self._sandbox(_call(None, "start", None, self._b, {"name": name}))

    def bind(self, id: str, name: str, status: str) -> NativeSandbox:
        # Immediate: the core makes the handle without a lookup (no I/O;
        # every call on it checks the identity).
        body = json.dumps({"op": "bind", "id": id, "name": name, "status": status})
        return NativeSandbox(_core.call(None, body, None, blocking=True), self._b)

    def remove(self, name: str) -> Any:
        return _call(None, "remove", None, self._b, {"name": name})

    def capabilities(self) -> Any:
        return _call(None, "capabilities", None, self._b, {})

    def list_snapshots(self) -> Any:
        return _call(None, "list_snapshots", None, self._b, {})

    def get_snapshot(self, name: str) -> Any:
        return _call(None, "get_snapshot", None, self._b, {"name": name})

    def remove_snapshot(self, name: str) -> Any:
        return _call(None, "remove_snapshot", None, self._b, {"name": name})

    def create_pool(self, name: str, size: int, options: Dict[str, Any]) -> Any:
        """``options`` are :meth:`build`'s (``volumes`` as it takes them),
        without ``detached``."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        vols = options.get("volumes")
        if vols is not None:
            vols = [{"source": s, "target": t, "read_only": ro} for (s, t, ro) in vols]
        args = {**options, "volumes": vols, "name": name, "size": size}
        args.pop("detached", None)
        return _call(None, "create_pool", None, self._b, args)

    def get_pool(self, name: str) -> Any:
        return _call(None, "get_pool", None, self._b, {"name": name})

    def list_pools(self) -> Any:
        return _call(None, "list_pools", None, self._b, {})

    def scale_pool(self, name: str, size: int) -> Any:
        return _call(None, "scale_pool", None, self._b, {"name": name, "size": size})

    def remove_pool(self, name: str) -> Any:
        return _call(None, "remove_pool", None, self._b, {"name": name})


#: The calls of the async API.
ASYNC = Calls(False)
#: The calls of the synchronous facade.
SYNC = Calls(True)


class NativeSandbox:
    """A sandbox of the core: live, or a metadata handle (one type)."""

    __slots__ = ("_o", "_b")

    def __init__(self, obj: _core.NativeObject, blocking: bool) -> None:
        self._o = obj
        self._b = blocking

    def _c(self, op: str, data: Optional[bytes] = None, **args: Any) -> Any:
        return _call(self._o, op, data, self._b, args)

    def _obj(self, res: Any, make: Callable[[Any, bool], T]) -> Any:
        return _wrap(res, self._b, lambda o: make(o, self._b))

    @property
    def id(self) -> str:
        return str(self._o.id)

    @property
    def name(self) -> str:
        return str(self._o.name)

    @property
    def generation(self) -> int:
        return self._o.generation

    @property
    def status(self) -> str:
        """The status the object was made with (the core's snapshot)."""
        return str(self._o.status)

    def handle(self) -> NativeSandbox:
        # Immediate: a live sandbox knows its handle (no I/O but in a fork
        # child, which re-binds by id).
        handle = _core.call(self._o, '{"op": "handle"}', None, blocking=True)
        return NativeSandbox(handle, self._b)

    def info(self) -> Any:
        return self._c("info")

    def ping(self) -> Any:
        return self._c("ping")

    def touch(self) -> Any:
        return self._c("touch")

    def start(self) -> Any:
        return self._obj(self._c("start"), NativeSandbox)

    def connect(self) -> Any:
        return self._obj(self._c("connect"), NativeSandbox)

    def connect_or_start(self) -> Any:
        return self._obj(self._c("connect_or_start"), NativeSandbox)

    def exec(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[bytes] = None,
        timeout: Optional[Seconds] = None,
        output_limit: Optional[int] = None,
    ) -> Any:
        return self._c(
            "exec", stdin, argv=argv, env=env, cwd=cwd, timeout=timeout, output_limit=output_limit
        )

    def spawn(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[bytes] = None,
        keep_stdin: bool = False,
        timeout: Optional[Seconds] = None,
    ) -> Any:
        res = self._c(
            "spawn", stdin, argv=argv, env=env, cwd=cwd, keep_stdin=keep_stdin, timeout=timeout
        )
        return self._obj(res, NativeProcess)

    def fs_read(self, path: str) -> Any:
        return self._c("fs_read", path=path)

    def fs_write(self, path: str, data: bytes, mode: Optional[int] = None) -> Any:
        return self._c("fs_write", data, path=path, mode=mode)

    def fs_open_read(self, path: str) -> Any:
        return self._obj(self._c("fs_open_read", path=path), NativeFileReader)

    def fs_open_write(self, path: str, mode: Optional[int] = None, append: bool = False) -> Any:
        res = self._c("fs_open_write", path=path, mode=mode, append=append)
        return self._obj(res, NativeFileWriter)

    def fs_list(self, path: str) -> Any:
        return self._c("fs_list", path=path)

    def fs_stat(self, path: str) -> Any:
        return self._c("fs_stat", path=path)

    def fs_exists(self, path: str) -> Any:
        return self._c("fs_exists", path=path)

    def fs_mkdir(self, path: str, parents: bool = False) -> Any:
        return self._c("fs_mkdir", path=path, parents=parents)

    def fs_remove(self, path: str, recursive: bool = False) -> Any:
        return self._c("fs_remove", path=path, recursive=recursive)

    def fs_rename(self, src: str, dst: str) -> Any:
        return _call(self._o, "fs_rename", None, self._b, {"from": src, "to": dst})

    def stop(self, grace: Optional[Seconds] = None) -> Any:
        return self._c("stop", grace=grace)

    def kill(self) -> Any:
        return self._c("kill")

    def request_drain(self) -> Any:
        return self._c("request_drain")

    def wait_until_stopped(self) -> Any:
        return self._c("wait_until_stopped")

    def wait_for_status(self, statuses: Sequence[str], timeout: Optional[Seconds] = None) -> Any:
        return self._c("wait_for_status", statuses=statuses, call_timeout=timeout)

    def restart(self) -> Any:
        # A live sandbox follows its id (the new record); a handle's
        # restart gives the live sandbox of the new run.
        res = self._c("restart")
        return res if self._o.live else self._obj(res, NativeSandbox)

    def pause(self) -> Any:
        return self._c("pause")

    def resume(self) -> Any:
        return self._c("resume")

    def modify(self, changes: Dict[str, Any]) -> Any:
        # Passed as given: a present None clears a limit or timeout.
        if self._b:
            _no_loop()
        body = dict(changes)
        body["op"] = "modify"
        return _core.call(self._o, json.dumps(body), None, blocking=self._b)

    def metrics(self) -> Any:
        return self._c("metrics")

    def snapshot(self, name: str, kind: Optional[str]) -> Any:
        return self._c("snapshot", name=name, kind=kind)

    def fork(self, count: Optional[int], names: List[str], detached: bool) -> Any:
        return self._c("fork", count=count, names=names, detached=detached)

    def logs(self, tail: Optional[int] = None, source: Optional[str] = None) -> Any:
        return self._c("logs", tail=tail, source=source)

    def follow_logs(self, tail: Optional[int] = None, source: Optional[str] = None) -> Any:
        return self._obj(self._c("follow_logs", tail=tail, source=source), NativeLogStream)

    def detach(self) -> Any:
        return self._c("detach")

    def remove(self) -> Any:
        return self._c("remove")

    def destroy(self) -> Any:
        return self._c("destroy")

    def __repr__(self) -> str:
        return f"NativeSandbox(id={self.id!r}, name={self.name!r})"


#: A metadata handle is the same object type as a live sandbox.
NativeHandle = NativeSandbox


class NativeProcess:
    """A process with streamed output: a pull cursor of events."""

    __slots__ = ("_o", "_b")

    def __init__(self, obj: _core.NativeObject, blocking: bool) -> None:
        self._o = obj
        self._b = blocking

    def next_event(self) -> Any:
        return _call(self._o, "next", None, self._b, {})

    def write(self, data: bytes) -> Any:
        return _call(self._o, "write", data, self._b, {})

    def close_stdin(self) -> Any:
        return _call(self._o, "close_stdin", None, self._b, {})

    def signal(self, signal: int) -> Any:
        return _call(self._o, "signal", None, self._b, {"signal": signal})


class NativeLogStream:
    """A followed log: a pull cursor of lines."""

    __slots__ = ("_o", "_b")

    def __init__(self, obj: _core.NativeObject, blocking: bool) -> None:
        self._o = obj
        self._b = blocking

    def next(self, timeout: Optional[Seconds] = None) -> Any:
        return _call(self._o, "next", None, self._b, {"call_timeout": timeout})


class NativeFileReader:
    """A sandbox file read as a stream: a pull cursor of chunks (bytes,
    ``None`` at the end). Dropping it abandons the read in the guest."""

    __slots__ = ("_o", "_b")

    def __init__(self, obj: _core.NativeObject, blocking: bool) -> None:
        self._o = obj
        self._b = blocking

    def next(self) -> Any:
        return _call(self._o, "next", None, self._b, {})

    def close(self) -> Any:
        """Ends a pending ``next`` at once and releases the guest's file."""
        return _call(self._o, "close", None, self._b, {})


class NativeFileWriter:
    """A sandbox file written as a stream: ``write`` waits while the
    sandbox has not taken the previous MiB; ``finish`` is the byte count."""

    __slots__ = ("_o", "_b")

    def __init__(self, obj: _core.NativeObject, blocking: bool) -> None:
        self._o = obj
        self._b = blocking

    def write(self, data: bytes) -> Any:
        return _call(self._o, "write", data, self._b, {})

    def finish(self) -> Any:
        return _call(self._o, "finish", None, self._b, {})

    def close(self) -> Any:
        """Abandons the write; later writes fail (invalid_argument)."""
        return _call(self._o, "close", None, self._b, {})


__all__: List[str] = []

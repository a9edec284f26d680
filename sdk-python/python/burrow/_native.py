"""The calls of the core, as methods: each builds one operation of the
binding core (``burrow._core.call``, JSON tagged by ``op``) and wraps the
objects it returns. No validation and no lifecycle logic: every check and
every error is the core's.

Methods take ``blocking``: ``False`` (default) returns an awaitable bound to
the running loop; ``True`` blocks (GIL released) and returns the value.
Structured values are the core's serde form as plain dicts (see
``burrow.types``).
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from . import _core

configure = _core.configure
error_codes = _core.error_codes
in_flight = _core.in_flight
_at_exit = _core._at_exit

T = TypeVar("T")


def _call(
    target: Optional[_core.NativeObject],
    op: str,
    data: Optional[bytes] = None,
    blocking: bool = False,
    **args: Any,
) -> Any:
    """Runs ``op`` with the arguments that are not ``None``."""
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


def _sandbox(obj: Any) -> NativeSandbox:
    return NativeSandbox(obj)


def _process(obj: Any) -> NativeProcess:
    return NativeProcess(obj)


def _logs(obj: Any) -> NativeLogStream:
    return NativeLogStream(obj)


def build(
    name: str,
    mode: str,
    *,
    image: Optional[str] = None,
    driver: Optional[str] = None,
    cpus: Optional[float] = None,
    memory_mb: Optional[int] = None,
    pids_limit: Optional[int] = None,
    env: Optional[Dict[str, str]] = None,
    workdir: Optional[str] = None,
    labels: Optional[Dict[str, str]] = None,
    volumes: Optional[Sequence[Tuple[str, str, bool]]] = None,
    network: bool = False,
    idle_timeout: Optional[float] = None,
    max_duration: Optional[float] = None,
    startup_timeout: Optional[float] = None,
    demand_start: Optional[bool] = None,
    detached: bool = False,
    blocking: bool = False,
) -> Any:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    vols = None
    if volumes is not None:
        vols = [{"source": s, "target": t, "read_only": ro} for (s, t, ro) in volumes]
    res = _call(
        None, "build", None, blocking, name=name, mode=mode, image=image, driver=driver,
        cpus=cpus, memory_mb=memory_mb, pids_limit=pids_limit, env=env, workdir=workdir,
        labels=labels, volumes=vols, network=network, idle_timeout=idle_timeout,
        max_duration=max_duration, startup_timeout=startup_timeout, demand_start=demand_start,
        detached=detached,
    )  # fmt: skip
    return _wrap(res, blocking, _sandbox)


def get(name: str, *, blocking: bool = False) -> Any:
    return _wrap(_call(None, "get", None, blocking, name=name), blocking, _sandbox)


def get_by_id(id: str, *, blocking: bool = False) -> Any:
    return _wrap(_call(None, "get_by_id", None, blocking, id=id), blocking, _sandbox)


def list(
    statuses: Optional[Sequence[str]] = None,
    labels: Optional[Dict[str, str]] = None,
    *,
    blocking: bool = False,
) -> Any:
    return _call(None, "list", None, blocking, statuses=statuses, labels=labels)


def remove(name: str, *, blocking: bool = False) -> Any:
    return _call(None, "remove", None, blocking, name=name)


class NativeSandbox:
    """A sandbox of the core: live, or a metadata handle (one type)."""

    __slots__ = ("_o",)

    def __init__(self, obj: _core.NativeObject) -> None:
        self._o = obj

    def _c(self, op: str, data: Optional[bytes] = None, blocking: bool = False, **args: Any) -> Any:
        return _call(self._o, op, data, blocking, **args)

    @property
    def id(self) -> str:
        return str(self._o.id)

    @property
    def name(self) -> str:
        return str(self._o.name)

    @property
    def generation(self) -> int:
        return self._o.generation

    def handle(self) -> NativeSandbox:
        # Immediate: a live sandbox knows its handle (no I/O but in a fork
        # child, which re-binds by id).
        return NativeSandbox(self._c("handle", blocking=True))

    def info(self, *, blocking: bool = False) -> Any:
        return self._c("info", blocking=blocking)

    def status(self, *, blocking: bool = False) -> Any:
        return self._c("status", blocking=blocking)

    def ping(self, *, blocking: bool = False) -> Any:
        return self._c("ping", blocking=blocking)

    def touch(self, *, blocking: bool = False) -> Any:
        return self._c("touch", blocking=blocking)

    def start(self, *, blocking: bool = False) -> Any:
        return _wrap(self._c("start", blocking=blocking), blocking, _sandbox)

    def connect(self, *, blocking: bool = False) -> Any:
        return _wrap(self._c("connect", blocking=blocking), blocking, _sandbox)

    def connect_or_start(self, *, blocking: bool = False) -> Any:
        return _wrap(self._c("connect_or_start", blocking=blocking), blocking, _sandbox)

    def exec(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[bytes] = None,
        timeout: Optional[float] = None,
        *,
        blocking: bool = False,
    ) -> Any:
        return self._c(
            "exec", stdin, blocking, argv=argv, env=env, cwd=cwd, timeout=timeout
        )

    def spawn(
        self,
        argv: Sequence[str],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[bytes] = None,
        keep_stdin: bool = False,
        timeout: Optional[float] = None,
        *,
        blocking: bool = False,
    ) -> Any:
        res = self._c(
            "spawn", stdin, blocking, argv=argv, env=env, cwd=cwd, keep_stdin=keep_stdin,
            timeout=timeout,
        )  # fmt: skip
        return _wrap(res, blocking, _process)

    def fs_read(self, path: str, *, blocking: bool = False) -> Any:
        return self._c("fs_read", blocking=blocking, path=path)

    def fs_write(
        self, path: str, data: bytes, mode: Optional[int] = None, *, blocking: bool = False
    ) -> Any:
        return self._c("fs_write", data, blocking, path=path, mode=mode)

    def fs_list(self, path: str, *, blocking: bool = False) -> Any:
        return self._c("fs_list", blocking=blocking, path=path)

    def fs_stat(self, path: str, *, blocking: bool = False) -> Any:
        return self._c("fs_stat", blocking=blocking, path=path)

    def fs_exists(self, path: str, *, blocking: bool = False) -> Any:
        return self._c("fs_exists", blocking=blocking, path=path)

    def fs_mkdir(self, path: str, parents: bool = False, *, blocking: bool = False) -> Any:
        return self._c("fs_mkdir", blocking=blocking, path=path, parents=parents)

    def fs_remove(self, path: str, recursive: bool = False, *, blocking: bool = False) -> Any:
        return self._c("fs_remove", blocking=blocking, path=path, recursive=recursive)

    def fs_rename(self, src: str, dst: str, *, blocking: bool = False) -> Any:
        names: Dict[str, Any] = {"from": src, "to": dst}
        return self._c("fs_rename", blocking=blocking, **names)

    def stop(self, grace: Optional[float] = None, *, blocking: bool = False) -> Any:
        return self._c("stop", blocking=blocking, grace=grace)

    def kill(self, *, blocking: bool = False) -> Any:
        return self._c("kill", blocking=blocking)

    def request_drain(self, *, blocking: bool = False) -> Any:
        return self._c("request_drain", blocking=blocking)

    def wait_until_stopped(self, *, blocking: bool = False) -> Any:
        return self._c("wait_until_stopped", blocking=blocking)

    def wait_for_status(
        self, statuses: Sequence[str], timeout: Optional[float] = None, *, blocking: bool = False
    ) -> Any:
        return self._c(
            "wait_for_status", blocking=blocking, statuses=statuses, call_timeout=timeout
        )

    def restart(self, *, blocking: bool = False) -> Any:
        res = self._c("restart", blocking=blocking)
        if self._o.live:
            return res
        return _wrap(res, blocking, _sandbox)

    def pause(self, *, blocking: bool = False) -> Any:
        return self._c("pause", blocking=blocking)

    def resume(self, *, blocking: bool = False) -> Any:
        return self._c("resume", blocking=blocking)

    def modify(self, changes: Dict[str, Any], *, blocking: bool = False) -> Any:
        # Passed as given: a present None clears a limit or timeout.
        body = dict(changes)
        body["op"] = "modify"
        return _core.call(self._o, json.dumps(body), None, blocking=blocking)

    def metrics(self, *, blocking: bool = False) -> Any:
        return self._c("metrics", blocking=blocking)

    def logs(
        self, tail: Optional[int] = None, source: Optional[str] = None, *, blocking: bool = False
    ) -> Any:
        return self._c("logs", blocking=blocking, tail=tail, source=source)

    def follow_logs(
        self, tail: Optional[int] = None, source: Optional[str] = None, *, blocking: bool = False
    ) -> Any:
        res = self._c("follow_logs", blocking=blocking, tail=tail, source=source)
        return _wrap(res, blocking, _logs)

    def detach(self, *, blocking: bool = False) -> Any:
        return self._c("detach", blocking=blocking)

    def remove(self, *, blocking: bool = False) -> Any:
        return self._c("remove", blocking=blocking)

    def destroy(self, *, blocking: bool = False) -> Any:
        return self._c("destroy", blocking=blocking)

    def __repr__(self) -> str:
        return f"NativeSandbox(id={self.id!r}, name={self.name!r})"


#: A metadata handle is the same object type as a live sandbox.
NativeHandle = NativeSandbox


class NativeProcess:
    """A process with streamed output: a pull cursor of events."""

    __slots__ = ("_o",)

    def __init__(self, obj: _core.NativeObject) -> None:
        self._o = obj

    def next_event(self, *, blocking: bool = False) -> Any:
        return _call(self._o, "next", None, blocking)

    def write(self, data: bytes, *, blocking: bool = False) -> Any:
        return _call(self._o, "write", data, blocking)

    def close_stdin(self, *, blocking: bool = False) -> Any:
        return _call(self._o, "close_stdin", None, blocking)

    def signal(self, signal: int, *, blocking: bool = False) -> Any:
        return _call(self._o, "signal", None, blocking, signal=signal)


class NativeLogStream:
    """A followed log: a pull cursor of lines."""

    __slots__ = ("_o",)

    def __init__(self, obj: _core.NativeObject) -> None:
        self._o = obj

    def next(self, timeout: Optional[float] = None, *, blocking: bool = False) -> Any:
        return _call(self._o, "next", None, blocking, call_timeout=timeout)


__all__: List[str] = []

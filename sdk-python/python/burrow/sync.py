"""The synchronous facade: the async API with blocking methods.

Each call runs on the binding's runtime with the GIL released (other Python
threads keep running; Ctrl-C cancels the call). Not for use inside a running
event loop: there every call raises ``RuntimeError`` (use the async API).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from . import _common as c
from . import _native
from ._common import configure
from .errors import BurrowError, BurrowTimeoutError, SandboxNotFoundError
from .types import (
    DirEntry,
    Driver,
    ExecResult,
    ExitStatus,
    FileStat,
    LogLine,
    LogSource,
    Metrics,
    ModifyPlan,
    SandboxInfo,
    Status,
)

__all__ = ["Sandbox", "SandboxHandle", "Fs", "Process", "configure"]


def _no_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "burrow.sync blocks: it cannot be used inside a running event loop "
        "(use the async API, `burrow.Sandbox`)"
    )


def _follow(stream: _native.NativeLogStream, stopped: Callable[[], bool]) -> Iterator[LogLine]:
    while True:
        try:
            d = stream.next(c.FOLLOW_CHECK, blocking=True)
        except BurrowTimeoutError:
            if not stopped():
                continue
            while True:
                try:
                    d = stream.next(c.FOLLOW_DRAIN, blocking=True)
                except BurrowTimeoutError:
                    return
                if d is None:
                    return
                yield c.log_line(d)
        if d is None:
            return
        yield c.log_line(d)


class Process:
    """A process with streamed output; ``for kind, data in proc`` yields
    ``("stdout" | "stderr", bytes)`` until it exits."""

    def __init__(self, native: _native.NativeProcess) -> None:
        self._n = native
        self._exit: Optional[ExitStatus] = None

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        return self._exit

    def __iter__(self) -> Iterator[Tuple[str, bytes]]:
        return self

    def __next__(self) -> Tuple[str, bytes]:
        _no_loop()
        while True:
            ev = self._n.next_event(blocking=True)
            if ev is None:
                raise StopIteration
            kind, payload = ev
            if kind == "exit":
                self._exit = c.exit_status(payload)
                continue
            return (str(kind), bytes(payload))

    def write(self, data: c.Data) -> None:
        _no_loop()
        self._n.write(c.to_bytes(data), blocking=True)

    def close_stdin(self) -> None:
        _no_loop()
        self._n.close_stdin(blocking=True)

    def signal(self, signal: int) -> None:
        _no_loop()
        self._n.signal(int(signal), blocking=True)

    def wait(self) -> ExitStatus:
        _no_loop()
        while self._exit is None:
            ev = self._n.next_event(blocking=True)
            if ev is None:
                break
            if ev[0] == "exit":
                self._exit = c.exit_status(ev[1])
        if self._exit is None:
            raise RuntimeError("the process ended without an exit status")
        return self._exit


class Fs:
    """Blocking file operations in a running sandbox (``sb.fs``)."""

    def __init__(self, native: _native.NativeSandbox) -> None:
        self._n = native

    def read(self, path: str) -> bytes:
        _no_loop()
        return bytes(self._n.fs_read(path, blocking=True))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: c.Data, *, mode: Optional[int] = None) -> None:
        _no_loop()
        self._n.fs_write(path, c.to_bytes(data), mode, blocking=True)

    def list(self, path: str) -> List[DirEntry]:
        _no_loop()
        return c.dir_entries(self._n.fs_list(path, blocking=True))

    def stat(self, path: str) -> FileStat:
        _no_loop()
        return c.file_stat(self._n.fs_stat(path, blocking=True))

    def exists(self, path: str) -> bool:
        _no_loop()
        return bool(self._n.fs_exists(path, blocking=True))

    def mkdir(self, path: str, *, parents: bool = False) -> None:
        _no_loop()
        self._n.fs_mkdir(path, parents, blocking=True)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        _no_loop()
        self._n.fs_remove(path, recursive, blocking=True)

    def rename(self, src: str, dst: str) -> None:
        _no_loop()
        self._n.fs_rename(src, dst, blocking=True)


class Sandbox:
    """A running sandbox bound to one id (blocking methods)."""

    def __init__(self, native: _native.NativeSandbox, *, destroy_on_exit: bool = False) -> None:
        self._n = native
        self._destroy_on_exit = destroy_on_exit
        self.fs = Fs(native)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: bool = False,
        idle_timeout: Optional[float] = None,
        max_duration: Optional[float] = None,
        startup_timeout: Optional[float] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
        replace: bool = False,
        destroy: bool = False,
    ) -> Sandbox:
        _no_loop()
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory_mb=memory_mb, pids_limit=pids_limit,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network,
            idle_timeout=idle_timeout, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        native = _native.build(name, "replace" if replace else "create", blocking=True, **kw)
        return cls(native, destroy_on_exit=destroy)

    @classmethod
    def connect_or_create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: bool = False,
        idle_timeout: Optional[float] = None,
        max_duration: Optional[float] = None,
        startup_timeout: Optional[float] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
        destroy: bool = False,
    ) -> Sandbox:
        _no_loop()
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory_mb=memory_mb, pids_limit=pids_limit,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network,
            idle_timeout=idle_timeout, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        native = _native.build(name, "connect_or_create", blocking=True, **kw)
        return cls(native, destroy_on_exit=destroy)

    @classmethod
    def define(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: bool = False,
        idle_timeout: Optional[float] = None,
        max_duration: Optional[float] = None,
        startup_timeout: Optional[float] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
    ) -> SandboxHandle:
        _no_loop()
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory_mb=memory_mb, pids_limit=pids_limit,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network,
            idle_timeout=idle_timeout, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        return SandboxHandle(_native.build(name, "define", blocking=True, **kw))

    @staticmethod
    def get(name: str) -> SandboxHandle:
        _no_loop()
        return SandboxHandle(_native.get(name, blocking=True))

    @staticmethod
    def get_by_id(id: str) -> SandboxHandle:
        _no_loop()
        return SandboxHandle(_native.get_by_id(id, blocking=True))

    @staticmethod
    def list(
        status: Optional[c.Statuses] = None, labels: Optional[Mapping[str, str]] = None
    ) -> List[SandboxInfo]:
        _no_loop()
        lbl = None if labels is None else dict(labels)
        return c.infos(_native.list(c.status_list(status), lbl, blocking=True))

    @staticmethod
    def remove(name: str) -> None:
        _no_loop()
        _native.remove(name, blocking=True)

    @property
    def id(self) -> str:
        return self._n.id

    @property
    def name(self) -> str:
        return self._n.name

    @property
    def generation(self) -> int:
        return self._n.generation

    def handle(self) -> SandboxHandle:
        return SandboxHandle(self._n.handle())

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r})"

    def info(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.info(blocking=True))

    def status(self) -> Status:
        _no_loop()
        return Status(self._n.status(blocking=True))

    def ping(self) -> float:
        _no_loop()
        return float(self._n.ping(blocking=True))

    def touch(self) -> None:
        _no_loop()
        self._n.touch(blocking=True)

    def exec(
        self,
        argv: c.Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[c.Data] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        _no_loop()
        t = self._n.exec(
            c.argv_list(argv),
            None if env is None else dict(env),
            cwd,
            None if stdin is None else c.to_bytes(stdin),
            None if timeout is None else float(timeout),
            blocking=True,
        )
        return c.exec_result(t)

    def spawn(
        self,
        argv: c.Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[bool, c.Data] = False,
        timeout: Optional[float] = None,
    ) -> Process:
        _no_loop()
        data: Optional[bytes] = None
        keep = False
        if stdin is True:
            keep = True
        elif stdin is not False:
            data = c.to_bytes(stdin)
        native = self._n.spawn(
            c.argv_list(argv),
            None if env is None else dict(env),
            cwd,
            data,
            keep,
            None if timeout is None else float(timeout),
            blocking=True,
        )
        return Process(native)

    def stop(self, *, grace: Optional[float] = None) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.stop(None if grace is None else float(grace), blocking=True))

    def kill(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.kill(blocking=True))

    def request_drain(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.request_drain(blocking=True))

    def wait_until_stopped(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.wait_until_stopped(blocking=True))

    def wait_for_status(
        self, statuses: c.Statuses, *, timeout: Optional[float] = None
    ) -> SandboxInfo:
        _no_loop()
        return c.info(
            self._n.wait_for_status(
                c.status_list(statuses) or [],
                None if timeout is None else float(timeout),
                blocking=True,
            )
        )

    def restart(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.restart(blocking=True))

    def pause(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.pause(blocking=True))

    def resume(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.resume(blocking=True))

    def modify(
        self,
        *,
        cpus: Optional[float] = c.UNSET,
        memory_mb: Optional[int] = c.UNSET,
        env_set: Optional[Mapping[str, str]] = None,
        env_unset: Optional[Sequence[str]] = None,
        labels_set: Optional[Mapping[str, str]] = None,
        labels_unset: Optional[Sequence[str]] = None,
        idle_timeout: Optional[float] = c.UNSET,
        max_duration: Optional[float] = c.UNSET,
    ) -> ModifyPlan:
        _no_loop()
        changes = c.modify_changes(
            cpus=cpus, memory_mb=memory_mb, env_set=env_set, env_unset=env_unset,
            labels_set=labels_set, labels_unset=labels_unset, idle_timeout=idle_timeout,
            max_duration=max_duration,
        )  # fmt: skip
        return c.plan(self._n.modify(changes, blocking=True))

    def metrics(self) -> Metrics:
        _no_loop()
        return c.metrics(self._n.metrics(blocking=True))

    def logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> List[LogLine]:
        _no_loop()
        return c.log_lines(self._n.logs(tail, c.source_name(source), blocking=True))

    def follow_logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> Iterator[LogLine]:
        """Log lines as they are written, until this run stops."""
        _no_loop()
        stream = self._n.follow_logs(tail, c.source_name(source), blocking=True)
        generation = self.generation

        def stopped() -> bool:
            try:
                i = self.info()
            except BurrowError:
                return True
            return i.generation != generation or i.status not in c.RUNTIME_STATUSES

        return _follow(stream, stopped)

    def detach(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.detach(blocking=True))

    def destroy(self) -> None:
        _no_loop()
        self._n.destroy(blocking=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            if self._destroy_on_exit:
                self.destroy()
            else:
                self.stop()
        except SandboxNotFoundError:
            pass


class SandboxHandle:
    """A metadata handle bound to one sandbox id (blocking methods)."""

    def __init__(self, native: _native.NativeHandle) -> None:
        self._n = native

    @property
    def id(self) -> str:
        return self._n.id

    @property
    def name(self) -> str:
        return self._n.name

    def __repr__(self) -> str:
        return f"SandboxHandle(id={self.id!r}, name={self.name!r})"

    def info(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.info(blocking=True))

    def status(self) -> Status:
        _no_loop()
        return Status(self._n.status(blocking=True))

    def config(self) -> Dict[str, Any]:
        return self.info().config

    def start(self) -> Sandbox:
        _no_loop()
        return Sandbox(self._n.start(blocking=True))

    def connect_or_start(self) -> Sandbox:
        _no_loop()
        return Sandbox(self._n.connect_or_start(blocking=True))

    def connect(self) -> Sandbox:
        _no_loop()
        return Sandbox(self._n.connect(blocking=True))

    def stop(self, *, grace: Optional[float] = None) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.stop(None if grace is None else float(grace), blocking=True))

    def kill(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.kill(blocking=True))

    def request_drain(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.request_drain(blocking=True))

    def pause(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.pause(blocking=True))

    def resume(self) -> SandboxInfo:
        _no_loop()
        return c.info(self._n.resume(blocking=True))

    def touch(self) -> None:
        _no_loop()
        self._n.touch(blocking=True)

    def restart(self) -> Sandbox:
        _no_loop()
        return Sandbox(self._n.restart(blocking=True))

    def wait_for_status(
        self, statuses: c.Statuses, *, timeout: Optional[float] = None
    ) -> SandboxInfo:
        _no_loop()
        return c.info(
            self._n.wait_for_status(
                c.status_list(statuses) or [],
                None if timeout is None else float(timeout),
                blocking=True,
            )
        )

    def wait_until_stopped(self) -> SandboxInfo:
        _no_loop()
        return c.info(
            self._n.wait_for_status(["created", "stopped", "crashed"], None, blocking=True)
        )

    def modify(
        self,
        *,
        cpus: Optional[float] = c.UNSET,
        memory_mb: Optional[int] = c.UNSET,
        env_set: Optional[Mapping[str, str]] = None,
        env_unset: Optional[Sequence[str]] = None,
        labels_set: Optional[Mapping[str, str]] = None,
        labels_unset: Optional[Sequence[str]] = None,
        idle_timeout: Optional[float] = c.UNSET,
        max_duration: Optional[float] = c.UNSET,
    ) -> ModifyPlan:
        _no_loop()
        changes = c.modify_changes(
            cpus=cpus, memory_mb=memory_mb, env_set=env_set, env_unset=env_unset,
            labels_set=labels_set, labels_unset=labels_unset, idle_timeout=idle_timeout,
            max_duration=max_duration,
        )  # fmt: skip
        return c.plan(self._n.modify(changes, blocking=True))

    def metrics(self) -> Metrics:
        _no_loop()
        return c.metrics(self._n.metrics(blocking=True))

    def logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> List[LogLine]:
        _no_loop()
        return c.log_lines(self._n.logs(tail, c.source_name(source), blocking=True))

    def follow_logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> Iterator[LogLine]:
        _no_loop()
        stream = self._n.follow_logs(tail, c.source_name(source), blocking=True)

        def stopped() -> bool:
            try:
                return self.status() not in c.RUNTIME_STATUSES
            except BurrowError:
                return True

        return _follow(stream, stopped)

    def remove(self) -> None:
        _no_loop()
        self._n.remove(blocking=True)

    def destroy(self) -> None:
        _no_loop()
        self._n.destroy(blocking=True)

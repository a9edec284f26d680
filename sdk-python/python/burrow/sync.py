"""The synchronous facade: the async API with blocking methods.

GENERATED from ``burrow/_api.py`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date).

Each call runs on the binding's runtime with the GIL released (other Python
threads keep running; Ctrl-C cancels the call). Not for use inside a running
event loop: there every call raises ``RuntimeError`` (use the async API).
"""


from __future__ import annotations

from types import TracebackType
from typing import (
    Any,
    Iterator,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Type,
    Union,
)

from . import _common as c
from . import _native
from ._common import configure
from ._sync_files import FileReader, FileWriter, Fs
from ._sync_process import Process
from .errors import SandboxNotFoundError
from .types import (
    PoolInfo,
    SnapshotInfo,
    SnapshotKind,
    Capabilities,
    NetworkPolicy,
    Secret,
    Driver,
    ExecResult,
    IdleAction,
    LogLine,
    LogSource,
    Metrics,
    ModifyPlan,
    Ping,
    SandboxInfo,
    Status,
)

__all__ = ["Sandbox", "SandboxHandle", "SandboxPage", "Fs", "FileReader", "FileWriter", "Process", "configure"]


def _follow(stream: _native.NativeLogStream) -> Iterator[LogLine]:
    """Lines of a followed log; the core ends the stream once the followed
    run has ended and its last lines were read."""
    while True:
        d = stream.next()
        if d is None:
            return
        yield c.log_line(d)


class Sandbox:
    """A running sandbox, bound to one id (every operation acts on exactly
    that id; if its name now belongs to another sandbox, operations fail
    with :class:`burrow.errors.SandboxReplacedError`)."""

    def __init__(self, native: _native.NativeSandbox, *, destroy_on_exit: bool = False) -> None:
        self._n = native
        self._destroy_on_exit = destroy_on_exit
        self._status = Status(native.status)
        self.fs = Fs(native)

    def _seen(self, d: Any) -> SandboxInfo:
        """A record returned by a call on this object (its status becomes
        the snapshot)."""
        info = c.info(d)
        self._status = info.status
        return info

    # -- creating and converging ------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory: Optional[int] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        disk_mb: Optional[int] = None,
        best_effort_limits: bool = False,
        default_limits: bool = True,
        seccomp_allow: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = False,
        ports: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Secret]] = None,
        idle_timeout: Optional[c.Duration] = None,
        idle_action: Optional[Union[str, IdleAction]] = None,
        max_duration: Optional[c.Duration] = None,
        startup_timeout: Optional[c.Duration] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
        replace: bool = False,
        destroy: bool = False,
    ) -> Sandbox:
        """Creates and starts a sandbox. Strict: a taken name is
        :class:`~burrow.errors.SandboxAlreadyExistsError` (``replace=True``
        destroys the holder first). ``destroy=True``: ``with`` destroys
        it on exit instead of stopping it. ``memory`` is MiB (``memory_mb``
        is its alias); durations are seconds, a ``timedelta`` or duration
        text (``"5m"``). A limit (``cpus``, ``memory``, ``pids_limit``,
        ``disk_mb``) the host cannot enforce for this user (an unprivileged
        user without a delegated cgroup, whose containers hold no disk
        limit) is :class:`~burrow.errors.InvalidConfigError` unless
        ``best_effort_limits=True``, which runs without it. ``disk_mb``
        limits the writable layer (MiB, 32 to 16 TiB; past it the guest
        gets ``ENOSPC``). The limits left out get the backend's defaults
        unless ``default_limits=False`` (then they stay unlimited).
        ``seccomp_allow`` names syscalls (x86-64 names, ``"io_uring_setup"``)
        the sandbox's seccomp filter allows beyond burrow's profile (a bad
        name is :class:`~burrow.errors.InvalidConfigError`)."""
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory=memory, memory_mb=memory_mb,
            pids_limit=pids_limit, disk_mb=disk_mb, best_effort_limits=best_effort_limits,
            default_limits=default_limits, seccomp_allow=seccomp_allow,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network, ports=ports,
            secrets=secrets,
            idle_timeout=idle_timeout, idle_action=idle_action, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        native = _native.SYNC.build(name, "replace" if replace else "create", **kw)
        return cls(native, destroy_on_exit=destroy)

    @classmethod
    def connect_or_create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory: Optional[int] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        disk_mb: Optional[int] = None,
        best_effort_limits: bool = False,
        default_limits: bool = True,
        seccomp_allow: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = False,
        ports: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Secret]] = None,
        idle_timeout: Optional[c.Duration] = None,
        idle_action: Optional[Union[str, IdleAction]] = None,
        max_duration: Optional[c.Duration] = None,
        startup_timeout: Optional[c.Duration] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
        destroy: bool = False,
    ) -> Sandbox:
        """Converges on the sandbox ``name``: connects to it if it runs,
        starts it if it is stopped, creates it if it is missing. Options
        apply only if this call creates it."""
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory=memory, memory_mb=memory_mb,
            pids_limit=pids_limit, disk_mb=disk_mb, best_effort_limits=best_effort_limits,
            default_limits=default_limits, seccomp_allow=seccomp_allow,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network, ports=ports,
            secrets=secrets,
            idle_timeout=idle_timeout, idle_action=idle_action, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        native = _native.SYNC.build(name, "connect_or_create", **kw)
        return cls(native, destroy_on_exit=destroy)

    @classmethod
    def define(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory: Optional[int] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        disk_mb: Optional[int] = None,
        best_effort_limits: bool = False,
        default_limits: bool = True,
        seccomp_allow: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = False,
        ports: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Secret]] = None,
        idle_timeout: Optional[c.Duration] = None,
        idle_action: Optional[Union[str, IdleAction]] = None,
        max_duration: Optional[c.Duration] = None,
        startup_timeout: Optional[c.Duration] = None,
        demand_start: Optional[bool] = None,
        detached: bool = False,
    ) -> SandboxHandle:
        """Persists the sandbox without starting it (status created)."""
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory=memory, memory_mb=memory_mb,
            pids_limit=pids_limit, disk_mb=disk_mb, best_effort_limits=best_effort_limits,
            default_limits=default_limits, seccomp_allow=seccomp_allow,
            env=env, workdir=workdir, labels=labels, volumes=volumes, network=network, ports=ports,
            secrets=secrets,
            idle_timeout=idle_timeout, idle_action=idle_action, max_duration=max_duration,
            startup_timeout=startup_timeout, demand_start=demand_start, detached=detached,
        )  # fmt: skip
        return SandboxHandle(_native.SYNC.build(name, "define", **kw))

    @classmethod
    def start(cls, name: str) -> Sandbox:
        """Starts the sandbox now named ``name`` (created, stopped or
        crashed; else :class:`~burrow.errors.InvalidStateError`): same id,
        next generation, its persisted configuration."""
        return cls(_native.SYNC.start(name))

    @staticmethod
    def get(name: str) -> SandboxHandle:
        """A handle bound to the sandbox currently named ``name``."""
        return SandboxHandle(_native.SYNC.get(name))

    @staticmethod
    def get_by_id(id: str) -> SandboxHandle:
        """A handle bound to exactly ``id``."""
        return SandboxHandle(_native.SYNC.get_by_id(id))

    @staticmethod
    def list(
        status: Optional[c.Statuses] = None, labels: Optional[Mapping[str, str]] = None
    ) -> SandboxPage:
        """The sandboxes with one of ``status`` (all if None) carrying all
        of ``labels``: ``.sandboxes`` is a handle of each (its ``status``
        the listed one), ``.infos`` the records as listed."""
        lbl = None if labels is None else dict(labels)
        infos = c.infos(_native.SYNC.list(c.status_list(status), lbl))
        handles = [
            SandboxHandle(_native.SYNC.bind(i.id, i.name, i.status.value), i.status)
            for i in infos
        ]
        return SandboxPage(handles, infos)

    @staticmethod
    def remove(name: str) -> None:
        """Removes the sandbox ``name`` (created, stopped or crashed only)."""
        _native.SYNC.remove(name)

    @staticmethod
    def capabilities() -> Capabilities:
        """What the backend can do beyond the lifecycle every backend has
        (``pause``, live ``modify``, ``metrics``, ...): an operation it
        lacks raises :class:`~burrow.errors.UnsupportedError`."""
        return Capabilities._from_core(_native.SYNC.capabilities())

    @staticmethod
    def snapshots() -> List[SnapshotInfo]:
        """The stored snapshots, by name."""
        return [SnapshotInfo._from_core(d) for d in _native.SYNC.list_snapshots()]

    @staticmethod
    def get_snapshot(name: str) -> SnapshotInfo:
        """One stored snapshot (:class:`~burrow.errors.SandboxNotFoundError`
        if there is none)."""
        return SnapshotInfo._from_core(_native.SYNC.get_snapshot(name))

    @staticmethod
    def remove_snapshot(name: str) -> None:
        """Removes a stored snapshot; while sandboxes created from it exist,
        :class:`~burrow.errors.SnapshotInUseError` (nothing removed). Its
        content goes at the next image prune."""
        _native.SYNC.remove_snapshot(name)

    @staticmethod
    def create_pool(
        name: str,
        size: int,
        *,
        image: Optional[str] = None,
        driver: Optional[Union[str, Driver]] = None,
        cpus: Optional[float] = None,
        memory: Optional[int] = None,
        memory_mb: Optional[int] = None,
        pids_limit: Optional[int] = None,
        disk_mb: Optional[int] = None,
        best_effort_limits: bool = False,
        default_limits: bool = True,
        seccomp_allow: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        volumes: Optional[Sequence[c.Volume]] = None,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = False,
        ports: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Secret]] = None,
        idle_timeout: Optional[c.Duration] = None,
        idle_action: Optional[Union[str, IdleAction]] = None,
        max_duration: Optional[c.Duration] = None,
        startup_timeout: Optional[c.Duration] = None,
        demand_start: Optional[bool] = None,
    ) -> PoolInfo:
        """Defines a warm pool of ``size`` sandboxes (0 to 64) of the
        configuration the options make (those of :meth:`create`), and
        returns once they run. A :meth:`create` or :meth:`connect_or_create`
        of that configuration (but for its labels, environment, timeouts,
        idle action and demand start) then claims one of them, running,
        under its own name, labels and environment; the pool refills in the
        background. A taken name raises
        :class:`~burrow.errors.SandboxAlreadyExistsError`, a size over 64
        :class:`~burrow.errors.InvalidArgumentError`, ``labels``, ``ports``
        or ``secrets`` (each sandbox's own)
        :class:`~burrow.errors.InvalidConfigError`; a bad definition
        changes nothing."""
        kw = c.build_kwargs(
            image=image, driver=driver, cpus=cpus, memory=memory, memory_mb=memory_mb,
            pids_limit=pids_limit, disk_mb=disk_mb, best_effort_limits=best_effort_limits,
            default_limits=default_limits, seccomp_allow=seccomp_allow, env=env,
            workdir=workdir, labels=labels, volumes=volumes, network=network, ports=ports,
            secrets=secrets, idle_timeout=idle_timeout, idle_action=idle_action,
            max_duration=max_duration, startup_timeout=startup_timeout,
            demand_start=demand_start, detached=True,
        )  # fmt: skip
        return PoolInfo._from_core(_native.SYNC.create_pool(name, size, kw))

    @staticmethod
    def get_pool(name: str) -> PoolInfo:
        """One pool, its sandboxes counted
        (:class:`~burrow.errors.SandboxNotFoundError` if there is none)."""
        return PoolInfo._from_core(_native.SYNC.get_pool(name))

    @staticmethod
    def list_pools() -> List[PoolInfo]:
        """Every pool, by name. Warm sandboxes are never listed by
        :meth:`list`."""
        return [PoolInfo._from_core(d) for d in _native.SYNC.list_pools()]

    @staticmethod
    def scale_pool(name: str, size: int) -> PoolInfo:
        """Sets how many warm sandboxes the pool keeps (0 to 64) and returns
        once it has started or removed sandboxes to match."""
        return PoolInfo._from_core(_native.SYNC.scale_pool(name, size))

    @staticmethod
    def remove_pool(name: str) -> None:
        """Removes the pool and its warm sandboxes; sandboxes claimed from
        it are ordinary sandboxes, and stay."""
        _native.SYNC.remove_pool(name)

    # -- identity ------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._n.id

    @property
    def name(self) -> str:
        return self._n.name

    @property
    def generation(self) -> int:
        """The runtime generation (run) this object is connected to."""
        return self._n.generation

    @property
    def status(self) -> Status:
        """The status this object last saw, read without a call: the one it
        was made with, updated by every call on it that returns a record
        (``info``, ``stop``, ``kill``, ``restart``, ``modify``, ...). A fresh
        read is ``(sb.info()).status``."""
        return self._status

    def handle(self) -> SandboxHandle:
        """The metadata handle of the same sandbox."""
        return SandboxHandle(self._n.handle(), self._status)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r}, status={self._status.value!r})"

    # -- status and activity -------------------------------------------------

    def info(self) -> SandboxInfo:
        """A fresh record (its status becomes :attr:`status`)."""
        return self._seen(self._n.info())

    def ping(self) -> Ping:
        """Round trip to the guest agent (``.latency``, seconds); a health
        check only, never activity."""
        return c.ping(self._n.ping())

    def touch(self) -> None:
        """Explicit keepalive (activity for the idle timeout)."""
        self._n.touch()

    # -- processes -----------------------------------------------------------

    def exec(
        self,
        argv: c.Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[c.Data] = None,
        timeout: Optional[c.Duration] = None,
        output_limit: Optional[int] = None,
    ) -> ExecResult:
        """Runs ``argv`` (a string runs through ``sh -c``) and collects its
        output. A non-zero exit is not an exception. With ``output_limit``
        (bytes), at most that many bytes of each of stdout and stderr are
        kept (the rest is read and dropped; the process runs to its end)
        and ``ExecResult.truncated`` says whether any was dropped."""
        t = self._n.exec(
            c.argv_list(argv),
            None if env is None else dict(env),
            cwd,
            None if stdin is None else c.to_bytes(stdin),
            c.seconds(timeout),
            output_limit,
        )
        return c.exec_result(t)

    def spawn(
        self,
        argv: c.Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[bool, c.Data] = False,
        timeout: Optional[c.Duration] = None,
    ) -> Process:
        """Starts ``argv`` with streamed output. ``stdin``: ``False`` (empty
        stdin), ``True`` (open: :meth:`Process.write`, then
        :meth:`Process.close_stdin`), or data written and then closed."""
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
            c.seconds(timeout),
        )
        return Process(native)

    # -- lifecycle -------------------------------------------------------------

    def stop(self, *, grace: Optional[c.Duration] = None) -> SandboxInfo:
        """Graceful stop (``grace`` seconds between SIGTERM and SIGKILL)."""
        return self._seen(self._n.stop(c.seconds(grace)))

    def kill(self) -> SandboxInfo:
        return self._seen(self._n.kill())

    def request_drain(self) -> SandboxInfo:
        return self._seen(self._n.request_drain())

    def wait_until_stopped(self) -> SandboxInfo:
        """Waits until the run this object is connected to has ended."""
        return self._seen(self._n.wait_until_stopped())

    def wait_for_status(
        self, statuses: c.Statuses, *, timeout: Optional[c.Duration] = None
    ) -> SandboxInfo:
        """Waits until the status is one of ``statuses``
        (:class:`~burrow.errors.BurrowTimeoutError` after ``timeout``)."""
        return self._seen(
            self._n.wait_for_status(c.status_list(statuses) or [], c.seconds(timeout))
        )

    def restart(self) -> SandboxInfo:
        """Stop then start: same id, next generation; this object follows."""
        return self._seen(self._n.restart())

    def pause(self) -> SandboxInfo:
        return self._seen(self._n.pause())

    def resume(self) -> SandboxInfo:
        return self._seen(self._n.resume())

    def modify(
        self,
        *,
        cpus: Optional[float] = c.UNSET,
        memory: Optional[int] = c.UNSET,
        memory_mb: Optional[int] = c.UNSET,
        env_set: Optional[Mapping[str, str]] = None,
        env_unset: Optional[Sequence[str]] = None,
        labels_set: Optional[Mapping[str, str]] = None,
        labels_unset: Optional[Sequence[str]] = None,
        idle_timeout: Optional[c.Duration] = c.UNSET,
        idle_action: Optional[Union[str, IdleAction]] = c.UNSET,
        max_duration: Optional[c.Duration] = c.UNSET,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = c.UNSET,
    ) -> ModifyPlan:
        """Changes the configuration (``sb.modify(cpus=4, memory=4096)``;
        ``memory`` is MiB, ``memory_mb`` its alias). A field left out is
        unchanged; ``None`` for cpus/memory/idle_timeout/max_duration clears
        it. ``idle_action`` is ``"stop"`` or ``"hibernate"`` (``None``
        leaves it unchanged, as leaving it out does). ``network`` (``False``,
        ``True`` or a :class:`NetworkPolicy`) applies to a running sandbox
        at once: connections the new setting forbids are closed."""
        changes = c.modify_changes(
            cpus=cpus, memory=memory, memory_mb=memory_mb, env_set=env_set, env_unset=env_unset,
            labels_set=labels_set, labels_unset=labels_unset, idle_timeout=idle_timeout,
            idle_action=idle_action, max_duration=max_duration, network=network,
        )  # fmt: skip
        plan = c.plan(self._n.modify(changes))
        self._status = plan.info.status
        return plan

    def snapshot(
        self, name: str, *, kind: Optional[Union[SnapshotKind, str]] = None
    ) -> SnapshotInfo:
        """Saves the sandbox under ``name``: its files (its writable layer
        over its image, usable as the image ``snapshot:NAME``), or with
        ``kind="full"`` a running vm sandbox whole. A running sandbox is
        frozen for the copy and goes on; processes are not copied into
        sandboxes made from a filesystem snapshot. A taken name raises
        :class:`~burrow.errors.SandboxAlreadyExistsError`."""
        k = None if kind is None else SnapshotKind(kind).value
        return SnapshotInfo._from_core(self._n.snapshot(name, k))

    def fork(
        self,
        count: Optional[int] = None,
        *,
        names: Optional[Sequence[str]] = None,
        detached: bool = False,
    ) -> List[Sandbox]:
        """Copies the running sandbox into new sandboxes, each started,
        and returns them in order: ``count`` copies (default 1, or one per
        name) named ``names`` (default ``<name>-fork-<n>``). A vm sandbox
        is copied whole (memory, processes and files; each copy has its own
        id, hostname, machine id and random state) and stops only for the
        save; a container is copied by its files (its processes are not
        copied: each copy runs its image's command afresh). All or nothing:
        a taken name raises :class:`~burrow.errors.SandboxAlreadyExistsError`
        and no copy is left; a sandbox that is not running raises
        :class:`~burrow.errors.InvalidStateError`."""
        handles = _fork(self._n, count, names, detached)
        return [h.connect() for h in handles]

    def metrics(self) -> Metrics:
        return c.metrics(self._n.metrics())

    def logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> List[LogLine]:
        """The captured logs (both sources unless ``source``)."""
        return c.log_lines(self._n.logs(tail, c.source_name(source)))

    def follow_logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> Iterator[LogLine]:
        """Log lines as they are written, until the run current when the
        follow begins ends (at once, after the lines already written, when
        none runs)."""
        stream = self._n.follow_logs(tail, c.source_name(source))
        for line in _follow(stream):
            yield line

    def detach(self) -> SandboxInfo:
        """Lets the sandbox survive this process from now on."""
        return self._seen(self._n.detach())

    def destroy(self) -> None:
        """Stops the sandbox if needed, then removes exactly this sandbox."""
        self._n.destroy()

    # -- with --------------------------------------------------------------

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
            pass  # already gone: nothing left to stop


class SandboxHandle:
    """A metadata handle bound to one sandbox id (the sandbox may be
    stopped)."""

    def __init__(self, native: _native.NativeHandle, status: Optional[Status] = None) -> None:
        self._n = native
        self._status = Status(native.status) if status is None else status

    def _seen(self, d: Any) -> SandboxInfo:
        """A record returned by a call on this handle (its status becomes
        the snapshot)."""
        info = c.info(d)
        self._status = info.status
        return info

    def _started(self, native: _native.NativeSandbox) -> Sandbox:
        """The live sandbox a call on this handle made (its status becomes
        the snapshot)."""
        sb = Sandbox(native)
        self._status = sb.status
        return sb

    @property
    def id(self) -> str:
        return self._n.id

    @property
    def name(self) -> str:
        return self._n.name

    @property
    def status(self) -> Status:
        """The status this handle last saw, read without a call: the one it
        was made with (by a lookup, a list, a define), updated by every call
        on it that returns a record or a started sandbox. A fresh read is
        ``(handle.info()).status``."""
        return self._status

    def __repr__(self) -> str:
        return f"SandboxHandle(id={self.id!r}, name={self.name!r}, status={self._status.value!r})"

    def info(self) -> SandboxInfo:
        """A fresh record (its status becomes :attr:`status`)."""
        return self._seen(self._n.info())

    def config(self) -> Dict[str, Any]:
        """The persisted configuration (the core's form, durations in
        seconds)."""
        return (self.info()).config

    def start(self) -> Sandbox:
        """Starts it (strict: created, stopped or crashed only)."""
        return self._started(self._n.start())

    def connect_or_start(self) -> Sandbox:
        """Converges on the running sandbox (many callers, one start)."""
        return self._started(self._n.connect_or_start())

    def connect(self) -> Sandbox:
        """A live object for the running sandbox (no start)."""
        return self._started(self._n.connect())

    def stop(self, *, grace: Optional[c.Duration] = None) -> SandboxInfo:
        return self._seen(self._n.stop(c.seconds(grace)))

    def kill(self) -> SandboxInfo:
        return self._seen(self._n.kill())

    def request_drain(self) -> SandboxInfo:
        return self._seen(self._n.request_drain())

    def pause(self) -> SandboxInfo:
        return self._seen(self._n.pause())

    def resume(self) -> SandboxInfo:
        return self._seen(self._n.resume())

    def touch(self) -> None:
        self._n.touch()

    def restart(self) -> Sandbox:
        return self._started(self._n.restart())

    def wait_for_status(
        self, statuses: c.Statuses, *, timeout: Optional[c.Duration] = None
    ) -> SandboxInfo:
        return self._seen(
            self._n.wait_for_status(c.status_list(statuses) or [], c.seconds(timeout))
        )

    def wait_until_stopped(self) -> SandboxInfo:
        """Waits until the sandbox has no runtime (created, stopped or
        crashed)."""
        return self._seen(
            self._n.wait_for_status(["created", "stopped", "crashed"], None)
        )

    def modify(
        self,
        *,
        cpus: Optional[float] = c.UNSET,
        memory: Optional[int] = c.UNSET,
        memory_mb: Optional[int] = c.UNSET,
        env_set: Optional[Mapping[str, str]] = None,
        env_unset: Optional[Sequence[str]] = None,
        labels_set: Optional[Mapping[str, str]] = None,
        labels_unset: Optional[Sequence[str]] = None,
        idle_timeout: Optional[c.Duration] = c.UNSET,
        idle_action: Optional[Union[str, IdleAction]] = c.UNSET,
        max_duration: Optional[c.Duration] = c.UNSET,
        network: Union[bool, str, NetworkPolicy, Mapping[str, Sequence[str]]] = c.UNSET,
    ) -> ModifyPlan:
        changes = c.modify_changes(
            cpus=cpus, memory=memory, memory_mb=memory_mb, env_set=env_set, env_unset=env_unset,
            labels_set=labels_set, labels_unset=labels_unset, idle_timeout=idle_timeout,
            idle_action=idle_action, max_duration=max_duration, network=network,
        )  # fmt: skip
        plan = c.plan(self._n.modify(changes))
        self._status = plan.info.status
        return plan

    def snapshot(
        self, name: str, *, kind: Optional[Union[SnapshotKind, str]] = None
    ) -> SnapshotInfo:
        """Saves the sandbox under ``name``: its files (its writable layer
        over its image, usable as the image ``snapshot:NAME``), or with
        ``kind="full"`` a running vm sandbox whole. A running sandbox is
        frozen for the copy and goes on; processes are not copied into
        sandboxes made from a filesystem snapshot. A taken name raises
        :class:`~burrow.errors.SandboxAlreadyExistsError`."""
        k = None if kind is None else SnapshotKind(kind).value
        return SnapshotInfo._from_core(self._n.snapshot(name, k))

    def fork(
        self,
        count: Optional[int] = None,
        *,
        names: Optional[Sequence[str]] = None,
        detached: bool = False,
    ) -> List[SandboxHandle]:
        """Copies the running sandbox into new sandboxes, each started,
        and returns their handles in order: ``count`` copies (default 1,
        or one per name) named ``names`` (default ``<name>-fork-<n>``). A vm sandbox
        is copied whole (memory, processes and files; each copy has its own
        id, hostname, machine id and random state) and stops only for the
        save; a container is copied by its files (its processes are not
        copied: each copy runs its image's command afresh). All or nothing:
        a taken name raises :class:`~burrow.errors.SandboxAlreadyExistsError`
        and no copy is left; a sandbox that is not running raises
        :class:`~burrow.errors.InvalidStateError`."""
        return _fork(self._n, count, names, detached)

    def metrics(self) -> Metrics:
        return c.metrics(self._n.metrics())

    def logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> List[LogLine]:
        return c.log_lines(self._n.logs(tail, c.source_name(source)))

    def follow_logs(
        self, *, tail: Optional[int] = None, source: Optional[Union[LogSource, str]] = None
    ) -> Iterator[LogLine]:
        """Log lines as they are written, until the run current when the
        follow begins ends (at once, after the lines already written, when
        none runs)."""
        stream = self._n.follow_logs(tail, c.source_name(source))
        for line in _follow(stream):
            yield line

    def remove(self) -> None:
        """Removes exactly this sandbox (created, stopped or crashed only)."""
        self._n.remove()

    def destroy(self) -> None:
        """Kills (if running) and removes exactly this sandbox."""
        self._n.destroy()


def _fork(
    native: _native.NativeSandbox,
    count: Optional[int],
    names: Optional[Sequence[str]],
    detached: bool,
) -> List[SandboxHandle]:
    if isinstance(names, str):
        raise TypeError("names is a sequence of names, not one string")
    infos = c.infos(native.fork(count, list(names or []), bool(detached)))
    return [
        SandboxHandle(_native.SYNC.bind(i.id, i.name, i.status.value), i.status) for i in infos
    ]


class SandboxPage:
    """The result of :meth:`Sandbox.list`: ``sandboxes``, a handle of each
    listed sandbox (``handle.status`` is the listed status), and ``infos``,
    the records as listed (same order)."""

    __slots__ = ("sandboxes", "infos")

    def __init__(self, sandboxes: List[SandboxHandle], infos: List[SandboxInfo]) -> None:
        self.sandboxes = sandboxes
        self.infos = infos

    def __repr__(self) -> str:
        return f"SandboxPage(sandboxes={self.sandboxes!r})"

"""burrow's exceptions: one class per core error code.

Every error raised by the core arrives as a subclass of :class:`BurrowError`
chosen by its stable code (never by message text). The native module builds
them through :func:`_from_core`, so the classes live here, in plain Python,
and pickle like any exception (they survive ``multiprocessing``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Dict, List, Optional, Type

from .types import Status

if TYPE_CHECKING:
    from .types import ExecResult

__all__ = [
    "BurrowError",
    "SandboxReplacedError",
    "SandboxAlreadyExistsError",
    "SandboxNotFoundError",
    "InvalidStateError",
    "InvalidNameError",
    "InvalidConfigError",
    "InvalidImageError",
    "InvalidArgumentError",
    "StartingError",
    "StartFailedError",
    "BurrowTimeoutError",
    "RuntimeUnavailableError",
    "GuestError",
    "ProtocolError",
    "StoreError",
    "BurrowIOError",
    "UnauthorizedError",
    "UnsupportedError",
    "PortUnavailableError",
    "SnapshotInUseError",
    "ForbiddenError",
    "QuotaExceededError",
    "RateLimitedError",
    "CommandFailedError",
    "CODES",
]


class BurrowError(Exception):
    """An error reported by the burrow core.

    ``code`` is the core's stable error code; ``sandbox_id``, ``name`` and
    ``status`` are set when the error is about one sandbox.
    """

    #: The code of this class (the instance's ``code`` may differ only for
    #: a code this package does not know yet).
    CODE = ""

    code: str
    message: str
    sandbox_id: Optional[str]
    name: Optional[str]
    status: Optional[Status]
    #: For ``sandbox_replaced``: the id that now owns the name.
    actual_id: Optional[str] = None
    #: The refused operation (``invalid_state``, ``forbidden``) or what
    #: timed out.
    operation: Optional[str] = None
    #: The field, argument, image or runtime concerned (for
    #: ``quota_exceeded``: the quota, ``"sandboxes"``, ``"millicpus"``, ...).
    subject: Optional[str] = None
    #: The reason, where the error has one.
    reason: Optional[str] = None
    #: For ``timeout``: the deadline in seconds.
    after: Optional[float] = None
    #: For ``timeout``: the deadline in milliseconds (the core's field; the
    #: same as :attr:`after`).
    after_ms: Optional[int] = None
    #: For ``snapshot_in_use``: the names of the sandboxes that use it.
    sandboxes: Optional[List[str]] = None
    #: For ``quota_exceeded``: the quota's limit, in its own unit.
    limit: Optional[int] = None
    #: For ``rate_limited``: how long to wait before trying again, in
    #: seconds.
    retry_after: Optional[float] = None
    #: For ``rate_limited``: the same wait in milliseconds (the core's
    #: field; the same as :attr:`retry_after`).
    retry_after_ms: Optional[int] = None

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        sandbox_id: Optional[str] = None,
        name: Optional[str] = None,
        status: Optional[Status] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else self.CODE
        self.sandbox_id = sandbox_id
        self.name = name
        self.status = status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class SandboxReplacedError(BurrowError):
    """The handle's id no longer owns its name; nothing was touched."""

    CODE = "sandbox_replaced"


class SandboxAlreadyExistsError(BurrowError):
    """The name is taken: by a sandbox (a strict create), a snapshot or a
    warm pool."""

    CODE = "already_exists"


class SandboxNotFoundError(BurrowError):
    """No sandbox (or other object) with this name or id."""

    CODE = "not_found"


class InvalidStateError(BurrowError):
    """The operation is not allowed in the sandbox's current status."""

    CODE = "invalid_state"


class InvalidNameError(BurrowError):
    """A sandbox name is not acceptable."""

    CODE = "invalid_name"


class InvalidConfigError(BurrowError):
    """A configuration value is not acceptable."""

    CODE = "invalid_config"


class InvalidImageError(BurrowError):
    """The image reference cannot be resolved or is unusable."""

    CODE = "invalid_image"


class InvalidArgumentError(BurrowError):
    """An argument of an operation is not acceptable (path, argv, ...)."""

    CODE = "invalid_argument"


class StartingError(BurrowError):
    """The sandbox is being started by another caller."""

    CODE = "starting"


class StartFailedError(BurrowError):
    """A start failed; the sandbox is crashed with reason start_failed."""

    CODE = "start_failed"


class BurrowTimeoutError(BurrowError, TimeoutError):
    """An operation did not finish in time (also a builtin TimeoutError)."""

    CODE = "timeout"


class RuntimeUnavailableError(BurrowError):
    """The isolation runtime is missing or unusable on this host."""

    CODE = "runtime_unavailable"


class GuestError(BurrowError):
    """The guest agent answered with an error; ``guest_code`` is its class
    (``"not_found"``, ``"permission_denied"``, ...)."""

    CODE = "guest"

    guest_code: Optional[str]

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        sandbox_id: Optional[str] = None,
        name: Optional[str] = None,
        status: Optional[Status] = None,
        guest_code: Optional[str] = None,
    ) -> None:
        super().__init__(message, code=code, sandbox_id=sandbox_id, name=name, status=status)
        self.guest_code = guest_code


class ProtocolError(BurrowError):
    """The peer broke the protocol."""

    CODE = "protocol"


class StoreError(BurrowError):
    """The state database failed or is unusable."""

    CODE = "store"


class BurrowIOError(BurrowError):
    """A host I/O operation failed."""

    CODE = "io"


class UnauthorizedError(BurrowError):
    """A ``burrow serve`` server refused the credentials (missing, unknown
    or revoked API token, ``BURROW_TOKEN``)."""

    CODE = "unauthorized"


class PortUnavailableError(BurrowError):
    """A published port's host address cannot be listened on (another
    process has it, or it is not this host's): the start did not happen.
    ``subject`` is the address (``127.0.0.1:8080/tcp``)."""

    CODE = "port_unavailable"


class SnapshotInUseError(BurrowError):
    """A snapshot cannot be removed: sandboxes created from it still
    exist (``sandboxes`` names them). Nothing was removed."""

    CODE = "snapshot_in_use"


class ForbiddenError(BurrowError):
    """A ``burrow serve`` server accepted the credentials, but their role
    or tenant may not do this (``operation`` is the refused operation).
    Nothing was changed."""

    CODE = "forbidden"


class QuotaExceededError(BurrowError):
    """The operation would exceed a quota of the caller's tenant:
    ``subject`` is the quota (``"sandboxes"``, ``"running"``, ``"millicpus"``,
    ``"memory_mb"``, ``"starts_per_minute"``, ...), ``limit`` its limit.
    Nothing was changed."""

    CODE = "quota_exceeded"


class RateLimitedError(BurrowError):
    """Too many requests from this token: the request was not served;
    ``retry_after`` (seconds) says when to send it again."""

    CODE = "rate_limited"


class UnsupportedError(BurrowError):
    """The backend does not support this operation at all (for instance a
    backend that cannot pause). Nothing was changed."""

    CODE = "unsupported"


#: Core error code -> class, exactly one class per code of
#: ``burrow._native.error_codes()``.
CODES: Dict[str, Type[BurrowError]] = {
    cls.CODE: cls
    for cls in (
        SandboxReplacedError,
        SandboxAlreadyExistsError,
        SandboxNotFoundError,
        InvalidStateError,
        InvalidNameError,
        InvalidConfigError,
        InvalidImageError,
        InvalidArgumentError,
        StartingError,
        StartFailedError,
        BurrowTimeoutError,
        RuntimeUnavailableError,
        GuestError,
        ProtocolError,
        StoreError,
        BurrowIOError,
        UnauthorizedError,
        UnsupportedError,
        PortUnavailableError,
        SnapshotInUseError,
        ForbiddenError,
        QuotaExceededError,
        RateLimitedError,
    )
}


class CommandFailedError(Exception):
    """Raised by :meth:`burrow.ExecResult.check` for a command that did not
    exit with code 0. Python-only: not a core error code, and not a
    :class:`BurrowError`."""

    result: "ExecResult"

    def __init__(self, result: "ExecResult") -> None:
        if result.timed_out:
            how = "timed out"
        elif result.signal is not None:
            how = f"was killed by signal {result.signal}"
        else:
            how = f"exited with code {result.exit_code}"
        super().__init__(f"the command {how}")
        self.result = result

    def __reduce__(self) -> "tuple[type[CommandFailedError], tuple[ExecResult]]":
        return (type(self), (self.result,))


def _from_body(text: str) -> BurrowError:
    """Builds the exception for a core error body (JSON, the ``ErrorBody``
    of the binding core and of ``burrow serve``; called by the native
    module)."""
    body = json.loads(text)
    guest = body.get("guest") or {}
    exc = _from_core(
        body.get("code", ""),
        body.get("message", ""),
        body.get("id"),
        body.get("name"),
        body.get("status"),
        guest.get("code"),
    )
    exc.actual_id = body.get("actual_id")
    exc.operation = body.get("operation")
    exc.subject = body.get("subject")
    exc.reason = body.get("reason")
    exc.after_ms = body.get("after_ms")
    exc.after = None if exc.after_ms is None else exc.after_ms / 1000.0
    exc.sandboxes = body.get("sandboxes")
    exc.limit = body.get("limit")
    exc.retry_after_ms = body.get("retry_after_ms")
    exc.retry_after = None if exc.retry_after_ms is None else exc.retry_after_ms / 1000.0
    return exc


def _from_core(
    code: str,
    message: str,
    sandbox_id: Optional[str],
    name: Optional[str],
    status: Optional[str],
    guest_code: Optional[str],
) -> BurrowError:
    """Builds the exception for a core error (called by the native module)."""
    cls = CODES.get(code, BurrowError)
    st = Status(status) if status is not None else None
    if cls is GuestError:
        return GuestError(
            message, code=code, sandbox_id=sandbox_id, name=name, status=st, guest_code=guest_code
        )
    return cls(message, code=code, sandbox_id=sandbox_id, name=name, status=st)

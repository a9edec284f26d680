"""What the conformance runner compares: step results and outcomes, the
language-neutral form of the package's values, the error class of every
code, and how fields are read from records."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Any

from conformance_cases import MATCH_OPERATORS, OPERATOR_MODIFIERS, VALUE_OPERATORS

# The error class of every core code (sdk-python/API.md, "Errors").
CODE_CLASSES = {
    "sandbox_replaced": "SandboxReplacedError",
    "already_exists": "SandboxAlreadyExistsError",
    "not_found": "SandboxNotFoundError",
    "invalid_state": "InvalidStateError",
    "invalid_name": "InvalidNameError",
    "invalid_config": "InvalidConfigError",
    "invalid_image": "InvalidImageError",
    "invalid_argument": "InvalidArgumentError",
    "starting": "StartingError",
    "start_failed": "StartFailedError",
    "timeout": "BurrowTimeoutError",
    "runtime_unavailable": "RuntimeUnavailableError",
    "guest": "GuestError",
    "protocol": "ProtocolError",
    "store": "StoreError",
    "io": "BurrowIOError",
    "unauthorized": "UnauthorizedError",
    "unsupported": "UnsupportedError",
    "port_unavailable": "PortUnavailableError",
    "snapshot_in_use": "SnapshotInUseError",
    "forbidden": "ForbiddenError",
    "quota_exceeded": "QuotaExceededError",
    "rate_limited": "RateLimitedError",
}

_MISSING = object()



def _norm(value: Any) -> Any:
    """Language-neutral form of an API value: enums as their strings, bytes as text."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(_norm(k)): _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _is_operator(obj: Any) -> bool:
    if not isinstance(obj, dict) or not obj:
        return False
    keys = set(obj)
    main = keys & (VALUE_OPERATORS | MATCH_OPERATORS)
    return len(main) == 1 and keys <= (VALUE_OPERATORS | MATCH_OPERATORS | OPERATOR_MODIFIERS)


@dataclass
class R:
    """A step's result with its kind (sandbox, handle, info, plan, exec, value, list, process,
    none)."""

    kind: str
    obj: Any = None


@dataclass
class Outcome:
    result: R | None
    error: BaseException | None

    @property
    def code(self) -> str | None:
        if self.error is None:
            return None
        code = getattr(self.error, "code", None)
        return code if isinstance(code, str) else None


@dataclass
class _Collected:
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None
    timed_out: bool
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _split_chunks(data: bytes, chunks: int) -> list[bytes]:
    """``data`` cut into ``chunks`` pieces of ``ceil(len / chunks)`` bytes
    (the last one shorter; none for empty data), as every interpreter cuts
    an ``fs_write_stream``'s data."""
    size = max(1, -(-len(data) // max(1, chunks)))
    return [data[i : i + size] for i in range(0, len(data), size)]


#: How long a follow_logs step waits for its stream to end (seconds, scaled)
#: unless the step says.
FOLLOW_TIMEOUT = 60.0


class StepTimeout(Exception):
    """A step of the runner's own that did not finish in time (code ``timeout``)."""

    code = "timeout"


def _describe_error(e: BaseException) -> str:
    code = getattr(e, "code", None)
    return f"{type(e).__name__}(code={code!r}): {e}"


def _snapshot_value(s: Any) -> dict:
    """A snapshot as the cases see it: the core's field names and values."""
    return {
        "name": s.name,
        "kind": s.kind.value,
        "image": s.image,
        "digest": s.digest,
        "size": s.size,
        "source_id": s.source_id,
        "source_name": s.source_name,
        "base_image": s.base_image,
        "driver": s.driver.value,
        "created_at_ms": int(s.created_at.timestamp() * 1000),
    }


def _pool_value(p: Any) -> dict:
    """A pool as the cases see it: the core's field names and values (its
    configuration as an info's, durations in seconds)."""
    return {
        "name": p.name,
        "config": _neutral_config(p.config),
        "size": p.size,
        "warm": p.warm,
        "starting": p.starting,
        "claims": p.claims,
        "misses": p.misses,
        "last_refill_ms": None if p.last_refill is None else round(p.last_refill * 1000),
        "created_at_ms": int(p.created_at.timestamp() * 1000),
    }


def _equal(expected: Any, actual: Any) -> bool:
    if actual is _MISSING:
        return False
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return abs(expected - actual) < 1e-9
    return _norm(expected) == _norm(actual)


def _info_field(info: Any, key: str) -> Any:
    if key in ("exit_reason", "detail"):
        run = getattr(info, "last_run", None)
        return None if run is None else getattr(run, key)
    if key == "config":
        return _neutral_config(info.config)
    return getattr(info, key, _MISSING)


def _neutral_config(config: dict) -> dict:
    """The configuration as cases read it: the core's JSON form, with
    ``idle_action``, ``default_limits`` and ``seccomp_allow`` always present
    (the JSON leaves out their defaults: ``"stop"``, ``True``, ``[]``)."""
    return {"idle_action": "stop", "default_limits": True, "seccomp_allow": [], **config}


def _class_ok(error: BaseException) -> bool:
    try:
        from burrow import errors

        cls = CODE_CLASSES.get(getattr(error, "code", None))
        return cls is not None and isinstance(error, getattr(errors, cls))
    except Exception:  # noqa: BLE001
        return False


async def _collect(proc: Any) -> _Collected:
    out, err = bytearray(), bytearray()
    async for stream, data in proc:
        if stream == "stdout":
            out += data
        else:
            err += data
    status = await proc.wait()
    return _Collected(
        stdout=bytes(out),
        stderr=bytes(err),
        exit_code=status.exit_code,
        signal=status.signal,
        timed_out=bool(status.timed_out),
    )

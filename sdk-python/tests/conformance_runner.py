"""Interpreter of the language-neutral lifecycle cases (tests/conformance/cases.json)
on top of the async ``burrow`` API.

The step vocabulary is documented in tests/conformance/README.md. This module
imports ``burrow`` lazily, so the structural checks of the cases file
(:func:`validate_cases`) work without the package.

``race`` steps with ``"processes": true`` run each caller in its own OS process
(multiprocessing, 'spawn' start method); the children import this module
again and use :class:`Runner` to run their step.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES_PATH = Path(
    os.environ.get("BURROW_CONFORMANCE_CASES")
    or REPO_ROOT / "tests" / "conformance" / "cases.json"
)

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
}

NAME_OPS = {
    "create", "connect_or_create", "define", "get", "get_by_id", "list", "get_snapshot",
    "list_snapshots", "remove_snapshot",
}
TARGET_OPS = {
    "handle", "info", "status", "config", "start", "connect_or_start", "connect",
    "restart", "stop", "kill", "request_drain", "pause", "resume", "touch", "modify",
    "wait_for_status", "wait_until_stopped", "destroy", "detach", "ping", "exec",
    "spawn", "fs_write", "fs_read", "fs_exists", "fs_mkdir", "fs_list", "fs_write_stream",
    "fs_read_stream", "follow_logs", "snapshot", "fork",
}
CONTROL_OPS = {"wait", "await", "sleep", "repeat", "race", "remove"}
KNOWN_OPS = NAME_OPS | TARGET_OPS | CONTROL_OPS
# Operations allowed as the `do` of a race run in several processes.
PROCESS_RACE_OPS = {"create", "connect_or_create", "connect_or_start"}

COMMON_KEYS = {"op", "as", "save", "expect", "tolerate", "within", "background"}
OP_KEYS = {
    "create": {"name", "options"},
    "connect_or_create": {"name", "options"},
    "define": {"name", "options"},
    "get": {"name"},
    "get_by_id": {"id"},
    "list": {"status", "labels"},
    "remove": {"name", "sandbox"},
    "stop": {"sandbox", "grace"},
    "modify": {"sandbox", "changes"},
    "wait_for_status": {"sandbox", "statuses", "timeout"},
    "exec": {"sandbox", "argv", "stdin", "env", "cwd", "timeout", "output_limit"},
    "spawn": {"sandbox", "argv", "env", "cwd", "timeout"},
    "fs_write": {"sandbox", "path", "data"},
    "fs_read": {"sandbox", "path"},
    "fs_write_stream": {"sandbox", "path", "data", "chunks"},
    "fs_read_stream": {"sandbox", "path"},
    "fs_exists": {"sandbox", "path"},
    "fs_mkdir": {"sandbox", "path", "parents"},
    "fs_list": {"sandbox", "path"},
    "follow_logs": {"sandbox", "source", "timeout"},
    "snapshot": {"sandbox", "snapshot", "kind"},
    "fork": {"sandbox", "count", "names"},
    "get_snapshot": {"snapshot"},
    "remove_snapshot": {"snapshot"},
    "list_snapshots": set(),
    "wait": {"process"},
    "await": {"job"},
    "sleep": {"seconds"},
    "repeat": {"seconds", "interval", "do"},
    "race": {"callers", "processes", "do"},
    "connect_or_start": {"sandbox", "name"},
}
CREATE_OPTIONS = {
    "image", "cpus", "memory_mb", "pids_limit", "best_effort_limits", "env", "workdir",
    "labels", "network", "ports", "secrets", "idle_timeout", "idle_action", "max_duration", "startup_timeout",
    "demand_start", "detached", "replace",
}
# The changes a `modify` step may name (durations in seconds; null clears
# cpus, memory_mb, idle_timeout and max_duration).
MODIFY_CHANGES = {
    "cpus", "memory_mb", "env_set", "env_unset", "labels_set", "labels_unset",
    "idle_timeout", "idle_action", "max_duration", "network",
}
RACE_EXPECT_KEYS = {"outcomes", "same_id", "starts", "each"}
# Tags naming a backend capability (burrow::Capabilities): a case carries the
# tag of every capability its steps use (see step_capability). The Rust kit
# reports such a case unsupported on a backend without that capability, and
# so does this runner's test (test_conformance.lacking).
CAPABILITY_TAGS = {
    "pause", "modify_live", "metrics", "logs", "idle_reclaim", "attached", "persistent_layer",
    "network_policy", "published_ports", "secrets", "snapshots", "full_snapshots",
    "fork",
}
VALUE_OPERATORS = {"var", "str_repeat"}
MATCH_OPERATORS = {"ne", "one_of", "present"}
OPERATOR_MODIFIERS = {"add", "times"}

_MISSING = object()


class ConformanceFailure(AssertionError):
    """A step's outcome did not meet its expectation."""


# ---------------------------------------------------------------------------
# The cases file


def load_document(path: Path | str = CASES_PATH) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_cases(path: Path | str = CASES_PATH) -> list[dict]:
    return load_document(path)["cases"]


def validate_cases(doc: dict, repo_root: Path = REPO_ROOT) -> list[str]:
    """Structural problems of a cases document (empty when it is well formed)."""
    problems: list[str] = []
    if doc.get("format") != "burrow-conformance/1":
        problems.append(f"unknown format {doc.get('format')!r}")
    seen: set[str] = set()
    for i, case in enumerate(doc.get("cases", [])):
        where = case.get("id", f"case #{i}")
        for key in ("id", "title", "reference", "steps"):
            if key not in case:
                problems.append(f"{where}: missing {key!r}")
        extra = set(case) - {"id", "title", "reference", "steps", "tags", "timeout", "notes"}
        if extra:
            problems.append(f"{where}: unknown keys {sorted(extra)}")
        if where in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(where)
        ref = case.get("reference", "")
        file_part, _, func = ref.partition("::")
        ref_path = repo_root / file_part
        if not func or not ref_path.is_file():
            problems.append(f"{where}: reference {ref!r} is not path::function")
        elif f"fn {func}(" not in ref_path.read_text(encoding="utf-8"):
            problems.append(f"{where}: {file_part} has no fn {func}")
        bound: set[str] = set()
        for j, step in enumerate(case.get("steps", [])):
            problems += _validate_step(step, f"{where} step {j + 1}", bound, top=True)
            problems += _check_capability_tags(step, f"{where} step {j + 1}", case.get("tags", []))
    return problems


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


def step_capability(step: dict) -> str | None:
    """The capability a step needs by itself (as the Rust kit's step_capability)."""
    op = step.get("op")
    options = step.get("options") or {}
    if op in ("pause", "resume"):
        return "pause"
    if op == "modify":
        return "modify_live"
    if op == "follow_logs":
        return "logs"
    if op == "detach":
        return "attached"
    if op == "snapshot" and step.get("kind") == "full":
        return "full_snapshots"
    if op in ("snapshot", "get_snapshot", "list_snapshots", "remove_snapshot"):
        return "snapshots"
    if op == "fork":
        return "fork"
    if op == "race" and step.get("processes"):
        do = step.get("do") or {}
        owns = do.get("op") in ("create", "connect_or_create") and not (
            do.get("options") or {}
        ).get("detached", False)
        return "attached" if owns else None
    if isinstance(options.get("network"), dict):
        return "network_policy"
    if "ports" in options:
        return "published_ports"
    if "secrets" in options:
        return "secrets"
    if {"idle_timeout", "idle_action", "demand_start"} & set(options):
        return "idle_reclaim"
    return None


def _check_capability_tags(step: dict, where: str, tags: list[str]) -> list[str]:
    problems: list[str] = []
    cap = step_capability(step)
    if cap is not None and "unsupported" not in (step.get("tolerate") or []) and cap not in tags:
        problems.append(f"{where}: {step.get('op')} needs the capability tag {cap!r} on its case")
    if isinstance(step.get("do"), dict):
        problems += _check_capability_tags(step["do"], f"{where} do", tags)
    return problems


def _validate_step(step: dict, where: str, bound: set[str], top: bool) -> list[str]:
    problems: list[str] = []
    op = step.get("op")
    if op not in KNOWN_OPS:
        return [f"{where}: unknown op {op!r}"]
    allowed = COMMON_KEYS | OP_KEYS.get(op, {"sandbox"})
    extra = set(step) - allowed
    if extra:
        problems.append(f"{where}: {op}: unknown keys {sorted(extra)}")
    if op in TARGET_OPS and op != "connect_or_start" and "sandbox" not in step:
        problems.append(f"{where}: {op} needs 'sandbox'")
    if op == "connect_or_start" and ("sandbox" in step) == ("name" in step):
        problems.append(f"{where}: connect_or_start needs exactly one of 'sandbox', 'name'")
    if "sandbox" in step and top and step["sandbox"] not in bound:
        problems.append(f"{where}: variable {step['sandbox']!r} is not bound by an earlier step")
    for k in ("options",):
        if k in step:
            bad = set(step[k]) - CREATE_OPTIONS
            if bad:
                problems.append(f"{where}: unknown options {sorted(bad)}")
    if "changes" in step:
        if not isinstance(step["changes"], dict):
            problems.append(f"{where}: changes must be an object")
        else:
            bad = set(step["changes"]) - MODIFY_CHANGES
            if bad:
                problems.append(f"{where}: unknown changes {sorted(bad)}")
    if "within" in step and "background" in step:
        problems.append(f"{where}: 'within' and 'background' do not combine")
    if op in ("repeat", "race"):
        if not isinstance(step.get("do"), dict):
            problems.append(f"{where}: {op} needs a 'do' step")
        else:
            problems += _validate_step(step["do"], f"{where} do", bound, top=False)
            if "do" in step and "as" in step["do"]:
                problems.append(f"{where}: the 'do' of a {op} cannot bind with 'as'")
    if op == "race":
        exp = step.get("expect", {})
        bad = set(exp) - RACE_EXPECT_KEYS
        if bad:
            problems.append(f"{where}: race: unknown expect keys {sorted(bad)}")
        if step.get("processes"):
            do = step.get("do", {})
            if do.get("op") not in PROCESS_RACE_OPS or "name" not in do:
                problems.append(
                    f"{where}: a race in processes runs only {sorted(PROCESS_RACE_OPS)} by name"
                )
    if "as" in step:
        bound.add(step["as"])
    if op == "await" and "as" in step:
        bound.add(step["as"])
    return problems


# ---------------------------------------------------------------------------
# Normalisation and matching


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


# ---------------------------------------------------------------------------
# The interpreter


class Runner:
    """Runs cases against the burrow home the process is configured for."""

    def __init__(
        self,
        *,
        image: str,
        configure: dict | None = None,
        time_scale: float | None = None,
        cleanup: bool = True,
    ) -> None:
        import burrow  # noqa: F401  (fails early when the package is missing)

        self.image = image
        self.configure = dict(configure or {})
        if time_scale is None:
            time_scale = float(os.environ.get("BURROW_CONFORMANCE_TIME_SCALE") or 1.0)
        self.scale = time_scale
        self.cleanup = cleanup
        self.values: dict[str, Any] = {}
        self.objects: dict[str, Any] = {}
        self.jobs: dict[str, asyncio.Task] = {}
        self.trace: list[str] = []

    # -- entry points -------------------------------------------------------

    async def run_case(self, case: dict) -> None:
        timeout = float(case.get("timeout", 180)) * self.scale
        try:
            await asyncio.wait_for(self._run_steps(case), timeout)
        except asyncio.TimeoutError as e:
            if getattr(e, "code", None) is not None:
                raise  # a burrow timeout error, not the case's bound
            raise ConformanceFailure(
                f"case {case['id']} did not finish within {timeout:.0f} s\n" + self._trace_text()
            ) from e
        finally:
            await self._cleanup()

    async def _run_steps(self, case: dict) -> None:
        for i, step in enumerate(case["steps"]):
            where = f"{case['id']} step {i + 1} ({step['op']})"
            self.trace.append(f"{where}: {json.dumps(step, ensure_ascii=False)}")
            try:
                await self.run_step(step, where)
            except ConformanceFailure as e:
                raise ConformanceFailure(f"{e}\n--- steps so far ---\n{self._trace_text()}") from None

    def _trace_text(self) -> str:
        return "\n".join(self.trace[-40:])

    async def _cleanup(self) -> None:
        for task in self.jobs.values():
            task.cancel()
        for task in self.jobs.values():
            try:
                await task
            except BaseException:  # noqa: BLE001 - cleanup only
                pass
        self.jobs.clear()
        if not self.cleanup:
            return
        from burrow import Sandbox

        try:
            page = await asyncio.wait_for(Sandbox.list(), 30)
        except Exception:  # noqa: BLE001 - cleanup only
            return
        for handle in page.sandboxes:
            try:
                await asyncio.wait_for(handle.destroy(), 60)
            except Exception:  # noqa: BLE001 - cleanup only
                pass

    # -- steps --------------------------------------------------------------

    async def run_step(self, step: dict, where: str) -> None:
        op = step["op"]
        if "background" in step:
            job = step["background"]
            if job in self.jobs:
                raise ConformanceFailure(f"{where}: job {job!r} already running")
            self.jobs[job] = asyncio.ensure_future(self._invoke(step))
            return
        if op == "sleep":
            await asyncio.sleep(float(step["seconds"]))
            return
        if op == "repeat":
            await self._repeat(step, where)
            return
        if op == "race":
            await self._race(step, where)
            return
        if op == "await":
            job = step["job"]
            if job not in self.jobs:
                raise ConformanceFailure(f"{where}: no background job {job!r}")
            outcome = await self.jobs.pop(job)
            await self._conclude(step, outcome, where)
            return

        within = step.get("within")
        deadline = None if within is None else time.monotonic() + float(within) * self.scale
        while True:
            outcome = await self._invoke(step)
            try:
                await self._conclude(step, outcome, where)
                return
            except ConformanceFailure:
                if deadline is None or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.2)

    async def _repeat(self, step: dict, where: str) -> None:
        end = time.monotonic() + float(step["seconds"])
        interval = float(step.get("interval", 0.5))
        n = 0
        while time.monotonic() < end:
            n += 1
            await self.run_step(step["do"], f"{where} run {n}")
            await asyncio.sleep(interval)

    async def _conclude(self, step: dict, outcome: Outcome, where: str) -> None:
        """Checks the outcome against the step's expectation, then binds and saves."""
        tolerate = step.get("tolerate") or []
        if outcome.error is not None and outcome.code in tolerate:
            self._check_error_class(outcome.error, where)
            return
        await self._check(step.get("expect") or {}, outcome, where)
        if outcome.error is not None:
            return
        if "as" in step:
            self.objects[step["as"]] = outcome.result.obj
        for var, field in (step.get("save") or {}).items():
            value = await self._field(outcome.result, field, {})
            if value is _MISSING:
                raise ConformanceFailure(f"{where}: cannot save {var!r}: no field {field!r}")
            self.values[var] = value

    async def _check(self, expect: dict, outcome: Outcome, where: str) -> None:
        want_error = expect.get("error")
        if want_error is not None:
            if outcome.error is None:
                raise ConformanceFailure(
                    f"{where}: expected error {want_error!r}, but the step succeeded"
                    f" ({await self._summary(outcome.result)})"
                )
            if outcome.code != want_error:
                raise ConformanceFailure(
                    f"{where}: expected error {want_error!r}, got {_describe_error(outcome.error)}"
                )
            self._check_error_class(outcome.error, where)
            for key, expected in expect.items():
                if key == "error":
                    continue
                actual = _norm(self._error_field(outcome.error, key))
                self._match(expected, actual, f"{where}: error field {key!r}")
            return
        if outcome.error is not None:
            raise ConformanceFailure(f"{where}: unexpected error {_describe_error(outcome.error)}")
        cache: dict = {}
        for key, expected in expect.items():
            actual = await self._field(outcome.result, key, cache)
            self._match(expected, actual, f"{where}: field {key!r}")

    def _check_error_class(self, error: BaseException, where: str) -> None:
        from burrow import errors

        code = getattr(error, "code", None)
        cls_name = CODE_CLASSES.get(code)
        if cls_name is None:
            raise ConformanceFailure(f"{where}: error with unknown code: {_describe_error(error)}")
        cls = getattr(errors, cls_name)
        if not isinstance(error, cls) or not isinstance(error, errors.BurrowError):
            raise ConformanceFailure(
                f"{where}: code {code!r} must be raised as errors.{cls_name}, got {type(error).__name__}"
            )

    @staticmethod
    def _error_field(error: BaseException, key: str) -> Any:
        return getattr(error, key, _MISSING)

    # -- values and matching ------------------------------------------------

    def value(self, spec: Any) -> Any:
        """Resolves value forms ({"var"}, {"str_repeat"}) recursively."""
        if _is_operator(spec) and "var" in spec:
            name = spec["var"]
            if name not in self.values:
                raise ConformanceFailure(f"no saved value {name!r}")
            v = self.values[name]
            if "add" in spec:
                v = v + spec["add"]
            return v
        if _is_operator(spec) and "str_repeat" in spec:
            return spec["str_repeat"] * int(spec["times"])
        if isinstance(spec, dict):
            return {k: self.value(v) for k, v in spec.items()}
        if isinstance(spec, list):
            return [self.value(v) for v in spec]
        return spec

    def _match(self, expected: Any, actual: Any, what: str) -> None:
        def fail(reason: str) -> None:
            shown = "<absent>" if actual is _MISSING else repr(actual)
            raise ConformanceFailure(f"{what}: {reason}; actual {shown}")

        if _is_operator(expected) and set(expected) & MATCH_OPERATORS:
            if "ne" in expected:
                other = self.value(expected["ne"])
                if actual is _MISSING or _equal(other, actual):
                    fail(f"expected anything but {other!r}")
            elif "one_of" in expected:
                options = [self.value(v) for v in expected["one_of"]]
                if not any(_equal(o, actual) for o in options):
                    fail(f"expected one of {options!r}")
            elif "present" in expected:
                present = actual is not _MISSING and actual is not None
                if present != bool(expected["present"]):
                    fail("expected a value" if expected["present"] else "expected no value")
            return
        if _is_operator(expected):
            want = self.value(expected)
            if not _equal(want, actual):
                fail(f"expected {want!r}")
            return
        if expected is None:
            if actual is not None and actual is not _MISSING:
                fail("expected null or absent")
            return
        if isinstance(expected, dict):
            if not isinstance(actual, dict):
                fail(f"expected an object with {sorted(expected)}")
            for k, v in expected.items():
                self._match(v, actual.get(k, _MISSING), f"{what}.{k}")
            return
        if isinstance(expected, list):
            if not isinstance(actual, list) or len(actual) != len(expected):
                fail(f"expected {expected!r}")
            for i, (e, a) in enumerate(zip(expected, actual)):
                self._match(e, a, f"{what}[{i}]")
            return
        if not _equal(expected, actual):
            fail(f"expected {expected!r}")

    # -- fields -------------------------------------------------------------

    async def _field(self, result: R, path: str, cache: dict) -> Any:
        head, *rest = path.split(".")
        value = await self._top_field(result, head, cache)
        for part in rest:
            if isinstance(value, dict):
                value = value.get(part, _MISSING)
            elif value is _MISSING or value is None:
                return _MISSING
            else:
                value = getattr(value, part, _MISSING)
        return _norm(value)

    async def _info_of(self, result: R, cache: dict) -> Any:
        key = id(result.obj)
        if key not in cache:
            cache[key] = await result.obj.info()
        return cache[key]

    async def _top_field(self, result: R, key: str, cache: dict) -> Any:
        kind, obj = result.kind, result.obj
        if kind == "sandbox":
            if key in ("id", "name", "generation"):
                return getattr(obj, key)
            return _info_field(await self._info_of(result, cache), key)
        if kind == "handle":
            if key in ("id", "name"):
                return getattr(obj, key)
            return _info_field(await self._info_of(result, cache), key)
        if kind == "info":
            return _info_field(obj, key)
        if kind == "plan":
            if key == "changes":
                return [
                    {"field": c.field, "applies": c.applies, "note": c.note} for c in obj.changes
                ]
            return _info_field(obj.info, key)
        if kind == "exec":
            if key in ("stdout", "stderr"):
                return getattr(obj, key)
            if key in ("exit_code", "signal", "timed_out", "truncated", "ok"):
                return getattr(obj, key)
            return _MISSING
        if kind == "value":
            return obj if key == "value" else _MISSING
        if kind == "list":
            if key == "count":
                return len(obj)
            if key == "names":
                return sorted(getattr(x, "name") for x in obj)
            return _MISSING
        return _MISSING

    async def _summary(self, result: R | None) -> str:
        if result is None:
            return "no result"
        try:
            if result.kind in ("sandbox", "handle"):
                return f"{result.kind} {result.obj.id}"
            if result.kind == "exec":
                return f"exit {result.obj.exit_code}, stdout {_norm(result.obj.stdout)!r}"
            return f"{result.kind} {_norm(result.obj)!r}"[:300]
        except Exception:  # noqa: BLE001 - description only
            return result.kind

    # -- operations ---------------------------------------------------------

    async def _invoke(self, step: dict) -> Outcome:
        try:
            return Outcome(await self._dispatch(step), None)
        except ConformanceFailure:
            raise
        except Exception as e:  # noqa: BLE001 - every failure is an outcome
            return Outcome(None, e)

    def _options(self, step: dict) -> dict:
        opts = dict(self.value(step.get("options") or {}))
        opts.setdefault("image", self.image)
        _typed_network(opts)
        if "secrets" in opts:
            from burrow import Secret

            opts["secrets"] = [Secret(s["name"], s["value"], s["hosts"]) for s in opts["secrets"]]
        if "volumes" in opts:
            opts["volumes"] = [tuple(v) for v in opts["volumes"]]
        return opts

    def _target(self, step: dict) -> Any:
        var = step["sandbox"]
        if var not in self.objects:
            raise ConformanceFailure(f"no variable {var!r}")
        return self.objects[var]

    @staticmethod
    def _is_live(obj: Any) -> bool:
        from burrow import Sandbox

        return isinstance(obj, Sandbox)

    def _as_handle(self, obj: Any) -> Any:
        return obj.handle() if self._is_live(obj) else obj

    def _live(self, step: dict) -> Any:
        obj = self._target(step)
        if not self._is_live(obj):
            raise ConformanceFailure(f"{step['op']} needs a live sandbox, {step['sandbox']!r} is a handle")
        return obj

    async def _dispatch(self, step: dict) -> R:
        from burrow import Sandbox, SandboxInfo, Status

        op = step["op"]
        if op == "create":
            return R("sandbox", await Sandbox.create(self.value(step["name"]), **self._options(step)))
        if op == "connect_or_create":
            return R(
                "sandbox",
                await Sandbox.connect_or_create(self.value(step["name"]), **self._options(step)),
            )
        if op == "define":
            return R("handle", await Sandbox.define(self.value(step["name"]), **self._options(step)))
        if op == "get":
            return R("handle", await Sandbox.get(self.value(step["name"])))
        if op == "get_by_id":
            return R("handle", await Sandbox.get_by_id(self.value(step["id"])))
        if op == "list":
            kwargs: dict = {}
            if "status" in step:
                kwargs["status"] = [Status(s) for s in step["status"]]
            if "labels" in step:
                kwargs["labels"] = self.value(step["labels"])
            return R("list", (await Sandbox.list(**kwargs)).sandboxes)
        if op == "remove":
            if "name" in step:
                await Sandbox.remove(self.value(step["name"]))
            else:
                await self._as_handle(self._target(step)).remove()
            return R("none")
        if op == "get_snapshot":
            return R("value", _snapshot_value(await Sandbox.get_snapshot(self.value(step["snapshot"]))))
        if op == "list_snapshots":
            return R("value", [s.name for s in await Sandbox.snapshots()])
        if op == "remove_snapshot":
            await Sandbox.remove_snapshot(self.value(step["snapshot"]))
            return R("none")
        if op == "connect_or_start" and "name" in step:
            handle = await Sandbox.get(self.value(step["name"]))
            return R("sandbox", await handle.connect_or_start())
        if op == "wait":
            return R("exec", await _collect(self.objects[step["process"]]))

        target = self._target(step)
        if op == "handle":
            return R("handle", self._as_handle(target))
        if op == "info":
            return R("info", await target.info())
        if op == "status":
            # A fresh read (target.status is the snapshot, read without a call).
            return R("value", (await target.info()).status)
        if op == "config":
            return R("value", _neutral_config(await self._as_handle(target).config()))
        if op in ("start", "connect_or_start", "connect"):
            return R("sandbox", await getattr(self._as_handle(target), op)())
        if op == "restart":
            r = await target.restart()
            return R("info" if isinstance(r, SandboxInfo) else "sandbox", r)
        if op == "stop":
            kwargs = {"grace": float(step["grace"])} if "grace" in step else {}
            return R("info", await target.stop(**kwargs))
        if op in ("kill", "request_drain", "pause", "resume", "wait_until_stopped"):
            return R("info", await getattr(target, op)())
        if op == "touch":
            await target.touch()
            return R("none")
        if op == "modify":
            # The changes' names are the keywords of modify (durations in
            # seconds, None clears).
            changes = dict(self.value(step["changes"]))
            _typed_network(changes)
            return R("plan", await target.modify(**changes))
        if op == "wait_for_status":
            kwargs = {}
            if "timeout" in step:
                kwargs["timeout"] = float(step["timeout"]) * self.scale
            statuses = [Status(s) for s in step["statuses"]]
            return R("info", await target.wait_for_status(statuses, **kwargs))
        if op == "destroy":
            await target.destroy()
            return R("none")
        if op == "snapshot":
            info = await target.snapshot(self.value(step["snapshot"]), kind=step.get("kind"))
            return R("value", _snapshot_value(info))
        if op == "fork":
            # The copies' names, in order (bound by connect_or_start by name).
            copies = await target.fork(step.get("count"), names=step.get("names"))
            return R("value", [c.name for c in copies])
        if op == "follow_logs":
            # The stream ends by itself when the followed run ends.
            source = step.get("source")
            limit = float(step.get("timeout", FOLLOW_TIMEOUT)) * self.scale

            async def texts() -> list[str]:
                return [line.text async for line in target.follow_logs(source=source)]

            try:
                return R("value", await asyncio.wait_for(texts(), limit))
            except asyncio.TimeoutError:
                raise StepTimeout(f"follow_logs did not end within {limit} s") from None

        sb = self._live(step)
        if op == "detach":
            return R("info", await sb.detach())
        if op == "ping":
            return R("value", (await sb.ping()).latency)
        if op in ("exec", "spawn"):
            argv = self.value(step["argv"])
            kwargs = {}
            for k in ("env", "cwd", "stdin"):
                if k in step:
                    kwargs[k] = self.value(step[k])
            if "timeout" in step:
                kwargs["timeout"] = float(step["timeout"])
            if "output_limit" in step:
                kwargs["output_limit"] = int(self.value(step["output_limit"]))
            if op == "exec":
                return R("exec", await sb.exec(argv, **kwargs))
            return R("process", await sb.spawn(argv, **kwargs))
        path = self.value(step.get("path"))
        if op == "fs_write":
            await sb.fs.write(path, self.value(step["data"]))
            return R("none")
        if op == "fs_read":
            return R("value", await sb.fs.read(path))
        if op == "fs_write_stream":
            data = self.value(step["data"]).encode()
            pieces = _split_chunks(data, int(self.value(step.get("chunks", 1))))
            return R("value", await sb.fs.write_stream(path, iter(pieces)))
        if op == "fs_read_stream":
            return R("value", b"".join([chunk async for chunk in await sb.fs.open_read(path)]))
        if op == "fs_exists":
            return R("value", await sb.fs.exists(path))
        if op == "fs_mkdir":
            await sb.fs.mkdir(path, parents=bool(step.get("parents", False)))
            return R("none")
        if op == "fs_list":
            return R("list", await sb.fs.list(path))
        raise ConformanceFailure(f"unknown op {op!r}")

    # -- race ---------------------------------------------------------------

    async def _generation(self, do: dict) -> int:
        from burrow import Sandbox, errors

        try:
            if "name" in do:
                info = await (await Sandbox.get(self.value(do["name"]))).info()
            else:
                info = await self._target(do).info()
        except errors.SandboxNotFoundError:
            return 0
        return int(info.generation)

    async def _race_call(self, do: dict, keys: list[str]) -> dict:
        """Runs one caller's step; reports {ok, code, fields} (plain data, picklable)."""
        outcome = await self._invoke(do)
        if outcome.error is not None:
            return {
                "ok": False,
                "code": outcome.code,
                "error": _describe_error(outcome.error),
                "class_ok": _class_ok(outcome.error),
            }
        fields = {}
        cache: dict = {}
        for key in keys:
            v = await self._field(outcome.result, key, cache)
            fields[key] = None if v is _MISSING else v
        if "sandbox" in do and "id" in keys and fields.get("id") is None:
            fields["id"] = self._target(do).id
        return {"ok": True, "code": None, "fields": fields}

    async def _race(self, step: dict, where: str) -> None:
        do = step["do"]
        n = int(step["callers"])
        expect = step.get("expect") or {}
        keys = sorted({"id", "generation"} | set(expect.get("each", {})) | set((step.get("save") or {}).values()))
        before = await self._generation(do)
        timeout = 120.0 * self.scale
        if step.get("processes"):
            resolved = self.value(do)
            if "options" in resolved or resolved["op"] in ("create", "connect_or_create"):
                resolved["options"] = self._options(resolved)
            reports = await asyncio.to_thread(
                run_process_race, n, resolved, keys, self.image, self.configure, timeout
            )
            pids = {r.get("pid") for r in reports if r.get("pid")}
            if len(pids) != n or os.getpid() in pids:
                raise ConformanceFailure(f"{where}: the callers did not run in {n} other processes: {pids}")
        else:
            reports = list(await asyncio.wait_for(
                asyncio.gather(*(self._race_call(do, keys) for _ in range(n))), timeout
            ))
        after = await self._generation(do)
        shown = json.dumps(reports, default=str)[:3000]

        counts: dict[str, int] = {}
        for r in reports:
            k = "ok" if r["ok"] else (r.get("code") or "unexpected_exception")
            counts[k] = counts.get(k, 0) + 1
            if not r["ok"] and not r.get("class_ok", True):
                raise ConformanceFailure(f"{where}: an error of the wrong class: {r['error']}")
        want_counts = expect.get("outcomes", {"ok": n})
        if {k: v for k, v in counts.items() if v} != {k: v for k, v in want_counts.items() if v}:
            raise ConformanceFailure(f"{where}: outcomes {counts}, expected {want_counts}: {shown}")
        oks = [r["fields"] for r in reports if r["ok"]]
        if expect.get("same_id"):
            ids = {f["id"] for f in oks}
            if len(ids) != 1:
                raise ConformanceFailure(f"{where}: callers got different ids {sorted(ids)}: {shown}")
            if "name" in do:
                from burrow import Sandbox

                holder = (await Sandbox.get(self.value(do["name"]))).id
                if ids != {holder}:
                    raise ConformanceFailure(f"{where}: callers got {ids}, the name is held by {holder}")
        if "starts" in expect and after - before != int(expect["starts"]):
            raise ConformanceFailure(
                f"{where}: {after - before} starts (generation {before} -> {after}),"
                f" expected {expect['starts']}: {shown}"
            )
        for i, fields in enumerate(oks):
            for key, expected in (expect.get("each") or {}).items():
                self._match(expected, fields.get(key, _MISSING), f"{where}: caller {i} field {key!r}")
        for var, field in (step.get("save") or {}).items():
            if not oks:
                raise ConformanceFailure(f"{where}: nothing to save {var!r} from: no caller succeeded")
            self.values[var] = oks[0].get(field)


def _equal(expected: Any, actual: Any) -> bool:
    if actual is _MISSING:
        return False
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return abs(expected - actual) < 1e-9
    return _norm(expected) == _norm(actual)


def _typed_network(args: dict) -> None:
    """A policy given as JSON becomes the package's NetworkPolicy: the typed
    API is what the case exercises."""
    from burrow import NetworkPolicy

    net = args.get("network")
    if isinstance(net, dict):
        args["network"] = NetworkPolicy(allow=net.get("allow", ()), deny=net.get("deny", ()))


def _info_field(info: Any, key: str) -> Any:
    if key in ("exit_reason", "detail"):
        run = getattr(info, "last_run", None)
        return None if run is None else getattr(run, key)
    if key == "config":
        return _neutral_config(info.config)
    return getattr(info, key, _MISSING)


def _neutral_config(config: dict) -> dict:
    """The configuration as cases read it: the core's JSON form, with
    ``idle_action`` always present (the JSON leaves out the default,
    ``"stop"``)."""
    return {"idle_action": "stop", **config}


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


# ---------------------------------------------------------------------------
# Races across OS processes


def run_process_race(
    n: int, do: dict, keys: list[str], image: str, configure: dict, timeout: float
) -> list[dict]:
    """Runs `do` in `n` fresh processes released together; returns their reports."""
    from _children import run_all

    return run_all(_race_child, n, (do, keys, image, configure), timeout)


def _race_child(
    index: int, do: dict, keys: list[str], image: str, configure: dict, barrier: Any, results: Any
) -> None:
    report: dict
    try:
        import burrow

        if configure:
            burrow.configure(**configure)
        runner = Runner(image=image, configure=configure, cleanup=False)
        barrier.wait(timeout=120)
        report = asyncio.run(runner._race_call(do, keys))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        report = {
            "ok": False,
            "code": None,
            "error": f"{_describe_error(e)}\n{traceback.format_exc()}",
        }
    report["pid"] = os.getpid()
    results.put((index, report))
    results.close()
    results.join_thread()

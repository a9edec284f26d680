"""Interpreter of the language-neutral lifecycle cases (tests/conformance/cases.json)
on top of the async ``burrow`` API.

The step vocabulary is documented in tests/conformance/README.md; the
cases document and its structural check are ``conformance_cases``, the
values and outcomes the runner compares ``conformance_values``. This module
imports ``burrow`` lazily, so the structural checks of the cases file
(:func:`validate_cases`) work without the package.

``race`` steps with ``"processes": true`` run each caller in its own OS process
(multiprocessing, 'spawn' start method); the children import this module
again and use :class:`Runner` to run their step.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import traceback
from typing import Any

from conformance_cases import MATCH_OPERATORS
from conformance_values import (
    _MISSING,
    CODE_CLASSES,
    FOLLOW_TIMEOUT,
    Outcome,
    R,
    StepTimeout,
    _class_ok,
    _collect,
    _describe_error,
    _equal,
    _info_field,
    _is_operator,
    _neutral_config,
    _norm,
    _pool_value,
    _snapshot_value,
    _split_chunks,
)


class ConformanceFailure(AssertionError):
    """A step's outcome did not meet its expectation."""


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

        # The pools first (their warm sandboxes are never listed), where
        # the backend has them.
        try:
            pools = await asyncio.wait_for(Sandbox.list_pools(), 30)
        except Exception:  # noqa: BLE001 - cleanup only (unsupported too)
            pools = []
        for pool in pools:
            try:
                await asyncio.wait_for(Sandbox.remove_pool(pool.name), 60)
            except Exception:  # noqa: BLE001 - cleanup only
                pass
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

            opts["secrets"] = [
                Secret(s["name"], s["value"], s["hosts"], headers=s.get("headers", ())) for s in opts["secrets"]
            ]
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
        if op == "create_pool":
            opts = self._options(step)
            pool = await Sandbox.create_pool(self.value(step["pool"]), self.value(step["size"]), **opts)
            return R("value", _pool_value(pool))
        if op == "get_pool":
            return R("value", _pool_value(await Sandbox.get_pool(self.value(step["pool"]))))
        if op == "list_pools":
            return R("value", [p.name for p in await Sandbox.list_pools()])
        if op == "scale_pool":
            pool = await Sandbox.scale_pool(self.value(step["pool"]), self.value(step["size"]))
            return R("value", _pool_value(pool))
        if op == "remove_pool":
            await Sandbox.remove_pool(self.value(step["pool"]))
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


def _typed_network(args: dict) -> None:
    """A policy given as JSON becomes the package's NetworkPolicy: the typed
    API is what the case exercises."""
    from burrow import NetworkPolicy

    net = args.get("network")
    if isinstance(net, dict):
        args["network"] = NetworkPolicy(allow=net.get("allow", ()), deny=net.get("deny", ()))


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

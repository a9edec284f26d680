"""Errors: one typed exception per core error code, exact both ways, picklable;
every code that can be provoked locally is provoked for real. Tests look at
classes, codes and attributes, never at message text."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import pickle

import pytest

import _children
import _support

# sdk-python/API.md, "Errors": code -> class name.
TABLE = {
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
# core/burrow/src/error.rs, ErrorCode::ALL, in its order.
CORE_ALL = list(TABLE)
NOT_PROVOKABLE_LOCALLY = [
    "protocol", "store", "io", "runtime_unavailable", "starting", "unauthorized", "unsupported",
    # answered only by a `burrow serve` with tenants
    "forbidden", "quota_exceeded", "rate_limited",
]
SANDBOX_ID = "sb_01hzzzzzzzzzzzzzzzzzzzzzzz"
PYTHON_ONLY = {"CommandFailedError"}


def errors_module():
    from burrow import errors

    return errors


def from_core(code: str, message: str = "boom", **fields):
    """An error as the binding makes it from a core error (burrow.errors._from_core).

    Adapts to the helper's signature: keyword fields (code, message, sandbox_id,
    name, status, guest_code) or one mapping with those keys.
    """
    fn = errors_module()._from_core
    values = {"code": code, "message": message, **fields}
    params = inspect.signature(fn).parameters
    if "code" in params:
        # every parameter the helper has, None when not given
        kwargs = {k: values.get(k) for k, p in params.items() if p.kind is not p.VAR_KEYWORD}
        return fn(**kwargs)
    return fn(values)


def classes_by_name() -> dict[str, type]:
    errors = errors_module()
    return {
        name: obj
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and issubclass(obj, BaseException) and not name.startswith("_")
    }


def assert_typed(e: BaseException, code: str) -> None:
    errors = errors_module()
    cls = getattr(errors, TABLE[code])
    assert isinstance(e, cls), f"{type(e).__name__} is not {TABLE[code]}"
    assert isinstance(e, errors.BurrowError)
    assert e.code == code


# ---------------------------------------------------------------------------
# The table


@pytest.mark.no_sandbox
def test_codes_are_exactly_the_core_codes(installed_burrow):
    codes = list(installed_burrow._native.error_codes())
    assert codes == CORE_ALL, "burrow._native.error_codes() is the core's ErrorCode::ALL"
    assert len(set(codes)) == len(codes)


@pytest.mark.no_sandbox
def test_every_code_has_its_own_class_and_back(installed_burrow):
    errors = installed_burrow.errors
    codes = list(installed_burrow._native.error_codes())
    made = {}
    for code in codes:
        e = from_core(code)
        cls = type(e)
        assert cls.__name__ == TABLE[code], f"{code} -> {cls.__name__}"
        assert getattr(errors, TABLE[code]) is cls, f"errors.{TABLE[code]} is the class raised for {code}"
        assert issubclass(cls, errors.BurrowError) and cls is not errors.BurrowError
        assert e.code == code
        made[code] = cls
    # one class per code, and no code shares a class
    assert len(set(made.values())) == len(codes)
    # back: every code-bearing error class of burrow.errors is the class of exactly one code
    public = classes_by_name()
    code_classes = {
        name: cls
        for name, cls in public.items()
        if issubclass(cls, errors.BurrowError) and cls is not errors.BurrowError and name not in PYTHON_ONLY
    }
    assert set(code_classes.values()) == set(made.values()), (
        f"classes without a code: {sorted(set(code_classes) - set(TABLE.values()))}"
    )
    # a mapping exported by the module (if any) agrees with the table both ways
    for name, value in vars(errors).items():
        if isinstance(value, dict) and value and set(value) == set(codes):
            assert {k: v for k, v in value.items()} == made, f"errors.{name} disagrees"


@pytest.mark.no_sandbox
def test_class_attributes_agree_with_codes(installed_burrow):
    for code, name in TABLE.items():
        cls = getattr(installed_burrow.errors, name)
        declared = getattr(cls, "code", None)
        if isinstance(declared, str):
            assert declared == code, f"{name}.code"


@pytest.mark.no_sandbox
def test_base_classes(installed_burrow):
    errors = installed_burrow.errors
    assert issubclass(errors.BurrowError, Exception)
    assert issubclass(errors.BurrowTimeoutError, TimeoutError), "also the builtin TimeoutError"
    assert issubclass(errors.BurrowTimeoutError, errors.BurrowError)
    assert "CommandFailedError" in vars(errors), "ExecResult.check() raises errors.CommandFailedError"


@pytest.mark.no_sandbox
@pytest.mark.parametrize("code", CORE_ALL)
def test_attributes_and_pickle_round_trip(installed_burrow, code):
    from burrow import Status

    fields = {"sandbox_id": SANDBOX_ID, "name": "worker", "status": "running"}
    if code == "guest":
        fields["guest_code"] = "not_found"
    e = from_core(code, "something happened", **fields)
    assert_typed(e, code)
    assert e.message == "something happened"
    assert e.sandbox_id == SANDBOX_ID
    assert e.name == "worker"
    assert e.status == Status.RUNNING and isinstance(e.status, Status)
    if code == "guest":
        assert e.guest_code == "not_found"
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(e, protocol=protocol))
        assert type(back) is type(e)
        for attr in ("code", "message", "sandbox_id", "name", "status"):
            assert getattr(back, attr) == getattr(e, attr), attr
        if code == "guest":
            assert back.guest_code == "not_found"
        assert str(back) == str(e)


@pytest.mark.no_sandbox
@pytest.mark.parametrize("code", NOT_PROVOKABLE_LOCALLY)
def test_codes_not_provokable_locally(installed_burrow, code):
    errors = installed_burrow.errors
    e = from_core(code)
    cls = getattr(errors, TABLE[code])
    assert type(e) is cls
    assert cls.__bases__ and issubclass(cls, errors.BurrowError)
    assert isinstance(e, Exception)
    assert e.code == code and e.message == "boom"
    assert e.sandbox_id is None and e.name is None and e.status is None
    if code in ("starting",):
        e = from_core(code, sandbox_id=SANDBOX_ID, name="w")
        assert (e.sandbox_id, e.name) == (SANDBOX_ID, "w")
    with pytest.raises(cls):
        raise e
    with pytest.raises(errors.BurrowError):
        raise e


@pytest.mark.no_sandbox
def test_tenant_errors_carry_their_fields(installed_burrow):
    """forbidden, quota_exceeded and rate_limited from error bodies (what a
    `burrow serve` answers): their class, and the fields each one carries."""
    import json

    errors = installed_burrow.errors
    e = errors._from_body(json.dumps(
        {"code": "forbidden", "message": "m", "operation": "pool.create", "reason": "role viewer"}
    ))
    assert_typed(e, "forbidden")
    assert (e.operation, e.reason) == ("pool.create", "role viewer")
    e = errors._from_body(json.dumps(
        {"code": "quota_exceeded", "message": "m", "subject": "cpus", "limit": 8, "reason": "9 requested"}
    ))
    assert_typed(e, "quota_exceeded")
    assert (e.subject, e.limit, e.reason) == ("cpus", 8, "9 requested")
    assert e.retry_after is None and e.retry_after_ms is None
    e = errors._from_body(json.dumps({"code": "rate_limited", "message": "m", "retry_after_ms": 1500}))
    assert_typed(e, "rate_limited")
    assert (e.retry_after_ms, e.retry_after) == (1500, 1.5)
    assert e.limit is None
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(e, protocol=protocol))
        assert type(back) is errors.RateLimitedError
        assert (back.code, back.retry_after_ms, back.retry_after) == ("rate_limited", 1500, 1.5)


def test_an_error_crosses_multiprocessing(burrow_home):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    p = ctx.Process(target=_children.raise_not_found, args=(_support.configure_kwargs(burrow_home), results))
    p.start()
    try:
        kind, e = results.get(timeout=120)
    finally:
        p.join(30)
    assert kind == "error"
    assert_typed(e, "not_found")
    assert e.name == "no-such-sandbox"


# ---------------------------------------------------------------------------
# Provoked for real


async def test_not_found(image):
    from burrow import Sandbox, errors

    with pytest.raises(errors.SandboxNotFoundError) as info:
        await Sandbox.get("missing")
    assert_typed(info.value, "not_found")
    assert info.value.name == "missing"
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.remove("missing")


async def test_already_exists(image):
    from burrow import Sandbox, errors

    first = await Sandbox.create("taken", image=image)
    with pytest.raises(errors.SandboxAlreadyExistsError) as info:
        await Sandbox.create("taken", image=image)
    assert_typed(info.value, "already_exists")
    assert info.value.sandbox_id == first.id
    assert info.value.name == "taken"
    with pytest.raises(errors.SandboxAlreadyExistsError):
        await Sandbox.define("taken", image=image)
    await first.destroy()


async def test_invalid_state(image):
    from burrow import Sandbox, Status, errors

    sb = await Sandbox.create("stopping", image=image)
    await sb.stop()
    with pytest.raises(errors.InvalidStateError) as info:
        await sb.exec(["true"])
    assert_typed(info.value, "invalid_state")
    assert info.value.status == Status.STOPPED
    assert info.value.sandbox_id == sb.id
    assert info.value.name == "stopping"
    h = await Sandbox.define("never-started", image=image)
    with pytest.raises(errors.InvalidStateError) as info:
        await h.connect()
    assert info.value.status == Status.CREATED


@pytest.mark.parametrize("name", ["", "a/b/c", "a" * 129, "\u20ac" * 43, ".."])
async def test_invalid_name(image, name):
    from burrow import Sandbox, errors

    with pytest.raises(errors.InvalidNameError) as info:
        await Sandbox.define(name, image=image)
    assert_typed(info.value, "invalid_name")
    assert (await Sandbox.list()).sandboxes == []


async def test_invalid_config(image):
    from burrow import Sandbox, errors

    for options in (
        {"cpus": 0}, {"memory": 1}, {"memory_mb": 1}, {"workdir": "relative"}, {"env": {"A=B": "x"}},
        {"disk_mb": 16, "best_effort_limits": True}, {"seccomp_allow": ["NOT A NAME"]},
    ):
        with pytest.raises(errors.InvalidConfigError) as info:
            await Sandbox.define("cfg", image=image, **options)
        assert_typed(info.value, "invalid_config")
    # A lone string is not a list of names (it would be one per letter).
    with pytest.raises(TypeError):
        await Sandbox.define("cfg", image=image, seccomp_allow="io_uring_setup")
    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.create("cfg", image=image, cpus=0)
    assert (await Sandbox.list()).sandboxes == []


async def test_invalid_image():
    from burrow import Sandbox, errors

    with pytest.raises(errors.InvalidImageError) as info:
        await Sandbox.define("img", image="/definitely/not/a/dir")
    assert_typed(info.value, "invalid_image")
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("img")


async def test_invalid_argument_and_guest(image):
    from burrow import Sandbox, errors

    sb = await Sandbox.create("args", image=image)
    with pytest.raises(errors.InvalidArgumentError) as info:
        await sb.fs.read("relative/path")
    assert_typed(info.value, "invalid_argument")
    with pytest.raises(errors.InvalidArgumentError):
        await sb.exec(["true"], cwd="relative")
    with pytest.raises(errors.GuestError) as info:
        await sb.fs.read("/no/such/file")
    assert_typed(info.value, "guest")
    assert info.value.guest_code == "not_found"
    with pytest.raises(errors.GuestError):
        await sb.exec(["/no/such/program"])
    # a non-zero exit is a result, not an error; check() raises the Python-only error
    result = await sb.exec(["sh", "-c", "exit 3"])
    assert result.exit_code == 3 and not result.ok
    with pytest.raises(errors.CommandFailedError) as failed:
        result.check()
    assert getattr(failed.value, "code", None) not in TABLE
    await sb.destroy()


async def test_wrong_python_types_are_type_errors(image):
    from burrow import Sandbox

    with pytest.raises(TypeError):
        await Sandbox.create(123, image=image)
    with pytest.raises((TypeError, ValueError)):
        await Sandbox.define("t", image=image, env=["not", "a", "dict"])
    assert (await Sandbox.list()).sandboxes == []


async def test_sandbox_replaced(image):
    from burrow import Sandbox, errors

    old = await Sandbox.create("ident", image=image)
    old_handle = old.handle()
    await old.destroy()
    new = await Sandbox.create("ident", image=image)
    for call in (old_handle.info, old_handle.stop, lambda: old.exec(["true"])):
        with pytest.raises(errors.SandboxReplacedError) as info:
            await call()
        assert_typed(info.value, "sandbox_replaced")
        assert info.value.sandbox_id == old.id
        assert info.value.name == "ident"
        assert info.value.actual_id == new.id
    assert (await new.info()).generation == new.generation
    await new.destroy()


async def test_port_unavailable(image):
    import socket

    from burrow import Sandbox

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        h = await Sandbox.define("err-port", image=image, ports=[f"{port}:80"])
        with pytest.raises(Exception) as info:
            await h.start()
        assert_typed(info.value, "port_unavailable")
    # Free again: the next start serves it.
    sb = await h.start()
    await sb.destroy()


async def test_start_failed(image):
    from burrow import ExitReason, Sandbox, Status, errors

    handle = await Sandbox.define("failing", image=image, startup_timeout=0.001)
    with pytest.raises(errors.StartFailedError) as info:
        await handle.start()
    assert_typed(info.value, "start_failed")
    assert info.value.sandbox_id == handle.id
    assert info.value.name == "failing"
    got = await handle.info()
    assert got.status == Status.CRASHED
    assert got.last_run is not None and got.last_run.exit_reason == ExitReason.START_FAILED
    with pytest.raises(errors.StartFailedError):
        await Sandbox.create("failing-too", image=image, startup_timeout=0.001)
    await handle.destroy()


async def test_timeout(image):
    from burrow import Sandbox, Status, errors

    sb = await Sandbox.create("waiting", image=image)
    with pytest.raises(errors.BurrowTimeoutError) as info:
        await sb.wait_for_status(Status.STOPPED, timeout=0.5)
    assert_typed(info.value, "timeout")
    assert isinstance(info.value, TimeoutError)
    assert info.value.after == 0.5
    assert info.value.after_ms == 500
    assert info.value.operation == "wait_for_status"
    with pytest.raises(TimeoutError):
        await sb.handle().wait_for_status([Status.STOPPED, Status.CRASHED], timeout=0.5)
    assert sb.status == Status.RUNNING
    assert (await sb.info()).status == Status.RUNNING
    await sb.destroy()


async def test_bad_durations_are_the_cores_invalid_argument(image):
    from burrow import Sandbox, errors

    sb = await Sandbox.create("durations", image=image)
    for call in (
        lambda: sb.stop(grace=-1),
        lambda: sb.exec(["true"], timeout=-0.5),
        lambda: sb.wait_for_status("stopped", timeout=float("nan")),
    ):
        with pytest.raises(errors.InvalidArgumentError) as info:
            await call()
        assert_typed(info.value, "invalid_argument")
        assert info.value.subject
    assert (await sb.info()).status.value == "running"
    await sb.destroy()


async def test_errors_are_raised_inside_the_event_loop_not_hanging(image):
    """An error from the core completes the awaiting coroutine promptly."""
    from burrow import Sandbox, errors

    with pytest.raises(errors.SandboxNotFoundError):
        await asyncio.wait_for(Sandbox.get("missing"), 30)

"""Processes: many Python processes converging on one name, fork safety, and
cancellation that leaves nothing running inside the sandbox."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import traceback

import pytest

import _children
import _support

ROUNDS = 3
CALLERS = 8


async def _sandbox_processes(sb, needle: str) -> list[str]:
    """Lines of `ps` inside the sandbox whose command is `needle`."""
    out = await sb.exec(["ps"])
    assert out.exit_code == 0, out.stderr
    return [line for line in out.stdout.decode().splitlines() if line.rstrip().endswith(needle)]


async def test_processes_converge_on_one_name_per_round(burrow_home, image):
    from burrow import Sandbox, Status

    configure = _support.configure_kwargs(burrow_home)
    for round_ in range(ROUNDS):
        name = f"conv-{round_}"
        reports = await asyncio.to_thread(
            _children.run_all, _children.converge, CALLERS, (name, image, configure)
        )
        failed = [r for r in reports if not r["ok"]]
        assert not failed, f"round {round_}: {failed}"
        assert len({r["pid"] for r in reports}) == CALLERS, "one OS process per caller"
        ids = {r["id"] for r in reports}
        assert len(ids) == 1, f"round {round_}: all callers get the same id: {ids}"
        assert {r["generation"] for r in reports} == {1}, f"round {round_}: exactly one start"
        assert {r["status"] for r in reports} == {"running"}
        info = await (await Sandbox.get(name)).info()
        assert info.id in ids
        assert info.generation == 1
        assert info.status == Status.RUNNING
        assert info.detached
        assert len((await Sandbox.list()).sandboxes) == 1, f"round {round_}: exactly one sandbox created"
        await (await Sandbox.get(name)).destroy()


async def test_processes_start_a_stopped_sandbox_once(burrow_home, image):
    from burrow import Sandbox, Status

    configure = _support.configure_kwargs(burrow_home)
    sb = await Sandbox.create("cos", image=image, detached=True)
    for round_ in range(2):
        before = await sb.stop()
        assert before.status == Status.STOPPED
        reports = await asyncio.to_thread(
            _children.run_all, _children.start_stopped, CALLERS, ("cos", configure)
        )
        failed = [r for r in reports if not r["ok"]]
        assert not failed, f"round {round_}: {failed}"
        assert {r["id"] for r in reports} == {sb.id}
        assert {r["generation"] for r in reports} == {before.generation + 1}, "one new generation"
        info = await sb.info()
        assert info.status == Status.RUNNING
        assert info.generation == before.generation + 1
    await sb.destroy()


def _fork_child_main(name: str, report_path: str, inherited_sb, inherited_proc) -> int:
    """Runs in the forked child: uses the API, writes a report, returns the exit code."""
    from burrow import Sandbox, errors

    async def body() -> None:
        # fresh lookups on the child's own runtime and backend
        handle = await Sandbox.get(name)
        sb = await handle.connect()
        out = await sb.exec(["echo", "from-child"])
        assert out.stdout == b"from-child\n", out
        await sb.fs.write("/tmp/child.txt", f"pid {os.getpid()}")
        page = await Sandbox.list()
        assert [h.name for h in page.sandboxes] == [name], page
        # objects made by the parent are re-bound to the same id (API.md)
        out = await inherited_sb.exec(["echo", "inherited"])
        assert out.stdout == b"inherited\n", out
        assert inherited_sb.id == sb.id
        # a live stream of the parent's connection is a misuse here
        try:
            await asyncio.wait_for(inherited_proc.wait(), 10)
        except errors.InvalidArgumentError:
            pass
        else:
            raise AssertionError("a Process inherited over fork must raise InvalidArgumentError")

    try:
        asyncio.run(asyncio.wait_for(body(), 60))
        return 0
    except BaseException:  # noqa: BLE001 - reported through the file
        with open(report_path, "w") as f:
            f.write(traceback.format_exc())
        return 1


async def _wait_child(pid: int, limit: float) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        await asyncio.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child {pid} did not finish within {limit} s (deadlock after fork?)")


async def test_fork_after_use(image):
    from burrow import Sandbox, Status

    sb = await Sandbox.create("forked", image=image, detached=True)
    assert (await sb.exec(["echo", "parent"])).stdout == b"parent\n"
    proc = await sb.spawn(["sleep", "300"])
    report = tempfile.NamedTemporaryFile(prefix="bp-fork-", suffix=".txt", delete=False)
    report.close()
    try:
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                code = _fork_child_main("forked", report.name, sb, proc)
            finally:
                os._exit(code)
        code = await _wait_child(pid, 120)
        with open(report.name) as f:
            details = f.read()
        assert code == 0, f"the child failed (exit {code}):\n{details}"
    finally:
        os.unlink(report.name)
    # the parent still works, with the objects it had before the fork
    assert (await sb.exec(["cat", "/tmp/child.txt"])).stdout.startswith(b"pid ")
    await proc.signal(9)
    status = await asyncio.wait_for(proc.wait(), 30)
    assert not status.ok, "the parent's process stream still works after the fork"
    assert (await sb.info()).status == Status.RUNNING
    other = await Sandbox.create("after-fork", image=image)
    assert (await other.exec(["echo", "ok"])).stdout == b"ok\n"
    await other.destroy()
    await sb.destroy()


FORK_ROUNDS = 100


def _fork_child_lookup(name: str) -> int:
    """Runs in a forked child: one lookup and one listing, then the exit code."""
    from burrow import Sandbox

    async def body() -> None:
        handle = await Sandbox.get(name)
        assert handle.name == name
        await Sandbox.list()

    try:
        asyncio.run(asyncio.wait_for(body(), 30))
        return 0
    except BaseException:  # noqa: BLE001 - the exit code is the report
        traceback.print_exc()
        return 1


async def test_forks_while_the_parent_is_busy(image):
    """Many forks while other tasks of the parent keep calls in flight: a
    child can land while a runtime thread is inside SQLite or handing a
    result to Python, and must still work (it hung on a lock inherited
    held, a few rounds in a hundred, before the fork handlers)."""
    from burrow import Sandbox

    sb = await Sandbox.create("busy-fork", image=image, detached=True)
    stop = asyncio.Event()
    calls = 0

    async def churn() -> None:
        nonlocal calls
        while not stop.is_set():
            await sb.info()
            calls += 1

    tasks = [asyncio.create_task(churn()) for _ in range(4)]
    try:
        for round_ in range(FORK_ROUNDS):
            await asyncio.sleep(0.01)
            pid = os.fork()
            if pid == 0:  # the child: never return into pytest
                code = 1
                try:
                    code = _fork_child_lookup("busy-fork")
                finally:
                    os._exit(code)
            code = await _wait_child(pid, 60)
            assert code == 0, f"round {round_}: the child failed (exit {code})"
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert calls > FORK_ROUNDS, "the parent kept calls in flight"
    assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    await sb.destroy()


async def test_cancelled_exec_leaves_no_orphan(image):
    from burrow import Sandbox, Status

    sb = await Sandbox.create("cancel", image=image)
    generation = sb.generation

    # control: a running exec is visible with ps; cancelling its task ends it in the sandbox
    task = asyncio.ensure_future(sb.exec(["sleep", "4242"]))

    async def visible() -> bool:
        return bool(await _sandbox_processes(sb, "sleep 4242"))

    assert await _support.eventually_async(15, visible), "ps sees the running command"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def gone_4242() -> bool:
        return not await _sandbox_processes(sb, "sleep 4242")

    assert await _support.eventually_async(15, gone_4242), "a cancelled exec's process is killed"

    # asyncio.wait_for with a short timeout around a long exec
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sb.exec(["sleep", "4343"]), 1.0)

    async def gone_4343() -> bool:
        return not await _sandbox_processes(sb, "sleep 4343")

    assert await _support.eventually_async(15, gone_4343), "no orphan after wait_for's timeout"

    # the sandbox stays usable, same run
    out = await sb.exec(["echo", "still here"])
    assert out.stdout == b"still here\n" and out.exit_code == 0
    info = await sb.info()
    assert info.status == Status.RUNNING
    assert info.generation == generation
    await sb.destroy()


async def test_exec_timeout_kills_the_command(image):
    from burrow import Sandbox

    sb = await Sandbox.create("bounded-exec", image=image)
    t = time.monotonic()
    result = await sb.exec(["sleep", "4444"], timeout=1.0)
    assert time.monotonic() - t < 30
    assert result.timed_out
    assert not result.ok

    async def gone() -> bool:
        return not await _sandbox_processes(sb, "sleep 4444")

    assert await _support.eventually_async(15, gone)
    await sb.destroy()

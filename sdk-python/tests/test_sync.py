"""The synchronous facade (burrow.sync) and the context-manager forms, sync and async."""

from __future__ import annotations

import pytest


def test_sync_basics(image):
    import burrow.sync
    from burrow import SandboxInfo, Status, errors

    sb = burrow.sync.Sandbox.create("sync-basic", image=image, env={"WHO": "sync"})
    assert sb.id.startswith("sb_")
    assert sb.name == "sync-basic"
    assert sb.generation == 1
    assert sb.status == Status.RUNNING

    out = sb.exec(["sh", "-c", "echo $WHO; echo err >&2; exit 4"])
    assert (out.stdout, out.stderr, out.exit_code, out.ok) == (b"sync\n", b"err\n", 4, False)
    assert sb.exec("echo piped-$((1+2))").stdout_text == "piped-3\n"
    assert sb.exec(["cat"], stdin="in").stdout == b"in"

    sb.fs.write("/root/f.txt", "text")
    assert sb.fs.read("/root/f.txt") == b"text"
    assert sb.fs.read_text("/root/f.txt") == "text"
    assert sb.fs.exists("/root/f.txt")

    handle = burrow.sync.Sandbox.get("sync-basic")
    assert handle.id == sb.id
    info = handle.info()
    assert isinstance(info, SandboxInfo)
    assert (info.status, info.generation) == (Status.RUNNING, 1)

    stopped = sb.stop()
    assert stopped.status == Status.STOPPED
    with pytest.raises(errors.InvalidStateError):
        sb.exec(["true"])
    again = handle.start()
    assert again.id == sb.id and again.generation == 2
    assert again.fs.read_text("/root/f.txt") == "text", "the writable layer survives stop/start"
    converged = burrow.sync.Sandbox.connect_or_create("sync-basic", image=image, env={"WHO": "other"})
    assert converged.id == sb.id and converged.generation == 2
    assert converged.exec("echo $WHO").stdout == b"sync\n"

    again.destroy()
    with pytest.raises(errors.SandboxNotFoundError):
        burrow.sync.Sandbox.get("sync-basic")
    assert burrow.sync.Sandbox.list().sandboxes == []


def test_sync_errors_are_typed(image):
    import burrow.sync
    from burrow import errors

    with pytest.raises(errors.SandboxNotFoundError) as info:
        burrow.sync.Sandbox.get("missing")
    assert info.value.code == "not_found"
    with pytest.raises(errors.InvalidNameError):
        burrow.sync.Sandbox.define("a/b/c", image=image)
    first = burrow.sync.Sandbox.create("dup", image=image)
    with pytest.raises(errors.SandboxAlreadyExistsError) as info:
        burrow.sync.Sandbox.create("dup", image=image)
    assert info.value.sandbox_id == first.id
    first.destroy()


def test_with_block_stops_on_exit(image):
    import burrow.sync
    from burrow import ExitReason, Status

    with burrow.sync.Sandbox.create("with-stop", image=image) as sb:
        assert sb.exec(["echo", "inside"]).stdout == b"inside\n"
        sandbox_id = sb.id
    handle = burrow.sync.Sandbox.get("with-stop")
    assert handle.id == sandbox_id
    info = handle.info()
    assert info.status == Status.STOPPED
    assert info.last_run.exit_reason == ExitReason.STOPPED
    handle.remove()


def test_with_block_destroy(image):
    import burrow.sync
    from burrow import errors

    with burrow.sync.Sandbox.create("with-destroy", image=image, destroy=True) as sb:
        sb.fs.write("/tmp/x", b"x")
    with pytest.raises(errors.SandboxNotFoundError):
        burrow.sync.Sandbox.get("with-destroy")
    with burrow.sync.Sandbox.connect_or_create("with-destroy-2", image=image, destroy=True) as sb:
        assert sb.status.value == "running"
    with pytest.raises(errors.SandboxNotFoundError):
        burrow.sync.Sandbox.get("with-destroy-2")


def test_with_block_exception_propagates_and_stops(image):
    import burrow.sync
    from burrow import Status

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with burrow.sync.Sandbox.create("with-raise", image=image):
            raise Boom()
    assert burrow.sync.Sandbox.get("with-raise").status == Status.STOPPED


async def test_sync_refuses_a_running_event_loop(image):
    import burrow.sync

    with pytest.raises(RuntimeError):
        burrow.sync.Sandbox.get("anything")


async def test_async_with_block(image):
    from burrow import Sandbox, Status, errors

    async with await Sandbox.create("async-with", image=image) as sb:
        assert (await sb.exec(["echo", "in"])).stdout == b"in\n"
    assert (await Sandbox.get("async-with")).status == Status.STOPPED

    async with await Sandbox.connect_or_create("async-with-d", image=image, destroy=True) as sb:
        assert sb.status == Status.RUNNING
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("async-with-d")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with await Sandbox.create("async-with-raise", image=image, destroy=True):
            raise Boom()
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("async-with-raise")


def test_sync_start_by_name_list_page_modify_ping(image):
    """The lifecycle document's shapes through the sync facade: start by
    name, a list page of handles with a status snapshot, memory in MiB,
    modify(cpus=, memory=), ping().latency, durations in seconds."""
    import burrow.sync
    from burrow import Ping, Status, errors

    # Best effort: the shapes are the point here, and an unprivileged
    # user's host without a delegated cgroup refuses an enforced limit.
    sb = burrow.sync.Sandbox.create(
        "sync-shapes", image=image, memory=256, best_effort_limits=True, idle_timeout="5m"
    )
    assert sb.status == Status.RUNNING
    config = sb.info().config
    assert (config["memory_mb"], config["idle_timeout"]) == (256, 300)
    ping = sb.ping()
    assert isinstance(ping, Ping) and isinstance(ping.latency, float) and ping.latency > 0
    plan = sb.modify(cpus=2, memory=512)
    assert (plan.info.config["cpus"], plan.info.config["memory_mb"]) == (2, 512)
    with pytest.raises(errors.InvalidStateError):
        burrow.sync.Sandbox.start("sync-shapes")  # running: not startable
    with pytest.raises(TypeError):
        burrow.sync.Sandbox.create("other", image=image, memory=256, memory_mb=512)

    sb.stop()
    assert sb.status == Status.STOPPED, "the snapshot follows the record stop returned"
    page = burrow.sync.Sandbox.list()
    assert [(h.name, h.status) for h in page.sandboxes] == [("sync-shapes", Status.STOPPED)]
    assert [i.id for i in page.infos] == [sb.id]
    handle = page.sandboxes[0]
    assert handle.id == sb.id

    again = burrow.sync.Sandbox.start("sync-shapes")
    assert (again.id, again.generation, again.status) == (sb.id, 2, Status.RUNNING)
    assert handle.status == Status.STOPPED, "a snapshot, read without a call"
    assert handle.info().status == Status.RUNNING
    assert handle.status == Status.RUNNING, "updated by the fresh record"

    # A listed handle stays bound to its id: it never acts on a replacement.
    again.destroy()
    burrow.sync.Sandbox.create("sync-shapes", image=image)
    with pytest.raises(errors.SandboxReplacedError):
        handle.info()
    burrow.sync.Sandbox.get("sync-shapes").destroy()

"""The lifecycle document's Python samples (the "Lifecycle" page of the
sandbox documentation, read with microsandbox as burrow), each exactly as
written, in the document's order, against real sandboxes of a fresh burrow
home, with checks of what the text says between them: the Python twin of
core/cli/tests/lifecycle_doc.rs.

The image ``python`` is the busybox demo rootfs ($BURROW_TEST_IMAGE)
imported under that name (the home's ``images/named/python`` is a symlink
to it).

The samples are separate snippets of one page, so the glue between them (a
destroy of the previous ``worker``, a start where a sample needs a running
sandbox, the assertions) is the test's, never an edit of a sample. Each
sample sits between a ``# ---- sample`` and a ``# ---- end`` line, its text
verbatim; the document writes them at top level with ``await``, so they are
indented into the test's async function (the wrapper they need to be valid
Python). The two samples of "Create a sandbox" are about what happens when
the creating process exits, so each runs, verbatim, in a Python process of
its own that then exits.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from datetime import timedelta

import pytest

import _support

#: "Create a sandbox", the first sample (the attached one).
CREATE_ATTACHED = """\
# Local attached handle: sandbox stops when your process exits
sb = await Sandbox.create("worker", image="python")
"""

#: "Create a sandbox", the second sample (the detached one).
CREATE_DETACHED = """\
# Detached: sandbox survives after your process exits
sb = await Sandbox.create("worker", image="python", detached=True)
await sb.detach()
"""

#: A Python process running one sample in an async function, then exiting
#: (it reports the sandbox's id on stdout).
CHILD = """\
import asyncio
from burrow import Sandbox

async def main() -> None:
{sample}
    print(sb.id, flush=True)

asyncio.run(main())
"""


async def run_in_child(sample: str) -> str:
    """Runs ``sample`` in a new Python process (the installed package, this
    test's home from the environment) until it exits; the id it created."""
    code = CHILD.format(sample=textwrap.indent(sample, "    "))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"the sample's process failed:\n{err.decode(errors='replace')}"
    return out.decode().strip()


async def gone(name: str) -> None:
    """Removes whatever ``name`` is now (glue between samples)."""
    from burrow import Sandbox, errors

    try:
        handle = await Sandbox.get(name)
    except errors.SandboxNotFoundError:
        return
    await handle.destroy()


@pytest.mark.slow
async def test_every_python_sample_of_the_lifecycle_document_runs_as_written(burrow_home, capsys):
    if _support.kube_mode():
        pytest.skip("the document's image is the local busybox rootfs named python")
    from burrow import ExitReason, Ping, Sandbox, Status, errors

    named = os.path.join(burrow_home, "images", "named")
    os.makedirs(named)
    os.symlink(_support.test_image(), os.path.join(named, "python"))

    # ---- Create a sandbox: the attached sandbox stops when its process
    # exits, the detached one survives it.
    attached_id = await run_in_child(CREATE_ATTACHED)
    handle = await Sandbox.get("worker")
    assert handle.id == attached_id
    info = await handle.wait_for_status([Status.STOPPED, Status.CRASHED], timeout=60)
    assert (info.status, info.detached) == (Status.STOPPED, False)
    assert info.last_run is not None and info.last_run.exit_reason == ExitReason.OWNER_EXITED
    await gone("worker")

    detached_id = await run_in_child(CREATE_DETACHED)
    handle = await Sandbox.get("worker")
    assert handle.id == detached_id
    assert handle.status == "running", "it survived its process"
    info = await handle.info()
    assert (info.status, info.detached, info.generation) == (Status.RUNNING, True, 1)
    # It named no memory: the host's default where the host holds one.
    created_memory = info.config.get("memory_mb")

    # ---- Converge on a named sandbox: the running detached `worker` is
    # connected to, its own configuration winning over memory=1024.
    # ---- sample
    sb = await Sandbox.connect_or_create(
        "worker",
        image="python",
        memory=1024,
    )
    # ---- end
    assert sb.id == detached_id
    assert sb.status == "running"
    info = await sb.info()
    assert info.config.get("memory_mb") == created_memory != 1024, "an existing sandbox keeps its persisted resources"
    assert info.generation == 1, "connected, not started again"

    # A metadata handle of the stopped sandbox starts exactly it.
    await sb.stop()
    # ---- sample
    handle = await Sandbox.get("worker")
    sb = await handle.connect_or_start()
    # ---- end
    assert handle.id == detached_id and sb.id == detached_id
    assert handle.status == "running", "the handle's snapshot follows the start it made"
    assert sb.status == "running"
    assert (await sb.info()).generation == 2

    # When the name is missing, the same converging sample creates, with
    # the memory.
    await gone("worker")
    # ---- sample
    sb = await Sandbox.connect_or_create(
        "worker",
        image="python",
        memory=1024,
    )
    # ---- end
    assert sb.id != detached_id
    info = await sb.info()
    assert (info.status, info.generation, info.config["memory_mb"]) == (Status.RUNNING, 1, 1024)
    worker_id = sb.id

    # ---- Stop and restart (the sample's two halves, with the check of the
    # stopped sandbox between them)
    # ---- sample
    await sb.stop()
    # ---- end
    assert sb.status == "stopped"
    handle = await Sandbox.get("worker")
    assert handle.status == "stopped"
    # ---- sample
    # Later, resume where you left off
    sb = await Sandbox.start("worker")
    # ---- end
    assert sb.id == worker_id, "the same sandbox, started again"
    assert sb.status == "running"
    info = await sb.info()
    assert (info.status, info.generation) == (Status.RUNNING, 2)
    assert info.config["memory_mb"] == 1024, "its configuration preserved"
    with pytest.raises(errors.InvalidStateError):
        await Sandbox.start("worker")  # running: a start is for created/stopped/crashed

    # ---- Configuration
    # ---- sample
    plan = await sb.modify(cpus=4, memory=4096)
    # ---- end
    fields = {change.field for change in plan.changes}
    assert {"cpus", "memory_mb"} <= fields, fields
    assert (plan.info.config["cpus"], plan.info.config["memory_mb"]) == (4, 4096)
    config = (await sb.info()).config
    assert (config["cpus"], config["memory_mb"]) == (4, 4096)

    # ---- Ping and touch (the document has no Python sample: the same
    # calls, a health check and the explicit keepalive)
    ping = await sb.ping()
    assert isinstance(ping, Ping)
    assert isinstance(ping.latency, float) and 0 < ping.latency < 30, ping
    await sb.touch()

    # ---- Kill immediately
    # ---- sample
    await sb.kill()
    # ---- end
    assert sb.status == "stopped"
    info = await sb.info()
    assert info.status == Status.STOPPED
    assert info.last_run is not None and info.last_run.exit_reason == ExitReason.KILLED

    # ---- Detach
    sb = await Sandbox.start("worker")
    # ---- sample
    await sb.detach()
    # ---- end
    assert (await sb.info()).detached

    # ---- Request drain, then wait until stopped
    # ---- sample
    await sb.request_drain()
    # ---- end
    assert sb.status in ("draining", "stopped")
    # ---- sample
    result = await sb.wait_until_stopped()
    # ---- end
    assert result.status == Status.STOPPED
    assert result.last_run is not None and result.last_run.exit_reason == ExitReason.DRAIN
    assert sb.status == "stopped"

    # ---- Destroy
    sb = await Sandbox.start("worker")
    # ---- sample
    await sb.destroy()
    # ---- end
    with pytest.raises(errors.SandboxNotFoundError) as not_found:
        await Sandbox.get("worker")
    assert not_found.value.code == "not_found"

    # ---- Remove: a stopped sandbox (a running one is refused).
    sb = await Sandbox.create("worker", image="python")
    assert sb.id != worker_id, "recreating the name gives a different id"
    with pytest.raises(errors.InvalidStateError):
        await Sandbox.remove("worker")
    await sb.stop()
    # ---- sample
    await Sandbox.remove("worker")
    # ---- end
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("worker")

    # ---- List and inspect: one running, one stopped.
    await Sandbox.create("worker", image="python")
    await (await Sandbox.create("idle", image="python")).stop()
    capsys.readouterr()
    # ---- sample
    for handle in (await Sandbox.list()).sandboxes:
        print(f"{handle.name}: {handle.status}")
    # ---- end
    printed = capsys.readouterr().out.splitlines()
    assert sorted(printed) == ["idle: stopped", "worker: running"], printed
    # ---- sample
    handle = await Sandbox.get("worker")
    print(handle.status)  # "running" | "stopped" | ...
    # ---- end
    assert capsys.readouterr().out == "running\n"
    page = await Sandbox.list(status="stopped")
    assert [(h.name, h.status) for h in page.sandboxes] == [("idle", Status.STOPPED)]
    await gone("worker")
    await gone("idle")

    # ---- Sandbox process policies: plain numbers are seconds.
    # ---- sample
    sb = await Sandbox.create(
        "worker",
        image="python",
        max_duration=3600,
        idle_timeout=300,
    )
    # ---- end
    config = (await sb.info()).config
    assert (config["max_duration"], config["idle_timeout"]) == (3600, 300)
    await gone("worker")
    # The same policies as a timedelta and as duration text.
    sb = await Sandbox.create(
        "worker", image="python", max_duration=timedelta(hours=1), idle_timeout="5m"
    )
    config = (await sb.info()).config
    assert (config["max_duration"], config["idle_timeout"]) == (3600, 300)
    await gone("worker")
    # A negative number of seconds is the core's typed error, and nothing
    # is made.
    with pytest.raises(errors.InvalidArgumentError) as bad:
        await Sandbox.create("worker", image="python", idle_timeout=-5)
    assert bad.value.code == "invalid_argument"
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("worker")

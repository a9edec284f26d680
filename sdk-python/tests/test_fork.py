"""Forks from the installed package: a running sandbox copied into started
sandboxes that hold its files, named in order; the typed errors (a bad
count, a taken name: no copy left; a stopped parent), through the async API
and the synchronous facade, against real containers."""

from __future__ import annotations

import pytest


async def test_copies_are_started_with_the_parents_files(image):
    from burrow import Sandbox, Status, errors

    parent = await Sandbox.create("py-fork", image=image)
    await parent.exec(["sh", "-c", "echo from-python > /kept && rm /bin/false"])
    assert (await Sandbox.capabilities()).fork

    copies = await parent.fork(2)
    assert [c.name for c in copies] == ["py-fork-fork-1", "py-fork-fork-2"]
    assert len({c.id for c in copies} | {parent.id}) == 3
    for c in copies:
        assert (await c.info()).status == Status.RUNNING
        out = await c.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"])
        assert out.stdout == b"from-python\ngone\n"
    await copies[0].exec(["sh", "-c", "echo mine > /kept"])
    assert (await parent.exec(["cat", "/kept"])).stdout == b"from-python\n"

    named = await parent.handle().fork(names=["py-fork-named"])
    assert [h.name for h in named] == ["py-fork-named"]
    assert (await named[0].info()).status == Status.RUNNING

    with pytest.raises(errors.InvalidArgumentError):
        await parent.fork(0)
    with pytest.raises(errors.SandboxAlreadyExistsError) as taken:
        await parent.fork(names=["py-fork-free", "py-fork-named"])
    assert taken.value.code == "already_exists"
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("py-fork-free")
    with pytest.raises(TypeError):
        await parent.fork(names="py-fork-one-string")

    for c in copies:
        await c.destroy()
    await named[0].destroy()
    await parent.stop()
    with pytest.raises(errors.InvalidStateError):
        await parent.handle().fork()
    await parent.destroy()


def test_the_synchronous_facade_forks(image):
    from burrow.sync import Sandbox

    parent = Sandbox.create("py-fork-sync", image=image)
    parent.fs.write("/note", b"before the fork")
    (copy,) = parent.fork()
    assert copy.name == "py-fork-sync-fork-1"
    assert copy.fs.read("/note") == b"before the fork"
    copy.destroy()
    parent.destroy()

"""Snapshots from the installed package: a sandbox's files saved by name,
sandboxes created from ``snapshot:NAME``, the store listed and cleaned, and
the typed errors (taken and bad names, a snapshot in use), through the
async API and the synchronous facade, against real containers."""

from __future__ import annotations

import pytest


async def test_a_snapshot_is_an_image_of_what_the_sandbox_changed(image):
    from burrow import Driver, Sandbox, SnapshotKind, Status, errors

    src = await Sandbox.create("py-snap-src", image=image)
    await src.exec(["sh", "-c", "echo from-python > /kept && rm /bin/false"])
    snap = await src.snapshot("py-base")
    assert snap.name == "py-base"
    assert snap.kind is SnapshotKind.FILESYSTEM
    assert snap.image == "snapshot:py-base"
    assert snap.digest.startswith("sha256:")
    assert snap.size > 0
    assert snap.source_id == src.id
    assert snap.source_name == "py-snap-src"
    assert snap.base_image == image
    assert isinstance(snap.driver, Driver)
    assert (await src.info()).status == Status.RUNNING

    with pytest.raises(errors.SandboxAlreadyExistsError) as taken:
        await src.snapshot("py-base")
    assert taken.value.code == "already_exists"
    with pytest.raises(errors.InvalidArgumentError):
        await src.snapshot("no/slash/x")
    with pytest.raises(ValueError):
        await src.snapshot("x", kind="memory")

    copy = await Sandbox.create("py-snap-copy", image=snap.image)
    out = await copy.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"])
    assert out.stdout == b"from-python\ngone\n"

    assert [s.name for s in await Sandbox.snapshots()] == ["py-base"]
    assert (await Sandbox.get_snapshot("py-base")).digest == snap.digest
    with pytest.raises(errors.SnapshotInUseError) as in_use:
        await Sandbox.remove_snapshot("py-base")
    assert in_use.value.code == "snapshot_in_use"
    assert in_use.value.sandboxes == ["py-snap-copy"]

    await copy.destroy()
    await src.destroy()
    await Sandbox.remove_snapshot("py-base")
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get_snapshot("py-base")
    assert await Sandbox.snapshots() == []


def test_the_synchronous_facade_takes_snapshots_of_a_stopped_sandbox(image):
    from burrow import Status
    from burrow.sync import Sandbox

    sb = Sandbox.create("py-snap-sync", image=image)
    sb.fs.write("/note", b"written before the stop")
    handle = sb.handle()
    sb.stop()
    snap = handle.snapshot("py-sync")
    assert handle.info().status == Status.STOPPED
    copy = Sandbox.create("py-sync-copy", image=snap.image)
    assert copy.fs.read("/note") == b"written before the stop"
    copy.destroy()
    handle.destroy()
    Sandbox.remove_snapshot("py-sync")
    assert Sandbox.snapshots() == []

"""Warm pools from the installed package: a pool defined with a create's
options, a create of its configuration claiming one of its running
sandboxes (the creator's name, labels and environment), the counts, a
scale and a removal, and the typed errors, through the async API and the
synchronous facade, against real containers."""

from __future__ import annotations

from datetime import datetime

import pytest


async def test_a_create_claims_a_running_sandbox_of_a_pool(image):
    from burrow import PoolInfo, Sandbox, Status, errors

    pool = await Sandbox.create_pool("py-pool", 1, image=image, env={"POOLED": "yes"})
    assert isinstance(pool, PoolInfo)
    assert (pool.name, pool.size, pool.warm, pool.starting) == ("py-pool", 1, 1, 0)
    assert (pool.claims, pool.misses) == (0, 0)
    assert pool.config["env"] == {"POOLED": "yes"}
    assert pool.config["image"] == image
    assert isinstance(pool.config["startup_timeout"], float)  # seconds
    assert pool.last_refill is not None and pool.last_refill >= 0
    assert isinstance(pool.created_at, datetime)
    # Warm sandboxes are nobody's: not listed.
    assert (await Sandbox.list()).sandboxes == []

    sb = await Sandbox.create(
        "py-claimed", image=image, env={"POOLED": "yes", "TASK": "7"}, labels={"team": "py"}
    )
    info = await sb.info()
    assert (info.name, info.status) == ("py-claimed", Status.RUNNING)
    assert info.config["labels"] == {"team": "py"}
    out = await sb.exec(["sh", "-c", "echo $POOLED $TASK"])
    assert out.stdout == b"yes 7\n"
    claimed = await Sandbox.get_pool("py-pool")
    assert (claimed.claims, claimed.misses) == (1, 0)
    assert [h.name for h in (await Sandbox.list()).sandboxes] == ["py-claimed"]

    # A define never claims.
    defined = await Sandbox.define("py-defined", image=image, env={"POOLED": "yes"})
    assert (await defined.info()).status == Status.CREATED
    assert (await Sandbox.get_pool("py-pool")).claims == 1

    with pytest.raises(errors.SandboxAlreadyExistsError) as taken:
        await Sandbox.create_pool("py-pool", 1, image=image)
    assert taken.value.code == "already_exists"
    with pytest.raises(errors.InvalidNameError):
        await Sandbox.create_pool("no/slash/x", 1, image=image)
    with pytest.raises(errors.InvalidArgumentError):
        await Sandbox.create_pool("py-big", 65, image=image)
    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.create_pool("py-labelled", 1, image=image, labels={"k": "v"})
    with pytest.raises(errors.InvalidArgumentError):
        await Sandbox.scale_pool("py-pool", 65)
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.scale_pool("py-nope", 1)
    assert [p.name for p in await Sandbox.list_pools()] == ["py-pool"]

    scaled = await Sandbox.scale_pool("py-pool", 0)
    assert (scaled.size, scaled.warm, scaled.starting) == (0, 0, 0)
    await Sandbox.remove_pool("py-pool")
    with pytest.raises(errors.SandboxNotFoundError) as gone:
        await Sandbox.get_pool("py-pool")
    assert gone.value.code == "not_found"
    assert await Sandbox.list_pools() == []
    # The claimed sandbox is an ordinary one now.
    assert (await sb.info()).status == Status.RUNNING
    await sb.destroy()
    await defined.destroy()


def test_the_synchronous_facade_manages_pools(image):
    from burrow import Status, errors
    from burrow.sync import Sandbox

    pool = Sandbox.create_pool("py-sync-pool", 0, image=image)
    assert (pool.size, pool.warm) == (0, 0)
    assert Sandbox.scale_pool("py-sync-pool", 1).warm == 1
    sb = Sandbox.create("py-sync-claimed", image=image)
    assert sb.info().status == Status.RUNNING
    assert Sandbox.get_pool("py-sync-pool").claims == 1
    sb.destroy()
    Sandbox.remove_pool("py-sync-pool")
    with pytest.raises(errors.SandboxNotFoundError):
        Sandbox.remove_pool("py-sync-pool")
    assert Sandbox.list_pools() == []

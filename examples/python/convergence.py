"""Convergence across processes (Python).

Starts N processes (default 8) that all call
``Sandbox.connect_or_create("shared-py", ...)`` at the same moment, prints
the single id they converge on (one create, one start: the same runtime
generation everywhere), then destroys the sandbox.

    python examples/python/convergence.py [IMAGE] [N]
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import sys
from typing import Any, List, Tuple

from burrow import Sandbox

NAME = "shared-py"


def image() -> str:
    """The image reference. An existing directory given as a relative path is
    made absolute (burrow takes paths starting with `/`, `./` or `../`, and
    reads anything else as a registry reference or an imported name)."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BURROW_DEMO_IMAGE", "demo/busybox")
    return os.path.abspath(raw) if os.path.isdir(raw) else raw


async def converge(img: str) -> Tuple[str, int]:
    sb = await Sandbox.connect_or_create(NAME, image=img, detached=True)
    return (sb.id, sb.generation)


def worker(img: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        results.put(asyncio.run(converge(img)))
    except Exception as e:  # reported to the parent
        results.put(("error", repr(e)))


async def cleanup() -> None:
    handle = await Sandbox.get(NAME)
    await handle.destroy()


def main() -> int:
    img = image()
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(img, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    got: List[Tuple[str, Any]] = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    errors = [g for g in got if g[0] == "error"]
    if errors:
        print("failures:", errors)
        return 1
    ids = {g[0] for g in got}
    generations = {g[1] for g in got}
    print(f"{n} processes converged on {sorted(ids)} (generation {sorted(generations)})")
    asyncio.run(cleanup())
    return 0 if len(ids) == 1 and len(generations) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())

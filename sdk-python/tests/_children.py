"""Bodies of the child processes the tests start with multiprocessing ('spawn'):
top-level functions of an importable module, so a fresh interpreter can run
them. Each child points itself at the parent's burrow home, does its part
through the public async API and reports plain data (or a burrow error,
which must survive pickling) on a queue.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from typing import Any


def _setup(configure: dict) -> None:
    import burrow

    for key, var in (("home", "BURROW_HOME"), ("burrow_bin", "BURROW_BIN"), ("agent_bin", "BURROW_AGENT_BIN")):
        if key in configure:
            os.environ[var] = configure[key]
    burrow.configure(**configure)


def converge(index: int, name: str, image: str, configure: dict, barrier: Any, results: Any) -> None:
    """connect_or_create(name, detached) at the barrier; reports id and generation."""
    try:
        _setup(configure)
        from burrow import Sandbox

        async def body() -> dict:
            sb = await Sandbox.connect_or_create(name, image=image, detached=True)
            info = await sb.info()
            return {"id": sb.id, "generation": sb.generation, "status": info.status.value}

        barrier.wait(timeout=120)
        report = {"ok": True, "pid": os.getpid(), **asyncio.run(body())}
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        report = {"ok": False, "pid": os.getpid(), "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
    results.put((index, report))


def start_stopped(index: int, name: str, configure: dict, barrier: Any, results: Any) -> None:
    """get(name).connect_or_start() at the barrier; reports id and generation."""
    try:
        _setup(configure)
        from burrow import Sandbox

        async def body() -> dict:
            handle = await Sandbox.get(name)
            sb = await handle.connect_or_start()
            return {"id": sb.id, "generation": sb.generation}

        barrier.wait(timeout=120)
        report = {"ok": True, "pid": os.getpid(), **asyncio.run(body())}
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        report = {"ok": False, "pid": os.getpid(), "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
    results.put((index, report))


def raise_not_found(configure: dict, results: Any) -> None:
    """Provokes not_found and sends the exception object itself to the parent."""
    try:
        _setup(configure)
        from burrow import Sandbox

        async def body() -> None:
            await Sandbox.get("no-such-sandbox")

        asyncio.run(body())
        results.put(("no error", None))
    except BaseException as e:  # noqa: BLE001 - the point: ship the error
        results.put(("error", e))


def run_all(target, n: int, args: tuple, timeout: float = 180.0) -> list[dict]:
    """Runs `target(i, *args, barrier, queue)` in `n` spawned processes; returns the reports in order."""
    import multiprocessing
    import queue as queue_mod
    import time

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(i, *args, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    reports: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(reports) < n and time.monotonic() < deadline:
            try:
                i, report = results.get(timeout=0.5)
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
                continue
            reports[i] = report
    finally:
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(10)
    return [
        reports.get(
            i,
            {"ok": False, "code": None, "error": f"process {i} reported nothing (exit code {p.exitcode})"},
        )
        for i, p in enumerate(procs)
    ]

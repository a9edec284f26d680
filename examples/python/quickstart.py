"""burrow quickstart (Python, async).

Creates the sandbox ``quickstart-py`` (replacing an earlier one), runs a few
commands, writes and reads a file, stops it and destroys it.

    python examples/python/quickstart.py [IMAGE]

IMAGE: the first argument, else $BURROW_DEMO_IMAGE, else ./demo/busybox.
Needs the `burrow` binary (BURROW_BIN, else `burrow` on PATH, as after
`cargo install --path core/cli`); its supervisor carries the guest agent.
"""

from __future__ import annotations

import asyncio
import os
import sys

from burrow import Sandbox


def image() -> str:
    """The image reference. An existing directory given as a relative path is
    made absolute (burrow takes paths starting with `/`, `./` or `../`, and
    reads anything else as a registry reference or an imported name)."""
    raw = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BURROW_DEMO_IMAGE", "demo/busybox")
    return os.path.abspath(raw) if os.path.isdir(raw) else raw


async def main() -> None:
    sb = await Sandbox.create(
        "quickstart-py",
        image=image(),
        memory=256,  # MiB
        # Enforced where the host can (root, or a delegated cgroup), else run without.
        best_effort_limits=True,
        env={"GREETING": "hello"},
        replace=True,
    )
    print(f"{sb.name} ({sb.id}) is {sb.status}")

    out = await sb.exec(["sh", "-c", "echo $GREETING from the sandbox"])
    print(out.stdout_text, end="")
    out = await sb.exec(["uname", "-a"])
    print(out.check().stdout_text, end="")

    await sb.fs.write("/tmp/note.txt", "some text")
    print("read back:", await sb.fs.read_text("/tmp/note.txt"))

    ping = await sb.ping()
    print(f"agent reachable in {ping.latency * 1000:.1f} ms")

    info = await sb.stop()
    print(f"stopped: {info.status} ({info.last_run.exit_reason if info.last_run else None})")
    sb = await Sandbox.start("quickstart-py")  # same id, its configuration kept
    print(f"started again: {sb.status}, run {sb.generation}")
    await sb.destroy()
    print("destroyed")


if __name__ == "__main__":
    asyncio.run(main())

"""The installed wheel alone runs a sandbox: run with no burrow on PATH and
no BURROW_* variables (scripts/python-sdk.sh runs it as an unprivileged
user, in a fresh venv). Exits non-zero, saying why, if anything fails.

Usage: python self_contained.py IMAGE
"""

import asyncio
import os
import shutil
import sys

from burrow import Sandbox


async def main(image: str) -> None:
    assert shutil.which("burrow") is None, "a burrow binary is on PATH"
    leftover = [k for k in os.environ if k.startswith("BURROW_") and k != "BURROW_HOME"]
    assert not leftover, f"BURROW_ variables are set: {leftover}"
    sb = await Sandbox.create("self-contained", image=image)
    try:
        out = await sb.exec(["sh", "-c", "echo hello from $(id -u)"])
        assert out.exit_code == 0, out
        assert out.stdout == b"hello from 0\n", out.stdout
        print(f"ok: {out.stdout_text.strip()} (as uid {os.getuid()})")
    finally:
        await sb.destroy()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

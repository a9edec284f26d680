#!/usr/bin/env python3
"""Generates the synchronous facade `burrow.sync` (sdk-python/python/burrow/
sync.py) from the async API (`burrow._api`), its files and file streams
(`burrow._sync_files`) from the async ones (`burrow._files`) and its
processes (`burrow._sync_process`) from `burrow._process`, so the two never
drift.

The async API awaits only calls of the core (`burrow._native`), whose
objects carry their mode; the facade is the same source with the `async`
and `await` keywords removed, the async protocols renamed to their sync
counterparts, and the module's calls taken in the blocking mode
(`_native.SYNC`, which refuses to run inside an event loop).

Usage: python3 scripts/gen-python-sync.py [--check]
  --check: exit 1 if sync.py, _sync_files.py or _sync_process.py is not
           what this script generates (CI).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "sdk-python/python/burrow"

NOTICE = """GENERATED from ``burrow/{src}`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date)."""

API_HEADER = '''"""The synchronous facade: the async API with blocking methods.

{notice}

Each call runs on the binding's runtime with the GIL released (other Python
threads keep running; Ctrl-C cancels the call). Not for use inside a running
event loop: there every call raises ``RuntimeError`` (use the async API).
"""
'''

FILES_HEADER = '''"""Files of a running sandbox (the blocking API): :class:`Fs` (``sb.fs``), and
files read and written as streams (see ``Fs.open_read`` and
``Fs.open_write``).

{notice}
"""
'''

PROCESS_HEADER = '''"""A process with streamed output (the blocking API): see ``Sandbox.spawn``.

{notice}
"""
'''

# (pattern, replacement), applied in order to every module's source after its
# docstring; each must match in one module at least.
RULES = [
    (r"\basync def ", "def "),
    (r"\basync for ", "for "),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\b_native\.ASYNC\b", "_native.SYNC"),
    (r"\bc\.achunks\b", "c.chunks"),
    (r"\bc\.AsyncByteSource\b", "c.ByteSource"),
]

# (async source, sync module, header, rules of that module alone: applied
# first, each must match there).
MODULES = [
    (
        "_api.py",
        "sync.py",
        API_HEADER,
        [
            (r'(__all__ = \[[^\]]*"Process")\]', r'\1, "configure"]'),
            (r"from \. import _native\n", "from . import _native\nfrom ._common import configure\n"),
            (r"from \._files import ", "from ._sync_files import "),
            (r"from \._process import ", "from ._sync_process import "),
        ],
    ),
    (
        "_files.py",
        "_sync_files.py",
        FILES_HEADER,
        [
            # `aclose` is the async generators' name; the blocking reader
            # has `close` alone (as files have).
            (r"\n    async def aclose\(self\) -> None:\n(?:        .*\n)+", ""),
            (r"\banother task\b", "another thread"),
        ],
    ),
    ("_process.py", "_sync_process.py", PROCESS_HEADER, []),
]


def generate() -> dict:
    """Each sync module's path and text."""
    out = {}
    used = {pattern: 0 for pattern, _ in RULES}
    for src_name, dst_name, header, own in MODULES:
        src = PKG / src_name
        text = src.read_text()
        if not text.startswith('"""'):
            sys.exit(f"{src}: expected a module docstring first")
        end = text.index('"""', 3) + 3
        body = text[end:]
        for pattern, replacement in own:
            body, n = re.subn(pattern, replacement, body)
            if n == 0:
                sys.exit(f"rule {pattern!r} matched nothing in {src}: update {__file__}")
        for pattern, replacement in RULES:
            body, n = re.subn(pattern, replacement, body)
            used[pattern] += n
        notice = NOTICE.format(src=src_name)
        out[PKG / dst_name] = header.format(notice=notice) + body
    for pattern, n in used.items():
        if n == 0:
            sys.exit(f"rule {pattern!r} matched nothing in any module: update {__file__}")
    return out


def main() -> None:
    out = generate()
    if sys.argv[1:] == ["--check"]:
        stale = [str(dst) for dst, text in out.items() if dst.read_text() != text]
        if stale:
            sys.exit(f"{', '.join(stale)} out of date: run python3 scripts/gen-python-sync.py")
        return
    for dst, text in out.items():
        dst.write_text(text)


if __name__ == "__main__":
    main()

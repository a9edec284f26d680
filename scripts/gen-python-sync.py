#!/usr/bin/env python3
"""Generates the synchronous facade `burrow.sync` (sdk-python/python/burrow/
sync.py) from the async API (`burrow._api`), so the two never drift.

The async API awaits only calls of the core (`burrow._native`), whose
objects carry their mode; the facade is the same source with the `async`
and `await` keywords removed, the async protocols renamed to their sync
counterparts, and the module's calls taken in the blocking mode
(`_native.SYNC`, which refuses to run inside an event loop).

Usage: python3 scripts/gen-python-sync.py [--check]
  --check: exit 1 if sync.py is not what this script generates (CI).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "sdk-python/python/burrow/_api.py"
DST = ROOT / "sdk-python/python/burrow/sync.py"

HEADER = '''"""The synchronous facade: the async API with blocking methods.

GENERATED from ``burrow/_api.py`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date).

Each call runs on the binding's runtime with the GIL released (other Python
threads keep running; Ctrl-C cancels the call). Not for use inside a running
event loop: there every call raises ``RuntimeError`` (use the async API).
"""
'''

# (pattern, replacement), applied in order to the source after its docstring.
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
    (r'(__all__ = \[[^\]]*"Process")\]', r'\1, "configure"]'),
    (r"from \. import _native\n", "from . import _native\nfrom ._common import configure\n"),
]


def generate() -> str:
    text = SRC.read_text()
    if not text.startswith('"""'):
        sys.exit(f"{SRC}: expected a module docstring first")
    end = text.index('"""', 3) + 3
    body = text[end:]
    for pattern, replacement in RULES:
        body, n = re.subn(pattern, replacement, body)
        if n == 0:
            sys.exit(f"rule {pattern!r} matched nothing in {SRC}: update {__file__}")
    return HEADER + body


def main() -> None:
    out = generate()
    if sys.argv[1:] == ["--check"]:
        if DST.read_text() != out:
            sys.exit(f"{DST} is out of date: run python3 scripts/gen-python-sync.py")
        return
    DST.write_text(out)


if __name__ == "__main__":
    main()

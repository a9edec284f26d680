"""Type stubs of the native module ``burrow._core`` (crate bindings/python,
the Python adapter of the binding core ``bindings/core``).

``call`` runs one operation of the core (JSON text, tagged by ``op``) on a
target object (``None``: the module). ``blocking=False`` (default) returns
an ``asyncio.Future`` bound to the running loop (``RuntimeError`` without
one); ``True`` blocks with the GIL released and returns the value. A
failure raises the ``burrow.errors`` class of its code.

Objects (``NativeObject.kind``): ``"sandbox"`` (live or a handle),
``"process"`` (``next``, ``write``, ``close_stdin``, ``signal``), ``"logs"``
(``next``), ``"file_reader"`` (from ``fs_open_read``; ``next``: bytes, or
``None`` at the end of the file; ``close``: a pending ``next`` returns
``None`` at once, the guest's file is released) and ``"file_writer"`` (from
``fs_open_write``; ``write`` with the call's data, ``finish``: the number of
bytes written; ``close``: the write is abandoned, later calls raise
``InvalidArgumentError``). ``exec`` returns the tuple ``(stdout, stderr, exit_code,
signal, timed_out, truncated)``.
"""

from __future__ import annotations

from typing import Any, List, Optional

class NativeObject:
    @property
    def kind(self) -> str: ...
    @property
    def id(self) -> Optional[str]: ...
    @property
    def name(self) -> Optional[str]: ...
    @property
    def live(self) -> bool: ...
    @property
    def generation(self) -> int: ...
    @property
    def status(self) -> Optional[str]: ...

def call(
    target: Optional[NativeObject],
    op: str,
    data: Optional[bytes] = None,
    *,
    blocking: bool = False,
) -> Any: ...
def configure(home: Optional[str] = None) -> None: ...
def error_codes() -> List[str]: ...
def in_flight() -> int: ...
def _at_exit() -> None: ...

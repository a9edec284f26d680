"""A process with streamed output (the blocking API): see ``Sandbox.spawn``.

GENERATED from ``burrow/_process.py`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date).
"""


from __future__ import annotations

from typing import Iterator, Optional, Tuple

from . import _common as c
from . import _native
from .types import ExitStatus


class Process:
    """A process with streamed output (from :meth:`Sandbox.spawn`).

    ``for kind, data in proc`` yields ``("stdout" | "stderr", bytes)``
    until the process exits; then :attr:`exit_status` is set.
    """

    def __init__(self, native: _native.NativeProcess) -> None:
        self._n = native
        self._exit: Optional[ExitStatus] = None

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        """How the process ended, once its exit was seen."""
        return self._exit

    def __iter__(self) -> Iterator[Tuple[str, bytes]]:
        return self

    def __next__(self) -> Tuple[str, bytes]:
        while True:
            ev = self._n.next_event()
            if ev is None:
                raise StopIteration
            kind, payload = ev
            if kind == "exit":
                self._exit = c.exit_status(payload)
                continue
            return (str(kind), bytes(payload))

    def write(self, data: c.Data) -> None:
        """Writes to the process's stdin (spawned with ``stdin=True``)."""
        self._n.write(c.to_bytes(data))

    def close_stdin(self) -> None:
        """Closes the process's stdin."""
        self._n.close_stdin()

    def signal(self, signal: int) -> None:
        """Sends a signal to the process group."""
        self._n.signal(int(signal))

    def wait(self) -> ExitStatus:
        """Waits for the exit (output not yet read is discarded)."""
        while self._exit is None:
            ev = self._n.next_event()
            if ev is None:
                break
            if ev[0] == "exit":
                self._exit = c.exit_status(ev[1])
        if self._exit is None:
            raise RuntimeError("the process ended without an exit status")
        return self._exit

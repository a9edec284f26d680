"""A process with streamed output (the async API): see ``Sandbox.spawn``."""

from __future__ import annotations

from typing import AsyncIterator, Optional, Tuple

from . import _common as c
from . import _native
from .types import ExitStatus


class Process:
    """A process with streamed output (from :meth:`Sandbox.spawn`).

    ``async for kind, data in proc`` yields ``("stdout" | "stderr", bytes)``
    until the process exits; then :attr:`exit_status` is set.
    """

    def __init__(self, native: _native.NativeProcess) -> None:
        self._n = native
        self._exit: Optional[ExitStatus] = None

    @property
    def exit_status(self) -> Optional[ExitStatus]:
        """How the process ended, once its exit was seen."""
        return self._exit

    def __aiter__(self) -> AsyncIterator[Tuple[str, bytes]]:
        return self

    async def __anext__(self) -> Tuple[str, bytes]:
        while True:
            ev = await self._n.next_event()
            if ev is None:
                raise StopAsyncIteration
            kind, payload = ev
            if kind == "exit":
                self._exit = c.exit_status(payload)
                continue
            return (str(kind), bytes(payload))

    async def write(self, data: c.Data) -> None:
        """Writes to the process's stdin (spawned with ``stdin=True``)."""
        await self._n.write(c.to_bytes(data))

    async def close_stdin(self) -> None:
        """Closes the process's stdin."""
        await self._n.close_stdin()

    async def signal(self, signal: int) -> None:
        """Sends a signal to the process group."""
        await self._n.signal(int(signal))

    async def wait(self) -> ExitStatus:
        """Waits for the exit (output not yet read is discarded)."""
        while self._exit is None:
            ev = await self._n.next_event()
            if ev is None:
                break
            if ev[0] == "exit":
                self._exit = c.exit_status(ev[1])
        if self._exit is None:
            raise RuntimeError("the process ended without an exit status")
        return self._exit

"""Files read and written as streams (the blocking API): see ``Fs.open_read``
and ``Fs.open_write``.

GENERATED from ``burrow/_files.py`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date).
"""


from __future__ import annotations

from types import TracebackType
from typing import Iterator, Optional, Type

from . import _common as c
from . import _native


class FileReader:
    """A sandbox file being read as a stream (from :meth:`Fs.open_read`):
    ``for chunk in reader`` yields its bytes in chunks (at most
    256 KiB each) until the end of the file. Flow controlled: while the
    chunks are not taken, the sandbox waits (memory stays flat).
    :meth:`close` (or leaving ``with``) before the end abandons the
    read at once: a :meth:`read_chunk` pending in another thread returns
    ``None``, and the guest's file is released."""

    def __init__(self, native: _native.NativeFileReader) -> None:
        self._n: Optional[_native.NativeFileReader] = native

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = self.read_chunk()
        if chunk is None:
            raise StopIteration
        return chunk

    def read_chunk(self) -> Optional[bytes]:
        """The next chunk; ``None`` at the end of the file (or once closed)."""
        n = self._n
        if n is None:
            return None
        chunk = n.next()
        if chunk is None:
            self._n = None
            return None
        return bytes(chunk)

    def close(self) -> None:
        """Abandons the rest of the read (nothing more is read)."""
        n, self._n = self._n, None
        if n is not None:
            n.close()

    def __enter__(self) -> FileReader:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class FileWriter:
    """A sandbox file being written as a stream (from :meth:`Fs.open_write`):
    :meth:`write` appends (waiting while the sandbox has not taken the
    previous MiB), :meth:`finish` completes the file. A failure of the guest
    (a missing directory, no space) is raised by :meth:`finish` at the
    latest. :meth:`abandon` (or an exception leaving ``with``, or
    dropping it unfinished) abandons the write (what was written stays);
    leaving ``with`` normally finishes it."""

    def __init__(self, native: _native.NativeFileWriter) -> None:
        self._n = native
        self._done = False

    def write(self, data: c.Data) -> None:
        self._n.write(c.to_bytes(data))

    def finish(self) -> int:
        """Ends the file and waits until the sandbox has it: the number of
        bytes written."""
        self._done = True
        return int(self._n.finish())

    def abandon(self) -> None:
        """Abandons the write at once; a later :meth:`write` or
        :meth:`finish` raises :class:`errors.InvalidArgumentError`."""
        self._done = True
        self._n.close()

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._done:
            return
        if exc_type is None:
            self.finish()
        else:
            self.abandon()

"""Files of a running sandbox (the blocking API): :class:`Fs` (``sb.fs``), and
files read and written as streams (see ``Fs.open_read`` and
``Fs.open_write``).

GENERATED from ``burrow/_files.py`` by ``scripts/gen-python-sync.py``: do not
edit by hand (CI checks it is up to date).
"""


from __future__ import annotations

from types import TracebackType
from typing import Iterator, List, Optional, Type

from . import _common as c
from . import _native
from .types import DirEntry, FileStat


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


class Fs:
    """File operations in a running sandbox (``sb.fs``); paths are absolute
    guest paths."""

    def __init__(self, native: _native.NativeSandbox) -> None:
        self._n = native

    def read(self, path: str) -> bytes:
        return bytes(self._n.fs_read(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (self.read(path)).decode(encoding)

    def write(self, path: str, data: c.Data, *, mode: Optional[int] = None) -> None:
        self._n.fs_write(path, c.to_bytes(data), mode)

    def open_read(self, path: str) -> FileReader:
        """Opens a file to read as a stream of chunks; a missing file (or a
        directory) is the error here."""
        return FileReader(self._n.fs_open_read(path))

    def read_stream(self, path: str) -> Iterator[bytes]:
        """The file's bytes in chunks (``for chunk in
        sb.fs.read_stream(path)``); a missing file is raised by the first
        step of the iteration. Left early (``break``, an exception), the
        read is closed when the iteration is closed."""
        with self.open_read(path) as reader:
            for chunk in reader:
                yield chunk

    def open_write(
        self, path: str, *, mode: Optional[int] = None, append: bool = False
    ) -> FileWriter:
        """Opens a file to write as a stream: created (with ``mode``, default
        0o644) or truncated, or appended to with ``append=True``."""
        return FileWriter(self._n.fs_open_write(path, mode, append))

    def write_stream(
        self,
        path: str,
        source: c.ByteSource,
        *,
        mode: Optional[int] = None,
        append: bool = False,
    ) -> int:
        """Writes a file from ``source``, chunk by chunk: an (async) iterable
        of bytes, or a binary file object (read until it is exhausted), or
        bytes. The number of bytes written. If ``source`` raises, the write
        is abandoned (what was written stays) and the exception propagates."""
        with self.open_write(path, mode=mode, append=append) as writer:
            for chunk in c.chunks(source):
                writer.write(chunk)
            return writer.finish()

    def list(self, path: str) -> List[DirEntry]:
        return c.dir_entries(self._n.fs_list(path))

    def stat(self, path: str) -> FileStat:
        return c.file_stat(self._n.fs_stat(path))

    def exists(self, path: str) -> bool:
        return bool(self._n.fs_exists(path))

    def mkdir(self, path: str, *, parents: bool = False) -> None:
        self._n.fs_mkdir(path, parents)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._n.fs_remove(path, recursive)

    def rename(self, src: str, dst: str) -> None:
        self._n.fs_rename(src, dst)

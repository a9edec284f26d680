"""Files of a running sandbox (the async API): :class:`Fs` (``sb.fs``), and
files read and written as streams (see ``Fs.open_read`` and
``Fs.open_write``)."""

from __future__ import annotations

from types import TracebackType
from typing import AsyncIterator, List, Optional, Type

from . import _common as c
from . import _native
from .types import DirEntry, FileStat


class FileReader:
    """A sandbox file being read as a stream (from :meth:`Fs.open_read`):
    ``async for chunk in reader`` yields its bytes in chunks (at most
    256 KiB each) until the end of the file. Flow controlled: while the
    chunks are not taken, the sandbox waits (memory stays flat).
    :meth:`close` (or leaving ``async with``) before the end abandons the
    read at once: a :meth:`read_chunk` pending in another task returns
    ``None``, and the guest's file is released."""

    def __init__(self, native: _native.NativeFileReader) -> None:
        self._n: Optional[_native.NativeFileReader] = native

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.read_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def read_chunk(self) -> Optional[bytes]:
        """The next chunk; ``None`` at the end of the file (or once closed)."""
        n = self._n
        if n is None:
            return None
        chunk = await n.next()
        if chunk is None:
            self._n = None
            return None
        return bytes(chunk)

    async def close(self) -> None:
        """Abandons the rest of the read (nothing more is read)."""
        n, self._n = self._n, None
        if n is not None:
            await n.close()

    async def aclose(self) -> None:
        """The same as :meth:`close` (the name async generators use)."""
        await self.close()

    async def __aenter__(self) -> FileReader:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()


class FileWriter:
    """A sandbox file being written as a stream (from :meth:`Fs.open_write`):
    :meth:`write` appends (waiting while the sandbox has not taken the
    previous MiB), :meth:`finish` completes the file. A failure of the guest
    (a missing directory, no space) is raised by :meth:`finish` at the
    latest. :meth:`abandon` (or an exception leaving ``async with``, or
    dropping it unfinished) abandons the write (what was written stays);
    leaving ``async with`` normally finishes it."""

    def __init__(self, native: _native.NativeFileWriter) -> None:
        self._n = native
        self._done = False

    async def write(self, data: c.Data) -> None:
        await self._n.write(c.to_bytes(data))

    async def finish(self) -> int:
        """Ends the file and waits until the sandbox has it: the number of
        bytes written."""
        self._done = True
        return int(await self._n.finish())

    async def abandon(self) -> None:
        """Abandons the write at once; a later :meth:`write` or
        :meth:`finish` raises :class:`errors.InvalidArgumentError`."""
        self._done = True
        await self._n.close()

    async def __aenter__(self) -> FileWriter:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._done:
            return
        if exc_type is None:
            await self.finish()
        else:
            await self.abandon()


class Fs:
    """File operations in a running sandbox (``sb.fs``); paths are absolute
    guest paths."""

    def __init__(self, native: _native.NativeSandbox) -> None:
        self._n = native

    async def read(self, path: str) -> bytes:
        return bytes(await self._n.fs_read(path))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: c.Data, *, mode: Optional[int] = None) -> None:
        await self._n.fs_write(path, c.to_bytes(data), mode)

    async def open_read(self, path: str) -> FileReader:
        """Opens a file to read as a stream of chunks; a missing file (or a
        directory) is the error here."""
        return FileReader(await self._n.fs_open_read(path))

    async def read_stream(self, path: str) -> AsyncIterator[bytes]:
        """The file's bytes in chunks (``async for chunk in
        sb.fs.read_stream(path)``); a missing file is raised by the first
        step of the iteration. Left early (``break``, an exception), the
        read is closed when the iteration is closed."""
        async with await self.open_read(path) as reader:
            async for chunk in reader:
                yield chunk

    async def open_write(
        self, path: str, *, mode: Optional[int] = None, append: bool = False
    ) -> FileWriter:
        """Opens a file to write as a stream: created (with ``mode``, default
        0o644) or truncated, or appended to with ``append=True``."""
        return FileWriter(await self._n.fs_open_write(path, mode, append))

    async def write_stream(
        self,
        path: str,
        source: c.AsyncByteSource,
        *,
        mode: Optional[int] = None,
        append: bool = False,
    ) -> int:
        """Writes a file from ``source``, chunk by chunk: an (async) iterable
        of bytes, or a binary file object (read until it is exhausted), or
        bytes. The number of bytes written. If ``source`` raises, the write
        is abandoned (what was written stays) and the exception propagates."""
        async with await self.open_write(path, mode=mode, append=append) as writer:
            async for chunk in c.achunks(source):
                await writer.write(chunk)
            return await writer.finish()

    async def list(self, path: str) -> List[DirEntry]:
        return c.dir_entries(await self._n.fs_list(path))

    async def stat(self, path: str) -> FileStat:
        return c.file_stat(await self._n.fs_stat(path))

    async def exists(self, path: str) -> bool:
        return bool(await self._n.fs_exists(path))

    async def mkdir(self, path: str, *, parents: bool = False) -> None:
        await self._n.fs_mkdir(path, parents)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._n.fs_remove(path, recursive)

    async def rename(self, src: str, dst: str) -> None:
        await self._n.fs_rename(src, dst)

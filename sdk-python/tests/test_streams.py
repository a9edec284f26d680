"""Files as streams (``Fs.open_read`` / ``read_stream``, ``Fs.open_write`` /
``write_stream``) and the exec output limit, async and sync, against the
installed package: several MiB in and out with the content checked, a
missing file by its error class and code, truncation by ``output_limit``."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

MIB = 1024 * 1024


def _blob(size: int) -> bytes:
    """``size`` bytes that are not a repetition of a short pattern (a chunk
    dropped, doubled or swapped changes the digest)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


async def test_streams_several_mib_in_and_out(image):
    from burrow import FileReader, Sandbox

    data = _blob(6 * MIB + 12345)
    async with await Sandbox.create("streams", image=image, destroy=True) as sb:

        async def pieces():
            for i in range(0, len(data), 300_000):
                yield data[i : i + 300_000]

        # An async iterable of chunks.
        assert await sb.fs.write_stream("/tmp/a.bin", pieces()) == len(data)
        out = await sb.exec("sha256sum /tmp/a.bin | cut -d' ' -f1")
        assert out.stdout_text.strip() == hashlib.sha256(data).hexdigest()

        # Read back chunk by chunk: several chunks, none above 256 KiB.
        sizes = []
        got = bytearray()
        async for chunk in sb.fs.read_stream("/tmp/a.bin"):
            assert isinstance(chunk, bytes)
            sizes.append(len(chunk))
            got += chunk
        assert bytes(got) == data
        assert len(sizes) > 1 and max(sizes) <= 256 * 1024

        # A binary file object (read off the event loop), a plain iterable,
        # and bytes; append=True adds to the end; mode sets the bits.
        assert await sb.fs.write_stream("/tmp/b.bin", io.BytesIO(data)) == len(data)
        assert await sb.fs.read("/tmp/b.bin") == data
        parts = [b"one ", bytearray(b"two "), "three"]
        assert await sb.fs.write_stream("/tmp/c.txt", parts, mode=0o600) == 13
        assert await sb.fs.write_stream("/tmp/c.txt", b" four", append=True) == 5
        assert await sb.fs.read_text("/tmp/c.txt") == "one two three four"
        assert (await sb.fs.stat("/tmp/c.txt")).mode & 0o777 == 0o600

        # The explicit objects: an open reader is an async iterator; a
        # writer writes, then finishes with the count.
        reader = await sb.fs.open_read("/tmp/c.txt")
        assert isinstance(reader, FileReader)
        assert b"".join([c async for c in reader]) == b"one two three four"
        assert await reader.read_chunk() is None, "stays at its end"
        writer = await sb.fs.open_write("/tmp/d.txt")
        await writer.write(b"x" * 10)
        await writer.write("y")
        assert await writer.finish() == 11
        assert await sb.fs.read("/tmp/d.txt") == b"x" * 10 + b"y"

        # Stopping early (close, or leaving `async with`) abandons the read;
        # the sandbox serves on.
        async with await sb.fs.open_read("/tmp/a.bin") as partial:
            first = await partial.read_chunk()
            assert first == data[: len(first)]
        assert await partial.read_chunk() is None
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"

        # An empty source makes an empty file.
        assert await sb.fs.write_stream("/tmp/empty", []) == 0
        assert [c async for c in sb.fs.read_stream("/tmp/empty")] == []


async def test_stream_errors_are_typed(image):
    from burrow import Sandbox, errors

    async with await Sandbox.create("stream-errors", image=image, destroy=True) as sb:
        with pytest.raises(errors.GuestError) as info:
            await sb.fs.open_read("/nope")
        assert info.value.code == "guest" and info.value.guest_code == "not_found"
        with pytest.raises(errors.GuestError) as info:
            async for _ in sb.fs.read_stream("/nope"):
                pass
        assert info.value.guest_code == "not_found"
        with pytest.raises(errors.GuestError) as info:
            await sb.fs.write_stream("/no/such/dir/f", [b"a", b"b"])
        assert info.value.guest_code == "not_found"
        with pytest.raises(errors.InvalidArgumentError):
            await sb.fs.open_read("relative")
        with pytest.raises(errors.InvalidArgumentError):
            await sb.fs.write_stream("relative", b"x")
        with pytest.raises(TypeError):
            await sb.fs.write_stream("/tmp/x", 42)  # type: ignore[arg-type]
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"


async def test_exec_output_limit_truncates(image):
    from burrow import Sandbox

    async with await Sandbox.create("limits", image=image, destroy=True) as sb:
        out = await sb.exec("head -c 3000000 /dev/zero | tr '\\0' a; exit 3", output_limit=1000)
        assert out.stdout == b"a" * 1000
        assert out.truncated and out.exit_code == 3
        out = await sb.exec("echo 0123456789 >&2; echo out", output_limit=4)
        assert (out.stdout, out.stderr, out.truncated) == (b"out\n", b"0123", True)
        out = await sb.exec(["echo", "short"], output_limit=1000)
        assert (out.stdout, out.truncated, out.ok) == (b"short\n", False, True)
        assert not (await sb.exec(["echo", "whole"])).truncated


def test_sync_streams_and_output_limit(image, tmp_path):
    import burrow.sync
    from burrow import errors

    data = _blob(3 * MIB + 7)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    sb = burrow.sync.Sandbox.create("sync-streams", image=image)
    try:
        with open(src, "rb") as f:
            assert sb.fs.write_stream("/tmp/s.bin", f) == len(data)
        got = bytearray()
        for chunk in sb.fs.read_stream("/tmp/s.bin"):
            got += chunk
        assert bytes(got) == data
        with sb.fs.open_read("/tmp/s.bin") as reader:
            assert b"".join(reader) == data
        gen = (data[i : i + MIB] for i in range(0, len(data), MIB))
        assert sb.fs.write_stream("/tmp/t.bin", gen) == len(data)
        dst = tmp_path / "dst.bin"
        with open(dst, "wb") as f:
            for chunk in sb.fs.read_stream("/tmp/t.bin"):
                f.write(chunk)
        assert os.path.getsize(dst) == len(data) and dst.read_bytes() == data
        with pytest.raises(errors.GuestError) as info:
            sb.fs.open_read("/nope")
        assert info.value.guest_code == "not_found"
        out = sb.exec("seq 1 100000", output_limit=6)
        assert (out.stdout, out.truncated) == (b"1\n2\n3\n", True)
    finally:
        sb.destroy()


# Guest-side witnesses that a stream released the guest's file (while the
# SDK object is still referenced, so no garbage collection did it):
# - /tmp/p, a FIFO whose writer sends one line and then nothing until
#   /tmp/go exists (a second pull waits); then it writes a line every 0.1 s,
#   which fails (SIGPIPE/EPIPE) only once no reader holds the FIFO, and
#   /tmp/gone appears.
# - /tmp/q, a FIFO read by `cat`, which ends (and /tmp/q.done appears) only
#   once no writer holds it.
_HELD_FIFO = (
    "rm -f /tmp/p /tmp/go /tmp/gone; mkfifo /tmp/p; "
    "( (echo first; until [ -e /tmp/go ]; do sleep 0.1; done; "
    "while echo more; do sleep 0.1; done) > /tmp/p; echo $? > /tmp/gone ) "
    "</dev/null >/dev/null 2>&1 &"
)
_READ_FIFO = (
    "rm -f /tmp/q /tmp/q.done; mkfifo /tmp/q; "
    "(cat /tmp/q > /tmp/q.out; echo $? > /tmp/q.done) </dev/null >/dev/null 2>&1 &"
)


async def _appears(sb, path: str, seconds: float = 10) -> bool:
    import asyncio

    for _ in range(int(seconds * 10)):
        if await sb.fs.exists(path):
            return True
        await asyncio.sleep(0.1)
    return False


def _sync_appears(sb, path: str, seconds: float = 10) -> bool:
    import time

    for _ in range(int(seconds * 10)):
        if sb.fs.exists(path):
            return True
        time.sleep(0.1)
    return False


async def test_closing_a_stream_ends_it_at_once(image):
    import asyncio
    import time

    from burrow import Sandbox, errors

    async with await Sandbox.create("stream-close", image=image, destroy=True) as sb:
        await sb.exec(["sh", "-c", _HELD_FIFO])
        reader = await sb.fs.open_read("/tmp/p")
        assert await reader.read_chunk() == b"first\n"
        pending = asyncio.ensure_future(reader.read_chunk())
        await asyncio.sleep(0.3)
        assert not pending.done(), "the second pull waits on the held FIFO"
        started = time.monotonic()
        await reader.close()
        assert await asyncio.wait_for(pending, 5) is None
        assert time.monotonic() - started < 5
        assert await reader.read_chunk() is None
        await reader.aclose()  # closing twice is harmless
        # The guest's reader is gone: the FIFO's writer fails.
        await sb.fs.write("/tmp/go", b"")
        assert await _appears(sb, "/tmp/gone"), "the guest still holds the FIFO"
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"

        # A writer abandoned: the guest's file is closed at once, later
        # writes and finish are refused, by their class.
        await sb.exec(["sh", "-c", _READ_FIFO])
        writer = await sb.fs.open_write("/tmp/q")
        await writer.write(b"kept")
        await writer.abandon()
        assert await _appears(sb, "/tmp/q.done"), "the guest still holds the FIFO"
        with pytest.raises(errors.InvalidArgumentError) as info:
            await writer.write(b"more")
        assert info.value.code == "invalid_argument"
        with pytest.raises(errors.InvalidArgumentError):
            await writer.finish()
        await writer.abandon()  # abandoning twice is harmless

        # `async with`: an exception abandons, a normal exit finishes.
        with pytest.raises(RuntimeError):
            async with await sb.fs.open_write("/tmp/x.txt") as w:
                await w.write(b"half")
                raise RuntimeError("the source failed")
        with pytest.raises(errors.InvalidArgumentError):
            await w.finish()
        async with await sb.fs.open_write("/tmp/y.txt") as w:
            await w.write(b"whole")
        assert await sb.fs.read("/tmp/y.txt") == b"whole"


async def test_streams_left_early_release_the_file(image):
    from burrow import Sandbox

    async with await Sandbox.create("stream-early", image=image, destroy=True) as sb:
        # read_stream closed after its first chunk closes the reader.
        await sb.exec(["sh", "-c", _HELD_FIFO])
        stream = sb.fs.read_stream("/tmp/p")
        assert await stream.__anext__() == b"first\n"
        await stream.aclose()
        await sb.fs.write("/tmp/go", b"")
        assert await _appears(sb, "/tmp/gone"), "the guest still holds the FIFO"

        # write_stream whose source raises abandons the writer, and the
        # source's exception is the one raised.
        class SourceFailed(Exception):
            pass

        async def failing():
            yield b"part"
            raise SourceFailed()

        await sb.exec(["sh", "-c", _READ_FIFO])
        with pytest.raises(SourceFailed) as info:
            await sb.fs.write_stream("/tmp/q", failing())
        # `info` keeps write_stream's frame (and its writer) alive: only
        # the abandon can have released the FIFO.
        assert await _appears(sb, "/tmp/q.done"), "the guest still holds the FIFO"
        assert info.type is SourceFailed


def test_sync_close_and_abandon(image):
    import threading
    import time

    import burrow.sync
    from burrow import errors

    sb = burrow.sync.Sandbox.create("sync-stream-close", image=image)
    try:
        sb.exec(["sh", "-c", _HELD_FIFO])
        reader = sb.fs.open_read("/tmp/p")
        assert reader.read_chunk() == b"first\n"
        got: list = []
        t = threading.Thread(target=lambda: got.append(reader.read_chunk()))
        t.start()
        time.sleep(0.3)
        assert t.is_alive(), "the second pull waits on the held FIFO"
        reader.close()
        t.join(5)
        assert not t.is_alive() and got == [None]
        sb.fs.write("/tmp/go", b"")
        assert _sync_appears(sb, "/tmp/gone"), "the guest still holds the FIFO"

        sb.exec(["sh", "-c", _READ_FIFO])
        writer = sb.fs.open_write("/tmp/q")
        writer.write(b"kept")
        writer.abandon()
        assert _sync_appears(sb, "/tmp/q.done"), "the guest still holds the FIFO"
        with pytest.raises(errors.InvalidArgumentError) as info:
            writer.finish()
        assert info.value.code == "invalid_argument"

        # `with`: an exception abandons, a normal exit finishes.
        with pytest.raises(RuntimeError):
            with sb.fs.open_write("/tmp/x.txt") as w:
                w.write(b"half")
                raise RuntimeError("the source failed")
        with pytest.raises(errors.InvalidArgumentError):
            w.write(b"more")
        with sb.fs.open_write("/tmp/z.txt") as w:
            w.write("done")
        assert sb.fs.read("/tmp/z.txt") == b"done"

        # A blocking read_stream left early (the generator closed) closes
        # its reader.
        sb.exec(["sh", "-c", _HELD_FIFO])
        stream = sb.fs.read_stream("/tmp/p")
        assert next(stream) == b"first\n"
        stream.close()
        sb.fs.write("/tmp/go", b"")
        assert _sync_appears(sb, "/tmp/gone"), "the guest still holds the FIFO"
    finally:
        sb.destroy()

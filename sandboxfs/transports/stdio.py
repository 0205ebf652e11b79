"""MCP over stdio: JSON-RPC lines in and out, on trio file descriptors.

The transport only moves bytes: a reader splits stdin into lines (refusing, not
buffering, a line over the cap), decodes each (-32700 for what is not JSON,
-32600 for a bad envelope) and hands it to the session through the
:class:`~sandboxfs.session.driver.Driver`; one writer sends what the session
answers, in order, gathering what is waiting into as few writes as it can.  A small
answer with nothing queued before it is written at once, without a hop to the
writer task (as much as the pipe takes; the rest is queued behind nothing).  At
end of input, the requests still running are answered (for up to
:data:`EOF_DRAIN_TIMEOUT`) before the connection ends.

The wire is a private copy of fds 0 and 1 (:func:`take_stdio`), so a stray
``print()`` cannot corrupt it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import sys
from collections.abc import Iterator
from typing import Any, Final, final

import trio

from sandboxfs.session import (
    INVALID_REQUEST,
    Driver,
    SandboxfsServer,
    Session,
    decode,
    encode_pieces,
    error_frame,
)

log = logging.getLogger("sandboxfs")

#: How long, at end of input, to wait for requests still running (longer than the
#: session's own timeouts, so that what they end in is still answered).
EOF_DRAIN_TIMEOUT: Final = 40.0
_READ_SIZE: Final = 256 * 1024
#: Capacity asked for the stdout pipe (the unprivileged maximum by default).
_PIPE_BYTES: Final = 1024 * 1024
#: Frames at least this big are written on their own (no copy to join them).
_SPLIT_FRAME: Final = 64 * 1024


@final
class LineSplitter:
    """Splits a byte stream into lines, refusing (not buffering) lines over a cap.

    :meth:`feed` returns complete lines, and ``None`` once for each line that
    was too long (its bytes are dropped as they arrive).
    """

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._skipping = False

    @property
    def buffered(self) -> int:
        """Bytes held for the line in progress (never more than the cap)."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes | None]:
        out: list[bytes | None] = []
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not self._skipping:
                self._buffer += chunk[start:end]
                if len(self._buffer) > self.max_line:
                    self._buffer.clear()
                    self._skipping = True
                    out.append(None)
            if newline < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                out.append(bytes(self._buffer))
                self._buffer.clear()
            start = newline + 1
        return out

    def finish(self) -> list[bytes]:
        """At end of input: a last line without a newline, if any."""
        rest = bytes(self._buffer) if self._buffer and not self._skipping else b""
        self._buffer.clear()
        return [rest] if rest else []


def take_stdio(stdin_fd: int = 0, stdout_fd: int = 1) -> tuple[int, int]:
    """Private copies of the wire fds; fd 0 becomes /dev/null and fd 1 stderr, so a
    stray print() (ours or a library's) cannot corrupt the stream.  Call it before
    Landlock applies: it opens /dev/null."""
    wire_in, wire_out = os.dup(stdin_fd), os.dup(stdout_fd)
    os.set_inheritable(wire_in, False)
    os.set_inheritable(wire_out, False)
    with contextlib.suppress(OSError):  # not a pipe, or above the system's limit
        # A big answer then takes 16 wake-ups per MiB instead of 256 (64 KiB default).
        fcntl.fcntl(wire_out, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, stdin_fd)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, stdout_fd)
    return wire_in, wire_out


@final
class _Writer:
    """The only writer: frames in the order they were queued, batched.  A frame is
    one line's bytes, or its pieces (a big answer, written without joining them)."""

    def __init__(self, fd: int | None = None) -> None:
        self.send_channel, self.receive_channel = trio.open_memory_channel[bytes | Iterator[bytes]](
            math.inf
        )
        self.broken = False
        #: Set once the channel is closed and everything queued is written.
        self.done = trio.Event()
        #: The wire (non-blocking once the transport's stream has it), for a small
        #: frame written at once when nothing is queued before it.
        self._fd = fd
        #: Frames handed to the writer task and not written yet (a frame handed to a
        #: waiting task never shows in the channel's buffer).
        self._queued = 0

    def put(self, frame: bytes | Iterator[bytes]) -> None:
        """Queue a frame; a small one with nothing queued before it is written at once,
        as much of it as the pipe takes (the rest is queued)."""
        if (
            self._fd is not None
            and isinstance(frame, bytes)
            and len(frame) < _SPLIT_FRAME
            and not self._queued
            and not self.broken
        ):
            rest = self._write_now(frame + b"\n")
            if not rest:
                return
            frame = rest[:-1]  # what is left, without the newline the writer adds
        with contextlib.suppress(trio.ClosedResourceError):
            self.send_channel.send_nowait(frame)
            self._queued += 1

    def _write_now(self, data: bytes) -> bytes:
        """Write what the pipe takes now, without waiting (the answer to a lone
        request goes out without a hop to the writer task); what is left."""
        assert self._fd is not None
        try:
            written = os.write(self._fd, data)
        except OSError:  # full (EAGAIN), or broken: the writer task deals with it
            return data
        return data[written:]

    async def run(self, stdout: trio.lowlevel.FdStream) -> None:
        receive = self.receive_channel
        try:
            async with receive:
                async for frame in receive:
                    batch = [frame]
                    while len(batch) < 256:  # what else is ready: one write for all of it
                        try:
                            batch.append(receive.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                    try:
                        await self._write(stdout, batch)
                    finally:
                        self._queued -= len(batch)
        finally:
            self.done.set()

    async def _write(
        self, stdout: trio.lowlevel.FdStream, batch: list[bytes | Iterator[bytes]]
    ) -> None:
        """Small frames joined into one write; a big one written alone, and a frame
        in pieces written piece by piece as its pieces are made."""
        if self.broken:
            return
        small: list[bytes] = []
        try:
            for frame in batch:
                if isinstance(frame, bytes) and len(frame) < _SPLIT_FRAME:
                    small.append(frame + b"\n")
                    continue
                if small:
                    await stdout.send_all(b"".join(small))
                    small = []
                for piece in (frame,) if isinstance(frame, bytes) else frame:
                    await stdout.send_all(piece)
                await stdout.send_all(b"\n")
            if small:
                await stdout.send_all(b"".join(small))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            self.broken = True
            log.info("stdout closed by the client")


async def serve_stdio(server: SandboxfsServer, wire: tuple[int, int], *, max_line: int) -> int:
    """Serve one MCP connection on the wire fds until end of input (or until the
    session closes it); returns the exit status."""
    session = Session(server.session_config())
    writer = _Writer(wire[1])
    exit_code = 0
    stdin = trio.lowlevel.FdStream(wire[0])
    stdout = trio.lowlevel.FdStream(wire[1])
    reading = trio.CancelScope()

    def send(message: dict[str, Any]) -> None:
        writer.put(encode_pieces(message))

    def close(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        reading.cancel()

    async with stdin, stdout, trio.open_nursery() as nursery:
        nursery.start_soon(writer.run, stdout)
        driver = Driver(session, server, send, nursery, on_close=close)
        splitter = LineSplitter(max_line)
        with reading:
            while chunk := await stdin.receive_some(_READ_SIZE):
                for line in splitter.feed(chunk):
                    _handle(line, driver, writer, max_line)
            for line in splitter.finish():
                _handle(line, driver, writer, max_line)
        driver.input_ended()
        with trio.move_on_after(EOF_DRAIN_TIMEOUT) as waited:
            await driver.idle()
        if waited.cancelled_caught:
            log.warning(
                "End of input: request(s) still running after %g s; exiting without their answers",
                EOF_DRAIN_TIMEOUT,
            )
        driver.stop_timers()
        writer.send_channel.close()
        with trio.move_on_after(EOF_DRAIN_TIMEOUT):  # a reader that never reads stdout
            await writer.done.wait()
        nursery.cancel_scope.cancel()  # calls given up on run on in their threads
    return exit_code


def _handle(line: bytes | None, driver: Driver, writer: _Writer, max_line: int) -> None:
    if line is None:
        text = f"Request too large: a line may hold at most {max_line} bytes"
        writer.put(error_frame(None, INVALID_REQUEST, text).rstrip(b"\n"))
        return
    message = decode(line)
    if isinstance(message, bytes):
        writer.put(message.rstrip(b"\n"))
    elif message is not None:
        driver.receive(message)

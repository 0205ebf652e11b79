"""The stdio writer: a small answer written at once never lands inside a big one.

A lone small answer goes straight to stdout (no hop to the writer task); while a
frame is queued or half written (the client reads slowly, the pipe is full), every
later frame waits its turn.  The test stops the writer in the middle of a big frame
(the pipe full), makes room, and hands it a small frame in the same instant: the
bytes on the wire must still be the big frame, then the small one.
"""

from __future__ import annotations

import os

import trio
import trio.testing

from sandboxfs.transports.stdio import _Writer


def test_a_small_frame_waits_for_a_half_written_big_one() -> None:
    big = b'"' + b"a" * 300_000 + b'"'
    small = b'{"small":1}'
    expected = big + b"\n" + small + b"\n"

    async def main() -> bytes:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        writer = _Writer(write_end)
        received = bytearray()
        async with trio.lowlevel.FdStream(write_end) as stdout, trio.open_nursery() as nursery:
            nursery.start_soon(writer.run, stdout)
            writer.put(iter([big]))  # in pieces: through the writer task
            await trio.testing.wait_all_tasks_blocked()  # it waits for room, mid-frame
            received += os.read(read_end, 1 << 16)  # room in the pipe...
            writer.put(small)  # ...at the very moment a small frame comes
            writer.send_channel.close()
            while len(received) < len(expected):
                await trio.lowlevel.wait_readable(read_end)
                received += os.read(read_end, 1 << 16)
            await writer.done.wait()
        os.close(read_end)
        return bytes(received)

    assert trio.run(main) == expected


def test_a_lone_small_frame_is_written_at_once() -> None:
    async def main() -> bytes:
        read_end, write_end = os.pipe()
        writer = _Writer(write_end)
        async with trio.lowlevel.FdStream(write_end):
            writer.put(b'{"id":1}')  # no writer task runs: only the direct write can send it
            data = os.read(read_end, 100)
        os.close(read_end)
        return data

    assert trio.run(main) == b'{"id":1}\n'

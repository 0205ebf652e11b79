"""HTTP connections under Hypercorn, each with a send deadline.

Hypercorn writes an answer to a client's socket as fast as the client takes it,
and, left to itself, waits for ever on a client that takes nothing: the answer
being written stays in memory for as long as that client keeps the connection
open (a 24 MiB read pinned ~174 MiB per connection, measured).  Here every
accepted connection is handed to Hypercorn's own connection handler (its trio
``TCPServer``, HTTP/1.1 through h11) over a :class:`DeadlineStream`, which
writes at most :data:`WRITE_CHUNK` bytes at a time and gives each write
``send_timeout`` seconds (:data:`SEND_TIMEOUT` unless ``--send-timeout`` says
otherwise).  A client that takes none of a chunk in that time is cut off: the
connection is reset (nothing of the answer stays queued in the kernel),
Hypercorn sees it closed and tells the application ``http.disconnect``, and
the application stops making the answer and lets it go.  A client that keeps
taking its answer, a chunk per deadline at least, is never cut off, however
big the answer.

Guarantees: no connection holds an answer longer than ``send_timeout`` after
its client stops reading; what else Hypercorn does (parsing, keep-alive, the
ASGI messages) is Hypercorn's, unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from typing import Any, Final, cast, final

import trio

log = logging.getLogger("sandboxfs")

#: Seconds a client gets to take each chunk of an answer before it is cut off.
SEND_TIMEOUT: Final = 30.0
#: The longest ``--send-timeout`` accepted: an hour.
MAX_SEND_TIMEOUT: Final = 3600.0
#: The most written to a client's socket in one go (and given one deadline).
WRITE_CHUNK: Final = 64 * 1024

ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


@final
class DeadlineStream(trio.abc.HalfCloseableStream):
    """A connection's socket stream whose writes each have ``seconds`` to complete;
    past that the connection is reset and the write fails as a broken stream."""

    def __init__(self, stream: trio.SocketStream, seconds: float) -> None:
        self._stream = stream
        #: Hypercorn reads the peer's and its own address from it.
        self.socket = stream.socket
        self._seconds = seconds
        self.cut = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.cut:
            raise trio.ClosedResourceError("the connection was cut off")
        with memoryview(data) as view:
            for start in range(0, max(len(view), 1), WRITE_CHUNK):
                with trio.move_on_after(self._seconds) as deadline:
                    await self._stream.send_all(view[start : start + WRITE_CHUNK])
                if deadline.cancelled_caught:
                    self._cut()
                    raise trio.BrokenResourceError("the client stopped reading its answer")

    def _cut(self) -> None:
        """Reset the connection: close it with a zero linger, so that the kernel drops
        what is queued for the client instead of trying to deliver it."""
        self.cut = True
        log.warning(
            "cut off a client (%s) that took none of its answer for %g s (--send-timeout)",
            _peer(self.socket),
            self._seconds,
        )
        with contextlib.suppress(OSError):
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.socket.close()  # wakes whoever waits on it (Hypercorn's reader)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _peer(sock: trio.socket.SocketType) -> str:
    with contextlib.suppress(OSError):
        address = sock.getpeername()
        if isinstance(address, tuple):
            return f"{address[0]}:{address[1]}"
    return "local"


async def serve_connections(
    app: ASGIApp,
    config: Any,
    listener: socket.socket,
    *,
    send_timeout: float,
    stopping: trio.Event,
) -> None:
    """Serve ``app`` under Hypercorn on ``listener`` (listening already) until
    ``stopping`` is set; then stop accepting, close idle connections and give busy
    ones ``config.graceful_timeout`` seconds (as Hypercorn's own ``serve`` does).

    ``config`` is a ``hypercorn.config.Config``.
    """
    # Imported here: a stdio server never needs Hypercorn.
    from hypercorn.trio.tcp_server import TCPServer  # noqa: PLC0415
    from hypercorn.trio.worker_context import WorkerContext  # noqa: PLC0415
    from hypercorn.utils import wrap_app  # noqa: PLC0415

    context = WorkerContext(None)
    wrapped = wrap_app(cast(Any, app), config.wsgi_max_body_size, "asgi")

    async def connection(stream: trio.SocketStream) -> None:
        deadlined = cast(Any, DeadlineStream(stream, send_timeout))
        await TCPServer(wrapped, config, context, {}, deadlined)

    accepting = trio.SocketListener(trio.socket.from_stdlib_socket(listener))
    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as acceptor:
            serve = partial(trio.serve_listeners, handler_nursery=connections)
            acceptor.start_soon(serve, connection, [accepting])
            await stopping.wait()
            acceptor.cancel_scope.cancel()
        await accepting.aclose()
        await context.terminated.set()  # idle keep-alive connections close now
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout

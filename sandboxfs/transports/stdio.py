"""A hardened JSON-lines stdio transport for the MCP SDK's server loop, on trio.

Closes the SDK stdio gaps (see PROTOCOL.md):

* a line that is not JSON gets -32700 "Parse error"; a bad envelope (not an
  object, wrong ``jsonrpc``, bad ``id``/``method``/``params``) gets -32600;
* a line longer than the cap is refused with -32600 without being buffered:
  the rest of it is skipped as it arrives;
* an error the SDK would send as ``{"code": 0, "message": str(exc)}`` (which
  can carry host paths) is rewritten to -32603 "Internal error";
* at end of input, requests still running are answered before exiting;
* with a :class:`~sandboxfs.session.fastlane.FastLane`, the requests it takes are
  answered here, in a task of their own, without the SDK (a
  ``notifications/cancelled`` for one of them cancels it, unanswered);
* the SDK (over a second to import) is loaded when the first message the lane
  does not take arrives; a handshake the lane answered is replayed to it first,
  its answer dropped, so it serves the connection as if it had seen it all;
* the wire uses private copies of fds 0 and 1; fd 0 becomes /dev/null and
  fd 1 stderr, so a stray print() cannot corrupt the stream.

No worker threads: stdin and stdout are trio ``FdStream``s.  The sans-IO part
(:class:`LineSplitter`, :func:`decode`, and :func:`sandboxfs.session.sdkwire.classify`)
is what the fuzz target exercises.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

import anyio
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic_core import to_json

from sandboxfs.core.names import quote_name
from sandboxfs.session.fastlane import FastLane, Job
from sandboxfs.session.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ProtocolError,
    correlation_key,
    decode,
    error_frame,
    framed,
    plain_notification,
    plain_request,
)
from sandboxfs.session.server import InputCloser

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server
    from mcp.shared.message import SessionMessage

log = logging.getLogger("sandboxfs")

#: How long, at end of input, to wait for requests still in flight.
EOF_DRAIN_TIMEOUT: Final = 30.0
#: How long the SDK may take to answer a replayed handshake.
REPLAY_TIMEOUT: Final = 30.0
_READ_SIZE: Final = 256 * 1024

#: Capacity asked for the stdout pipe (the unprivileged maximum by default).
_PIPE_BYTES: Final = 1024 * 1024

#: What the relay writes: a server message, or a frame already encoded (by the
#: reader, or for a request the fast lane answered).
Outgoing: TypeAlias = "SessionMessage | bytes"
#: Builds the SDK's server for a connection (called at most once, when needed).
SdkFactory: TypeAlias = "Callable[[], Server[Any]]"


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


#: The answer a request to the client gets once input has ended.
_CLOSED: Final = {"error": {"message": "the connection closed"}}


@final
class _Asked:
    """A request to the client awaiting its answer."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answer: dict[str, Any] = {}

    def settle(self, answer: dict[str, Any]) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


@final
class _Connection:
    """One stdio connection: a reader, a relay that is the only writer, and the
    SDK's server loop once a message needs it.

    The reader's own answers (parse errors, refused lines) go to the relay on the
    same stream as the server's messages, already encoded.
    """

    def __init__(
        self,
        make_sdk: SdkFactory,
        *,
        max_line: int,
        versions: Sequence[str],
        closer: InputCloser,
        lane: FastLane | None,
        nursery: trio.Nursery,
        replies: MemoryObjectSendStream[Outgoing],
    ) -> None:
        self.make_sdk = make_sdk
        self.max_line = max_line
        self.versions = versions
        self.reader_scope = closer.scope
        self.lane = lane
        self.nursery = nursery
        self.replies = replies
        self.in_flight: set[Any] = set()
        self.drained = trio.Event()
        #: Requests the lane is answering, by correlation key: what cancels them.
        self.lane_calls: dict[Any, trio.CancelScope] = {}
        #: Once the SDK runs: its input, and :mod:`sandboxfs.session.sdkwire`.
        self.to_server: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self.wire: ModuleType | None = None
        #: Requests sent to the client (by the lane) awaiting its answer, by id.
        self.asked: dict[str, _Asked] = {}
        self.asks = 0
        self.input_ended = False
        #: The id of a replayed ``initialize``, and the event its answer sets.
        self.replay_id = f"sandboxfs-replay-{secrets.token_hex(8)}"
        self.replay_answered = trio.Event()

    def settled(self, request_id: Any) -> None:
        """A request was answered, or cancelled by the client (then it never will be)."""
        self.in_flight.discard(correlation_key(request_id))
        if not self.in_flight:
            self.drained.set()

    async def answer(self, frame: bytes) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.replies.send(frame)

    async def handle(self, line: bytes | None) -> None:
        if line is None:
            text = f"Request too large: a line may hold at most {self.max_line} bytes"
            await self.answer(error_frame(None, INVALID_REQUEST, text))
            return
        obj = decode(line)
        if isinstance(obj, bytes):
            await self.answer(obj)
        elif obj is not None and not self.taken_here(obj):
            await self.to_sdk(obj)

    def taken_here(self, obj: dict[str, Any]) -> bool:
        """Whether the transport or the lane takes a message (else the SDK does)."""
        if "method" not in obj and obj.get("id") in self.asked:  # answers the lane's request
            self.asked[obj["id"]].settle(obj)
            return True
        lane = self.lane
        if lane is not None and plain_request(obj):
            job = lane.route(obj["method"], obj.get("params"))
            if job is not None:
                self.in_flight.add(correlation_key(obj["id"]))
                self.nursery.start_soon(self.run_lane_job, obj["id"], job)
                return True
        if "id" not in obj and obj.get("method") == "notifications/cancelled":
            params = obj.get("params") or {}
            cancelled = params.get("requestId")
            self.cancel_lane_job(cancelled)
            self.settled(cancelled)
            return self.to_server is None  # else the SDK may be running it
        if lane is not None and self.to_server is None and plain_notification(obj):
            taken, roots_update = lane.notified(obj["method"], obj.get("params"))
            if roots_update is not None:
                self.nursery.start_soon(lane.fill_roots, roots_update, self.ask)
            return taken
        return False

    async def ask(self, method: str, timeout: float) -> Any:
        """Send the client a request and give the result of its answer; raises
        RuntimeError for an error answer, no answer in time, or end of input."""
        self.asks += 1
        request_id = f"sandboxfs-{self.asks}"
        asked = self.asked[request_id] = _Asked()
        if self.input_ended:
            asked.settle(_CLOSED)
        try:
            frame = {"jsonrpc": "2.0", "id": request_id, "method": method}
            await self.answer(json.dumps(frame).encode() + b"\n")
            with trio.move_on_after(timeout):
                await asked.done.wait()
        finally:
            del self.asked[request_id]
        if not asked.done.is_set():
            raise RuntimeError(f"no answer to {method} within {timeout:g} s")
        answer = asked.answer
        if "error" in answer:
            error = answer["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise RuntimeError(message if isinstance(message, str) else "an error answer")
        return answer.get("result")

    async def to_sdk(self, obj: dict[str, Any]) -> None:
        """Pass a decoded message to the SDK (loading it first if need be)."""
        to_server = self.to_server
        if to_server is None:
            log.debug(
                "Loading the MCP SDK (for %s)", quote_name(str(obj.get("method", "a response")))
            )
            to_server = await self.start_sdk()
        assert self.wire is not None
        item = self.wire.to_message(obj)
        if isinstance(item, bytes):
            await self.answer(item)
            return
        if "id" in obj and "method" in obj:
            self.in_flight.add(correlation_key(obj["id"]))
            if self.lane is not None:
                self.lane.forwarded(obj["method"], obj.get("params"), obj["id"])
        await to_server.send(item)

    async def start_sdk(self) -> MemoryObjectSendStream[SessionMessage | Exception]:
        """Load the SDK and start its server loop; replay the handshake the lane
        answered, if any, and wait for the SDK's answer (which is dropped)."""
        from sandboxfs.session import sdkwire  # noqa: PLC0415 - the SDK loads only when needed

        self.wire = sdkwire
        server = self.make_sdk()
        to_server: MemoryObjectSendStream[SessionMessage | Exception]
        server_in: MemoryObjectReceiveStream[SessionMessage | Exception]
        to_server, server_in = anyio.create_memory_object_stream[Any](16)
        server_out = self.replies.clone()
        self.to_server = to_server
        self.nursery.start_soon(self.run_sdk, server, server_in, server_out)
        for obj in self.lane.sdk_started(self.replay_id) if self.lane is not None else []:
            item = sdkwire.to_message(obj)
            if isinstance(item, bytes):  # the lane only greets valid handshakes
                log.error("the fast lane's handshake does not validate: %r", item)
                continue
            await to_server.send(item)
            if "id" in obj:
                with trio.move_on_after(REPLAY_TIMEOUT):
                    await self.replay_answered.wait()
                if not self.replay_answered.is_set():
                    log.error("the SDK did not answer the replayed initialize")
        return to_server

    async def run_sdk(
        self,
        server: Server[Any],
        server_in: MemoryObjectReceiveStream[SessionMessage | Exception],
        server_out: MemoryObjectSendStream[Outgoing],
    ) -> None:
        async with server_in, server_out:
            await server.run(server_in, server_out, server.create_initialization_options())
        self.reader_scope.cancel()

    async def run_lane_job(self, request_id: Any, job: Job) -> None:
        """Answer one request the lane took, unless the client cancels it."""
        key = correlation_key(request_id)
        frame = None
        with trio.CancelScope() as scope:
            self.lane_calls[key] = scope
            try:
                result = await job()
                frame = framed(to_json({"jsonrpc": "2.0", "id": request_id, "result": result}))
            except ProtocolError as exc:
                frame = error_frame(request_id, exc.code, exc.message, exc.data)
            except Exception:
                log.exception("internal error in a fast-lane request")
                frame = error_frame(request_id, INTERNAL_ERROR, "Internal error")
            finally:
                if self.lane_calls.get(key) is scope:
                    del self.lane_calls[key]
        if frame is not None and not scope.cancel_called:
            await self.answer(frame)
        self.settled(request_id)

    def cancel_lane_job(self, request_id: Any) -> None:
        scope = self.lane_calls.get(correlation_key(request_id))
        if scope is not None:
            scope.cancel()

    async def reader(self, stdin: trio.lowlevel.FdStream) -> None:
        splitter = LineSplitter(self.max_line)
        try:
            async with self.replies:
                with self.reader_scope:
                    while chunk := await stdin.receive_some(_READ_SIZE):
                        for line in splitter.feed(chunk):
                            await self.handle(line)
                    for line in splitter.finish():
                        await self.handle(line)
                self.input_ended = True  # no answer can come any more
                for asked in self.asked.values():
                    asked.settle(_CLOSED)
                # End of input: answer what is still running before the server sees
                # EOF (the SDK would cancel it and answer -32000 "Connection closed").
                if self.in_flight:
                    self.drained = trio.Event()  # set once the last of them settles
                    with trio.move_on_after(EOF_DRAIN_TIMEOUT):
                        await self.drained.wait()
                    if not self.drained.is_set():
                        log.warning(
                            "End of input: %d request(s) still running after %g s; "
                            "exiting without their answers",
                            len(self.in_flight),
                            EOF_DRAIN_TIMEOUT,
                        )
        finally:
            if self.to_server is not None:
                self.to_server.close()

    def encode(self, item: Outgoing) -> bytes:
        """The wire frame for a server message (sanitized) or a ready frame; nothing
        for the answer to a replayed handshake."""
        if isinstance(item, bytes):
            return item
        wire = self.wire
        assert wire is not None  # the SDK sends only once it is loaded
        message = wire.sanitize(item.message, self.versions)
        answered = wire.answer_of(message)
        if answered is not None:
            request_id, result = answered
            if request_id == self.replay_id:
                self.replay_answered.set()
                return b""
            if self.lane is not None:
                self.lane.answered(request_id, result)
            self.settled(request_id)
        frame: bytes = wire.encode(message)
        return frame

    async def relay(
        self, source: MemoryObjectReceiveStream[Outgoing], stdout: trio.lowlevel.FdStream
    ) -> None:
        """Write every outgoing message, in order; after the client closed stdout,
        drop them (reading on until the senders finish)."""
        open_ = True
        async with source:
            async for item in source:
                frame = self.encode(item)
                if not open_ or not frame:
                    continue
                try:
                    await stdout.send_all(frame)
                    if not frame.endswith(b"\n"):  # a big frame: its newline apart, no copy
                        await stdout.send_all(b"\n")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("stdout closed by the client")
                    open_ = False


async def serve_stdio(
    make_sdk: SdkFactory,
    wire: tuple[int, int],
    *,
    max_line: int,
    versions: Sequence[str],
    closer: InputCloser | None = None,
    lane: FastLane | None = None,
) -> None:
    """Serve MCP over the ``wire`` fds (from :func:`take_stdio`) until end of input
    (or ``closer``): the requests ``lane`` takes without the SDK, the rest by the
    SDK server ``make_sdk`` builds when the first of them arrives."""
    wire_in, wire_out = wire
    outgoing, to_client = anyio.create_memory_object_stream[Outgoing](64)
    async with (
        trio.lowlevel.FdStream(wire_in) as stdin,
        trio.lowlevel.FdStream(wire_out) as stdout,
        trio.open_nursery() as nursery,
    ):
        connection = _Connection(
            make_sdk,
            max_line=max_line,
            versions=versions,
            closer=closer or InputCloser(),
            lane=lane,
            nursery=nursery,
            replies=outgoing,
        )
        nursery.start_soon(connection.reader, stdin)
        nursery.start_soon(connection.relay, to_client, stdout)

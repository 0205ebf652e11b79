"""A hardened JSON-lines stdio transport for the MCP SDK's server loop, on trio.

Closes the SDK stdio gaps (see PROTOCOL.md):

* a line that is not JSON gets -32700 "Parse error"; a bad envelope (not an
  object, wrong ``jsonrpc``, bad ``id``/``method``/``params``) gets -32600;
* a line longer than the cap is refused with -32600 without being buffered:
  the rest of it is skipped as it arrives;
* an error the SDK would send as ``{"code": 0, "message": str(exc)}`` (which
  can carry host paths) is rewritten to -32603 "Internal error";
* at end of input, requests still running are answered before exiting;
* with a :class:`~sandboxfs.fastlane.FastLane`, the requests it takes are
  answered here, in a task of their own, without the SDK (a
  ``notifications/cancelled`` for one of them cancels it, unanswered);
* the wire uses private copies of fds 0 and 1; fd 0 becomes /dev/null and
  fd 1 stderr, so a stray print() cannot corrupt the stream.

No worker threads: stdin and stdout are trio ``FdStream``s.  The sans-IO part
(:class:`LineSplitter`, :func:`classify`) is what the fuzz target exercises.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, TypeAlias, cast, final

import anyio
import mcp_types as types
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel.server import Server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from pydantic_core import to_json

from sandboxfs.fastlane import FastLane, Job

log = logging.getLogger("sandboxfs")

#: How long, at end of input, to wait for requests still in flight.
EOF_DRAIN_TIMEOUT: Final = 30.0
_READ_SIZE: Final = 256 * 1024

#: Capacity asked for the stdout pipe (the unprivileged maximum by default).
_PIPE_BYTES: Final = 1024 * 1024

#: Frames at least this big are sent without a copy to append the newline.
_SPLIT_FRAME: Final = 64 * 1024

#: What the relay writes: a server message, or a frame already encoded (by the
#: reader, or for a request the fast lane answered).
Outgoing: TypeAlias = SessionMessage | bytes


def error_frame(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    """One JSON-RPC error line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return (json.dumps(frame, separators=(",", ":")) + "\n").encode()


def _framed(frame: bytes) -> bytes:
    """A JSON frame with its newline; a big one without (the relay sends it apart,
    sparing a copy of the frame)."""
    return frame + b"\n" if len(frame) < _SPLIT_FRAME else frame


def _correlation_key(request_id: Any) -> Any:
    """A request id as the SDK correlates it (``"7"`` is 7); None for a value that
    cannot be an id (a client's ``notifications/cancelled`` may name anything)."""
    return coerce_request_id(request_id) if _valid_id(request_id) else None


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _envelope_problem(obj: dict[str, Any]) -> str | None:
    """Why ``obj`` is not a JSON-RPC 2.0 message, or None if its envelope is sound."""
    if obj.get("jsonrpc") != "2.0":
        return "jsonrpc must be 2.0"
    if "method" in obj and not isinstance(obj["method"], str):
        return "bad method"
    if "params" in obj and not isinstance(obj["params"], dict):
        return "bad params"
    kinds = [key for key in ("method", "result", "error") if key in obj]
    if not kinds:
        return "no method, result or error"
    if len(kinds) > 1:
        return f"{' and '.join(kinds)} cannot appear together"
    return None


#: The members of a request the fast lane may take without pydantic's validation.
_PLAIN_REQUEST: Final = frozenset({"jsonrpc", "id", "method", "params"})


def decode(line: bytes) -> dict[str, Any] | bytes | None:
    """A JSON-RPC object with a sound envelope, an error line to send back, or None
    (blank)."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return error_frame(None, types.PARSE_ERROR, "Parse error")
    if not isinstance(obj, dict):
        return error_frame(None, types.INVALID_REQUEST, "Invalid Request")
    # A bad id would make pydantic read a request as a notification: refuse it first.
    if "id" in obj and not _valid_id(obj["id"]):
        return error_frame(None, types.INVALID_REQUEST, "Invalid Request: bad id")
    problem = _envelope_problem(obj)
    if problem is not None:
        return error_frame(obj.get("id"), types.INVALID_REQUEST, f"Invalid Request: {problem}")
    return obj


def to_message(obj: dict[str, Any]) -> SessionMessage | bytes:
    """A decoded object as the SDK's message, or the error line for what it is not."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(obj, by_name=False))
    except ValidationError:
        problem = "not a request, notification or response"
    return error_frame(obj.get("id"), types.INVALID_REQUEST, f"Invalid Request: {problem}")


def classify(line: bytes) -> SessionMessage | bytes | None:
    """A message to pass to the server, an error line to send back, or None (blank)."""
    obj = decode(line)
    return obj if obj is None or isinstance(obj, bytes) else to_message(obj)


def plain_request(obj: dict[str, Any]) -> bool:
    """A request with nothing beyond what :func:`decode` checked: the fast lane may
    take it as it is."""
    return "id" in obj and "method" in obj and obj.keys() <= _PLAIN_REQUEST


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


@final
class InputCloser:
    """Ends the connection from inside: stops reading, so the server loop sees end of
    input, answers what it can, and returns once everything is written."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()

    def close(self) -> None:
        self.scope.cancel()


def _sanitize(message: types.JSONRPCMessage, versions: Sequence[str]) -> types.JSONRPCMessage:
    """Rewrite what the SDK would leak or understate on the wire."""
    if not isinstance(message, types.JSONRPCError):
        return message
    error = message.error
    if error.code == 0:  # the SDK's 2025-era catch-all: str(exc) may name host paths
        return types.JSONRPCError(
            jsonrpc="2.0",
            id=message.id,
            error=types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error"),
        )
    if (
        error.code == types.UNSUPPORTED_PROTOCOL_VERSION
        and isinstance(error.data, dict)
        and error.message == "Unsupported protocol version"
    ):
        data = {**error.data, "supported": list(versions)}
        return types.JSONRPCError(
            jsonrpc="2.0",
            id=message.id,
            error=types.ErrorData(code=error.code, message=error.message, data=data),
        )
    return message


@final
class _Connection:
    """One stdio connection: a reader, and a relay that is the only writer.

    The reader's own answers (parse errors, refused lines) go to the relay on the
    same stream as the server's messages, already encoded.
    """

    def __init__(
        self,
        max_line: int,
        versions: Sequence[str],
        closer: InputCloser,
        lane: FastLane | None,
        nursery: trio.Nursery,
    ) -> None:
        self.max_line = max_line
        self.versions = versions
        self.reader_scope = closer.scope
        self.lane = lane
        self.nursery = nursery
        self.in_flight: set[Any] = set()
        self.drained = trio.Event()
        #: Requests the lane is answering, by coerced id: what cancels them.
        self.lane_calls: dict[Any, trio.CancelScope] = {}

    def settled(self, request_id: Any) -> None:
        """A request was answered, or cancelled by the client (then it never will be)."""
        self.in_flight.discard(_correlation_key(request_id))
        if not self.in_flight:
            self.drained.set()

    @staticmethod
    async def answer(replies: MemoryObjectSendStream[Outgoing], frame: bytes) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await replies.send(frame)

    async def handle(
        self,
        line: bytes | None,
        out: MemoryObjectSendStream[SessionMessage | Exception],
        replies: MemoryObjectSendStream[Outgoing],
    ) -> None:
        if line is None:
            text = f"Request too large: a line may hold at most {self.max_line} bytes"
            await self.answer(replies, error_frame(None, types.INVALID_REQUEST, text))
            return
        obj = decode(line)
        if obj is None:
            return
        if isinstance(obj, bytes):
            await self.answer(replies, obj)
            return
        if self.lane is not None and self.lane.open and plain_request(obj):
            job = self.lane.route(obj["method"], obj.get("params"))
            if job is not None:
                self.in_flight.add(coerce_request_id(obj["id"]))
                self.nursery.start_soon(self.run_lane_job, obj["id"], job, replies)
                return
        item = to_message(obj)
        if isinstance(item, bytes):
            await self.answer(replies, item)
            return
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            self.in_flight.add(coerce_request_id(message.id))
            if self.lane is not None:
                self.lane.forwarded(message)
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
        ):
            cancelled = (message.params or {}).get("requestId")
            self.cancel_lane_job(cancelled)
            self.settled(cancelled)
        await out.send(item)

    async def run_lane_job(
        self, request_id: Any, job: Job, replies: MemoryObjectSendStream[Outgoing]
    ) -> None:
        """Answer one request the lane took, unless the client cancels it."""
        key = coerce_request_id(request_id)
        frame = None
        with trio.CancelScope() as scope:
            self.lane_calls[key] = scope
            try:
                result = await job()
                frame = _framed(to_json({"jsonrpc": "2.0", "id": request_id, "result": result}))
            except MCPError as exc:
                error = exc.error
                frame = error_frame(request_id, error.code, error.message, error.data)
            except Exception:
                log.exception("internal error in a fast-lane request")
                frame = error_frame(request_id, types.INTERNAL_ERROR, "Internal error")
            finally:
                if self.lane_calls.get(key) is scope:
                    del self.lane_calls[key]
        if frame is not None and not scope.cancel_called:
            await self.answer(replies, frame)
        self.settled(request_id)

    def cancel_lane_job(self, request_id: Any) -> None:
        scope = self.lane_calls.get(_correlation_key(request_id))
        if scope is not None:
            scope.cancel()

    async def reader(
        self,
        stdin: trio.lowlevel.FdStream,
        out: MemoryObjectSendStream[SessionMessage | Exception],
        replies: MemoryObjectSendStream[Outgoing],
    ) -> None:
        splitter = LineSplitter(self.max_line)
        async with out, replies:
            with self.reader_scope:
                while chunk := await stdin.receive_some(_READ_SIZE):
                    for line in splitter.feed(chunk):
                        await self.handle(line, out, replies)
                for line in splitter.finish():
                    await self.handle(line, out, replies)
            # End of input: answer what is still running before the server sees EOF
            # (the SDK would cancel it and answer -32000 "Connection closed").
            if self.in_flight:
                self.drained = trio.Event()  # set once the last of them settles
                with trio.move_on_after(EOF_DRAIN_TIMEOUT):
                    await self.drained.wait()

    def encode(self, item: Outgoing) -> bytes:
        """The wire frame for a server message (sanitized) or a ready frame."""
        if isinstance(item, bytes):
            return item
        message = _sanitize(item.message, self.versions)
        if self.lane is not None:
            self.lane.sent(message)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self.settled(message.id)
        # Straight to bytes: model_dump_json would decode them into a str first, and a
        # big result would then be copied twice more on its way out.
        return _framed(
            message.__pydantic_serializer__.to_json(message, by_alias=True, exclude_unset=True)
        )

    async def relay(
        self, source: MemoryObjectReceiveStream[Outgoing], stdout: trio.lowlevel.FdStream
    ) -> None:
        """Write every outgoing message, in order; after the client closed stdout,
        drop them (reading on until the senders finish)."""
        open_ = True
        async with source:
            async for item in source:
                frame = self.encode(item)
                if not open_:
                    continue
                try:
                    await stdout.send_all(frame)
                    if not frame.endswith(b"\n"):  # a big frame: its newline apart, no copy
                        await stdout.send_all(b"\n")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("stdout closed by the client")
                    open_ = False


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


async def serve_stdio(
    server: Server[Any],
    wire: tuple[int, int],
    *,
    max_line: int,
    versions: Sequence[str],
    closer: InputCloser | None = None,
    lane: FastLane | None = None,
) -> None:
    """Serve ``server`` over the ``wire`` fds (from :func:`take_stdio`) until end of
    input (or ``closer``), the requests ``lane`` takes without the SDK."""
    wire_in, wire_out = wire
    to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    outgoing, to_client = anyio.create_memory_object_stream[Outgoing](64)
    server_out = cast("MemoryObjectSendStream[SessionMessage]", outgoing.clone())
    async with (
        trio.lowlevel.FdStream(wire_in) as stdin,
        trio.lowlevel.FdStream(wire_out) as stdout,
        trio.open_nursery() as nursery,
    ):
        connection = _Connection(max_line, versions, closer or InputCloser(), lane, nursery)
        nursery.start_soon(connection.reader, stdin, to_server, outgoing)
        nursery.start_soon(connection.relay, to_client, stdout)
        await server.run(server_in, server_out, server.create_initialization_options())
        connection.reader_scope.cancel()

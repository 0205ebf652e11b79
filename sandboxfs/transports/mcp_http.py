"""The MCP endpoint of streamable HTTP, as an ASGI application.

Each POST to ``/mcp`` is one JSON-RPC message, served statelessly by a fresh
:class:`~sandboxfs.session.core.Session` in the era its ``MCP-Protocol-Version``
header names (none, or a 2025 version: the 2025 era; ``2026-07-28``: that era,
its envelope and the ``Mcp-Method``/``Mcp-Name`` headers checked against the
body).  The answer is JSON whenever the client accepts JSON, unless the request
asked for progress and the client accepts a stream too (and ``--json-response``
is not given): then the answer is an SSE stream of the progress notifications
and the response, and only once a notification is due.  A client that accepts
only ``text/event-stream`` gets a stream.

Before a message is read: the ``Host`` must be one this server answers to,
exactly (a name or address and its port; once; else 421 naming the Host
received, escaped, and the ``--allowed-host`` that would accept it); an ``Origin``, if any, must be
exactly a loopback origin (any port) or one allowed by the operator; only POST
is served (GET and DELETE: 405, there is no session to stream or end); a
request carrying both ``Content-Length`` and ``Transfer-Encoding`` is refused
and its connection closed; the body is capped.
Authentication and the probes sit in front of this (:class:`sidecar.Gate`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

import trio

from sandboxfs.core.errors import SandboxError
from sandboxfs.session.approval import Answers
from sandboxfs.session.core import Era, Session
from sandboxfs.session.driver import Driver
from sandboxfs.session.envelope import unsupported_version
from sandboxfs.session.jsonrpc import (
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    MODERN_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    error_message,
    valid_id,
)
from sandboxfs.session.pieces import encode_pieces
from sandboxfs.session.server import SandboxfsServer
from sandboxfs.session.workspaces import WORKSPACE_HEADER, Assigned, WorkspaceRefused
from sandboxfs.transports.httppolicy import NOSNIFF, HttpPolicy, misdirected

__all__ = ["DEFAULT_VERSION", "HttpPolicy", "McpEndpoint"]

log = logging.getLogger("sandboxfs")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: The version a request without ``MCP-Protocol-Version`` speaks (the SDK's rule).
DEFAULT_VERSION: Final = "2025-03-26"
#: How the 2026-07-28 era maps a JSON-RPC error to an HTTP status.
_STATUS: Final = {-32601: 404, -32700: 400, -32600: 400, -32602: 400, -32020: 400}


def _headers(scope: Scope) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return found


def _one(headers: dict[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _accepts(headers: dict[str, list[str]]) -> tuple[bool, bool]:
    """Whether the client takes JSON, and whether it takes an SSE stream."""
    kinds = {_media_type(part) for value in headers.get("accept", []) for part in value.split(",")}
    anything = "*/*" in kinds
    return (
        anything or "application/json" in kinds or "application/*" in kinds,
        anything or "text/event-stream" in kinds or "text/*" in kinds,
    )


async def _plain(send: Send, status: int, body: bytes = b"", headers: Sequence[Any] = ()) -> None:
    start_headers = (
        [(b"content-type", b"text/plain; charset=utf-8"), NOSNIFF, *headers]
        if body
        else list(headers)
    )
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, message: dict[str, Any]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    body = encode_pieces(message)
    if isinstance(body, bytes):
        await send({"type": "http.response.body", "body": body})
        return
    for piece in body:  # a big answer: its pieces as they are made, never joined
        await send(_part(piece))
    await send({"type": "http.response.body", "body": b""})


def _decoded_name(value: str) -> str:
    """An ``Mcp-Name`` header, decoded from the SDK's ``=?base64?...?=`` form if used."""
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


def _header_problem(headers: dict[str, list[str]], message: dict[str, Any]) -> str | None:
    """Why the 2026-07-28 headers disagree with the body, or None."""
    for name in ("mcp-protocol-version", "mcp-method", "mcp-name"):
        if len(headers.get(name, [])) > 1:
            return f"{name} header appears more than once"
    params = message.get("params") or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    if version is not None and _one(headers, "mcp-protocol-version") != version:
        return "mcp-protocol-version header does not match the request envelope's protocol version"
    if _one(headers, "mcp-method") != message["method"]:
        return "mcp-method header does not match the request body's method"
    named = {"tools/call": "name", "resources/read": "uri"}.get(message["method"])
    if named is not None and isinstance(params, dict) and params.get(named) is not None:
        given = _one(headers, "mcp-name")
        if given is None or _decoded_name(given) != params.get(named):
            return f"mcp-name header does not match the request body's '{named}' parameter"
    return None


class _Gone(Exception):
    """The client disconnected."""


@final
@dataclass
class _Exchange:
    """One POST being served."""

    scope: Scope
    receive: Receive
    send: Send
    headers: dict[str, list[str]]

    @property
    def takes(self) -> tuple[bool, bool]:
        return _accepts(self.headers)


@final
class McpEndpoint:
    """``/mcp``: one stateless exchange per POST."""

    def __init__(self, server: SandboxfsServer, policy: HttpPolicy) -> None:
        self.server = server
        self.policy = policy
        self.config = server.session_config(http=True)
        #: Questions sent to clients on a call's stream (--ask), answered by a POST.
        self.answers = Answers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = _Exchange(scope, receive, send, _headers(scope))
        refused = self._refused(exchange)
        if refused is not None:
            await _plain(send, *refused)
            return
        try:
            body = await self._body(exchange)
        except _Gone:
            return  # the client left before its request was whole: nobody to answer
        if body is None:
            await _plain(send, 413, b"Request body too large\n")
            return
        await self._message(exchange, body)

    def _refused(self, exchange: _Exchange) -> tuple[int, bytes, list[Any]] | None:
        """What a request is refused with before its body is read, or None."""
        headers, policy = exchange.headers, self.policy
        if not policy.host_ok(headers.get("host", [])):
            return 421, misdirected(headers.get("host", [])), []
        problems: list[tuple[bool, int, bytes, list[Any]]] = [
            (not policy.origin_ok(headers.get("origin", [])), 403, b"Invalid Origin header\n", []),
            (
                exchange.scope.get("method") != "POST",
                405,
                b"Only POST is served: this server keeps no sessions\n",
                [(b"allow", b"POST")],
            ),
            (
                "content-length" in headers and "transfer-encoding" in headers,
                400,
                b"Content-Length and Transfer-Encoding cannot both be given\n",
                [(b"connection", b"close")],  # how the body was framed is in doubt
            ),
            (
                _media_type(_one(headers, "content-type")) != "application/json",
                415,
                b"Content-Type must be application/json\n",
                [],
            ),
            (
                not self._answerable(exchange),
                406,
                b"Accept application/json"
                + (b"" if policy.json_only else b" or text/event-stream")
                + b"\n",
                [],
            ),
        ]
        for problem, status, body, extra in problems:
            if problem:
                return status, body, extra
        return None

    def _answerable(self, exchange: _Exchange) -> bool:
        """Whether an answer can take a form the client accepts (with
        ``--json-response`` the server never streams)."""
        takes_json, takes_stream = exchange.takes
        return takes_json or (takes_stream and not self.policy.json_only)

    async def _body(self, exchange: _Exchange) -> bytes | None:
        limit = self.policy.max_body
        declared = _one(exchange.headers, "content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await exchange.receive()
            if message["type"] != "http.request":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _message(self, exchange: _Exchange, body: bytes) -> None:
        send = exchange.send
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            await _json(send, 400, error_message(None, PARSE_ERROR, "Parse error"))
            return
        if not _one_message(message):
            text = "Body must be a single JSON-RPC request or notification object"
            await _json(send, 400, error_message(None, INVALID_REQUEST, text))
            return
        if "method" not in message or "id" not in message:
            if "method" not in message:
                self.answers.resolve(message)  # a user's answer to a question of a call
            await _plain(send, 202)  # a notification or a response: nothing to answer
            return
        era, refusal = _era(exchange.headers, message)
        if refusal is not None:
            await _json(send, 400, refusal)
            return
        takes_json, takes_stream = exchange.takes
        only_stream = not takes_json  # then a stream is allowed: _answerable saw to that
        stream = only_stream or (
            takes_stream and not self.policy.json_only and _wants_progress(message)
        )
        await self._serve(exchange, message, era, stream=stream, only_stream=only_stream)

    async def _serve(
        self,
        exchange: _Exchange,
        message: dict[str, Any],
        era: Era,
        *,
        stream: bool,
        only_stream: bool,
    ) -> None:
        """Answer ``message``: JSON, unless ``stream`` and a notification is due
        first, or ``only_stream`` (the client takes nothing else): then SSE."""
        version = _one(exchange.headers, "mcp-protocol-version") or DEFAULT_VERSION
        server, assigned = await self._workspace(exchange, message)
        if server is None:
            return
        try:
            await self._exchange(
                exchange,
                message,
                era,
                version,
                server=server,
                assigned=assigned,
                stream=stream,
                only_stream=only_stream,
            )
        finally:
            if assigned is not None:
                assigned.lease.release()

    async def _workspace(
        self, exchange: _Exchange, message: dict[str, Any]
    ) -> tuple[SandboxfsServer | None, Assigned | None]:
        """The server view a request is served by: with ``--workspaces``, one whose
        allow-list is the request's session (see sandboxfs.session.workspaces); None
        if the request was refused (and answered)."""
        workspaces = self.server.options.workspaces
        if workspaces is None:
            return self.server, None
        headers = exchange.headers
        try:
            assigned = await self.server.bounded(
                lambda _watch: workspaces.for_request(
                    message["method"],
                    operator=_one(headers, WORKSPACE_HEADER),
                    session=_one(headers, "mcp-session-id"),
                )
            )
        except WorkspaceRefused as exc:
            reply = error_message(message["id"], INVALID_REQUEST, str(exc))
            await _json(exchange.send, exc.status, reply)
            return None, None
        except (OSError, SandboxError) as exc:
            log.warning("cannot open a workspace session: %s", exc)
            reply = error_message(message["id"], INTERNAL_ERROR, "The workspace cannot be opened")
            await _json(exchange.send, 503, reply)
            return None, None
        if assigned is None:
            return self.server, None
        return self.server.with_access(workspaces.access(assigned.lease)), assigned

    async def _exchange(
        self,
        exchange: _Exchange,
        message: dict[str, Any],
        era: Era,
        version: str,
        *,
        server: SandboxfsServer,
        assigned: Assigned | None,
        stream: bool,
        only_stream: bool,
    ) -> None:
        session = Session(self.config, era=era, version=version)
        issued = []
        if assigned is not None and assigned.issued is not None:
            issued.append((b"mcp-session-id", assigned.issued.encode("ascii")))
        client = exchange.scope.get("client")
        if client:
            session.peer = f"{client[0]}:{client[1]}"
        outgoing, incoming = trio.open_memory_channel[dict[str, Any]](math.inf)
        request_id = message["id"]

        async def send(event: MutableMapping[str, Any]) -> None:
            # Never cut short by the client leaving (which cancels the work below):
            # an answer is sent whole, and Hypercorn closes the connection after it.
            if issued and event["type"] == "http.response.start":
                event = {**event, "headers": [*event["headers"], *issued]}
            with trio.CancelScope(shield=True):
                await exchange.send(event)
            if event.get("more_body"):
                # More of the answer is to come: if the client has gone meanwhile (it
                # was cut off for not reading), the rest is neither made nor held.
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_disconnect, exchange.receive, nursery.cancel_scope)
            takes_stream = exchange.takes[1] and not self.policy.json_only
            driver = Driver(
                session,
                server,
                outgoing.send_nowait,
                nursery,
                answers=self.answers,
                can_ask=takes_stream,  # a question goes out on the call's stream
            )
            driver.receive(message)
            started = False
            async for reply in incoming:
                final = reply.get("id") == request_id and "method" not in reply
                if not final and "id" in reply and "method" in reply:
                    stream = True  # a question to the client (--ask): only a stream carries it
                if not final and not stream:
                    continue  # progress nobody can be sent: JSON has one answer
                status = _status(era, reply) if final else 200
                if final and not started and not only_stream:
                    await _json(send, status, reply)
                    break
                if not started:
                    started = True
                    start = {"type": "http.response.start", "status": status, "headers": _SSE}
                    await send(start)
                body = encode_pieces(reply)
                if isinstance(body, bytes):
                    event = b"event: message\r\ndata: " + body + b"\r\n\r\n"
                else:  # a big answer: one event, sent in pieces as they are made
                    await send(_part(b"event: message\r\ndata: "))
                    for piece in body:
                        await send(_part(piece))
                    event = b"\r\n\r\n"
                await send({"type": "http.response.body", "body": event, "more_body": not final})
                if final:
                    break
            nursery.cancel_scope.cancel()


def _part(body: bytes) -> dict[str, Any]:
    """A part of a response body, more to come."""
    return {"type": "http.response.body", "body": body, "more_body": True}


_SSE: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def _one_message(message: Any) -> bool:
    """Whether a body is one JSON-RPC request, notification or response."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "method" in message:
        return (
            isinstance(message["method"], str)
            and isinstance(message.get("params", {}), dict)
            and ("id" not in message or valid_id(message["id"]))
        )
    return ("result" in message) != ("error" in message)


def _era(headers: dict[str, list[str]], message: dict[str, Any]) -> tuple[Era, Any]:
    """The era a request speaks (from its ``MCP-Protocol-Version``), and the error it is
    refused with, if any (an unknown version; 2026 headers that disagree with the body)."""
    version = _one(headers, "mcp-protocol-version") or DEFAULT_VERSION
    if version in HANDSHAKE_VERSIONS:
        return "2025", None
    if version not in MODERN_VERSIONS:
        error = unsupported_version(version)
        return "2026", error_message(message["id"], error.code, error.message, error.data)
    problem = _header_problem(headers, message)
    if problem is not None:
        return "2026", error_message(message["id"], HEADER_MISMATCH, problem)
    return "2026", None


def _wants_progress(message: dict[str, Any]) -> bool:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and "progressToken" in meta


def _status(era: Era, reply: dict[str, Any]) -> int:
    error = reply.get("error")
    if era != "2026" or not isinstance(error, dict):
        return 200
    code = error.get("code")
    if code == -32601:
        return 404
    if code in _STATUS or (isinstance(code, int) and -32099 <= code <= -32020):
        return _STATUS.get(code, 400)
    return 200


async def _watch_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    """The client went away: stop the work done for it (its call is cancelled)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return

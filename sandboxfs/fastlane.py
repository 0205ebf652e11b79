"""A fast lane past the SDK's dispatcher for the requests an agent makes most.

Once the SDK has completed a 2025-era handshake on a stdio connection,
``tools/call`` and ``ping`` requests of the plainest shape are answered here:
checked by the simple rules below, run through the same
:meth:`SandboxfsServer.run_tool` as the SDK's handler, and written as one frame.
On a 2026-07-28 connection (the SDK decides the era from the first request,
which therefore always goes to it) the lane takes plain ``tools/call``
requests whose envelope names that version.  Everything else (other methods,
any field beyond the plain shape) goes to the SDK as before.  The SDK's route costs a call several
hundred microseconds of stream hops, a task, a session object and a second
validation of the result; the answers are the same (a test compares them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, final

import mcp_types as types
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from mcp_types.methods import validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

log = logging.getLogger("sandboxfs")

#: Runs a tool (name, arguments, protocol version, client name) to its wire result.
RunTool = Callable[[str, dict[str, Any], str, str | None], Awaitable[dict[str, Any]]]
#: A request the lane answers: awaiting it gives the JSON-RPC ``result``.
Job = Callable[[], Awaitable[dict[str, Any]]]

_CALL_FIELDS: Final = frozenset({"name", "arguments", "_meta"})
_ENVELOPE_FIELDS: Final = frozenset(
    {
        PROTOCOL_VERSION_META_KEY,
        CLIENT_CAPABILITIES_META_KEY,
        CLIENT_INFO_META_KEY,
        "progressToken",
    }
)
#: Test-only: set, every request goes through the SDK (to compare the answers).
NO_FAST_LANE_ENV: Final = "SANDBOXFS_TEST_NO_FAST_LANE"


def _plain_token(meta: Mapping[str, Any]) -> bool:
    token = meta.get("progressToken", "")
    return isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))


def _plain_meta(meta: Any) -> bool:
    """A 2025-era request ``_meta`` holding at most a progress token."""
    if meta is None:
        return True
    return isinstance(meta, dict) and meta.keys() <= {"progressToken"} and _plain_token(meta)


def modern_envelope(meta: Any) -> bool:
    """A 2026-07-28 request envelope of the plain shape: a served version, the client's
    capabilities as an object, at most client info and a progress token."""
    return (
        isinstance(meta, dict)
        and meta.keys() <= _ENVELOPE_FIELDS
        and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS
        and isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), dict)
        and _plain_token(meta)
    )


def plain_tool_call(params: Mapping[str, Any] | None, *, modern: bool = False) -> bool:
    """Whether ``tools/call`` params have the plain shape the lane serves (with the
    2026-07-28 envelope when ``modern``)."""
    return (
        params is not None
        and params.keys() <= _CALL_FIELDS
        and isinstance(params.get("name"), str)
        and isinstance(params.get("arguments", {}), dict)
        and (modern_envelope(params.get("_meta")) if modern else _plain_meta(params.get("_meta")))
    )


def _client_name(meta: Mapping[str, Any]) -> str | None:
    """The client's name as the SDK knows it from an envelope: only when both its
    info and its capabilities are well-formed."""
    try:
        info = types.Implementation.model_validate(meta.get(CLIENT_INFO_META_KEY), by_name=False)
        types.ClientCapabilities.model_validate(meta[CLIENT_CAPABILITIES_META_KEY], by_name=False)
    except ValidationError:
        return None
    return info.name


@final
class FastLane:
    """Decides, request by request, what the lane answers; watches the handshake.

    The transport tells it of every request it forwards to the SDK and every
    message the SDK sends: the lane opens when the SDK answers ``initialize``
    successfully, with the protocol version the SDK negotiated, and closes
    while a new ``initialize`` is pending.
    """

    def __init__(self, run_tool: RunTool, server_info: dict[str, Any]) -> None:
        self._run_tool = run_tool
        self._server_info = server_info  # stamped on 2026-07-28 results, as the SDK does
        self._pending: dict[types.RequestId, str | None] = {}  # initialize id -> client name
        self._version: str | None = None
        self._client: str | None = None
        self._first_seen = False
        self._modern = False
        #: How many requests the lane has taken.
        self.taken = 0

    @property
    def open(self) -> bool:
        return self._version is not None or self._modern

    def forwarded(self, request: types.JSONRPCRequest) -> None:
        """A request went to the SDK."""
        if not self._first_seen:  # the SDK's era for this connection, decided for good
            self._first_seen = True
            meta = (request.params or {}).get("_meta")
            if (
                request.method != "initialize"
                and isinstance(meta, dict)
                and PROTOCOL_VERSION_META_KEY in meta
            ):
                self._modern = True
                log.info("Fast lane open: plain 2026-07-28 tools/call skip the SDK dispatcher")
                return
        if request.method == "initialize" and not self._modern:
            self._version = None
            info = (request.params or {}).get("clientInfo")
            name = info.get("name") if isinstance(info, dict) else None
            self._pending[request.id] = name if isinstance(name, str) else None

    def sent(self, message: types.JSONRPCMessage) -> None:
        """The SDK sent ``message`` to the client."""
        if not self._pending or not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return
        if message.id not in self._pending:
            return
        client = self._pending.pop(message.id)
        if isinstance(message, types.JSONRPCResponse):
            version = message.result.get("protocolVersion")
            if version in HANDSHAKE_PROTOCOL_VERSIONS and not self._pending:
                self._version, self._client = version, client
                log.info("Fast lane open: plain tools/call and ping skip the SDK dispatcher")

    def route(self, method: Any, params: Any) -> Job | None:
        """The job answering a request, or None if it is the SDK's to answer."""
        if self._modern:
            return self._route_modern(method, params)
        version = self._version
        if version is None:
            return None
        if method == "tools/call" and plain_tool_call(params):
            assert params is not None
            self.taken += 1
            name, arguments, client = params["name"], params.get("arguments", {}), self._client

            async def call() -> dict[str, Any]:
                return await self._run_tool(name, arguments, version, client)

            return call
        if method == "ping" and not params:
            self.taken += 1

            async def pong() -> dict[str, Any]:
                return {}

            return pong
        return None

    def _route_modern(self, method: Any, params: Any) -> Job | None:
        if method != "tools/call" or not plain_tool_call(params, modern=True):
            return None
        meta = params["_meta"]
        version = meta[PROTOCOL_VERSION_META_KEY]
        try:  # the SDK's own check of the envelope's client info and capabilities
            validate_client_request(method, version, params)
        except (ValidationError, KeyError, ValueError):
            return None
        self.taken += 1
        name, arguments, client = params["name"], params.get("arguments", {}), _client_name(meta)
        stamp = {SERVER_INFO_META_KEY: self._server_info}

        async def call() -> dict[str, Any]:
            result = await self._run_tool(name, arguments, version, client)
            return {**result, "resultType": "complete", "_meta": stamp}

        return call

"""A fast lane past the SDK's dispatcher for the requests an agent makes most.

Once the SDK has completed a 2025-era handshake on a stdio connection,
``tools/call`` and ``ping`` requests of the plainest shape are answered here:
checked by the simple rules below, run through the same
:meth:`SandboxfsServer.run_tool` as the SDK's handler, and written as one frame.
Everything else (other methods, a 2026-07-28 connection, any field beyond the
plain shape) goes to the SDK as before.  The SDK's route costs a call several
hundred microseconds of stream hops, a task, a session object and a second
validation of the result; the answers are the same (a test compares them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, final

import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

log = logging.getLogger("sandboxfs")

#: Runs a tool (name, arguments, protocol version, client name) to its wire result.
RunTool = Callable[[str, dict[str, Any], str, str | None], Awaitable[dict[str, Any]]]
#: A request the lane answers: awaiting it gives the JSON-RPC ``result``.
Job = Callable[[], Awaitable[dict[str, Any]]]

_CALL_FIELDS: Final = frozenset({"name", "arguments", "_meta"})
#: Test-only: set, every request goes through the SDK (to compare the answers).
NO_FAST_LANE_ENV: Final = "SANDBOXFS_TEST_NO_FAST_LANE"


def _plain_meta(meta: Any) -> bool:
    """A 2025-era request ``_meta`` holding at most a progress token."""
    if meta is None:
        return True
    if not isinstance(meta, dict) or not meta.keys() <= {"progressToken"}:
        return False
    token = meta.get("progressToken", "")
    return isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))


def plain_tool_call(params: Mapping[str, Any] | None) -> bool:
    """Whether ``tools/call`` params have the plain shape the lane serves."""
    return (
        params is not None
        and params.keys() <= _CALL_FIELDS
        and isinstance(params.get("name"), str)
        and isinstance(params.get("arguments", {}), dict)
        and _plain_meta(params.get("_meta"))
    )


@final
class FastLane:
    """Decides, request by request, what the lane answers; watches the handshake.

    The transport tells it of every request it forwards to the SDK and every
    message the SDK sends: the lane opens when the SDK answers ``initialize``
    successfully, with the protocol version the SDK negotiated, and closes
    while a new ``initialize`` is pending.
    """

    def __init__(self, run_tool: RunTool) -> None:
        self._run_tool = run_tool
        self._pending: dict[types.RequestId, str | None] = {}  # initialize id -> client name
        self._version: str | None = None
        self._client: str | None = None
        #: How many requests the lane has taken.
        self.taken = 0

    @property
    def open(self) -> bool:
        return self._version is not None

    def forwarded(self, request: types.JSONRPCRequest) -> None:
        """A request went to the SDK."""
        if request.method == "initialize":
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

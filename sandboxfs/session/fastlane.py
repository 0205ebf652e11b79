"""A fast lane past the SDK for the requests an agent makes most.

On a 2025-era stdio connection the lane answers a plain ``initialize`` (one the
server accepts) and its ``notifications/initialized``, then plain
``tools/list``, ``tools/call`` and ``ping`` requests: checked by the simple
rules below, tools run through the same :meth:`SandboxfsServer.run_tool` as the
SDK's handler, each answer written as one frame.  For a client with Roots it
asks ``roots/list`` itself (once initialized, and on
``notifications/roots/list_changed``), checking the answer as the SDK's models
do.  The SDK is then never imported unless a message the lane does not take
arrives; the lane hands it the handshake to replay first.  When the SDK
answered the handshake itself, the lane opens on its answer.

On a 2026-07-28 connection (the SDK decides the era from the first request,
which therefore always goes to it) the lane takes plain ``tools/call``
requests whose envelope names that version.  Everything else (other methods,
any field beyond the plain shape) goes to the SDK.  The SDK's route costs a
call several hundred microseconds of stream hops, a task, a session object and
a second validation of the result; the answers are the same (a test compares
them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, final

import pydantic_core

from sandboxfs.session.jsonrpc import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_VERSIONS,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    ROOTS_FETCH_TIMEOUT,
    SERVER_INFO_META_KEY,
    correlation_key,
)

log = logging.getLogger("sandboxfs")

#: A request the lane answers: awaiting it gives the JSON-RPC ``result``.
Job = Callable[[], Awaitable[dict[str, Any]]]


#: Sends the client a request (method, timeout in seconds) and gives its result.
Ask = Callable[[str, float], Awaitable[Any]]


class LaneServer(Protocol):
    """What the lane needs of :class:`~sandboxfs.session.server.SandboxfsServer`."""

    tool_definitions: list[dict[str, Any]]
    server_info: dict[str, Any]

    def may_greet(self, capabilities: dict[str, Any]) -> bool: ...
    def on_initialize(self, params: Any) -> None: ...
    def initialize_result(self, version: str) -> dict[str, Any]: ...
    def lane_initialized(self) -> int | None: ...
    def lane_roots_changed(self) -> int: ...
    def expect_replay(self, *, initialized: bool) -> None: ...
    async def fill_roots(
        self, generation: int, fetch: Callable[[], Awaitable[list[str]]]
    ) -> None: ...
    async def run_lane_tool(
        self, name: str, arguments: dict[str, Any], protocol_version: str, client: str | None
    ) -> dict[str, Any]: ...


_CALL_FIELDS: Final = frozenset({"name", "arguments", "_meta"})
_INITIALIZE_FIELDS: Final = frozenset({"protocolVersion", "capabilities", "clientInfo"})
_CLIENT_INFO_FIELDS: Final = frozenset({"name", "version", "title"})
#: Client capabilities the lane greets as empty objects (nothing to ask them for).
_GREETED_CAPABILITIES: Final = frozenset({"sampling", "elicitation"})
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
        and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_VERSIONS
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


def _plain_list(params: Mapping[str, Any] | None) -> bool:
    """``tools/list`` params asking for the whole (single) page."""
    return not params or (params.keys() <= {"_meta"} and _plain_meta(params.get("_meta")))


def _plain_capability(name: str, value: Any) -> bool:
    if name == "roots":  # {} or {"listChanged": true|false}
        return (
            isinstance(value, dict)
            and value.keys() <= {"listChanged"}
            and all(isinstance(flag, bool) for flag in value.values())
        )
    return name in _GREETED_CAPABILITIES and value == {}


def plain_initialize(params: Mapping[str, Any] | None) -> bool:
    """An ``initialize`` of the plainest valid shape: a handshake version, client
    info as strings, and at most Roots and empty sampling/elicitation capabilities."""
    if params is None or params.keys() != _INITIALIZE_FIELDS:
        return False
    info, capabilities = params["clientInfo"], params["capabilities"]
    return (
        params["protocolVersion"] in HANDSHAKE_VERSIONS
        and isinstance(info, dict)
        and {"name", "version"} <= info.keys() <= _CLIENT_INFO_FIELDS
        and all(isinstance(value, str) for value in info.values())
        and isinstance(capabilities, dict)
        and all(_plain_capability(name, value) for name, value in capabilities.items())
    )


def root_uris(result: Any) -> list[str]:
    """The URIs of a client's ``roots/list`` result, checked and normalized as the
    SDK's models do (each a ``file:`` URL); ValueError if it is not such a result."""
    roots = result.get("roots") if isinstance(result, dict) else None
    if not isinstance(roots, list):
        raise ValueError("the client's roots/list answer holds no list of roots")
    uris = []
    for root in roots:
        if not (
            isinstance(root, dict)
            and isinstance(root.get("uri"), str)
            and isinstance(root.get("name"), str | None)
            and isinstance(root.get("_meta"), dict | None)
        ):
            raise ValueError("the client's roots/list answer holds a malformed root")
        try:
            url = pydantic_core.Url(root["uri"])
        except ValueError as exc:  # pydantic_core's URL errors are ValueErrors
            raise ValueError(f"the client's roots/list answer holds a bad URI: {exc}") from None
        if url.scheme != "file":
            raise ValueError("the client's roots/list answer holds a root that is not a file: URL")
        uris.append(str(url))
    return uris


def _client_name(meta: Mapping[str, Any]) -> str | None:
    """The client's name as the SDK knows it from an envelope: only when both its
    info and its capabilities are well-formed."""
    import mcp_types as types  # noqa: PLC0415 - a 2026-07-28 connection has the SDK loaded
    from pydantic import ValidationError  # noqa: PLC0415

    try:
        info = types.Implementation.model_validate(meta.get(CLIENT_INFO_META_KEY), by_name=False)
        types.ClientCapabilities.model_validate(meta[CLIENT_CAPABILITIES_META_KEY], by_name=False)
    except ValidationError:
        return None
    return info.name


@final
class FastLane:
    """Decides, message by message, what the lane answers; keeps the handshake.

    The transport tells it of every request it forwards to the SDK and every
    answer the SDK sends: the lane opens when the SDK answers ``initialize``
    successfully, with the protocol version the SDK negotiated, and closes
    while a new ``initialize`` is pending.
    """

    def __init__(self, server: LaneServer) -> None:
        self._server = server
        self._pending: dict[Any, str | None] = {}  # initialize id -> client name
        self._version: str | None = None
        self._client: str | None = None
        self._first_seen = False
        self._modern = False
        self._sdk_started = False
        self._roots = False  # the client the lane greeted has Roots
        #: What the lane answered of the handshake, to replay to the SDK.
        self._handshake: list[dict[str, Any]] = []
        #: How many requests the lane has taken.
        self.taken = 0

    @property
    def open(self) -> bool:
        return self._version is not None or self._modern

    def sdk_started(self, replay_id: str) -> list[dict[str, Any]]:
        """The SDK is being loaded: the handshake messages the lane answered, in
        order, for it to see first (``initialize`` with the id ``replay_id``)."""
        self._sdk_started = True
        replay = [dict(message) for message in self._handshake]
        for message in replay:
            if "id" in message:
                message["id"] = replay_id
        if replay:
            self._server.expect_replay(initialized=len(replay) > 1)
        self._handshake.clear()
        return replay

    def forwarded(self, method: str, params: dict[str, Any] | None, request_id: Any) -> None:
        """A request went to the SDK."""
        if not self._first_seen:  # the SDK's era for this connection, decided for good
            self._first_seen = True
            meta = (params or {}).get("_meta")
            if (
                method != "initialize"
                and isinstance(meta, dict)
                and PROTOCOL_VERSION_META_KEY in meta
            ):
                self._modern = True
                log.debug("Fast lane open: plain 2026-07-28 tools/call skip the SDK dispatcher")
                return
        if method == "initialize" and not self._modern:
            self._version = None
            info = (params or {}).get("clientInfo")
            name = info.get("name") if isinstance(info, dict) else None
            self._pending[correlation_key(request_id)] = name if isinstance(name, str) else None

    def answered(self, request_id: Any, result: dict[str, Any] | None) -> None:
        """The SDK answered a request: with ``result``, or with an error (None)."""
        key = correlation_key(request_id)
        if key not in self._pending:
            return
        client = self._pending.pop(key)
        version = result.get("protocolVersion") if result is not None else None
        if version in HANDSHAKE_VERSIONS and not self._pending:
            self._version, self._client = version, client
            log.debug("Fast lane open: plain tools/call and ping skip the SDK dispatcher")

    def notified(self, method: str, params: dict[str, Any] | None) -> tuple[bool, int | None]:
        """Whether the lane took a notification (only after greeting the client, while
        the SDK is not loaded), and the Roots update it calls for, if any."""
        if not self._handshake or params:
            return False, None
        if method == "notifications/initialized" and len(self._handshake) == 1:
            self._handshake.append({"jsonrpc": "2.0", "method": method})
            return True, self._server.lane_initialized()
        if method == "notifications/roots/list_changed":
            if self._roots:
                return True, self._server.lane_roots_changed()
            log.info("Ignoring roots/list_changed from a client without the Roots capability")
            return True, None
        return False, None

    async def fill_roots(self, generation: int, ask: Ask) -> None:
        """Fetch the client's Roots (``roots/list``, through ``ask``) for the update
        ``generation``."""

        async def fetch() -> list[str]:
            return root_uris(await ask("roots/list", ROOTS_FETCH_TIMEOUT))

        await self._server.fill_roots(generation, fetch)

    def route(self, method: Any, params: Any) -> Job | None:
        """The job answering a request, or None if it is the SDK's to answer."""
        if self._modern:
            return self._route_modern(method, params)
        if method == "initialize":
            return self._greet(params)
        if self._version is None:
            return None
        job = self._legacy_job(method, params, self._version)
        if job is not None:
            self.taken += 1
        return job

    def _legacy_job(self, method: Any, params: Any, version: str) -> Job | None:
        """A 2025-era request, once the handshake fixed its ``version``."""
        if method == "tools/call" and plain_tool_call(params):
            name, arguments, client = params["name"], params.get("arguments", {}), self._client
            run_tool = self._server.run_lane_tool

            async def call() -> dict[str, Any]:
                return await run_tool(name, arguments, version, client)

            return call
        if method == "tools/list" and _plain_list(params):
            tools = {"tools": self._server.tool_definitions}

            async def list_tools() -> dict[str, Any]:
                return tools

            return list_tools
        if method == "ping" and not params:

            async def pong() -> dict[str, Any]:
                return {}

            return pong
        return None

    def _greet(self, params: Any) -> Job | None:
        """Answer the connection's first message, a plain ``initialize``, before the
        SDK is loaded."""
        if self._first_seen or self._sdk_started or not plain_initialize(params):
            return None
        if not self._server.may_greet(params["capabilities"]):
            return None
        self._server.on_initialize(params)  # a client with Roots: calls wait for them
        self._first_seen = True
        self._roots = "roots" in params["capabilities"]
        self.taken += 1
        version = params["protocolVersion"]
        self._handshake.append(
            {"jsonrpc": "2.0", "id": None, "method": "initialize", "params": params}
        )
        self._version, self._client = version, params["clientInfo"]["name"]
        log.debug("Fast lane open: it answered the handshake; the SDK loads only if needed")
        result = self._server.initialize_result(version)

        async def welcome() -> dict[str, Any]:
            return result

        return welcome

    def _route_modern(self, method: Any, params: Any) -> Job | None:
        if method != "tools/call" or not plain_tool_call(params, modern=True):
            return None
        from mcp_types.methods import validate_client_request  # noqa: PLC0415 - SDK loaded
        from pydantic import ValidationError  # noqa: PLC0415

        meta = params["_meta"]
        version = meta[PROTOCOL_VERSION_META_KEY]
        try:  # the SDK's own check of the envelope's client info and capabilities
            validate_client_request(method, version, params)
        except (ValidationError, KeyError, ValueError):
            return None
        self.taken += 1
        name, arguments, client = params["name"], params.get("arguments", {}), _client_name(meta)
        stamp = {SERVER_INFO_META_KEY: self._server.server_info}
        run_tool = self._server.run_lane_tool

        async def call() -> dict[str, Any]:
            result = await run_tool(name, arguments, version, client)
            return {**result, "resultType": "complete", "_meta": stamp}

        return call

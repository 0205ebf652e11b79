"""The MCP session, sans I/O: messages in, messages and effects out.

In the spirit of h11: a :class:`Session` never reads, writes, sleeps or starts a
thread.  A transport feeds it each decoded JSON-RPC object (:meth:`Session.receive`)
and what the work it asked for came to (:meth:`Session.completed`,
:meth:`Session.roots_settled`, :meth:`Session.timer_expired`,
:meth:`Session.input_ended`), and carries out the effects it returns, in order:
:class:`Send` a message, run a :class:`Call`, :class:`Cancel` one, start a timer,
:class:`OpenRoots` or :class:`KeepRoots` the client sent, :class:`Close` the
connection.

What it owns: the era of the connection (2025 ``initialize`` or 2026-07-28
stateless requests with their envelope), the handshake and capabilities, every
method sandboxfs serves and the errors for the rest, when the client's Roots are
asked for (the questions themselves, their answers and the calls that wait for
them are :mod:`sandboxfs.session.clientroots`), the requests in flight and their
cancellation.

Guarantees: every request gets exactly one answer unless the client cancelled it;
a notification or a response never gets one; nothing a client sends raises out of
:meth:`Session.receive` (an unexpected failure is answered -32603); client text
that reaches the log is escaped (and, from a Roots answer, bounded); a Roots
answer, however malformed, never leaves a question outstanding, and calls never
wait for the Roots longer than ``ROOTS_FETCH_TIMEOUT``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Final, Literal, final

from sandboxfs.session.clientroots import ClientRoots
from sandboxfs.session.effects import (
    Call,
    Caller,
    Cancel,
    Close,
    Effect,
    Send,
    UseCommandLine,
)
from sandboxfs.session.envelope import (
    check_envelope,
    check_request_params,
    client_name,
    finish_legacy,
    finish_modern,
    invalid_params,
    is_modern,
    progress_token,
    unsupported_version,
)
from sandboxfs.session.jsonrpc import (
    HANDSHAKE_VERSIONS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SUPPORTED_VERSIONS,
    ProtocolError,
    correlation_key,
    error_message,
)

log = logging.getLogger("sandboxfs")

Era = Literal["2025", "2026"]
JSON = dict[str, Any]

#: The version a 2025-era client gets when it asks for one that is not served.
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_VERSIONS[-1]
#: Requests each era serves, besides what is refused before the handshake.
METHODS_2025: Final = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "logging/setLevel",
    }
)
METHODS_2026: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
#: Methods whose work runs outside the session (the transport's driver runs them).
CALLS: Final = frozenset({"tools/call", "resources/read"})

NO_DIRECTORIES_NO_ROOTS: Final = (
    "Server cannot operate: no allowed directories. It was started without command-line "
    "directories and the client does not support MCP Roots. Either start the server with "
    "directory arguments, or use a client that provides Roots."
)


# -- configuration ----------------------------------------------------------------------


@final
@dataclass(frozen=True)
class SessionConfig:
    """What a session knows of the server it speaks for."""

    server_info: JSON
    instructions: str
    #: ``tools/list`` entries, as served.
    tools: list[JSON]
    resource_templates: list[JSON]
    #: Whether a 2025-era client's Roots change the allowed directories (stdio only).
    roots: bool = True
    #: Whether directories were given on the command line.
    has_directories: bool = True
    #: Streamable HTTP: every request stands alone (no handshake gate, no back channel),
    #: and the era comes with the request (the ``MCP-Protocol-Version`` header).
    http: bool = False


def capabilities(era: Era) -> JSON:
    caps: JSON = {
        "resources": {"listChanged": False, "subscribe": False},
        "tools": {"listChanged": False},
    }
    if era == "2025":
        caps["logging"] = {}
    return caps


@dataclass
class _InFlight:
    request_id: Any
    method: str


# -- the session --------------------------------------------------------------------------


@final
class Session:
    """One MCP connection (stdio), or one HTTP request (``config.http``), without I/O."""

    def __init__(
        self, config: SessionConfig, *, era: Era | None = None, version: str | None = None
    ) -> None:
        self.config = config
        #: Decided by the first request on stdio; given per request over HTTP.
        self.era: Era | None = era
        self.version: str | None = version
        self.initialized = config.http  # HTTP has no handshake gate
        self.client: str | None = None
        self.peer: str | None = None
        self.closed = False
        self.input_over = False
        self._keys = itertools.count(1)
        self._told_no_roots_capability = False
        self._in_flight: dict[int, _InFlight] = {}
        self._roots = ClientRoots()
        self._greeted_without_roots = False

    # -- what the transport asks ------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a call is running or waiting (the transport waits at end of input)."""
        return bool(self._in_flight)

    # -- inputs -------------------------------------------------------------------------

    def receive(self, message: JSON) -> list[Effect]:
        """A decoded JSON-RPC object (see jsonrpc.decode: a request's envelope is sound,
        a response comes as the client sent it)."""
        try:
            if "method" not in message:
                return self._roots.response(message)
            if "id" not in message:
                return self._notification(message["method"], message.get("params"))
            return self._request(message["id"], message["method"], message.get("params"))
        except Exception:
            log.exception("internal error while handling a message")
            if "method" in message and "id" in message:
                return [Send(error_message(message["id"], INTERNAL_ERROR, "Internal error"))]
            return []

    def completed(self, key: int, result: JSON | ProtocolError) -> list[Effect]:
        """What the call ``key`` came to: its result, or the JSON-RPC error it fails with."""
        entry = self._in_flight.pop(key, None)
        if entry is None:  # cancelled: never answered
            return []
        if isinstance(result, ProtocolError):
            return [Send(error_message(entry.request_id, result.code, result.message, result.data))]
        return [Send(self._answer(entry.request_id, entry.method, result))]

    def failed(self, key: int) -> list[Effect]:
        """The call ``key`` raised something unexpected (logged by the caller)."""
        return self.completed(key, ProtocolError(INTERNAL_ERROR, "Internal error"))

    def progress_notice(
        self, token: str | int, progress: float, total: float | None, message: str | None
    ) -> list[Effect]:
        """A ``notifications/progress`` for a call that asked for progress."""
        params: JSON = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        return [Send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})]

    def roots_settled(self, generation: int) -> list[Effect]:
        """The Roots answer of ``generation`` is in force (or was given up): the calls
        that waited for it run now."""
        return self._roots.settled(generation)

    def timer_expired(self, name: str) -> list[Effect]:
        return self._roots.timer_expired(name)

    def input_ended(self) -> list[Effect]:
        """End of input: nothing more will come; questions to the client go unanswered."""
        self.input_over = True
        return self._roots.input_ended()

    # -- requests ---------------------------------------------------------------------------

    def _request(self, request_id: Any, method: str, params: JSON | None) -> list[Effect]:
        if self.closed:
            return []
        if self.era is None:  # the first request decides a stdio connection's era
            self.era = "2026" if method != "initialize" and is_modern(params) else "2025"
        try:
            if self.era == "2025":
                return self._legacy(request_id, method, params)
            return self._modern(request_id, method, params)
        except ProtocolError as exc:
            return [Send(error_message(request_id, exc.code, exc.message, exc.data))]

    def _legacy(self, request_id: Any, method: str, params: JSON | None) -> list[Effect]:
        if method != "initialize" and is_modern(params) and not self.config.http:
            raise ProtocolError(
                INVALID_REQUEST,
                "this connection serves the handshake protocol era; requests carrying the "
                "2026-07-28 envelope are not accepted on it",
            )
        if method not in METHODS_2025:
            raise _not_found(method)
        check_request_params(method, params)
        if method == "initialize":
            return self._initialize(request_id, params or {})
        if method == "ping":
            return [Send(_result(request_id, {}))]
        if not self.initialized:
            raise invalid_params()
        if method == "logging/setLevel":
            return [Send(_result(request_id, {}))]
        return self._serve(request_id, method, params, self.version or LATEST_HANDSHAKE_VERSION)

    def _modern(self, request_id: Any, method: str, params: JSON | None) -> list[Effect]:
        if method == "initialize" and not self.config.http:
            requested = (params or {}).get("protocolVersion")
            raise unsupported_version(
                requested,
                "connection is serving the 2026-07-28 protocol; the initialize handshake is "
                "not accepted",
            )
        if method not in METHODS_2026:
            raise _not_found(method)
        meta = check_envelope(params)
        check_request_params(method, params)
        self.client = client_name(params) or self.client
        version = meta["io.modelcontextprotocol/protocolVersion"]
        if method == "server/discover":
            return [Send(self._answer(request_id, method, self._discovery()))]
        return self._serve(request_id, method, params, version)

    def _serve(
        self, request_id: Any, method: str, params: JSON | None, version: str
    ) -> list[Effect]:
        if method in CALLS:
            return self._call(request_id, method, params or {}, version)
        if method == "tools/list":
            return [Send(self._answer(request_id, method, {"tools": self.config.tools}))]
        if method == "resources/list":
            return [Send(self._answer(request_id, method, {"resources": []}))]
        templates = {"resourceTemplates": self.config.resource_templates}
        return [Send(self._answer(request_id, method, templates))]

    def _call(self, request_id: Any, method: str, params: JSON, version: str) -> list[Effect]:
        key = next(self._keys)
        self._in_flight[key] = _InFlight(request_id, method)
        call = Call(
            key,
            method,
            params,
            Caller(version, client=self.client, peer=self.peer),
            progress_token(params),
        )
        if self._roots.updating:  # the client's Roots are being fetched
            return self._roots.hold(call)
        return [call]

    def _initialize(self, request_id: Any, params: JSON) -> list[Effect]:
        requested = params["protocolVersion"]
        self.version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION
        self.client = params["clientInfo"]["name"]
        declared = isinstance(params["capabilities"].get("roots"), dict)
        config = self.config
        if config.roots and not declared and not config.has_directories:
            log.error("Error: %s", NO_DIRECTORIES_NO_ROOTS)
            self.closed = True
            return [
                Send(error_message(request_id, INVALID_PARAMS, NO_DIRECTORIES_NO_ROOTS)),
                Close(1),
            ]
        self._roots.declared = declared and config.roots
        self._roots.fetched = False  # a new handshake asks again, once initialized
        self.initialized = True
        result = {
            "protocolVersion": self.version,
            "capabilities": capabilities("2025"),
            "serverInfo": dict(config.server_info),
            "instructions": config.instructions,
        }
        return [Send(_result(request_id, result))]

    def _discovery(self) -> JSON:
        return {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": capabilities("2026"),
            "instructions": self.config.instructions,
        }

    def _answer(self, request_id: Any, method: str, result: JSON) -> JSON:
        if self.era == "2026":
            finished = finish_modern(method, result, self.config.server_info)
        else:
            finished = finish_legacy(method, result)
        return _result(request_id, finished)

    # -- notifications ------------------------------------------------------------------------

    def _notification(self, method: str, params: JSON | None) -> list[Effect]:
        if method == "notifications/cancelled":
            return self._cancelled(params or {})
        if self.era != "2025" or self.config.http or not self.config.roots or self.closed:
            return []  # 2026-07-28 (and HTTP) know only cancellation
        if method == "notifications/initialized":
            return self._initialized()
        if method == "notifications/roots/list_changed" and self.initialized:
            return self._roots_changed()
        return []

    def _roots_changed(self) -> list[Effect]:
        if not self._roots.declared:
            if not self._told_no_roots_capability:  # said once: a storm is not a log flood
                self._told_no_roots_capability = True
                log.info("Ignoring roots/list_changed from a client without the Roots capability")
            return []
        return self._fetch_roots()

    def _fetch_roots(self) -> list[Effect]:
        return [] if self.input_over else self._roots.fetch()

    def _initialized(self) -> list[Effect]:
        if not self.initialized:
            return []
        roots = self._roots
        if roots.declared:
            if roots.fetched:
                return []
            roots.fetched = True
            return self._fetch_roots()
        if self._greeted_without_roots or not self.config.has_directories:
            return []
        self._greeted_without_roots = True
        return [UseCommandLine()]

    def _cancelled(self, params: JSON) -> list[Effect]:
        target = correlation_key(params.get("requestId"))
        if target is None:
            return []
        cancelled = [
            key
            for key, entry in self._in_flight.items()
            if correlation_key(entry.request_id) == target
        ]
        for key in cancelled:
            del self._in_flight[key]  # never answered now
        self._roots.forget(cancelled)
        return [Cancel(key) for key in cancelled]


def _result(request_id: Any, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _not_found(method: str) -> ProtocolError:
    return ProtocolError(METHOD_NOT_FOUND, "Method not found", method)

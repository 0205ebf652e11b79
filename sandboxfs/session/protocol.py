"""The MCP session, sans I/O: messages in, messages and effects out.

In the spirit of h11: a :class:`Session` never reads, writes, sleeps or starts a
thread.  A transport feeds it each decoded JSON-RPC object (:meth:`Session.receive`)
and what the work it asked for came to (:meth:`Session.completed`,
:meth:`Session.roots_settled`, :meth:`Session.timer_expired`,
:meth:`Session.input_ended`), and carries out the effects it returns, in order:
:class:`Send` a message, run a :class:`Call`, :class:`Cancel` one, start a timer,
:class:`OpenRoots` or :class:`KeepRoots` the client sent, :class:`Close` the
connection.

Its state is one :class:`State`, moved only through :data:`TRANSITIONS` (h11's model:
one enumerated state, one table of moves; a move the table lacks is a bug, answered
-32603). The era follows from the state; which era a message speaks is decided by
:mod:`sandboxfs.session.era`.

What it owns: the handshake, every
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

import enum
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.session import era as eras
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
    progress_token,
    unsupported_version,
)
from sandboxfs.session.era import Era
from sandboxfs.session.jsonrpc import (
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

JSON = dict[str, Any]

#: Methods whose work runs outside the session (the transport's driver runs them).
CALLS: Final = frozenset({"tools/call", "resources/read"})

NO_DIRECTORIES_NO_ROOTS: Final = (
    "Server cannot operate: no allowed directories. It was started without command-line "
    "directories and the client does not support MCP Roots. Either start the server with "
    "directory arguments, or use a client that provides Roots."
)


# -- the state machine ------------------------------------------------------------------


class State(enum.Enum):
    """Where a session is in its life: the one fact every rule of the protocol reads."""

    #: stdio, nothing received yet: the first request decides the era.
    FRESH = "fresh"
    #: 2025 era before ``initialize``: only ``ping`` and ``initialize`` are served.
    HANDSHAKE = "handshake"
    #: 2025 era after ``initialize`` (an HTTP request of the 2025 era starts here).
    READY = "ready"
    #: 2026-07-28 era: every request stands on its own envelope.
    STATELESS = "stateless"
    #: Refused at the handshake (no directories and no Roots): nothing more is answered.
    CLOSED = "closed"


class Event(enum.Enum):
    """What moves a session from one state to another."""

    #: The first request carries no 2026-07-28 envelope (or is ``initialize``).
    FIRST_LEGACY = "first request, 2025 era"
    #: The first request carries the 2026-07-28 envelope.
    FIRST_MODERN = "first request, 2026-07-28 era"
    #: An ``initialize`` was answered (a second one renegotiates).
    INITIALIZED = "initialize answered"
    #: An ``initialize`` was refused: the connection closes.
    REFUSED = "initialize refused"


#: Every move a session can make; anything else is a bug, answered -32603.
TRANSITIONS: Final[Mapping[tuple[State, Event], State]] = {
    (State.FRESH, Event.FIRST_LEGACY): State.HANDSHAKE,
    (State.FRESH, Event.FIRST_MODERN): State.STATELESS,
    (State.HANDSHAKE, Event.INITIALIZED): State.READY,
    (State.READY, Event.INITIALIZED): State.READY,
    (State.HANDSHAKE, Event.REFUSED): State.CLOSED,
    (State.READY, Event.REFUSED): State.CLOSED,
}

#: The era each state speaks (None: not decided yet).
ERA_OF: Final[Mapping[State, Era | None]] = {
    State.FRESH: None,
    State.HANDSHAKE: "2025",
    State.READY: "2025",
    State.STATELESS: "2026",
    State.CLOSED: "2025",
}


def starting_state(era: Era | None, *, http: bool) -> State:
    """A stdio connection starts FRESH; an HTTP request comes with its era (from its
    header) and has no handshake gate."""
    if era is None:
        if http:
            raise ValueError("an HTTP request's session is given its era")
        return State.FRESH
    if not http:
        raise ValueError("a stdio connection's era is decided by its first request")
    return State.READY if era == "2025" else State.STATELESS


class StateError(RuntimeError):
    """A move the transition table does not have (a bug in the session, never input)."""


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
        #: The protocol's state: moved only by :meth:`_move`, through :data:`TRANSITIONS`.
        self.state = starting_state(era, http=config.http)
        #: The version negotiated (2025 era) or given with the request (HTTP).
        self.version: str | None = version
        self.client: str | None = None
        self.peer: str | None = None
        #: The client's side, kept apart from the protocol's state as h11 keeps "their"
        #: side: once the input has ended nothing more is asked of the client, while the
        #: calls in flight are still answered in the era of the state.
        self.input_over = False
        self._keys = itertools.count(1)
        self._in_flight: dict[int, _InFlight] = {}
        self._roots = ClientRoots()

    def _move(self, event: Event) -> None:
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise StateError(f"no move from {self.state.name} on {event.value}") from None

    # -- what the transport asks ------------------------------------------------------------

    @property
    def era(self) -> Era | None:
        """The era the session speaks: decided by the first request on stdio, given per
        request over HTTP, and never changed afterwards."""
        return ERA_OF[self.state]

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

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
        if self.state is State.CLOSED:
            return []
        if self.state is State.FRESH:  # the first request decides a stdio connection's era
            first = eras.of_first_request(method, params)
            self._move(Event.FIRST_LEGACY if first == "2025" else Event.FIRST_MODERN)
        try:
            if self.era == "2025":
                return self._legacy(request_id, method, params)
            return self._modern(request_id, method, params)
        except ProtocolError as exc:
            return [Send(error_message(request_id, exc.code, exc.message, exc.data))]

    def _legacy(self, request_id: Any, method: str, params: JSON | None) -> list[Effect]:
        if method != "initialize" and eras.is_modern(params) and not self.config.http:
            raise ProtocolError(
                INVALID_REQUEST,
                "this connection serves the handshake protocol era; requests carrying the "
                "2026-07-28 envelope are not accepted on it",
            )
        if method not in eras.METHODS["2025"]:
            raise _not_found(method)
        check_request_params(method, params)
        if method == "initialize":
            return self._initialize(request_id, params or {})
        if method == "ping":
            return [Send(_result(request_id, {}))]
        if self.state is not State.READY:
            raise invalid_params()
        if method == "logging/setLevel":
            return [Send(_result(request_id, {}))]
        return self._serve(
            request_id, method, params, self.version or eras.LATEST_HANDSHAKE_VERSION
        )

    def _modern(self, request_id: Any, method: str, params: JSON | None) -> list[Effect]:
        if method == "initialize" and not self.config.http:
            requested = (params or {}).get("protocolVersion")
            raise unsupported_version(
                requested,
                "connection is serving the 2026-07-28 protocol; the initialize handshake is "
                "not accepted",
            )
        if method not in eras.METHODS["2026"]:
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
        self.version = eras.negotiated(requested)
        self.client = params["clientInfo"]["name"]
        declared = isinstance(params["capabilities"].get("roots"), dict)
        config = self.config
        if config.roots and not declared and not config.has_directories:
            log.error("Error: %s", NO_DIRECTORIES_NO_ROOTS)
            self._move(Event.REFUSED)
            return [
                Send(error_message(request_id, INVALID_PARAMS, NO_DIRECTORIES_NO_ROOTS)),
                Close(1),
            ]
        self._roots.declared = declared and config.roots
        self._roots.fetched = False  # a new handshake asks again, once initialized
        self._move(Event.INITIALIZED)
        result = {
            "protocolVersion": self.version,
            "capabilities": eras.capabilities("2025"),
            "serverInfo": dict(config.server_info),
            "instructions": config.instructions,
        }
        return [Send(_result(request_id, result))]

    def _discovery(self) -> JSON:
        return {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": eras.capabilities("2026"),
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
        if self.config.http or not self.config.roots:
            return []  # HTTP knows only cancellation
        if self.state not in (State.HANDSHAKE, State.READY):
            return []  # nor does 2026-07-28; a closed connection hears nothing
        if method == "notifications/initialized":
            return self._initialized()
        if method == "notifications/roots/list_changed" and self.state is State.READY:
            return self._roots_changed()
        return []

    def _roots_changed(self) -> list[Effect]:
        if not self._roots.declared:
            if self._roots.first_undeclared_change():  # said once: a storm is not a log flood
                log.info("Ignoring roots/list_changed from a client without the Roots capability")
            return []
        return self._fetch_roots()

    def _fetch_roots(self) -> list[Effect]:
        return [] if self.input_over else self._roots.fetch()

    def _initialized(self) -> list[Effect]:
        if self.state is not State.READY:
            return []
        roots = self._roots
        if roots.declared:
            if roots.fetched:
                return []
            roots.fetched = True
            return self._fetch_roots()
        if not self.config.has_directories or not roots.first_greeting_without_roots():
            return []
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

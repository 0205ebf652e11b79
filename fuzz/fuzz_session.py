"""Invariant tested: whatever JSON-RPC a client sends, in whatever order the work it
asks for finishes, the sans-IO :class:`~sandboxfs.session.protocol.Session` answers
every request (a decoded object with ``method`` and a valid ``id``) exactly once,
with an answer the MCP SDK's models accept (``tests/wire_oracle.py``), unless the
client cancelled it with ``notifications/cancelled``; it answers no notification
and no response; nothing raises out of it (nor does it fall back to its
catch-all -32603); and every message it sends encodes with ``jsonrpc.encode``
into one line of JSON the SDK parses.

The input is what the client writes on stdin: it is split on newlines and each
line goes through ``jsonrpc.decode``, as the stdio transport does; the objects it
passes on are fed to ``Session.receive``.  The harness plays the driver and the
client, deterministically (a ``random.Random`` seeded with the input's CRC):

* the configuration is the real server's (``SandboxfsServer.session_config``),
  with or without command-line directories and Roots; one input in five runs
  as Streamable HTTP instead (a fresh session per request, a protocol version
  header picked at random);
* every ``Call`` finishes, now or after later lines, with a small result of its
  method's shape, a ``ProtocolError`` (an unknown tool's always, naming the
  tool as the server's does) or an unexpected failure (``Session.failed``); a call
  that asked for progress may report some first; a cancelled call may still
  finish (the race the driver has) and must then not be answered;
* every ``OpenRoots`` is settled (``roots_settled``) in the order it came, as
  the driver's lock does; the client may answer a ``roots/list`` itself (good,
  odd, oversized, error answers, and responses with a broken envelope: each
  settles the question); a timer may expire (the one that bounds how long
  calls wait for Roots releases them while the update is still under way, and
  only it may); end of input (``input_ended``) comes last, then everything
  still running finishes.

The oracle checks answers at the protocol version of the era the session's
first request decided (``Session.era``; then the version ``initialize``
negotiated), not at one it guesses from later requests.

A client may reuse an id while a request with it is still running, so each
answer is checked against the one request it answers, never found by its id:
the request ``receive`` was given, or the one whose ``Call`` completed (a call
held back while Roots are fetched is matched, when it starts, to the held
request of its method and parameters).  The answer must carry that request's
id, of its exact type, fit that request's method, and come while the request
is still owed one; a cancellation withdraws every request whose id correlates
with it (as the SDK correlates ids: ``"7"`` is 7), as the session cancels
every call with it.

Also checked: an answer comes only from the request it answers (at most one per
``receive``, with that request's id) or from the completion of its call; a
call's parameters have the shape the driver reads; no call starts before a
2025-era handshake succeeded, nor while the client's Roots are being updated
(from the ``roots/list`` it caused until its answer is settled or given up);
one ``roots/list`` at a time, none after end of input; a given-up update
(``KeepRoots``) and every log line hold client text only escaped; at the end
nothing is owed, nothing runs and no question to the client is open.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import re
import sys
import traceback
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    import mcp_types as types

    from sandboxfs.core.allowlist import AllowList
    from sandboxfs.session.access import AccessControl
    from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
    from sandboxfs.session.effects import (
        Call,
        Cancel,
        Close,
        KeepRoots,
        OpenRoots,
        Send,
        StartTimer,
        UseCommandLine,
    )
    from sandboxfs.session.jsonrpc import (
        HANDSHAKE_VERSIONS,
        INTERNAL_ERROR,
        INVALID_PARAMS,
        SUPPORTED_VERSIONS,
        ProtocolError,
        correlation_key,
        decode,
        encode,
        valid_id,
    )
    from sandboxfs.session.protocol import Session, SessionConfig

from wire_oracle import LATEST_HANDSHAKE, MODERN, WireOracle

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"
#: Log lines and KeepRoots reasons hold client text only escaped (sandboxfs.core.names).
_UNESCAPED: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
EFFECTS: Final = (Send, Call, Cancel, StartTimer, OpenRoots, KeepRoots, UseCommandLine, Close)
#: The prefix of the timer that bounds how long calls wait for the client's Roots.
WAIT_TIMER: Final = "roots-wait:"

_SERVER = SandboxfsServer(ServerOptions(), AccessControl(AllowList.of([]), confine=False))
STDIO_CONFIGS: Final = tuple(
    dataclasses.replace(_SERVER.session_config(), has_directories=cli, roots=roots)
    for cli in (True, False)
    for roots in (True, False)
)
HTTP_CONFIG: Final[SessionConfig] = _SERVER.session_config(http=True)


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_surrogate(v) for v in value)
    return False


def check_wire(message: dict[str, Any]) -> None:
    """``message`` encodes into one line of JSON that the SDK parses, equal to the
    message itself unless the message held text JSON cannot carry."""
    frame = encode(message)
    assert isinstance(frame, bytes) and b"\n" not in frame, frame[:200]
    types.jsonrpc_message_adapter.validate_json(frame)
    if not _has_surrogate(message):
        assert json.loads(frame) == message, (frame[:500], message)


# -- what the driver's work comes to -------------------------------------------------------


def _tool_result(rng: random.Random) -> dict[str, Any]:
    return rng.choice(
        (
            {"content": [{"type": "text", "text": "ok"}], "isError": False},
            {
                "content": [{"type": "text", "text": "No such file"}],
                "structuredContent": {"error": {"code": "ENOENT", "message": "No such file"}},
                "isError": True,
            },
            {
                "content": [{"type": "text", "text": "/tmp/fuzz"}],
                "structuredContent": {"directories": ["/tmp/fuzz"]},
                "isError": False,
            },
        )
    )


def _resource_result(rng: random.Random) -> dict[str, Any]:
    contents = rng.choice(
        (
            {"uri": "file:///tmp/fuzz/a.txt", "mimeType": "text/plain", "text": "ok"},
            {
                "uri": "file:///tmp/fuzz/b.bin",
                "mimeType": "application/octet-stream",
                "blob": "AA==",
            },
        )
    )
    return {"contents": [contents]}


TOOLS: Final = frozenset(tool["name"] for tool in _SERVER.tool_definitions)


def outcome(rng: random.Random, call: Call) -> dict[str, Any] | ProtocolError | None:
    """What a call comes to: a result, a JSON-RPC error (an unknown tool's names it, as
    the server's does), or None (an unexpected failure)."""
    if call.method == "tools/call" and call.params["name"] not in TOOLS:
        return ProtocolError(INVALID_PARAMS, f"Unknown tool: {call.params['name']}")
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.25:
        if call.method == "tools/call":
            return ProtocolError(INTERNAL_ERROR, "Internal error")
        return rng.choice(
            (
                ProtocolError(-32002, "Resource not found", {"uri": "file:///tmp/fuzz/missing"}),
                ProtocolError(INVALID_PARAMS, "Invalid resource URI"),
                ProtocolError(INTERNAL_ERROR, "Internal error"),
            )
        )
    return _tool_result(rng) if call.method == "tools/call" else _resource_result(rng)


def client_roots_answer(rng: random.Random, ask: Any) -> dict[str, Any] | None:
    """The client's answer to the server's ``roots/list``, through decode as on the wire."""
    body = rng.choice(
        (
            {"result": {"roots": [{"uri": "file:///tmp/fuzz", "name": "fuzz"}]}},
            {"result": {"roots": [{"uri": "file:///tmp/a%20b"}, {"uri": "file:///tmp/c"}]}},
            {"result": {"roots": []}},
            {"result": {"roots": [{"uri": "http://x/"}, {"uri": "not a uri"}, {"uri": 5}, "x"]}},
            {"result": {"roots": "file:///tmp"}},
            {"result": {}},
            {"error": {"code": -32601, "message": "Method not found\n\u202eforged"}},
            {"error": "no"},
            {"result": None},
            {"result": []},
            {"result": {"roots": [{"uri": "file:///tmp/a", "name": 5}]}},
            {"result": {"roots": [{"uri": f"file:///tmp/{i}"} for i in range(300)]}},
            {"result": {"roots": [{"uri": "file:///" + "\n" * 20_000}]}},
            {"result": {"roots": []}, "error": {"code": 1, "message": "both"}},
            {"jsonrpc": "1.0", "result": {"roots": []}},
        )
    )
    message = decode(json.dumps({"jsonrpc": "2.0", "id": ask, **body}).encode())
    return message if isinstance(message, dict) else None


# -- one conversation ----------------------------------------------------------------------


@dataclass(eq=False)  # each request is itself, whatever id it reuses
class Owed:
    """A request still owed an answer."""

    request_id: Any
    method: str
    params: Any
    version: str  # what the oracle checks its answer at


class Conversation:
    """One session, the client's side of it, and the driver's."""

    def __init__(
        self,
        rng: random.Random,
        config: SessionConfig,
        *,
        era: str | None = None,
        version: str | None = None,
    ) -> None:
        self.rng = rng
        self.config = config
        self.session = Session(config, era=era, version=version)  # type: ignore[arg-type]
        self.oracle = WireOracle(version=version)
        self.owed: list[Owed] = []
        self.held: list[Owed] = []  # owed, without an answer or a call yet (waiting for Roots)
        self.running: dict[int, tuple[Call, Owed]] = {}
        self.issued: set[int] = set()
        self.opening: list[int] = []  # OpenRoots generations, in order
        self.timers: dict[str, Any] = {}  # timer name -> the roots/list it was started for
        self.client_answers: list[dict[str, Any]] = []
        self.asking: Any = None  # the roots/list out, from the client's side
        self.updating = False  # a Roots update is under way: calls must wait
        self.waited_out = False  # ...unless the bound on their wait is what releases them
        self.latest_open: int | None = None
        self.handshake = False
        self.closed = False
        self.input_over = False
        self.command_line = 0

    # -- the client -------------------------------------------------------------------

    def deliver(self, message: dict[str, Any]) -> None:
        """One decoded object from the client."""
        if self.closed or self.input_over:
            return  # the transport reads no more
        request = "method" in message and "id" in message
        if "method" not in message and self.asking is not None and message.get("id") == self.asking:
            self.asking = None  # the question out is answered
        effects = self.session.receive(message)
        era = self.session.era
        if self.oracle.version is None and era is not None:
            # The session's first request decided the era: the oracle follows it.
            self.oracle.version = MODERN if era == "2026" else LATEST_HANDSHAKE
        self.oracle.sent(message)
        owed = None
        if request:
            key = correlation_key(message["id"])
            assert key is not None, message
            _method, _id, version = self.oracle.pending[key]
            owed = Owed(message["id"], message["method"], message.get("params"), version)
            self.owed.append(owed)
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            target = correlation_key(params.get("requestId")) if isinstance(params, dict) else None
            if target is not None:
                self.owed = [o for o in self.owed if correlation_key(o.request_id) != target]
                self.held = [o for o in self.held if o in self.owed]
        answers, calls = self.run(effects, owed)
        if owed is None:
            assert not answers, f"answered a notification or a response: {message} -> {answers}"
            return
        assert answers + calls <= 1, (message, effects)
        if not answers and not calls:
            self.held.append(owed)

    # -- the driver ---------------------------------------------------------------------

    def run(self, effects: list[Any], owed: Owed | None = None) -> tuple[int, int]:
        """Carry out ``effects`` in order, where an answer answers ``owed`` (if any: the
        request just received, or the call just completed); how many answers were
        sent and how many calls started."""
        assert isinstance(effects, list), effects
        answers = calls = 0
        for effect in effects:
            assert isinstance(effect, EFFECTS), effect
            if isinstance(effect, Send):
                answers += self.send(effect.message, owed)
            elif isinstance(effect, Call):
                calls += 1
                self.start(effect, owed)
            elif isinstance(effect, Cancel):
                self.cancel(effect.key)
            elif isinstance(effect, StartTimer):
                assert isinstance(effect.name, str) and effect.seconds > 0, effect
                assert effect.name not in self.timers, effect
                if effect.name.startswith(WAIT_TIMER):
                    assert self.updating, f"calls wait with no Roots update under way: {effect}"
                self.timers[effect.name] = self.asking
            elif isinstance(effect, OpenRoots):
                assert self.updating and self.asking is None, effect
                assert isinstance(effect.uris, tuple), effect
                assert all(isinstance(u, str) and u.startswith("file:") for u in effect.uris)
                self.opening.append(effect.generation)
                self.latest_open = effect.generation
            elif isinstance(effect, KeepRoots):
                assert self.updating and self.asking is None, effect
                assert isinstance(effect.reason, str), effect
                assert not _UNESCAPED.search(effect.reason), effect
                self.updating = False
                self.latest_open = None
            elif isinstance(effect, UseCommandLine):
                assert self.config.has_directories and not self.config.http, effect
                self.command_line += 1
                assert self.command_line == 1, "UseCommandLine twice"
            else:
                assert isinstance(effect.exit_code, int) and effect.exit_code != 0, effect
                assert not self.closed, "closed twice"
                self.closed = True
        return answers, calls

    def send(self, message: dict[str, Any], owed: Owed | None) -> bool:
        """Check one message the session sends; whether it is an answer (to ``owed``)."""
        assert isinstance(message, dict), message
        check_wire(message)
        if "method" in message:
            self.oracle.received(message)
            if "id" in message:
                assert message["method"] == "roots/list", message
                assert not self.config.http and self.session.era == "2025", message
                assert not self.input_over, "asked the client after end of input"
                assert self.asking is None, f"a second roots/list while {self.asking!r} is out"
                self.asking = message["id"]
                self.updating = True
                self.latest_open = None
                if self.rng.random() < 0.5:
                    answer = client_roots_answer(self.rng, message["id"])
                    if answer is not None:
                        self.client_answers.append(answer)
            return False
        assert owed is not None, f"an answer out of nowhere: {message}"
        assert owed in self.owed, f"an answer to a request owed none (cancelled?): {message}"
        request_id = message.get("id")
        assert request_id == owed.request_id, (message, owed)
        assert type(request_id) is type(owed.request_id), (message, owed)
        # The oracle checks it against that request (whatever else reused its id).
        self.oracle.pending[correlation_key(request_id)] = (owed.method, request_id, owed.version)
        self.oracle.received(message)
        self.owed.remove(owed)
        if owed.method == "initialize" and "result" in message:
            self.handshake = True
        return True

    def start(self, call: Call, owed: Owed | None) -> None:
        assert call.key not in self.issued, f"call key {call.key} issued twice"
        self.issued.add(call.key)
        assert call.method in ("tools/call", "resources/read"), call
        params = call.params
        assert isinstance(params, dict), call
        if call.method == "tools/call":
            assert isinstance(params.get("name"), str), call
            assert isinstance(params.get("arguments"), dict | None), call
        else:
            assert isinstance(params.get("uri"), str), call
        assert call.caller.protocol_version in SUPPORTED_VERSIONS, call
        assert call.progress is None or valid_id(call.progress), call
        if not self.waited_out:  # released by the bound on the wait, it may run now
            assert not self.updating, f"a call starts while the client's Roots are updated: {call}"
        if self.session.era == "2025" and not self.config.http:
            assert self.handshake, f"a call before the handshake: {call}"
        if owed is None:  # released: it was held, waiting for the client's Roots
            held = [o for o in self.held if o.method == call.method and o.params == call.params]
            assert held, f"a call for no request held: {call}"
            owed = held[0]
            self.held.remove(owed)
        assert owed.method == call.method and owed.params is call.params, (owed, call)
        self.running[call.key] = (call, owed)

    def cancel(self, key: int) -> None:
        running = self.running.pop(key, None)
        if running is not None:
            assert running[1] not in self.owed, f"cancelled a request still owed: {running}"
        if running is not None and self.rng.random() < 0.3:  # it finished as it was cancelled
            effects = self.finish(key, running[0])
            assert effects == [], f"a cancelled call answered: {effects}"

    # -- what finishes, in some order -----------------------------------------------------

    def finish(self, key: int, call: Call) -> list[Any]:
        """What the session makes of the call ``key`` coming to an end."""
        result = outcome(self.rng, call)
        return self.session.failed(key) if result is None else self.session.completed(key, result)

    def complete(self, key: int) -> None:
        call, owed = self.running.pop(key)
        effects = self.finish(key, call)
        assert self.run(effects, owed) == (1, 0) and len(effects) == 1, (call, effects)

    def progress(self, call: Call) -> None:
        assert call.progress is not None
        total = self.rng.choice((None, 10.0))
        text = self.rng.choice((None, "reading", "a\nb"))
        effects = self.session.progress_notice(call.progress, self.rng.randrange(10), total, text)
        assert self.run(effects) == (0, 0), effects

    def settle(self) -> None:
        generation = self.opening.pop(0)
        done = generation == self.latest_open and self.asking is None
        effects = self.session.roots_settled(generation)
        if done:
            self.updating = False
            self.latest_open = None
        else:
            assert not any(isinstance(e, Call) for e in effects), (generation, effects)
        assert self.run(effects)[0] == 0, effects

    def fire(self, name: str) -> None:
        ask = self.timers.pop(name)
        if name.startswith(WAIT_TIMER):  # the bound on how long calls wait for Roots
            self.waited_out = True
            try:
                effects = self.session.timer_expired(name)
                assert not any(isinstance(e, Send | KeepRoots) for e in effects), effects
                assert self.run(effects)[0] == 0, effects
            finally:
                self.waited_out = False
            return
        current = ask is not None and ask == self.asking
        if current:
            self.asking = None
        effects = self.session.timer_expired(name)
        if current:
            assert any(isinstance(e, KeepRoots) for e in effects), (name, effects)
        assert self.run(effects)[0] == 0, effects

    def step(self, most: int, *, timers: float = 0.05) -> bool:
        """Up to ``most`` pieces of work finish, or the client answers a question;
        whether anything was left to do."""
        rng = self.rng
        for _ in range(rng.randrange(most + 1)):
            options: list[Any] = []
            if self.running:
                key = rng.choice(sorted(self.running))
                options.append(lambda key=key: self.complete(key))
                call = self.running[key][0]
                if call.progress is not None:
                    options.append(lambda call=call: self.progress(call))
            if self.opening:
                options.append(self.settle)
            if self.client_answers and not self.input_over:
                options.append(lambda: self.deliver(self.client_answers.pop(0)))
            if self.timers and rng.random() < timers:
                name = rng.choice(sorted(self.timers))
                options.append(lambda name=name: self.fire(name))
            if not options:
                return False
            rng.choice(options)()
        return True

    def end(self) -> None:
        """End of input, then everything still running finishes."""
        self.step(8)
        if not self.config.http:
            self.input_over = True
            self.client_answers.clear()
            had_ask = self.asking is not None
            self.asking = None
            effects = self.session.input_ended()
            if had_ask:
                assert any(isinstance(e, KeepRoots) for e in effects), effects
            assert self.run(effects)[0] == 0, effects
        while self.running or self.opening:
            self.step(16, timers=0.2)
        assert not self.owed, f"requests never answered: {self.owed}"
        assert not self.held, self.held
        assert not self.session.busy, "the session still has calls in flight"
        assert self.asking is None and not self.updating, (self.asking, self.updating)


# -- the target ----------------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def session_log() -> Iterator[list[logging.LogRecord]]:
    """Every record the session logs, at any level (and nothing printed)."""
    logger = logging.getLogger("sandboxfs")
    handler = _Records()
    saved = logger.level, logger.propagate, logger.disabled
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.disabled = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.disabled = saved[2]


def check_log(records: list[logging.LogRecord]) -> None:
    for record in records:
        if record.exc_info is not None:
            trace = "".join(traceback.format_exception(*record.exc_info))
            raise AssertionError(f"the session's catch-all: {record.getMessage()}\n{trace}")
        text = record.getMessage()
        assert not _UNESCAPED.search(text), f"client text logged unescaped: {text!r}"


def _requests(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.split(b"\n"):
        message = decode(line)
        if isinstance(message, dict):
            yield message


def stdio(data: bytes, rng: random.Random) -> None:
    conversation = Conversation(rng, rng.choice(STDIO_CONFIGS))
    for message in _requests(data):
        if conversation.closed:
            break
        conversation.deliver(message)
        conversation.step(4)
    conversation.end()


def http(data: bytes, rng: random.Random) -> None:
    """Streamable HTTP: each request alone, in a session of its own."""
    for message in _requests(data):
        if "method" not in message or "id" not in message:
            continue  # 202 Accepted: a notification or a response goes nowhere
        version = rng.choice(SUPPORTED_VERSIONS)
        era = "2025" if version in HANDSHAKE_VERSIONS else "2026"
        conversation = Conversation(rng, HTTP_CONFIG, era=era, version=version)
        conversation.deliver(message)
        conversation.end()


def TestOneInput(data: bytes) -> None:
    rng = random.Random(zlib.crc32(data))
    with session_log() as records:
        (http if rng.random() < 0.2 else stdio)(data, rng)
    check_log(records)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

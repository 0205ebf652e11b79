"""The sans-IO session core, driven message by message, with the SDK as the oracle.

Every message the core sends here goes through :class:`wire_oracle.WireOracle`
(the SDK's models at the version in force), and every encode of it must succeed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types import methods
from roots_answers import REPORTED_MALFORMED_ANSWERS
from wire_oracle import WireOracle

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.session.access import AccessControl
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.effects import (
    Call,
    Cancel,
    Close,
    Effect,
    KeepRoots,
    OpenRoots,
    Send,
    StartTimer,
    UseCommandLine,
)
from sandboxfs.session.jsonrpc import ROOTS_FETCH_TIMEOUT, ProtocolError, decode, encode
from sandboxfs.session.protocol import Session, SessionConfig
from sandboxfs.session.rooturis import (
    MAX_CLIENT_ROOTS,
    MAX_ROOT_URI_CHARS,
    SHOWN_CHARS,
    MalformedRoots,
    root_uris,
    shown,
)

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "core-test", "version": "1"},
}
TOOL_RESULT = {"content": [{"type": "text", "text": "ok"}], "isError": False}
READ_RESULT = {"contents": [{"uri": "file:///x", "mimeType": "text/plain", "text": "x"}]}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionConfig]:
    root = tmp_path_factory.mktemp("core")
    access = AccessControl(AllowList.of([Root.open(str(root))]), confine=False)
    yield SandboxfsServer(ServerOptions(), access).session_config()


class Conversation:
    """A session and the oracle that checks everything it sends."""

    def __init__(self, config: SessionConfig, **kwargs: Any) -> None:
        self.session = Session(config, **kwargs)
        version = kwargs.get("version") if config.http else None
        self.oracle = WireOracle(version=version)
        self.sent: list[dict[str, Any]] = []

    def check(self, effects: list[Effect]) -> list[Effect]:
        for effect in effects:
            if isinstance(effect, Send):
                json.loads(encode(effect.message))  # always encodable
                self.oracle.received(effect.message)
                self.sent.append(effect.message)
        return effects

    def feed(self, message: dict[str, Any]) -> list[Effect]:
        self.oracle.sent(message)
        return self.check(self.session.receive(message))

    def line(self, raw: bytes) -> list[Effect]:
        decoded = decode(raw)
        assert isinstance(decoded, dict), decoded
        return self.feed(decoded)

    def request(self, request_id: Any, method: str, params: Any = None) -> list[Effect]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return self.feed(message)

    def notify(self, method: str, params: Any = None) -> list[Effect]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return self.feed(message)

    def answer(self, request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        """The one message answering the request (asserts there is exactly one)."""
        sends = [e.message for e in self.request(request_id, method, params) if isinstance(e, Send)]
        answers = [m for m in sends if m.get("id") == request_id and "method" not in m]
        assert len(answers) == 1, sends
        return answers[0]

    def complete(self, effects: list[Effect], result: Any = None) -> list[Effect]:
        """Complete every Call among ``effects`` (with a result fit for its method)."""
        out: list[Effect] = []
        for effect in effects:
            if isinstance(effect, Call):
                fit = TOOL_RESULT if effect.method == "tools/call" else READ_RESULT
                out += self.check(self.session.completed(effect.key, result or fit))
        return out

    def greet(self, version: str = "2025-06-18", capabilities: Any = None) -> None:
        params = {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "core-test", "version": "1"},
        }
        assert "result" in self.answer(0, "initialize", params)
        self.notify("notifications/initialized")


def calls(effects: list[Effect]) -> list[Call]:
    return [e for e in effects if isinstance(e, Call)]


def sends(effects: list[Effect]) -> list[dict[str, Any]]:
    return [e.message for e in effects if isinstance(e, Send)]


def tool_call(name: str = "list_allowed_directories", meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    return params


# -- eras and the handshake ----------------------------------------------------------


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_a_handshake_decides_the_2025_era_and_its_version(
    config: SessionConfig, version: str
) -> None:
    c = Conversation(config)
    c.greet(version)
    assert c.session.era == "2025" and c.session.version == version
    assert c.answer(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert "result" in c.answer(2, "logging/setLevel", {"level": "debug"})
    tools = c.answer(3, "tools/list")["result"]
    assert [t["name"] for t in tools["tools"]] == [t["name"] for t in config.tools]
    assert "resultType" not in tools and "ttlMs" not in tools
    effects = c.request(4, "tools/call", tool_call())
    assert [call.caller.protocol_version for call in calls(effects)] == [version]
    assert sends(c.complete(effects))[0]["result"] == TOOL_RESULT
    assert c.oracle.unanswered() == []


def test_an_unknown_version_is_answered_with_the_latest(config: SessionConfig) -> None:
    c = Conversation(config)
    params = {
        "protocolVersion": "2099-01-01",
        "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"},
    }
    assert c.answer(0, "initialize", params)["result"]["protocolVersion"] == "2025-11-25"


def test_a_first_request_with_the_envelope_decides_the_2026_era(config: SessionConfig) -> None:
    c = Conversation(config)
    discovered = c.answer(1, "server/discover", {"_meta": META})["result"]
    assert c.session.era == "2026"
    assert MODERN in discovered["supportedVersions"] and "logging" not in discovered["capabilities"]
    tools = c.answer(2, "tools/list", {"_meta": META})["result"]
    assert tools["resultType"] == "complete" and tools["ttlMs"] == 0
    assert tools["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "sandboxfs"
    effects = c.request(3, "tools/call", tool_call(meta=META))
    assert calls(effects)[0].caller.client == "core-test"
    assert sends(c.complete(effects))[0]["result"]["resultType"] == "complete"
    # What 2026-07-28 does not have, and a handshake on this connection.
    assert c.answer(4, "ping", {"_meta": META})["error"]["code"] == -32601
    assert c.answer(5, "logging/setLevel", {"_meta": META, "level": "x"})["error"]["code"] == -32601
    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": META}
    assert c.answer(6, "initialize", initialize)["error"]["code"] == -32022


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        ({}, -32602),
        ({"io.modelcontextprotocol/protocolVersion": MODERN}, -32602),
        ({**META, "io.modelcontextprotocol/protocolVersion": "2030-01-01"}, -32022),
        ({**META, "io.modelcontextprotocol/protocolVersion": 7}, -32602),
        ({**META, "io.modelcontextprotocol/clientInfo": {"name": 1}}, -32602),
        ({**META, "progressToken": [1]}, -32602),
    ],
)
def test_a_bad_envelope_gets_the_sdks_error(config: SessionConfig, meta: Any, code: int) -> None:
    c = Conversation(config)
    c.answer(0, "server/discover", {"_meta": META})
    assert c.answer(1, "tools/list", {"_meta": meta})["error"]["code"] == code


def test_a_2025_connection_refuses_the_envelope_and_requests_before_the_handshake(
    config: SessionConfig,
) -> None:
    c = Conversation(config)
    assert c.answer(1, "tools/list")["error"]["code"] == -32602  # before initialize
    assert c.answer(2, "ping")["result"] == {}  # ping is always answered
    c.greet()
    assert c.answer(3, "tools/list", {"_meta": META})["error"]["code"] == -32600


@pytest.mark.parametrize("method", ["x/y", "x/\ud800", "prompts/list", "", '\n{"forged":1}'])
def test_an_unknown_method_is_method_not_found_naming_it(
    config: SessionConfig, method: str
) -> None:
    for era in ("2025", "2026"):
        c = Conversation(config)
        params = None
        if era == "2025":
            c.greet()
        else:
            params = {"_meta": META}
            c.answer(0, "server/discover", params)
        error = c.answer(9, method, params)["error"]
        assert error["code"] == -32601 and error["data"] == method
        json.loads(encode(c.sent[-1]))  # a lone surrogate is carried, replaced


def test_a_lone_surrogate_anywhere_in_a_request_is_still_answered(config: SessionConfig) -> None:
    c = Conversation(config)
    c.greet()
    line = (
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x\\ud800",'
        b'"arguments":{"path":"\\udfff"},"_meta":{"progressToken":"\\ud800"}}}'
    )
    effects = c.line(line)
    assert calls(effects)[0].progress == "\ud800"
    answer = sends(c.complete(effects))[0]
    assert encode(answer).decode().count("\ufffd") == 0  # nothing of the client's echoed here
    effects = c.line(
        b'{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"\\ud800"}}'
    )
    assert len(sends(c.complete(effects))) == 1


def test_progress_tokens_are_read_as_leniently_as_the_sdk_reads_them(
    config: SessionConfig,
) -> None:
    c = Conversation(config)
    c.greet()
    for request_id, token in enumerate([True, 2.0, "t", None, 7], start=1):
        params = tool_call(meta={"progressToken": token})
        methods.validate_client_request("tools/call", "2025-06-18", params)  # the SDK agrees
        effect = calls(c.request(request_id, "tools/call", params))[0]
        assert effect.progress == (None if token is None else json.loads(json.dumps(token)))
        assert isinstance(effect.progress, str | int | None)
        assert not isinstance(effect.progress, bool)
        notice = sends(c.session.progress_notice(effect.progress or 0, 1, 2, None))[0]
        c.oracle.received(notice)


# -- notifications, responses, cancellation --------------------------------------------


def test_notifications_and_responses_are_never_answered(config: SessionConfig) -> None:
    c = Conversation(config)
    c.greet()
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/unknown"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}},
        {"jsonrpc": "2.0", "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": "sandboxfs-9", "error": {"code": 1, "message": "no"}},
    ):
        assert c.feed(message) == [], message


@pytest.mark.parametrize("cancel_id", [1, "1"])
def test_a_cancelled_call_is_never_answered(config: SessionConfig, cancel_id: Any) -> None:
    c = Conversation(config)
    c.greet()
    call = calls(c.request(1, "tools/call", tool_call()))[0]
    other = calls(c.request(2, "tools/call", tool_call()))[0]
    cancelled = c.notify("notifications/cancelled", {"requestId": cancel_id})
    assert cancelled == [Cancel(call.key)]  # "1" correlates with 1, as the SDK's
    assert c.check(c.session.completed(call.key, TOOL_RESULT)) == []
    assert len(sends(c.complete([other]))) == 1
    assert not c.session.busy


def test_a_failed_call_is_an_internal_error_without_details(config: SessionConfig) -> None:
    c = Conversation(config)
    c.greet()
    call = calls(c.request(1, "tools/call", tool_call()))[0]
    error = sends(c.check(c.session.failed(call.key)))[0]["error"]
    assert error == {"code": -32603, "message": "Internal error"}
    call = calls(c.request(2, "resources/read", {"uri": "file:///x"}))[0]
    error = sends(c.check(c.session.completed(call.key, ProtocolError(-32002, "nope", "u"))))
    assert error[0]["error"] == {"code": -32002, "message": "nope", "data": "u"}


def test_an_unexpected_failure_inside_the_core_is_answered_not_raised(
    config: SessionConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    c = Conversation(config)
    c.greet()

    def broken(*_args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(c.session, "_serve", broken)
    assert c.answer(1, "tools/list")["error"] == {"code": -32603, "message": "Internal error"}
    assert c.notify("notifications/cancelled", {"requestId": 1}) == []
    assert "a bug" in caplog.text


# -- Roots --------------------------------------------------------------------------------


def _roots_session(config: SessionConfig) -> tuple[Conversation, str]:
    c = Conversation(config)
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"roots": {"listChanged": True}},
        "clientInfo": {"name": "core-test", "version": "1"},
    }
    c.answer(0, "initialize", params)
    effects = c.notify("notifications/initialized")
    asks = [m for m in sends(effects) if m.get("method") == "roots/list"]
    assert len(asks) == 1 and any(isinstance(e, StartTimer) for e in effects)
    return c, asks[0]["id"]


def _roots_answer(ask: str, *paths: str) -> dict[str, Any]:
    roots = [{"uri": f"file://{p}"} for p in paths]
    return {"jsonrpc": "2.0", "id": ask, "result": {"roots": roots}}


def test_calls_wait_for_the_clients_roots_and_run_once_they_are_in_force(
    config: SessionConfig,
) -> None:
    c, ask = _roots_session(config)
    waits = c.request(1, "tools/call", tool_call())
    assert calls(waits) == [] and sends(waits) == []  # waits (a timer bounds the wait)
    opened = c.feed(_roots_answer(ask, "/srv/a"))
    assert [type(e) for e in opened] == [OpenRoots]
    assert isinstance(opened[0], OpenRoots) and opened[0].uris == ("file:///srv/a",)
    released = c.check(c.session.roots_settled(opened[0].generation))
    assert len(calls(released)) == 1 and len(sends(c.complete(released))) == 1


def test_a_storm_of_roots_changes_keeps_one_question_out_and_opens_the_newest(
    config: SessionConfig,
) -> None:
    c, ask = _roots_session(config)
    for _ in range(50):
        effects = c.notify("notifications/roots/list_changed")
        assert sends(effects) == []  # one roots/list at a time
    c.request(1, "tools/call", tool_call())
    again = c.feed(_roots_answer(ask, "/srv/old"))  # superseded while it was out
    asks = [m for m in sends(again) if m.get("method") == "roots/list"]
    assert len(asks) == 1 and asks[0]["id"] != ask
    assert not any(isinstance(e, OpenRoots) for e in again)  # the stale answer is not opened
    opened = c.feed(_roots_answer(asks[0]["id"], "/srv/new"))
    assert isinstance(opened[0], OpenRoots) and opened[0].uris == ("file:///srv/new",)
    assert len(calls(c.session.roots_settled(opened[0].generation))) == 1
    assert len(c.oracle.server_requests) == 2


def test_a_second_initialize_declaring_roots_never_stalls_calls(config: SessionConfig) -> None:
    c = Conversation(config)
    c.greet()
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"roots": {}},
        "clientInfo": {"name": "again", "version": "1"},
    }
    assert "result" in c.answer(1, "initialize", params)
    # No initialized after it: calls run at once (nothing is being fetched).
    assert len(calls(c.request(2, "tools/call", tool_call()))) == 1
    # Once initialized, the Roots are asked for.
    asks = sends(c.notify("notifications/initialized"))
    assert [m["method"] for m in asks] == ["roots/list"]


@pytest.mark.parametrize("how", ["timer", "input ended", "error answer", "bad answer"])
def test_roots_that_cannot_be_had_keep_what_is_in_force_and_release_the_calls(
    config: SessionConfig, how: str
) -> None:
    c, ask = _roots_session(config)
    c.request(1, "tools/call", tool_call())
    if how == "timer":
        assert c.session.timer_expired("roots:sandboxfs-999") == []  # a stale timer
        effects = c.session.timer_expired(f"roots:{ask}")
    elif how == "input ended":
        effects = c.session.input_ended()
    elif how == "error answer":
        error = {"code": -1, "message": 'no\n{"forged": 1}'}
        effects = c.feed({"jsonrpc": "2.0", "id": ask, "error": error})
    else:
        effects = c.feed({"jsonrpc": "2.0", "id": ask, "result": {"roots": 5}})
    keep = [e for e in effects if isinstance(e, KeepRoots)]
    assert len(keep) == 1 and "\n" not in keep[0].reason
    assert len(calls(effects)) == 1
    if how == "input ended":  # nothing more is asked on a closed input
        assert c.notify("notifications/roots/list_changed") == []


def test_each_reported_malformed_answer_is_dropped_and_the_next_good_one_taken(
    config: SessionConfig,
) -> None:
    """Every malformed answer settles its question (a KeepRoots, never an OpenRoots),
    releases the calls that waited, leaves nothing outstanding (the next change asks
    at once), and the good answer after them is taken."""
    c, ask = _roots_session(config)
    opened = c.feed(_roots_answer(ask, "/srv/first"))
    c.check(c.session.roots_settled(opened[0].generation))
    for what, body in REPORTED_MALFORMED_ANSWERS.items():
        asks = sends(c.notify("notifications/roots/list_changed"))
        assert [m["method"] for m in asks] == ["roots/list"], what  # nothing outstanding
        c.request(f"call-{what}", "tools/call", tool_call())
        effects = c.feed({"jsonrpc": "2.0", "id": asks[0]["id"], **body})
        assert not any(isinstance(e, OpenRoots) for e in effects), what
        keep = [e for e in effects if isinstance(e, KeepRoots)]
        assert len(keep) == 1 and "\n" not in keep[0].reason, what
        assert len(keep[0].reason) < 400, what  # client text is bounded
        assert len(calls(effects)) == 1, what  # the call that waited runs
    asks = sends(c.notify("notifications/roots/list_changed"))
    opened = c.feed(_roots_answer(asks[0]["id"], "/srv/good"))
    assert isinstance(opened[0], OpenRoots) and opened[0].uris == ("file:///srv/good",)


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "%s", "result": {"roots": []}}',  # no jsonrpc member
        '{"jsonrpc": "1.0", "id": "%s", "result": {"roots": []}}',
        '{"jsonrpc": "2.0", "id": "%s", "result": {"roots": []}, "error": {"code": 1}}',
        '{"jsonrpc": "2.0", "id": "%s", "error": "no"}',
        '{"jsonrpc": "2.0", "id": "%s", "error": null}',
    ],
)
def test_an_answer_with_a_broken_envelope_still_settles_the_question(
    config: SessionConfig, line: str
) -> None:
    c, ask = _roots_session(config)
    c.request(1, "tools/call", tool_call())
    effects = c.line((line % ask).encode())
    assert len([e for e in effects if isinstance(e, KeepRoots)]) == 1
    assert len(calls(effects)) == 1 and sends(effects) == []  # a response is never answered
    asks = sends(c.notify("notifications/roots/list_changed"))
    assert [m["method"] for m in asks] == ["roots/list"]


def test_an_unanswered_question_is_given_up_and_a_later_change_asks_again(
    config: SessionConfig,
) -> None:
    c, ask = _roots_session(config)
    c.request(1, "tools/call", tool_call())
    assert sends(c.notify("notifications/roots/list_changed")) == []  # one question out
    effects = c.session.timer_expired(f"roots:{ask}")
    assert len([e for e in effects if isinstance(e, KeepRoots)]) == 1 and len(calls(effects)) == 1
    assert len(calls(c.request(2, "tools/call", tool_call()))) == 1  # nothing is awaited now
    assert c.feed(_roots_answer(ask, "/srv/late")) == []  # a late answer is ignored
    asks = sends(c.notify("notifications/roots/list_changed"))
    assert len(asks) == 1 and asks[0]["id"] != ask
    opened = c.feed(_roots_answer(asks[0]["id"], "/srv/now"))
    assert isinstance(opened[0], OpenRoots) and opened[0].uris == ("file:///srv/now",)


def test_a_storm_of_changes_cannot_hold_calls_past_the_wait_bound(
    config: SessionConfig,
) -> None:
    """A client that announces a change before each answer arrives keeps a question
    out forever; its calls still run once they waited ROOTS_FETCH_TIMEOUT."""
    c, ask = _roots_session(config)
    waits = c.request(1, "tools/call", tool_call())
    timers = [e for e in waits if isinstance(e, StartTimer)]
    assert len(timers) == 1 and timers[0].seconds == ROOTS_FETCH_TIMEOUT
    assert c.request(2, "tools/call", tool_call()) == []  # one timer for all who wait
    for _ in range(20):  # each answer is superseded by the next change
        c.notify("notifications/roots/list_changed")
        asks = sends(c.feed(_roots_answer(ask, "/srv/stale")))
        assert len(asks) == 1
        ask = asks[0]["id"]
    assert c.session.timer_expired("roots-wait:999") == []  # a stale timer
    released = c.session.timer_expired(timers[0].name)
    assert [call.key for call in calls(released)] == [1, 2]
    assert c.session.timer_expired(timers[0].name) == []  # once
    c.complete(released)
    # The question is still out: a new call waits again, under a new bound.
    again = c.request(3, "tools/call", tool_call())
    assert calls(again) == [] and len([e for e in again if isinstance(e, StartTimer)]) == 1
    opened = c.feed(_roots_answer(ask, "/srv/new"))
    assert len(calls(c.session.roots_settled(opened[0].generation))) == 1


def test_changes_from_a_client_without_roots_are_ignored_and_said_once(
    config: SessionConfig, caplog: pytest.LogCaptureFixture
) -> None:
    c = Conversation(config)
    c.greet()
    with caplog.at_level(logging.INFO, logger="sandboxfs"):
        for _ in range(1000):
            assert c.notify("notifications/roots/list_changed") == []
    assert sum("Ignoring roots/list_changed" in r.getMessage() for r in caplog.records) == 1


def test_a_client_without_roots_uses_the_command_line_said_once(config: SessionConfig) -> None:
    c = Conversation(config)
    c.answer(
        0,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        },
    )
    assert c.notify("notifications/initialized") == [UseCommandLine()]
    assert c.notify("notifications/initialized") == []
    assert c.notify("notifications/roots/list_changed") == []  # it declared no Roots


def test_no_directories_and_no_roots_is_an_error_and_closes(config: SessionConfig) -> None:
    bare = dataclasses.replace(config, has_directories=False)
    c = Conversation(bare)
    effects = c.request(
        0,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        },
    )
    assert sends(effects)[0]["error"]["code"] == -32602
    assert effects[-1] == Close(1)
    assert c.request(1, "ping") == []  # closed: nothing more is served


def test_http_sessions_have_no_handshake_gate_and_no_back_channel(config: SessionConfig) -> None:
    http = dataclasses.replace(config, http=True, roots=False)
    c = Conversation(http, era="2025", version="2025-06-18")
    assert "tools" in c.answer(1, "tools/list")["result"]
    assert c.notify("notifications/roots/list_changed") == []
    c = Conversation(http, era="2026", version=MODERN)
    assert c.answer(1, "tools/list", {"_meta": META})["result"]["resultType"] == "complete"


# -- the SDK's URI rules, and escaping what is logged ------------------------------------

URIS = [
    "file:///tmp/a",
    "file:///tmp/a b",
    "file:///tmp/%41%2F",
    "file:///tmp/caf\u00e9",
    "file://host/share/x",
    "file:/tmp/x",
    "file:relative",
    "FILE:///tmp/x",
    "file:///tmp/../etc",
    "file:///tmp/a?q#f",
    " file:///tmp/x ",
    "file:///tmp/%zz",
    "file:///C:/x",
    "file://",
    "file:",
    "file:///tmp/\u0000x",
    "http://example.com/x",
    "not a uri",
    "",
]


def _sdk_uris(answer: Any) -> list[str] | None:
    """What the SDK's models take of an answer: its URIs, or None if refused."""
    try:
        return [str(root.uri) for root in types.ListRootsResult.model_validate(answer).roots]
    except ValueError:
        return None


def _core_uris(answer: Any) -> list[str] | None:
    try:
        return root_uris(answer)
    except MalformedRoots:
        return None


#: Answers the SDK takes or refuses as a whole, besides the URI table: the core must
#: agree on every one (and on the URIs it takes).
ANSWERS: list[Any] = [
    None,
    [],
    "roots",
    5,
    {},
    {"roots": 5},
    {"roots": None},
    {"roots": {"uri": "file:///a"}},
    {"roots": []},
    {"roots": [5]},
    {"roots": [None]},
    {"roots": [{"name": "x"}]},
    {"roots": [{"uri": 7}]},
    {"roots": [{"uri": None}]},
    {"roots": [{"uri": "file:///a", "name": 5}]},
    {"roots": [{"uri": "file:///a", "name": None}]},
    {"roots": [{"uri": "file:///a", "name": ["x"]}]},
    {"roots": [{"uri": "file:///a", "_meta": 5}]},
    {"roots": [{"uri": "file:///a", "_meta": {"k": 1}}]},
    {"roots": [{"uri": "file:///a", "meta": "x"}]},
    {"roots": [{"uri": "file:///a"}], "_meta": []},
    {"roots": [{"uri": "file:///a"}], "_meta": None},
    {"roots": [{"uri": "file:///a", "other": 1}], "nextCursor": 3},
    {"roots": [{"uri": "file:///a"}, {"uri": "http://x/"}]},
    {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}, 5]},
    {"roots": [{"uri": "file:///a"}, {"uri": "file:///a"}]},
]


@pytest.mark.parametrize("answer", [{"roots": [{"uri": u, "name": "n"}]} for u in URIS] + ANSWERS)
def test_roots_answers_are_taken_or_refused_as_the_sdk_does(answer: Any) -> None:
    """The core takes exactly the answers the SDK's models take (with the same URIs),
    and refuses the rest as a whole: a malformed root is never skipped silently."""
    assert _core_uris(answer) == _sdk_uris(answer)


def test_an_answer_over_a_bound_is_refused_as_a_whole() -> None:
    many = {"roots": [{"uri": f"file:///r{i}"} for i in range(MAX_CLIENT_ROOTS)]}
    assert len(root_uris(many)) == MAX_CLIENT_ROOTS  # at the bound: taken
    many["roots"].append({"uri": "file:///one-more"})
    assert _sdk_uris(many) is not None  # the SDK would take it; the bound refuses it
    with pytest.raises(MalformedRoots, match=f"names 257 roots; at most {MAX_CLIENT_ROOTS}"):
        root_uris(many)
    longest = "file:///" + "a" * (MAX_ROOT_URI_CHARS - len("file:///"))
    assert root_uris({"roots": [{"uri": longest}]}) == [longest]
    longer = {"roots": [{"uri": "file:///x"}, {"uri": longest + "a"}]}
    assert _sdk_uris(longer) is not None
    with pytest.raises(MalformedRoots, match=f"root 2 has a URI of {MAX_ROOT_URI_CHARS + 1}"):
        root_uris(longer)
    # The longest Linux path, every byte percent-encoded, is within the bound.
    assert len("file://localhost/" + "%41" * 4095) <= MAX_ROOT_URI_CHARS


def test_malformed_roots_answers_are_refused_saying_why() -> None:
    reasons = {
        "null": None,
        "the result is a list, not an object": [],
        "its roots are a number, not a list": {"roots": 5},
        "root 2 is a number, not an object": {"roots": [{"uri": "file:///a"}, 5]},
        "root 1 has no uri": {"roots": [{"name": "x"}]},
        "root 1 has a number for its uri, not a string": {"roots": [{"uri": 7}]},
        "root 1 has a number for its name, not a string": {
            "roots": [{"uri": "file:///a", "name": 5}]
        },
        "root 1 is not a file: URI: http://x": {"roots": [{"uri": "http://x"}]},
    }
    for reason, answer in reasons.items():
        with pytest.raises(MalformedRoots) as refused:
            root_uris(answer)
        assert reason in str(refused.value)


def test_client_text_in_a_reason_is_escaped_and_bounded() -> None:
    forged = 'http://x\n{"event": "tools/call", "tool": "forged"}'
    for uri in (forged, "http://\udcff\n" + "x" * 100_000, "file://[" + "\n" * 50_000):
        with pytest.raises(MalformedRoots) as refused:
            root_uris({"roots": [{"uri": uri}]})
        reason = str(refused.value)
        assert "\n" not in reason and len(reason) < 2 * SHOWN_CHARS + 100, reason
    assert shown("a" * 1000).endswith("... (1000 characters)")
    assert shown("a\nb") == '"a\\nb"'


# -- random conversations, checked by the SDK --------------------------------------------

_ids = st.one_of(st.integers(-3, 40), st.sampled_from(["1", "a", "sandboxfs-1", ""]))
_text = st.text(
    st.characters(codec=None, exclude_categories=["Cs"]) | st.just("\ud800"), max_size=6
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_methods = (
    st.sampled_from(
        [
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "logging/setLevel",
            "server/discover",
            "prompts/list",
            "notifications/initialized",
            "notifications/cancelled",
            "notifications/roots/list_changed",
        ]
    )
    | _text
)


@st.composite
def _params(draw: st.DrawFn, method: str) -> Any:
    """Params that are usually right for ``method`` and sometimes wrong."""
    if draw(st.integers(0, 5)) == 0:
        return draw(_json)
    params: dict[str, Any] = {}
    if method == "initialize":
        params = {
            "protocolVersion": draw(st.sampled_from(["2025-06-18", "2025-11-25", MODERN, "x"])),
            "capabilities": draw(st.sampled_from([{}, {"roots": {}}, {"roots": 5}])),
            "clientInfo": {"name": "h", "version": "1"},
        }
    elif method == "tools/call":
        params = {"name": draw(_text), "arguments": draw(st.none() | st.just({"path": "a"}))}
    elif method == "resources/read":
        params = {"uri": draw(_text)}
    elif method == "logging/setLevel":
        params = {"level": draw(st.sampled_from(["debug", "loud"]))}
    elif method == "notifications/cancelled":
        params = {"requestId": draw(_ids)}
    if draw(st.booleans()):
        meta: dict[str, Any] = dict(META)
        if draw(st.booleans()):
            meta["progressToken"] = draw(_ids | st.booleans() | st.floats(allow_nan=False))
        params["_meta"] = meta
    return params


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["request", "request", "notification", "response"]))
    if kind == "response":
        body = {"result": draw(_json)} if draw(st.booleans()) else {"error": draw(_json)}
        return {"jsonrpc": "2.0", "id": draw(_ids), **body}
    method = draw(_methods)
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if kind == "request":
        message["id"] = draw(_ids)
    if draw(st.integers(0, 3)) > 0:
        message["params"] = draw(_params(method))
    return message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message(), max_size=25), st.booleans())
def test_every_answer_to_random_messages_is_one_the_sdk_accepts(
    config: SessionConfig, messages: list[dict[str, Any]], http: bool
) -> None:
    """Whatever arrives, each request is answered exactly once (once its call is
    completed and its Roots settled), and every message is valid for the SDK."""
    if http:
        c = Conversation(
            dataclasses.replace(config, http=True, roots=False), era="2025", version="2025-11-25"
        )
    else:
        c = Conversation(config)
    pending: list[Effect] = []
    seen: set[Any] = set()
    for message in messages:
        decoded = decode(json.dumps(message).encode())
        if not isinstance(decoded, dict):
            continue
        if "method" in decoded and "id" in decoded:
            key = json.dumps(decoded["id"])
            if decoded["id"] in seen or key in seen:
                continue  # a client reusing an id cannot be told apart; not this test's subject
            seen.update({decoded["id"], key})
        effects = c.feed(decoded)
        pending += effects
        settled: list[Effect] = []
        for effect in pending:
            if isinstance(effect, OpenRoots):
                settled += c.check(c.session.roots_settled(effect.generation))
        pending = [e for e in pending if not isinstance(e, OpenRoots)] + settled
        if c.session.closed:
            break
    pending += c.check(c.session.input_ended())
    while any(isinstance(e, Call | OpenRoots) for e in pending):
        more: list[Effect] = []
        more += c.complete(pending)
        for effect in pending:
            if isinstance(effect, OpenRoots):
                more += c.check(c.session.roots_settled(effect.generation))
        pending = more
    if not c.session.closed:
        assert c.oracle.unanswered() == []
    assert not c.session.busy or c.session.closed


@settings(max_examples=300, deadline=None)
@given(_methods.filter(lambda m: not m.startswith("notifications/")), st.data())
def test_the_core_accepts_every_request_the_sdk_accepts(
    config: SessionConfig, method: str, data: st.DataObject
) -> None:
    """A request the SDK's own server model accepts is never refused for its shape."""
    params = data.draw(_params(method))
    modern = isinstance(params, dict) and "_meta" in params
    version = MODERN if modern else "2025-06-18"
    try:
        methods.validate_client_request(method, version, params)
    except (ValueError, KeyError, TypeError):
        return
    c = Conversation(config)
    if modern:
        c.answer("d", "server/discover", {"_meta": META})
    elif method != "initialize":
        c.greet()
    answer = [m for m in sends(c.complete(c.request(1, method, params))) if m.get("id") == 1]
    answer += [m for m in c.sent if m.get("id") == 1]
    assert answer, (method, params)
    error = answer[0].get("error")
    if error is not None:
        assert error["code"] not in (-32600, -32602), (method, params, error)

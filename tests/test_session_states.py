"""The session's state table: every move it makes, and no message that finds a move the
table lacks.

The table (:data:`sandboxfs.session.protocol.TRANSITIONS`) is the one authority on what a
session does next; these tests drive real messages through a :class:`Session` and check
that the state each one leaves is the one the table names, and that random message
sequences (hypothesis) never reach a state/event pair the table does not have (which
would be answered -32603 and logged as an internal error).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_session_core import META, Conversation, config  # noqa: F401  (the fixture)

from sandboxfs.session import era as eras
from sandboxfs.session.effects import Close
from sandboxfs.session.protocol import (
    ERA_OF,
    TRANSITIONS,
    Event,
    Session,
    SessionConfig,
    State,
    StateError,
    starting_state,
)

GREETING: dict[str, Any] = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "states", "version": "1"},
}


def test_every_state_is_reachable_and_says_its_era() -> None:
    reached = {State.FRESH} | set(TRANSITIONS.values())
    assert reached == set(State)
    assert set(ERA_OF) == set(State)
    for (before, _), after in TRANSITIONS.items():
        if ERA_OF[before] is not None:  # an era, once decided, never changes
            assert ERA_OF[after] == ERA_OF[before]


def test_a_move_the_table_lacks_is_a_bug_not_a_state(config: SessionConfig) -> None:  # noqa: F811
    session = Session(config)
    with pytest.raises(StateError, match="FRESH"):
        session._move(Event.INITIALIZED)
    assert session.state is State.FRESH


def test_where_a_session_starts(config: SessionConfig) -> None:  # noqa: F811
    assert starting_state(None, http=False) is State.FRESH
    assert starting_state("2025", http=True) is State.READY
    assert starting_state("2026", http=True) is State.STATELESS
    with pytest.raises(ValueError):
        starting_state(None, http=True)
    with pytest.raises(ValueError):
        starting_state("2025", http=False)


def test_the_2025_handshake_moves_through_the_table(config: SessionConfig) -> None:  # noqa: F811
    c = Conversation(config)
    assert c.session.state is State.FRESH and c.session.era is None
    assert "result" in c.answer(1, "ping")
    assert c.session.state is State.HANDSHAKE and c.session.era == "2025"
    assert c.answer(2, "tools/list")["error"]["code"] == -32602  # not before initialize
    assert c.session.state is State.HANDSHAKE
    assert "result" in c.answer(3, "initialize", GREETING)
    assert c.session.state is State.READY
    assert "result" in c.answer(4, "initialize", GREETING)  # renegotiates
    assert c.session.state is State.READY
    assert "result" in c.answer(5, "tools/list")


def test_the_2026_era_is_stateless_from_its_first_request(config: SessionConfig) -> None:  # noqa: F811
    c = Conversation(config)
    assert "result" in c.answer(1, "server/discover", {"_meta": META})
    assert c.session.state is State.STATELESS and c.session.era == "2026"
    assert "error" in c.answer(2, "initialize", GREETING)
    assert c.session.state is State.STATELESS


def test_a_refused_handshake_closes_and_nothing_more_is_answered(
    config: SessionConfig,  # noqa: F811
) -> None:
    bare = dataclasses.replace(config, has_directories=False)
    c = Conversation(bare)
    effects = c.request(1, "initialize", GREETING)  # no Roots, no directories
    assert any(isinstance(e, Close) for e in effects)
    assert c.session.state is State.CLOSED and c.session.closed
    assert c.request(2, "ping") == []


MESSAGES = st.sampled_from(
    [
        ("request", "initialize", GREETING),
        ("request", "initialize", {**GREETING, "capabilities": {"roots": {}}}),
        ("request", "ping", None),
        ("request", "tools/list", None),
        ("request", "tools/list", {"_meta": META}),
        ("request", "server/discover", {"_meta": META}),
        ("request", "logging/setLevel", {"level": "info"}),
        ("request", "no/such", None),
        ("notify", "notifications/initialized", None),
        ("notify", "notifications/roots/list_changed", None),
        ("notify", "notifications/cancelled", {"requestId": 1}),
    ]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(MESSAGES, max_size=12), bare=st.booleans())
def test_no_message_sequence_finds_a_move_the_table_lacks(
    config: SessionConfig,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    sequence: list[tuple[str, str, Any]],
    bare: bool,
) -> None:
    caplog.clear()
    c = Conversation(dataclasses.replace(config, has_directories=not bare))
    decided = None
    with caplog.at_level(logging.ERROR, logger="sandboxfs"):
        for number, (kind, method, params) in enumerate(sequence):
            before = c.session.state
            if kind == "request":
                c.request(number, method, params)
            else:
                c.notify(method, params)
            after = c.session.state
            assert after in _within_two_moves(before)  # a first initialize makes two
            if decided is not None:
                assert c.session.era == decided
            decided = c.session.era
    assert "internal error" not in caplog.text


def _within_two_moves(state: State) -> set[State]:
    one = {state} | {TRANSITIONS[state, e] for e in Event if (state, e) in TRANSITIONS}
    return one | {TRANSITIONS[s, e] for s in one for e in Event if (s, e) in TRANSITIONS}


def test_the_era_of_a_version() -> None:
    assert eras.of_version("2025-11-25") == "2025"
    assert eras.of_version("2026-07-28") == "2026"
    assert eras.of_version("2099-01-01") is None
    assert eras.negotiated("2099-01-01") == eras.LATEST_HANDSHAKE_VERSION

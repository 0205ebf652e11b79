"""Protocol: raw JSON-RPC to a fresh copy of the server, what an SDK client would
never send."""

from __future__ import annotations

import json
from collections.abc import Callable

import trio

from sandboxfs.audit.cases.base import (
    CaseFn,
    case,
)
from sandboxfs.audit.harness import (
    CaseFailed,
    CaseSkipped,
    Fixture,
    Session,
)
from sandboxfs.audit.rawwire import RawServer, handshake, raw_server, request

# -- protocol --------------------------------------------------------------------------------
# Raw JSON-RPC to a fresh copy of the server: what an SDK client would never send.


async def _raw(s: Session, conversation: Callable[[RawServer], str | None]) -> None:
    """Run ``conversation`` against a fresh server; it returns what went wrong, or None.
    Cancelled (the audit interrupted), the server is killed at once, which ends the
    conversation's waits."""
    with raw_server(s.argv, s.env) as server:
        problem = await trio.to_thread.run_sync(conversation, server, abandon_on_cancel=True)
    if problem:
        raise CaseFailed(problem)


def _survives(what: str, method: str, params: dict[str, object]) -> CaseFn:
    """A case: the server answers a request with ``method`` and ``params`` (what it
    answers does not matter), then the next one, then ends at end of input."""

    async def case_fn(session: Session, fx: Fixture) -> None:
        def conversation(server: RawServer) -> str | None:
            era = session.era
            server.send(*handshake(era))
            server.send(request(era, 2, method, params), request(era, 3, "tools/list"))
            if server.answer(2, session.timeout) is None:
                return f"{what}: no answer (the server ended or hung)"
            if server.answer(3, session.timeout) is None:
                return f"after {what}, the server no longer answers"
            status = server.close(session.timeout)
            if status is None:
                return f"after {what}, the server did not end at end of input"
            return None

        await _raw(session, conversation)

    return case_fn


_UNENCODABLE: list[tuple[str, str, str, dict[str, object]]] = [
    ("lone-surrogate-method", "a method name holding a lone surrogate", "x/\ud800", {}),
    (
        "lone-surrogate-tool-name",
        "a tool name holding a lone surrogate",
        "tools/call",
        {"name": "read_text_file\udfff", "arguments": {}},
    ),
    (
        "lone-surrogate-uri",
        "a resource URI holding a lone surrogate",
        "resources/read",
        {"uri": "file:///\ud800"},
    ),
]
for _name, _what, _method, _params in _UNENCODABLE:
    case("protocol", _name)(_survives(_what, _method, _params))


@case("protocol", "second-initialize")
async def _second_initialize(s: Session, fx: Fixture) -> None:
    """A second ``initialize`` declaring Roots, never followed by ``initialized``,
    must not leave later calls waiting."""
    if s.era == "2026":
        raise CaseSkipped("2026-07-28 has no handshake")

    def conversation(server: RawServer) -> str | None:
        server.send(*handshake("2025"))
        again = json.loads(handshake("2025", {"roots": {"listChanged": True}})[0])
        again["id"] = 1
        server.send(json.dumps(again))
        server.send(request("2025", 2, "tools/call", {"name": "list_allowed_directories"}))
        if server.answer(2, s.timeout) is None:
            return f"after a second initialize, a call got no answer within {s.timeout:g} s"
        return None

    await _raw(s, conversation)


@case("protocol", "pending-then-end-of-input")
async def _pending_then_eof(s: Session, fx: Fixture) -> None:
    """Requests written at once (10,000; 1,000 with ``--quick``), then end of input:
    the server must end, not hang."""

    def conversation(server: RawServer) -> str | None:
        era = s.era
        call = {"name": "list_allowed_directories", "arguments": {}}
        flood = s.budget.flood
        lines = [request(era, 10 + i, "tools/call", call) for i in range(flood)]
        server.send(*handshake(era), *lines)
        bound = max(60.0, 4 * s.timeout)
        if server.close(bound) is None:
            return f"{flood:,} pending requests then end of input: still running after {bound:g} s"
        return None

    await _raw(s, conversation)

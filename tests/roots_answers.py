"""Malformed answers a client may give to ``roots/list``: the ones issue 26 reported,
each the body of a response (``{"jsonrpc": "2.0", "id": ask, **body}``).  The
session-core tests and the end-to-end tests use the same table."""

from __future__ import annotations

from typing import Any

REPORTED_MALFORMED_ANSWERS: dict[str, dict[str, Any]] = {
    "an error object": {"error": {"code": -32603, "message": 'no\n{"forged": 1}'}},
    "roots not a list": {"result": {"roots": {"uri": "file:///srv"}}},
    "a non-string uri": {"result": {"roots": [{"uri": 7, "name": "seven"}]}},
    "a missing uri": {"result": {"roots": [{"name": "nameless"}]}},
    "20,000 roots": {"result": {"roots": [{"uri": f"file:///srv/{i}"} for i in range(20_000)]}},
    "a 100 kB uri": {"result": {"roots": [{"uri": "file:///" + "a" * 100_000}]}},
    "result: null": {"result": None},
    "result: []": {"result": []},
    "a non-string name": {"result": {"roots": [{"uri": "file:///srv", "name": 5}]}},
}

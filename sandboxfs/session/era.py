"""The two protocol eras, and the one place that says which one a message speaks.

MCP is served in two eras. The **2025 era** is the handshake protocol: a client
sends ``initialize``, then requests on a connection that remembers what was
negotiated (versions :data:`HANDSHAKE_VERSIONS`). The **2026-07-28 era** is
stateless: every request carries its envelope (``_meta`` with the protocol version,
:data:`MODERN_VERSIONS`), and nothing is negotiated.

This module is the authority on the era: how a stdio connection's first request
decides it, how an HTTP request's ``MCP-Protocol-Version`` does, which era a
negotiated version belongs to (what the audit log records), and what each era
serves (its methods and capabilities). Nothing else compares versions to decide an
era.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from sandboxfs.session.jsonrpc import (
    HANDSHAKE_VERSIONS,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
)

Era = Literal["2025", "2026"]

#: The version a 2025-era client gets when it asks for one that is not served.
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_VERSIONS[-1]

#: Requests each era serves, besides what is refused before the handshake.
METHODS: Final[Mapping[Era, frozenset[str]]] = {
    "2025": frozenset(
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
    ),
    "2026": frozenset(
        {
            "server/discover",
            "tools/list",
            "tools/call",
            "resources/list",
            "resources/templates/list",
            "resources/read",
        }
    ),
}


def is_modern(params: Mapping[str, Any] | None) -> bool:
    """Whether a request carries the 2026-07-28 envelope (its protocol version key)."""
    meta = params.get("_meta") if params is not None else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def of_first_request(method: str, params: Mapping[str, Any] | None) -> Era:
    """The era of a stdio connection, decided by its first request: the 2026-07-28
    envelope on anything but ``initialize`` makes it 2026; everything else, 2025."""
    return "2026" if method != "initialize" and is_modern(params) else "2025"


def of_version(version: str) -> Era | None:
    """The era a protocol version belongs to; None for a version not served."""
    if version in HANDSHAKE_VERSIONS:
        return "2025"
    if version in MODERN_VERSIONS:
        return "2026"
    return None


def negotiated(requested: Any) -> str:
    """The version a 2025-era ``initialize`` asking for ``requested`` is answered with."""
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION


def capabilities(era: Era) -> dict[str, Any]:
    """The server's capabilities as each era states them (2026 has no logging)."""
    caps: dict[str, Any] = {
        "resources": {"listChanged": False, "subscribe": False},
        "tools": {"listChanged": False},
    }
    if era == "2025":
        caps["logging"] = {}
    return caps

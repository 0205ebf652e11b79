"""The wire facts the stdio path needs without importing the MCP SDK.

Protocol versions, JSON-RPC error codes, how request ids correlate (the SDK's
own values: a test compares them) and how long a client may take to answer
``roots/list``.  Importing the SDK costs over a second and some 35 MiB, so the
stdio transport and the fast lane use these and load the SDK only when a
connection needs it.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: Versions negotiated by an ``initialize`` handshake (the 2025 era).
HANDSHAKE_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: Versions whose requests each carry their envelope (no handshake).
MODERN_VERSIONS: Final = ("2026-07-28",)
#: Every protocol version served.
SUPPORTED_VERSIONS: Final = (*HANDSHAKE_VERSIONS, *MODERN_VERSIONS)

PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"

#: How long the server waits for a client's answer to roots/list.
ROOTS_FETCH_TIMEOUT: Final = 30.0

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603


class ProtocolError(Exception):
    """A request fails as a JSON-RPC error (not as a tool's ``isError`` result)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def valid_id(value: Any) -> bool:
    """Whether ``value`` can be a JSON-RPC request id (an integer or a string)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def correlation_key(request_id: Any) -> Any:
    """A request id as the SDK correlates it (``"7"`` is 7); None for a value that
    cannot be an id (a client's ``notifications/cancelled`` may name anything)."""
    if not valid_id(request_id):
        return None
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:
            pass
    return request_id


def error_frame(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    """One JSON-RPC error line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return (json.dumps(frame, separators=(",", ":")) + "\n").encode()


#: Frames at least this big are sent without a copy to append the newline.
_SPLIT_FRAME: Final = 64 * 1024


def framed(frame: bytes) -> bytes:
    """A JSON frame with its newline; a big one without (the relay sends it apart,
    sparing a copy of the frame)."""
    return frame + b"\n" if len(frame) < _SPLIT_FRAME else frame


def _envelope_problem(obj: dict[str, Any]) -> str | None:
    """Why ``obj`` is not a JSON-RPC 2.0 message, or None if its envelope is sound."""
    if obj.get("jsonrpc") != "2.0":
        return "jsonrpc must be 2.0"
    if "method" in obj and not isinstance(obj["method"], str):
        return "bad method"
    if "params" in obj and not isinstance(obj["params"], dict):
        return "bad params"
    kinds = [key for key in ("method", "result", "error") if key in obj]
    if not kinds:
        return "no method, result or error"
    if len(kinds) > 1:
        return f"{' and '.join(kinds)} cannot appear together"
    return None


#: The members of a request the fast lane may take without pydantic's validation.
_PLAIN_REQUEST: Final = frozenset({"jsonrpc", "id", "method", "params"})
_PLAIN_NOTIFICATION: Final = frozenset({"jsonrpc", "method", "params"})


def decode(line: bytes) -> dict[str, Any] | bytes | None:
    """A JSON-RPC object with a sound envelope, an error line to send back, or None
    (blank)."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return error_frame(None, PARSE_ERROR, "Parse error")
    if not isinstance(obj, dict):
        return error_frame(None, INVALID_REQUEST, "Invalid Request")
    # A bad id would make pydantic read a request as a notification: refuse it first.
    if "id" in obj and not valid_id(obj["id"]):
        return error_frame(None, INVALID_REQUEST, "Invalid Request: bad id")
    problem = _envelope_problem(obj)
    if problem is not None:
        return error_frame(obj.get("id"), INVALID_REQUEST, f"Invalid Request: {problem}")
    return obj


def plain_request(obj: dict[str, Any]) -> bool:
    """A request with nothing beyond what :func:`decode` checked: the fast lane may
    take it as it is."""
    return "id" in obj and "method" in obj and obj.keys() <= _PLAIN_REQUEST


def plain_notification(obj: dict[str, Any]) -> bool:
    """A notification with nothing beyond what :func:`decode` checked."""
    return "id" not in obj and "method" in obj and obj.keys() <= _PLAIN_NOTIFICATION

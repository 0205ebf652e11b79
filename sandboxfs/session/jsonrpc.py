"""JSON-RPC on the wire: protocol versions, error codes, how request ids correlate
(the MCP SDK's own values: a test compares them), and lines in and out.

:func:`decode` turns a line into a JSON-RPC request or notification with a sound
envelope, a response (judged by the session, which alone knows its questions), or
the error line to answer; :func:`encode` turns any message into bytes and never
raises (text a client sent that JSON cannot carry, such as a lone surrogate, is
replaced, not fatal).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import pydantic_core

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
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022


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


def error_message(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response object."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def encode(message: dict[str, Any]) -> bytes:
    """A message as compact JSON.  Never raises: strings JSON cannot carry become
    U+FFFD (the bytes of a name that were not UTF-8, as a UTF-8 decoder replaces
    them; any other lone surrogate, one for one)."""
    try:
        return pydantic_core.to_json(message)
    except (pydantic_core.PydanticSerializationError, ValueError):
        return pydantic_core.to_json(_cleaned(message))


#: A UTF-16 surrogate on its own: what a JSON string may spell but UTF-8 cannot carry.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def clean_json_text(value: str) -> str:
    if _SURROGATE.search(value) is None:
        return value
    try:  # bytes of a name that were not UTF-8: decoded as UTF-8 decodes them
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return _SURROGATE.sub("\ufffd", value)


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_json_text(value)
    if isinstance(value, bytes):  # base64 media: ASCII
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(v) for v in value]
    if isinstance(value, int | float | bool) or value is None:
        return value
    return _cleaned(str(value))


def error_frame(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    """One JSON-RPC error line, in ASCII.  An id holding a lone surrogate, which no
    UTF-8 client could have meant or could read back, is answered as null."""
    if isinstance(request_id, str) and _SURROGATE.search(request_id):
        request_id = None
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return (json.dumps(frame, separators=(",", ":")) + "\n").encode()


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


def decode(line: bytes) -> dict[str, Any] | bytes | None:
    """A request or notification with a sound envelope, a response with an id (its
    envelope unchecked), the error line to send back, or None (a blank line, or a
    response without an id: a response is never answered)."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return error_frame(None, PARSE_ERROR, "Parse error")
    if not isinstance(obj, dict):
        return error_frame(None, INVALID_REQUEST, "Invalid Request")
    return _checked(obj)


def _checked(obj: dict[str, Any]) -> dict[str, Any] | bytes | None:
    """A request or notification with a sound envelope, a response as it came (the
    session judges it), the error line to send back, or None for a response
    without an id (nobody to answer, nothing it could answer)."""
    if "method" not in obj and ("result" in obj or "error" in obj):  # a response
        # Handed over whatever its envelope: only the session knows whether it answers
        # one of its questions (a malformed answer must still settle that question).
        return obj if "id" in obj else None
    if "id" in obj and not valid_id(obj["id"]):
        return error_frame(None, INVALID_REQUEST, "Invalid Request: bad id")
    problem = _envelope_problem(obj)
    if problem is not None:
        return error_frame(obj.get("id"), INVALID_REQUEST, f"Invalid Request: {problem}")
    return obj

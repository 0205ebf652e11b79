"""The SDK's side of the stdio wire: its message models, sanitized on the way out.

Imported only once a stdio connection needs the SDK (it imports the SDK); the
transport itself (:mod:`sandboxfs.transports.stdio`) works on plain JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from sandboxfs.session.jsonrpc import decode, error_frame, framed


def to_message(obj: dict[str, Any]) -> SessionMessage | bytes:
    """A decoded object as the SDK's message, or the error line for what it is not."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(obj, by_name=False))
    except ValidationError:
        problem = "not a request, notification or response"
    return error_frame(obj.get("id"), types.INVALID_REQUEST, f"Invalid Request: {problem}")


def classify(line: bytes) -> SessionMessage | bytes | None:
    """A message to pass to the server, an error line to send back, or None (blank)."""
    obj = decode(line)
    return obj if obj is None or isinstance(obj, bytes) else to_message(obj)


def sanitize(message: types.JSONRPCMessage, versions: Sequence[str]) -> types.JSONRPCMessage:
    """Rewrite what the SDK would leak or understate on the wire."""
    if not isinstance(message, types.JSONRPCError):
        return message
    error = message.error
    if error.code == 0:  # the SDK's 2025-era catch-all: str(exc) may name host paths
        return types.JSONRPCError(
            jsonrpc="2.0",
            id=message.id,
            error=types.ErrorData(code=types.INTERNAL_ERROR, message="Internal error"),
        )
    if (
        error.code == types.UNSUPPORTED_PROTOCOL_VERSION
        and isinstance(error.data, dict)
        and error.message == "Unsupported protocol version"
    ):
        data = {**error.data, "supported": list(versions)}
        return types.JSONRPCError(
            jsonrpc="2.0",
            id=message.id,
            error=types.ErrorData(code=error.code, message=error.message, data=data),
        )
    return message


def encode(message: types.JSONRPCMessage) -> bytes:
    """The wire frame for a message (see :func:`sandboxfs.session.jsonrpc.framed`)."""
    # Straight to bytes: model_dump_json would decode them into a str first, and a
    # big result would then be copied twice more on its way out.
    return framed(
        message.__pydantic_serializer__.to_json(message, by_alias=True, exclude_unset=True)
    )


def answer_of(message: types.JSONRPCMessage) -> tuple[Any, dict[str, Any] | None] | None:
    """For a response: the id it answers and its result; for an error: the id and
    None; for anything else: None."""
    if isinstance(message, types.JSONRPCResponse):
        return message.id, message.result
    if isinstance(message, types.JSONRPCError):
        return message.id, None
    return None

"""The MCP SDK as the oracle of what sandboxfs sends.

:class:`WireOracle` follows one connection (or one HTTP request) from both ends:
:meth:`~WireOracle.sent` takes each message the client sent, and
:meth:`~WireOracle.received` each message the server sent back, which it checks
against the SDK's own models (``mcp_types``) at the protocol version in force:

* a response answers a request that was sent and not answered yet, exactly once,
  with a JSON-RPC envelope the SDK parses, and a result that the SDK's model of
  that method's result accepts at that version;
* an error has an integer code and a string message; ``id`` null only for what
  had no usable id;
* a request or notification from the server is one the SDK's client accepts.

:meth:`~WireOracle.unanswered` lists the requests still owed an answer (a
cancelled one is not owed).  The helpers of the suite run every raw exchange
through it, so every answer sandboxfs gives in a test is checked.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp_types import methods

from sandboxfs.session.jsonrpc import correlation_key

MODERN = "2026-07-28"
LATEST_HANDSHAKE = "2025-11-25"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"


class WireOracle:
    """Checks one conversation; ``era`` is fixed for HTTP (the header decides it)."""

    def __init__(self, *, version: str | None = None) -> None:
        self.version = version  # None until the conversation decides it
        self._decided = version is not None
        #: correlation key -> (method, request id, version it was asked at)
        self.pending: dict[Any, tuple[str, Any, str]] = {}
        self.answered: list[dict[str, Any]] = []
        self.server_requests: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []

    # -- the client's side ----------------------------------------------------------------

    def sent(self, message: Any) -> None:
        if not isinstance(message, dict) or "method" not in message:
            return
        method, params = message["method"], message.get("params")
        if "id" not in message:
            if method == "notifications/cancelled" and isinstance(params, dict):
                self.pending.pop(correlation_key(params.get("requestId")), None)
            return
        key = correlation_key(message["id"])
        if key is None:
            return
        version = self._version_of(method, params)
        self.pending[key] = (method if isinstance(method, str) else "", message["id"], version)

    def _version_of(self, method: Any, params: Any) -> str:
        """The version a request is answered at: the first request of a connection
        decides its era, as the server's session does (a 2026-07-28 envelope on
        anything but ``initialize``; else the handshake era, whatever came of it)."""
        if not self._decided:
            self._decided = True
            meta = params.get("_meta") if isinstance(params, dict) else None
            modern = isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
            if self.version is None and method != "initialize" and modern:
                self.version = MODERN
        return self.version or LATEST_HANDSHAKE

    # -- the server's side ----------------------------------------------------------------

    def received(self, message: dict[str, Any]) -> None:
        """Check one message from the server (raises AssertionError if it is wrong)."""
        parsed = types.jsonrpc_message_adapter.validate_python(message)
        version = self.version or LATEST_HANDSHAKE
        if "method" in message:
            params = message.get("params")
            if "id" in message:
                assert isinstance(parsed, types.JSONRPCRequest), message
                methods.parse_server_request(message["method"], version, params)
                self.server_requests.append(message)
            else:
                assert isinstance(parsed, types.JSONRPCNotification), message
                methods.parse_server_notification(message["method"], version, params)
                self.notifications.append(message)
            return
        request_id = message.get("id")
        if request_id is None:
            assert "error" in message, f"a result for no request: {message}"
            self._check_error(message["error"], message)
            self.answered.append(message)
            return
        key = correlation_key(request_id)
        assert key in self.pending, f"an answer to no pending request: {message}"
        method, sent_id, asked_at = self.pending.pop(key)
        assert request_id == sent_id and type(request_id) is type(sent_id), (message, sent_id)
        if "error" in message:
            assert isinstance(parsed, types.JSONRPCError), message
            self._check_error(message["error"], message)
        else:
            assert isinstance(parsed, types.JSONRPCResponse), message
            result = message["result"]
            methods.validate_server_result(method, asked_at, result)
            if method == "initialize":
                self.version = result["protocolVersion"]
        self.answered.append(message)

    @staticmethod
    def _check_error(error: Any, message: dict[str, Any]) -> None:
        assert isinstance(error, dict), message
        assert isinstance(error.get("code"), int) and not isinstance(error["code"], bool), message
        assert isinstance(error.get("message"), str), message

    def unanswered(self) -> list[Any]:
        """Ids of requests still owed an answer."""
        return [sent_id for _method, sent_id, _version in self.pending.values()]


def check_conversation(sent: list[Any], replies: list[dict[str, Any]]) -> WireOracle:
    """Check a whole recorded exchange where every reply came after every request
    it answers (a raw stdio exchange read to the end).  Requests still pending at
    the end are left to the caller (:meth:`WireOracle.unanswered`)."""
    oracle = WireOracle()
    answers = {correlation_key(r.get("id")) for r in replies if "method" not in r}
    for message in sent:
        oracle.sent(message)
        if (
            isinstance(message, dict)
            and message.get("method") == "initialize"
            and correlation_key(message.get("id")) in answers
        ):
            # The era of the rest of the conversation is the one this initialize made.
            reply = next(r for r in replies if r.get("id") == message["id"] and "method" not in r)
            oracle.received(reply)
            replies = [r for r in replies if r is not reply]
    for reply in replies:
        oracle.received(reply)
    return oracle

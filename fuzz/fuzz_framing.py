"""Invariant tested: whatever bytes a client writes on stdin, the stdio framing layer
either passes a valid SessionMessage on to the server, or answers with exactly
one well-formed JSON-RPC error line, never any other error.

The input is the byte stream.  Checked, for every input:

* ``LineSplitter`` (with a cap and a chunking derived from the input's CRC, so
  an input always replays the same way) never holds more than the cap, and
  yields exactly what a reference ``split(b"\\n")`` gives: each line within
  the cap as is, ``None`` once for each longer line, the unterminated tail
  from ``finish()``;
* ``classify`` of every line (uncapped) returns None only for a blank line; a
  SessionMessage whose kind matches the envelope (``method`` and ``id`` make a
  request, ``method`` alone a notification, never a response; ids keep their
  exact type; never both ``result`` and ``error``); or one error line:
  ASCII JSON ending in a single newline, ``{"jsonrpc": "2.0", "id", "error"}``
  that the SDK accepts as a JSONRPCError, code -32700 exactly when the line is
  not JSON and -32600 otherwise, carrying the request's id when it had a
  usable one and null otherwise;
* the "Request too large" answer for a line over the cap is such a line too.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import zlib
from typing import Any, Final

import atheris

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from sandboxfs.session.jsonrpc import error_frame
    from sandboxfs.session.sdkwire import classify
    from sandboxfs.transports.stdio import LineSplitter

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"
MAX_CAP: Final = 80
_UNPARSABLE: Final = object()


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


def _usable_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _reference_parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return _UNPARSABLE


def check_error_line(frame: bytes, expected_id: Any, codes: tuple[int, ...]) -> None:
    assert isinstance(frame, bytes), type(frame)
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1, frame
    assert frame.isascii(), frame
    obj = json.loads(frame)
    assert isinstance(obj, dict) and set(obj) == {"jsonrpc", "id", "error"}, frame
    assert obj["jsonrpc"] == "2.0", frame
    assert obj["id"] == expected_id and type(obj["id"]) is type(expected_id), (frame, expected_id)
    error = obj["error"]
    assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, frame
    assert error["code"] in codes and isinstance(error["message"], str), frame
    parsed = types.jsonrpc_message_adapter.validate_json(frame[:-1])
    assert isinstance(parsed, types.JSONRPCError), frame


def check_message(item: SessionMessage, obj: Any) -> None:
    message = item.message
    assert isinstance(obj, dict) and obj.get("jsonrpc") == "2.0", obj
    if isinstance(message, types.JSONRPCRequest | types.JSONRPCResponse | types.JSONRPCError):
        assert message.id == obj["id"] and type(message.id) is type(obj["id"]), (message, obj)
    if isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
        assert message.method == obj["method"], (message, obj)
    ambiguous = "error" in obj and ("method" in obj or "result" in obj)
    if ambiguous and tolerated("ambiguous-envelope"):
        return
    # JSON-RPC 2.0 section 5: result and error MUST NOT both be present.
    assert not ("result" in obj and "error" in obj), f"ambiguous response passed on: {obj}"
    if "method" in obj:
        expected = types.JSONRPCRequest if "id" in obj else types.JSONRPCNotification
        assert isinstance(message, expected), (type(message), obj)
    else:
        assert isinstance(message, types.JSONRPCResponse | types.JSONRPCError), obj


def check_classify(line: bytes) -> None:
    item = classify(line)
    obj = _reference_parse(line)
    if item is None:
        assert not line.strip(), line
        return
    if isinstance(item, SessionMessage):
        check_message(item, obj)
        return
    if obj is _UNPARSABLE:
        check_error_line(item, None, (types.PARSE_ERROR,))
        return
    usable = isinstance(obj, dict) and "id" in obj and _usable_id(obj["id"])
    check_error_line(item, obj["id"] if usable else None, (types.INVALID_REQUEST,))


def reference_split(data: bytes, cap: int) -> tuple[list[bytes | None], list[bytes]]:
    """What the splitter must yield from feed() and then finish()."""
    *lines, tail = data.split(b"\n")
    fed: list[bytes | None] = [line if len(line) <= cap else None for line in lines]
    if len(tail) > cap:
        return [*fed, None], []
    return fed, [tail] if tail else []


def check_splitter(data: bytes) -> None:
    rng = random.Random(zlib.crc32(data))
    cap = rng.randrange(MAX_CAP)
    splitter = LineSplitter(cap)
    fed: list[bytes | None] = []
    at = 0
    while at < len(data):
        size = rng.choice((1, 2, 3, 7, 16, 64, 1 << 20))
        fed += splitter.feed(data[at : at + size])
        at += size
        assert len(splitter._buffer) <= cap, (cap, len(splitter._buffer))
    fed += splitter.feed(b"")
    finished = splitter.finish()
    assert (fed, finished) == reference_split(data, cap), (cap, fed, finished)
    if None in fed:
        text = f"Request too large: a line may hold at most {cap} bytes"
        frame = error_frame(None, types.INVALID_REQUEST, text)
        check_error_line(frame, None, (types.INVALID_REQUEST,))


def TestOneInput(data: bytes) -> None:
    check_splitter(data)
    for line in data.split(b"\n"):
        check_classify(line)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

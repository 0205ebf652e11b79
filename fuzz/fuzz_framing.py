"""Invariant tested: whatever bytes a client writes on stdin, the stdio framing layer
either passes a request or notification with a sound envelope on to the session,
or passes a response with an id on as it came (the session alone knows whether
it answers one of its questions, and judges it), or answers with exactly one
well-formed JSON-RPC error line, or drops a blank line or a response without an
id; never any other outcome, never an exception.

The input is the byte stream.  Checked, for every input:

* ``LineSplitter`` (with a cap and a chunking derived from the input's CRC, so
  an input always replays the same way) never holds more than the cap
  (``buffered``), and yields exactly what a reference ``split(b"\\n")`` gives:
  each line within the cap as is, ``None`` once for each longer line, the
  unterminated tail from ``finish()``;
* ``jsonrpc.decode`` of every line (uncapped) returns

  - None only for a blank line, or for a response-shaped object (no
    ``method``, a ``result`` or an ``error``) without an ``id``; a
    response-shaped object with an ``id`` is never dropped, whatever its
    envelope (a malformed answer must still settle the question it answers);
  - or the parsed object itself (same members, ids of their exact type): with
    ``method``, ``"jsonrpc": "2.0"`` and a kind that matches its envelope:
    ``method`` (a str) and a valid ``id`` (an int that is not a bool, or a
    str) make a request, ``method`` alone a notification, ``params`` absent or
    an object, never a ``result`` or an ``error`` beside ``method``; without
    ``method``, a response-shaped object with an ``id``, as it came;
  - or one error line, never for a response-shaped object (a response is never
    answered): ASCII JSON ending in a single newline,
    ``{"jsonrpc": "2.0", "id", "error"}`` that the SDK accepts as a
    JSONRPCError, code -32700 exactly when the line is not JSON (what
    ``json.loads`` refuses) and -32600 otherwise, carrying the object's id when
    it had a valid one (without a lone surrogate, which no client could read back)
    and null otherwise;

* the "Request too large" answer for a line over the cap is such a line too.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
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

    from sandboxfs.session.jsonrpc import decode, error_frame
    from sandboxfs.transports.stdio import LineSplitter

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"
MAX_CAP: Final = 80
_UNPARSABLE: Final = object()
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def tolerated(bug: str) -> bool:
    return bug in os.environ.get(TOLERATE_ENV, "").split(",")


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _reference_parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return _UNPARSABLE


def _response_shaped(obj: Any) -> bool:
    return isinstance(obj, dict) and "method" not in obj and ("result" in obj or "error" in obj)


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


def check_passed_on(item: dict[str, Any], obj: Any) -> None:
    """``item``, passed on to the session, is ``obj`` with a sound envelope."""
    assert isinstance(obj, dict) and item.keys() == obj.keys(), (item, obj)
    if "id" in obj:
        assert type(item["id"]) is type(obj["id"]), (item, obj)
        if _valid_id(obj["id"]) or obj["id"] is None:
            assert item["id"] == obj["id"], (item, obj)
    if "method" in item:
        assert item.get("jsonrpc") == "2.0", item
        assert isinstance(item["method"], str) and item["method"] == obj["method"], item
        assert "id" not in item or _valid_id(item["id"]), item  # request, else notification
        assert "params" not in item or isinstance(item["params"], dict), item
        assert "result" not in item and "error" not in item, f"ambiguous message passed on: {item}"
        return
    assert _response_shaped(item), f"neither a request nor a response passed on: {item}"
    assert "id" in item, f"a response without an id passed on: {item}"


def check_decode(line: bytes) -> None:
    item = decode(line)
    obj = _reference_parse(line)
    if item is None:
        assert not line.strip() or _response_shaped(obj), (line, "dropped")
        assert not (_response_shaped(obj) and "id" in obj), (line, "a response with an id dropped")
        return
    if isinstance(item, dict):
        check_passed_on(item, obj)
        return
    assert not _response_shaped(obj), (line, "a response answered")
    if obj is _UNPARSABLE:
        check_error_line(item, None, (types.PARSE_ERROR,))
        return
    usable = isinstance(obj, dict) and "id" in obj and _valid_id(obj["id"])
    # An id with a lone surrogate cannot be carried in a line the client can read.
    usable = usable and not (isinstance(obj["id"], str) and _SURROGATE.search(obj["id"]))
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
        assert 0 <= splitter.buffered <= cap, (cap, splitter.buffered)
    fed += splitter.feed(b"")
    finished = splitter.finish()
    assert splitter.buffered == 0, splitter.buffered
    assert (fed, finished) == reference_split(data, cap), (cap, fed, finished)
    if None in fed:
        text = f"Request too large: a line may hold at most {cap} bytes"
        frame = error_frame(None, types.INVALID_REQUEST, text)
        check_error_line(frame, None, (types.INVALID_REQUEST,))


def TestOneInput(data: bytes) -> None:
    check_splitter(data)
    for line in data.split(b"\n"):
        check_decode(line)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

"""A client's ``roots/list`` answer, read as untrusted input.

The answer is read as the MCP SDK's models read it (``ListRootsResult``: a list of
``Root`` objects, each with a ``file:`` URI, an optional string ``name`` and an
optional ``_meta`` object; a test compares the two on a table of answers), within
two bounds of its own.  An answer the SDK would refuse, or one over a bound, is
refused as a whole (:class:`MalformedRoots`): nothing of it is taken, and the
directories in force stay as they are.  An answer that is well formed yields its
URIs, normalized as the SDK normalizes them; whether each names a usable
directory is decided when it is opened (:mod:`sandboxfs.core.roots`).

Client text that reaches a log line or a reason is escaped and cut to
:data:`SHOWN_CHARS` characters (:func:`shown`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import pydantic_core

from sandboxfs.tools import quote_name

#: The most roots one answer may name; an answer with more is refused as a whole
#: (never cut short: the client would not know which of its roots were dropped).
#: Each root taken holds a descriptor while it is in force.
MAX_CLIENT_ROOTS: Final = 256
#: The longest root URI accepted, in characters: the longest Linux path (PATH_MAX,
#: 4096 bytes) with every byte percent-encoded, after ``file://localhost``, fits.
#: A longer URI cannot name a directory the kernel could open; an answer holding
#: one is refused as a whole.
MAX_ROOT_URI_CHARS: Final = 3 * 4096 + len("file://localhost")
#: Client text shown in a log line (escaped) is cut to this many characters.
SHOWN_CHARS: Final = 160


class RootsNotTaken(ValueError):
    """A ``roots/list`` answer that is not taken; the message says why (escaped)."""


@final
class ErrorAnswer(RootsNotTaken):
    """The client answered with an error."""


@final
class MalformedRoots(RootsNotTaken):
    """The answer is malformed, or over a bound."""

    def __str__(self) -> str:
        return f"its answer was dropped: {super().__str__()}"


def shown(text: str) -> str:
    """Client text as a log line may hold it: escaped, and cut to
    :data:`SHOWN_CHARS` characters (saying how long it was)."""
    if len(text) <= SHOWN_CHARS:
        return quote_name(text)
    return f"{quote_name(text[:SHOWN_CHARS])}... ({len(text)} characters)"


def answered_uris(message: Mapping[str, Any]) -> list[str]:
    """The URIs of a response to ``roots/list`` (any response object that carries the
    question's id, as the client sent it): ErrorAnswer for an error,
    MalformedRoots for anything else that is not a sound answer to take."""
    kinds = [key for key in ("result", "error") if key in message]
    if message.get("jsonrpc") != "2.0" or len(kinds) != 1:
        raise MalformedRoots("it is not a JSON-RPC 2.0 response with one result or one error")
    if kinds == ["error"]:
        error = message["error"]
        code = error.get("code") if isinstance(error, Mapping) else None
        detail = error.get("message") if isinstance(error, Mapping) else None
        said = f"error {code}" if isinstance(code, int) and not isinstance(code, bool) else "error"
        if isinstance(detail, str):
            said += f": {shown(detail)}"
        raise ErrorAnswer(f"the client answered with an {said}")
    return root_uris(message["result"])


def root_uris(result: Any) -> list[str]:
    """The ``file:`` URIs of a client's ``roots/list`` result, normalized as the SDK's
    models normalize them.  MalformedRoots if the SDK would refuse the answer, or
    if it names more than :data:`MAX_CLIENT_ROOTS` roots or a URI longer than
    :data:`MAX_ROOT_URI_CHARS` characters."""
    if not isinstance(result, Mapping):
        raise MalformedRoots(f"the result is {_kind(result)}, not an object")
    _check_meta(result, "the result's")
    roots = result.get("roots")
    if not isinstance(roots, list):
        raise MalformedRoots(f"its roots are {_kind(roots)}, not a list")
    if len(roots) > MAX_CLIENT_ROOTS:
        raise MalformedRoots(f"it names {len(roots)} roots; at most {MAX_CLIENT_ROOTS} are taken")
    return [_root_uri(number, root) for number, root in enumerate(roots, 1)]


def _root_uri(number: int, root: Any) -> str:
    if not isinstance(root, Mapping):
        raise MalformedRoots(f"root {number} is {_kind(root)}, not an object")
    if "uri" not in root:
        raise MalformedRoots(f"root {number} has no uri")
    uri = root["uri"]
    if not isinstance(uri, str):
        raise MalformedRoots(f"root {number} has {_kind(uri)} for its uri, not a string")
    if len(uri) > MAX_ROOT_URI_CHARS:
        raise MalformedRoots(
            f"root {number} has a URI of {len(uri)} characters; at most "
            f"{MAX_ROOT_URI_CHARS} are taken"
        )
    name = root.get("name")
    if name is not None and not isinstance(name, str):
        raise MalformedRoots(f"root {number} has {_kind(name)} for its name, not a string")
    _check_meta(root, f"root {number}'s")
    try:
        url = pydantic_core.Url(uri)
    except ValueError:
        raise MalformedRoots(f"root {number} has a URI that does not parse: {shown(uri)}") from None
    if url.scheme != "file":
        raise MalformedRoots(f"root {number} is not a file: URI: {shown(uri)}")
    return str(url)


def _check_meta(holder: Mapping[Any, Any], whose: str) -> None:
    for key in ("_meta", "meta"):  # the SDK's models take the field's name too
        value = holder.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise MalformedRoots(f"{whose} {key} is {_kind(value)}, not an object")


#: What each JSON type is called in a reason (never the client's text itself).
_KINDS: Final = (
    (bool, "a boolean"),
    (int | float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (Mapping, "an object"),
)


def _kind(value: Any) -> str:
    """What a JSON value is, in a word."""
    if value is None:
        return "null"
    return next((word for kind, word in _KINDS if isinstance(value, kind)), "a value")

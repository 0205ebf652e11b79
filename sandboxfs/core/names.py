"""One escaped, unambiguous form for names, and for any client text in a log line.

A file name may hold anything but ``/`` and NUL: a newline that forges a second
line in a listing, bytes that are not UTF-8 (which would otherwise all look like
U+FFFD), a bidirectional override.  :func:`quote_name` shows such a name in
double quotes with C-style escapes, the way git quotes paths; every other name
is shown as it is.  A name that holds a ``"`` or a ``\\`` is quoted too, so a
shown name that starts with ``"`` is always a quoted one: the form is
unambiguous, and :func:`unquote_name` turns it back into the exact name.

Escapes: ``\\\\`` ``\\"`` ``\\n`` ``\\t`` ``\\r`` ``\\a`` ``\\b`` ``\\f`` ``\\v``;
``\\xHH`` is one raw byte (a control character, or a byte that is not UTF-8);
``\\uHHHH`` is one Unicode code point (C1 controls, line separators,
bidirectional controls).  A quoted form stands for bytes, not characters: any
byte may be escaped, so ``"se\\xc3\\xb1as"`` and ``"se\\u00f1as"`` are both
``señas``; unquoting always gives the one canonical string for those bytes.
"""

from __future__ import annotations

import os
import re
from typing import Final

_ESCAPES: Final = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\v": "\\v",
}
_UNESCAPES: Final = {value[1]: key for key, value in _ESCAPES.items()}
#: What makes a name need quoting: C0/C1 controls, DEL, quote, backslash, bytes that
#: were not UTF-8 (surrogate escapes), line and paragraph separators, bidi controls.
_NEEDS_QUOTING: Final = re.compile(
    '[\x00-\x1f\x7f-\x9f"\\\\\ud800-\udfff\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]'
)
_ESCAPE_SEQUENCE: Final = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|["\\ntrabfv])')


def _plain(text: str) -> bool:
    """Whether ``text`` certainly needs no quoting: printable (no control, format or
    separator character, no surrogate), no quote, no backslash.  A cheap check in C;
    what fails it is looked at with :data:`_NEEDS_QUOTING`."""
    return text.isprintable() and '"' not in text and "\\" not in text


def needs_quoting(name: str) -> bool:
    return not _plain(name) and _NEEDS_QUOTING.search(name) is not None


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def quote_name(name: str) -> str:
    """``name`` as it should be shown: as it is, or quoted with escapes."""
    if _plain(name) or _NEEDS_QUOTING.search(name) is None:
        return name
    return '"' + _NEEDS_QUOTING.sub(_escape, name) + '"'


def quote_names(names: list[str]) -> list[str]:
    """:func:`quote_name` of each name; one check in C when none needs it (the usual
    case: a whole directory's names at once)."""
    joined = "/".join(names)  # "/" is in no name, and needs no quoting
    if _plain(joined):
        return names
    return [quote_name(name) for name in names]


def quote_path(path: str) -> str:
    """A path shown with each component that needs it quoted."""
    if _plain(path) or _NEEDS_QUOTING.search(path) is None:
        return path
    return "/".join(quote_name(part) for part in path.split("/"))


def _escaped_bytes(match: re.Match[str]) -> bytes:
    """The bytes one escape sequence stands for."""
    body = match.group(1)
    if body[0] == "x":
        return bytes((int(body[1:], 16),))
    if body[0] == "u":
        # A surrogate is not a code point of its own: a raw byte is written \\xHH.
        return chr(int(body[1:], 16)).encode("utf-8")
    return _UNESCAPES[body].encode("ascii")


def unquote_name(shown: str) -> str | None:
    """The exact name a quoted form stands for, or None if ``shown`` is not one
    (then it is a plain name).  A quoted form that would hold ``/`` or NUL, or
    that escapes a surrogate, is not one.

    Guarantee: the name is canonical, the one string for its bytes.  Escapes
    and literal characters give bytes, and those are decoded as names read from
    the disk are (:func:`os.fsdecode`: valid UTF-8 decoded, any other byte a
    surrogate escape), so ``"se\\xc3\\xb1as"`` is ``señas``, never a string of
    its own.  The policy judges this string and the kernel is given its bytes:
    the two always agree."""
    if len(shown) < 2 or shown[0] != '"' or shown[-1] != '"':
        return None
    body = shown[1:-1]
    # Every backslash must start a known escape, and quotes inside must be escaped.
    rest = _ESCAPE_SEQUENCE.sub("", body)
    if "\\" in rest or '"' in rest:
        return None
    raw = bytearray()
    position = 0
    try:
        for match in _ESCAPE_SEQUENCE.finditer(body):
            raw += os.fsencode(body[position : match.start()])
            raw += _escaped_bytes(match)
            position = match.end()
        raw += os.fsencode(body[position:])
    except UnicodeEncodeError:  # a surrogate, escaped or not, that is no raw byte
        return None
    if b"/" in raw or b"\0" in raw:
        return None
    return os.fsdecode(bytes(raw))


def unquote_path(path: str) -> str:
    """``path`` with every component in the quoted form replaced by the exact name."""
    if '"' not in path:
        return path
    parts = path.split("/")
    return "/".join(name if (name := unquote_name(part)) is not None else part for part in parts)


def structured_name(name: str) -> str:
    """A name for structured content: exact when JSON can carry it (any valid
    Unicode, control characters included, which JSON escapes), the quoted form
    when it holds bytes that are not UTF-8 (which would otherwise all become
    U+FFFD and look alike)."""
    if name.isascii() or _SURROGATES.search(name) is None:
        return name
    return quote_name(name)


def structured_names(names: list[str]) -> list[str]:
    """:func:`structured_name` of each name, with one check when all are exact."""
    joined = "/".join(names)
    if joined.isascii() or _SURROGATES.search(joined) is None:
        return names
    return [structured_name(name) for name in names]


def structured_path(path: str) -> str:
    """:func:`structured_name` for each component of a path."""
    if path.isascii() or _SURROGATES.search(path) is None:
        return path
    return quote_path(path)


_SURROGATES: Final = re.compile("[\ud800-\udfff]")
#: Characters checked at a time by :func:`has_lone_surrogate`.
_CHECKED_AT_ONCE: Final = 1 << 20


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (which UTF-8 cannot carry: a byte of a
    name that was not UTF-8, or a client's unpaired escape).  Free for ASCII; other
    text is encoded a slice at a time (several times faster than a regex scan, and
    never a copy of the whole)."""
    if text.isascii():
        return False
    if len(text) < 4096:
        return _SURROGATES.search(text) is not None
    for start in range(0, len(text), _CHECKED_AT_ONCE):
        try:
            text[start : start + _CHECKED_AT_ONCE].encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False

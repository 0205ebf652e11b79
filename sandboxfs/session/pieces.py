"""A message as JSON in pieces, so that a big answer is never copied whole.

:func:`encode_pieces` gives the same JSON text as :func:`jsonrpc.encode`, cut
into pieces whose concatenation is that text: the message with each big string
(a file's text, a media block's base64) replaced by a marker is encoded once,
and each marker is replaced by the string's JSON escape, made a slice at a time.
A 30 MiB read then holds its text and the piece being written, instead of the
encoder's growing buffer, the bytes copied out of it and the line joined for the
transport (about five times the file, measured), and whatever the text's shape
(a text of control characters escapes to six times its size, never held whole).

Markers carry a random per-process nonce and a NUL, which JSON escapes; a
message with a string that holds a marker anyway is encoded whole, so no string
a client or a file holds can be taken for one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any, Final

import pydantic_core

from sandboxfs.session.jsonrpc import clean_json_text, encode

#: Strings at least this long are written in pieces.
SPLICE_AT: Final = 1 << 20
#: Characters escaped at a time: a piece is at most six times this (control
#: characters), and a piece being written is held in about three copies (the
#: escape, the piece, the transport's frame).
_SLICE: Final = 1 << 18
_NONCE: Final = secrets.token_hex(16)
_MARKER_TEXT: Final = f"\0sandboxfs-piece-{_NONCE}-"
#: A marker as JSON spells it, with the index of the string it stands for.
_MARKER: Final = re.compile(rb'"\\u0000sandboxfs-piece-' + _NONCE.encode() + rb'-(\d+)"')


def _has_big_content(message: dict[str, Any]) -> bool:
    """Whether a tool result carries a content block with a big string (every big
    answer does: the text, or the media, is always in a content block)."""
    result = message.get("result")
    if not isinstance(result, dict):
        return False
    content = result.get("content")
    if not isinstance(content, list):
        return False
    for block in content:
        if isinstance(block, dict):
            for value in (*block.values(), *(block.get("resource") or {}).values()):
                if isinstance(value, str | bytes) and len(value) >= SPLICE_AT:
                    return True
    return False


class _Forged(Exception):
    """A string of the message holds a marker's text."""


def _hollowed(value: Any, big: list[str | bytes]) -> Any:
    """``value`` with each big string replaced by a marker (appended to ``big``).
    Raises _Forged if a string left in place holds a marker's text."""
    if isinstance(value, bytes) and len(value) >= SPLICE_AT:
        big.append(value)
        return f"{_MARKER_TEXT}{len(big) - 1}"
    if isinstance(value, str):
        if len(value) < SPLICE_AT:
            if _MARKER_TEXT in value:
                raise _Forged
            return value
        big.append(value)
        return f"{_MARKER_TEXT}{len(big) - 1}"
    if isinstance(value, dict):
        return {key: _hollowed(item, big) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_hollowed(item, big) for item in value]
    return value


#: What base64 is made of: bytes JSON carries in a string as they are.
_BASE64: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _escaped_bytes(data: bytes) -> Iterator[bytes]:
    """Base64 media as it is (one piece, no copy); anything else as its UTF-8 text."""
    if not data.translate(None, _BASE64):
        yield data
    else:
        yield from _escaped(data.decode("utf-8", "replace"))


def _escaped(text: str) -> Iterator[bytes]:
    """The JSON escape of ``text`` without its quotes, a slice at a time.  A slice
    never ends inside a run of surrogates, so cleaning a slice is cleaning the
    whole (the bytes of one undecodable sequence stay together)."""
    start, end = 0, len(text)
    while start < end:
        cut = min(start + _SLICE, end)
        while cut < end and "\ud800" <= text[cut] <= "\udfff":
            cut += 1
        part = text[start:cut]
        try:
            encoded = pydantic_core.to_json(part)
        except pydantic_core.PydanticSerializationError:
            encoded = pydantic_core.to_json(clean_json_text(part))
        piece = encoded[1:-1]
        del part, encoded  # not held while the piece is written
        yield piece
        start = cut


def encode_pieces(message: dict[str, Any]) -> bytes | Iterator[bytes]:
    """``encode(message)``: as bytes for a message without a big string, else as
    pieces to write one after another, each made when it is taken (so what is held
    is the message and the piece being written).  Never raises, as :func:`encode`."""
    if not _has_big_content(message):
        return encode(message)
    big: list[str | bytes] = []
    try:
        skeleton = encode(_hollowed(message, big))
    except _Forged:
        return encode(message)
    return _pieces(skeleton, big)


def _pieces(skeleton: bytes, big: list[str | bytes]) -> Iterator[bytes]:
    """The skeleton with each marker replaced by its string's escape, made a slice at
    a time.  A string there twice (a tool's text and structuredContent.content are one
    string) is escaped again for its second use, never kept: what is held while an
    answer is written is its strings and one slice's escape, however they escape (a
    control character takes six bytes), so an answer a client is slow to take pins
    no more than its own text."""
    at = 0
    for marker in _MARKER.finditer(skeleton):
        yield skeleton[at : marker.start() + 1]  # up to and with the opening quote
        text = big[int(marker.group(1))]
        yield from _escaped_bytes(text) if isinstance(text, bytes) else _escaped(text)
        at = marker.end() - 1  # from the closing quote on
    yield skeleton[at:]

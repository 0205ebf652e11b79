"""A big answer written in pieces is the same JSON text as the whole, byte for byte."""

from __future__ import annotations

import base64
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxfs.session import pieces
from sandboxfs.session.jsonrpc import encode
from sandboxfs.session.pieces import SPLICE_AT
from sandboxfs.session.pieces import encode_pieces as _encode_pieces


def encode_pieces(message: dict[str, Any]) -> list[bytes]:
    """The pieces, taken one by one (one piece: the message's bytes)."""
    made = _encode_pieces(message)
    return [made] if isinstance(made, bytes) else list(made)


def _answer(text: str, structured: Any = None) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    return {"jsonrpc": "2.0", "id": 7, "result": result}


def test_a_small_answer_is_one_piece() -> None:
    message = _answer("small")
    assert _encode_pieces(message) == encode(message)


def test_a_big_answer_is_cut_and_equals_the_whole() -> None:
    text = ('line "quoted" \\ back\ttab é ✓\n' * (SPLICE_AT // 8))[: 3 * SPLICE_AT + 5]
    message = _answer(text, {"content": text, "revision": "sha256:0", "n": 1})
    cut = encode_pieces(message)
    assert len(cut) > 4  # the text twice, several slices each
    second = cut.index(cut[1], 2)
    assert cut[1] == cut[second] and cut[1] is not cut[second]  # escaped again, not kept
    assert max(map(len, cut)) < 2 * SPLICE_AT  # no piece holds the whole text
    assert b"".join(cut) == encode(message)


def test_what_is_held_while_pieces_are_written_is_one_slices_escape() -> None:
    """A text of control characters escapes to six times its size: writing it (twice,
    as text and structuredContent) holds one slice's escape at a time, never the
    whole escape (which an answer a client does not read would otherwise pin)."""
    text = "\x01" * (16 * SPLICE_AT)
    message = _answer(text, {"content": text})
    escaped = 6 * len(text)
    tracemalloc.start()
    try:
        written = sum(len(piece) for piece in _encode_pieces(message))  # type: ignore[union-attr]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written > 2 * escaped  # both copies were written ...
    assert peak < escaped // 3, peak  # ... holding about one slice's escape at a time


def test_undecodable_bytes_across_a_slice_boundary_are_cleaned_as_in_the_whole() -> None:
    # \udce2\udc82 is a truncated UTF-8 sequence: as a whole it becomes one U+FFFD.
    text = "a" * (SPLICE_AT - 1) + "\udce2\udc82" + "b" * SPLICE_AT
    message = _answer(text, {"content": text})
    assert b"".join(encode_pieces(message)) == encode(message)
    assert encode(message).count("\ufffd".encode()) == 2  # once in each copy


def test_a_marker_in_a_file_is_only_text() -> None:
    forged = f"{pieces._MARKER_TEXT}0"  # what a file would need to hold, nonce included
    text = forged + "x" * SPLICE_AT
    message = _answer(text, {"content": forged, "other": text})
    assert b"".join(encode_pieces(message)) == encode(message)


@settings(max_examples=25, deadline=None)
@given(
    st.text(min_size=0, max_size=40),
    st.integers(min_value=0, max_value=3),
    st.sampled_from(["text", "data"]),
)
def test_any_big_text_round_trips(sample: str, extra: int, key: str) -> None:
    big = (sample or "z") * (SPLICE_AT // max(1, len(sample or "z")) + 1) + "q" * extra
    message = {
        "jsonrpc": "2.0",
        "id": "r",
        "result": {"content": [{"type": "text", key: big}], "structuredContent": {"s": sample}},
    }
    assert b"".join(encode_pieces(message)) == encode(message)


def test_big_base64_media_is_written_as_it_is() -> None:
    data = base64.b64encode(bytes(range(256)) * (SPLICE_AT // 128))
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "image", "data": data, "mimeType": "image/png"}]},
    }
    cut = encode_pieces(message)
    assert any(piece is data for piece in cut)  # not copied
    assert b"".join(cut) == encode(message)
    # Bytes that are not base64 are never written raw: they go as their text, escaped.
    odd = b'"\\\n' * SPLICE_AT
    message["result"]["content"][0]["data"] = odd
    assert b"".join(encode_pieces(message)) == encode(message)

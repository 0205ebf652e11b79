"""What the server takes from a parse helper (issue 28): the helper parses planted files
and may say anything, so for any bytes the server's reader gives frames within their
bounds or WireError, never anything else; what it keeps is cut from its own copy of
the file (a span's name, line number and line shown), whatever spans it was given."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxfs.tools import parsewire
from sandboxfs.tools.codefacts import (
    DEFINITIONS_MAX,
    NAME_MAX,
    REFERENCES_MAX,
    facts_from_spans,
    shown_line,
)
from sandboxfs.tools.codeparse import extract, parse_source
from sandboxfs.tools.parsewire import AnswerReader, WireError, decode_extracted, encode_extracted


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=4096), st.integers(1, 64), st.integers(1, 7))
def test_any_bytes_give_bounded_frames_or_wire_error(data: bytes, batch: int, cut: int) -> None:
    reader = AnswerReader(batch)
    try:
        frames = reader.feed(data[:cut]) + reader.feed(data[cut:])
    except WireError:
        return
    for index, status, payload in frames:
        assert status <= parsewire.DONE
        assert (index == batch and not payload) if status == parsewire.DONE else index < batch
        assert status == parsewire.PARSED or not payload
        if status == parsewire.PARSED:
            try:
                spans, names = decode_extracted(payload)
            except WireError:
                continue
            assert len(spans) <= DEFINITIONS_MAX and len(names) <= REFERENCES_MAX


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2048))
def test_any_payload_decodes_within_bounds_or_is_refused(payload: bytes) -> None:
    try:
        spans, names = decode_extracted(payload)
    except WireError:
        return
    assert len(spans) <= DEFINITIONS_MAX and len(names) <= REFERENCES_MAX
    assert all(isinstance(n, str) and isinstance(c, int) for n, c in names.items())


def test_counts_past_their_bounds_are_refused_before_anything_is_read() -> None:
    for spans, names in ((DEFINITIONS_MAX + 1, 0), (0, REFERENCES_MAX + 1), (2**32 - 1, 0)):
        with pytest.raises(WireError):
            decode_extracted(struct.pack("<II", spans, names))
    with pytest.raises(WireError):  # a frame bigger than any payload can be
        AnswerReader(1).feed(struct.pack("<IBI", 0, parsewire.PARSED, parsewire.PAYLOAD_MAX + 1))
    with pytest.raises(WireError):  # a status for a file the batch does not have
        AnswerReader(1).feed(struct.pack("<IBI", 1, parsewire.LATE, 0))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=50),
    st.dictionaries(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=300),
        st.integers(0, 2**32 - 1),
        max_size=20,
    ),
)
def test_what_a_helper_says_round_trips(
    spans: list[tuple[int, int]], names: dict[str, int]
) -> None:
    kept = {n: c for n, c in names.items() if "\n" not in n}
    decoded_spans, decoded_names = decode_extracted(encode_extracted(spans, names))
    assert decoded_spans == spans
    assert decoded_names == kept


SOURCE = b"import os\n\ndef first(a):\n    return os.path(a)\n\nclass Second:\n    pass\n"


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-5, 120), st.integers(-5, 400)), max_size=40),
    st.dictionaries(st.text(max_size=300), st.integers(-3, 10), max_size=40),
)
def test_the_server_cuts_definitions_from_its_own_bytes(
    spans: list[tuple[int, int]], names: dict[str, int]
) -> None:
    """Whatever spans a helper sends, every definition kept is a span of the real file:
    its name is those bytes, its line number their line, its text that line."""
    parsed = facts_from_spans(SOURCE, spans, names)
    lines = SOURCE.split(b"\n")
    for d in parsed.definitions:
        assert 1 <= d.line <= len(lines)
        assert d.text == shown_line(lines[d.line - 1])
        assert d.name and d.name.encode() in lines[d.line - 1]
    assert all(0 < len(n) <= NAME_MAX and c >= 1 for n, c in parsed.references.items())
    assert [(d.line, d.name) for d in parsed.definitions] == sorted(
        (d.line, d.name) for d in parsed.definitions
    )


def test_a_parse_through_the_wire_is_the_parse() -> None:
    found = extract("python", SOURCE, float("inf"))
    spans, names = decode_extracted(encode_extracted(found.spans, found.references))
    assert facts_from_spans(SOURCE, spans, names) == parse_source("python", SOURCE, float("inf"))
    assert [d.name for d in facts_from_spans(SOURCE, spans, names).definitions] == [
        "first",
        "Second",
    ]

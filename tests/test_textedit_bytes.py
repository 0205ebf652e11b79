"""The bytes fast path of edit_file gives exactly what the text rules give."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandboxfs.tools.textedit import Edit, EditError, apply_edits, exact_edits_on_bytes

PIECES = [b"a", b"b", b"\n", b"\r\n", b" ", "é".encode(), b"\xc3", b"\xa9", b"\xff", b"ab\n"]
FILES = st.lists(st.sampled_from(PIECES), max_size=30).map(b"".join)
TEXTS = st.lists(
    st.sampled_from(["a", "b", "\n", "\r\n", " ", "é", "\udca9", "\udcc3", "ab\n"]), max_size=6
).map("".join)
EDITS = st.lists(st.builds(Edit, TEXTS, TEXTS), min_size=1, max_size=3)


@settings(max_examples=2000)
@given(FILES, EDITS, st.booleans(), st.booleans())
# Found by this test: removing "é" joined the stray bytes around it into a new "é".
@example(b"\xc3\xc3\xa9\xa9", [Edit("é", ""), Edit("é", "")], False, False)
def test_fast_path_agrees_with_the_text_rules(
    data: bytes, edits: list[Edit], strict: bool, replace_all: bool
) -> None:
    fast = exact_edits_on_bytes(data, edits, strict=strict, replace_all=replace_all)
    try:
        text = apply_edits(
            data.decode("utf-8", "surrogateescape"), edits, strict=strict, replace_all=replace_all
        )
    except EditError:
        assert fast is None  # the fast path never succeeds where the rules fail
        return
    if fast is not None:
        assert fast == text.encode("utf-8", "surrogateescape")


def test_a_needle_never_matches_inside_a_character() -> None:
    # "é" is C3 A9: an undecodable A9 in oldText must not match its second byte.
    assert exact_edits_on_bytes("é".encode(), [Edit("\udca9", "x")]) is None


def test_exact_edits_take_the_fast_path() -> None:
    assert exact_edits_on_bytes(b"x a\r\ny a\r\n", [Edit("a\ny", "b\nz")]) == b"x b\r\nz a\r\n"
    assert exact_edits_on_bytes(b"a a", [Edit("a", "b")], replace_all=True) == b"b b"
    assert exact_edits_on_bytes(b"  a", [Edit("a ", "b")]) is None  # tolerant rules: text path

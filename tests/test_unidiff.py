"""Unified diffs: the windowed diff of a large text equals the diff of all its lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxfs.tools.unidiff import _lines, render_diff, shown, unified_diff

# Few distinct lines, so that texts repeat themselves and the matcher has choices.
PLAIN = [b"a\n", b"b\n", b"\n", b"c", b"dd\n", "é\n".encode()]
PLAIN_TEXTS = st.lists(st.sampled_from(PLAIN), max_size=40).map(b"".join)
TEXTS = st.lists(st.sampled_from([*PLAIN, b"a\r\n", b"\xff\n", b"\xc3"]), max_size=40).map(b"".join)


def _patched(text: str, diff: str) -> str:
    """``text`` with the hunks of ``diff`` applied (a small ``patch``)."""
    lines = _lines(text)
    out: list[str] = []
    used = 0
    last = ""
    body = diff.split("\n")[4:-1]
    for row in body:
        if row == "\\ No newline at end of file":
            if last != "-":  # it ends the line just written
                out[-1] = out[-1].removesuffix("\n")
            continue
        last = row[0]
        if row.startswith("@@"):
            old_start = int(row.split()[1][1:].split(",")[0])
            old_count = int(row.split()[1].split(",")[1])
            keep = old_start - 1 if old_count else old_start
            out += lines[used:keep]
            used = keep
        elif row[0] in " -":
            assert lines[used].removesuffix("\n") == row[1:], (lines[used], row)
            used += 1
            if row[0] == " ":
                out.append(row[1:] + "\n")
        else:
            out.append(row[1:] + "\n")
    return "".join(out + lines[used:])


@settings(max_examples=500)
@given(PLAIN_TEXTS, PLAIN_TEXTS, PLAIN_TEXTS, PLAIN_TEXTS)
def test_windowed_diff_equals_whole_diff(head: bytes, old: bytes, new: bytes, tail: bytes) -> None:
    before, after = head + old + tail, head + new + tail
    whole = render_diff(_lines(before.decode()), _lines(after.decode()), "f")
    assert unified_diff(before, after, "f") == whole


@settings(max_examples=500)
@given(TEXTS, TEXTS, TEXTS, TEXTS)
def test_displayed_diff_turns_one_display_into_the_other(
    head: bytes, old: bytes, new: bytes, tail: bytes
) -> None:
    """Shown without CRLF and undecodable bytes, the diff is still exact, though
    among equally short diffs it may pick another."""
    before, after = head + old + tail, head + new + tail
    diff = unified_diff(before, after, "f")
    assert _patched(shown(before), diff) == shown(after)


@given(PLAIN_TEXTS, PLAIN_TEXTS)
def test_any_two_texts(before: bytes, after: bytes) -> None:
    whole = render_diff(_lines(before.decode()), _lines(after.decode()), "f")
    assert unified_diff(before, after, "f") == whole


def test_one_change_deep_in_a_large_text() -> None:
    lines = [f"line {i}\n".encode() for i in range(200_000)]
    before = b"".join(lines)
    lines[150_000] = b"changed\n"
    diff = unified_diff(before, b"".join(lines), "big.txt")
    assert diff.splitlines()[4:] == [
        "@@ -149997,9 +149997,9 @@",
        *(f" line {i}" for i in range(149_996, 150_000)),
        "-line 150000",
        "+changed",
        *(f" line {i}" for i in range(150_001, 150_005)),
    ]


def test_no_change_no_hunk() -> None:
    assert unified_diff(b"same\n", b"same\n", "f").count("@@") == 0

"""Git-style unified diffs of two texts, in the layout the reference server prints.

    Index: notes.md
    ===================================================================
    --- notes.md<TAB>original
    +++ notes.md<TAB>modified
    @@ -1,3 +1,3 @@
     context
    -old
    +new

Four lines of context; hunks closer than eight lines merge; hunk headers
always carry both counts; a side whose last line has no newline gets
``\\ No newline at end of file``.  The common prefix and suffix are trimmed
before diffing, so one change in a large file costs time proportional to
the changed region, not the file.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Final

CONTEXT: Final = 4
_NO_NEWLINE: Final = "\\ No newline at end of file"
_Opcode = tuple[str, int, int, int, int]


def _opcodes(a: list[str], b: list[str]) -> list[_Opcode]:
    prefix = 0
    limit = min(len(a), len(b))
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    codes: list[_Opcode] = []
    if prefix:
        codes.append(("equal", 0, prefix, 0, prefix))
    middle_a, middle_b = a[prefix : len(a) - suffix], b[prefix : len(b) - suffix]
    matcher = difflib.SequenceMatcher(None, middle_a, middle_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        codes.append((tag, i1 + prefix, i2 + prefix, j1 + prefix, j2 + prefix))
    if suffix:
        codes.append(("equal", len(a) - suffix, len(a), len(b) - suffix, len(b)))
    return [c for c in codes if c[1] != c[2] or c[3] != c[4]]


def _grouped(codes: list[_Opcode], n: int) -> Iterator[list[_Opcode]]:
    """difflib's grouping (hunks with n lines of context) over precomputed opcodes."""
    if not codes or all(c[0] == "equal" for c in codes):
        return
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[_Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        start_a, start_b = i1, j1
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            start_a, start_b = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, start_a, i2, start_b, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, length: int) -> str:
    return f"{start + 1 if length else start},{length}"


def _emit(prefix: str, lines: list[str], lo: int, hi: int, out: list[str]) -> None:
    for k in range(lo, hi):
        line = lines[k]
        if line.endswith("\n"):
            out.append(prefix + line[:-1])
        else:
            out.append(prefix + line)
            out.append(_NO_NEWLINE)


def _lines(text: str) -> list[str]:
    """Split after each ``\n`` only (not at the other characters str.splitlines uses)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified_diff(old: str, new: str, name: str) -> str:
    """The diff from ``old`` to ``new`` (LF line endings), headed with ``name``."""
    a, b = _lines(old), _lines(new)
    out = [
        f"Index: {name}",
        "=" * 67,
        f"--- {name}\toriginal",
        f"+++ {name}\tmodified",
    ]
    for group in _grouped(_opcodes(a, b), CONTEXT):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                _emit(" ", a, a1, a2, out)
                continue
            _emit("-", a, a1, a2, out)
            _emit("+", b, b1, b2, out)
    return "\n".join(out) + "\n"


def fenced(diff: str) -> str:
    """Wrap ``diff`` in a ```diff fence longer than any backtick run inside it."""
    ticks = 3
    while "`" * ticks in diff:
        ticks += 1
    fence = "`" * ticks
    return f"{fence}diff\n{diff}{fence}\n\n"

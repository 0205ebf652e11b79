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
``\\ No newline at end of file``.  The common prefix and suffix are found
by comparing blocks of characters, and only the changed lines (with their
context) are split and diffed, so one change in a large file costs little
more than two memory comparisons of it.

Bounded whatever the file's shape: changed lines (with their context) that span
more than :data:`DIFF_REGION` bytes on either side (one edit in a 30 MiB line, a
replacement of most of a large file) are not decoded nor diffed; the diff says
which lines changed and how much, in one line after its header.  Splitting and
diffing them would cost many times the file in memory for a diff no one reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Final

CONTEXT: Final = 4
#: Most bytes of changed lines and their context (either side) a diff shows.
DIFF_REGION: Final = 4 * 1024 * 1024
#: Characters compared at once while looking for the common prefix and suffix.
_BLOCK: Final = 1 << 16
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


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    lo = 0
    while lo < limit:  # whole blocks first, compared in C
        hi = min(limit, lo + _BLOCK)
        if a[lo:hi] != b[lo:hi]:
            while hi - lo > 1:  # the first difference is in [lo, hi)
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        lo = hi
    return limit


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix of ``a`` and ``b``, at most ``limit``."""
    n = 0
    while n < limit:
        m = min(limit, n + _BLOCK)
        if a[len(a) - m : len(a) - n] != b[len(b) - m : len(b) - n]:
            while m - n > 1:  # the first difference from the end is in (n, m]
                mid = (n + m) // 2
                if a[len(a) - mid : len(a) - n] == b[len(b) - mid : len(b) - n]:
                    n = mid
                else:
                    m = mid
            return n
        n = m
    return limit


def _context_start(text: bytes, at: int, lines: int) -> int:
    """Start of the line ``lines`` lines above the one holding ``text[at]``."""
    start = text.rfind(b"\n", 0, at) + 1
    for _ in range(lines):
        if start == 0:
            break
        start = text.rfind(b"\n", 0, start - 1) + 1
    return start


def _context_end(text: bytes, at: int, lines: int) -> int:
    """End (after its newline) of the line ``lines`` lines below the one holding
    ``text[at]``, or the end of the text."""
    end = at
    for _ in range(lines + 1):
        if end >= len(text):
            return len(text)
        newline = text.find(b"\n", end)
        end = len(text) if newline < 0 else newline + 1
    return end


def shown(data: bytes) -> str:
    """File bytes as a diff shows them: UTF-8 (anything else as U+FFFD), LF endings."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n")


def unified_diff(old: bytes, new: bytes, name: str) -> str:
    """The diff from the file bytes ``old`` to ``new`` (as :func:`shown`), headed
    with ``name``.  Only the changed lines and their context are decoded."""
    prefix = _common_prefix(old, new, min(len(old), len(new)))
    suffix = _common_suffix(old, new, min(len(old), len(new)) - prefix)
    # Widen to whole lines plus the context: from the line holding the first change
    # to the one holding the first byte after it.  Both sides share the rest, and
    # line boundaries are character boundaries.
    start = _context_start(old, prefix, CONTEXT)
    old_end = _context_end(old, len(old) - suffix, CONTEXT)
    new_end = old_end - len(old) + len(new)
    skipped = old.count(b"\n", 0, start)
    if max(old_end, new_end) - start > DIFF_REGION:
        return _summary(old, new, name, (start, old_end, new_end), skipped)
    a = _lines(shown(old[start:old_end]))
    b = _lines(shown(new[start:new_end]))
    return render_diff(a, b, name, skipped)


def _header(name: str) -> list[str]:
    return [f"Index: {name}", "=" * 67, f"--- {name}\toriginal", f"+++ {name}\tmodified"]


def _summary(old: bytes, new: bytes, name: str, region: tuple[int, int, int], skipped: int) -> str:
    """A diff too large to show: its header and one line saying what changed (the
    lines of the region, counted, never split)."""
    start, old_end, new_end = region

    def span(data: bytes, end: int) -> str:
        lines = data.count(b"\n", start, end) + (end > start and data[end - 1] != 0x0A)
        first = skipped + 1
        return f"lines {first}-{skipped + lines}" if lines > 1 else f"line {first}"

    def size(n: int) -> str:
        return f"{n / (1024 * 1024):.1f} MiB"

    note = (
        f"[diff not shown: {span(old, old_end)} ({size(old_end - start)}) became "
        f"{span(new, new_end)} ({size(new_end - start)}), more than the "
        f"{DIFF_REGION // (1024 * 1024)} MiB a diff shows]"
    )
    return "\n".join([*_header(name), note]) + "\n"


def render_diff(a: list[str], b: list[str], name: str, skipped: int = 0) -> str:
    """The diff of two line lists that follow ``skipped`` identical lines."""
    out = _header(name)
    for group in _grouped(_opcodes(a, b), CONTEXT):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_range(skipped + i1, i2 - i1)} +{_range(skipped + j1, j2 - j1)} @@")
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

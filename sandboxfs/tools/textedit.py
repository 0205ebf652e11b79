"""The edit_file matcher: pure text in, text out.  No I/O.

Rules (the tool contract):

* Line endings never matter for matching.  Each edit's ``oldText`` and
  ``newText`` take the file's line ending (CRLF if most lines end in CRLF), and
  lines the edits do not touch keep their bytes exactly.
* An exact match is tried first (the first occurrence is replaced).  Failing
  that, a run of whole lines matches when each line is equal once leading and
  trailing whitespace are ignored; whitespace inside a line must match.  Then
  each replacement line takes the indentation of the line it replaces, plus
  whatever indentation it adds or removes relative to ``oldText``.
* Edits apply in order, each to the result of the previous ones; if any edit
  has no match, :class:`EditNotFound` says which and shows the closest lines,
  and nothing is applied.
* ``strict``: ``oldText`` must occur exactly once, byte for byte (CRLF
  included); nothing is normalized.  ``replace_all`` replaces every occurrence
  (at least one is required).

Invariant (see fuzz/fuzz_textedit.py): :func:`apply_edits` returns a string or
raises :class:`EditError`, never anything else.

Bounded whatever the input's shape: the whole-line match is one linear search (each
distinct line of oldText is one character, every other file line another), the
search for the closest lines of a miss does a bounded amount of work, and a miss
quotes at most :data:`_QUOTED_LINES` lines of at most :data:`_QUOTED_CHARS`
characters each: an oldText of millions of lines, or of one huge line, costs time
linear in the file and oldText, and an answer of a few KiB.

:func:`exact_edits_on_bytes` is the fast path for large files: when every edit is
an exact match it gives, without decoding the file, the bytes that
:func:`apply_edits` would (file text decoded with ``surrogateescape``).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

#: What JavaScript's String.prototype.trim() strips (the reference's notion of
#: whitespace), which differs from Python's str.strip().
WHITESPACE: Final = (
    " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
#: Lines of context quoted around the closest match in a no-match error.
_QUOTE_LINES: Final = 3
#: Lines compared when hunting for the closest match on a large file.
_CLOSEST_SCAN_LIMIT: Final = 200_000
#: Votes counted when hunting for the closest window (each a line of oldText equal to
#: a line of the file): the hunt is a hint, its work is bounded.
_CLOSEST_VOTES: Final = 1_000_000
#: Characters of a line compared by similarity when no line is equal.
_SIMILAR_CHARS: Final = 1000
#: Most lines, and most characters of each, a no-match message quotes.
_QUOTED_LINES: Final = 20
_QUOTED_CHARS: Final = 500


@final
@dataclass(frozen=True, slots=True)
class Edit:
    old: str
    new: str


class EditError(ValueError):
    """An edit cannot be applied; the message is meant for the agent."""


@final
class EditNotFound(EditError):
    """An edit's oldText matches nowhere (or, strictly, not exactly once)."""


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _line_ending(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf > text.count("\n") - crlf else "\n"


def _unit_width(indents: Sequence[str]) -> int:
    """Width of one indentation step among space indents: the gcd of their widths."""
    width = 0
    for indent in indents:
        width = math.gcd(width, len(indent))
    return width or 4


def _shifted(base: str, delta: int, unit: str) -> str:
    """``base`` indented ``delta`` units deeper (negative: shallower, clipped at zero)."""
    if delta >= 0:
        return base + unit * delta
    return base[: max(0, len(base) - len(unit) * -delta)]


def _reindent(
    file_lines: list[str], old_lines: list[str], new_lines: list[str], start: int
) -> list[str]:
    """Replacement lines for ``file_lines[start:start+len(old_lines)]``: each takes the
    indentation of the file line it replaces, shifted by however much deeper or
    shallower it is than the corresponding oldText line.  When the edit and the
    file indent with different characters, the shift is converted in indent units."""
    window = [line.rstrip("\r") for line in file_lines[start : start + len(old_lines)]]
    edit_indents = [_indent(x) for x in old_lines + new_lines]
    file_indents = [_indent(x) for x in window]
    edit_tabs = any("\t" in i for i in edit_indents)
    file_tabs = any("\t" in i for i in file_indents)
    edit_unit = 1 if edit_tabs else _unit_width([i for i in edit_indents if i])
    file_unit = "\t" if file_tabs else " " * _unit_width([i for i in file_indents if i])
    last_piece = len(file_lines) - 1
    crlf = _line_ending("\n".join(file_lines)) == "\r\n"
    result: list[str] = []
    for j, line in enumerate(new_lines):
        k = min(j, len(old_lines) - 1)
        if j == len(new_lines) - 1:  # ends like the last line it replaces
            ending = "\r" if file_lines[start + len(old_lines) - 1].endswith("\r") else ""
        elif start + k < last_piece:  # followed by a newline: end like the line it replaces
            ending = "\r" if file_lines[start + k].endswith("\r") else ""
        else:  # mapped onto the file's final piece, yet followed by a newline
            ending = "\r" if crlf else ""
        if not line.strip(WHITESPACE):
            result.append(line.strip(" \t") + ending)
            continue
        delta = len(_indent(line)) - len(_indent(old_lines[k]))
        if edit_tabs == file_tabs:
            indent = _shifted(file_indents[k], delta, "\t" if file_tabs else " ")
        else:
            indent = _shifted(file_indents[k], round(delta / edit_unit), file_unit)
        result.append(indent + line.lstrip(" \t") + ending)
    return result


def _match_lines(file_lines: list[str], old_lines: list[str]) -> int | None:
    """Index of the first window of whole lines equal to ``old_lines`` after trimming.

    One search in linear time: each distinct trimmed line of oldText becomes one
    character, every other line of the file the character U+0000, and the window is
    where the one string occurs in the other.  (A window-by-window comparison took
    time proportional to the file's lines times oldText's.)  An oldText with more
    distinct lines than there are such characters matches nowhere this way."""
    codes: dict[str, str] = {}
    for line in old_lines:
        trimmed = line.strip(WHITESPACE)
        if trimmed not in codes:
            number = len(codes) + 1
            if number >= 0xD800:  # no surrogate: the code points after them
                number += 0x800
            if number > 0x10FFFF:
                return None
            codes[trimmed] = chr(number)
    needle = "".join(codes[line.strip(WHITESPACE)] for line in old_lines)
    other = "\0"
    hay = "".join(codes.get(line.strip(WHITESPACE), other) for line in file_lines)
    at = hay.find(needle)
    return None if at < 0 else at


def _apply_one(text: str, edit: Edit) -> str | None:
    """``text`` with ``edit`` applied (tolerant rules), or None if it matches nowhere."""
    old_lf = edit.old.replace("\r\n", "\n")
    new_lf = edit.new.replace("\r\n", "\n")
    if "\n" in old_lf + new_lf:  # the file's own line ending first, then the other
        eol = _line_ending(text)
        styles = [eol, "\r\n" if eol == "\n" else "\n"]
    else:
        styles = ["\n"]  # no line ending to adapt
    for style in styles:
        old = old_lf.replace("\n", style)
        at = text.find(old)
        if at >= 0:
            return text[:at] + new_lf.replace("\n", style) + text[at + len(old) :]
    file_lines = text.split("\n")
    old_lines = old_lf.split("\n")
    start = _match_lines(file_lines, old_lines)
    if start is None:
        return None
    replacement = _reindent(file_lines, old_lines, new_lf.split("\n"), start)
    file_lines[start : start + len(old_lines)] = replacement
    return "\n".join(file_lines)


def _utf8(text: str) -> bytes | None:
    """``text`` as UTF-8, or None if it holds undecodable bytes (lone surrogates):
    only a valid UTF-8 needle is sure to match bytes at character boundaries."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _line_ending_of(data: bytes) -> bytes:
    crlf = data.count(b"\r\n")
    return b"\r\n" if crlf and crlf > data.count(b"\n") - crlf else b"\n"


def _exact_on_bytes(data: bytes, edit: Edit) -> bytes | None:
    """:func:`_apply_one`'s exact-match branch on bytes; None if it does not apply."""
    old = _utf8(edit.old.replace("\r\n", "\n"))
    new = _utf8(edit.new.replace("\r\n", "\n"))
    if old is None or new is None:
        return None
    if b"\n" in old + new:
        eol = _line_ending_of(data)
        styles = [eol, b"\r\n" if eol == b"\n" else b"\n"]
    else:
        styles = [b"\n"]
    for style in styles:
        needle = old.replace(b"\n", style)
        at = data.find(needle)
        if at >= 0:
            view = memoryview(data)
            return b"".join((view[:at], new.replace(b"\n", style), view[at + len(needle) :]))
    return None


def exact_edits_on_bytes(
    data: bytes, edits: Sequence[Edit], *, strict: bool = False, replace_all: bool = False
) -> bytes | None:
    """The edited bytes if every edit matches exactly (as :func:`apply_edits` would
    apply it), else None: then decode and use :func:`apply_edits`.

    Only on valid UTF-8: there a needle that is itself UTF-8 matches whole characters
    and an edit's seams join none.  Bytes that are not UTF-8 (stray lead or
    continuation bytes) could join across a seam into a character the text rules never
    see (``C3 [C3 A9] A9`` with ``é`` removed becomes ``é``), so they take the text path."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    for edit in edits:
        old = _utf8(edit.old)
        if old is None or old == b"":
            return None
        if strict or replace_all:
            count = data.count(old)
            if count == 0 or (count > 1 and not replace_all):
                return None
            new = _utf8(edit.new)
            if new is None:
                return None
            data = data.replace(old, new) if replace_all else data.replace(old, new, 1)
            continue
        edited = _exact_on_bytes(data, edit)
        if edited is None:
            return None
        data = edited
    return data


def _apply_strict(text: str, edit: Edit, *, replace_all: bool) -> str | None:
    count = text.count(edit.old)
    if count == 0 or (count > 1 and not replace_all):
        return None
    return text.replace(edit.old, edit.new) if replace_all else text.replace(edit.old, edit.new, 1)


def _cut(line: str) -> str:
    """A line as a message quotes it: at most :data:`_QUOTED_CHARS` characters."""
    if len(line) <= _QUOTED_CHARS:
        return line
    return f"{line[:_QUOTED_CHARS]}… ({len(line)} characters)"


def _quote(line: str) -> str:
    if len(line) <= _QUOTED_CHARS:
        return json.dumps(line, ensure_ascii=False)
    return f"{json.dumps(line[:_QUOTED_CHARS], ensure_ascii=False)}… ({len(line)} characters)"


def _closest(file_lines: list[str], old_lines: list[str]) -> tuple[int, int] | None:
    """(start, score) of the window most like ``old_lines``: most trimmed-equal lines,
    else the line most similar to oldText's first non-blank line."""
    wanted = [line.strip(WHITESPACE) for line in old_lines]
    stripped = [line.strip(WHITESPACE) for line in file_lines[:_CLOSEST_SCAN_LIMIT]]
    votes = _votes(stripped, wanted)
    if votes:
        start = max(votes, key=lambda s: (votes[s], -s))
        return start, votes[start]
    probe = next((w for w in wanted if w), "")
    if not probe:
        return None
    best = _most_similar(stripped, probe)
    if best is None:
        return None
    return max(0, best - wanted.index(probe)), 0


def _votes(stripped: list[str], wanted: list[str]) -> dict[int, int]:
    """For each start of a window, how many of its lines equal oldText's (trimmed),
    counting at most :data:`_CLOSEST_VOTES` equalities: a hint, at a bounded cost."""
    positions: dict[str, list[int]] = {}
    for index, line in enumerate(stripped):
        if line:
            positions.setdefault(line, []).append(index)
    votes: dict[int, int] = {}
    budget = _CLOSEST_VOTES
    for j, line in enumerate(wanted):
        found = positions.get(line, ())
        budget -= len(found)
        if budget < 0:
            break  # enough to point at the closest lines; more is work for nothing
        for index in found:
            start = index - j
            if 0 <= start <= len(stripped) - 1:
                votes[start] = votes.get(start, 0) + 1
    return votes


def _most_similar(stripped: list[str], probe: str) -> int | None:
    """The index of the line most similar to ``probe`` (ratio at least 0.5), comparing
    the first :data:`_SIMILAR_CHARS` characters of each; None if none is."""
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(probe[:_SIMILAR_CHARS])
    best: tuple[float, int] | None = None
    for index, line in enumerate(stripped):
        if not line:
            continue
        matcher.set_seq1(line[:_SIMILAR_CHARS])
        if matcher.real_quick_ratio() < 0.5 or matcher.quick_ratio() < 0.5:
            continue
        ratio = matcher.ratio()
        if ratio >= 0.5 and (best is None or ratio > best[0]):
            best = (ratio, index)
    return None if best is None else best[1]


def describe_miss(text: str, edit: Edit, number: int, total: int, *, strict: bool) -> str:
    """The no-match message: which edit, the closest lines with numbers, and the first
    line that differs, JSON-quoted so tabs and trailing spaces show."""
    head = f"Could not find a match for edit {number} of {total}; no edits were applied."
    if strict:
        count = text.count(edit.old) if edit.old else 0
        if count > 1:
            return (
                f"{head} In strict mode oldText must occur exactly once, but it occurs "
                f"{count} times; add surrounding lines to make it unique, or set replaceAll."
            )
    old_lf = edit.old.replace("\r\n", "\n")
    old_lines = old_lf.split("\n")
    preview = "\n".join(f"  {_cut(line)}" for line in old_lines[:5])
    if len(old_lines) > 5:
        preview += f"\n  ... ({len(old_lines) - 5} more lines)"
    parts = [head, "oldText:", preview]
    file_lines = text.replace("\r\n", "\n").split("\n")
    found = _closest(file_lines, old_lines)
    if found is None:
        parts.append("No similar lines were found in the file.")
        return "\n".join(parts)
    start, _ = found
    lo = max(0, start - 1)
    hi = min(len(file_lines), start + len(old_lines) + 1, lo + len(old_lines) + _QUOTE_LINES + 2)
    hi = min(hi, lo + _QUOTED_LINES)
    width = len(str(hi))
    parts.append(f"Closest lines in the file (lines {lo + 1}-{hi}):")
    parts.extend(f"{str(n + 1).rjust(width)}| {_cut(file_lines[n])}" for n in range(lo, hi))
    for j, wanted in enumerate(old_lines):
        index = start + j
        have = file_lines[index] if index < len(file_lines) else None
        if have is None:
            parts.append(
                f"First difference: oldText line {j + 1} is {_quote(wanted)}, "
                "but the file ends before it."
            )
            break
        if have != wanted:
            parts.append(
                f"First difference: file line {index + 1} is {_quote(have)}, "
                f"oldText line {j + 1} is {_quote(wanted)}."
            )
            break
    return "\n".join(parts)


def apply_edits(
    text: str, edits: Sequence[Edit], *, strict: bool = False, replace_all: bool = False
) -> str:
    """Apply every edit in order, or none: raises EditNotFound naming the failing edit."""
    current = text
    for number, edit in enumerate(edits, start=1):
        if edit.old == "":
            raise EditError(
                f"Edit {number} of {len(edits)} has an empty oldText; nothing to match."
            )
        if strict or replace_all:
            result = _apply_strict(current, edit, replace_all=replace_all)
        else:
            result = _apply_one(current, edit)
        if result is None:
            raise EditNotFound(describe_miss(current, edit, number, len(edits), strict=strict))
        current = result
    return current

"""Unified diffs (what ``git diff``, ``diff -u`` and most agents write): parsed into
per-file patches, and hunks placed in a file's text.

Parsing accepts git's headers (``diff --git``, ``new file mode``, ``deleted file
mode``, ``rename from``/``rename to``, ``index``, mode and similarity lines, quoted
names) and plain ``---``/``+++`` pairs; ``/dev/null`` stands for a file created or
deleted; ``a/`` and ``b/`` prefixes are taken off when both names carry them (or
after ``diff --git``).  Binary patches are refused.  Every problem names the line
of the patch it is on.

Placement: a hunk's old lines (context and removals) must be found exactly (line
endings aside) at the line the hunk states, shifted by what the hunks before it
added or removed, or else at most ``max_offset`` lines away (the nearest place
first); hunks apply in order and never overlap.  Inserted lines take the file's
line ending; ``\\ No newline at end of file`` is honoured on both sides.  A hunk
that cannot be placed is described with the closest lines of the file, as
``edit_file`` describes a miss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.tools.textedit import Edit, describe_miss

_HUNK: Final = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_OCTAL: Final = re.compile(r"\\([0-7]{3})|\\(.)")
_GIT_ESCAPES: Final = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "a": "\a", "b": "\b"}


class PatchError(ValueError):
    """The patch cannot be used; the message says where and why."""


@final
@dataclass(slots=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    #: (tag, text) with tag " ", "-" or "+"; text without its line ending.
    lines: list[tuple[str, str]] = field(default_factory=list)
    #: The old (new) side's last line has no newline.
    old_open: bool = False
    new_open: bool = False
    #: The patch line the hunk starts on (for messages).
    where: int = 0

    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@final
@dataclass(slots=True)
class FilePatch:
    """One file's part of a patch: ``old`` None for a creation, ``new`` None for a
    deletion, different names for a rename."""

    old: str | None
    new: str | None
    hunks: list[Hunk] = field(default_factory=list)
    where: int = 0

    @property
    def path(self) -> str:
        name = self.old if self.old is not None else self.new
        assert name is not None
        return name


def _unquote(name: str) -> str:
    """A name as git writes it: C-quoted (octal bytes, escapes) when it needs it."""
    if len(name) >= 2 and name[0] == '"' and name[-1] == '"':
        raw = bytearray()
        body = name[1:-1]
        position = 0
        for match in _OCTAL.finditer(body):
            raw += body[position : match.start()].encode("utf-8", "surrogateescape")
            if match.group(1):
                raw.append(int(match.group(1), 8))
            else:
                raw += _GIT_ESCAPES.get(match.group(2), match.group(2)).encode()
            position = match.end()
        raw += body[position:].encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", "surrogateescape")
    return name


def _header_name(value: str) -> str | None:
    """The name on a ``---``/``+++`` line (a timestamp after a tab is dropped)."""
    if not value.startswith('"'):
        value = value.split("\t", 1)[0]
    value = _unquote(value.rstrip("\r"))
    return None if value == "/dev/null" else value


def _strip(name: str | None, prefix: str, strip: bool) -> str | None:
    if name is not None and strip and name.startswith(prefix):
        return name[len(prefix) :]
    return name


def parse_patch(text: str) -> list[FilePatch]:
    """Every file of a unified diff, in order.  Raises PatchError."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    patches: list[FilePatch] = []
    i = 0
    git: dict[str, str] = {}
    while i < len(lines):
        line = lines[i].rstrip("\r")
        if line.startswith("diff --git "):
            git = {"diff": line}
            i += 1
            continue
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchError(f"line {i + 1}: binary patches are not supported")
        for key in ("rename from ", "rename to ", "new file mode", "deleted file mode"):
            if line.startswith(key):
                git[key.strip()] = _unquote(line[len(key) :])
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patch, i = _file(lines, i, git)
            patches.append(patch)
            git = {}
            continue
        if line.startswith("@@"):
            raise PatchError(f"line {i + 1}: a hunk before any '---'/'+++' file header")
        if git and "rename from" in git and "rename to" in git and _next_is_header(lines, i):
            patches.append(FilePatch(git["rename from"], git["rename to"], where=i + 1))
            git = {}
        i += 1
    if git and "rename from" in git and "rename to" in git:
        patches.append(FilePatch(git["rename from"], git["rename to"], where=len(lines)))
    if not patches:
        raise PatchError("the patch holds no file changes ('---'/'+++' headers and hunks)")
    return patches


def _next_is_header(lines: list[str], i: int) -> bool:
    """Whether the git section of a pure rename ends after line ``i``."""
    return i + 1 >= len(lines) or lines[i + 1].startswith("diff --git ")


def _file(lines: list[str], i: int, git: dict[str, str]) -> tuple[FilePatch, int]:
    start = i
    old = _header_name(lines[i][4:])
    new = _header_name(lines[i + 1][4:])
    strip = "diff" in git or (
        (old is None or old.startswith("a/")) and (new is None or new.startswith("b/"))
    )
    old, new = _strip(old, "a/", strip), _strip(new, "b/", strip)
    if "new file mode" in git:
        old = None
    if "deleted file mode" in git:
        new = None
    if "rename from" in git and "rename to" in git:
        old, new = git["rename from"], git["rename to"]
    if old is None and new is None:
        raise PatchError(f"line {i + 1}: both sides of a file are /dev/null")
    patch = FilePatch(old, new, where=start + 1)
    i += 2
    while i < len(lines) and lines[i].startswith("@@"):
        hunk, i = _hunk(lines, i)
        patch.hunks.append(hunk)
    return patch, i


def _hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    match = _HUNK.match(lines[i])
    if match is None:
        raise PatchError(f"line {i + 1}: a hunk header must read '@@ -START,COUNT +START,COUNT @@'")
    old_start, old_count, new_start, new_count = (
        int(match.group(1)),
        int(match.group(2) if match.group(2) is not None else 1),
        int(match.group(3)),
        int(match.group(4) if match.group(4) is not None else 1),
    )
    hunk = Hunk(old_start, old_count, new_start, new_count, where=i + 1)
    i += 1
    old_seen = new_seen = 0
    while i < len(lines) and (
        old_seen < old_count or new_seen < new_count or lines[i].startswith("\\")
    ):
        line = lines[i]
        tag, text = (line[0], line[1:]) if line else (" ", "")
        i += 1
        if tag == "\\":  # "\ No newline at end of file": about the line before it
            last = hunk.lines[-1][0] if hunk.lines else " "
            hunk.old_open = hunk.old_open or last in " -"
            hunk.new_open = hunk.new_open or last in " +"
            continue
        if tag not in " -+":
            raise PatchError(
                f"line {i}: a hunk line must start with ' ', '-' or '+' (the hunk at line "
                f"{hunk.where} promised more lines than it has)"
            )
        hunk.lines.append((tag, text.removesuffix("\r")))
        old_seen += tag != "+"
        new_seen += tag != "-"
        if old_seen > old_count or new_seen > new_count:
            raise PatchError(f"line {i}: the hunk at line {hunk.where} has more lines than it says")
    if old_seen < old_count or new_seen < new_count:
        raise PatchError(
            f"line {hunk.where}: the hunk ends early (it promised {old_count} old and "
            f"{new_count} new lines)"
        )
    return hunk, i


# -- placing hunks ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Line:
    text: str
    end: str  # "\n", "\r\n" or "" (the file's last line, without a newline)


def split_lines(text: str) -> list[Line]:
    """The lines of ``text`` with their endings (the last one may have none)."""
    pieces = text.split("\n")
    out = [
        Line(piece[:-1], "\r\n") if piece.endswith("\r") else Line(piece, "\n")
        for piece in pieces[:-1]
    ]
    if pieces[-1]:
        out.append(Line(pieces[-1], ""))
    return out


def join_lines(lines: list[Line]) -> str:
    return "".join(line.text + line.end for line in lines)


def _ending(lines: list[Line]) -> str:
    crlf = sum(1 for line in lines if line.end == "\r\n")
    return "\r\n" if crlf * 2 > len(lines) else "\n"


class HunkMiss(PatchError):
    """A hunk could not be placed."""


def apply_hunks(text: str, hunks: list[Hunk], name: str, max_offset: int) -> str:
    """``text`` with every hunk applied, in order, or HunkMiss naming the first that
    could not be placed (nothing is applied then)."""
    lines = split_lines(text)
    newline = _ending(lines)
    out: list[Line] = []
    done = 0  # lines of ``lines`` consumed
    shift = 0
    for number, hunk in enumerate(hunks, start=1):
        old = hunk.old_lines()
        stated = max(0, (hunk.old_start if not old else hunk.old_start - 1) + shift)
        at = _place(lines, old, stated, done, max_offset)
        if at is None:
            raise HunkMiss(_miss(text, hunk, number, len(hunks), name=name, limit=max_offset))
        out.extend(lines[done:at])
        kept = iter(lines[at : at + len(old)])
        made: list[Line] = []
        for tag, value in hunk.lines:
            if tag == " ":
                made.append(next(kept))
            elif tag == "-":
                next(kept)
            else:
                made.append(Line(value, newline))
        if made and hunk.new_open:
            made[-1] = Line(made[-1].text, "")
        elif made and made[-1].end == "" and hunk.old_open:
            made[-1] = Line(made[-1].text, newline)  # the new side gained its last newline
        out.extend(made)
        done = at + len(old)
        shift += len(made) - len(old)
    out.extend(lines[done:])
    return join_lines(out)


def _place(lines: list[Line], old: list[str], stated: int, floor: int, limit: int) -> int | None:
    """Where ``old`` is found, nearest to ``stated`` first, no further than ``limit``
    lines from it and not before ``floor``."""
    for distance in range(limit + 1):
        for at in (stated + distance, stated - distance) if distance else (stated,):
            if at < floor or at + len(old) > len(lines):
                continue
            if all(lines[at + j].text == old[j] for j in range(len(old))):
                return at
    return None


def _miss(text: str, hunk: Hunk, number: int, total: int, *, name: str, limit: int) -> str:
    old = "\n".join(hunk.old_lines())
    described = describe_miss(text, Edit(old, ""), number, total, strict=False)
    detail = described.split("\n", 1)[1] if "\n" in described else ""
    detail = detail.replace("oldText", "the hunk's old lines", 1).replace("oldText", "hunk")
    head = (
        f"Hunk {number} of {total} for {name} (patch line {hunk.where}, at line "
        f"{hunk.old_start}) does not match the file within {limit} lines of where it says; "
        "nothing was changed."
    )
    return f"{head}\n{detail}" if detail else head

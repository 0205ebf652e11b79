"""directory_tree's answer: the tree as 2-space-indented JSON, written as it is walked.

The text is what ``json.dumps(tree, indent=2, ensure_ascii=False)`` (or
pydantic-core's ``to_json(tree, indent=2)``) gives for the tree of
``{"name", "type"[, "children"][, "error"]}`` objects, byte for byte, but no
object per entry is ever built: a million-entry tree held about eight times its
answer in dictionaries before it was serialized.  Pieces are joined into chunks
as they accumulate, so what is held is the text itself and a bounded tail of
small strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, final

import pydantic_core

from sandboxfs.fs import ENTER, ENTRY, LEAVE, RUN, TOO_DEEP, UNREADABLE, Entry, Step, quote_names

#: Small strings joined into one chunk at a time.
_CHUNK: Final = 8192


def _json_string(text: str) -> str:
    """``text`` as a JSON string.  Printable text without a quote or a backslash
    needs no escape (JSON escapes only those and control characters; non-ASCII is
    written as it is)."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return pydantic_core.to_json(text).decode("utf-8")


class _Text:
    """Pieces of text, joined into chunks as they accumulate."""

    __slots__ = ("chunks", "pieces")

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.pieces: list[str] = []

    def add(self, piece: str) -> None:
        pieces = self.pieces
        pieces.append(piece)
        if len(pieces) >= _CHUNK:
            self.chunks.append("".join(pieces))
            pieces.clear()

    def value(self) -> str:
        self.chunks.append("".join(self.pieces))
        self.pieces.clear()
        return "".join(self.chunks)


@final
class _Level:
    """A directory whose entries are being written: their names as shown, the
    index of the next one, and the indentation of its objects."""

    __slots__ = ("at", "names", "pad")

    def __init__(self, names: list[str], pad: str) -> None:
        self.names = names
        self.at = 0
        self.pad = pad


@final
class _Writer:
    """Writes the text step by step; ``head`` is the start of the object of the
    directory met last (its type onwards not written yet)."""

    __slots__ = ("add", "error", "head", "levels", "out")

    def __init__(self, error: Callable[[BaseException], str]) -> None:
        self.out = _Text()
        self.add = self.out.add
        self.error = error
        self.levels: list[_Level] = []
        self.head = ""

    def enter(self, step: Step[Any, Entry]) -> None:
        names = quote_names([entry.name for entry in step.entries])
        levels, add = self.levels, self.add
        if not levels:
            add("[\n" if names else "[")
            levels.append(_Level(names, "  "))
            return
        pad = levels[-1].pad
        if not names:
            add(f'{self.head}"directory",\n{pad}  "children": []\n{pad}}}')
        else:
            add(f'{self.head}"directory",\n{pad}  "children": [\n')
        levels.append(_Level(names, pad + "    "))

    def leave(self, step: Step[Any, Entry]) -> None:
        level = self.levels.pop()
        if level.names:
            pad = self.levels[-1].pad
            self.add(f"\n{pad}  ]\n{pad}}}")

    def entry(self, step: Step[Any, Entry]) -> None:
        assert step.entry is not None
        level = self.levels[-1]
        pad, name = level.pad, level.names[level.at]
        if level.at:
            self.add(",\n")
        level.at += 1
        self.head = f'{pad}{{\n{pad}  "name": {_json_string(name)},\n{pad}  "type": '
        if step.entry.kind != "directory":
            self.add(f'{self.head}"file"\n{pad}}}')

    def run(self, step: Step[Any, Entry]) -> None:
        """Entries that are not directories, each written as a file."""
        level, add = self.levels[-1], self.add
        pad, names, at = level.pad, level.names, level.at
        for _ in step.entries:
            if at:
                add(",\n")
            name = _json_string(names[at])
            add(f'{pad}{{\n{pad}  "name": {name},\n{pad}  "type": "file"\n{pad}}}')
            at += 1
        level.at = at

    def too_deep(self, step: Step[Any, Entry]) -> None:
        self.add(f'{self.head}"directory"\n{self.levels[-1].pad}}}')

    def unreadable(self, step: Step[Any, Entry]) -> None:
        assert step.error is not None
        pad = self.levels[-1].pad
        code = _json_string(self.error(step.error))
        self.add(f'{self.head}"directory",\n{pad}  "children": [],\n{pad}  "error": {code}')
        self.add(f"\n{pad}}}")

    def value(self) -> str:
        if self.levels and self.levels[0].names:
            self.add("\n]")
        else:
            self.add("]")
        return self.out.value()


def tree_json(steps: Iterable[Step[Any, Entry]], error: Callable[[BaseException], str]) -> str:
    """The JSON text of the tree a walk's ``steps`` describe (depth first, in the
    order the text shows them): each ``ENTER`` gives a directory's children, each
    ``ENTRY`` one of them and each ``RUN`` several that are not directories; a
    directory followed by ``UNREADABLE`` could not be read (``error(exc)`` says why),
    by ``TOO_DEEP`` is at the depth asked for (not read, no children)."""
    writer = _Writer(error)
    write: dict[str, Callable[[Step[Any, Entry]], None]] = {
        ENTER: writer.enter,
        LEAVE: writer.leave,
        ENTRY: writer.entry,
        RUN: writer.run,
        TOO_DEEP: writer.too_deep,
        UNREADABLE: writer.unreadable,
    }
    for step in steps:
        write[step.kind](step)
    return writer.value()

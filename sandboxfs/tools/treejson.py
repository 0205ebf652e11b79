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

from collections.abc import Callable
from typing import Final

import pydantic_core

from sandboxfs.fs import Entry, quote_names

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


def tree_json(
    top: list[Entry],
    below: Callable[[tuple[str, ...]], list[Entry] | None],
    error: Callable[[], str],
    depth: int | None,
) -> str:
    """The JSON text of the tree whose first level is ``top``.  ``below(rel)`` gives
    the entries of the directory at ``rel`` (None if it cannot be read; ``error()``
    then says why), read depth first in the order the text shows them; with
    ``depth``, directories at that level are not read (and have no children)."""
    out = _Text()
    add = out.add

    def level(rel: tuple[str, ...], entries: list[Entry], pad: str) -> None:
        inner = pad + "  "
        descend = depth is None or len(rel) + 1 < depth
        last = len(entries) - 1
        shown = quote_names([entry.name for entry in entries])
        for index, (entry, name) in enumerate(zip(entries, shown, strict=True)):
            head = f'{pad}{{\n{inner}"name": {_json_string(name)},\n{inner}"type": '
            if entry.kind != "directory":
                add(f'{head}"file"\n{pad}}}')
            elif not descend:
                add(f'{head}"directory"\n{pad}}}')
            else:
                inside = (*rel, entry.name)
                children = below(inside)
                if children is None:
                    code = _json_string(error())
                    add(f'{head}"directory",\n{inner}"children": [],\n{inner}"error": {code}')
                    add(f"\n{pad}}}")
                elif not children:
                    add(f'{head}"directory",\n{inner}"children": []\n{pad}}}')
                else:
                    add(f'{head}"directory",\n{inner}"children": [\n')
                    level(inside, children, inner + "  ")
                    add(f"\n{inner}]\n{pad}}}")
            if index != last:
                add(",\n")

    if not top:
        return "[]"
    add("[\n")
    level((), top, "  ")
    add("\n]")
    return out.value()

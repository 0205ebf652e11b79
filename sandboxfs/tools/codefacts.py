"""What code_map knows of a file, and how the server builds it from a parser's answer.

No parser here, and no tree-sitter: the server never loads a native parser.  A
parse helper (:mod:`sandboxfs.tools.parsehelper`) answers with the byte spans of
the names a file defines and the names it uses, with counts; the server turns
the spans into :class:`Definition` s from **its own copy of the bytes**
(:func:`facts_from_spans`): each name, its line number and the line shown are
cut from what the server read, so a helper, even one taken over by a planted
file, can only misreport which spans of the real file define something and how
often a name is used.  Bounded: at most :data:`DEFINITIONS_MAX` definitions and
:data:`REFERENCES_MAX` distinct referenced names per file, names of at most
:data:`NAME_MAX` bytes (characters for a referenced name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, final

#: Definitions one file contributes to a map, at most (the first in the file).
DEFINITIONS_MAX: Final = 2000
#: Distinct names one file refers to, at most (the most used).
REFERENCES_MAX: Final = 4000
#: Longest name kept, in bytes for a definition's span and in characters for a
#: referenced name (a longer token names nothing worth mapping).
NAME_MAX: Final = 256
#: Longest definition line shown; longer lines are cut with an ellipsis.
LINE_SHOWN: Final = 160

#: File name endings and their languages (a name is matched by its last suffix).
EXTENSIONS: Final[dict[str, str]] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
    ".rb": "ruby",
    ".sh": "bash",
    ".bash": "bash",
}

#: Every language code_map parses, in a fixed order (the wire names them by index).
LANGUAGES: Final = (
    "python",
    "javascript",
    "typescript",
    "tsx",
    "go",
    "rust",
    "java",
    "c",
    "cpp",
    "ruby",
    "bash",
)


def language_of(name: str) -> str | None:
    """The language of a file named ``name`` (by its suffix), or None."""
    dot = name.rfind(".")
    return EXTENSIONS.get(name[dot:].lower()) if dot > 0 else None


@final
@dataclass(frozen=True, slots=True)
class Definition:
    """A name a file defines: the name, its 1-based line and that line as shown."""

    name: str
    line: int
    text: str


@final
@dataclass(frozen=True, slots=True)
class Parsed:
    """What one file defines (in line order) and how often it uses each name."""

    definitions: tuple[Definition, ...]
    references: dict[str, int]

    def cost(self) -> int:
        """A rough size in bytes, to bound a cache of these."""
        return (
            200
            + sum(100 + len(d.name) + len(d.text) for d in self.definitions)
            + sum(80 + len(name) for name in self.references)
        )


def shown_line(raw: bytes) -> str:
    """A source line as the map shows it: decoded (bad bytes as U+FFFD), without
    trailing whitespace, cut at :data:`LINE_SHOWN` characters."""
    text = raw.decode("utf-8", "replace").rstrip()
    return text if len(text) <= LINE_SHOWN else text[:LINE_SHOWN] + "…"


def _line_at(data: bytes, offset: int) -> tuple[int, int]:
    """The start and end (before the newline) of the line holding ``offset``."""
    start = data.rfind(b"\n", 0, offset) + 1
    end = data.find(b"\n", offset)
    return start, len(data) if end < 0 else end


def facts_from_spans(
    data: bytes, spans: Iterable[tuple[int, int]], references: Mapping[str, int]
) -> Parsed:
    """What ``data`` defines, cut from ``data`` at ``spans`` (start and end byte of
    each defined name), and the ``references`` counted by the parser.

    A span that is empty, outside ``data``, longer than :data:`NAME_MAX`, across
    lines or a repeat of another's start is left out; so are references beyond
    the bounds.  One pass over ``data`` counts the lines (spans in byte order)."""
    kept: dict[int, int] = {}
    size = len(data)
    for start, end in spans:
        if 0 <= start < end <= size and end - start <= NAME_MAX and start not in kept:
            kept[start] = end
    definitions: list[Definition] = []
    line, counted = 1, 0
    for start in sorted(kept):
        end = kept[start]
        name_bytes = data[start:end]
        if b"\n" in name_bytes:
            continue
        line += data.count(b"\n", counted, start)
        counted = start
        begin, finish = _line_at(data, start)
        definitions.append(
            Definition(name_bytes.decode("utf-8", "replace"), line, shown_line(data[begin:finish]))
        )
        if len(definitions) == DEFINITIONS_MAX:
            break
    definitions.sort(key=lambda d: (d.line, d.name))
    return Parsed(tuple(definitions), bounded_references(references))


def bounded_references(references: Mapping[str, int]) -> dict[str, int]:
    """``references`` without empty names, names over :data:`NAME_MAX` characters or
    counts below 1, the :data:`REFERENCES_MAX` most used kept (ties: the first seen)."""
    kept = {
        name: count
        for name, count in references.items()
        if count >= 1 and 0 < len(name) <= NAME_MAX
    }
    if len(kept) <= REFERENCES_MAX:
        return kept
    ranked = sorted(kept.items(), key=lambda item: -item[1])[:REFERENCES_MAX]
    return dict(ranked)

"""code_map's rendering: the ranked files within ``max_chars``, the summary last.

No I/O.  :func:`build_map` ranks the sources (:mod:`sandboxfs.tools.coderank`) and
spends the budget: files are taken in rank order, each with its best line, while
they fit; a file that does not fit is left out whole.  Then the files taken get
more of their lines, best first across the map, while they fit.  So files lose
their least-referenced definitions before any file is dropped, and no file is
ever cut mid-way.  ``⋮`` marks a gap between printed lines; the summary line is
always last.

Invariant (fuzz/fuzz_codemap.py): for any sources, the text is at most
``max_chars`` long (``max_chars`` >= :data:`MIN_CHARS`), ends with the summary,
and every printed line is a definition line of the file it is printed under,
in line order.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.tools.coderank import Line, Ranking, Source, lines_of, words

#: Smallest and largest budget a map may be given, and the default.
MIN_CHARS: Final = 512
MAX_CHARS: Final = 65_536
DEFAULT_CHARS: Final = 8192
#: The mark between printed lines that are not adjacent.
GAP: Final = "⋮"
#: What the shortest printed line costs ("   1: x" and its newline).
_SMALLEST_LINE: Final = 8
#: Set-aside names listed in structured content, at most.
_SET_ASIDE_LISTED: Final = 50


@final
@dataclass(slots=True)
class Walked:
    """What the walk saw besides the files it mapped, for the summary (counted as
    the walk goes)."""

    not_code: int = 0
    too_large: int = 0
    binary: int = 0
    unreadable: int = 0
    #: Files left unparsed when the call ran out of time.
    unparsed: int = 0
    #: Files whose parse helper crashed, was killed or ran out of memory.
    parser_failed: int = 0
    #: Why the walk ended early, or None (short: it goes in the summary).
    stopped: str | None = None
    #: Directories that could not be read.
    unreadable_dirs: int = 0
    #: The depth limit, when something lay deeper (0: nothing did).
    too_deep: int = 0


@final
@dataclass(frozen=True, slots=True)
class CodeMap:
    """The map's text and the same facts as data."""

    text: str
    structured: dict[str, Any]


@final
class _Block:
    """A file's block as it is being filled: its chosen lines, in line order."""

    __slots__ = ("chosen", "length", "lines", "numbers", "rank", "source")

    def __init__(self, source: Source, rank: float, lines: list[Line]) -> None:
        self.source = source
        self.rank = rank
        self.lines = lines  # best first
        self.chosen: list[Line] = []
        self.numbers: list[int] = []  # of the chosen lines
        self.length = len(source.shown) + 2  # "path:\n"

    def cost_of(self, line: Line) -> int:
        """The characters that adding ``line`` adds to the block."""
        numbers = self.numbers
        at = bisect.bisect_left(numbers, line.number)
        before = numbers[at - 1] if at > 0 else None
        after = numbers[at] if at < len(numbers) else None

        def gap(a: int | None, b: int | None) -> int:
            return 1 if a is not None and b is not None and b != a + 1 else 0

        gaps = gap(before, line.number) + gap(line.number, after) - gap(before, after)
        return len(line.shown) + 1 + gaps * (len(GAP) + 1)

    def add(self, line: Line) -> None:
        self.length += self.cost_of(line)
        at = bisect.bisect_left(self.numbers, line.number)
        self.numbers.insert(at, line.number)
        self.chosen.insert(at, line)

    def render(self) -> str:
        out = [self.source.shown + ":"]
        previous: int | None = None
        for line in self.chosen:
            if previous is not None and line.number != previous + 1:
                out.append(GAP)
            out.append(line.shown)
            previous = line.number
        return "\n".join(out) + "\n"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary(
    walked: Walked,
    *,
    mapped: int,
    definitions: int,
    left_files: int,
    left_definitions: int,
    max_chars: int,
    focus: int,
    steering: str,
) -> str:
    """The bracketed last line of a map (at most about 400 characters)."""
    skipped = [
        (walked.not_code, "not source code"),
        (walked.too_large, "too large"),
        (walked.binary, "binary"),
        (walked.unreadable, "unreadable"),
        (walked.unparsed, "not parsed in time"),
        (walked.parser_failed, "not parsed: the parser failed"),
    ]
    parts = [f"{n} {why}" for n, why in skipped if n]
    text = f"[mapped {_plural(mapped, 'file')}"
    if parts:
        text += f" ({sum(n for n, _ in skipped)} skipped: {', '.join(parts)})"
    text += f", {_plural(definitions, 'definition')}"
    if left_files or left_definitions:
        text += (
            f"; left out to fit maxChars {max_chars}: {_plural(left_files, 'file')}, "
            f"{_plural(left_definitions, 'definition')}"
        )
    if focus:
        text += f"; {_plural(focus, 'focus file')} not shown"
    text += f"; ranked by references{steering}"
    if walked.unreadable_dirs:
        count = walked.unreadable_dirs
        text += f"; {count} unreadable director{'y' if count == 1 else 'ies'}"
    if walked.too_deep:
        text += f"; not mapped deeper than {walked.too_deep} levels"
    if walked.stopped:
        text += f"; {walked.stopped}"
    return text + "]"


def build_map(
    sources: Sequence[Source],
    walked: Walked,
    *,
    query: str | None = None,
    max_chars: int = DEFAULT_CHARS,
) -> CodeMap:
    """The map of ``sources`` within ``max_chars`` (see the module)."""
    query_words = words(query or "")
    ranking = Ranking(sources, query_words)
    steering = ""
    if ranking.steered:
        kinds = [k for k, on in (("the query", query_words), ("focus", _any_focus(sources))) if on]
        steering = ", steered by " + " and ".join(kinds)
    order = sorted(range(len(sources)), key=lambda i: (-ranking.rank[i], sources[i].shown))
    blocks = [
        _Block(sources[i], ranking.rank[i], lines_of(sources[i], ranking, i, query_words))
        for i in order
        if not sources[i].focus and sources[i].parsed.definitions
    ]
    total_lines = sum(len(b.lines) for b in blocks)
    definitions = sum(len(s.parsed.definitions) for s in sources if not s.focus)
    focus = sum(1 for s in sources if s.focus)

    def line_of(left_files: int, left_definitions: int) -> str:
        return summary(
            walked,
            mapped=len(sources),
            definitions=definitions,
            left_files=left_files,
            left_definitions=left_definitions,
            max_chars=max_chars,
            focus=focus,
            steering=steering,
        )

    # Room for the longest summary this map can have: no count in it can be longer
    # (in digits, or by a plural 's') than these.
    room = max_chars - len(line_of(max(len(blocks), 2), max(definitions, 2)))
    taken: list[_Block] = []
    for block in blocks:  # each file with its best line, in rank order, while it fits
        cost = block.length + block.cost_of(block.lines[0]) + 1  # + the blank line after
        if cost <= room:
            block.add(block.lines[0])
            room -= cost
            taken.append(block)
    more = sorted(
        ((line, rank, block) for rank, block in enumerate(taken) for line in block.lines[1:]),
        key=lambda item: (not item[0].matched, -item[0].score, item[1], item[0].number),
    )
    for line, _, block in more:  # then more lines, best first across the map
        if room < _SMALLEST_LINE:
            break
        cost = block.cost_of(line)
        if cost <= room:
            block.add(line)
            room -= cost
    shown_lines = sum(len(b.chosen) for b in taken)
    shown_definitions = sum(len(line.names) for b in taken for line in b.chosen)
    last = line_of(len(blocks) - len(taken), definitions - shown_definitions)
    text = "".join(block.render() + "\n" for block in taken) + last
    return CodeMap(
        text=text,
        structured={
            "files": [
                {
                    "path": block.source.exact,
                    "rank": round(block.rank, 6),
                    "lines": [
                        {"line": line.number, "names": line.names, "text": line.text}
                        for line in block.chosen
                    ],
                }
                for block in taken
            ],
            "filesMapped": len(sources),
            "definitions": definitions,
            "linesShown": shown_lines,
            "linesLeftOut": total_lines - shown_lines,
            "filesLeftOut": len(blocks) - len(taken),
            "setAside": sorted(ranking.set_aside)[:_SET_ASIDE_LISTED],
        },
    )


def _any_focus(sources: Sequence[Source]) -> bool:
    return any(s.focus for s in sources)

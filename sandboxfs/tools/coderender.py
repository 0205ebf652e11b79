"""code_map's rendering: the ranked files within ``max_chars``, the summary last.

No I/O.  :func:`build_map` ranks the sources (:mod:`sandboxfs.tools.coderank`) and
spends the budget: files are taken in rank order, each with its best line, while
they fit; a file that does not fit is left out whole.  Then the files taken get
more of their lines, best first across the map, while they fit (and until the
call's deadline: a map cut there says so).  So files lose
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
import heapq
import time
from collections.abc import Callable, Iterator, Sequence
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
#: Why a map is not complete when its ranking ran out of time.
RANKED_IN_PART: Final = "ranked in part: out of time"
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
    #: Whether the deadline cut the ranking or the choice of lines short.
    cut: bool = False


@final
class _Block:
    """A file's block as it is being filled: its chosen lines, in line order."""

    __slots__ = ("chosen", "index", "length", "lines", "numbers", "rank", "source")

    def __init__(self, source: Source, index: int, rank: float) -> None:
        self.source = source
        self.index = index  # among the map's sources
        self.rank = rank
        self.lines: list[Line] = []  # best first, once scored
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
    deadline: float | None = None,
) -> CodeMap:
    """The map of ``sources`` within ``max_chars`` (see the module).  The ranking
    stops at ``deadline`` (``time.monotonic()``); the map then says so."""
    query_words = words(query or "")
    ranking = Ranking(sources, query_words, deadline)
    if not ranking.complete and walked.stopped is None:
        walked.stopped = RANKED_IN_PART
    steering = ""
    if ranking.steered:
        kinds = [k for k, on in (("the query", query_words), ("focus", _any_focus(sources))) if on]
        steering = ", steered by " + " and ".join(kinds)
    order = sorted(range(len(sources)), key=lambda i: (-ranking.rank[i], sources[i].shown))
    blocks = [
        _Block(sources[i], i, ranking.rank[i])
        for i in order
        if not sources[i].focus and sources[i].parsed.definitions
    ]
    total_lines = sum(len({d.line for d in b.source.parsed.definitions}) for b in blocks)
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
    late = _Late(deadline)
    taken, room = _take_files(
        blocks, room, late, lambda b: lines_of(b.source, ranking, b.index, query_words)
    )
    _add_lines(taken, room, late)
    cut = late.cut or not ranking.complete
    shown_lines = sum(len(b.chosen) for b in taken)
    shown_definitions = sum(len(line.names) for b in taken for line in b.chosen)
    body = "".join(block.render() + "\n" for block in taken)
    last = line_of(len(blocks) - len(taken), definitions - shown_definitions)
    if cut and walked.stopped is None:  # cut while lines were added: say so if it fits
        walked.stopped = RANKED_IN_PART
        noted = line_of(len(blocks) - len(taken), definitions - shown_definitions)
        walked.stopped = None
        if len(body) + len(noted) <= max_chars:
            walked.stopped, last = RANKED_IN_PART, noted
    text = body + last
    return CodeMap(
        cut=cut,
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


@final
class _Late:
    """Whether the deadline has passed, looked at after every 4096 units of work."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.cut = False
        self._work = 0

    def __call__(self, work: int = 1) -> bool:
        self._work += work
        if self._work >= 4096 and self.deadline is not None:
            self._work = 0
            self.cut = self.cut or time.monotonic() > self.deadline
        return self.cut


def _take_files(
    blocks: list[_Block], room: int, late: _Late, lines: Callable[[_Block], list[Line]]
) -> tuple[list[_Block], int]:
    """Each file with its best line, in rank order, while it fits (and until the
    deadline); the files taken and the room left.  A file's lines are only scored
    when its shortest line could fit."""
    taken: list[_Block] = []
    for block in blocks:
        if block.length + _SMALLEST_LINE + 1 > room:
            continue
        if late(len(block.source.parsed.definitions)):
            break
        block.lines = lines(block)
        cost = block.length + block.cost_of(block.lines[0]) + 1  # + the blank line after
        if cost <= room:
            block.add(block.lines[0])
            room -= cost
            taken.append(block)
    return taken, room


def _queue(rank: int, block: _Block) -> Iterator[tuple[bool, float, int, int, Line, _Block]]:
    return ((not ln.matched, -ln.score, rank, ln.number, ln, block) for ln in block.lines[1:])


def _add_lines(taken: list[_Block], room: int, late: _Late) -> None:
    """More lines, best first across the map, while they fit (and until the deadline).
    Each block's lines are in that order already, so merging them yields the map's
    order lazily: no sort of every line."""
    more = heapq.merge(*(_queue(rank, block) for rank, block in enumerate(taken)))
    for *_, line, block in more:
        if room < _SMALLEST_LINE or late():
            break
        cost = block.cost_of(line)
        if cost <= room:
            block.add(line)
            room -= cost


def _any_focus(sources: Sequence[Source]) -> bool:
    return any(s.focus for s in sources)

"""code_map's ranking and rendering: parse results in, the map's text out.

No I/O: :func:`build_map` takes what each mapped file defines and uses
(:class:`Source`) and what the walk noticed (:class:`Walked`), and returns the
map.  Its rules:

* **Files** are ranked by a personalized PageRank over the graph "file A refers to
  a name file B defines" (no self-loops).  A's references to a name are shared
  among the files defining it, and damped (the square root of their count), so
  that one file calling a helper a hundred times does not outweigh a hundred files
  calling it once.  Without ``query`` and ``focus`` every file is an equally
  likely start; with them the start is mostly the focus files and the files whose
  path or definitions match a word of the query.
* **Definitions** of a file are printed in order of what flows to them: the rank
  of each referring file, shared as above, weighed by how few files refer to the
  name (``log(1 + files / referring files)``).  A name that most of the map refers to
  (more than half of the mapped files, and at least :data:`SET_ASIDE_MIN`) is set
  aside: it neither ranks files nor puts its definitions first (``new``,
  ``__init__``, ``get``).  Definitions matching the query come first.
* **Budget**: ``max_chars`` bounds the whole text.  Files are taken in rank order,
  each with its best line, while they fit; a file that does not fit is left out
  whole.  Then the files taken get more of their lines, best first across the map,
  while they fit.  So files lose their least-referenced definitions before any
  file is dropped, and no file is ever cut mid-way.  ``⋮`` marks a gap between
  printed lines; the summary line is always last.

Invariant (fuzz/fuzz_codemap.py): for any sources, the text is at most
``max_chars`` long (``max_chars`` >= :data:`MIN_CHARS`), ends with the summary,
and every printed line is a definition line of the file it is printed under,
in line order.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

from sandboxfs.tools.codeparse import Parsed

#: Smallest and largest budget a map may be given, and the default.
MIN_CHARS: Final = 512
MAX_CHARS: Final = 65_536
DEFAULT_CHARS: Final = 8192
#: A name is set aside once at least this many files, and most of the map, refer to it.
SET_ASIDE_MIN: Final = 8
#: PageRank: damping, and when to stop iterating.
_DAMPING: Final = 0.85
_TOLERANCE: Final = 1e-9
_ITERATIONS: Final = 100
#: The mark between printed lines that are not adjacent.
GAP: Final = "⋮"
#: What the shortest printed line costs ("   1: x" and its newline).
_SMALLEST_LINE: Final = 8
#: Set-aside names listed in structured content, at most.
_SET_ASIDE_LISTED: Final = 50


@final
@dataclass(frozen=True, slots=True)
class Source:
    """One mapped file: its path as shown and as structured content carries it, what
    it defines and uses, and whether the agent named it in ``focus``."""

    shown: str
    exact: str
    parsed: Parsed
    focus: bool = False


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
@dataclass(slots=True)
class _Line:
    """One printed line: a file's definitions on one source line."""

    number: int
    text: str
    names: list[str] = field(default_factory=list)
    score: float = 0.0
    matched: bool = False

    @property
    def shown(self) -> str:
        return f"{self.number:>4}: {self.text}"


_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(text: str) -> set[str]:
    """The lower-case words of ``text``: split at anything not a letter or digit and
    at camelCase humps (``parseHTTPRequest_v2`` -> parse, http, request, v, 2)."""
    return {w.lower() for w in _WORD.findall(text)}


def _matches(query: set[str], candidates: Iterable[str]) -> bool:
    """Whether a query word names one of ``candidates``: equal (3 letters or more),
    or one a prefix of the other (4 or more: ``cache``, ``cached``)."""
    for word in candidates:
        for q in query:
            if q == word and len(q) >= 3:
                return True
            if len(q) >= 4 and len(word) >= 4 and (word.startswith(q) or q.startswith(word)):
                return True
    return False


def _pagerank(
    edges: Sequence[dict[int, float]], start: Sequence[float], iterations: int = _ITERATIONS
) -> list[float]:
    """PageRank of a weighted graph (``edges[a][b]``: weight of a -> b) restarting at
    ``start`` (sums to 1); a node with no edges hands its rank to ``start``."""
    n = len(start)
    rank = list(start)
    totals = [sum(out.values()) for out in edges]
    for _ in range(iterations):
        new = [0.0] * n
        dangling = 0.0
        for a, out in enumerate(edges):
            if not out:
                dangling += rank[a]
                continue
            share = _DAMPING * rank[a] / totals[a]
            for b, weight in out.items():
                new[b] += share * weight
        restart = 1.0 - _DAMPING + _DAMPING * dangling
        for i in range(n):
            new[i] += restart * start[i]
        change = sum(abs(x - y) for x, y in zip(new, rank, strict=True))
        rank = new
        if change < _TOLERANCE:
            break
    return rank


@final
class _Ranking:
    """Ranks of files and scores of their definition lines (see the module)."""

    def __init__(self, sources: Sequence[Source], query: set[str]) -> None:
        n = len(sources)
        definers: dict[str, list[int]] = defaultdict(list)
        for i, source in enumerate(sources):
            for name in dict.fromkeys(d.name for d in source.parsed.definitions):
                definers[name].append(i)
        referrers: dict[str, int] = defaultdict(int)
        for source in sources:
            for name in source.parsed.references:
                if name in definers:
                    referrers[name] += 1
        self.referrers = referrers
        self.set_aside = {
            name for name, count in referrers.items() if count >= SET_ASIDE_MIN and 2 * count > n
        }
        self.edges: list[dict[int, float]] = [defaultdict(float) for _ in range(n)]
        # Per referring file: (name, weight of each reference, the other files defining it).
        flows: list[list[tuple[str, float, list[int]]]] = [[] for _ in range(n)]
        for a, source in enumerate(sources):
            for name, count in source.parsed.references.items():
                found = definers.get(name, ())
                others = [b for b in found if b != a]
                if not others or name in self.set_aside:
                    continue
                weight = math.sqrt(count) / len(found)  # shared by every file defining it
                flows[a].append((name, weight, others))
                for b in others:
                    self.edges[a][b] += weight
        start = [1.0 + (n if _steers(source, query) else 0) for source in sources]
        self.steered = any(x > 1.0 for x in start)
        total = sum(start)
        self.rank = _pagerank(self.edges, [x / total for x in start]) if n else []
        #: What flows to each (file, name): the referring files' rank, shared.
        self.flow: list[dict[str, float]] = [defaultdict(float) for _ in range(n)]
        for a, out in enumerate(flows):
            total_out = sum(self.edges[a].values())
            for name, weight, others in out:
                passed = self.rank[a] * weight / total_out
                for b in others:
                    self.flow[b][name] += passed


def _steers(source: Source, query: set[str]) -> bool:
    """Whether the walk starts mostly at ``source``: a focus file, or one whose path or
    definitions match the query."""
    if source.focus:
        return True
    if not query:
        return False
    return _matches(query, words(source.shown)) or any(
        _matches(query, words(d.name)) for d in source.parsed.definitions
    )


def _lines(source: Source, ranking: _Ranking, index: int, query: set[str]) -> list[_Line]:
    """A file's printable lines, best first: what flows to their names, each weighed
    by how few files refer to it (as a word's weight in a document falls with the
    number of documents holding it)."""
    flow = ranking.flow[index]
    files = len(ranking.rank)
    by_number: dict[int, _Line] = {}
    for d in source.parsed.definitions:
        line = by_number.get(d.line)
        if line is None:
            line = by_number[d.line] = _Line(d.line, d.text)
        line.names.append(d.name)
        if d.name in flow:
            weight = math.log1p(files / ranking.referrers[d.name])
            line.score = max(line.score, flow[d.name] * weight)
        line.matched = line.matched or (bool(query) and _matches(query, words(d.name)))
    return sorted(by_number.values(), key=lambda x: (not x.matched, -x.score, x.number))


@final
class _Block:
    """A file's block as it is being filled: its chosen lines, in line order."""

    __slots__ = ("chosen", "length", "lines", "numbers", "rank", "source")

    def __init__(self, source: Source, rank: float, lines: list[_Line]) -> None:
        self.source = source
        self.rank = rank
        self.lines = lines  # best first
        self.chosen: list[_Line] = []
        self.numbers: list[int] = []  # of the chosen lines
        self.length = len(source.shown) + 2  # "path:\n"

    def cost_of(self, line: _Line) -> int:
        """The characters that adding ``line`` adds to the block."""
        numbers = self.numbers
        at = bisect.bisect_left(numbers, line.number)
        before = numbers[at - 1] if at > 0 else None
        after = numbers[at] if at < len(numbers) else None

        def gap(a: int | None, b: int | None) -> int:
            return 1 if a is not None and b is not None and b != a + 1 else 0

        gaps = gap(before, line.number) + gap(line.number, after) - gap(before, after)
        return len(line.shown) + 1 + gaps * (len(GAP) + 1)

    def add(self, line: _Line) -> None:
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
    ranking = _Ranking(sources, query_words)
    steering = ""
    if ranking.steered:
        kinds = [k for k, on in (("the query", query_words), ("focus", _any_focus(sources))) if on]
        steering = ", steered by " + " and ".join(kinds)
    order = sorted(range(len(sources)), key=lambda i: (-ranking.rank[i], sources[i].shown))
    blocks = [
        _Block(sources[i], ranking.rank[i], _lines(sources[i], ranking, i, query_words))
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

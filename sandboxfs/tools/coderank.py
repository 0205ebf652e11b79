"""code_map's ranking: which files matter, and which of their lines.

No I/O.  From what each mapped file defines and uses (:class:`Source`):

* **Files** are ranked by a personalized PageRank over the graph "file A refers to
  a name file B defines" (no self-loops).  A's references to a name are shared
  among the files defining it, and damped (the square root of their count), so
  that one file calling a helper a hundred times does not outweigh a hundred files
  calling it once.  Without ``query`` and ``focus`` every file is an equally
  likely start; with them the start is mostly the focus files and the files whose
  path or definitions match a word of the query.
* **Definitions** of a file are ordered by what flows to them: the rank of each
  referring file, shared as above, weighed by how few files refer to the name
  (``log(1 + files / referring files)``).  A name that most of the map refers to
  (more than half of the mapped files, and at least :data:`SET_ASIDE_MIN`) is set
  aside: it neither ranks files nor puts its definitions first (``new``,
  ``__init__``, ``get``).  Definitions matching the query come first.

What is printed, within the budget: :mod:`sandboxfs.tools.coderender`.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.tools.codefacts import Parsed

#: A name is set aside once at least this many files, and most of the map, refer to it.
SET_ASIDE_MIN: Final = 8
#: PageRank: damping, and when to stop iterating.
_DAMPING: Final = 0.85
_TOLERANCE: Final = 1e-9
_ITERATIONS: Final = 100


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
class Line:
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
class Ranking:
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


def lines_of(source: Source, ranking: Ranking, index: int, query: set[str]) -> list[Line]:
    """A file's printable lines, best first: what flows to their names, each weighed
    by how few files refer to it (as a word's weight in a document falls with the
    number of documents holding it)."""
    flow = ranking.flow[index]
    files = len(ranking.rank)
    by_number: dict[int, Line] = {}
    for d in source.parsed.definitions:
        line = by_number.get(d.line)
        if line is None:
            line = by_number[d.line] = Line(d.line, d.text)
        line.names.append(d.name)
        if d.name in flow:
            weight = math.log1p(files / ranking.referrers[d.name])
            line.score = max(line.score, flow[d.name] * weight)
        line.matched = line.matched or (bool(query) and _matches(query, words(d.name)))
    return sorted(by_number.values(), key=lambda x: (not x.matched, -x.score, x.number))

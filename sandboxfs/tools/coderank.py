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

Bounded: the graph is kept per name, so its size is the number of references
plus definitions (each file's bounded by :mod:`sandboxfs.tools.codefacts`), and
the PageRank stops at the call's deadline.  What is printed, within the budget:
:mod:`sandboxfs.tools.coderender`.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from sandboxfs.tools.codefacts import Parsed

#: A name is set aside once at least this many files, and most of the map, refer to it.
SET_ASIDE_MIN: Final = 8
#: Files that may define a name for its references to become edges from file to file
#: (more: the name is a node of the graph, see _Graph).
_DIRECT_MAX: Final = 4
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


@final
class _Graph:
    """The graph "file A refers to a name file B defines".  A name that at most
    :data:`_DIRECT_MAX` files define gives edges from file to file (merged per pair);
    one that more define is a node of its own: its references flow into it and out to
    each file defining it, less what would flow back to the referring file itself.
    So the graph's size is at most the references times :data:`_DIRECT_MAX` plus the
    definitions, never references times definitions: a name that thousands of files
    define and refer to costs no more than its entries."""

    def __init__(
        self, sources: Sequence[Source], definers: dict[str, list[int]], set_aside: set[str]
    ) -> None:
        n = len(sources)
        #: Direct edges: ``edges[a][b]``, the weight of a -> b.
        self.edges: list[dict[int, float]] = [{} for _ in range(n)]
        #: Per reference to a name of few definers: file, name, weight, the others.
        self.direct: list[tuple[int, str, float, list[int]]] = []
        #: Per reference to a name of many definers: the file, the name's id, its weight.
        names: dict[str, int] = {}
        self.ref_file: list[int] = []
        self.ref_name: list[int] = []
        self.ref_weight: list[float] = []
        own: dict[tuple[int, int], int] = {}  # (file, name id) -> its reference's index
        self.out = [0.0] * n  # each file's total outgoing weight
        for a, source in enumerate(sources):
            edges = self.edges[a]
            for name, count in source.parsed.references.items():
                found = definers.get(name)
                if not found or name in set_aside or found == [a]:
                    continue
                weight = math.sqrt(count) / len(found)  # shared by every file defining it
                if len(found) <= _DIRECT_MAX:
                    others = [b for b in found if b != a]
                    for b in others:
                        edges[b] = edges.get(b, 0.0) + weight
                    self.direct.append((a, name, weight, others))
                    self.out[a] += weight * len(others)
                    continue
                self.out[a] += weight * (len(found) - (1 if a in found else 0))
                ident = names.setdefault(name, len(names))
                own[a, ident] = len(self.ref_file)
                self.ref_file.append(a)
                self.ref_name.append(ident)
                self.ref_weight.append(weight)
        self.names = names
        #: Per definition of a name of many definers: the defining file, the name's id,
        #: and the index of that file's own reference to it (-1: none).
        self.def_file: list[int] = []
        self.def_name: list[int] = []
        self.def_own: list[int] = []
        for name, ident in names.items():
            for b in definers[name]:
                self.def_file.append(b)
                self.def_name.append(ident)
                self.def_own.append(own.get((b, ident), -1))

    @property
    def size(self) -> int:
        """Entries kept: direct edges, references to and definitions of name nodes."""
        return sum(map(len, self.edges)) + len(self.ref_file) + len(self.def_file)

    def spread(self, share: Sequence[float]) -> list[float]:
        """With ``share[a]`` passed per unit of ``a``'s outgoing weight: what flows to
        each definition of a name node (from the other files)."""
        weight = self.ref_weight
        passed = [share[a] * weight[k] for k, a in enumerate(self.ref_file)]
        pooled = [0.0] * len(self.names)
        for k, ident in enumerate(self.ref_name):
            pooled[ident] += passed[k]
        return [
            pooled[ident] - (passed[k] if k >= 0 else 0.0)
            for ident, k in zip(self.def_name, self.def_own, strict=True)
        ]

    def step(self, share: Sequence[float]) -> list[float]:
        """What each file receives when every file ``a`` passes ``share[a]`` per unit
        of its outgoing weight."""
        received = [0.0] * len(share)
        for a, edges in enumerate(self.edges):
            passed = share[a]
            if passed and edges:
                for b, weight in edges.items():
                    received[b] += passed * weight
        if self.def_file:
            for b, flow in zip(self.def_file, self.spread(share), strict=True):
                received[b] += flow
        return received

    def flows(self, share: Sequence[float]) -> list[dict[str, float]]:
        """What flows to each (file, name) it defines from the files referring to it."""
        flow: list[dict[str, float]] = [{} for _ in share]
        for a, name, weight, others in self.direct:
            passed = share[a] * weight
            for b in others:
                flow[b][name] = flow[b].get(name, 0.0) + passed
        counted = [0] * len(self.names)  # references to each name node
        for ident in self.ref_name:
            counted[ident] += 1
        names = list(self.names)
        spread = self.spread(share) if self.def_file else []
        for b, ident, own, value in zip(
            self.def_file, self.def_name, self.def_own, spread, strict=True
        ):
            if counted[ident] - (1 if own >= 0 else 0) > 0:  # another file refers to it
                flow[b][names[ident]] = value
        return flow


def _pagerank(
    graph: _Graph, start: Sequence[float], deadline: float | None, iterations: int = _ITERATIONS
) -> tuple[list[float], bool]:
    """PageRank of ``graph`` restarting at ``start`` (sums to 1); a file with no
    references hands its rank to ``start``.  Stops at ``deadline``: the rank so far,
    and False (True: it converged or ran every iteration)."""
    n = len(start)
    rank = list(start)
    out = graph.out
    for _ in range(iterations):
        if deadline is not None and time.monotonic() > deadline:
            return rank, False
        share = [_DAMPING * rank[a] / out[a] if out[a] else 0.0 for a in range(n)]
        dangling = sum(rank[a] for a in range(n) if not out[a])
        new = graph.step(share)
        restart = 1.0 - _DAMPING + _DAMPING * dangling
        for i in range(n):
            new[i] += restart * start[i]
        change = sum(abs(x - y) for x, y in zip(new, rank, strict=True))
        rank = new
        if change < _TOLERANCE:
            break
    return rank, True


@final
class Ranking:
    """Ranks of files and scores of their definition lines (see the module).

    Linear in the number of definitions and references; with ``deadline``
    (``time.monotonic()``) the PageRank stops there, with the ranks it has
    (:attr:`complete` False)."""

    def __init__(
        self, sources: Sequence[Source], query: set[str], deadline: float | None = None
    ) -> None:
        n = len(sources)
        referenced: set[str] = set().union(*(s.parsed.references for s in sources))
        #: The files defining each name some file refers to.
        definers: dict[str, list[int]] = defaultdict(list)
        for i, source in enumerate(sources):
            for name in referenced.intersection([d.name for d in source.parsed.definitions]):
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
        graph = _Graph(sources, definers, self.set_aside)
        start = [1.0 + (n if _steers(source, query) else 0) for source in sources]
        self.steered = any(x > 1.0 for x in start)
        total = sum(start)
        self.rank, self.complete = (
            _pagerank(graph, [x / total for x in start], deadline) if n else ([], True)
        )
        #: What flows to each (file, name): the referring files' rank, shared.
        share = [self.rank[a] / graph.out[a] if graph.out[a] else 0.0 for a in range(n)]
        self.flow: list[dict[str, float]] = graph.flows(share)


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

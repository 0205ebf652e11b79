"""code_map's ranking (issue 28, deliverable 4): the graph kept per name gives the same
ranks and flows as the graph of file pairs it replaced, its size is linear in the
references and definitions (never their product), and the ranking keeps to the
call's deadline and says when it did not finish."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxfs.tools import coderank
from sandboxfs.tools.codefacts import Definition, Parsed
from sandboxfs.tools.coderank import Ranking, Source
from sandboxfs.tools.coderender import RANKED_IN_PART, Walked, build_map


def _reference(sources: Sequence[Source]) -> tuple[list[float], list[dict[str, float]]]:
    """The ranking as first written: one edge per pair of files (quadratic), the
    oracle for the per-name graph.  No query, no focus."""
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
    set_aside = {
        name
        for name, count in referrers.items()
        if count >= coderank.SET_ASIDE_MIN and 2 * count > n
    }
    edges: list[dict[int, float]] = [defaultdict(float) for _ in range(n)]
    flows: list[list[tuple[str, float, list[int]]]] = [[] for _ in range(n)]
    for a, source in enumerate(sources):
        for name, count in source.parsed.references.items():
            found = definers.get(name, [])
            others = [b for b in found if b != a]
            if not others or name in set_aside:
                continue
            weight = math.sqrt(count) / len(found)
            flows[a].append((name, weight, others))
            for b in others:
                edges[a][b] += weight
    start = [1.0 / n] * n
    rank = list(start)
    totals = [sum(out.values()) for out in edges]
    for _ in range(100):
        new = [0.0] * n
        dangling = 0.0
        for a, out in enumerate(edges):
            if not out:
                dangling += rank[a]
                continue
            share = 0.85 * rank[a] / totals[a]
            for b, weight in out.items():
                new[b] += share * weight
        restart = 1.0 - 0.85 + 0.85 * dangling
        for i in range(n):
            new[i] += restart * start[i]
        change = sum(abs(x - y) for x, y in zip(new, rank, strict=True))
        rank = new
        if change < 1e-9:
            break
    flow: list[dict[str, float]] = [defaultdict(float) for _ in range(n)]
    for a, out in enumerate(flows):
        for name, weight, others in out:
            for b in others:
                flow[b][name] += rank[a] * weight / totals[a]
    return rank, [dict(f) for f in flow]


NAMES = st.sampled_from(["alpha", "beta", "gamma", "delta", "main", "run", "x"])
#: Maps of up to 12 files: a name defined by more than coderank._DIRECT_MAX of them is a
#: node of the graph, by fewer direct edges; both kinds are drawn.


@st.composite
def maps(draw: st.DrawFn) -> list[Source]:
    count = draw(st.integers(1, 12))
    sources = []
    for i in range(count):
        defined = draw(st.lists(NAMES, max_size=4))
        definitions = tuple(Definition(name, j + 1, name) for j, name in enumerate(defined))
        references = draw(st.dictionaries(NAMES, st.integers(1, 5), max_size=5))
        sources.append(Source(f"./f{i}.py", f"./f{i}.py", Parsed(definitions, references)))
    return sources


@settings(max_examples=300, deadline=None)
@given(maps())
def test_the_per_name_graph_ranks_as_the_graph_of_file_pairs(sources: list[Source]) -> None:
    ranking = Ranking(sources, set())
    rank, flow = _reference(sources)
    assert ranking.complete
    assert all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(ranking.rank, rank, strict=True))
    assert [set(f) for f in ranking.flow] == [set(f) for f in flow]
    for mine, theirs in zip(ranking.flow, flow, strict=True):
        for name, value in theirs.items():
            assert math.isclose(mine[name], value, abs_tol=1e-9), (name, mine[name], value)


def storm(files: int) -> list[Source]:
    """The issue's ranking attack: every file defines one shared name and its own, calls
    three neighbours, and just under half of them call the shared name (so it is not
    set aside): a graph of file pairs has files x files / 2 edges."""
    sources = []
    for i in range(files):
        definitions = (Definition("handler", 1, "def handler(x):"), Definition(f"f{i}", 3, ""))
        references = {f"f{(i + k) % files}": 1 for k in (1, 2, 3)}
        if i < 0.45 * files:
            references["handler"] = 2
        sources.append(Source(f"./m{i}.py", f"./m{i}.py", Parsed(definitions, references)))
    return sources


def test_the_graph_is_linear_in_references_and_definitions() -> None:
    sources = storm(3500)
    definers: dict[str, list[int]] = defaultdict(list)
    for i, source in enumerate(sources):
        for d in source.parsed.definitions:
            definers[d.name].append(i)
    graph = coderank._Graph(sources, definers, set())
    references = sum(len(s.parsed.references) for s in sources)
    definitions = sum(len(s.parsed.definitions) for s in sources)
    assert graph.size <= 4 * references + definitions  # coderank._DIRECT_MAX
    # The pairs it stands for: each file calling 'handler' reaches 3,499 others.
    pairs = sum(len(definers["handler"]) - 1 for s in sources if "handler" in s.parsed.references)
    assert pairs > 100 * graph.size
    ranking = Ranking(sources, set(), time.monotonic() + 600)
    assert ranking.complete and math.isclose(sum(ranking.rank), 1.0)


def test_a_ranking_past_its_deadline_stops_and_the_map_says_so() -> None:
    sources = storm(3500)
    ranking = Ranking(sources, set(), time.monotonic() - 1)
    assert not ranking.complete
    assert math.isclose(sum(ranking.rank), 1.0)  # the start: every file alike
    walked = Walked()
    result = build_map(sources, walked, deadline=time.monotonic() - 1)
    assert result.cut
    assert result.text.endswith(f"; {RANKED_IN_PART}]")
    assert len(result.text) <= 8192
    finished = build_map(sources, Walked(), deadline=time.monotonic() + 600)
    assert not finished.cut and RANKED_IN_PART not in finished.text


def test_lines_left_out_at_the_deadline_are_said_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many definitions, a ranking that finished, a deadline already past when files
    and lines are chosen: the map stays within maxChars and is marked cut (in its text
    when the note fits)."""
    from sandboxfs.tools import coderender  # noqa: PLC0415

    def finishing(sources: Sequence[Source], query: set[str], deadline: float | None) -> Ranking:
        return Ranking(sources, query, None)

    monkeypatch.setattr(coderender, "Ranking", finishing)
    sources = [
        Source(
            f"./m{i}.py",
            f"./m{i}.py",
            Parsed(
                tuple(Definition(f"f{i}_{j}", j + 1, f"def f{i}_{j}():") for j in range(300)), {}
            ),
        )
        for i in range(40)
    ]
    for max_chars in (512, 8192, 65536):
        result = build_map(sources, Walked(), max_chars=max_chars, deadline=time.monotonic() - 1)
        assert result.cut and len(result.text) <= max_chars
        assert result.text.endswith("]")
        whole = build_map(sources, Walked(), max_chars=max_chars)
        assert not whole.cut and len(whole.text) <= max_chars
    # At the largest budget the files taken before the deadline was seen are fewer.
    assert result.structured["filesLeftOut"] > whole.structured["filesLeftOut"]
    assert result.text.endswith(f"; {RANKED_IN_PART}]")

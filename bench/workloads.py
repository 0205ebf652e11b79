"""The workloads: what a row measures (Ctx, Measure, Workload) and the calls of each,
checked as they run (a wrong answer fails the row, never times it)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from fixtures import EDIT_NEW, EDIT_OLD, MIB_CONTENT, PATCH_FILES
from httpbench import http_rate
from rows import Ctx, Measure, expect, timed_calls
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    STATELESS_VERSION,
    BenchError,
    Conn,
    KiB,
    MiB,
    check_result,
    encode,
    result_text,
)
from searches import TREE_LITERAL, grep_workload


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
        expect(conn.label, n == KiB, f"1 KiB read gave {n} chars")

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
        expect(conn.label, n == ctx.spec.listing_entries, f"{tool} listed {n} entries")

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
        expect(conn.label, n == ctx.spec.tree_top, f"list_directory listed {n} dirs")

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
        expect(conn.label, n == want, f"directory_tree has {n} files, expected {want}")

    per = timed_calls(
        conn, ctx.n_walk, lambda i: ("directory_tree", {"path": ctx.p("tree")}), verify
    )
    return Measure(per * 1e3, f"{size[0] / MiB:.1f} MiB of text")


def w_search(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        n = sum(1 for line in result_text(r).splitlines() if line.endswith(".py"))
        want = ctx.spec.n_tree_files // 2
        expect(conn.label, n == want, f"search_files found {n} .py files, expected {want}")

    args = {"path": ctx.p("tree"), "pattern": "**/*.py"}
    per = timed_calls(conn, ctx.n_walk, lambda i: ("search_files", args), verify)
    return Measure(per * 1e3)


def w_read_multi(conn: Conn, ctx: Ctx) -> Measure:
    paths = [ctx.small(i) for i in range(100)]

    def verify(r: dict[str, Any]) -> None:
        expect(conn.label, len(result_text(r)) > 100 * KiB, "read_multiple_files too short")

    per = timed_calls(conn, ctx.n_list, lambda i: ("read_multiple_files", {"paths": paths}), verify)
    return Measure(per * 1e3)


def w_head(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r).splitlines())
        expect(conn.label, n == 10, f"head=10 gave {n} lines")

    args = {"path": ctx.p("huge.txt"), "head": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_tail(conn: Conn, ctx: Ctx) -> Measure:
    def verify(r: dict[str, Any]) -> None:
        lines = result_text(r).splitlines()
        # The reference counts the final newline as ending an empty last line, so its
        # tail=10 returns 9 lines of this file: accept 9 or 10.
        ok = len(lines) in (9, 10) and lines[-1] == "THE LAST LINE"
        expect(conn.label, ok, f"tail=10 gave {len(lines)} lines ending {lines[-1:]!r}")

    args = {"path": ctx.p("huge.txt"), "tail": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_head_10m(conn: Conn, ctx: Ctx) -> Measure:
    """head=10 of a file below sandboxfs's edit cap (64 MiB): the cost of what a head
    read computes besides the ten lines (a revision hash of the file, in sandboxfs)."""

    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r).splitlines())
        expect(conn.label, n == 10, f"head=10 gave {n} lines")

    args = {"path": ctx.p("big.txt"), "head": 10}
    per = timed_calls(conn, ctx.n_heavy * 4, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_read_big(conn: Conn, ctx: Ctx) -> Measure:
    want = (ctx.root / "big.txt").stat().st_size

    def verify(r: dict[str, Any]) -> None:
        n = len(result_text(r))
        expect(conn.label, n == want, f"whole read gave {n} chars, expected {want}")

    args = {"path": ctx.p("big.txt")}
    per = timed_calls(conn, ctx.n_heavy, lambda i: ("read_text_file", args), verify)
    return Measure(per * 1e3)


def w_write(conn: Conn, ctx: Ctx) -> Measure:
    args = {"path": ctx.p("scratch", f"write-{conn.label}.txt"), "content": MIB_CONTENT}
    per = timed_calls(conn, ctx.n_heavy, lambda i: ("write_file", args))
    size = os.path.getsize(args["path"])
    expect(conn.label, size == MiB, f"write_file wrote {size} bytes")
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
        expect(conn.label, not r.get("isError"), f"apply_patch failed: {result_text(r)[:200]}")

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


w_grep = grep_workload(TREE_LITERAL)

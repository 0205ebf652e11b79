"""Running blocking filesystem work off the event loop, with per-step timeouts.

One tool call runs in one worker thread.  The thread marks each blocking step
on a :class:`~sandboxfs.watch.StepWatch`; a small task watches it and, once a
single step has lasted longer than the timeout, stops waiting and raises
:class:`~sandboxfs.errors.TimedOut`.  The thread cannot be interrupted: it
finishes in the background (holding its worker slot until then), but no other
call waits for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, final

import trio

from sandboxfs.errors import TimedOut
from sandboxfs.watch import Stall, StepWatch, Watch

T = TypeVar("T")


@final
class BlockingRunner:
    """Runs blocking calls in worker threads, bounded in number and in step time."""

    def __init__(
        self, *, worker_threads: int, step_timeout: float, stall: Stall | None = None
    ) -> None:
        self.limiter = trio.CapacityLimiter(worker_threads)
        self.step_timeout = step_timeout
        self.stall = stall

    async def run(self, fn: Callable[[Watch], T]) -> T:
        """``fn(watch)`` in a worker thread.  Raises TimedOut if one step stalls."""
        watch = StepWatch(self.stall)
        stalled: list[str] = []
        result: list[T] = []
        failure: list[Exception] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watchdog, watch, stalled, nursery.cancel_scope)
            try:
                result.append(
                    await trio.to_thread.run_sync(
                        fn, watch, abandon_on_cancel=True, limiter=self.limiter
                    )
                )
            except Exception as exc:  # re-raised below, outside the nursery's group
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if stalled:
            ms = round(self.step_timeout * 1000)
            raise TimedOut(f"Filesystem call timed out after {ms} ms: {stalled[0]}")
        if failure:
            raise failure[0]
        return result[0]

    async def _watchdog(
        self, watch: StepWatch, stalled: list[str], scope: trio.CancelScope
    ) -> None:
        timeout = self.step_timeout
        while True:
            step = watch.current()
            if step is None:
                await trio.sleep(timeout)
                continue
            remaining = step.started + timeout - time.monotonic()
            if remaining <= 0:
                if watch.current() is step:
                    stalled.append(step.path)
                    scope.cancel()
                    return
                continue
            await trio.sleep(remaining)

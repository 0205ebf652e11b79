"""The worker pool: bounded threads, results delivered, abandoned jobs left to finish."""

from __future__ import annotations

import threading

import pytest
import trio

from sandboxfs.core.errors import TimedOut
from sandboxfs.core.watch import Watch
from sandboxfs.session.blocking import BlockingRunner


def test_jobs_run_in_at_most_the_allowed_threads() -> None:
    runner = BlockingRunner(worker_threads=3, step_timeout=10)
    seen: set[str] = set()
    running = 0
    most = 0
    lock = threading.Lock()

    together = threading.Barrier(3, timeout=60)  # three at once, or the test fails

    def job(watch: Watch) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            seen.add(threading.current_thread().name)
        together.wait()
        with lock:
            running -= 1
        return 7

    async def main() -> list[int]:
        results: list[int] = []

        async def one() -> None:
            results.append(await runner.run(job))

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one)
        return results

    assert trio.run(main) == [7] * 12
    assert most == 3 and len(seen) == 3
    assert threading.current_thread().name not in seen


def test_errors_come_back_to_the_caller() -> None:
    runner = BlockingRunner(worker_threads=2, step_timeout=10)

    def job(watch: Watch) -> None:
        raise ValueError("from the worker")

    with pytest.raises(ValueError, match="from the worker"):
        trio.run(runner.run, job)


def test_a_stalled_step_is_abandoned_and_finishes_in_the_background() -> None:
    runner = BlockingRunner(worker_threads=1, step_timeout=0.2)
    release, finished = threading.Event(), threading.Event()

    def stalled(watch: Watch) -> str:
        with watch.step("slow/path"):
            release.wait(60)  # a step that does not end until the test says so
        finished.set()
        return "late"

    def quick(watch: Watch) -> str:
        return "quick"

    async def main() -> None:
        with pytest.raises(TimedOut, match="slow/path"):
            await runner.run(stalled)
        assert not finished.is_set()  # given up on while its step was still running
        release.set()
        # The one thread is still busy with the stalled job: the next waits for it.
        assert await runner.run(quick) == "quick"
        assert finished.is_set()

    trio.run(main)

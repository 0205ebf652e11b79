"""Per-call watch of blocking filesystem steps, so a stalled call can be abandoned.

A tool call runs in one worker thread and marks each blocking step (resolving
a path, reading a directory) with :meth:`Watch.step`.  The async side reads
:meth:`Watch.current` and gives up on the call once a single step has taken
longer than its timeout.  A thread cannot be interrupted, so the step still
finishes in the background; only the client stops waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import final

from sandboxfs.core.names import quote_path

log = logging.getLogger("sandboxfs")


@final
@dataclass(frozen=True, slots=True)
class Step:
    """A blocking step in progress: what it is about and when it started."""

    path: str
    started: float


class Watch:
    """Records the step in progress.  The base class records nothing."""

    __slots__ = ()

    @contextmanager
    def step(self, path: str) -> Iterator[None]:
        """Mark a blocking step about ``path`` (as the client gave it)."""
        yield

    def current(self) -> Step | None:
        """The step in progress, or None between steps."""
        return None


#: The watch used outside tool calls: records nothing, costs nothing.
NO_WATCH = Watch()


@final
@dataclass(frozen=True, slots=True)
class Stall:
    """Test-only: make steps about paths containing ``needle`` take ``seconds`` longer,
    to exercise timeouts without a stalled mount.  Set only from the environment
    variable named by :data:`TEST_STALL_ENV`."""

    seconds: float
    needle: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Stall | None:
        """Parse ``SECONDS:NEEDLE``; None when the variable is unset."""
        raw = environ.get(TEST_STALL_ENV)
        if not raw:
            return None
        seconds, _, needle = raw.partition(":")
        return cls(float(seconds), needle)


#: The test-only switch read by :meth:`Stall.from_env`.
TEST_STALL_ENV = "SANDBOXFS_TEST_STALL"


@final
class StepWatch(Watch):
    """A watch for one call.  Written by one worker thread, read by the event loop.

    A single attribute assignment is atomic in CPython, so no lock is needed.
    """

    __slots__ = ("_current", "_stall")

    def __init__(self, stall: Stall | None = None) -> None:
        self._current: Step | None = None
        self._stall = stall

    @contextmanager
    def step(self, path: str) -> Iterator[None]:
        outer = self._current
        if outer is not None:  # nested step: the outer one keeps timing
            yield
            return
        self._current = Step(path, time.monotonic())
        try:
            if self._stall is not None and self._stall.needle in path:
                # Tests wait for this line to know a call is stalled (never a sleep).
                log.warning("TEST MODE: stalling a step about %s", quote_path(path))
                time.sleep(self._stall.seconds)
            yield
        finally:
            self._current = None

    def current(self) -> Step | None:
        return self._current

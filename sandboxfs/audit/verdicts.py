"""The four verdicts of a case, what an audit's results add up to, and its exit status.

* ``PASS``: the server held.
* ``FAIL``: the server did something it must not (an escape, a leak, a hang, a crash).
* ``ERROR``: the audit could not run the case (the server did not start, an attacker
  did not get ready, the harness itself failed): nothing is known about the server.
* ``N/A``: the case does not apply (the server has no such tool, the era has no
  Roots, no privilege to make a device).

Exit status: 0 when nothing failed and nothing erred, 1 when a case failed, 3 when
a case erred and none failed (2 is left to usage errors, where nothing ran).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

Status = Literal["PASS", "FAIL", "ERROR", "N/A"]
STATUSES: Final[tuple[Status, ...]] = ("PASS", "FAIL", "ERROR", "N/A")

EXIT_PASSED: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_ERROR: Final = 3


@dataclass
class Trials:
    """How long a probabilistic case attacked: ``attempts`` made (of ``planned``), and
    whether one of them got through."""

    attempts: int
    planned: int
    escaped: bool

    @property
    def rate_bound(self) -> float:
        """With 95% confidence, an attempt gets through less often than this (after
        ``attempts`` attempts that all held; the exact binomial bound, 1 - 0.05^(1/n))."""
        return 1.0 - 0.05 ** (1.0 / self.attempts) if self.attempts else 1.0

    def statement(self) -> str:
        """What the attempts prove, in a sentence."""
        if self.escaped:
            return f"got through at attempt {self.attempts} (of {self.planned} planned)"
        said = f"held {self.attempts} attempts"
        if self.attempts < self.planned:
            said += f" (of {self.planned} planned: its time bound ran out)"
        if not self.attempts:
            return said
        return (
            f"{said}: with 95% confidence an attempt gets through less than once in "
            f"{1 / self.rate_bound:,.0f}"
        )


@dataclass
class Result:
    case: str
    status: Status
    reason: str
    seconds: float
    #: For a probabilistic case: how long it attacked and what that proves.
    trials: Trials | None = None


def counts(results: Sequence[Result]) -> dict[Status, int]:
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def summary(results: Sequence[Result]) -> str:
    """``N passed, N failed, N errors, N not applicable``."""
    c = counts(results)
    return f"{c['PASS']} passed, {c['FAIL']} failed, {c['ERROR']} errors, {c['N/A']} not applicable"


def exit_status(results: Sequence[Result]) -> int:
    c = counts(results)
    if c["FAIL"]:
        return EXIT_FAILED
    return EXIT_ERROR if c["ERROR"] else EXIT_PASSED

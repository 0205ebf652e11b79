"""What a server tells its metrics of each tool call: the observer interface.

The session core calls a :class:`CallObserver` once per tool call (:meth:`called`)
and once per refusal (:meth:`refused`); what counts them and how they are shown
(Prometheus, over HTTP) is the transports' business
(:mod:`sandboxfs.transports.metrics`), so a stdio server pays nothing for them.

Nothing a client sends becomes a label: a tool name is one of the served tools or
``"unknown"`` (:func:`tool_label`), an outcome one of :data:`OUTCOMES`, a refusal
reason one of :data:`REASONS` (:func:`refusal_reason`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, Literal, Protocol, final

from sandboxfs.core.errors import AccessDenied, PolicyDenied, SandboxError, TimedOut
from sandboxfs.tools import served_tools

Outcome = Literal["ok", "error"]
Reason = Literal["outside", "policy", "read_only", "timeout"]

OUTCOMES: Final[tuple[Outcome, ...]] = ("ok", "error")
#: Why a call was refused: a path outside every allowed directory (or escaping one),
#: the operator's rules (a policy, --no-xdev), a read-only directory, server or
#: mount, or a filesystem call that did not finish in time.
REASONS: Final[tuple[Reason, ...]] = ("outside", "policy", "read_only", "timeout")
#: The label of a tool name the server does not serve (the name itself is client text).
UNKNOWN_TOOL: Final = "unknown"


def refusal_reason(exc: SandboxError) -> Reason | None:
    """Which kind of refusal an error is, or None when it is no refusal (a missing
    file, a conflict, an invalid argument...)."""
    if isinstance(exc, TimedOut):
        return "timeout"
    if exc.code == "EROFS":
        return "read_only"
    if isinstance(exc, PolicyDenied):
        return "policy"
    if isinstance(exc, AccessDenied):
        return "outside"
    return None


def known_tools() -> frozenset[str]:
    """Every tool sandboxfs has, whatever a server serves: the tool labels' values."""
    every = served_tools(read_only=False, workspaces=True, journal=True)
    return frozenset(spec.name for spec in every)


def tool_label(name: str, known: Collection[str]) -> str:
    """A tool name fit for a label: one of ``known``, else :data:`UNKNOWN_TOOL`."""
    return name if name in known else UNKNOWN_TOOL


class CallObserver(Protocol):
    """Told of every tool call a server answers."""

    def called(self, tool: str, outcome: Outcome, seconds: float, result_bytes: int) -> None:
        """One call answered: its tool (a served tool's name or ``"unknown"``), its
        outcome, how long it took and the size of its result's content."""

    def refused(self, tool: str, reason: Reason) -> None:
        """One call refused, and why."""


@final
class NoMetrics:
    """The observer of a server nobody measures (stdio): does nothing."""

    def called(self, tool: str, outcome: Outcome, seconds: float, result_bytes: int) -> None:
        return None

    def refused(self, tool: str, reason: Reason) -> None:
        return None


NO_METRICS: Final = NoMetrics()

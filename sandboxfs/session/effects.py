"""What a :class:`~sandboxfs.session.protocol.Session` asks its transport to do: the
effects it returns, in order, from each input.  Plain frozen values; the session's
driver (:mod:`sandboxfs.session.driver`) carries them out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, final

JSON = dict[str, Any]


@final
@dataclass(frozen=True, slots=True)
class Send:
    """Write this message to the client."""

    message: JSON


@final
@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a call, as the audit log and the era-specific messages need it."""

    protocol_version: str
    client: str | None = None
    peer: str | None = None


@final
@dataclass(frozen=True, slots=True)
class Call:
    """Run ``method`` (``tools/call`` or ``resources/read``) and report what it came to
    with :meth:`Session.completed` under ``key``.  ``progress`` is the client's
    progress token, if it asked for progress."""

    key: int
    method: str
    params: JSON
    caller: Caller
    progress: str | int | None = None


@final
@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop waiting for the call ``key``: the client cancelled it (it is never answered)."""

    key: int


@final
@dataclass(frozen=True, slots=True)
class StartTimer:
    """Call :meth:`Session.timer_expired` with ``name`` after ``seconds``."""

    name: str
    seconds: float


@final
@dataclass(frozen=True, slots=True)
class OpenRoots:
    """Open the directories of the client's Roots answer and put them in force, then
    call :meth:`Session.roots_settled` with ``generation``."""

    generation: int
    uris: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class KeepRoots:
    """The client's Roots could not be had (``reason``, escaped): keep what is in force."""

    reason: str


@final
@dataclass(frozen=True, slots=True)
class UseCommandLine:
    """An initialized client without Roots: the command-line directories decide."""


@final
@dataclass(frozen=True, slots=True)
class Close:
    """Stop reading: the connection ends (once what is in flight is answered) with
    ``exit_code``."""

    exit_code: int


Effect = Send | Call | Cancel | StartTimer | OpenRoots | KeepRoots | UseCommandLine | Close

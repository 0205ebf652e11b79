"""What the helpers of a call (resources, the journal and the approval gate) may use of
the server that runs them: a structural type, so they need not import the dispatcher
that imports them (no import circle, type-only included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from sandboxfs.session.access import AccessControl, Effective
from sandboxfs.session.approval import Sealer
from sandboxfs.tools import AskRules, Journals, Limits, Sandbox, Watch

T = TypeVar("T")


class HostOptions(Protocol):
    """The server's options a call's helpers read."""

    @property
    def limits(self) -> Limits: ...
    @property
    def journals(self) -> Journals | None: ...
    @property
    def ask(self) -> AskRules | None: ...


class CallHost(Protocol):
    """The server, as a call's helpers see it (``SandboxfsServer`` is one)."""

    @property
    def options(self) -> HostOptions: ...
    @property
    def access(self) -> AccessControl: ...
    @property
    def sealer(self) -> Sealer: ...
    @property
    def session_label(self) -> str | None: ...

    def sandbox(self, effective: Effective) -> Sandbox: ...

    async def bounded(self, fn: Callable[[Watch], T]) -> T: ...

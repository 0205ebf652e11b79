"""How a server makes the sandbox each call works in: everything but the allow-list is
fixed once, by whoever composes the server (the command line), and handed over as a
:class:`Sandboxes` factory, so the session layer never builds a confinement or a
resolver itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

from sandboxfs.core import AllowList, Confinement, Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.revisions import RevisionCache


@final
@dataclass(frozen=True, slots=True)
class Sandboxes:
    """Makes the :class:`Sandbox` of an allow-list: with the server's limits, its shared
    revision cache, ``$HOME`` for ``~`` and its confinement (``--no-xdev``); an inline
    call's sandbox never crosses a mount point (see sandboxfs.core.mounts)."""

    limits: Limits = field(default_factory=Limits)
    revisions: RevisionCache = field(default_factory=RevisionCache)
    no_xdev: bool = False
    home: str | None = None
    #: What every resolution is confined by (``--no-xdev``: no mount crossed).
    confinement: Confinement = field(init=False)
    #: ... and an inline call's, which never crosses a mount point.
    inline_confinement: Confinement = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "confinement", Confinement(no_xdev=self.no_xdev))
        inline = Confinement(no_xdev=self.no_xdev, inline=True)
        object.__setattr__(self, "inline_confinement", inline)

    def make(self, allow: AllowList, *, inline: bool = False) -> Sandbox:
        resolver = Resolver(
            allow,
            symlink_hops=self.limits.symlink_hops,
            confinement=self.inline_confinement if inline else self.confinement,
            home=self.home,
        )
        return Sandbox(resolver, self.limits, self.revisions)

"""What every filesystem operation works with: the resolver, the limits and the
shared cache of file revisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

from sandboxfs.core.resolver import Resolver
from sandboxfs.core.watch import Watch
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.revisions import RevisionCache

if TYPE_CHECKING:
    from sandboxfs.fs.approval import Gate
    from sandboxfs.fs.recording import Recording


@final
@dataclass(frozen=True, slots=True)
class FsContext:
    """One call's view of the filesystem: immutable, shared by the operations it runs."""

    resolver: Resolver
    limits: Limits = field(default_factory=Limits)
    #: Revisions of files already hashed (shared by the server's calls).
    revisions: RevisionCache = field(default_factory=RevisionCache)
    #: The change journal's record of this call (``--journal``), or None.
    journal: Recording | None = None
    #: Who approves changes to chosen paths (``--ask``), or None.
    approval: Gate | None = None

    @property
    def watch(self) -> Watch:
        return self.resolver.watch

"""What every filesystem operation works with (:class:`FsContext`: the resolver, the
limits and the shared cache of file revisions) and what a mutation reports
(:class:`Change`: it happened, what it left, and anything that failed after the change
was made)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

from sandboxfs.core import Resolver, Watch
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


@final
@dataclass(frozen=True, slots=True)
class Change:
    """A mutation that happened.  (One that did not raises SandboxError instead.)"""

    #: The revision of what the path holds now; None when it cannot be told here.
    revision: str | None = None
    #: The size of the file written, appended to or copied.
    size: int | None = None
    #: How many entries were created or removed.
    count: int = 1
    #: A step after the change that failed (flushing to disk): the change stands.
    warning: str | None = None

"""Where a journaled step is now: its place found among the allowed directories in
force (by the allowed directory's real path), as a path the resolver takes back to
exactly those names.  An undo, a recovery and a review all go through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import join
from sandboxfs.fs.context import FsContext

JSON = dict[str, Any]


class UndoRefused(SandboxError):
    """A change cannot be undone (it changed since, or was not kept); nothing was done."""

    default_code = "ESTALE"


@final
@dataclass(frozen=True, slots=True)
class Place:
    """A journaled place, found among the allowed directories in force."""

    root: Root
    rel: tuple[str, ...]

    @property
    def path(self) -> str:
        """An absolute request path naming exactly this place (quoted where needed, so
        every name stands for its own bytes)."""
        if not self.rel:
            return quote_path(self.root.path)
        return quote_path(join((self.root.path.rstrip("/"), *self.rel)))

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return self.root.path, self.rel


def find_place(ctx: FsContext, value: JSON) -> Place:
    """The place a step names, in the allowed directories in force.  UndoRefused if the
    directory it was in is not served now."""
    wanted = str(value["root"])
    rel = tuple(str(name) for name in value["rel"])
    for root in ctx.resolver.allow.roots:
        if wanted in (root.path, root.given):
            return Place(root, rel)
    shown = quote_path(join((wanted, *rel)))
    raise UndoRefused(
        f"Cannot undo the change to {shown}: the directory it was made in is not served now",
        "EACCES",
    )


def shown(value: JSON) -> str:
    """A step's place as messages show it: the absolute path it resolved to."""
    return quote_path(join((str(value["root"]).rstrip("/"), *(str(n) for n in value["rel"]))))

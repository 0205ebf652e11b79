"""Allowed directories: each opened once as an ``O_PATH`` descriptor and kept.

A :class:`Root` is the directory as it was when it was opened: renaming or
replacing the directory afterwards does not redirect the server, because every
resolution starts from the descriptor, never from the name.  An
:class:`AllowList` is immutable; a Roots update builds a new one and swaps it.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import final

from sandboxfs.core.pathnames import normalize_absolute, relative_to
from sandboxfs.core.policy import OPEN, Policy


@final
class Root:
    """One allowed directory: an ``O_PATH`` directory fd plus the names it answers to.

    ``path`` is the directory's real (symlink-free) path when it was opened,
    ``given`` the form the operator or client named, ``policy`` what may be seen
    and changed beneath it (enforced by the chokepoint).  The descriptor is closed
    when the last reference goes away, so calls in flight keep it usable after
    a Roots update has dropped it.
    """

    __slots__ = ("__weakref__", "_finalizer", "fd", "given", "path", "policy")

    def __init__(self, fd: int, path: str, given: str, policy: Policy = OPEN) -> None:
        self.fd = fd
        self.path = path
        self.given = given
        self.policy = policy
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, given: str, policy: Policy = OPEN) -> Root:
        """Open ``given`` (absolute; symlinks followed) as an allowed directory.

        Raises OSError if it does not exist or is not a directory.
        """
        given = normalize_absolute(given)
        real = os.path.realpath(given, strict=True)
        fd = os.open(given, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            opened, named = os.fstat(fd), os.stat(real)
            if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
                raise OSError(f"{given} changed while it was being opened")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, real, given, policy)

    def names(self) -> tuple[str, ...]:
        """The forms this root answers to: as given, and resolved if different."""
        return (self.given,) if self.given == self.path else (self.given, self.path)

    def __repr__(self) -> str:
        return f"Root({self.given!r}, fd={self.fd})"


@final
@dataclass(frozen=True)
class AllowList:
    """The allowed directories in force, in the order they were given."""

    roots: tuple[Root, ...]

    @classmethod
    def of(cls, roots: Iterable[Root]) -> AllowList:
        return cls(tuple(roots))

    @property
    def empty(self) -> bool:
        return not self.roots

    @property
    def base(self) -> str | None:
        """Where relative request paths resolve: the first allowed directory."""
        return self.roots[0].given if self.roots else None

    def display(self) -> list[str]:
        """Every allowed directory, each in its given and its resolved form."""
        seen: list[str] = []
        for root in self.roots:
            for name in root.names():
                if name not in seen:
                    seen.append(name)
        return seen

    def map(self, absolute: str) -> tuple[Root, tuple[str, ...]] | None:
        """The root a normalized absolute path lies in, and the components below it.

        Purely lexical, with a separator boundary.  When several allowed
        directories contain the path, the outermost (shortest name) wins, so a
        relative symlink may use all of it.
        """
        best: tuple[int, Root, tuple[str, ...]] | None = None
        for root in self.roots:
            for name in root.names():
                below = relative_to(absolute, name)
                if below is not None and (best is None or len(name) < best[0]):
                    best = (len(name), root, below)
        return None if best is None else (best[1], best[2])


def nest_policies(roots: Sequence[Root]) -> None:
    """Give each of ``roots`` (just opened, not yet serving) the rules of every other
    one that holds it or that it holds, applied where that one lies (the ``also`` of
    :class:`~sandboxfs.core.policy.Policy`): nested allowed directories name one
    file by two paths, and either may be the one a request resolves beneath, so a
    path is judged by the rules of every allowed directory it lies in.  A root that
    nests with no other keeps its policy.  Calling it again gives the same policies."""
    own = [(root.path, replace(root.policy, also=())) for root in roots]
    for root, (path, policy) in zip(roots, own, strict=True):
        also: list[tuple[tuple[str, ...], Policy]] = []
        for other_path, other in own:
            if (other_path, other) == (path, policy) or not other.active:
                continue  # itself (or the same directory given twice), or no rules
            if (inside := relative_to(path, other_path)) is not None:  # it holds this one
                also.append(((), other.beneath(inside)))
            elif (holds := relative_to(other_path, path)) is not None:  # this one holds it
                also.append((holds, other))
        root.policy = replace(policy, also=tuple(also)) if also else policy

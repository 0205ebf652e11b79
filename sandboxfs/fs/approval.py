"""Approval for chosen paths (``--ask PATTERN``): a change there needs the user's yes.

A :class:`Gate` is consulted by every changing operation at the point where it
holds the entry it will change (the same points the change journal captures
at, :mod:`sandboxfs.fs.journaling`), before anything changes: with the place's
canonical location (so no symlink or other name of a path escapes its rule),
what the change is, and the bytes before and after.  When a place matches an
``ask`` pattern, the gate's ``ask`` (given by the session: it asks the client's
user through MCP elicitation) must return; it raises :class:`NotApproved` for a
no, no answer, or a client that cannot ask, and the change is not made.

Patterns are the policy's (:mod:`sandboxfs.core.policy`): globs relative to the
allowed directory, a name without ``/`` matching at any depth, a directory
matching everything below it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

from sandboxfs.core.chokepoint import READ_FLAGS, ParentDir, same_file
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import join
from sandboxfs.core.policy import Policy
from sandboxfs.fs.revisions import SameBytes

if TYPE_CHECKING:
    from sandboxfs.fs.context import FsContext
    from sandboxfs.fs.recording import Where


class NotApproved(SandboxError):
    """The user did not approve a change (or could not be asked); nothing was changed."""

    default_code = "EACCES"


@final
@dataclass(frozen=True, slots=True)
class Touched:
    """One place a change touches, as the user is shown it: its path, and its bytes
    before and after (None: not a file's content, or not there)."""

    path: str
    before: bytes | None = None
    after: bytes | None = None


@final
@dataclass(frozen=True, slots=True)
class Question:
    """What the user is asked to approve: the change in words, and the places."""

    what: str
    places: tuple[Touched, ...]

    def digest(self) -> str:
        """Names this exact change (its words, paths and bytes): an approval given for
        it is for nothing else."""
        h = hashlib.sha256(self.what.encode("utf-8", "surrogateescape"))
        for place in self.places:
            h.update(b"\0" + place.path.encode("utf-8", "surrogateescape"))
            for side in (place.before, place.after):
                h.update(b"\0-" if side is None else b"\0" + hashlib.sha256(side).digest())
        return h.hexdigest()


Ask = Callable[[Question], None]


@final
class AskRules:
    """Which places need approval: patterns for every allowed directory, and more for
    some of them (by real path)."""

    def __init__(
        self, everywhere: tuple[str, ...] = (), per_directory: Mapping[str, tuple[str, ...]] = {}
    ) -> None:
        self.everywhere = everywhere
        self.per_directory = dict(per_directory)
        self._all = Policy(protect=everywhere)
        self._per = {
            path: Policy(protect=(*everywhere, *patterns))
            for path, patterns in self.per_directory.items()
        }

    @property
    def active(self) -> bool:
        return bool(self.everywhere or any(self.per_directory.values()))

    def matches(self, root: str, rel: tuple[str, ...]) -> bool:
        return (self._per.get(root) or self._all).verdict(rel).protected


@final
@dataclass(frozen=True)
class Gate:
    """The rules, and how to ask (one call's: the session's way of asking)."""

    rules: AskRules
    ask: Ask

    def check(self, places: list[tuple[str, tuple[str, ...]]], question: Question) -> None:
        """Ask about ``question`` if any of ``places`` (real root path, canonical names)
        needs approval; raise NotApproved unless the user says yes."""
        if any(self.rules.matches(root, rel) for root, rel in places):
            self.ask(question)


# -- what the operations call ---------------------------------------------------------


def shown(place: Where) -> str:
    """A place as the user is shown it: the absolute path it resolved to."""
    return quote_path(join((place.root.rstrip("/"), *place.rel)))


def approve(
    ctx: FsContext, what: str, places: list[tuple[Where, bytes | None, bytes | None]]
) -> None:
    """Ask the user, if a place needs it (``--ask``): raises NotApproved for a no."""
    gate = ctx.approval
    if gate is None:
        return
    question = Question(
        what, tuple(Touched(shown(place), before, after) for place, before, after in places)
    )
    gate.check([(place.root, place.rel) for place, _, _ in places], question)


def current_bytes(
    ctx: FsContext, parent: ParentDir, st: os.stat_result | None, expected: str | SameBytes | None
) -> bytes | None:
    """What the file holds now, for the user to see what a write replaces (None: nothing
    there, not a regular file, or over the edit limit)."""
    if isinstance(expected, SameBytes):
        return expected.data
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > ctx.limits.edit_bytes:
        return None
    fd = parent.open(READ_FLAGS)
    try:
        if not same_file(os.fstat(fd), st):
            return None
        chunks = []
        while chunk := os.read(fd, 1024 * 1024):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)

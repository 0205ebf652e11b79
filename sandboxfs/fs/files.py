"""Regular files open for reading, and the revisions of what a handle names.

Guarantee: a file is opened for reading only after its ``O_PATH`` handle showed a
regular file, and the descriptor read from is the same inode (checked by
:meth:`~sandboxfs.core.chokepoint.Handle.reopen`): FIFOs, sockets and devices are
never opened for reading.
"""

from __future__ import annotations

import io
import os
import stat
from typing import Final, final

from sandboxfs.core.chokepoint import READ_FLAGS, Directory, Handle
from sandboxfs.core.errors import Conflict, LimitExceeded, NotFound
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import require_regular
from sandboxfs.fs.revisions import ABSENT, file_revision, stat_key
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below

#: How often a read resolves its path again when the file is replaced meanwhile.
_OPEN_ATTEMPTS: Final = 8


@final
class OpenFile:
    """A regular file open for reading; closes its descriptor on exit."""

    __slots__ = ("file", "stat")

    def __init__(self, fd: int, st: os.stat_result) -> None:
        self.file = io.FileIO(fd, "rb", closefd=True)
        self.stat = st

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    @property
    def fd(self) -> int:
        return self.file.fileno()


def open_regular(handle: Handle) -> OpenFile:
    """The regular file ``handle`` names, opened for reading; anything else is refused
    without being opened.  Conflict if the name now holds another object."""
    require_regular(handle.stat, handle.path)
    fd = handle.reopen(READ_FLAGS)
    return OpenFile(fd, os.fstat(fd))


def open_file(ctx: FsContext, path: str) -> OpenFile:
    """Open the regular file ``path`` for reading (symlinks inside followed).

    A file replaced between the resolution and the open (another writer's atomic
    replace) is resolved again: what is read is what the name holds now.
    """
    for attempt in range(_OPEN_ATTEMPTS):
        with ctx.resolver.resolve(path) as handle, ctx.watch.step(path):
            try:
                return open_regular(handle)
            except Conflict:
                if attempt == _OPEN_ATTEMPTS - 1:
                    raise
    raise AssertionError("unreachable")


def cached_file_revision(ctx: FsContext, fd: int, st: os.stat_result, *, fresh: bool) -> str | None:
    """The revision of an open regular file (from the cache when its ``fstat`` is
    unchanged, unless ``fresh``); None if it is larger than the edit limit."""
    if st.st_size > ctx.limits.edit_bytes:
        return None
    key = stat_key(st)
    if not fresh and (known := ctx.revisions.get(key)) is not None:
        return known
    revision = file_revision(fd, st.st_size)
    if stat_key(os.fstat(fd)) == key:
        ctx.revisions.put(key, revision)
    return revision


def revision_of_open(
    ctx: FsContext,
    fd: int,
    st: os.stat_result,
    directory: Directory | None,
    path: str,
    *,
    fresh: bool,
) -> str | None:
    """A regular file's or a (readable) directory's revision.  ``fresh`` (for a
    conditional mutation): hash the file afresh, and describe a tree of up to the
    walk limit, else refuse; otherwise a file may come from the cache and a tree
    larger than the revision budget has no revision (None)."""
    if stat.S_ISREG(st.st_mode):
        return cached_file_revision(ctx, fd, st, fresh=fresh)
    if directory is None:
        return None
    budget = ctx.limits.walk_entries if fresh else ctx.limits.revision_entries
    try:
        return tree_revision_below(ctx, directory, path, budget)
    except TooManyEntries:
        if not fresh:
            return None
        raise LimitExceeded(
            f"More than {budget} entries below {path}; its revision cannot be computed"
        ) from None


def revision_of_handle(ctx: FsContext, handle: Handle, *, fresh: bool = False) -> str | None:
    """The revision of what ``handle`` names: a file's bytes, a directory's tree; None
    for anything else (and see :func:`revision_of_open`)."""
    if handle.is_regular:
        fd = handle.reopen(READ_FLAGS)
        try:
            return cached_file_revision(ctx, fd, os.fstat(fd), fresh=fresh)
        finally:
            os.close(fd)
    if handle.is_dir:
        with handle.directory() as directory:
            return revision_of_open(
                ctx, directory.fd, handle.stat, directory, handle.path, fresh=fresh
            )
    return None


def revision(ctx: FsContext, path: str, *, fresh: bool = False) -> str | None:
    """The revision of what ``path`` names (symlinks inside followed); ``absent`` if
    nothing is there."""
    try:
        handle = ctx.resolver.resolve(path)
    except NotFound:
        return ABSENT
    with handle, ctx.watch.step(path):
        return revision_of_handle(ctx, handle, fresh=fresh)

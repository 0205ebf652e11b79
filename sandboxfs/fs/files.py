"""Regular files open for reading, and the revisions of what a handle names.

Guarantees: a file is opened for reading only after its ``O_PATH`` handle showed a
regular file, and the descriptor read from is the same inode (checked by
:meth:`~sandboxfs.core.chokepoint.Handle.reopen`): FIFOs, sockets and devices are
never opened for reading.  Every read of an open file (:class:`FileReader`) is a
step of the call's watch, and every ``OSError`` it meets (``EIO`` from a failing
disk, a FUSE or NFS server, a procfs file) is turned at the one gate
(:meth:`~sandboxfs.core.chokepoint.Confinement.error`) into the client-safe error
naming the file as the client gave it: no read lets an ``OSError`` out.
"""

from __future__ import annotations

import io
import os
import stat
from typing import Final, final

from sandboxfs.core import (
    NO_WATCH,
    READ_FLAGS,
    Confinement,
    Conflict,
    Directory,
    Handle,
    LimitExceeded,
    NotFound,
    SandboxError,
    Watch,
)
from sandboxfs.fs.entries import require_regular
from sandboxfs.fs.operation import FsContext
from sandboxfs.fs.revisions import ABSENT, file_revision, stat_key
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below

#: How often a read resolves its path again when the file is replaced meanwhile.
_OPEN_ATTEMPTS: Final = 8


@final
class FileReader:
    """The reads of one open regular file: each a step of the call's ``watch``, each
    ``OSError`` raised as the client-safe error naming ``path`` (as the client gave
    it).  Owns the descriptor."""

    __slots__ = ("_confinement", "_io", "_watch", "path")

    def __init__(self, fd: int, path: str, confinement: Confinement, watch: Watch) -> None:
        self._io = io.FileIO(fd, "rb", closefd=True)
        self.path = path
        self._confinement = confinement
        self._watch = watch

    def error(self, exc: OSError) -> SandboxError:
        """The client-safe error for an OSError met while reading this file."""
        return self._confinement.error(exc, self.path)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from the file position (all that is left if negative)."""
        with self._watch.step(self.path):
            try:
                return self._io.read(size) or b""
            except OSError as exc:
                raise self.error(exc) from None

    def readinto(self, buffer: memoryview | bytearray) -> int:
        """Read into ``buffer`` from the file position; how many bytes came."""
        with self._watch.step(self.path):
            try:
                return self._io.readinto(buffer) or 0
            except OSError as exc:
                raise self.error(exc) from None

    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; the file position does not move."""
        with self._watch.step(self.path):
            try:
                return os.pread(self._io.fileno(), size, offset)
            except OSError as exc:
                raise self.error(exc) from None

    def tell(self) -> int:
        try:
            return self._io.tell()
        except OSError as exc:
            raise self.error(exc) from None

    def fileno(self) -> int:
        return self._io.fileno()

    def close(self) -> None:
        self._io.close()


@final
class OpenFile:
    """A regular file open for reading (``file``: its gated reads) and its ``fstat``
    when opened; closes its descriptor on exit.  ``path`` names it in the client's
    terms, for errors."""

    __slots__ = ("file", "stat")

    def __init__(
        self,
        fd: int,
        st: os.stat_result,
        path: str,
        *,
        confinement: Confinement | None = None,
        watch: Watch = NO_WATCH,
    ) -> None:
        self.file = FileReader(fd, path, confinement or Confinement(), watch)
        self.stat = st

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    @property
    def fd(self) -> int:
        return self.file.fileno()

    @property
    def path(self) -> str:
        return self.file.path


def open_regular(handle: Handle, watch: Watch = NO_WATCH) -> OpenFile:
    """The regular file ``handle`` names, opened for reading (its reads steps of
    ``watch``); anything else is refused without being opened.  Conflict if the
    name now holds another object."""
    require_regular(handle.stat, handle.path)
    fd = handle.reopen(READ_FLAGS)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    return OpenFile(fd, st, handle.path, confinement=handle.confinement, watch=watch)


def open_file(ctx: FsContext, path: str) -> OpenFile:
    """Open the regular file ``path`` for reading (symlinks inside followed).

    A file replaced between the resolution and the open (another writer's atomic
    replace) is resolved again: what is read is what the name holds now.
    """
    for attempt in range(_OPEN_ATTEMPTS):
        with ctx.resolver.resolve(path) as handle, ctx.watch.step(path):
            try:
                return open_regular(handle, ctx.watch)
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


def open_file_revision(ctx: FsContext, f: OpenFile) -> str | None:
    """:func:`cached_file_revision` of an open file, its reads a step of the call's
    watch and its OSError the client-safe error naming the file."""
    with ctx.watch.step(f.path):
        try:
            return cached_file_revision(ctx, f.fd, f.stat, fresh=False)
        except OSError as exc:
            raise f.file.error(exc) from None


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

"""Compare-and-mutate: a mutation that happens only if the entry is still what the
client last saw.

:func:`guarded` holds one leaf of a :class:`~sandboxfs.core.chokepoint.ParentDir`
steady: with an expectation (a revision, or the exact bytes of a regular file)
it checks, under an exclusive lock on the entry that lasts for the whole block,
that the entry still matches.  A mismatch raises Conflict before anything is
changed.  The lock is an OFD lock (or ``flock`` for what cannot be opened for
writing), so two sandboxfs processes on one directory exclude each other.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from sandboxfs.core.chokepoint import LIST_FLAGS, READ_FLAGS, Directory, ParentDir, same_file
from sandboxfs.core.errors import Conflict, NotARegularFile
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.files import revision_of_open
from sandboxfs.fs.revisions import (
    ABSENT,
    SameBytes,
    check,
    content_revision,
    exclusive_lock,
    holds_exactly,
)

#: How often a conditional mutation looks again when the entry changes under it.
GUARD_ATTEMPTS: Final = 8


def changed_after_read(path: str) -> Conflict:
    return Conflict(
        f"Revision mismatch for {path}: it changed after it was read; nothing was changed. "
        "Read it again and retry."
    )


def _check(expected: str | SameBytes, current: str, path: str) -> None:
    """Raise Conflict unless an entry whose revision is ``current`` meets ``expected``
    (exact bytes are met only by a regular file, compared under the lock)."""
    if isinstance(expected, SameBytes):
        raise changed_after_read(path)
    check(expected, current, path)


@contextmanager
def guarded(
    ctx: FsContext, parent: ParentDir, expected: str | SameBytes | None
) -> Iterator[os.stat_result | None]:
    """Hold ``parent``'s leaf steady for a compare-and-mutate.

    Yields its ``lstat`` (None if absent).  With ``expected``, first checks under
    an exclusive lock on the entry (released after the block) that it still
    matches; a mismatch raises Conflict and nothing changes.  With the change
    journal or --ask on, the lock is held even without ``expected``.
    """
    path = parent.path
    if expected is None and ctx.journal is None and ctx.approval is None:
        yield parent.lstat()
        return
    # With the change journal on, or --ask, every change holds the lock (an expectation of
    # None checks nothing), so what the journal keeps, and what the user is shown, is
    # what the change replaces.
    for _ in range(GUARD_ATTEMPTS):
        st = parent.lstat()
        if st is None:
            if expected is not None:
                _check(expected, ABSENT, path)
            yield None
            return
        if expected is None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            yield st  # nothing to lock (a symlink, a special file): nothing is kept of it
            return
        if stat.S_ISLNK(st.st_mode):
            assert expected is not None
            try:
                target = os.fsencode(parent.readlink())
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOENT):
                    continue  # no longer a symlink: look again
                raise
            _check(expected, content_revision(target), path)
            yield st
            return
        fd = _open_to_lock(parent, st)
        if fd is None:
            continue
        try:
            with exclusive_lock(fd, path):
                now = parent.lstat()
                opened = os.fstat(fd)
                if now is None or not same_file(now, opened):
                    continue  # replaced while we waited for the lock: look again
                if expected is not None:
                    _check_locked(ctx, parent, fd, opened, expected)
                yield now
                return
        finally:
            os.close(fd)
    raise Conflict(f"{path} kept changing; try again")


def _check_locked(
    ctx: FsContext,
    parent: ParentDir,
    fd: int,
    opened: os.stat_result,
    expected: str | SameBytes,
) -> None:
    """Raise Conflict unless the locked entry open at ``fd`` meets ``expected``."""
    path = parent.path
    if isinstance(expected, SameBytes):
        if not (stat.S_ISREG(opened.st_mode) and holds_exactly(fd, expected.data)):
            raise changed_after_read(path)
        return
    directory = None
    if stat.S_ISDIR(opened.st_mode):
        directory = Directory(fd, parent.location, path, parent.dir.confinement, readable=True)
    current = revision_of_open(ctx, fd, opened, directory, path, fresh=True)
    check(expected, current or "unknown", path)


def _open_to_lock(parent: ParentDir, st: os.stat_result) -> int | None:
    """A descriptor of the entry to lock (None if it vanished or changed kind: look
    again).  Raises OSError for what the kernel refuses (a mount point under
    ``--no-xdev`` among them: its content is never hashed)."""
    if stat.S_ISDIR(st.st_mode):
        attempts = [LIST_FLAGS]
    elif stat.S_ISREG(st.st_mode):
        # Writable if we may (an OFD lock needs it), else readable (flock then).
        attempts = [os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY, READ_FLAGS]
    else:
        raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {parent.path}")
    for flags in attempts:
        try:
            return parent.open(flags)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, InterruptedError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None  # became a symlink: look again
            if exc.errno != errno.EACCES or flags == attempts[-1]:
                raise
    return None

"""Creating and writing: new files, atomic replacement, appends, directories.

Guarantees:

* A new or replaced file is built out of sight and published with one rename
  or link (:mod:`sandboxfs.fs.staging`): a reader sees the old or the new
  content, never a mix, and a failed write leaves the old file untouched.
  Replacing breaks hard links by design, so a write never reaches another name
  of the file.
* An append happens in place only on a file with a single name, the one inside
  (:func:`only_name_is`).  Space is reserved before anything is written, and a
  write that still fails part-way is cut back: a failed append leaves the file
  as it was.
* Mutations act on one leaf of a :class:`~sandboxfs.core.chokepoint.ParentDir`;
  a symlink leaf is followed (inside only) by reading its text once.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable
from typing import Final

from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint import READ_FLAGS, ParentDir, same_file
from sandboxfs.core.errors import (
    AlreadyExists,
    Conflict,
    HardLinked,
    PermissionDenied,
    SandboxError,
    Unsupported,
)
from sandboxfs.core.policy import PolicyRefusal
from sandboxfs.fs import journaling
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import require_regular
from sandboxfs.fs.files import cached_file_revision
from sandboxfs.fs.guard import GUARD_ATTEMPTS, guarded
from sandboxfs.fs.metadata import carry_owner_and_mode, copy_xattrs
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.revisions import ABSENT, SameBytes
from sandboxfs.fs.staging import StagedFile, after_change, open_for_sync, sync_and_close, write_all

#: Errors of fallocate that mean "this filesystem cannot reserve space": the append
#: goes ahead unreserved (and is cut back if it fails part-way).
_NO_RESERVATION: Final = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV})


def stage(
    parent: ParentDir, fill: Callable[[int], None], *, replace: bool
) -> tuple[Change, os.stat_result]:
    """Prepare a new file in ``parent``'s directory with ``fill`` and publish it as
    the leaf (over what is there with ``replace``, else only if the name is free:
    AlreadyExists).  Returns the change and the new file's ``fstat``."""
    staged = StagedFile(parent.dir, parent.leaf)
    try:
        fill(staged.fd)
        try:
            warning = (
                staged.publish_over(parent.leaf) if replace else staged.publish_new(parent.leaf)
            )
        except FileExistsError:
            raise AlreadyExists(f"EEXIST: destination already exists: {parent.path}") from None
        st = os.fstat(staged.fd)  # as published (the rename changed its ctime)
        return Change(size=st.st_size, warning=warning), st
    finally:
        staged.close()


def create_file(ctx: FsContext, path: str, data: bytes) -> Change:
    """Create ``path`` with ``data``; fails if anything exists there already.  The
    file appears complete or not at all."""
    with ctx.resolver.parent(path) as parent:
        before = journaling.before_write(ctx, parent, None, None, data)
        change, st = stage(parent, lambda fd: write_all(fd, data), replace=False)
        journaling.wrote(ctx, before, st, len(data))
        return change


def replace_file(
    ctx: FsContext,
    path: str,
    data: bytes,
    *,
    expected: str | SameBytes | None = None,
    revision: Callable[[], str] | None = None,
) -> Change:
    """Write ``data`` to ``path`` atomically, creating it if missing.

    A symlink inside the allowed directories is written through.  The old file's
    permissions (never setuid/setgid), owner where permitted and extended
    attributes are kept.  With ``expected``, the file must still have that
    revision (``absent``: must not exist) or hold exactly those bytes, checked
    under a lock; otherwise Conflict is raised and nothing changes.  ``revision``
    gives ``data``'s revision if the caller computes it anyway (the journal then
    does not hash it again).
    """
    resolver = ctx.resolver
    with (
        resolver.follow_leaf(resolver.parent(path)) as parent,
        guarded(ctx, parent, expected) as st,
    ):
        before = journaling.before_write(ctx, parent, st, expected, data, revision=revision)
        if st is None:
            # With "absent" expected (or a journal, which kept nothing there), it must
            # still be absent when published.
            replace = expected is None and before is None
            try:
                change, new = stage(parent, lambda fd: write_all(fd, data), replace=replace)
            except AlreadyExists:
                raise Conflict(f"Revision mismatch for {path}: it was created meanwhile") from None
            journaling.wrote(ctx, before, new, len(data))
            return change
        old_fd, old_stat = _open_existing_for_replace(parent)
        try:

            def fill(fd: int) -> None:
                carry_owner_and_mode(old_stat, fd)
                copy_xattrs(old_fd, fd)
                write_all(fd, data)

            change, new = stage(parent, fill, replace=True)
        finally:
            os.close(old_fd)
        journaling.wrote(ctx, before, new, len(data))
        return change


def _open_existing_for_replace(parent: ParentDir) -> tuple[int, os.stat_result]:
    """The file about to be replaced, opened for writing (which also proves we may)."""
    path = parent.path
    st = parent.lstat()
    if st is None:
        raise Conflict(f"The file was removed while it was being written; try again: {path}")
    require_regular(st, path)
    try:
        fd = parent.open(os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except PolicyRefusal:
        raise  # the policy's own reason is the message
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise PermissionDenied(
                f"EACCES: permission denied (the file is read-only): {path}", "EACCES"
            ) from None
        if exc.errno == errno.ELOOP:
            raise Conflict(
                f"The file changed while it was being written; try again: {path}"
            ) from None
        raise
    opened = os.fstat(fd)
    if not (same_file(opened, st) and stat.S_ISREG(opened.st_mode)):
        os.close(fd)
        raise Conflict(f"The file changed while it was being written; try again: {path}")
    return fd, opened


# -- appending -------------------------------------------------------------------


def append_file(ctx: FsContext, path: str, data: bytes, *, expected: str | None = None) -> Change:
    """Append ``data`` to ``path`` in place, creating it if missing.

    Refused on a file with more than one hard link: appending would change the
    file at its other names too, possibly outside the allowed directories.
    """
    resolver = ctx.resolver
    with (
        resolver.follow_leaf(resolver.parent(path)) as parent,
        guarded(ctx, parent, expected) as st,
    ):
        if st is not None:
            require_regular(st, path)
        before = journaling.before_append(ctx, parent, st)
        exclusive = expected == ABSENT or (before is not None and st is None)
        for _ in range(GUARD_ATTEMPTS):
            sync_fd = open_for_sync(parent.dir) if st is None else None
            try:
                fd = _open_for_append(parent, exclusive=exclusive)
            except BaseException:
                if sync_fd is not None:
                    os.close(sync_fd)
                raise
            exclusive = False  # created now, or seen: never "created meanwhile" again
            try:
                if not only_name_is(fd, parent):
                    continue
                _append(fd, data, path)
                warning = after_change("flushing the file to disk", functools.partial(os.fsync, fd))
                warning = sync_and_close(sync_fd) or warning
                sync_fd = None
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
                if sync_fd is not None:
                    os.close(sync_fd)
            change = Change(revision=_revision_of_leaf(ctx, parent), size=size, warning=warning)
            journaling.appended(ctx, before, change, created=st is None)
            return change
        raise Conflict(f"{path} kept changing while it was being opened; try again")


def _open_for_append(parent: ParentDir, *, exclusive: bool) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
    if exclusive:
        flags |= os.O_EXCL
    try:
        return parent.open(flags, mode=0o666)
    except FileExistsError:
        raise Conflict(f"Revision mismatch for {parent.path}: it was created meanwhile") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Conflict(f"The file changed while it was being opened: {parent.path}") from None
        raise


def _append(fd: int, data: bytes, path: str) -> None:
    """Append all of ``data`` or nothing: space is reserved first (ENOSPC then changes
    nothing), and bytes a failing write left are cut off again."""
    end = os.fstat(fd).st_size
    try:
        syscalls.fallocate(fd, syscalls.FALLOC_FL_KEEP_SIZE, end, len(data))
    except OSError as exc:
        if exc.errno not in _NO_RESERVATION:
            raise
    view = memoryview(data)
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, view[written:])
    except OSError as exc:
        if written:
            _cut_back(fd, written, exc, path)
        raise


def _cut_back(fd: int, written: int, failure: OSError, path: str) -> None:
    """Remove the ``written`` bytes a failed append left at the end, if nobody has
    appended after them; otherwise say exactly what was left."""
    position = os.lseek(fd, 0, os.SEEK_CUR)  # just past our bytes (O_APPEND)
    try:
        if os.fstat(fd).st_size == position:
            os.ftruncate(fd, position - written)
            return
    except OSError:
        pass
    code = errno.errorcode.get(failure.errno or 0, "EIO")
    raise SandboxError(
        f"{code}: the append failed after {written} of its bytes were written, and they "
        f"could not be removed again (the file changed meanwhile): {path}",
        code,
    ) from None


def rename_barrier(parent: ParentDir) -> bool:
    """Rename the leaf onto itself with ``RENAME_NOREPLACE``: that takes the
    directory's lock, so an unlink under way there finishes first.  False if the
    name is gone by then."""
    try:
        parent.rename_to(parent, syscalls.RENAME_NOREPLACE)
    except FileExistsError:
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise Unsupported(
                f"This filesystem cannot rename without replacing, so sandboxfs cannot "
                f"append in place safely: {parent.path}. Use write_file instead."
            ) from None
        raise
    return True


def only_name_is(fd: int, parent: ParentDir) -> bool:
    """Whether the open file's one and only name is ``parent``'s leaf.

    Names cannot be read atomically, so the check is layered:

    1. The name lookup is bracketed by ``fstat``s of the file (one link, same
       ctime) and of the directory (same ctime and mtime): a link or unlink in
       between changes them (Linux records the change at fine granularity once
       the time has been queried).
    2. A lookup can still see a name whose unlink is under way (the directory
       entry lingers until the unlink returns, after the link count dropped).
       So :func:`rename_barrier` renames the name onto itself, which waits for
       any unlink in progress and fails if the name is gone.  Then the file must
       still have one link and the same ctime.

    False means "look again"; a file that really has other names raises HardLinked.
    """
    path = parent.path
    dir_before = parent.dir.stat()
    first = os.fstat(fd)
    require_regular(first, path)
    named = parent.lstat()
    last = os.fstat(fd)
    dir_after = parent.dir.stat()
    same_name = named is not None and same_file(named, first)
    if max(first.st_nlink, last.st_nlink) > 1 and same_name:
        raise HardLinked(
            f"Refusing to append in place: the file has {last.st_nlink} hard links, so the "
            f"change would also appear at its other names: {path}. Use write_file to "
            "replace it with a file of its own."
        )
    if not (
        same_name
        and first.st_nlink == last.st_nlink == 1
        and first.st_ctime_ns == last.st_ctime_ns
        and dir_before.st_ctime_ns == dir_after.st_ctime_ns
        and dir_before.st_mtime_ns == dir_after.st_mtime_ns
    ):
        return False
    if not rename_barrier(parent):
        return False
    final = os.fstat(fd)
    return final.st_nlink == 1 and final.st_ctime_ns == first.st_ctime_ns


def _revision_of_leaf(ctx: FsContext, parent: ParentDir) -> str | None:
    """The revision of the regular file a mutation just left at ``parent``'s leaf,
    read through a new descriptor of it; None when it cannot be told (the change
    stands either way)."""
    try:
        fd = parent.open(READ_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return cached_file_revision(ctx, fd, st, fresh=False) if stat.S_ISREG(st.st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)

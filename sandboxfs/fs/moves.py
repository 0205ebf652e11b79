"""Moving, copying and removing: each acts on leaves of opened parent directories.

Guarantees: nothing is ever overwritten (renames use ``RENAME_NOREPLACE``, copies
publish under a free name only); symlinks are moved and removed as links, never
followed; a copy appears complete or not at all.  A move across filesystems is a
copy then a removal of the source; if the source cannot be removed (or changed
meanwhile) the copy is taken back, so the move either happened or left no
trace.  A recursive removal that fails part-way says how much it removed.
"""

from __future__ import annotations

import errno
import logging
import os
import stat

from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir, same_file
from sandboxfs.core.errors import (
    AlreadyExists,
    Conflict,
    DirectoryNotEmpty,
    LimitExceeded,
    NotARegularFile,
    NotFound,
    SandboxError,
    Unsupported,
)
from sandboxfs.fs import journaling
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import read_entries, require_regular
from sandboxfs.fs.files import cached_file_revision, revision_of_handle
from sandboxfs.fs.guard import guarded
from sandboxfs.fs.metadata import SAFE_MODE_BITS, copy_xattrs
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.revisions import ABSENT, check
from sandboxfs.fs.staging import CopyProgress, copy_contents, open_for_sync, sync_and_close
from sandboxfs.fs.writes import stage

log = logging.getLogger(__name__)


def _check_destination(dst: ParentDir, expected: str | None) -> os.stat_result | None:
    there = dst.lstat()
    if expected is not None:
        check(expected, ABSENT if there is None else "present", dst.path)
    return there


def rename(
    ctx: FsContext,
    source: str,
    destination: str,
    *,
    expected: str | None = None,
    expected_destination: str | None = None,
) -> Change:
    """Move ``source`` to ``destination``, never replacing anything there.

    Symlinks are moved as links.  Across filesystems a regular file (or a
    symlink) is copied then removed; a directory is refused.  ``expected`` and
    ``expected_destination`` are revisions each side must still have.
    """
    resolver = ctx.resolver
    with (
        resolver.parent(source) as src,
        guarded(ctx, src, expected),
        resolver.parent(destination) as dst,
    ):
        _check_destination(dst, expected_destination)
        places = journaling.before_move(ctx, src, dst)
        sync_fd = open_for_sync(dst.dir)
        try:
            src.rename_to(dst, syscalls.RENAME_NOREPLACE)
        except OSError as exc:
            if sync_fd is not None:
                os.close(sync_fd)
            if exc.errno == errno.EXDEV:
                change = _move_across(ctx, src, dst)
                journaling.moved(ctx, places, dst, change)
                return change
            refused = _rename_refusal(exc, source, destination)
            if refused is None:
                raise
            raise refused from None
        warning = sync_and_close(sync_fd)
        change = Change(revision=revision_at(ctx, dst), warning=warning)
        journaling.moved(ctx, places, dst, change)
        return change


def _rename_refusal(exc: OSError, source: str, destination: str) -> SandboxError | None:
    """What a refused rename means, where the errno alone does not say it well."""
    if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
        return AlreadyExists(f"EEXIST: destination already exists: {destination}")
    if exc.errno == errno.EINVAL:
        return SandboxError(
            f"EINVAL: cannot move a directory into itself, or the filesystem cannot "
            f"rename without replacing: {source} -> {destination}",
            "EINVAL",
        )
    if exc.errno == errno.ENOENT:
        return NotFound(f"ENOENT: no such file or directory: {source}")
    return None


def revision_at(ctx: FsContext, parent: ParentDir) -> str | None:
    """The revision of what a mutation left at ``parent``'s leaf (a symlink followed
    inside); None when it cannot be told: the change is made by then, and an
    error now would report a done change as not done."""
    resolver = ctx.resolver
    try:
        with parent.entry() as entry:
            if not entry.is_symlink:
                return revision_of_handle(ctx, entry)
            text = entry.readlink()
            base = resolver.canonical_directory(parent.dir, parent.path)
            with resolver.resolve_link(base, text, parent.path) as target:
                return revision_of_handle(ctx, target)
    except (OSError, SandboxError):
        return None


def _move_across(ctx: FsContext, src: ParentDir, dst: ParentDir) -> Change:
    """A move between filesystems: copy, then remove the source; if the source
    cannot be removed, the copy is removed again and the move did not happen."""
    source, dest = src.path, dst.path
    st = src.lstat()
    if st is None:
        raise NotFound(f"ENOENT: no such file or directory: {source}")
    if stat.S_ISDIR(st.st_mode):
        raise Unsupported(
            f"Cannot move a directory across filesystems: {source}. "
            "Create the destination directory and move its files one at a time."
        )
    if stat.S_ISLNK(st.st_mode):
        target = src.readlink()
        try:
            dst.symlink(target)
        except FileExistsError:
            raise AlreadyExists(f"EEXIST: destination already exists: {dest}") from None
        change = Change()
    elif stat.S_ISREG(st.st_mode):
        fd = open_leaf_for_read(src)
        try:
            if not same_file(os.fstat(fd), st):
                raise Conflict(f"The file changed while it was being moved: {source}")
            change = copy_into(ctx, fd, os.fstat(fd), dst)
        finally:
            os.close(fd)
    else:
        raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {source}")
    try:
        current = src.lstat()
        if current is None or not same_file(current, st):
            raise Conflict(
                f"{source} changed while it was being moved across filesystems; nothing was moved"
            )
        src.unlink()
    except (OSError, SandboxError) as exc:
        _take_back(dst)
        if isinstance(exc, SandboxError):
            raise
        failure = ctx.resolver.error(exc, source)
        raise type(failure)(
            f"{failure.message} (the source could not be removed, so the copy made at "
            f"{dest} was removed again: nothing was moved)",
            failure.code,
        ) from None
    return Change(revision=revision_at(ctx, dst), size=change.size, warning=change.warning)


def _take_back(dst: ParentDir) -> None:
    try:
        dst.unlink()
    except OSError as exc:
        log.warning("could not remove the copy of a failed move: %s", exc.strerror)


def open_leaf_for_read(parent: ParentDir) -> int:
    """The regular file at ``parent``'s leaf opened for reading; special files are
    refused before they are opened (``O_PATH`` handle, then a same-inode reopen)."""
    with parent.entry() as entry:
        if entry.is_symlink:
            raise Conflict(f"The file changed while it was being opened; try again: {parent.path}")
        require_regular(entry.stat, parent.path)
        return entry.reopen(READ_FLAGS)


def copy_file(
    ctx: FsContext,
    source: str,
    destination: str,
    *,
    expected: str | None = None,
    expected_destination: str | None = None,
    progress: CopyProgress | None = None,
) -> Change:
    """Copy the regular file ``source`` to a new ``destination`` (``progress`` hears
    the bytes copied).

    Permissions (never setuid/setgid), modification time and extended attributes
    are kept.  The copy appears complete or not at all; an existing destination
    is never overwritten.
    """
    resolver = ctx.resolver
    with resolver.follow_leaf(resolver.parent(source)) as src, guarded(ctx, src, expected) as st:
        if st is None:
            raise NotFound(f"ENOENT: no such file or directory: {source}")
        fd = open_leaf_for_read(src)
        try:
            src_stat = os.fstat(fd)
            with resolver.parent(destination) as dst:
                if _check_destination(dst, expected_destination) is not None:
                    raise AlreadyExists(f"EEXIST: destination already exists: {destination}")
                journaling.before_copy(ctx, dst)
                change = copy_into(ctx, fd, src_stat, dst, progress)
                journaling.copied(ctx, dst, change)
                return change
        finally:
            os.close(fd)


def copy_into(
    ctx: FsContext,
    src_fd: int,
    src_stat: os.stat_result,
    dst: ParentDir,
    progress: CopyProgress | None = None,
) -> Change:
    """A complete copy of ``src_fd`` published at ``dst``'s leaf (which must be free)."""

    def fill(fd: int) -> None:
        copy_contents(src_fd, fd, total=src_stat.st_size, progress=progress)
        os.fchmod(fd, stat.S_IMODE(src_stat.st_mode) & SAFE_MODE_BITS)
        copy_xattrs(src_fd, fd)
        os.utime(fd, ns=(src_stat.st_atime_ns, src_stat.st_mtime_ns))

    change, copied = stage(dst, fill, replace=False)
    return Change(
        revision=_copied_revision(ctx, dst, copied), size=change.size, warning=change.warning
    )


def _copied_revision(ctx: FsContext, dst: ParentDir, copied: os.stat_result) -> str | None:
    """The revision of the copy just published (None when it cannot be told)."""
    try:
        fd = dst.open(READ_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return cached_file_revision(ctx, fd, st, fresh=False) if same_file(st, copied) else None
    except OSError:
        return None
    finally:
        os.close(fd)


# -- removing --------------------------------------------------------------------


def remove(ctx: FsContext, path: str, *, recursive: bool, expected: str | None = None) -> Change:
    """Remove a file or symlink (as a link), an empty directory, or with ``recursive``
    a directory and everything below it, never following a symlink.  ``count`` is
    the number of entries removed."""
    with ctx.resolver.parent(path) as parent, guarded(ctx, parent, expected) as st:
        if st is None:
            raise NotFound(f"ENOENT: no such file or directory: {path}")
        if not stat.S_ISDIR(st.st_mode):
            before = journaling.before_remove(ctx, parent, st, recursive=False)
            parent.unlink()
            journaling.removed(ctx, before)
            return Change(revision=ABSENT)
        removed = [0]
        before = None
        try:
            if recursive:
                parent.dir.check_tree_removable(parent.leaf)
            before = journaling.before_remove(ctx, parent, st, recursive=recursive)
            if recursive:
                with parent.dir.child(parent.leaf, path) as directory:
                    _clear(ctx, directory, path, 1, removed)
            parent.rmdir()
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY and not recursive:
                raise DirectoryNotEmpty(
                    f"ENOTEMPTY: directory not empty: {path}; set recursive to delete it "
                    "and everything below it"
                ) from None
            raise _partly(ctx, before, ctx.resolver.error(exc, path), removed[0]) from None
        except SandboxError as exc:
            raise _partly(ctx, before, exc, removed[0]) from None
        journaling.removed(ctx, before)
        return Change(revision=ABSENT, count=removed[0] + 1)


def _partly(
    ctx: FsContext, before: journaling.Before | None, failure: SandboxError, removed: int
) -> SandboxError:
    if not removed:
        return failure
    message = f"{failure.message} ({removed} entries below it were removed before this failure)"
    journaling.removed(ctx, before)  # what is gone can be put back
    journaling.stopped(ctx, message)
    return type(failure)(message, failure.code)


def _clear(ctx: FsContext, directory: Directory, path: str, depth: int, removed: list[int]) -> None:
    """Remove everything in ``directory``, depth first, through descriptors opened
    exactly (a symlink is removed as a link, never followed)."""
    if depth > ctx.limits.tree_depth:
        raise LimitExceeded(
            f"Directory tree deeper than {ctx.limits.tree_depth} levels; not removed "
            f"completely: {path}"
        )
    with ctx.watch.step(path):
        entries = read_entries(directory, with_stat=False)
    for entry in entries:
        if entry.kind == "directory":
            with directory.child(entry.name, path) as below:
                _clear(ctx, below, path, depth + 1, removed)
            directory.rmdir(entry.name)
        else:
            directory.unlink(entry.name)
        removed[0] += 1

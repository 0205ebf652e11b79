"""Descriptions of the tree below a directory, for its revision.

The walk goes through descriptors: each subdirectory is opened exactly (never
through a symlink, never across a mount point under ``--no-xdev``) relative to
its parent's descriptor, depth first, so it holds at most one descriptor per
level.  A subdirectory that cannot be opened (no permission, removed or
replaced meanwhile, a refused mount point) is described as such and not
descended: a listing never fails because something below it is unreadable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Final

from sandboxfs.core import Directory
from sandboxfs.fs.entries import Entry, kind_of
from sandboxfs.fs.operation import FsContext
from sandboxfs.fs.revisions import describe_entry, tree_revision

#: Errors that make a subdirectory undescribable without making the tree so.
_UNREADABLE: Final = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV}
)


class TooManyEntries(Exception):
    """A tree has more entries than a revision may describe."""


def tree_revision_below(
    ctx: FsContext, directory: Directory, path: str, budget: int, top: list[Entry] | None = None
) -> str:
    """The revision of everything below the readable ``directory``; ``top`` (its
    entries with their ``lstat``) spares reading the first level again.  Raises
    TooManyEntries, before any entry is stat-ed, for a tree over ``budget``."""
    if not _fits(ctx, directory, path, budget, top):
        raise TooManyEntries(budget)
    return tree_revision(iter(_lines(ctx, directory, path, budget, top)))


def _level(directory: Directory) -> list[tuple[str, os.stat_result]]:
    """Every entry of ``directory`` with its ``lstat`` (entries removed meanwhile are
    left out)."""
    found = []
    with directory.scandir() as it:
        for item in it:
            try:
                found.append((item.name, item.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    return found


def _lines(
    ctx: FsContext, top_dir: Directory, path: str, budget: int, top: list[Entry] | None
) -> list[str]:
    """Description lines of everything below ``top_dir`` (in no particular order: a
    revision sorts them).  Each directory is described whole, then its
    subdirectories one at a time, so at most one descriptor per level is held."""
    with ctx.watch.step(path):
        first = (
            [(e.name, e.lstat) for e in top if e.lstat is not None]
            if top is not None
            else _level(top_dir)
        )
    if len(first) > budget:
        raise TooManyEntries(budget)
    seen = len(first)
    lines: list[str] = []
    below = _describe(ctx, top_dir, top_dir.stat().st_dev, "", level=first, lines=lines)
    # (directory, prefix of its entries, its subdirectories left); the first is not ours.
    frames: list[tuple[Directory, str, Iterator[tuple[str, os.stat_result]]]] = [
        (top_dir, "", iter(below))
    ]
    try:
        while frames:
            directory, prefix, subdirectories = frames[-1]
            item = next(subdirectories, None)
            if item is None:
                frames.pop()
                if frames:
                    directory.close()
                continue
            name, st = item
            relative = prefix + name
            opened = _open_level(ctx, directory, name, path)
            if isinstance(opened, str):
                lines.append(describe_entry(relative, f"unreadable {opened}", None))
                continue
            child, level = opened
            seen += len(level)
            if seen > budget:
                child.close()
                raise TooManyEntries(budget)
            inner = relative + "/"
            frames.append(
                (
                    child,
                    inner,
                    iter(_describe(ctx, child, st.st_dev, inner, level=level, lines=lines)),
                )
            )
    finally:
        for directory, _, _ in frames[1:]:
            directory.close()
    return lines


def _describe(
    ctx: FsContext,
    directory: Directory,
    dev: int,
    prefix: str,
    *,
    level: list[tuple[str, os.stat_result]],
    lines: list[str],
) -> list[tuple[str, os.stat_result]]:
    """Add the lines of one directory's entries; returns the subdirectories to
    describe next (none at the depth limit)."""
    hiding = ctx.resolver.confinement.no_xdev
    descend = prefix.count("/") < ctx.limits.tree_depth
    append = lines.append
    subdirectories = []
    for name, st in level:
        relative = prefix + name
        mode = st.st_mode
        if hiding and directory.hides(name, st, dev):
            append(describe_entry(relative, "mount point", None))
        elif stat.S_ISDIR(mode):
            append(describe_entry(relative, "directory", st))
            if descend:
                subdirectories.append((name, st))
        elif stat.S_ISLNK(mode):
            append(_link_line(directory, name, relative, st))
        else:
            append(describe_entry(relative, kind_of(mode), st))
    return subdirectories


def _link_line(directory: Directory, name: str, relative: str, st: os.stat_result) -> str:
    try:
        target = directory.readlink(name)
    except OSError:
        target = "\0unreadable"
    return describe_entry(relative, "symlink", st, target)


def _open_level(
    ctx: FsContext, directory: Directory, name: str, path: str
) -> tuple[Directory, list[tuple[str, os.stat_result]]] | str:
    """The subdirectory ``name`` opened and read, or the errno name of why it cannot
    be (then it is described as unreadable, not descended)."""
    with ctx.watch.step(path):
        try:
            child = directory.child(name, path)
        except OSError as exc:
            if exc.errno not in _UNREADABLE:
                raise
            return errno.errorcode.get(exc.errno or 0, "EIO")
        try:
            return child, _level(child)
        except OSError as exc:
            child.close()
            if exc.errno not in _UNREADABLE:
                raise
            return errno.errorcode.get(exc.errno or 0, "EIO")
        except BaseException:
            child.close()
            raise


def _fits(
    ctx: FsContext, top_dir: Directory, path: str, budget: int, top: list[Entry] | None
) -> bool:
    """Whether the tree :func:`_lines` would describe has at most ``budget`` entries,
    counted by name alone (no ``stat``): a big tree's revision is given up at a
    fraction of the cost of describing it up to the budget.  A directory that
    cannot be read is not counted; the description reports it."""
    max_slashes = ctx.limits.tree_depth
    # (directory, slashes of its entries, names of its subdirectories left to count)
    frames: list[tuple[Directory, int, Iterator[str]]] = []
    seen = 0

    def counted(directory: Directory) -> list[str]:
        nonlocal seen
        subdirectories = []
        with ctx.watch.step(path), directory.scandir() as it:
            for item in it:
                seen += 1
                if seen > budget:
                    break
                if item.is_dir(follow_symlinks=False):
                    subdirectories.append(item.name)
        return subdirectories

    try:
        if top is None:
            first = counted(top_dir)
        else:  # the first level is known: only what is below it is read
            seen = len(top)
            first = [e.name for e in top if e.kind == "directory"]
        frames.append((top_dir, 0, iter(first)))
        while frames and seen <= budget:
            directory, slashes, names = frames[-1]
            name = next(names, None)
            if name is None:
                frames.pop()
                if frames:
                    directory.close()
                continue
            if slashes >= max_slashes:
                continue
            with contextlib.suppress(OSError):
                child = directory.child(name, path)
                try:
                    below = counted(child)
                except BaseException:
                    child.close()
                    raise
                frames.append((child, slashes + 1, iter(below)))
    finally:
        for directory, _, _ in frames[1:]:
            directory.close()
    return seen <= budget

"""Descriptions of the tree below a directory, for its revision.

The walk is :func:`sandboxfs.fs.below.below`: each subdirectory is opened exactly
(never through a symlink, never across a mount point under ``--no-xdev``)
relative to its parent's descriptor, depth first, so it holds at most one
descriptor per level.  A subdirectory that cannot be opened (no permission, removed or
replaced meanwhile, a refused mount point) is described as such and not
descended: a listing never fails because something below it is unreadable.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

from sandboxfs.core import ENTRY, TOO_MANY, UNREADABLE, Bounds, Directory
from sandboxfs.fs.below import below
from sandboxfs.fs.entries import Entry, kind_of, read_entries
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


def _unreadable(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in _UNREADABLE


def _lines(
    ctx: FsContext, top_dir: Directory, path: str, budget: int, top: list[Entry] | None
) -> list[str]:
    """Description lines of everything below ``top_dir`` (in no particular order: a
    revision sorts them), at most one descriptor per level held.  A subdirectory
    that cannot be read is described as such; one at the depth limit is described,
    not read; a mount point under ``--no-xdev`` is described as one, nothing below."""
    hiding = ctx.resolver.confinement.no_xdev
    first = None if top is None else [e for e in top if e.lstat is not None]
    walk = below(
        top_dir,
        path,
        bounds=Bounds(ctx.limits.tree_depth + 1, budget),
        watch=ctx.watch,
        unreadable=_unreadable,
        first=first,
        read=_level,
    )
    # The device of each directory read (a mount point under --no-xdev is hidden).
    devices: dict[tuple[str, ...], int] = {(): top_dir.stat().st_dev}
    lines: list[str] = []
    append = lines.append
    for step in walk:
        if step.kind == TOO_MANY:
            raise TooManyEntries(budget)
        relative = "/".join(step.rel)
        if step.kind == UNREADABLE:
            code = errno.errorcode.get(getattr(step.error, "errno", 0) or 0, "EIO")
            append(describe_entry(relative, f"unreadable {code}", None))
        elif step.kind == ENTRY:
            directory, entry = step.parent, step.entry
            assert directory is not None and entry is not None and entry.lstat is not None
            name, st = entry.name, entry.lstat
            mode = st.st_mode
            if hiding and directory.hides(name, st, devices[step.rel[:-1]]):
                append(describe_entry(relative, "mount point", None))
                walk.prune()
            elif stat.S_ISDIR(mode):
                append(describe_entry(relative, "directory", st))
                devices[step.rel] = st.st_dev
            elif stat.S_ISLNK(mode):
                append(_link_line(directory, name, relative, st))
            else:
                append(describe_entry(relative, kind_of(mode), st))
    return lines


def _level(directory: Directory) -> list[Entry]:
    """Every entry of ``directory`` with its ``lstat`` (entries removed meanwhile are
    left out)."""
    return read_entries(directory, with_stat=True)


def _link_line(directory: Directory, name: str, relative: str, st: os.stat_result) -> str:
    try:
        target = directory.readlink(name)
    except OSError:
        target = "\0unreadable"
    return describe_entry(relative, "symlink", st, target)


def _fits(
    ctx: FsContext, top_dir: Directory, path: str, budget: int, top: list[Entry] | None
) -> bool:
    """Whether the tree :func:`_lines` would describe has at most ``budget`` entries,
    counted by name alone (no ``stat``): a big tree's revision is given up at a
    fraction of the cost of describing it up to the budget.  A directory that
    cannot be read is not counted; the description reports it."""
    walk = below(
        top_dir,
        path,
        bounds=Bounds(ctx.limits.tree_depth + 1, budget),
        watch=ctx.watch,
        unreadable=lambda error: isinstance(error, OSError),
        first=top,
    )
    return all(step.kind != TOO_MANY for step in walk)

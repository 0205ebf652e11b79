"""The filesystem's walks: :class:`~sandboxfs.core.traversal.Traversal` over directory
descriptors, every subdirectory opened exactly and every listing judged by the policy.

:func:`below` is the one way a filesystem operation visits a tree: each
subdirectory is opened for listing from the descriptor of the directory holding
it (:meth:`~sandboxfs.core.chokepoint.Directory.child`: an exact open, so a
symlink is never followed, and the policy's check before the open), each listing
leaves out what the policy hides (so a hidden entry is never visited), and the
bounds are the server's (:func:`bounds`) unless the caller names tighter ones.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from sandboxfs.core import NO_WATCH, Bounds, Directory, Rel, Traversal, Watch
from sandboxfs.fs.entries import Entry, read_entries
from sandboxfs.fs.limits import Limits

#: No cap on entries: a removal goes on to the end (its depth is still bounded).
UNCOUNTED: Final = sys.maxsize

Walk = Traversal[Directory, Entry]


def bounds(limits: Limits, *, entries: int | None = None, deeper: int = 0) -> Bounds:
    """The server's bounds of a walk: ``tree_depth`` levels (``deeper`` more: a walk
    that lists the level at the depth limit, without descending from it) and
    ``walk_entries`` entries, or ``entries``."""
    return Bounds(limits.tree_depth + deeper, limits.walk_entries if entries is None else entries)


def is_directory(entry: Entry) -> bool:
    return entry[1] == "directory"  # its kind (by index: once per entry of every walk)


def below(
    top: Directory,
    path: str,
    *,
    bounds: Bounds,
    watch: Watch = NO_WATCH,
    with_stat: bool = False,
    unreadable: Callable[[BaseException], bool] = lambda error: False,
    first: list[Entry] | None = None,
    read: Callable[[Directory], list[Entry]] | None = None,
) -> Walk:
    """The tree below the readable directory ``top`` (which the caller keeps and
    closes), depth first in byte order; ``path`` names every step.  ``with_stat``:
    each entry with its ``lstat``.  ``first``: ``top``'s entries, already read.
    ``read``: how a directory is read (else :func:`~sandboxfs.fs.entries.read_entries`)."""

    def listing(directory: Directory, rel: Rel) -> list[Entry]:
        if read is not None:
            return read(directory)
        return read_entries(directory, with_stat=with_stat)

    def opening(directory: Directory, rel: Rel, entry: Entry) -> Directory:
        return directory.child(entry.name, path)

    return Traversal(
        top,
        bounds=bounds,
        listing=listing,
        is_dir=is_directory,
        opening=opening,
        closing=Directory.close,
        unreadable=unreadable,
        watch=watch,
        shown=lambda rel: path,
        first=first,
    )

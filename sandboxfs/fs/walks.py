"""Walks below one directory, for search_files, directory_tree, grep_files and code_map.

A :class:`TreeWalk` starts from one resolution of the client's path, made
canonical (symlink-free, checked to be the same directory).  Every directory
below is reopened from its allowed directory's descriptor with an exact open:
no symlink is followed anywhere, so the walk visits exactly the names it
listed, and each directory it opens lies beneath the allowed directory at the
moment it is opened.  Files are opened for reading only after an ``O_PATH``
handle showed a regular file (same inode), so special files are never opened.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import final

from sandboxfs.core import (
    LIST_FLAGS,
    Bounds,
    Directory,
    Handle,
    Location,
    Rel,
    SandboxError,
    Step,
    Traversal,
    errno_error,
)
from sandboxfs.fs.below import is_directory
from sandboxfs.fs.entries import Entry, read_entries
from sandboxfs.fs.files import OpenFile, open_regular
from sandboxfs.fs.operation import FsContext


@final
class TreeWalk:
    """The tree below one directory, read one directory at a time."""

    __slots__ = ("ctx", "path", "start")

    def __init__(self, ctx: FsContext, start: Handle) -> None:
        if not start.is_dir:
            raise errno_error(errno.ENOTDIR, start.path)
        self.ctx = ctx
        self.path = start.path
        #: The start, canonical: what is below it is reopened exactly.
        self.start: Location = ctx.resolver.canonical_handle(start)

    def location(self, rel: tuple[str, ...]) -> Location:
        return Location(self.start.root, self.start.rel + rel)

    def children(self, rel: tuple[str, ...], shown: str) -> list[Entry]:
        """The entries of the directory ``rel`` below the start (kinds without
        ``stat``), in byte order; ``shown`` names it in errors."""
        resolver = self.ctx.resolver
        confinement = resolver.confinement
        loc = Location(self.start.root, self.start.rel + rel)
        with self.ctx.watch.step(shown):
            try:
                fd = loc.open(confinement, LIST_FLAGS, exact=True)
                with Directory(fd, loc, shown, confinement, readable=True) as directory:
                    return read_entries(directory, with_stat=False)
            except OSError as exc:
                raise resolver.error(exc, shown) from None

    def directory(self, rel: tuple[str, ...], shown: str) -> Directory:
        """The directory ``rel`` below the start as an ``O_PATH`` base, reopened exactly
        (no symlink followed), to read the files it holds by their names."""
        resolver = self.ctx.resolver
        loc = self.location(rel)
        fd = resolver.open_exact(loc, os.O_PATH | os.O_DIRECTORY, shown)
        return Directory(fd, loc, shown, resolver.confinement)

    def _entry(self, rel: tuple[str, ...], shown: str) -> Handle:
        resolver = self.ctx.resolver
        loc = self.location(rel)
        fd = resolver.open_exact(loc, os.O_PATH | os.O_NOFOLLOW, shown)
        return Handle(fd, loc, shown, follow=False, confinement=resolver.confinement, exact=True)

    def open_file(self, rel: tuple[str, ...], shown: str) -> OpenFile:
        """The regular file ``rel`` below the start, opened for reading."""
        with self._entry(rel, shown) as entry, self.ctx.watch.step(shown):
            try:
                return open_regular(entry, self.ctx.watch)
            except OSError as exc:
                raise self.ctx.resolver.error(exc, shown) from None

    def link_stays_inside(self, rel: tuple[str, ...], shown: str) -> bool:
        """Whether the symlink ``rel`` below the start leads inside the allowed
        directories (its text read once, resolved from the directory holding it)."""
        try:
            with self._entry(rel, shown) as link:
                if not link.is_symlink:
                    return False
                text = link.readlink()
                with self.ctx.resolver.resolve_link(link.location.parent, text, shown):
                    return True
        except (OSError, SandboxError):
            return False


def traversal(
    tree: TreeWalk,
    bounds: Bounds,
    shown: Callable[[Rel], str],
    keep: Callable[[Rel, list[Entry]], list[Entry]] | None = None,
    check: Callable[[Step[Rel, Entry]], None] | None = None,
) -> Traversal[Rel, Entry]:
    """The tree below ``tree``'s start, depth first in byte order, within ``bounds``: each
    directory reopened exactly from the allowed directory's descriptor (so it lies
    beneath it when it is read, and no symlink is followed) and listed through the
    policy's judgement (:meth:`TreeWalk.children`), then narrowed by ``keep`` (what it
    leaves out is never read, nor counted).  A subdirectory that cannot be read
    is an ``UNREADABLE`` step (its error a client-safe one); ``shown(rel)`` names
    each directory in errors and in the watch's steps; ``check`` hears every step
    but ``ENTRY`` and ``RUN`` first.  Batched: what is not a subdirectory comes in
    ``RUN`` steps (see :class:`~sandboxfs.core.traversal.Traversal`)."""

    def listing(rel: Rel, _: Rel) -> list[Entry]:
        entries = tree.children(rel, shown(rel))
        return entries if keep is None else keep(rel, entries)

    return Traversal(
        (),
        bounds=bounds,
        listing=listing,
        is_dir=is_directory,
        opening=lambda parent, rel, entry: rel,
        closing=lambda rel: None,
        unreadable=lambda error: isinstance(error, SandboxError),
        watch=tree.ctx.watch,
        shown=shown,
        check=check,
        batched=True,
    )


def walk(ctx: FsContext, path: str) -> TreeWalk:
    """A walk below the directory ``path`` (symlinks inside followed to it)."""
    with ctx.resolver.resolve(path) as start:
        return TreeWalk(ctx, start)


def search_target(ctx: FsContext, path: str) -> TreeWalk | OpenFile:
    """What grep_files searches, from one resolution of ``path``: the tree below a
    directory, or one regular file opened for reading."""
    with ctx.resolver.resolve(path) as handle:
        if handle.is_dir:
            return TreeWalk(ctx, handle)
        with ctx.watch.step(path):
            try:
                return open_regular(handle, ctx.watch)
            except OSError as exc:
                raise ctx.resolver.error(exc, path) from None

"""What ``get_file_info`` reports of a path, from one resolution of it.

Guarantee: every fact comes from one handle of the path (``statx``, extended
attributes and revision through that handle), and for a symlink from the text
read once through its own handle and the object that text leads to.  A symlink
whose text leads outside the allowed directories is described without anything
derived from its target (no text, no size), the same whether the target exists
or not.  Special files are described, never opened.

A directory's own size and link count count every entry in it, hidden ones
included (a link per subdirectory; on tmpfs, 20 bytes per entry), so under a
policy that hides anything (:func:`withholds_directory_counts`) they are never
reported as the filesystem gives them: the size is withheld, and the link count
is computed from the visible entries alone: 2 + the visible subdirectories (what
a POSIX filesystem would count if the hidden entries did not exist; unknown when
the directory cannot be listed).  Under a policy that hides nothing, both are the
filesystem's, at no extra cost.  A directory's times still change when a hidden
entry in it does (left as the filesystem gives them).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple, final

from sandboxfs.core import (
    LIST_FLAGS,
    READ_FLAGS,
    AccessDenied,
    Directory,
    Handle,
    Policy,
    SandboxError,
    Statx,
)
from sandboxfs.fs.files import revision_of_open
from sandboxfs.fs.metadata import read_xattrs
from sandboxfs.fs.operation import FsContext


@final
class Description(NamedTuple):
    """A path described: the object itself, or for a symlink what it leads to."""

    #: ``statx`` of what is described: the entry, or the target of its symlink; for a
    #: symlink whose target is not shown (outside, or dangling), the link itself.
    info: Statx
    #: Whether the path is itself a symlink.
    is_symlink: bool = False
    #: The symlink's text, when it leads inside (None otherwise, or for no symlink).
    link_text: str | None = None
    #: For a symlink: whether it leads inside the allowed directories.
    target_inside: bool = True
    #: For a symlink: whether ``info`` describes its target (False: the link itself).
    target_described: bool = True
    xattrs: dict[str, bytes] = {}  # noqa: RUF012 - a NamedTuple default, never mutated
    revision: str | None = None
    #: A directory under a policy that hides entries: its size and link count as the
    #: filesystem gives them would count hidden entries (see the module docstring).
    counts_withheld: bool = False
    #: Its link count from the visible entries (2 + visible subdirectories), or None
    #: when it cannot be listed; meaningful only with ``counts_withheld``.
    visible_links: int | None = None

    @property
    def size_hidden(self) -> bool:
        """Whether the size must not be shown: a symlink leading outside (its own size
        is the length of an outside path), or a directory whose size counts hidden
        entries."""
        return (self.is_symlink and not self.target_inside) or self.counts_withheld

    @property
    def links(self) -> int | None:
        """The link count to show (None: not known without counting hidden entries)."""
        return self.visible_links if self.counts_withheld else self.info.nlink


def withholds_directory_counts(policy: Policy) -> bool:
    """Whether a directory under ``policy`` may hold hidden entries, so that its size
    and link count must not be shown as the filesystem counts them."""
    return policy.hides


def describe(ctx: FsContext, path: str, *, tree_revision: bool = False) -> Description:
    """Describe ``path`` (a final symlink is followed only if it stays inside).  A
    file's revision is always given; a directory's (which describes everything
    below it, a ``stat`` per entry) only with ``tree_revision``."""
    resolver = ctx.resolver
    with resolver.resolve(path, follow=False) as entry, ctx.watch.step(path):
        if not entry.is_symlink:
            return _described(ctx, entry, tree_revision)
        text = entry.readlink()
        base = resolver.canonical_handle(entry).parent
        try:
            target = resolver.resolve_link(base, text, path)
        except AccessDenied:
            return Description(entry.statx(), is_symlink=True, target_inside=False)
        except SandboxError:  # dangling (or looping) inside: the text is an inside path
            return Description(
                entry.statx(), is_symlink=True, link_text=text, target_described=False
            )
        with target:
            found = _described(ctx, target, tree_revision)
        return found._replace(is_symlink=True, link_text=text)


def _described(ctx: FsContext, handle: Handle, tree_revision: bool) -> Description:
    """The object of ``handle``: ``statx``, and for a regular file or directory its
    extended attributes and revision, read through a reopened descriptor (none
    when it cannot be opened for reading)."""
    info = handle.statx()
    withheld = handle.is_dir and withholds_directory_counts(handle.location.root.policy)
    if not (handle.is_regular or handle.is_dir):
        return Description(info)
    try:
        fd = handle.reopen(LIST_FLAGS if handle.is_dir else READ_FLAGS)
    except PermissionError:  # a directory that cannot be listed: its links are unknown
        return Description(info, counts_withheld=withheld)
    try:
        opened = os.fstat(fd)
        attributes = read_xattrs(fd)
        if not stat.S_ISDIR(opened.st_mode):
            revision = _revision(ctx, fd, opened, None, handle.path)
            return Description(info, xattrs=attributes, revision=revision)
        directory = Directory(fd, handle.location, handle.path, handle.confinement, readable=True)
        found = Description(info, xattrs=attributes, counts_withheld=withheld)
        if withheld:
            found = found._replace(visible_links=_visible_links(directory))
        if tree_revision:
            found = found._replace(revision=_revision(ctx, fd, opened, directory, handle.path))
        return found
    finally:
        os.close(fd)


def _visible_links(directory: Directory) -> int | None:
    """2 + the visible subdirectories of a readable directory (its ``.`` and the entry
    naming it, and each subdirectory's ``..``); None if it cannot be read."""
    try:
        return 2 + directory.visible_subdirectories()
    except PermissionError:
        return None


def _revision(
    ctx: FsContext, fd: int, opened: os.stat_result, directory: Directory | None, path: str
) -> str | None:
    try:
        return revision_of_open(ctx, fd, opened, directory, path, fresh=False)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM):
            raise
        return None

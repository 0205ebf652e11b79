"""What ``get_file_info`` reports of a path, from one resolution of it.

Guarantee: every fact comes from one handle of the path (``statx``, extended
attributes and revision through that handle), and for a symlink from the text
read once through its own handle and the object that text leads to.  A symlink
whose text leads outside the allowed directories is described without anything
derived from its target (no text, no size), the same whether the target exists
or not.  Special files are described, never opened.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple, final

from sandboxfs.binding.syscalls import Statx
from sandboxfs.core.chokepoint import LIST_FLAGS, READ_FLAGS, Directory, Handle
from sandboxfs.core.errors import AccessDenied, SandboxError
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.files import revision_of_open
from sandboxfs.fs.metadata import read_xattrs


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

    @property
    def size_hidden(self) -> bool:
        """A symlink leading outside: its own size is the length of an outside path."""
        return self.is_symlink and not self.target_inside


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
    if not (handle.is_regular or handle.is_dir):
        return Description(info)
    try:
        fd = handle.reopen(LIST_FLAGS if handle.is_dir else READ_FLAGS)
    except PermissionError:
        return Description(info)
    try:
        opened = os.fstat(fd)
        attributes = read_xattrs(fd)
        directory = None
        if stat.S_ISDIR(opened.st_mode):
            if not tree_revision:
                return Description(info, xattrs=attributes)
            directory = Directory(
                fd, handle.location, handle.path, handle.confinement, readable=True
            )
        try:
            revision = revision_of_open(ctx, fd, opened, directory, handle.path, fresh=False)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise
            revision = None
        return Description(info, xattrs=attributes, revision=revision)
    finally:
        os.close(fd)

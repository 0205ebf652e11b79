"""Listings of one directory: its entries, their sizes and its revision, all from
one resolution of it."""

from __future__ import annotations

from typing import NamedTuple, final

from sandboxfs.core import Directory, Location, SandboxError
from sandboxfs.fs.describe import withholds_directory_counts
from sandboxfs.fs.entries import Entry, read_entries
from sandboxfs.fs.operation import FsContext
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below


@final
class Listing(NamedTuple):
    """A directory's entries in byte order (with their ``lstat`` when sizes or the
    revision were asked for), and its revision (None when not asked for, or above
    the revision budget)."""

    entries: list[Entry]
    revision: str | None
    #: Per entry, when asked for: its size (a symlink's is its target's, if that is
    #: inside), None for directories and for what cannot be known.
    sizes: list[int | None] | None = None
    #: Whether the directory's policy hides entries: then the sizes and link counts of
    #: its subdirectories (which count hidden entries) must not reach an answer, not
    #: even as an order (see :mod:`sandboxfs.fs.describe`).
    counts_withheld: bool = False


def list_dir(
    ctx: FsContext, path: str, *, sizes: bool = False, tree_revision: bool = False
) -> Listing:
    """The listing of the directory ``path`` (symlinks inside followed to it).  Its
    entries are classified by the type the directory records (no ``stat``) unless
    ``sizes`` or ``tree_revision`` need each entry's ``lstat``; the revision, which
    describes everything below, is computed only with ``tree_revision``."""
    with ctx.resolver.open_directory(path) as directory, ctx.watch.step(path):
        entries = read_entries(directory, with_stat=sizes or tree_revision)
        revision: str | None = None
        if tree_revision:
            try:
                revision = tree_revision_below(
                    ctx, directory, path, ctx.limits.revision_entries, entries
                )
            except TooManyEntries:
                revision = None
        shown = _sizes(ctx, directory, path, entries) if sizes else None
        withheld = withholds_directory_counts(directory.policy)
        return Listing(entries, revision, shown, withheld)


def list_names(ctx: FsContext, path: str) -> tuple[list[str], str]:
    """The names of the directory ``path``'s entries in byte order (symlinks inside
    followed to it), and one kind letter per name as the directory records it (see
    :meth:`sandboxfs.core.chokepoint.Directory.entries`): a listing with nothing else,
    made without an object per entry."""
    with ctx.resolver.open_directory(path) as directory, ctx.watch.step(path):
        return directory.entries()


def _sizes(
    ctx: FsContext, directory: Directory, path: str, entries: list[Entry]
) -> list[int | None]:
    dev = directory.stat().st_dev
    base: Location | None = None
    found: list[int | None] = []
    for entry in entries:
        st = entry.lstat
        if st is None or entry.kind == "directory" or directory.hides(entry.name, st, dev):
            found.append(None)  # a refused mount point shows nothing of what is mounted
        elif entry.kind != "symlink":
            found.append(st.st_size)
        else:
            if base is None:
                base = ctx.resolver.canonical_directory(directory, path)
            found.append(_link_size(ctx, directory, base, entry.name, path))
    return found


def _link_size(
    ctx: FsContext, directory: Directory, base: Location, name: str, path: str
) -> int | None:
    """The size of what the symlink ``name`` leads to, if that is inside."""
    shown = f"{path.rstrip('/') or '/'}/{name}"
    try:
        text = directory.readlink(name)
        with ctx.resolver.resolve_link(base, text, shown) as target:
            return target.stat.st_size
    except (OSError, SandboxError):
        return None

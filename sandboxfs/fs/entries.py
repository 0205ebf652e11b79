"""Directory entries as listings report them, classified without following symlinks."""

from __future__ import annotations

import errno
import functools
import operator
import os
import stat
from itertools import repeat
from typing import Final, Literal, NamedTuple

from sandboxfs.core import Directory, NotARegularFile, errno_error

EntryKind = Literal["file", "directory", "symlink", "other"]


class Entry(NamedTuple):
    """One directory entry, classified without following symlinks."""

    name: str
    kind: EntryKind
    #: ``lstat`` of the entry when asked for (None if it vanished meanwhile).
    lstat: os.stat_result | None = None


_NAME: Final = operator.itemgetter(0)  # an Entry's name, faster than by attribute


def kind_of(mode: int) -> EntryKind:
    """Classify a ``st_mode`` the way listings report it."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def require_regular(st: os.stat_result, path: str) -> None:
    """Refuse anything that is not a regular file, saying what it is."""
    if stat.S_ISDIR(st.st_mode):
        raise errno_error(errno.EISDIR, path, "not a file")
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {path}")


_NEW_ENTRY: Final = functools.partial(tuple.__new__, Entry)
#: The kind letters of :meth:`Directory.entries`.
_KINDS: Final[dict[str, EntryKind]] = {
    "f": "file",
    "d": "directory",
    "l": "symlink",
    "o": "other",
}


def in_byte_order(entries: list[Entry]) -> None:
    """Sort by the names' bytes.  For valid Unicode, code point order is UTF-8 byte
    order, so only names holding undecodable bytes need encoding."""
    entries.sort(key=_NAME)  # names in one directory are distinct
    if not all(map(str.isascii, map(_NAME, entries))):
        entries.sort(key=lambda entry: os.fsencode(entry.name))


def read_entries(directory: Directory, *, with_stat: bool) -> list[Entry]:
    """The entries of a readable directory, in byte order of their names (entries
    removed while it is read are left out).  Without ``with_stat`` each entry is
    classified by the type its directory records (``d_type``: no system call per
    entry, except on filesystems that record none), read and sorted in one call
    into the native shim.  Raises OSError."""
    if not with_stat:
        names, kinds = directory.entries()
        # Entries made in C, with no Python code per entry.
        return list(map(_NEW_ENTRY, zip(names, map(_KINDS.__getitem__, kinds), repeat(None))))
    new = tuple.__new__  # Entry(...) without the NamedTuple constructor's Python frame
    entries: list[Entry] = []
    append = entries.append
    with directory.scandir() as it:
        for item in it:
            try:
                lst = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we were listing
            append(new(Entry, (item.name, kind_of(lst.st_mode), lst)))
    in_byte_order(entries)
    return entries

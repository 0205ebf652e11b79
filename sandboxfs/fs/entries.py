"""Directory entries as listings report them, classified without following symlinks."""

from __future__ import annotations

import operator
import os
import stat
from typing import Final, Literal, NamedTuple

from sandboxfs.core.chokepoint import Directory
from sandboxfs.core.errors import IsADirectory, NotARegularFile

EntryKind = Literal["file", "directory", "symlink", "other"]


class Entry(NamedTuple):
    """One directory entry, classified without following symlinks."""

    name: str
    kind: EntryKind
    #: ``lstat`` of the entry when asked for (None if it vanished meanwhile).
    lstat: os.stat_result | None = None


_NAME: Final = operator.attrgetter("name")


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
        raise IsADirectory(f"EISDIR: is a directory, not a file: {path}")
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {path}")


def in_byte_order(entries: list[Entry]) -> None:
    """Sort by the names' bytes.  For valid Unicode, code point order is UTF-8 byte
    order, so only names holding undecodable bytes need encoding."""
    entries.sort()  # by name first; names in one directory are distinct
    if not all(map(str.isascii, map(_NAME, entries))):
        entries.sort(key=lambda entry: os.fsencode(entry.name))


def read_entries(directory: Directory, *, with_stat: bool) -> list[Entry]:
    """The entries of a readable directory, in byte order of their names (entries
    removed while it is read are left out).  Raises OSError."""
    entries: list[Entry] = []
    append = entries.append
    with directory.scandir() as it:
        for item in it:
            lst: os.stat_result | None = None
            kind: EntryKind
            try:
                if with_stat:
                    lst = item.stat(follow_symlinks=False)
                    kind = kind_of(lst.st_mode)
                elif item.is_file(follow_symlinks=False):
                    kind = "file"
                elif item.is_dir(follow_symlinks=False):
                    kind = "directory"
                elif item.is_symlink():
                    kind = "symlink"
                else:
                    kind = "other"
            except FileNotFoundError:
                continue  # removed while we were listing
            append(Entry(item.name, kind, lst))
    in_byte_order(entries)
    return entries

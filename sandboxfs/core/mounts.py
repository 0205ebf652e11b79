"""Which allowed directories are on local filesystems, where a call may run inline.

A call on a local filesystem (ext4, xfs, btrfs, tmpfs, overlayfs...) cannot block
for long, so it may run on the event loop without a hop to a worker thread; a
call on anything else (NFS, CIFS, FUSE, a type this module does not know) runs in
a worker thread under the step watchdog, as every call once did.  The decision is
made per allowed directory from the mount table: the filesystem type of the mount
that holds it (what ``statfs`` reports as ``f_type``, by name), and of every mount
beneath it (a FUSE mount inside a local directory makes that directory remote).

:class:`MountTable` reads ``/proc/self/mountinfo`` from a descriptor opened
before Landlock applies, and reads it again when the kernel says the table
changed (``POLLPRI`` on that descriptor: one non-blocking ``poll`` per look, no
read while nothing changed), so a mount made after start-up is seen by the next
call.  A mount made while a call is already running is not seen by that call:
the inline path therefore also resolves with ``RESOLVE_NO_XDEV`` (see
:class:`~sandboxfs.core.chokepoint.Confinement`), and a call that would cross a
mount point is run again in a worker thread.

Guarantee: :meth:`MountTable.local` answers False for anything it cannot tell
(an unreadable table, an unknown type, a directory it cannot find): unknown is
remote.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from dataclasses import dataclass
from typing import Final, final

#: Filesystem types whose operations complete without waiting on a network or a
#: user-space daemon.
LOCAL_TYPES: Final = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "ramfs", "f2fs"}
)
_MOUNTINFO: Final = "/proc/self/mountinfo"
_READ: Final = 1 << 16


@final
@dataclass(frozen=True, slots=True)
class Mount:
    """One line of the mount table: where, which device, which type."""

    point: str
    device: tuple[int, int]
    fstype: str


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes come octal-escaped."""
    if "\\" not in field:
        return field
    out = bytearray()
    raw = os.fsencode(field)
    i = 0
    while i < len(raw):
        if raw[i] == 0x5C and raw[i + 1 : i + 4].isdigit() and len(raw[i + 1 : i + 4]) == 3:
            out.append(int(raw[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return os.fsdecode(bytes(out))


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` text; malformed lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
            major, minor = fields[2].split(":")
            mounts.append(Mount(_unescape(fields[4]), (int(major), int(minor)), fields[dash + 1]))
        except (ValueError, IndexError):
            continue
    return mounts


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@final
class MountTable:
    """The mount table as this process sees it, re-read when it changes.  Safe to
    share between threads."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._mounts: list[Mount] | None = None
        #: A change the kernel reported (it reports each once) not yet read.
        self._dirty = False
        self.generation = 0
        self._poll: select.poll | None = None
        if fd is not None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLPRI | select.POLLERR)

    @classmethod
    def open(cls) -> MountTable:
        """The table of this process (call before Landlock: it opens /proc).  Without
        /proc, a table that knows nothing (every directory is then remote)."""
        try:
            fd = os.open(_MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return cls(None)
        return cls(fd)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _read(self) -> list[Mount] | None:
        fd = self._fd
        if fd is None:
            return None
        chunks = []
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            while chunk := os.read(fd, _READ):
                chunks.append(chunk)
        except OSError:
            return None
        return parse_mountinfo(b"".join(chunks).decode("utf-8", "surrogateescape"))

    def changed(self) -> bool:
        """Whether the table changed since it was last read (never blocks)."""
        if self._poll is None or self._dirty:
            return self._dirty
        try:
            self._dirty = bool(self._poll.poll(0))
        except OSError:
            self._dirty = True
        return self._dirty

    def mounts(self) -> list[Mount] | None:
        """The mounts now (re-read only after a change); None if unreadable."""
        with self._lock:
            if self._mounts is None or self.changed():
                self._dirty = False  # before reading: a change while it reads is seen next
                self._mounts = self._read()
                self.generation += 1
            return self._mounts

    def fstype(self, path: str, device: tuple[int, int]) -> str | None:
        """The type of the filesystem holding the directory ``path`` (real path) on
        ``device`` (its st_dev, as major and minor), or None."""
        mounts = self.mounts()
        if not mounts:
            return None
        around = [m for m in mounts if _beneath(path, m.point)]
        # The mount of its device, else (a btrfs subvolume has a device of its own)
        # the innermost mount above it.
        holding = [m for m in around if m.device == device] or around
        if not holding:
            return None
        return max(holding, key=lambda m: len(m.point)).fstype

    def local(self, path: str, device: tuple[int, int]) -> tuple[bool, str]:
        """Whether calls on the allowed directory ``path`` may run inline, and why
        (the filesystem type, or the remote mount beneath it)."""
        kind = self.fstype(path, device)
        if kind is None:
            return False, "filesystem type unknown"
        if kind not in LOCAL_TYPES:
            return False, kind
        for mount in self.mounts() or ():
            beneath = mount.point != path and _beneath(mount.point, path)
            if beneath and mount.fstype not in LOCAL_TYPES:
                return False, f"{kind}, with a {mount.fstype} mount beneath it"
        return True, kind

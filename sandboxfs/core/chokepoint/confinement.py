"""Where every ``openat2`` is made: the resolve flags, made in one place
(:meth:`Confinement.flags`), and :class:`Location`, a place beneath an allowed
directory that is reopened exactly."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import Root
from sandboxfs.core.errors import SandboxError, from_oserror
from sandboxfs.core.pathnames import join

#: Resolve flags on every openat2 call.
ALWAYS: Final = syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_MAGICLINKS


#: Added on every call of a server that refuses mount crossings (--no-xdev).
CROSSING: Final = syscalls.RESOLVE_NO_XDEV


#: Added on exact opens (leaves, listed children, canonical locations).
EXACT: Final = syscalls.RESOLVE_NO_SYMLINKS


#: openat2 answers EAGAIN when a rename races with ``..`` resolution; retry this often.
EAGAIN_RETRIES: Final = 64


#: Flags for opening a directory to list it (never blocks, never adopts a tty).
LIST_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK


#: Flags for opening a file to read: never block on a FIFO, never adopt a tty.
READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY


@final
class CrossesMount(Exception):
    """An inline call's resolution would cross a mount point (or leave its directory:
    ``EXDEV`` says either): the call is given up before it did anything and runs
    again in a worker thread, with the server's own confinement.  Deliberately
    neither an OSError nor a SandboxError, so no tool mistakes it for an answer."""


@final
@dataclass(frozen=True, slots=True)
class Confinement:
    """The resolve flags in force for one server, and the gate for its errors."""

    #: Refuse paths that cross a mount point (``--no-xdev``).
    no_xdev: bool = False
    #: An inline call (on the event loop, see sandboxfs.core.mounts): never cross a
    #: mount point, whose filesystem may stall; ``EXDEV`` raises CrossesMount.
    inline: bool = False

    def flags(self, *, exact: bool) -> int:
        """The ``resolve`` field of an openat2 call: the only place it is made."""
        resolve = ALWAYS
        if self.no_xdev or self.inline:
            resolve |= CROSSING
        if exact:
            resolve |= EXACT
        return resolve

    def open(self, dirfd: int, path: str, flags: int, *, exact: bool, mode: int = 0) -> int:
        """``openat2(dirfd, path)`` with the flags in force, retrying on EAGAIN.
        The descriptor is close-on-exec.  Raises OSError."""
        resolve = self.flags(exact=exact)
        for _ in range(EAGAIN_RETRIES):
            try:
                return syscalls.openat2(dirfd, path, flags, resolve=resolve, mode=mode)
            except BlockingIOError:
                continue
            except OSError as exc:
                if self.inline and exc.errno == errno.EXDEV:
                    raise CrossesMount(path) from None
                raise
        raise OSError(errno.EAGAIN, "resolution kept racing with renames")

    def error(self, exc: OSError, path: str) -> SandboxError:
        """The client-safe error for ``exc``, naming only ``path`` (as given)."""
        return from_oserror(exc, path, no_xdev=self.no_xdev)


@final
@dataclass(frozen=True, slots=True)
class Location:
    """A place beneath an allowed directory: its root and the components below it."""

    root: Root
    rel: tuple[str, ...]

    def child(self, name: str) -> Location:
        return Location(self.root, (*self.rel, name))

    @property
    def parent(self) -> Location:
        return Location(self.root, self.rel[:-1])

    @property
    def name(self) -> str:
        return self.rel[-1]

    @property
    def relpath(self) -> str:
        return join(self.rel)

    def open(self, confinement: Confinement, flags: int, *, exact: bool, mode: int = 0) -> int:
        """Open this location beneath its root's descriptor, as its root's policy
        allows (exactly, under a policy with patterns).  Raises OSError."""
        policy = self.root.policy
        if policy.active:
            policy.check_open(self.rel, flags)
            exact = exact or policy.patterned
        return confinement.open(self.root.fd, self.relpath, flags, exact=exact, mode=mode)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two ``stat`` results describe one object (device and inode)."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def entry_name(name: str) -> str:
    """``name`` if it is exactly one directory entry; a programming error otherwise."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single entry name: {name!r}")
    return name

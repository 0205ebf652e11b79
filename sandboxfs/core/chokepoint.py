"""The chokepoint: the one module that opens anything on a client's behalf.

Every ``openat2`` sandboxfs makes goes through :meth:`Confinement.open`, and the
resolve flags of every call come from :meth:`Confinement.flags`, read from the
three module constants below at call time:

* :data:`ALWAYS` (``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``) on every call: the
  kernel refuses anything that would leave the starting descriptor (``..``,
  absolute symlinks, symlinks that climb out) and every procfs magic link;
* :data:`CROSSING` (``RESOLVE_NO_XDEV``) on every call of a server run with
  ``--no-xdev``: no component may cross a mount point;
* :data:`EXACT` (``RESOLVE_NO_SYMLINKS``) on *exact* opens: a leaf name under a
  parent descriptor, a child named by a directory listing, the canonical
  location of something already resolved.  No symlink is followed there, not
  even one that stays inside.  No ``O_NOFOLLOW`` is added on top: this flag is
  the one mechanism that keeps a leaf from being followed.

The descriptors come wrapped in three owned types:

* :class:`Handle`: an ``O_PATH`` descriptor of one object, the :class:`Location`
  that reopens it and its ``fstat``.  :meth:`Handle.reopen` opens the same object
  for I/O and refuses (:class:`~sandboxfs.core.errors.Conflict`) if the location
  now names another one.  Facts about a client path come from one handle.
* :class:`Directory`: a descriptor of a directory with the ``*at`` operations on
  single entry names in it.
* :class:`ParentDir`: a directory and one checked leaf name: every mutation acts
  on exactly that one name.

The policy of each allowed directory (:mod:`sandboxfs.core.policy`: read-only,
hidden and protected patterns) is enforced here, on the location of every open,
every listing and every ``*at`` change, before the system call: a hidden
location is absent (``ENOENT``, and left out of listings), a change the policy
does not allow raises :class:`~sandboxfs.core.policy.PolicyRefusal` with nothing
done.  Under a policy with patterns every open is exact, so only canonical
(symlink-free) locations are judged: a symlink cannot reach a hidden or
protected entry under another name (the resolver's component walk follows it,
one judged component at a time).  A rename of a directory is refused if any
entry below it is hidden or protected where it is or would be where it goes.

Methods raise :class:`OSError` for what the kernel refused; callers turn it into
a client-safe error with :meth:`Confinement.error` (the one converter,
:func:`~sandboxfs.core.errors.from_oserror`).

This is one module on purpose, about 600 lines: every ``openat2`` and
every ``*at`` call on a client's behalf is here, with the policy's check before
each of them, so that one file is what to read, and a test can pin that nothing
else makes them.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import Root
from sandboxfs.core.errors import Conflict, SandboxError, from_oserror
from sandboxfs.core.pathnames import join
from sandboxfs.core.policy import Policy, PolicyRefusal, Verdict
from sandboxfs.core.traversal import ENTRY, TOO_DEEP, TOO_MANY, Bounds, Traversal

_VISIBLE: Final = Verdict(hidden=False, protected=False)

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
#: Most entries below a directory that a rename checks against a policy with patterns,
#: and most levels (each holds one descriptor while what is below it is checked).
SUBTREE_CHECK_ENTRIES: Final = 100_000
SUBTREE_CHECK_DEPTH: Final = 256
#: Why a rename's check of what is below a directory refuses it.
_UNCHECKED: Final = {
    TOO_MANY: "too many entries below it to check the policy",
    TOO_DEEP: "too deep a tree below it to check the policy",
}
_HOLDS_HIDDEN: Final = "it holds entries the policy hides or protects"


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


def _entry_name(name: str) -> str:
    """``name`` if it is exactly one directory entry; a programming error otherwise."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single entry name: {name!r}")
    return name


def _adopt_stat(fd: int) -> os.stat_result:
    """``fstat`` of a descriptor just opened; it is closed if that fails."""
    try:
        return os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


@final
class Handle:
    """An owned ``O_PATH`` descriptor of one object beneath an allowed directory.

    ``location`` reopens it (``follow`` says whether its final symlink was
    followed; ``exact`` whether the location is canonical and reopened with no
    symlink followed at all), ``stat`` is its ``fstat`` when it was opened (an
    ``lstat`` when not followed), ``path`` is the client's path, for errors.
    """

    __slots__ = ("confinement", "exact", "fd", "follow", "location", "path", "stat")

    def __init__(
        self,
        fd: int,
        location: Location,
        path: str,
        *,
        follow: bool,
        confinement: Confinement,
        exact: bool = False,
    ) -> None:
        self.stat = _adopt_stat(fd)
        self.fd = fd
        self.location = location
        self.path = path
        self.follow = follow
        self.confinement = confinement
        self.exact = exact

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def mode(self) -> int:
        return self.stat.st_mode

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)

    @property
    def is_regular(self) -> bool:
        return stat.S_ISREG(self.stat.st_mode)

    @property
    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self.stat.st_mode)

    def statx(self) -> syscalls.Statx:
        """``statx`` of the object itself (a symlink is described as a link)."""
        return syscalls.fstatx(self.fd)

    def readlink(self) -> str:
        """The text of this symlink, read through the handle (``readlinkat(fd, "")``)."""
        return os.readlink("", dir_fd=self.fd)

    def reopen(self, flags: int) -> int:
        """The same object opened again with ``flags`` (a final symlink followed only if
        it was).  Raises Conflict, with nothing opened, if the location now names
        another object; OSError if the kernel refuses."""
        if not self.follow:
            flags |= os.O_NOFOLLOW
        try:
            fd = self.location.open(self.confinement, flags, exact=self.exact)
        except OSError as exc:
            if exc.errno == errno.ELOOP and not stat.S_ISLNK(self.stat.st_mode):
                # What was no symlink is one now: another object, not a loop.
                raise Conflict(
                    f"{self.path} changed while it was being opened; try again"
                ) from None
            raise
        if not same_file(_adopt_stat(fd), self.stat):
            os.close(fd)
            raise Conflict(f"{self.path} changed while it was being opened; try again")
        return fd

    def directory(self) -> Directory:
        """This directory, reopened for listing (and as a base for ``*at`` calls)."""
        fd = self.reopen(LIST_FLAGS)
        return Directory(fd, self.location, self.path, self.confinement, readable=True)

    def fstatfs_type(self) -> int:
        return syscalls.fstatfs_type(self.fd)


@final
class Directory:
    """An owned descriptor of a directory and the ``*at`` operations on single entry
    names in it.  Opened ``O_PATH`` (a base for ``*at`` calls) or, when
    ``readable``, for listing.  ``path`` names it in the client's terms."""

    __slots__ = ("confinement", "fd", "location", "path", "readable")

    def __init__(
        self,
        fd: int,
        location: Location,
        path: str,
        confinement: Confinement,
        *,
        readable: bool = False,
    ) -> None:
        self.fd = fd
        self.location = location
        self.path = path
        self.confinement = confinement
        self.readable = readable

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    # -- opening names in it ----------------------------------------------------

    @property
    def policy(self) -> Policy:
        return self.location.root.policy

    def _below(self, name: str) -> tuple[str, ...]:
        return (*self.location.rel, _entry_name(name))

    def _may_change(self, name: str, *, existing: bool) -> None:
        """Raise unless the policy lets the entry ``name`` change (``existing``: the
        change needs it to exist, so a hidden one is absent rather than refused)."""
        policy = self.policy
        if policy.active:
            rel = self._below(name)
            if existing:
                policy.check_visible(rel)
            policy.check_change(rel)

    def open(self, name: str, flags: int, *, mode: int = 0) -> int:
        """The entry ``name`` opened with ``flags``: an exact open, so a symlink there
        is never followed (ELOOP), wherever it points."""
        policy = self.policy
        if policy.active:
            policy.check_open(self._below(name), flags)
        return self.confinement.open(self.fd, _entry_name(name), flags, exact=True, mode=mode)

    def entry(self, name: str, path: str) -> Handle:
        """An ``O_PATH`` handle of the entry ``name`` itself (a symlink as the link)."""
        fd = self.open(name, os.O_PATH | os.O_NOFOLLOW)
        location = self.location.child(name)
        return Handle(fd, location, path, follow=False, confinement=self.confinement)

    def child(self, name: str, path: str) -> Directory:
        """The subdirectory ``name`` opened for listing (never through a symlink)."""
        fd = self.open(name, LIST_FLAGS)
        return Directory(fd, self.location.child(name), path, self.confinement, readable=True)

    def subdirectory(self, name: str, path: str) -> Directory:
        """The subdirectory ``name`` as an ``O_PATH`` base (never through a symlink)."""
        fd = self.open(name, os.O_PATH | os.O_DIRECTORY)
        return Directory(fd, self.location.child(name), path, self.confinement)

    def tmpfile(self, *, mode: int = 0o666) -> int:
        """A new unnamed regular file in this directory (``O_TMPFILE``), open for writing."""
        if self.policy.active:
            self.policy.check_open(self.location.rel, os.O_TMPFILE | os.O_WRONLY)
        return self.confinement.open(
            self.fd, ".", os.O_TMPFILE | os.O_WRONLY, exact=True, mode=mode
        )

    def for_sync(self) -> int:
        """This directory opened for reading, so that ``fsync`` can flush its entries."""
        return self.confinement.open(self.fd, ".", os.O_RDONLY | os.O_DIRECTORY, exact=True)

    def entries(self) -> tuple[list[str], str]:
        """The names of this (readable) directory's entries in byte order, and their
        kind letters (see :func:`sandboxfs.binding.syscalls.read_dir`); hidden entries
        are left out."""
        names, kinds = syscalls.read_dir(self.fd)
        hidden = self.policy.hidden_names(self.location.rel, names)
        if hidden:
            kept = [
                (name, kind) for name, kind in zip(names, kinds, strict=True) if name not in hidden
            ]
            return [name for name, _ in kept], "".join(kind for _, kind in kept)
        return names, kinds

    def visible_subdirectories(self) -> int:
        """How many subdirectories this (readable) directory holds, hidden ones left
        out (only the subdirectories' names are judged)."""
        names, kinds = syscalls.read_dir(self.fd)
        subdirectories = [name for name, kind in zip(names, kinds, strict=True) if kind == "d"]
        return len(subdirectories) - len(
            self.policy.hidden_names(self.location.rel, subdirectories)
        )

    def read_files(
        self, batch: syscalls.LeafBatch, names: bytes, *, block: int, probe: int, needle: bytes
    ) -> int:
        """Open, check and read the regular files ``names`` (leaf names, each ended by a
        NUL) in this directory, in one call into C (:func:`syscalls.read_leaves`): each
        opened as an exact open is (never through a symlink), with :data:`READ_FLAGS`,
        and read only if ``fstat`` shows a regular file.  Returns how many names
        ``batch`` now describes.  Hidden names are refused (ValueError): they come
        from :meth:`entries`, which never gives one."""
        if self.policy.patterned:
            listed = [os.fsdecode(raw) for raw in names.split(b"\0")[:-1]]
            if self.policy.hidden_names(self.location.rel, listed):
                raise ValueError("a hidden name was passed to read_files")
        return syscalls.read_leaves(
            batch,
            self.fd,
            names,
            READ_FLAGS,
            resolve=self.confinement.flags(exact=True),
            retries=EAGAIN_RETRIES,
            block=block,
            probe=probe,
            needle=needle,
        )

    def scandir(self) -> AbstractContextManager[Iterator[os.DirEntry[str]]]:
        """The entries of this (readable) directory, as ``os.scandir`` gives them
        (use it as a context manager); hidden entries are left out."""
        if self.policy.patterned:
            return _visible_entries(os.scandir(self.fd), self.policy, self.location.rel)
        return os.scandir(self.fd)

    # -- acting on names in it --------------------------------------------------

    def lstat(self, name: str) -> os.stat_result | None:
        """``lstat`` of the entry ``name``; None if there is none (or it is hidden)."""
        if self.policy.patterned and self.policy.verdict(self._below(name)).hidden:
            return None
        try:
            return os.stat(_entry_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, name: str) -> str:
        if self.policy.patterned:
            self.policy.check_visible(self._below(name))
        return os.readlink(_entry_name(name), dir_fd=self.fd)

    def is_mount_point(self, name: str) -> bool:
        """Whether the entry ``name`` is the root of a mount (bind mounts included)."""
        return syscalls.is_mount_root(self.fd, _entry_name(name))

    def hides(self, name: str, st: os.stat_result, parent_dev: int) -> bool:
        """Whether a server that refuses mount crossings must show nothing of what the
        entry ``name`` (its ``lstat`` ``st``) holds: it is a mount point."""
        if not self.confinement.no_xdev:
            return False
        return st.st_dev != parent_dev or self.is_mount_point(name)

    def mkdir(self, name: str, mode: int = 0o777) -> None:
        self._may_change(name, existing=False)
        os.mkdir(_entry_name(name), mode, dir_fd=self.fd)

    def symlink(self, target: str, name: str) -> None:
        self._may_change(name, existing=False)
        os.symlink(target, _entry_name(name), dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        self._may_change(name, existing=True)
        os.unlink(_entry_name(name), dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        self._may_change(name, existing=True)
        os.rmdir(_entry_name(name), dir_fd=self.fd)

    def link(self, fd: int, name: str) -> None:
        """Give the open file ``fd`` (an ``O_TMPFILE``) the name ``name`` here."""
        self._may_change(name, existing=False)
        syscalls.link_fd(fd, self.fd, _entry_name(name))

    def rename(self, name: str, to: Directory, to_name: str, flags: int) -> None:
        """``renameat2(self, name, to, to_name, flags)``, if both policies allow it:
        the source may change, the destination may be made or replaced, and no
        entry below a renamed directory is hidden or protected where it is or
        where it would be (both ways for ``RENAME_EXCHANGE``)."""
        self._may_change(name, existing=True)
        exchange = bool(flags & syscalls.RENAME_EXCHANGE)
        to._may_change(to_name, existing=exchange)
        here, there = self.location.child(name), to.location.child(to_name)
        if self.policy.patterned or to.policy.patterned:
            self._check_subtree(name, here, there)
            if exchange:
                to._check_subtree(to_name, there, here)
        syscalls.renameat2(self.fd, _entry_name(name), to.fd, _entry_name(to_name), flags)

    def check_creatable(self, names: tuple[str, ...]) -> None:
        """Raise (PolicyRefusal), before anything is made, unless the policy lets each
        of ``names``, every one inside the one before, be created in this directory
        (so a ``mkdir -p`` the policy stops half-way is refused whole)."""
        policy = self.policy
        if policy.active:
            rel = self.location.rel
            for name in names:
                rel = (*rel, _entry_name(name))
                policy.check_change(rel)

    def check_tree_removable(self, name: str) -> None:
        """Refuse (PolicyRefusal), before anything is removed, a recursive removal of
        the directory ``name`` that would meet an entry the policy hides or protects
        (a removal that stopped there would be half done)."""
        if self.policy.patterned:
            here = self.location.child(_entry_name(name))
            self._check_subtree(name, here, here)

    def _check_subtree(self, name: str, here: Location, there: Location) -> None:
        """Refuse (PolicyRefusal) to move the directory ``name`` (at ``here``) to
        ``there`` if any entry below it, hidden ones included, is hidden or
        protected at either place, or if there are too many, or too deep, to check."""
        try:
            st = os.stat(_entry_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            return
        ours, theirs = here.root.policy, there.root.policy
        # Raw listings on purpose: the check must see the entries the policy hides.
        top = self.confinement.open(self.fd, name, LIST_FLAGS, exact=True)
        walk: Traversal[int, tuple[str, str]] = Traversal(
            top,
            bounds=Bounds(SUBTREE_CHECK_DEPTH, SUBTREE_CHECK_ENTRIES),
            listing=_raw_entries,
            is_dir=lambda entry: entry[1] == "d",
            opening=lambda fd, rel, entry: self.confinement.open(
                fd, entry[0], LIST_FLAGS, exact=True
            ),
            closing=os.close,
        )
        try:
            for step in walk:
                if step.kind in _UNCHECKED:
                    raise PolicyRefusal(errno.EACCES, _UNCHECKED[step.kind])
                if step.kind == ENTRY and (
                    ours.verdict((*here.rel, *step.rel)) != _VISIBLE
                    or theirs.verdict((*there.rel, *step.rel)) != _VISIBLE
                ):
                    raise PolicyRefusal(errno.EACCES, _HOLDS_HIDDEN)
        finally:
            os.close(top)


def _raw_entries(fd: int, rel: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every entry of the directory open at ``fd`` with its kind letter, hidden ones too."""
    names, kinds = syscalls.read_dir(fd)
    return list(zip(names, kinds, strict=True))


@final
class ParentDir:
    """A directory (owned) and one checked leaf name in it: the one entry a mutation
    changes."""

    __slots__ = ("dir", "leaf", "path")

    def __init__(self, directory: Directory, leaf: str, path: str) -> None:
        self.dir = directory
        self.leaf = _entry_name(leaf)
        self.path = path

    def close(self) -> None:
        self.dir.close()

    def __enter__(self) -> ParentDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def location(self) -> Location:
        return self.dir.location.child(self.leaf)

    def lstat(self) -> os.stat_result | None:
        return self.dir.lstat(self.leaf)

    def open(self, flags: int, *, mode: int = 0) -> int:
        """The leaf opened with ``flags``, never through a symlink (ELOOP if it is one)."""
        return self.dir.open(self.leaf, flags, mode=mode)

    def entry(self) -> Handle:
        """An ``O_PATH`` handle of the leaf entry itself."""
        return self.dir.entry(self.leaf, self.path)

    def readlink(self) -> str:
        return self.dir.readlink(self.leaf)

    def mkdir(self, mode: int = 0o777) -> None:
        self.dir.mkdir(self.leaf, mode)

    def symlink(self, target: str) -> None:
        self.dir.symlink(target, self.leaf)

    def unlink(self) -> None:
        self.dir.unlink(self.leaf)

    def rmdir(self) -> None:
        self.dir.rmdir(self.leaf)

    def rename_to(self, other: ParentDir, flags: int) -> None:
        """Rename the leaf to ``other``'s leaf (``renameat2`` with ``flags``)."""
        self.dir.rename(self.leaf, other.dir, other.leaf, flags)


def _visible_entries(
    it: os.ScandirIterator[str],  # type: ignore[name-defined]
    policy: Policy,
    rel: tuple[str, ...],
) -> AbstractContextManager[Iterator[os.DirEntry[str]]]:
    """``it`` without the entries ``policy`` hides (closed with the context)."""

    @contextmanager
    def visible() -> Iterator[Iterator[os.DirEntry[str]]]:
        with it:
            entries = list(it)
        hidden = policy.hidden_names(rel, [entry.name for entry in entries])
        yield iter([entry for entry in entries if entry.name not in hidden])

    return visible()


def open_root_beneath(
    root: Root, below: tuple[str, ...], confinement: Confinement, real: str, given: str
) -> Root:
    """A client's root that lies inside the allowed directory ``root``, opened beneath
    that directory's descriptor (symlinks inside followed), so it cannot be
    anywhere else; it keeps ``root``'s policy (ENOENT if the policy hides it).
    Raises OSError."""
    fd = Location(root, below).open(confinement, os.O_PATH | os.O_DIRECTORY, exact=False)
    return Root(fd, real, given, root.policy.beneath(below))

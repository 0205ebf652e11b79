"""The descriptors the chokepoint hands out: :class:`Handle` (an ``O_PATH`` descriptor
and every fact taken from it) and :class:`Directory` (an open directory: every ``*at``
call on one entry name, each judged by the policy first, and a rename's check of what
is below a directory)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint.confinement import (
    EAGAIN_RETRIES,
    LIST_FLAGS,
    READ_FLAGS,
    Confinement,
    Location,
    entry_name,
    same_file,
)
from sandboxfs.core.errors import Conflict
from sandboxfs.core.policy import Policy, PolicyRefusal, Verdict
from sandboxfs.core.traversal import ENTRY, TOO_DEEP, TOO_MANY, Bounds, Traversal

_VISIBLE: Final = Verdict(hidden=False, protected=False)


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
        return (*self.location.rel, entry_name(name))

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
        return self.confinement.open(self.fd, entry_name(name), flags, exact=True, mode=mode)

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
            return os.stat(entry_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, name: str) -> str:
        if self.policy.patterned:
            self.policy.check_visible(self._below(name))
        return os.readlink(entry_name(name), dir_fd=self.fd)

    def is_mount_point(self, name: str) -> bool:
        """Whether the entry ``name`` is the root of a mount (bind mounts included)."""
        return syscalls.is_mount_root(self.fd, entry_name(name))

    def hides(self, name: str, st: os.stat_result, parent_dev: int) -> bool:
        """Whether a server that refuses mount crossings must show nothing of what the
        entry ``name`` (its ``lstat`` ``st``) holds: it is a mount point."""
        if not self.confinement.no_xdev:
            return False
        return st.st_dev != parent_dev or self.is_mount_point(name)

    def mkdir(self, name: str, mode: int = 0o777) -> None:
        self._may_change(name, existing=False)
        os.mkdir(entry_name(name), mode, dir_fd=self.fd)

    def symlink(self, target: str, name: str) -> None:
        self._may_change(name, existing=False)
        os.symlink(target, entry_name(name), dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        self._may_change(name, existing=True)
        os.unlink(entry_name(name), dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        self._may_change(name, existing=True)
        os.rmdir(entry_name(name), dir_fd=self.fd)

    def link(self, fd: int, name: str) -> None:
        """Give the open file ``fd`` (an ``O_TMPFILE``) the name ``name`` here."""
        self._may_change(name, existing=False)
        syscalls.link_fd(fd, self.fd, entry_name(name))

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
        syscalls.renameat2(self.fd, entry_name(name), to.fd, entry_name(to_name), flags)

    def check_creatable(self, names: tuple[str, ...]) -> None:
        """Raise (PolicyRefusal), before anything is made, unless the policy lets each
        of ``names``, every one inside the one before, be created in this directory
        (so a ``mkdir -p`` the policy stops half-way is refused whole)."""
        policy = self.policy
        if policy.active:
            rel = self.location.rel
            for name in names:
                rel = (*rel, entry_name(name))
                policy.check_change(rel)

    def check_tree_removable(self, name: str) -> None:
        """Refuse (PolicyRefusal), before anything is removed, a recursive removal of
        the directory ``name`` that would meet an entry the policy hides or protects
        (a removal that stopped there would be half done)."""
        if self.policy.patterned:
            here = self.location.child(entry_name(name))
            self._check_subtree(name, here, here)

    def _check_subtree(self, name: str, here: Location, there: Location) -> None:
        """Refuse (PolicyRefusal) to move the directory ``name`` (at ``here``) to
        ``there`` if any entry below it, hidden ones included, is hidden or
        protected at either place, or if there are too many, or too deep, to check."""
        try:
            st = os.stat(entry_name(name), dir_fd=self.fd, follow_symlinks=False)
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

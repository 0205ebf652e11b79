"""The Root layer: every filesystem operation sandboxfs performs, through descriptors.

Synchronous, thread-safe, no MCP types.  Each method takes request paths as the
client gave them and raises :class:`~sandboxfs.core.errors.SandboxError` with
messages naming only those paths.  Guarantees:

* Reads open only regular files; FIFOs, sockets and devices are refused
  without being opened (an ``O_PATH`` probe, then a non-blocking open checked
  to be the same file).
* Mutations resolve the parent directory beneath an allowed directory and act
  on one entry name with ``*at`` calls.
* Writes replace atomically (temporary file, ``fsync``, rename, ``fsync`` of the
  directory): a reader sees the old or the new content, never a mix, and a
  failed write leaves the old file untouched.  Replacing breaks hard links by
  design, so a write never reaches another name of the file.
* Appends happen in place only on a file with a single name.
* No descriptor outlives the call that opened it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import operator
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, Literal, NamedTuple, final

from sandboxfs.binding import syscalls
from sandboxfs.core.errors import (
    AlreadyExists,
    Conflict,
    HardLinked,
    IsADirectory,
    LimitExceeded,
    NotADirectory,
    NotARegularFile,
    NotFound,
    PermissionDenied,
    SandboxError,
    Unsupported,
    from_oserror,
)
from sandboxfs.core.resolver import Location, Resolver, closing_fd
from sandboxfs.core.watch import Watch
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.metadata import SAFE_MODE_BITS, carry_owner_and_mode, copy_xattrs, read_xattrs
from sandboxfs.fs.revisions import (
    ABSENT,
    RevisionCache,
    SameBytes,
    check,
    content_revision,
    describe_entry,
    exclusive_lock,
    file_revision,
    holds_exactly,
    stat_key,
    tree_revision,
)
from sandboxfs.fs.staging import LEAF_RESOLVE, StagedFile, copy_contents, fsync_dir, write_all

log = logging.getLogger(__name__)

EntryKind = Literal["file", "directory", "symlink", "other"]

#: Flags for opening a file to read: never block on a FIFO, never adopt a tty.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
#: Flags for opening a directory to list it.
_LIST_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
#: How often a conditional mutation retries when the entry changes under it.
_GUARD_ATTEMPTS: Final = 8


class Entry(NamedTuple):
    """One directory entry, classified without following symlinks."""

    name: str
    kind: EntryKind
    #: ``lstat`` of the entry when asked for (None if it vanished meanwhile).
    lstat: os.stat_result | None = None


_NAME: Final = operator.attrgetter("name")


def _in_byte_order(entries: list[Entry]) -> None:
    """Sort by the names' bytes.  For valid Unicode, code point order is UTF-8 byte
    order, so only names holding undecodable bytes need encoding."""
    entries.sort()  # by name first; names in one directory are distinct
    if not all(map(str.isascii, map(_NAME, entries))):
        entries.sort(key=lambda entry: os.fsencode(entry.name))


@final
class OpenFile:
    """A regular file open for reading; closes its descriptor on exit."""

    __slots__ = ("file", "stat")

    def __init__(self, fd: int, st: os.stat_result) -> None:
        self.file = io.FileIO(fd, "rb", closefd=True)
        self.stat = st

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    @property
    def fd(self) -> int:
        return self.file.fileno()


@final
class Inspection(NamedTuple):
    """What ``get_file_info`` reports of a path that is not a symlink."""

    info: syscalls.Statx
    xattrs: dict[str, bytes]
    revision: str | None


class _TooManyEntries(Exception):
    """A tree has more entries than a revision may describe."""


def kind_of(mode: int) -> EntryKind:
    """Classify a ``st_mode`` the way listings report it."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _require_regular(st: os.stat_result, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectory(f"EISDIR: is a directory, not a file: {path}")
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {path}")


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lstat_all(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """Every entry of the directory open at ``dir_fd`` with its ``lstat`` (entries
    removed while it is read are left out)."""
    found = []
    with os.scandir(dir_fd) as it:
        for item in it:
            try:
                found.append((item.name, item.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    return found


def _changed_after_read(path: str) -> Conflict:
    return Conflict(
        f"Revision mismatch for {path}: it changed after it was read; nothing was changed. "
        "Read it again and retry."
    )


def _check(expected: str | SameBytes, current: str, path: str) -> None:
    """Raise Conflict unless an entry whose revision is ``current`` meets ``expected``
    (exact bytes are met only by a regular file, compared under the lock)."""
    if isinstance(expected, SameBytes):
        raise _changed_after_read(path)
    check(expected, current, path)


def _lstat_leaf(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


@final
class Sandbox:
    """Filesystem operations confined to the allowed directories of a Resolver."""

    __slots__ = ("limits", "resolver", "revisions")

    def __init__(
        self,
        resolver: Resolver,
        limits: Limits | None = None,
        revisions: RevisionCache | None = None,
    ) -> None:
        self.resolver = resolver
        self.limits = limits or Limits()
        #: Revisions of files already hashed (shared by the server's calls).
        self.revisions = revisions or RevisionCache()

    def with_watch(self, watch: Watch) -> Sandbox:
        """A view of this sandbox whose blocking steps report to ``watch``."""
        return Sandbox(self.resolver.with_watch(watch), self.limits, self.revisions)

    # -- reading ---------------------------------------------------------------

    def open_file(self, path: str) -> OpenFile:
        """Open a regular file for reading (symlinks inside followed).

        Special files are refused before they are ever opened for reading.
        """
        probe, loc = self.resolver.open(path, os.O_PATH)
        return self._reopen_regular(probe, loc, path, nofollow=0)

    def open_file_at(self, loc: Location, path: str) -> OpenFile:
        """Open the regular file at ``loc`` without following a final symlink (walks)."""
        try:
            probe = self.resolver.openat(loc, os.O_PATH | os.O_NOFOLLOW)
        except OSError as exc:
            raise self.resolver.error(exc, path) from None
        return self._reopen_regular(probe, loc, path, nofollow=os.O_NOFOLLOW)

    def _reopen_regular(self, probe: int, loc: Location, path: str, nofollow: int) -> OpenFile:
        """From an ``O_PATH`` probe of a regular file to a readable descriptor of a
        regular file at the same place; anything else is refused without being opened.

        A regular file that replaced the probed one in between (an atomic replace by
        another writer) is accepted: it is what the name holds now, opened beneath the
        same root.
        """
        with closing_fd(probe):
            _require_regular(os.fstat(probe), path)
        try:
            fd = self.resolver.openat(loc, _READ_FLAGS | nofollow)
        except OSError as exc:
            raise self.resolver.error(exc, path) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Conflict(f"The file changed while it was being opened; try again: {path}")
        return OpenFile(fd, st)

    def stat(self, path: str, *, follow: bool = True) -> syscalls.Statx:
        """``statx`` of ``path``; with ``follow=False`` a final symlink is described itself."""
        fd, _ = self.resolver.open(path, os.O_PATH, follow=follow)
        with closing_fd(fd):
            return syscalls.fstatx(fd)

    def readlink(self, path: str) -> str:
        """The target text of the symlink ``path``."""
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            try:
                return os.readlink(leaf, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    raise SandboxError(f"EINVAL: not a symbolic link: {path}") from None
                raise from_oserror(exc, path) from None

    def xattrs(self, path: str) -> dict[str, bytes]:
        """The extended attributes of the file or directory ``path``, read through a
        descriptor (special files are refused unopened)."""
        probe, loc = self.resolver.open(path, os.O_PATH)
        with closing_fd(probe):
            mode = os.fstat(probe).st_mode
        if stat.S_ISDIR(mode):
            try:
                fd = self.resolver.openat(loc, _LIST_FLAGS)
            except OSError as exc:
                raise self.resolver.error(exc, path) from None
            with closing_fd(fd):
                return read_xattrs(fd)
        with self.open_file(path) as f:
            return read_xattrs(f.fd)

    def inspect(self, path: str) -> Inspection | None:
        """``statx``, extended attributes and revision of ``path``, from one resolution
        (what :meth:`stat`, :meth:`xattrs` and :meth:`revision` would say); None if
        ``path`` is itself a symlink.  Special files are described, never opened."""
        probe, loc = self.resolver.open(path, os.O_PATH, follow=False)
        with closing_fd(probe):
            info = syscalls.fstatx(probe)
            if stat.S_ISLNK(info.mode):
                return None
            if not (stat.S_ISREG(info.mode) or stat.S_ISDIR(info.mode)):
                return Inspection(info, {}, None)
            st = os.fstat(probe)
        fd, opened = self._reopen(loc, st, path, os.O_NOFOLLOW, "it was described")
        with closing_fd(fd):
            attributes = read_xattrs(fd)
            return Inspection(info, attributes, self._revision_of_fd(fd, opened, path, fresh=False))

    def directory(self, path: str) -> Location:
        """The location of the directory ``path`` (symlinks inside followed), for walks."""
        fd, loc = self.resolver.open(path, os.O_PATH | os.O_DIRECTORY)
        os.close(fd)
        return loc

    def list_dir(self, path: str, *, with_stat: bool = False) -> list[Entry]:
        """The entries of the directory ``path``, in byte order of their names."""
        fd, _ = self.resolver.open(path, _LIST_FLAGS)
        with closing_fd(fd), self.resolver.watch.step(path):
            return self._read_entries(fd, path, with_stat)

    def list_dir_and_revision(self, path: str) -> tuple[list[Entry], str | None]:
        """The entries of the directory ``path`` (with their ``lstat``) and its revision
        (None above the revision budget), both from one reading of it."""
        fd, _ = self.resolver.open(path, _LIST_FLAGS)
        with closing_fd(fd), self.resolver.watch.step(path):
            entries = self._read_entries(fd, path, with_stat=True)
            budget = self.limits.revision_entries
            try:
                return entries, tree_revision(self._tree_lines(fd, path, budget, entries))
            except _TooManyEntries:
                return entries, None
            except OSError as exc:
                raise from_oserror(exc, path) from None

    def scan(self, loc: Location, path: str, *, with_stat: bool = False) -> list[Entry]:
        """The entries of the directory at ``loc``, reopened beneath its root and not
        followed if it has become a symlink.  ``path`` names it in errors."""
        with self.resolver.watch.step(path):
            try:
                fd = self.resolver.openat(loc, _LIST_FLAGS | os.O_NOFOLLOW)
            except OSError as exc:
                raise self.resolver.error(exc, path) from None
            with closing_fd(fd):
                return self._read_entries(fd, path, with_stat)

    @staticmethod
    def _read_entries(fd: int, path: str, with_stat: bool) -> list[Entry]:
        entries: list[Entry] = []
        append = entries.append
        try:
            with os.scandir(fd) as it:
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
        except OSError as exc:
            raise from_oserror(exc, path) from None
        _in_byte_order(entries)
        return entries

    # -- revisions ---------------------------------------------------------------

    def file_revision(self, f: OpenFile) -> str | None:
        """The revision of an open file (from the cache when its ``fstat`` is
        unchanged); None if it is larger than the edit limit."""
        return self._file_revision(f.fd, f.stat, fresh=False)

    def _file_revision(self, fd: int, st: os.stat_result, *, fresh: bool) -> str | None:
        if st.st_size > self.limits.edit_bytes:
            return None
        key = stat_key(st)
        if not fresh and (known := self.revisions.get(key)) is not None:
            return known
        revision = file_revision(fd, st.st_size)
        if stat_key(os.fstat(fd)) == key:
            self.revisions.put(key, revision)
        return revision

    def _tree_lines(
        self, dir_fd: int, path: str, budget: int, top: list[Entry] | None = None
    ) -> Iterator[str]:
        """Description lines of everything below ``dir_fd``, walked through descriptors
        opened beneath it without following symlinks; ``top`` (entries with their
        ``lstat``, read from ``dir_fd``) spares reading the first level again.  More
        than ``budget`` entries raise :class:`_TooManyEntries`, before any is stat-ed."""
        if not self._fits(dir_fd, path, budget, top):
            raise _TooManyEntries(budget)
        pending: list[tuple[int, str]] = [(os.dup(dir_fd), "")]
        seen = 0
        max_slashes = self.limits.tree_depth
        try:
            while pending:
                fd, prefix = pending.pop()
                with closing_fd(fd), self.resolver.watch.step(path):
                    if top is not None and not prefix:
                        level = [(e.name, e.lstat) for e in top if e.lstat is not None]
                    else:
                        level = _lstat_all(fd)
                    for name, st in level:
                        seen += 1
                        if seen > budget:
                            raise _TooManyEntries(budget)
                        relative = prefix + name
                        mode = st.st_mode
                        if stat.S_ISDIR(mode):
                            yield describe_entry(relative, "directory", st)
                            if relative.count("/") < max_slashes:
                                child = syscalls.openat2(
                                    fd, name, _LIST_FLAGS | os.O_NOFOLLOW, resolve=LEAF_RESOLVE
                                )
                                pending.append((child, relative + "/"))
                        elif stat.S_ISLNK(mode):
                            target = os.readlink(name, dir_fd=fd)
                            yield describe_entry(relative, "symlink", st, target)
                        else:
                            yield describe_entry(relative, kind_of(mode), st)
        finally:
            for fd, _ in pending:
                os.close(fd)

    def _fits(self, dir_fd: int, path: str, budget: int, top: list[Entry] | None) -> bool:
        """Whether the tree :meth:`_tree_lines` would describe has at most ``budget``
        entries, counted by name alone (no ``stat``): a big tree's revision is given
        up at a fraction of the cost of describing it up to the budget.  A directory
        that cannot be read is not counted; the description reports it."""
        pending: list[tuple[int, int]] = []  # (a directory's fd, its entries' slashes)
        max_slashes = self.limits.tree_depth

        def descend(fd: int, name: str, slashes: int) -> None:
            if slashes < max_slashes:
                with contextlib.suppress(OSError):
                    child = syscalls.openat2(
                        fd, name, _LIST_FLAGS | os.O_NOFOLLOW, resolve=LEAF_RESOLVE
                    )
                    pending.append((child, slashes + 1))

        try:
            if top is None:
                pending.append((os.dup(dir_fd), 0))
                seen = 0
            else:  # the first level is known: only what is below it is read
                seen = len(top)
                for entry in top if seen <= budget else ():
                    if entry.kind == "directory":
                        descend(dir_fd, entry.name, 0)
            while pending and seen <= budget:
                fd, slashes = pending.pop()
                with closing_fd(fd), self.resolver.watch.step(path), os.scandir(fd) as it:
                    for item in it:
                        seen += 1
                        if seen > budget:
                            break
                        if item.is_dir(follow_symlinks=False):
                            descend(fd, item.name, slashes)
        except OSError:
            return True
        finally:
            for fd, _ in pending:
                os.close(fd)
        return seen <= budget

    def _revision_of_fd(self, fd: int, st: os.stat_result, path: str, *, fresh: bool) -> str | None:
        """A file's or directory's revision.  ``fresh`` (for a conditional mutation):
        hash the file afresh, and describe a tree of up to the walk limit, else
        refuse; otherwise a file may come from the cache and a tree larger than the
        revision budget has no revision (None)."""
        if stat.S_ISREG(st.st_mode):
            return self._file_revision(fd, st, fresh=fresh)
        if not stat.S_ISDIR(st.st_mode):
            return None
        budget = self.limits.walk_entries if fresh else self.limits.revision_entries
        try:
            return tree_revision(self._tree_lines(fd, path, budget))
        except _TooManyEntries:
            if not fresh:
                return None
            raise LimitExceeded(
                f"More than {budget} entries below {path}; its revision cannot be computed"
            ) from None
        except OSError as exc:
            raise from_oserror(exc, path) from None

    def revision(self, path: str, *, fresh: bool = False) -> str | None:
        """The revision of what ``path`` names (symlinks inside followed): a file's
        bytes, a directory's tree, ``absent`` if nothing is there; None for special
        files, files larger than the edit limit, and (unless ``fresh``, see
        :meth:`_revision_of_fd`) trees larger than the revision budget."""
        try:
            probe, loc = self.resolver.open(path, os.O_PATH)
        except NotFound:
            return ABSENT
        with closing_fd(probe):
            st = os.fstat(probe)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return None
        fd, opened = self._reopen(loc, st, path, 0, "its revision was computed")
        with closing_fd(fd):
            return self._revision_of_fd(fd, opened, path, fresh=fresh)

    def _reopen(
        self, loc: Location, st: os.stat_result, path: str, nofollow: int, meanwhile: str
    ) -> tuple[int, os.stat_result]:
        """The regular file or directory probed as ``st`` at ``loc``, reopened for
        reading (a directory for listing), with its ``fstat``; Conflict if something
        else is there now ("``path`` changed while ``meanwhile``")."""
        flags = (_LIST_FLAGS if stat.S_ISDIR(st.st_mode) else _READ_FLAGS) | nofollow
        try:
            fd = self.resolver.openat(loc, flags)
        except OSError as exc:
            raise self.resolver.error(exc, path) from None
        opened = os.fstat(fd)
        if not _same_file(opened, st):
            os.close(fd)
            raise Conflict(f"{path} changed while {meanwhile}; try again")
        return fd, opened

    @contextmanager
    def _guarded(
        self, dir_fd: int, leaf: str, path: str, expected: str | SameBytes | None
    ) -> Iterator[os.stat_result | None]:
        """Hold the entry ``leaf`` steady for a compare-and-mutate.

        Yields its ``lstat`` (None if absent).  With ``expected`` (a revision, or
        the exact bytes of a regular file), first checks, under an exclusive lock on
        the entry (released after the block), that it still matches; a mismatch
        raises Conflict and nothing changes.
        """
        if expected is None:
            yield _lstat_leaf(dir_fd, leaf)
            return
        for _ in range(_GUARD_ATTEMPTS):
            st = _lstat_leaf(dir_fd, leaf)
            if st is None:
                _check(expected, ABSENT, path)
                yield None
                return
            if stat.S_ISLNK(st.st_mode):
                target = os.fsencode(os.readlink(leaf, dir_fd=dir_fd))
                _check(expected, content_revision(target), path)
                yield st
                return
            fd = self._open_to_lock(dir_fd, leaf, st, path)
            if fd is None:
                continue
            with closing_fd(fd), exclusive_lock(fd, path):
                now = _lstat_leaf(dir_fd, leaf)
                if now is None or not _same_file(now, os.fstat(fd)):
                    continue  # replaced while we waited for the lock: look again
                if isinstance(expected, SameBytes):
                    if not (stat.S_ISREG(now.st_mode) and holds_exactly(fd, expected.data)):
                        raise _changed_after_read(path)
                else:
                    current = self._revision_of_fd(fd, now, path, fresh=True)
                    check(expected, current or "unknown", path)
                yield now
                return
        raise Conflict(f"{path} kept changing; try again")

    @staticmethod
    def _open_to_lock(dir_fd: int, leaf: str, st: os.stat_result, path: str) -> int | None:
        """A descriptor of the entry to lock (None if it vanished: look again)."""
        if stat.S_ISDIR(st.st_mode):
            attempts = [_LIST_FLAGS | os.O_NOFOLLOW]
        elif stat.S_ISREG(st.st_mode):
            # Writable if we may (an OFD lock needs it), else readable (flock then).
            attempts = [
                os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                _READ_FLAGS | os.O_NOFOLLOW,
            ]
        else:
            raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {path}")
        for flags in attempts:
            try:
                return syscalls.openat2(dir_fd, leaf, flags, resolve=LEAF_RESOLVE)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError, InterruptedError):
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return None  # became a symlink: look again
                if exc.errno != errno.EACCES or flags == attempts[-1]:
                    raise from_oserror(exc, path) from None
        return None

    # -- creating and writing ----------------------------------------------------

    def make_dirs(self, path: str, *, expected: str | None = None) -> bool:
        """Create ``path`` and any missing parents, one component at a time, each
        beneath its parent's descriptor.  True if anything was created.  With
        ``expected="absent"`` the directory must not exist yet."""
        loc = self.resolver.locate(path)
        existing = self._existing_depth(loc, path)
        if existing == len(loc.rel):
            if expected is not None:
                check(expected, self.revision(path, fresh=True) or "unknown", path)
            return False
        if expected not in (None, ABSENT):
            check(expected, ABSENT, path)
        for depth in range(existing, len(loc.rel)):
            here = Location(loc.root, loc.rel[: depth + 1])
            last = depth == len(loc.rel) - 1
            parent_fd, _ = self.resolver.open_location(
                here.parent, os.O_PATH | os.O_DIRECTORY, path
            )
            with closing_fd(parent_fd):
                try:
                    os.mkdir(here.name, dir_fd=parent_fd)
                except FileExistsError:
                    if last and expected == ABSENT:
                        raise Conflict(
                            f"Revision mismatch for {path}: it was created meanwhile"
                        ) from None
                except OSError as exc:
                    raise from_oserror(exc, path) from None
                try:
                    os.close(
                        syscalls.openat2(
                            parent_fd,
                            here.name,
                            os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW,
                            resolve=LEAF_RESOLVE,
                        )
                    )
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        raise NotADirectory(f"ENOTDIR: not a directory: {path}") from None
                    raise from_oserror(exc, path) from None
        return True

    def _existing_depth(self, loc: Location, path: str) -> int:
        """How many leading components of ``loc`` already exist (as directories)."""
        existing = len(loc.rel)
        while existing >= 0:
            try:
                fd, _ = self.resolver.open_location(
                    Location(loc.root, loc.rel[:existing]), os.O_PATH, path
                )
            except NotFound:
                existing -= 1
                continue
            with closing_fd(fd):
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    if existing == len(loc.rel):
                        raise AlreadyExists(
                            f"EEXIST: a file that is not a directory already exists: {path}"
                        )
                    raise NotADirectory(f"ENOTDIR: not a directory: {path}")
            return existing
        return 0

    def create_file(self, path: str, data: bytes) -> os.stat_result:
        """Create ``path`` with ``data``; fails if anything exists there already.

        The file appears complete or not at all.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            return self._stage(dir_fd, leaf, path, lambda fd: write_all(fd, data), replace=False)

    def replace_file(
        self, path: str, data: bytes, *, expected: str | SameBytes | None = None
    ) -> os.stat_result:
        """Write ``data`` to ``path`` atomically, creating it if missing.

        A symlink inside the allowed directories is written through.  The old
        file's permissions (never setuid/setgid), owner where permitted and
        extended attributes are kept.  With ``expected``, the file must still
        have that revision (``absent``: must not exist) or hold exactly those
        bytes, checked under a lock; otherwise Conflict is raised and nothing
        changes.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=True)
        with closing_fd(dir_fd), self._guarded(dir_fd, leaf, path, expected) as st:
            if st is None:
                if expected is None:
                    return self._stage(
                        dir_fd, leaf, path, lambda fd: write_all(fd, data), replace=True
                    )
                try:  # "absent" was expected: it must still be absent when published
                    return self._stage(
                        dir_fd, leaf, path, lambda fd: write_all(fd, data), replace=False
                    )
                except AlreadyExists:
                    raise Conflict(
                        f"Revision mismatch for {path}: it was created meanwhile"
                    ) from None
            old_fd, old_stat = self._open_existing_for_replace(dir_fd, leaf, path)
            with closing_fd(old_fd):

                def fill(fd: int) -> None:
                    carry_owner_and_mode(old_stat, fd)
                    copy_xattrs(old_fd, fd)
                    write_all(fd, data)

                return self._stage(dir_fd, leaf, path, fill, replace=True)

    def _open_existing_for_replace(
        self, dir_fd: int, leaf: str, path: str
    ) -> tuple[int, os.stat_result]:
        """The file about to be replaced, opened for writing (which also proves we may)."""
        st = _lstat_leaf(dir_fd, leaf)
        if st is None:
            raise Conflict(f"The file was removed while it was being written; try again: {path}")
        _require_regular(st, path)
        try:
            fd = syscalls.openat2(
                dir_fd,
                leaf,
                os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                resolve=LEAF_RESOLVE,
            )
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise PermissionDenied(
                    f"EACCES: permission denied (the file is read-only): {path}", "EACCES"
                ) from None
            if exc.errno == errno.ELOOP:
                raise Conflict(
                    f"The file changed while it was being written; try again: {path}"
                ) from None
            raise from_oserror(exc, path) from None
        opened = os.fstat(fd)
        if not (_same_file(opened, st) and stat.S_ISREG(opened.st_mode)):
            os.close(fd)
            raise Conflict(f"The file changed while it was being written; try again: {path}")
        return fd, opened

    def _stage(
        self,
        dir_fd: int,
        leaf: str,
        path: str,
        fill: Callable[[int], None],
        *,
        replace: bool,
    ) -> os.stat_result:
        """Prepare a new file in ``dir_fd`` with ``fill`` and publish it as ``leaf``."""
        try:
            staged = StagedFile(dir_fd, leaf)
        except OSError as exc:
            raise from_oserror(exc, path) from None
        try:
            fill(staged.fd)
            if replace:
                staged.publish_over(leaf)
            else:
                staged.publish_new(leaf)
            return os.fstat(staged.fd)
        except FileExistsError:
            raise AlreadyExists(f"EEXIST: destination already exists: {path}") from None
        except OSError as exc:
            raise from_oserror(exc, path) from None
        finally:
            staged.close()

    def append_file(self, path: str, data: bytes, *, expected: str | None = None) -> os.stat_result:
        """Append ``data`` to ``path`` in place, creating it if missing.

        Refused on a file with more than one hard link: appending would change
        the file at its other names too, possibly outside the allowed directories.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=True)
        with closing_fd(dir_fd), self._guarded(dir_fd, leaf, path, expected) as st:
            if st is not None:
                _require_regular(st, path)
            for _ in range(_GUARD_ATTEMPTS):
                fd = self._open_for_append(dir_fd, leaf, path, exclusive=expected == ABSENT)
                with closing_fd(fd):
                    if not self._only_name_is(fd, dir_fd, leaf, path):
                        continue
                    try:
                        write_all(fd, data)
                        os.fsync(fd)
                    except OSError as exc:
                        raise from_oserror(exc, path) from None
                    return os.fstat(fd)
            raise Conflict(f"{path} kept changing while it was being opened; try again")

    @staticmethod
    def _open_for_append(dir_fd: int, leaf: str, path: str, *, exclusive: bool) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        if exclusive:
            flags |= os.O_EXCL
        try:
            return syscalls.openat2(dir_fd, leaf, flags, mode=0o666, resolve=LEAF_RESOLVE)
        except FileExistsError:
            raise Conflict(f"Revision mismatch for {path}: it was created meanwhile") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Conflict(f"The file changed while it was being opened: {path}") from None
            raise from_oserror(exc, path) from None

    @staticmethod
    def _only_name_is(fd: int, dir_fd: int, leaf: str, path: str) -> bool:
        """Whether the open file's one and only name is ``leaf`` in ``dir_fd``.

        Names cannot be read atomically, so the check is layered:

        1. The name lookup is bracketed by ``fstat``s of the file (one link, same
           ctime) and of the directory (same ctime and mtime): a link or unlink
           in between changes them (Linux records the change at fine
           granularity once the time has been queried).
        2. A lookup can still see a name whose unlink is under way (the
           directory entry lingers until the unlink returns, after the link
           count dropped).  So the name is renamed onto itself with
           ``RENAME_NOREPLACE``: that takes the directory's lock, so any unlink
           in progress finishes first, and fails if the name is gone.  Then the
           file must still have one link and the same ctime.

        False means "look again"; a file that really has other names raises
        HardLinked.
        """
        dir_before = os.fstat(dir_fd)
        first = os.fstat(fd)
        _require_regular(first, path)
        named = _lstat_leaf(dir_fd, leaf)
        last = os.fstat(fd)
        dir_after = os.fstat(dir_fd)
        same_name = named is not None and _same_file(named, first)
        if max(first.st_nlink, last.st_nlink) > 1 and same_name:
            raise HardLinked(
                f"Refusing to append in place: the file has {last.st_nlink} hard links, so the "
                f"change would also appear at its other names: {path}. Use write_file to "
                "replace it with a file of its own."
            )
        if not (
            same_name
            and first.st_nlink == last.st_nlink == 1
            and first.st_ctime_ns == last.st_ctime_ns
            and dir_before.st_ctime_ns == dir_after.st_ctime_ns
            and dir_before.st_mtime_ns == dir_after.st_mtime_ns
        ):
            return False
        try:  # the directory-lock barrier of step 2
            syscalls.renameat2(dir_fd, leaf, dir_fd, leaf, syscalls.RENAME_NOREPLACE)
        except FileExistsError:
            pass
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise Unsupported(
                    f"This filesystem cannot rename without replacing, so sandboxfs cannot "
                    f"append in place safely: {path}. Use write_file instead."
                ) from None
            raise from_oserror(exc, path) from None
        final = os.fstat(fd)
        return final.st_nlink == 1 and final.st_ctime_ns == first.st_ctime_ns

    # -- moving, copying, removing -----------------------------------------------

    def rename(
        self,
        source: str,
        destination: str,
        *,
        expected: str | None = None,
        expected_destination: str | None = None,
    ) -> None:
        """Move ``source`` to ``destination``, never replacing anything there.

        Symlinks are moved as links.  Across filesystems a regular file (or a
        symlink) is copied then removed; a directory is refused.  ``expected``
        and ``expected_destination`` are revisions each side must still have.
        """
        src_fd, src_leaf, _ = self.resolver.parent(source, follow_leaf=False)
        with closing_fd(src_fd), self._guarded(src_fd, src_leaf, source, expected):
            dst_fd, dst_leaf, _ = self.resolver.parent(destination, follow_leaf=False)
            with closing_fd(dst_fd):
                if expected_destination is not None:
                    there = _lstat_leaf(dst_fd, dst_leaf)
                    check(expected_destination, ABSENT if there is None else "present", destination)
                try:
                    syscalls.renameat2(
                        src_fd, src_leaf, dst_fd, dst_leaf, syscalls.RENAME_NOREPLACE
                    )
                except OSError as exc:
                    if exc.errno == errno.EXDEV:
                        self._move_across(
                            src_fd, src_leaf, dst_fd, dst_leaf, source=source, dest=destination
                        )
                        return
                    raise self._rename_error(exc, source, destination) from None
                fsync_dir(dst_fd)

    @staticmethod
    def _rename_error(exc: OSError, source: str, destination: str) -> SandboxError:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return AlreadyExists(f"EEXIST: destination already exists: {destination}")
        if exc.errno == errno.EINVAL:
            return SandboxError(
                f"EINVAL: cannot move a directory into itself, or the filesystem cannot "
                f"rename without replacing: {source} -> {destination}",
                "EINVAL",
            )
        if exc.errno == errno.ENOENT:
            return NotFound(f"ENOENT: no such file or directory: {source}")
        return from_oserror(exc, f"{source} -> {destination}")

    def _move_across(
        self, src_fd: int, src_leaf: str, dst_fd: int, dst_leaf: str, *, source: str, dest: str
    ) -> None:
        st = _lstat_leaf(src_fd, src_leaf)
        if st is None:
            raise NotFound(f"ENOENT: no such file or directory: {source}")
        if stat.S_ISDIR(st.st_mode):
            raise Unsupported(
                f"Cannot move a directory across filesystems: {source}. "
                "Create the destination directory and move its files one at a time."
            )
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(src_leaf, dir_fd=src_fd)
            try:
                os.symlink(target, dst_leaf, dir_fd=dst_fd)
            except FileExistsError:
                raise AlreadyExists(f"EEXIST: destination already exists: {dest}") from None
        elif stat.S_ISREG(st.st_mode):
            fd = self._open_leaf_for_read(src_fd, src_leaf, source)
            with closing_fd(fd):
                if not _same_file(os.fstat(fd), st):
                    raise Conflict(f"The file changed while it was being moved: {source}")
                self._copy_into(fd, st, dst_fd, dst_leaf, dest)
        else:
            raise NotARegularFile(f"Not a regular file (FIFO, socket or device): {source}")
        current = _lstat_leaf(src_fd, src_leaf)
        if current is None or not _same_file(current, st):
            log.warning("move across filesystems: source changed before removal; kept")
            return
        try:
            os.unlink(src_leaf, dir_fd=src_fd)
        except OSError as exc:
            raise from_oserror(exc, source) from None

    @staticmethod
    def _open_leaf_for_read(dir_fd: int, leaf: str, path: str) -> int:
        """A regular file named ``leaf`` opened for reading; special files are refused
        before they are opened (``O_PATH`` probe, then a same-inode check)."""
        try:
            probe = syscalls.openat2(dir_fd, leaf, os.O_PATH | os.O_NOFOLLOW, resolve=LEAF_RESOLVE)
        except OSError as exc:
            raise from_oserror(exc, path) from None
        with closing_fd(probe):
            expected = os.fstat(probe)
        _require_regular(expected, path)
        try:
            fd = syscalls.openat2(dir_fd, leaf, _READ_FLAGS | os.O_NOFOLLOW, resolve=LEAF_RESOLVE)
        except OSError as exc:
            raise from_oserror(exc, path) from None
        if not _same_file(os.fstat(fd), expected):
            os.close(fd)
            raise Conflict(f"The file changed while it was being opened; try again: {path}")
        return fd

    def copy_file(
        self,
        source: str,
        destination: str,
        *,
        expected: str | None = None,
        expected_destination: str | None = None,
    ) -> os.stat_result:
        """Copy the regular file ``source`` to a new ``destination``.

        Permissions (never setuid/setgid), modification time and extended
        attributes are kept.  The copy appears complete or not at all; an
        existing destination is never overwritten.
        """
        src_dir, src_leaf, _ = self.resolver.parent(source, follow_leaf=True)
        with closing_fd(src_dir), self._guarded(src_dir, src_leaf, source, expected) as st:
            if st is None:
                raise NotFound(f"ENOENT: no such file or directory: {source}")
            fd = self._open_leaf_for_read(src_dir, src_leaf, source)
            with closing_fd(fd):
                src_stat = os.fstat(fd)
                dst_fd, dst_leaf, _ = self.resolver.parent(destination, follow_leaf=False)
                with closing_fd(dst_fd):
                    there = _lstat_leaf(dst_fd, dst_leaf)
                    if expected_destination is not None:
                        check(
                            expected_destination,
                            ABSENT if there is None else "present",
                            destination,
                        )
                    if there is not None:
                        raise AlreadyExists(f"EEXIST: destination already exists: {destination}")
                    return self._copy_into(fd, src_stat, dst_fd, dst_leaf, destination)

    def _copy_into(
        self, src_fd: int, src_stat: os.stat_result, dst_fd: int, dst_leaf: str, dest: str
    ) -> os.stat_result:
        def fill(fd: int) -> None:
            copy_contents(src_fd, fd)
            os.fchmod(fd, stat.S_IMODE(src_stat.st_mode) & SAFE_MODE_BITS)
            copy_xattrs(src_fd, fd)
            os.utime(fd, ns=(src_stat.st_atime_ns, src_stat.st_mtime_ns))

        return self._stage(dst_fd, dst_leaf, dest, fill, replace=False)

    def unlink(self, path: str) -> None:
        """Remove the file (or symlink, as a link) ``path``; directories are refused."""
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            try:
                os.unlink(leaf, dir_fd=dir_fd)
            except OSError as exc:
                raise from_oserror(exc, path) from None

    def rmdir(self, path: str) -> None:
        """Remove the empty directory ``path``."""
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            try:
                os.rmdir(leaf, dir_fd=dir_fd)
            except OSError as exc:
                raise from_oserror(exc, path) from None

    def remove(self, path: str, *, recursive: bool, expected: str | None = None) -> int:
        """Remove a file or symlink (as a link), an empty directory, or with
        ``recursive`` a directory and everything below it, never following a
        symlink.  Returns the number of entries removed."""
        dir_fd, leaf, loc = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd), self._guarded(dir_fd, leaf, path, expected) as st:
            if st is None:
                raise NotFound(f"ENOENT: no such file or directory: {path}")
            try:
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(leaf, dir_fd=dir_fd)
                    return 1
                removed = 1 + (self._clear_dir(loc, path, 1) if recursive else 0)
                os.rmdir(leaf, dir_fd=dir_fd)
                return removed
            except OSError as exc:
                if exc.errno == errno.ENOTEMPTY and not recursive:
                    raise SandboxError(
                        f"ENOTEMPTY: directory not empty: {path}; set recursive to delete it "
                        "and everything below it",
                        "ENOTEMPTY",
                    ) from None
                raise from_oserror(exc, path) from None

    def remove_tree(self, path: str) -> int:
        """Remove ``path`` and, for a directory, everything below it (see :meth:`remove`)."""
        return self.remove(path, recursive=True)

    def _clear_dir(self, loc: Location, path: str, depth: int) -> int:
        if depth > self.limits.tree_depth:
            raise LimitExceeded(
                f"Directory tree deeper than {self.limits.tree_depth} levels; not removed "
                f"completely: {path}"
            )
        try:
            fd = self.resolver.openat(loc, _LIST_FLAGS | os.O_NOFOLLOW)
        except OSError as exc:
            raise from_oserror(exc, path) from None
        removed = 0
        with closing_fd(fd):
            for entry in self._read_entries(fd, path, with_stat=False):
                if entry.kind == "directory":
                    removed += self._clear_dir(loc.child(entry.name), path, depth + 1)
                    os.rmdir(entry.name, dir_fd=fd)
                else:
                    os.unlink(entry.name, dir_fd=fd)
                removed += 1
        return removed

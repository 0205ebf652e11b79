"""The Root layer: every filesystem operation sandboxfs performs, through descriptors.

Synchronous, thread-safe, no MCP types.  Each method takes request paths as the
client gave them and raises :class:`~sandboxfs.errors.SandboxError` with
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

import errno
import io
import logging
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, final

from sandboxfs import syscalls
from sandboxfs.errors import (
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
from sandboxfs.metadata import SAFE_MODE_BITS, carry_owner_and_mode, copy_xattrs
from sandboxfs.resolver import Location, Resolver, closing_fd
from sandboxfs.watch import Watch

log = logging.getLogger(__name__)

EntryKind = Literal["file", "directory", "symlink", "other"]

#: Flags for opening a file to read: never block on a FIFO, never adopt a tty.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
#: Flags for opening a directory to list it.
_LIST_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
#: Leaf-only resolution: one name beneath a parent fd, no symlink at all.
_LEAF_RESOLVE: Final = (
    syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_SYMLINKS | syscalls.RESOLVE_NO_MAGICLINKS
)
_COPY_CHUNK: Final = 1024 * 1024


@final
@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry, classified without following symlinks."""

    name: str
    kind: EntryKind
    #: ``lstat`` of the entry when asked for (None if it vanished meanwhile).
    lstat: os.stat_result | None = None


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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _copy_contents(src_fd: int, dst_fd: int) -> None:
    """Copy all of ``src_fd`` into ``dst_fd``, in the kernel where it can."""
    try:
        while os.copy_file_range(src_fd, dst_fd, _COPY_CHUNK * 64):
            pass
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    os.lseek(src_fd, 0, os.SEEK_SET)
    os.ftruncate(dst_fd, 0)
    os.lseek(dst_fd, 0, os.SEEK_SET)
    while chunk := os.read(src_fd, _COPY_CHUNK):
        _write_all(dst_fd, chunk)


def _fsync_dir(dir_fd: int) -> None:
    """Make a directory's entries durable; skipped if the directory is not readable."""
    try:
        fd = syscalls.openat2(dir_fd, ".", os.O_RDONLY | os.O_DIRECTORY, resolve=_LEAF_RESOLVE)
    except PermissionError:
        return
    with closing_fd(fd):
        os.fsync(fd)


def _lstat_leaf(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


@final
class _Staged:
    """A new file being prepared in a directory, invisible until published.

    Uses an unnamed ``O_TMPFILE`` where the filesystem supports it, else a
    randomly named file that is removed if the operation fails.
    """

    def __init__(self, dir_fd: int, leaf: str) -> None:
        self.dir_fd = dir_fd
        self.name: str | None = None
        try:
            self.fd = syscalls.openat2(
                dir_fd, ".", os.O_TMPFILE | os.O_WRONLY, mode=0o666, resolve=_LEAF_RESOLVE
            )
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        self.fd, self.name = self._create_named(leaf)

    def _create_named(self, leaf: str) -> tuple[int, str]:
        for _ in range(16):
            name = f".{leaf[:64]}.{secrets.token_hex(6)}.sandboxfs-tmp"
            try:
                flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                fd = syscalls.openat2(self.dir_fd, name, flags, mode=0o666, resolve=_LEAF_RESOLVE)
            except FileExistsError:
                continue
            return fd, name
        raise OSError(errno.EEXIST, "could not pick a temporary name")

    def _temp_name(self) -> str:
        """Give an unnamed file a temporary name (needed before a rename)."""
        if self.name is None:
            for _ in range(16):
                name = f".sandboxfs-{secrets.token_hex(8)}.tmp"
                try:
                    syscalls.link_fd(self.fd, self.dir_fd, name)
                except FileExistsError:
                    continue
                self.name = name
                break
            else:
                raise OSError(errno.EEXIST, "could not pick a temporary name")
        return self.name

    def publish_new(self, leaf: str) -> None:
        """Make the file appear as ``leaf``; EEXIST if that name is taken."""
        os.fsync(self.fd)
        if self.name is None:
            syscalls.link_fd(self.fd, self.dir_fd, leaf)
        else:
            syscalls.renameat2(self.dir_fd, self.name, self.dir_fd, leaf, syscalls.RENAME_NOREPLACE)
            self.name = None
        _fsync_dir(self.dir_fd)

    def publish_over(self, leaf: str) -> None:
        """Atomically replace whatever ``leaf`` names with this file."""
        os.fsync(self.fd)
        syscalls.renameat2(self.dir_fd, self._temp_name(), self.dir_fd, leaf, 0)
        self.name = None
        _fsync_dir(self.dir_fd)

    def close(self) -> None:
        """Close the file; a named temporary that was never published is removed."""
        os.close(self.fd)
        if self.name is not None:
            try:
                os.unlink(self.name, dir_fd=self.dir_fd)
            except OSError as exc:
                log.warning("could not remove a temporary file: %s", exc.strerror)


@final
class Sandbox:
    """Filesystem operations confined to the allowed directories of a Resolver."""

    __slots__ = ("max_depth", "resolver")

    def __init__(self, resolver: Resolver, *, max_depth: int = 256) -> None:
        self.resolver = resolver
        self.max_depth = max_depth

    def with_watch(self, watch: Watch) -> Sandbox:
        """A view of this sandbox whose blocking steps report to ``watch``."""
        return Sandbox(self.resolver.with_watch(watch), max_depth=self.max_depth)

    # -- reading ---------------------------------------------------------------

    def open_file(self, path: str) -> OpenFile:
        """Open a regular file for reading (symlinks inside followed).

        Special files are refused before they are ever opened for reading.
        """
        probe, loc = self.resolver.open(path, os.O_PATH)
        with closing_fd(probe):
            expected = os.fstat(probe)
        _require_regular(expected, path)
        try:
            fd = self.resolver.openat(loc, _READ_FLAGS)
        except OSError as exc:
            raise self.resolver.error(exc, path) from None
        st = os.fstat(fd)
        if not (_same_file(st, expected) and stat.S_ISREG(st.st_mode)):
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
        try:
            with os.scandir(fd) as it:
                for item in it:
                    lst: os.stat_result | None = None
                    try:
                        if with_stat or item.is_symlink() is None:
                            lst = item.stat(follow_symlinks=False)
                            kind = kind_of(lst.st_mode)
                        elif item.is_symlink():
                            kind = "symlink"
                        elif item.is_dir(follow_symlinks=False):
                            kind = "directory"
                        elif item.is_file(follow_symlinks=False):
                            kind = "file"
                        else:
                            kind = "other"
                    except FileNotFoundError:
                        continue  # removed while we were listing
                    entries.append(Entry(item.name, kind, lst))
        except OSError as exc:
            raise from_oserror(exc, path) from None
        entries.sort(key=lambda entry: os.fsencode(entry.name))
        return entries

    # -- creating and writing ----------------------------------------------------

    def make_dirs(self, path: str) -> bool:
        """Create ``path`` and any missing parents, one component at a time, each
        beneath its parent's descriptor.  True if anything was created."""
        loc = self.resolver.locate(path)
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
            break
        if existing == len(loc.rel):
            return False
        for depth in range(existing, len(loc.rel)):
            here = Location(loc.root, loc.rel[: depth + 1])
            parent_fd, _ = self.resolver.open_location(
                here.parent, os.O_PATH | os.O_DIRECTORY, path
            )
            with closing_fd(parent_fd):
                try:
                    os.mkdir(here.name, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise from_oserror(exc, path) from None
                try:
                    os.close(
                        syscalls.openat2(
                            parent_fd,
                            here.name,
                            os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW,
                            resolve=_LEAF_RESOLVE,
                        )
                    )
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        raise NotADirectory(f"ENOTDIR: not a directory: {path}") from None
                    raise from_oserror(exc, path) from None
        return True

    def create_file(self, path: str, data: bytes) -> os.stat_result:
        """Create ``path`` with ``data``; fails if anything exists there already.

        The file appears complete or not at all.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            return self._stage(dir_fd, leaf, path, lambda fd: _write_all(fd, data), replace=False)

    def replace_file(
        self, path: str, data: bytes, *, expected: os.stat_result | None = None
    ) -> os.stat_result:
        """Write ``data`` to ``path`` atomically, creating it if missing.

        A symlink inside the allowed directories is written through.  The old
        file's permissions (never setuid/setgid), owner where permitted and
        extended attributes are kept.  With ``expected``, the file must still be
        that file (same device and inode) or :class:`Conflict` is raised and
        nothing changes.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=True)
        with closing_fd(dir_fd):
            old = self._open_existing_for_replace(dir_fd, leaf, path)
            if old is None:
                if expected is not None:
                    raise Conflict(f"The file was removed since it was read: {path}")
                return self._stage(
                    dir_fd, leaf, path, lambda fd: _write_all(fd, data), replace=True
                )
            old_fd, old_stat = old
            with closing_fd(old_fd):
                if expected is not None and not _same_file(old_stat, expected):
                    raise Conflict(f"The file was replaced since it was read: {path}")

                def fill(fd: int) -> None:
                    carry_owner_and_mode(old_stat, fd)
                    copy_xattrs(old_fd, fd)
                    _write_all(fd, data)

                return self._stage(dir_fd, leaf, path, fill, replace=True)

    def _open_existing_for_replace(
        self, dir_fd: int, leaf: str, path: str
    ) -> tuple[int, os.stat_result] | None:
        """The file about to be replaced, opened for writing (which also proves we may),
        or None if there is none."""
        st = _lstat_leaf(dir_fd, leaf)
        if st is None:
            return None
        _require_regular(st, path)
        try:
            fd = syscalls.openat2(
                dir_fd,
                leaf,
                os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                resolve=_LEAF_RESOLVE,
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
            staged = _Staged(dir_fd, leaf)
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

    def append_file(self, path: str, data: bytes) -> os.stat_result:
        """Append ``data`` to ``path`` in place, creating it if missing.

        Refused on a file with more than one hard link: appending would change
        the file at its other names too, possibly outside the allowed directories.
        """
        dir_fd, leaf, _ = self.resolver.parent(path, follow_leaf=True)
        with closing_fd(dir_fd):
            st = _lstat_leaf(dir_fd, leaf)
            if st is not None:
                _require_regular(st, path)
            try:
                fd = syscalls.openat2(
                    dir_fd,
                    leaf,
                    os.O_WRONLY
                    | os.O_APPEND
                    | os.O_CREAT
                    | os.O_NOFOLLOW
                    | os.O_NONBLOCK
                    | os.O_NOCTTY,
                    mode=0o666,
                    resolve=_LEAF_RESOLVE,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Conflict(f"The file changed while it was being opened: {path}") from None
                raise from_oserror(exc, path) from None
        with closing_fd(fd):
            opened = os.fstat(fd)
            _require_regular(opened, path)
            if opened.st_nlink > 1:
                raise HardLinked(
                    f"Refusing to append in place: the file has {opened.st_nlink} hard links, "
                    f"so the change would also appear at its other names: {path}. "
                    "Use write_file to replace it with a file of its own."
                )
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError as exc:
                raise from_oserror(exc, path) from None
            return os.fstat(fd)

    # -- moving, copying, removing -----------------------------------------------

    def rename(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination``, never replacing anything there.

        Symlinks are moved as links.  Across filesystems a regular file (or a
        symlink) is copied then removed; a directory is refused.
        """
        src_fd, src_leaf, _ = self.resolver.parent(source, follow_leaf=False)
        with closing_fd(src_fd):
            dst_fd, dst_leaf, _ = self.resolver.parent(destination, follow_leaf=False)
            with closing_fd(dst_fd):
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
                _fsync_dir(dst_fd)

    @staticmethod
    def _rename_error(exc: OSError, source: str, destination: str) -> SandboxError:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return AlreadyExists(f"EEXIST: destination already exists: {destination}")
        if exc.errno == errno.EINVAL:
            return SandboxError(
                f"EINVAL: cannot move a directory into itself, or the filesystem cannot "
                f"rename without replacing: {source} -> {destination}"
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
            fd = syscalls.openat2(
                src_fd, src_leaf, _READ_FLAGS | os.O_NOFOLLOW, resolve=_LEAF_RESOLVE
            )
            with closing_fd(fd):
                opened = os.fstat(fd)
                if not _same_file(opened, st):
                    raise Conflict(f"The file changed while it was being moved: {source}")
                self._copy_into(fd, opened, dst_fd, dst_leaf, dest)
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

    def copy_file(self, source: str, destination: str) -> os.stat_result:
        """Copy the regular file ``source`` to a new ``destination``.

        Permissions (never setuid/setgid), modification time and extended
        attributes are kept.  The copy appears complete or not at all; an
        existing destination is never overwritten.
        """
        with self.open_file(source) as src:
            dst_fd, dst_leaf, _ = self.resolver.parent(destination, follow_leaf=False)
            with closing_fd(dst_fd):
                if _lstat_leaf(dst_fd, dst_leaf) is not None:
                    raise AlreadyExists(f"EEXIST: destination already exists: {destination}")
                return self._copy_into(src.fd, src.stat, dst_fd, dst_leaf, destination)

    def _copy_into(
        self, src_fd: int, src_stat: os.stat_result, dst_fd: int, dst_leaf: str, dest: str
    ) -> os.stat_result:
        def fill(fd: int) -> None:
            _copy_contents(src_fd, fd)
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

    def remove_tree(self, path: str) -> int:
        """Remove ``path`` and, for a directory, everything below it.

        Never follows a symlink: links are removed as links.  Each directory is
        reopened beneath its allowed directory.  Returns the entries removed.
        """
        dir_fd, leaf, loc = self.resolver.parent(path, follow_leaf=False)
        with closing_fd(dir_fd):
            st = _lstat_leaf(dir_fd, leaf)
            if st is None:
                raise NotFound(f"ENOENT: no such file or directory: {path}")
            removed = 1
            try:
                if stat.S_ISDIR(st.st_mode):
                    removed += self._clear_dir(loc, path, 1)
                    os.rmdir(leaf, dir_fd=dir_fd)
                else:
                    os.unlink(leaf, dir_fd=dir_fd)
            except OSError as exc:
                raise from_oserror(exc, path) from None
            return removed

    def _clear_dir(self, loc: Location, path: str, depth: int) -> int:
        if depth > self.max_depth:
            raise LimitExceeded(
                f"Directory tree deeper than {self.max_depth} levels; not removed "
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

"""New files built out of sight, then published atomically under one name.

A :class:`StagedFile` is an unnamed ``O_TMPFILE`` in the target directory
(or, where the filesystem lacks it, a randomly named file removed on failure).
It becomes visible only when complete: :meth:`StagedFile.publish_new` links it
under a name that must be free, :meth:`StagedFile.publish_over` renames it over
an existing entry.  Both ``fsync`` the file and then the directory.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.resolver import closing_fd

log = logging.getLogger(__name__)

#: Leaf-only resolution: one name beneath a parent fd, no symlink at all.
LEAF_RESOLVE: Final = (
    syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_SYMLINKS | syscalls.RESOLVE_NO_MAGICLINKS
)
_COPY_CHUNK: Final = 1024 * 1024


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def copy_contents(src_fd: int, dst_fd: int) -> None:
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
        write_all(dst_fd, chunk)


def fsync_dir(dir_fd: int) -> None:
    """Make a directory's entries durable; skipped if the directory is not readable."""
    try:
        fd = syscalls.openat2(dir_fd, ".", os.O_RDONLY | os.O_DIRECTORY, resolve=LEAF_RESOLVE)
    except PermissionError:
        return
    with closing_fd(fd):
        os.fsync(fd)


@final
class StagedFile:
    """A new file being prepared in a directory, invisible until published.

    Uses an unnamed ``O_TMPFILE`` where the filesystem supports it, else a
    randomly named file that is removed if the operation fails.
    """

    def __init__(self, dir_fd: int, leaf: str) -> None:
        self.dir_fd = dir_fd
        self.name: str | None = None
        try:
            self.fd = syscalls.openat2(
                dir_fd, ".", os.O_TMPFILE | os.O_WRONLY, mode=0o666, resolve=LEAF_RESOLVE
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
                fd = syscalls.openat2(self.dir_fd, name, flags, mode=0o666, resolve=LEAF_RESOLVE)
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
        fsync_dir(self.dir_fd)

    def publish_over(self, leaf: str) -> None:
        """Atomically replace whatever ``leaf`` names with this file."""
        os.fsync(self.fd)
        syscalls.renameat2(self.dir_fd, self._temp_name(), self.dir_fd, leaf, 0)
        self.name = None
        fsync_dir(self.dir_fd)

    def close(self) -> None:
        """Close the file; a named temporary that was never published is removed."""
        os.close(self.fd)
        if self.name is not None:
            try:
                os.unlink(self.name, dir_fd=self.dir_fd)
            except OSError as exc:
                log.warning("could not remove a temporary file: %s", exc.strerror)

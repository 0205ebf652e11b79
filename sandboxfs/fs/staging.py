"""New files built out of sight, then published atomically under one name.

A :class:`StagedFile` is an unnamed ``O_TMPFILE`` in the target directory
(or, where the filesystem lacks it, a randomly named file removed on failure).
It becomes visible only when complete: :meth:`StagedFile.publish_new` links it
under a name that must be free, :meth:`StagedFile.publish_over` renames it over
an existing entry.  Both ``fsync`` the file first and the directory after.

Guarantee: every descriptor publishing needs is opened before anything visible
changes, so a refusal (``EMFILE``, ``EACCES``) leaves no trace.  The rename or
link is the change; a failure after it (flushing the directory) does not undo
it, and is returned as a warning for the answer to carry.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
from collections.abc import Callable
from typing import Final, final

from sandboxfs.core import Directory, errno_words, syscalls

log = logging.getLogger(__name__)

_COPY_CHUNK: Final = 1024 * 1024


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: Reports bytes copied so far: ``(done, total)``.
CopyProgress = Callable[[int, int], None]


def copy_contents(
    src_fd: int, dst_fd: int, *, total: int = 0, progress: CopyProgress | None = None
) -> None:
    """Copy all of ``src_fd`` into ``dst_fd``, in the kernel where it can; ``progress``
    hears the bytes copied after each chunk (``total`` is the size expected)."""
    done = 0
    try:
        while copied := os.copy_file_range(src_fd, dst_fd, _COPY_CHUNK * 64):
            done += copied
            if progress is not None:
                progress(done, total)
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    os.lseek(src_fd, 0, os.SEEK_SET)
    os.ftruncate(dst_fd, 0)
    os.lseek(dst_fd, 0, os.SEEK_SET)
    done = 0
    while chunk := os.read(src_fd, _COPY_CHUNK):
        write_all(dst_fd, chunk)
        done += len(chunk)
        if progress is not None:
            progress(done, total)


def open_for_sync(directory: Directory) -> int | None:
    """A descriptor to flush ``directory``'s entries with; None if it is not readable
    (the flush is then skipped)."""
    try:
        return directory.for_sync()
    except PermissionError:
        return None


def after_change(what: str, step: Callable[[], None]) -> str | None:
    """Run a step that comes after a change was made; its failure is a warning to
    report with the change, never an error that would say nothing changed."""
    try:
        step()
    except OSError as exc:
        log.warning("%s failed after the change was made: %s", what, exc.strerror)
        return f"the change was made, but {what} failed ({errno_words(exc.errno)})"
    return None


def sync_and_close(sync_fd: int | None) -> str | None:
    """Flush a directory's entries after a change and close the descriptor."""
    if sync_fd is None:
        return None
    try:
        return after_change("flushing the directory to disk", lambda: os.fsync(sync_fd))
    finally:
        os.close(sync_fd)


@final
class StagedFile:
    """A new file being prepared in a directory, invisible until published.

    Uses an unnamed ``O_TMPFILE`` where the filesystem supports it, else a
    randomly named file that is removed if the operation fails.
    """

    def __init__(self, directory: Directory, leaf: str) -> None:
        # Refused before a temporary name could touch the directory (its mtime).
        directory.check_creatable((leaf,))
        self.dir = directory
        self.name: str | None = None
        self.sync_fd: int | None = None
        try:
            self.fd = directory.tmpfile()
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
            self.fd, self.name = self._create_named(leaf)
        try:
            self.sync_fd = open_for_sync(directory)
        except BaseException:
            self.close()
            raise

    def _create_named(self, leaf: str) -> tuple[int, str]:
        for _ in range(16):
            name = f".{leaf[:64]}.{secrets.token_hex(6)}.sandboxfs-tmp"
            try:
                fd = self.dir.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode=0o666)
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
                    self.dir.link(self.fd, name)
                except FileExistsError:
                    continue
                self.name = name
                break
            else:
                raise OSError(errno.EEXIST, "could not pick a temporary name")
        return self.name

    def publish_new(self, leaf: str) -> str | None:
        """Make the file appear as ``leaf``; EEXIST (nothing changed) if that name is
        taken.  Returns a warning if flushing the directory failed afterwards."""
        os.fsync(self.fd)
        if self.name is None:
            self.dir.link(self.fd, leaf)
        else:
            self.dir.rename(self.name, self.dir, leaf, syscalls.RENAME_NOREPLACE)
            self.name = None
        return self._flush_directory()

    def publish_over(self, leaf: str) -> str | None:
        """Atomically replace whatever ``leaf`` names with this file.  Returns a
        warning if flushing the directory failed afterwards."""
        os.fsync(self.fd)
        self.dir.rename(self._temp_name(), self.dir, leaf, 0)
        self.name = None
        return self._flush_directory()

    def _flush_directory(self) -> str | None:
        sync_fd, self.sync_fd = self.sync_fd, None
        return sync_and_close(sync_fd)

    def close(self) -> None:
        """Close the file; a named temporary that was never published is removed."""
        os.close(self.fd)
        if self.sync_fd is not None:
            os.close(self.sync_fd)
            self.sync_fd = None
        if self.name is not None:
            try:
                self.dir.unlink(self.name)
            except OSError as exc:
                log.warning("could not remove a temporary file: %s", exc.strerror)

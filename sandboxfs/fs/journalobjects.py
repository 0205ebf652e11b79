"""The change journal's copies of content: one file per distinct content, named by its
SHA-256, in one flat directory beneath the journal's descriptor (``objects/``).

Guarantees: an object appears whole or not at all (written to an unnamed temporary
file, then linked under its name, in the same directory: never linked across
directories, which Landlock may refuse a process started inside another domain);
content already kept is not written again; an object read back is checked against
its name.  An object is *pinned* while a call that kept it has not written its
record yet, so that dropping old records never removes it under that call.  Objects
no record references are removed with the last record that did, or, left by a call
that failed or a process that died, once older than :data:`ORPHAN_GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.core.chokepoint import READ_FLAGS, Directory

OBJECTS: Final = "objects"
#: Files and directories of the journal: private to the server's user.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
#: Unreferenced objects younger than this may belong to a call in flight elsewhere.
ORPHAN_GRACE_SECONDS: Final = 600.0
_CHUNK: Final = 1024 * 1024

#: Opens a directory of the journal: its names below the journal, readable or not.
DirectoryOpener = Callable[..., Directory]


class JournalError(Exception):
    """The journal cannot be used (damaged, locked too long, not a journal)."""


@final
@dataclass(frozen=True, slots=True)
class Stored:
    """An object in the store: its SHA-256 (hex) and size."""

    digest: str
    size: int


def _checked(digest: str) -> str:
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise ValueError(f"not an object name: {digest[:80]!r}")
    return digest


@final
class Objects:
    """The objects of one journal (``open_dir`` opens its directories)."""

    def __init__(self, open_dir: DirectoryOpener) -> None:
        self._open_dir = open_dir
        self._lock = threading.Lock()
        self._pins: Counter[str] = Counter()

    def _dir(self, *, readable: bool = False) -> Directory:
        return self._open_dir((OBJECTS,), readable=readable)

    # -- pins ------------------------------------------------------------------------

    def pin(self, digest: str) -> None:
        with self._lock:
            self._pins[digest] += 1

    def unpin(self, digest: str) -> None:
        with self._lock:
            self._pins[digest] -= 1
            if self._pins[digest] <= 0:
                del self._pins[digest]

    def pinned(self, digest: str) -> bool:
        with self._lock:
            return self._pins.get(digest, 0) > 0

    # -- content -----------------------------------------------------------------------

    def has(self, digest: str) -> bool:
        with self._dir() as directory:
            return directory.lstat(_checked(digest)) is not None

    def put_bytes(self, data: bytes, digest: str | None = None) -> Stored:
        """Keep ``data`` (``digest``: its SHA-256 in hex, if known), pinned: the caller
        unpins it once a record references it."""
        digest = _checked(digest or hashlib.sha256(data).hexdigest())
        self.pin(digest)
        try:
            with self._dir() as directory:
                if directory.lstat(digest) is None:
                    with contextlib.suppress(FileExistsError):
                        write_new(directory, digest, data, sync=False)
        except BaseException:
            self.unpin(digest)
            raise
        return Stored(digest, len(data))

    def put_stream(self, fd: int, size: int) -> Stored:
        """Keep the first ``size`` bytes of the open file ``fd`` (read with ``pread``),
        hashing as they are copied; pinned like :meth:`put_bytes`.  Raises
        JournalError if the file did not hold ``size`` bytes."""
        digest = hashlib.sha256()
        with self._dir() as directory:
            out = directory.tmpfile(mode=FILE_MODE)
            try:
                done = 0
                while done < size:
                    chunk = os.pread(fd, min(_CHUNK, size - done), done)
                    if not chunk:
                        raise JournalError("the file shrank while it was kept")
                    digest.update(chunk)
                    write_all(out, chunk)
                    done += len(chunk)
                name = digest.hexdigest()
                self.pin(name)
                try:
                    if directory.lstat(name) is None:
                        with contextlib.suppress(FileExistsError):
                            directory.link(out, name)
                except BaseException:
                    self.unpin(name)
                    raise
            finally:
                os.close(out)
        return Stored(name, size)

    def read(self, digest: str) -> bytes:
        """An object's bytes, checked against its name.  Raises JournalError if it is
        missing or damaged."""
        try:
            with self._dir() as directory:
                fd = directory.open(_checked(digest), READ_FLAGS)
        except (FileNotFoundError, ValueError):
            raise JournalError(f"the journal's copy {digest[:12]} is missing") from None
        try:
            data = read_all(fd)
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != digest:
            raise JournalError(f"the journal's copy {digest[:12]} is damaged")
        return data

    # -- removal -----------------------------------------------------------------------

    def remove(self, digests: Iterable[str]) -> None:
        """Remove these objects, except the pinned ones."""
        with self._dir() as directory:
            for digest in digests:
                if self.pinned(digest):
                    continue
                with contextlib.suppress(FileNotFoundError, ValueError):
                    directory.unlink(_checked(digest))

    def collect_orphans(self, referenced: Mapping[str, int]) -> None:
        """Remove objects no record references and no call could still be writing (held:
        the journal's lock)."""
        now = time.time()
        with self._dir(readable=True) as directory:
            names, _ = directory.entries()
            for name in names:
                if name in referenced or self.pinned(name):
                    continue
                st = directory.lstat(name)
                if st is not None and now - st.st_mtime > ORPHAN_GRACE_SECONDS:
                    with contextlib.suppress(FileNotFoundError):
                        directory.unlink(name)


# -- files of the journal ------------------------------------------------------------------


def write_new(directory: Directory, name: str, data: bytes, *, sync: bool = True) -> None:
    """A new file ``name`` holding ``data``, appearing whole (linked when complete);
    FileExistsError if the name is taken."""
    fd = directory.tmpfile(mode=FILE_MODE)
    try:
        write_all(fd, data)
        if sync:
            os.fdatasync(fd)
        directory.link(fd, name)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise JournalError("the journal holds something that is not a regular file")
    chunks = []
    while chunk := os.read(fd, _CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def sync_directory(directory: Directory) -> None:
    """Flush a directory's entries to disk (where the filesystem can)."""
    try:
        fd = directory.for_sync()
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EROFS):
            raise
    finally:
        os.close(fd)

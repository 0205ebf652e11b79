"""Revisions: short tokens that change whenever a file's bytes or a tree changes.

* A file's revision is ``sha256:`` + the SHA-256 of its bytes.
* A directory's revision is ``tree:`` + the SHA-256 of a sorted description of
  every entry below it (relative path, type, size, modification and change
  times, and a symlink's target text), so any change below changes it, even a
  rewrite that keeps the size and sets the modification time back (the change
  time cannot be set back).  It costs a ``stat`` per entry, so reads give it only
  when asked for, and only for trees within a budget.
* A path with nothing there has the revision ``absent``.

Reads may take a file's revision from a :class:`RevisionCache`, keyed by what
``fstat`` says about the file; conditional mutations always hash afresh, or,
when the caller still holds the bytes it read (:class:`SameBytes`), compare
the file with them byte for byte.

Clients pass a revision back as ``expectedRevision``; a mutation then happens
only if the path still has that revision, checked under an exclusive lock
(:func:`exclusive_lock`), so two sandboxfs processes on one directory cannot
lose an update.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, final

from sandboxfs.core import Conflict

ABSENT: Final = "absent"
#: How long a conditional mutation waits for another writer's lock.
LOCK_WAIT_SECONDS: Final = 10.0
#: Streamed reads go through one buffer of this size: small enough to stay in the
#: CPU cache, and no fresh allocation (page faults) per chunk.
_CHUNK: Final = 256 * 1024
#: Data at least this big is hashed in a helper thread (sha256 releases the GIL).
_BACKGROUND_HASH: Final = 1024 * 1024
# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid.
_FLOCK: Final = "hh4xqqi4x"


def content_revision(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _chunks(fd: int, size: int) -> Iterator[tuple[int, memoryview]]:
    """``(offset, bytes)`` of the first ``size`` bytes of ``fd``, read with preadv into
    one reused buffer (each view is valid until the next one); stops early at EOF."""
    buffer = memoryview(bytearray(min(_CHUNK, size)))
    offset = 0
    while offset < size:
        n = os.preadv(fd, [buffer[: size - offset]], offset)
        if n == 0:
            return
        yield offset, buffer[:n]
        offset += n


def file_revision(fd: int, size: int) -> str:
    """The revision of the first ``size`` bytes of ``fd`` (streamed)."""
    digest = hashlib.sha256()
    for _, chunk in _chunks(fd, size):
        digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def holds_exactly(fd: int, data: bytes) -> bool:
    """Whether the file open at ``fd`` holds exactly ``data``: what comparing their
    revisions would establish, at the cost of a memory compare instead of a hash."""
    if os.fstat(fd).st_size != len(data):
        return False
    seen = 0
    for offset, chunk in _chunks(fd, len(data)):
        if not data.startswith(chunk, offset):
            return False
        seen = offset + len(chunk)
    return seen == len(data) and os.pread(fd, 1, seen) == b""


@final
class SameBytes:
    """An expectation for a conditional mutation: the file still holds exactly the
    bytes the caller read (as strong as their revision, and cheaper to check)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def revision_soon(data: bytes) -> Callable[[], str]:
    """``content_revision(data)`` as a call that returns it; for big data it is
    computed meanwhile in a helper thread, so it overlaps the caller's I/O."""
    if len(data) < _BACKGROUND_HASH:
        revision = content_revision(data)
        return lambda: revision
    digest = hashlib.sha256()
    helper = threading.Thread(target=digest.update, args=(data,), name="sandboxfs-hash")
    helper.start()

    def result() -> str:
        helper.join()
        return "sha256:" + digest.hexdigest()

    return result


#: What identifies one state of a file's bytes: device, inode, size, mtime, ctime.
StatKey = tuple[int, int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@final
class RevisionCache:
    """Revisions of files already hashed, keyed by :func:`stat_key`.

    Any write changes the ctime (Linux records it at fine granularity once it
    has been queried), so a changed file misses.  Entries are stored only when
    ``fstat`` agreed before and after hashing.  Holds at most ``capacity``
    entries, least recently used first out; safe to share between threads.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[StatKey, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: StatKey) -> str | None:
        with self._lock:
            revision = self._entries.get(key)
            if revision is not None:
                self._entries.move_to_end(key)
            return revision

    def put(self, key: StatKey, revision: str) -> None:
        with self._lock:
            self._entries[key] = revision
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


def tree_revision(lines: Iterator[str]) -> str:
    """The revision of a tree from its entries' description lines (any order): the
    SHA-256 of the sorted lines, each ended by a newline."""
    ordered = sorted(lines)
    text = "\n".join(ordered) + "\n" if ordered else ""
    return "tree:" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def describe_entry(relative: str, kind: str, st: os.stat_result | None, target: str = "") -> str:
    """One line of a tree description (``st`` None: an entry whose metadata is not
    described, such as a refused mount point)."""
    if st is None:
        return f"{relative}\0{kind}\0\0\0{target}"
    size = st.st_size if kind != "directory" else 0
    return f"{relative}\0{kind}\0{size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{target}"


def check(expected: str | None, current: str, path: str) -> None:
    """Raise Conflict, naming both revisions, unless ``current`` is ``expected``."""
    if expected is not None and expected != current:
        raise Conflict(
            f"Revision mismatch for {path}: expected {expected}, but it is now {current}; "
            "nothing was changed. Read it again and retry."
        )


def _try_lock(fd: int) -> bool:
    """One attempt at an exclusive lock owned by this open file description."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        if exc.errno != errno.EBADF:  # not open for writing: fall back to flock below
            raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextmanager
def exclusive_lock(fd: int, path: str) -> Iterator[None]:
    """Hold an exclusive lock on ``fd``'s file for the block: an OFD lock
    (``F_OFD_SETLK``) on a file open for writing, else ``flock`` (directories).
    Both belong to the open file description, so threads and processes exclude
    each other.  The lock goes when ``fd`` is closed."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            raise Conflict(f"{path} is locked by another writer; try again")
        time.sleep(0.005)
    yield

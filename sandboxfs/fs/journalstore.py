"""The change journal on disk: content-addressed objects and one record per change.

Layout beneath the journal's own descriptor (a :class:`~sandboxfs.core.allowlist.Root`
outside every allowed directory, opened once at startup)::

    sandboxfs-journal          marker: what this directory is (never overwritten)
    lock                       flock: one writer at a time, across processes
    objects/abcdef...          content before a change, named by its SHA-256 (0600)
    entries/000000000042.json  one record per change (JSON), in id order

Every name is opened through the chokepoint beneath the journal's descriptor
(exact opens: no symlink is followed anywhere in it), exactly as the tools'
files are beneath theirs.  Objects are written under a temporary name
(``O_TMPFILE``) and linked under their hash, so each appears whole or not at
all, and content already kept is not written again.  A record is written the
same way; a record being replaced (a patch's intent finished) is renamed over.

Bounds: the records and the objects they reference stay within ``max_bytes``
and records older than ``keep_seconds`` are dropped, oldest first, after each
new record (a patch in progress is never dropped); an object no record
references any more is removed with the last record that did.  Objects that no
record references (a call that failed, a process that died mid-call) are
removed when a store is opened, once they are older than
:data:`ORPHAN_GRACE_SECONDS`.

Concurrency: one lock file (``flock``) orders writers across processes (the
operator's ``sandboxfs journal`` command and servers sharing a journal) and a
re-entrant thread lock orders this process's threads; each holder first picks
up the records other processes wrote (the ``entries`` directory's modification
time tells it).  Reads of objects take no lock: an object never changes once
named.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Final, final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.chokepoint import LIST_FLAGS, READ_FLAGS, Confinement, Directory, Location
from sandboxfs.fs.journalobjects import (
    DIR_MODE,
    FILE_MODE,
    JournalError,
    Objects,
    Stored,
    read_all,
    sync_directory,
    write_all,
    write_new,
)
from sandboxfs.fs.journalrecords import (
    Indexed,
    encode_record,
    entry_id_of,
    entry_name,
    indexed,
    undone_by,
)

JSON = dict[str, Any]

MARKER: Final = "sandboxfs-journal"
MARKER_TEXT: Final = b"sandboxfs change journal, format 1: see sandboxfs journal --help\n"
FORMAT: Final = 1
LOCK: Final = "lock"
OBJECTS: Final = "objects"
ENTRIES: Final = "entries"
#: With --workspaces: one journal per session, below this directory.
SESSIONS: Final = "sessions"
#: How long the lock is waited for before a writer gives up.
LOCK_WAIT_SECONDS: Final = 30.0
#: Default bounds (``--journal-max-bytes``, ``--journal-keep``).
DEFAULT_MAX_BYTES: Final = 1024 * 1024 * 1024
DEFAULT_KEEP_SECONDS: Final = 30 * 86400.0


@final
class JournalStore:
    """One journal directory, opened beneath its descriptor."""

    def __init__(
        self,
        root: Root,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep_seconds: float = DEFAULT_KEEP_SECONDS,
        confinement: Confinement | None = None,
        durable: bool = False,
        create: bool = True,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.keep_seconds = keep_seconds
        self.confinement = confinement or Confinement()
        #: ``fsync`` every record before saying it is written.  Off by default: a record
        #: is written once its change was made and flushed, and it survives the server
        #: being killed (the kernel has it); only a power failure can lose the newest
        #: ones.  A patch's intent (:meth:`commit` with ``durable``) is always flushed.
        self.durable = durable
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._lock_fd = -1
        self._index: dict[int, Indexed] = {}
        self._refs: Counter[str] = Counter()
        self._sizes: dict[str, int] = {}
        #: Bytes of the records and of the objects they reference (see usage()).
        self._total = 0
        self.objects = Objects(self._dir)
        self._seen: tuple[int, int] | None = None
        self._layout(create=create)
        with self.locked():
            self.objects.collect_orphans(self._refs)

    # -- layout ------------------------------------------------------------------------

    def _dir(self, rel: tuple[str, ...], *, readable: bool = False) -> Directory:
        location = Location(self.root, rel)
        flags = LIST_FLAGS if readable else os.O_PATH | os.O_DIRECTORY
        fd = location.open(self.confinement, flags, exact=True)
        return Directory(
            fd, location, "/".join(("journal", *rel)), self.confinement, readable=readable
        )

    def _layout(self, *, create: bool) -> None:
        """Make the marker, the lock file and the two directories if missing; refuse a
        non-empty directory that is not a journal (the operator named the wrong one),
        and without ``create`` any directory that is not one yet."""
        with self._dir((), readable=True) as top:
            names, _ = top.entries()
            if MARKER not in names:
                if not create:
                    raise JournalError(f"{self.root.given} is not a sandboxfs journal")
                if any(name not in (LOCK, OBJECTS, ENTRIES, SESSIONS) for name in names):
                    raise JournalError(
                        f"{self.root.given} is not empty and holds no sandboxfs journal: "
                        "give an empty or new directory"
                    )
                write_new(top, MARKER, MARKER_TEXT)
            for name in (OBJECTS, ENTRIES):
                with contextlib.suppress(FileExistsError):
                    top.mkdir(name, DIR_MODE)
                with top.child(name, name):  # a directory, not a symlink to one
                    pass
            fd = top.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOCTTY, mode=FILE_MODE)
        self._lock_fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        """Close the lock file now (the last reference going away does it too)."""
        if self._lock_fd >= 0:
            self._finalizer()
            self._lock_fd = -1

    @property
    def path(self) -> str:
        return self.root.path

    # -- locking -----------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the journal: this process's threads and other processes wait.  Picks up
        records other processes wrote since this one last looked."""
        with self._thread_lock:
            if self._depth == 0:
                self._flock()
                try:
                    self._refresh()
                except BaseException:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    raise
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _flock(self) -> None:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise JournalError(
                        "the journal is locked by another process (a server or the journal "
                        "command) for too long; try again"
                    ) from None
                time.sleep(0.01)

    # -- the index ---------------------------------------------------------------------

    def _entries_stat(self, entries: Directory) -> tuple[int, int]:
        st = entries.stat()
        return st.st_mtime_ns, st.st_ctime_ns

    def _refresh(self) -> None:
        """Read the records other processes added or removed (held: the lock)."""
        with self._dir((ENTRIES,), readable=True) as entries:
            seen = self._entries_stat(entries)
            if seen == self._seen:
                return
            names, _ = entries.entries()
            present = {i for i in map(entry_id_of, names) if i is not None}
            for gone in set(self._index) - present:
                self._forget(gone)
            for entry_id in sorted(present):
                known = self._index.get(entry_id)
                if known is not None and known.state != "pending":
                    continue
                record, size = self._load(entries, entry_id)
                if record is None:
                    continue
                if known is not None:
                    self._forget(entry_id)
                self._remember(indexed(record, size))
            self._seen = self._entries_stat(entries)

    def _load(self, entries: Directory, entry_id: int) -> tuple[JSON | None, int]:
        try:
            fd = entries.open(entry_name(entry_id), READ_FLAGS)
        except FileNotFoundError:
            return None, 0
        try:
            data = read_all(fd)
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except ValueError:
            return None, len(data)  # damaged: not indexed (and never dropped by us)
        if not isinstance(record, dict) or record.get("id") != entry_id:
            return None, len(data)
        return record, len(data)

    def _remember(self, item: Indexed) -> None:
        self._index[item.id] = item
        self._total += item.size
        for digest, size in item.objects.items():
            if self._refs[digest] == 0:
                self._total += size
            self._refs[digest] += 1
            self._sizes[digest] = size

    def _forget(self, entry_id: int) -> list[str]:
        """Drop a record from the index; the objects no record references now."""
        item = self._index.pop(entry_id, None)
        freed: list[str] = []
        if item is None:
            return freed
        self._total -= item.size
        for digest in item.objects:
            self._refs[digest] -= 1
            if self._refs[digest] <= 0:
                del self._refs[digest]
                self._total -= self._sizes.pop(digest, 0)
                freed.append(digest)
        return freed

    def usage(self) -> int:
        """Bytes the records and the objects they reference take."""
        with self._thread_lock:
            return self._total

    def index(self) -> list[Indexed]:
        """Every record, newest first (as of the last time the journal was held)."""
        with self.locked():
            return sorted(self._index.values(), key=lambda i: i.id, reverse=True)

    def undone(self) -> dict[int, int]:
        """Which records are undone, and by which record (see :func:`undone_by`)."""
        with self.locked():
            return undone_by(list(self._index.values()))

    def record(self, entry_id: int) -> JSON | None:
        """The whole record ``entry_id``, or None if it is gone (or damaged)."""
        with self._dir((ENTRIES,), readable=True) as entries:
            return self._load(entries, entry_id)[0]

    # -- objects -----------------------------------------------------------------------

    def pin(self, digest: str) -> None:
        self.objects.pin(digest)

    def unpin(self, digest: str) -> None:
        self.objects.unpin(digest)

    def has(self, digest: str) -> bool:
        return self.objects.has(digest)

    def put_bytes(self, data: bytes, digest: str | None = None) -> Stored:
        """Keep ``data`` (see :meth:`Objects.put_bytes`)."""
        return self.objects.put_bytes(data, digest)

    def put_stream(self, fd: int, size: int) -> Stored:
        """Keep the first ``size`` bytes of ``fd`` (see :meth:`Objects.put_stream`)."""
        return self.objects.put_stream(fd, size)

    def read_object(self, digest: str) -> bytes:
        """An object's bytes, checked (see :meth:`Objects.read`)."""
        return self.objects.read(digest)

    # -- records -----------------------------------------------------------------------

    def next_id(self) -> int:
        with self._thread_lock:
            return max(self._index, default=0) + 1

    def commit(self, record: JSON, *, durable: bool = False) -> int:
        """Write a new record (its ``id`` assigned here), then drop the oldest records
        beyond the bounds.  Returns the id.  ``durable``: on disk (file and directory
        flushed) before this returns."""
        with self.locked():
            entry_id = self.next_id()
            record = {**record, "id": entry_id, "version": FORMAT}
            record.setdefault("state", "done")
            data = encode_record(record)
            with self._dir((ENTRIES,), readable=True) as entries:
                sync = durable or self.durable
                write_new(entries, entry_name(entry_id), data, sync=sync)
                if sync:
                    sync_directory(entries)
                self._remember(indexed(record, len(data)))
                self._prune(entries)
                self._seen = self._entries_stat(entries)
            return entry_id

    def begin(self, record: JSON) -> tuple[int, int]:
        """Write a record of a change in progress (a patch's intent), flushed to disk, and
        hold it: returns its id and a descriptor whose ``flock`` says a live process is
        still working on it (close the descriptor when the record is finished)."""
        with self.locked():
            entry_id = self.next_id()
            record = {**record, "id": entry_id, "version": FORMAT, "state": "pending"}
            data = encode_record(record)
            with self._dir((ENTRIES,), readable=True) as entries:
                fd = entries.tmpfile(mode=FILE_MODE)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)  # taken before the name appears
                    write_all(fd, data)
                    os.fsync(fd)
                    entries.link(fd, entry_name(entry_id))
                    sync_directory(entries)
                except BaseException:
                    os.close(fd)
                    raise
                self._remember(indexed(record, len(data)))
                self._seen = self._entries_stat(entries)
            return entry_id, fd

    def abandoned(self) -> list[JSON]:
        """Records of changes in progress that no live process holds (it crashed): a
        patch's intent to take back."""
        found = []
        with self.locked(), self._dir((ENTRIES,), readable=True) as entries:
            for item in sorted(self._index.values(), key=lambda i: i.id):
                if item.state != "pending":
                    continue
                try:
                    fd = entries.open(entry_name(item.id), READ_FLAGS)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live process is still making it
                finally:
                    os.close(fd)
                record = self._load(entries, item.id)[0]
                if record is not None:
                    found.append(record)
        return found

    def replace(self, record: JSON) -> None:
        """Write ``record`` over the record with its id (a patch's intent finished or
        rolled back): atomically, the old one or the new one."""
        with self.locked():
            entry_id = int(record["id"])
            data = encode_record(record)
            with self._dir((ENTRIES,), readable=True) as entries:
                name = entry_name(entry_id)
                tmp = entries.tmpfile(mode=FILE_MODE)
                try:
                    write_all(tmp, data)
                    os.fsync(tmp)
                    temp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
                    entries.link(tmp, temp)
                finally:
                    os.close(tmp)
                entries.rename(temp, entries, name, 0)
                sync_directory(entries)
                self._forget(entry_id)
                self._remember(indexed(record, len(data)))
                self._prune(entries)
                self._seen = self._entries_stat(entries)

    def _prune(self, entries: Directory) -> None:
        """Drop the oldest records beyond the bounds (held: the lock); a patch in progress
        is kept, as is the newest record."""
        oldest_kept = time.time() - self.keep_seconds
        if not self._index:
            return
        oldest = self._index[min(self._index)]  # the usual case: nothing to drop
        if self.usage() <= self.max_bytes and oldest.time >= oldest_kept:
            return
        newest = max(self._index)
        for item in sorted(self._index.values(), key=lambda i: i.id):
            over = self.usage() > self.max_bytes
            if not over and item.time >= oldest_kept:
                break
            if item.state == "pending" or item.id == newest:
                continue
            with contextlib.suppress(FileNotFoundError):
                entries.unlink(entry_name(item.id))
            self.objects.remove(self._forget(item.id))

    def drop(self, entry_id: int) -> None:
        """Remove one record (and the objects only it referenced)."""
        with self.locked(), self._dir((ENTRIES,), readable=True) as entries:
            with contextlib.suppress(FileNotFoundError):
                entries.unlink(entry_name(entry_id))
            self.objects.remove(self._forget(entry_id))
            self._seen = self._entries_stat(entries)

    def release_unreferenced(self, digests: Iterable[str]) -> None:
        """A call that kept these objects made no record: remove the ones nothing else
        references or holds."""
        with self.locked():
            self.objects.remove(d for d in digests if d not in self._refs)

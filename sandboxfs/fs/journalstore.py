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
import errno
import fcntl
import hashlib
import json
import os
import stat
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.chokepoint import LIST_FLAGS, READ_FLAGS, Confinement, Directory, Location

JSON = dict[str, Any]

MARKER: Final = "sandboxfs-journal"
MARKER_TEXT: Final = b"sandboxfs change journal, format 1: see sandboxfs journal --help\n"
FORMAT: Final = 1
LOCK: Final = "lock"
OBJECTS: Final = "objects"
ENTRIES: Final = "entries"
#: With --workspaces: one journal per session, below this directory.
SESSIONS: Final = "sessions"
#: Files and directories of the journal: private to the server's user.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700
#: How long the lock is waited for before a writer gives up.
LOCK_WAIT_SECONDS: Final = 30.0
#: Unreferenced objects younger than this may belong to a call in flight elsewhere.
ORPHAN_GRACE_SECONDS: Final = 600.0
#: Default bounds (``--journal-max-bytes``, ``--journal-keep``).
DEFAULT_MAX_BYTES: Final = 1024 * 1024 * 1024
DEFAULT_KEEP_SECONDS: Final = 30 * 86400.0
_CHUNK: Final = 1024 * 1024


class JournalError(Exception):
    """The journal cannot be used (damaged, locked too long, not a journal)."""


@final
@dataclass(frozen=True, slots=True)
class Stored:
    """An object in the store: its SHA-256 (hex) and size."""

    digest: str
    size: int


@final
@dataclass(slots=True)
class Indexed:
    """What the store keeps in memory of one record."""

    id: int
    time: float
    state: str
    #: Bytes of the record itself.
    size: int
    #: Objects it references, with their sizes.
    objects: dict[str, int]
    undoes: tuple[int, ...] = ()
    session: str | None = None
    client: str | None = None
    tool: str = ""
    paths: tuple[str, ...] = field(default_factory=tuple)


def entry_name(entry_id: int) -> str:
    return f"{entry_id:012d}.json"


def _entry_id(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    if dot and suffix == "json" and len(stem) == 12 and stem.isdigit():
        return int(stem)
    return None


def referenced_objects(record: JSON) -> dict[str, int]:
    """Every object a record names (``object`` keys at any depth), with its size."""
    found: dict[str, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            digest = value.get("object")
            if isinstance(digest, str):
                found[digest] = int(value.get("size") or 0)
            for inner in value.values():
                visit(inner)
        elif isinstance(value, list):
            for inner in value:
                visit(inner)

    visit(record.get("steps", []))
    return found


def _indexed(record: JSON, size: int) -> Indexed:
    return Indexed(
        id=int(record["id"]),
        time=float(record.get("time", 0.0)),
        state=str(record.get("state", "done")),
        size=size,
        objects=referenced_objects(record),
        undoes=tuple(int(i) for i in record.get("undoes", ())),
        session=record.get("session"),
        client=record.get("client"),
        tool=str(record.get("tool", "")),
        paths=tuple(str(p) for p in record.get("paths", ())),
    )


def encode_record(record: JSON) -> bytes:
    """A record as stored: JSON, ASCII only (names that are not UTF-8 survive as
    ``\\udcXX`` escapes, which :func:`json.loads` gives back exactly)."""
    return (json.dumps(record, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")


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
        self._pins: Counter[str] = Counter()
        self._seen: tuple[int, int] | None = None
        self._layout(create=create)
        with self.locked():
            self._collect_orphans()

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
                self._write_new(top, MARKER, MARKER_TEXT)
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
            present = {i for i in map(_entry_id, names) if i is not None}
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
                self._remember(_indexed(record, size))
            self._seen = self._entries_stat(entries)

    def _load(self, entries: Directory, entry_id: int) -> tuple[JSON | None, int]:
        try:
            fd = entries.open(entry_name(entry_id), READ_FLAGS)
        except FileNotFoundError:
            return None, 0
        try:
            data = _read_all(fd)
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
        """Which records are undone, and by which record: a record is undone by an undo
        that is not itself undone."""
        with self.locked():
            items = dict(self._index)
        memo: dict[int, bool] = {}

        def live(entry_id: int, depth: int = 0) -> bool:
            if entry_id in memo:
                return memo[entry_id]
            result = depth > 64 or not any(
                entry_id in other.undoes and live(other.id, depth + 1)
                for other in items.values()
                if other.state == "done" and other.id > entry_id
            )
            memo[entry_id] = result
            return result

        found: dict[int, int] = {}
        for item in sorted(items.values(), key=lambda i: i.id):
            if item.state == "done" and item.undoes and live(item.id):
                for target in item.undoes:
                    found[target] = item.id
        return found

    def record(self, entry_id: int) -> JSON | None:
        """The whole record ``entry_id``, or None if it is gone (or damaged)."""
        with self._dir((ENTRIES,), readable=True) as entries:
            return self._load(entries, entry_id)[0]

    # -- objects -----------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, digests: Iterable[str]) -> Iterator[None]:
        """Keep these objects while a call that references them is under way."""
        held = list(digests)
        with self._thread_lock:
            self._pins.update(held)
        try:
            yield
        finally:
            with self._thread_lock:
                self._pins.subtract(held)
                self._pins += Counter()  # drop the zeros

    def pin(self, digest: str) -> None:
        with self._thread_lock:
            self._pins[digest] += 1

    def unpin(self, digest: str) -> None:
        with self._thread_lock:
            self._pins[digest] -= 1
            if self._pins[digest] <= 0:
                del self._pins[digest]

    def _object_dir(self, digest: str) -> Directory:
        """The objects' directory (one, flat: a kept file is linked where it was written,
        never across directories, which Landlock can refuse a process started inside
        another domain, such as a tenant's worker)."""
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not an object name: {digest[:80]!r}")
        return self._dir((OBJECTS,))

    def has(self, digest: str) -> bool:
        with self._object_dir(digest) as directory:
            return directory.lstat(digest) is not None

    def put_bytes(self, data: bytes, digest: str | None = None) -> Stored:
        """Keep ``data`` (``digest``: its SHA-256 in hex, if known).  The caller pins it
        until a record references it."""
        digest = digest or hashlib.sha256(data).hexdigest()
        self.pin(digest)
        try:
            with self._object_dir(digest) as directory:
                if directory.lstat(digest) is None:
                    with contextlib.suppress(FileExistsError):
                        self._write_new(directory, digest, data, sync=False)
        except BaseException:
            self.unpin(digest)
            raise
        return Stored(digest, len(data))

    def put_stream(self, fd: int, size: int) -> Stored:
        """Keep the first ``size`` bytes of the open file ``fd`` (read with ``pread``),
        hashing as they are copied; pinned like :meth:`put_bytes`.  Raises
        JournalError if the file did not hold ``size`` bytes."""
        digest = hashlib.sha256()
        with self._dir((OBJECTS,)) as objects:
            out = objects.tmpfile(mode=FILE_MODE)
            try:
                done = 0
                while done < size:
                    chunk = os.pread(fd, min(_CHUNK, size - done), done)
                    if not chunk:
                        raise JournalError("the file shrank while it was kept")
                    digest.update(chunk)
                    _write_all(out, chunk)
                    done += len(chunk)
                name = digest.hexdigest()
                self.pin(name)
                try:
                    with self._object_dir(name) as directory:
                        if directory.lstat(name) is None:
                            with contextlib.suppress(FileExistsError):
                                directory.link(out, name)
                except BaseException:
                    self.unpin(name)
                    raise
            finally:
                os.close(out)
        return Stored(name, size)

    def read_object(self, digest: str) -> bytes:
        """An object's bytes, checked against its name.  Raises JournalError if it is
        missing or damaged."""
        try:
            with self._object_dir(digest) as directory:
                fd = directory.open(digest, READ_FLAGS)
        except (FileNotFoundError, ValueError):
            raise JournalError(f"the journal's copy {digest[:12]} is missing") from None
        try:
            data = _read_all(fd)
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != digest:
            raise JournalError(f"the journal's copy {digest[:12]} is damaged")
        return data

    def _remove_objects(self, digests: Iterable[str]) -> None:
        for digest in digests:
            if self._pins.get(digest, 0) > 0:
                continue
            with contextlib.suppress(FileNotFoundError, ValueError), self._object_dir(digest) as d:
                d.unlink(digest)

    def _collect_orphans(self) -> None:
        """Remove objects no record references and no call could still be writing
        (older than the grace period), held: the lock."""
        now = time.time()
        with self._dir((OBJECTS,), readable=True) as objects:
            names, _ = objects.entries()
            for name in names:
                if name in self._refs or self._pins.get(name, 0) > 0:
                    continue
                st = objects.lstat(name)
                if st is not None and now - st.st_mtime > ORPHAN_GRACE_SECONDS:
                    with contextlib.suppress(FileNotFoundError):
                        objects.unlink(name)

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
                self._write_new(entries, entry_name(entry_id), data, sync=sync)
                if sync:
                    _sync_directory(entries)
                self._remember(_indexed(record, len(data)))
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
                    _write_all(fd, data)
                    os.fsync(fd)
                    entries.link(fd, entry_name(entry_id))
                    _sync_directory(entries)
                except BaseException:
                    os.close(fd)
                    raise
                self._remember(_indexed(record, len(data)))
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
                    _write_all(tmp, data)
                    os.fsync(tmp)
                    temp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
                    entries.link(tmp, temp)
                finally:
                    os.close(tmp)
                entries.rename(temp, entries, name, 0)
                _sync_directory(entries)
                self._forget(entry_id)
                self._remember(_indexed(record, len(data)))
                self._prune(entries)
                self._seen = self._entries_stat(entries)

    def _prune(self, entries: Directory) -> None:
        """Drop the oldest records beyond the bounds (held: the lock); a patch in progress
        is kept, as is the newest record."""
        oldest_kept = time.time() - self.keep_seconds
        for item in sorted(self._index.values(), key=lambda i: i.id):
            over = self.usage() > self.max_bytes
            if not over and item.time >= oldest_kept:
                break
            if item.state == "pending" or item.id == max(self._index):
                continue
            with contextlib.suppress(FileNotFoundError):
                entries.unlink(entry_name(item.id))
            self._remove_objects(self._forget(item.id))

    def drop(self, entry_id: int) -> None:
        """Remove one record (and the objects only it referenced)."""
        with self.locked(), self._dir((ENTRIES,), readable=True) as entries:
            with contextlib.suppress(FileNotFoundError):
                entries.unlink(entry_name(entry_id))
            self._remove_objects(self._forget(entry_id))
            self._seen = self._entries_stat(entries)

    def release_unreferenced(self, digests: Iterable[str]) -> None:
        """A call that kept these objects made no record: remove the ones nothing else
        references or holds."""
        with self.locked():
            self._remove_objects(d for d in digests if d not in self._refs)

    # -- writing files -----------------------------------------------------------------

    def _write_new(
        self, directory: Directory, name: str, data: bytes, *, sync: bool = True
    ) -> None:
        """A new file ``name`` holding ``data``, appearing whole (linked when complete);
        FileExistsError if the name is taken."""
        fd = directory.tmpfile(mode=FILE_MODE)
        try:
            _write_all(fd, data)
            if sync:
                os.fdatasync(fd)
            directory.link(fd, name)
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise JournalError("the journal holds something that is not a regular file")
    chunks = []
    while chunk := os.read(fd, _CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def _sync_directory(directory: Directory) -> None:
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

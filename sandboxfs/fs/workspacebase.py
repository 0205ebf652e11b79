"""Workspaces: a private directory per session and named stores shared by all, beneath BASE.

Layout (everything created ``0700``)::

    BASE/sessions/<id>/   one session's private directory
    BASE/stores/<name>/   a named store, shared by every session, kept across restarts

Guarantees:

* Everything here works beneath BASE's descriptor through the chokepoint's
  :class:`~sandboxfs.core.chokepoint.Directory`: every name is one entry opened
  exactly (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``), every creation a ``mkdirat``,
  every removal an ``unlinkat``.  No path is joined and then opened, and no
  symlink is ever followed: a symlink planted in a session is removed, never its
  target.
* A session directory in use is held with a shared ``flock`` on its descriptor
  (:class:`SessionLease`, for the life of a stdio server or one HTTP request);
  :func:`prune` takes the exclusive lock without waiting and leaves a session it
  cannot lock alone.  A lease taken on a directory a prune has just removed
  notices (the directory has no links) and does not use it.
* Ids and store names are checked strictly (:func:`check_name`):
  ``[A-Za-z0-9._-]{1,64}``, never ``.`` or ``..``.
* Stores are never removed here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.core import (
    ENTER,
    ENTRY,
    LEAVE,
    OPEN,
    TOO_DEEP,
    TOO_MANY,
    UNREADABLE,
    Bounds,
    Confinement,
    Directory,
    Location,
    Policy,
    Root,
)
from sandboxfs.fs.below import UNCOUNTED, below
from sandboxfs.fs.limits import Limits

SESSIONS: Final = "sessions"
STORES: Final = "stores"
#: Mode of every directory made here: only the server's user.
MODE: Final = 0o700
#: What an id or a store name may be.
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Most entries a size walk counts; beyond it the size is a lower bound.
MAX_ENTRIES: Final = 200_000
#: The bounds of a server started without options (``tree_depth``).
DEFAULT_LIMITS: Final = Limits()
#: Environment variable naming the stdio session's id (as ``--workspace-id`` does).
WORKSPACE_ID_ENV: Final = "SANDBOXFS_WORKSPACE_ID"

_AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE: Final = re.compile(r"([0-9]{1,9})([smhdw])")


def check_name(text: str, what: str) -> str:
    """``text`` if it is a valid id or store name (``what`` says which); else ValueError
    with a message saying what is allowed."""
    if NAME_PATTERN.fullmatch(text) is None or text in (".", ".."):
        raise ValueError(
            f"invalid {what} {text[:80]!r}: use 1 to 64 letters, digits, '.', '_' or '-' "
            "(not '.' or '..')"
        )
    return text


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``; else ValueError."""
    found = _AGE.fullmatch(text.strip())
    if found is None:
        raise ValueError(
            f"invalid age {text[:40]!r}: use a number and a unit, e.g. 30m, 12h or 7d "
            "(units s, m, h, d, w)"
        )
    return float(int(found.group(1)) * _AGE_UNITS[found.group(2)])


def fresh_id() -> str:
    """A new random session id (128 bits, hex)."""
    return secrets.token_hex(16)


@final
@dataclass(frozen=True, slots=True)
class Usage:
    """What a walk of a directory found: bytes of regular files, the newest modification
    time of anything in it (itself included), and whether it saw everything."""

    size: int
    newest: float
    complete: bool


@final
@dataclass(frozen=True, slots=True)
class Entry:
    """One session or store as the listing shows it."""

    name: str
    usage: Usage
    #: Sessions only: whether a server holds it right now.
    in_use: bool = False


@final
@dataclass(frozen=True, slots=True)
class Workspace:
    """What one session sees of the workspaces: its private directory and the stores."""

    id: str
    session: Root
    stores: Root

    def roles(self) -> dict[str, str]:
        """Each workspace directory (as listed) and what it is for, in words for an agent."""
        return {
            self.session.given: "your private workspace for this session: no other session "
            "can see it; relative paths resolve here",
            self.stores.given: "shared stores: each subdirectory is a named store, shared "
            "with every session and kept across restarts (list_stores, create_store)",
        }


@final
class SessionLease:
    """A session directory held open with a shared ``flock``: a prune leaves it alone
    until :meth:`release`.  ``root`` is the directory as an allowed directory."""

    __slots__ = ("_lock_fd", "id", "root")

    def __init__(self, session_id: str, root: Root, lock_fd: int) -> None:
        self.id = session_id
        self.root = root
        self._lock_fd = lock_fd

    def touch(self) -> None:
        """Mark the session used now (its directory's modification time)."""
        if self._lock_fd >= 0:
            os.utime(self._lock_fd)

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # the flock goes with the descriptor
            self._lock_fd = -1

    def __enter__(self) -> SessionLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SessionGone(Exception):
    """The session directory does not exist (it was never made, or was pruned)."""


@final
class Base:
    """BASE, opened: its descriptor and the ``sessions`` and ``stores`` directories
    beneath it (made ``0700`` if missing)."""

    def __init__(
        self,
        root: Root,
        confinement: Confinement | None = None,
        policy: Policy = OPEN,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.root = root
        #: The bounds of its walks (``tree_depth``).
        self.limits = limits
        self.confinement = confinement or Confinement()
        #: The rules every session and store directory carries (the command line's
        #: --hide, --protect, --preset and a policy file's top level).
        self.policy = policy
        with self._top() as top:
            for name in (SESSIONS, STORES):
                with contextlib.suppress(FileExistsError):
                    top.mkdir(name, MODE)
                with top.child(name, name):  # a directory, not a symlink to one
                    pass
        self.stores = self._root_of((STORES,))

    @property
    def path(self) -> str:
        return self.root.path

    def _top(self) -> Directory:
        fd = Location(self.root, ()).open(self.confinement, os.O_PATH | os.O_DIRECTORY, exact=True)
        return Directory(fd, Location(self.root, ()), self.root.path, self.confinement)

    def _listing(self, name: str) -> Directory:
        with self._top() as top:
            return top.child(name, f"{self.root.path}/{name}")

    def _root_of(self, rel: tuple[str, ...]) -> Root:
        fd = Location(self.root, rel).open(self.confinement, os.O_PATH | os.O_DIRECTORY, exact=True)
        path = "/".join((self.root.path, *rel))
        return Root(fd, path, path, self.policy)

    # -- sessions ------------------------------------------------------------------------

    def lease(self, session_id: str, *, create: bool) -> SessionLease:
        """Hold the session ``session_id`` (made ``0700`` first if ``create`` and missing).
        Raises SessionGone if it does not exist and ``create`` is false, ValueError for
        a bad id, OSError for what the kernel refused."""
        check_name(session_id, "workspace id")
        for _ in range(8):  # a prune may remove it between mkdir and lock: make it again
            with self._listing(SESSIONS) as sessions:
                if create:
                    with contextlib.suppress(FileExistsError):
                        sessions.mkdir(session_id, MODE)
                try:
                    lock_fd = sessions.open(session_id, os.O_RDONLY | os.O_DIRECTORY)
                except FileNotFoundError:
                    if create:
                        continue
                    raise SessionGone(session_id) from None
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_SH)  # waits only for a prune in progress
                gone = os.fstat(lock_fd).st_nlink == 0  # pruned while we waited
                if not gone:
                    os.fchmod(lock_fd, MODE)
                    root_fd = self.confinement.open(
                        lock_fd, ".", os.O_PATH | os.O_DIRECTORY, exact=True
                    )
            except BaseException:
                os.close(lock_fd)
                raise
            if gone:
                os.close(lock_fd)
                if create:
                    continue
                raise SessionGone(session_id)
            path = f"{self.root.path}/{SESSIONS}/{session_id}"
            lease = SessionLease(session_id, Root(root_fd, path, path, self.policy), lock_fd)
            lease.touch()
            return lease
        raise OSError(errno.EAGAIN, f"session {session_id} kept being removed")

    def fresh(self) -> SessionLease:
        """A new session with a random id, its directory made now (never one that existed)."""
        while True:
            session_id = fresh_id()
            with self._listing(SESSIONS) as sessions:
                try:
                    sessions.mkdir(session_id, MODE)
                except FileExistsError:
                    continue
            return self.lease(session_id, create=False)

    def workspace(self, lease: SessionLease) -> Workspace:
        return Workspace(lease.id, lease.root, self.stores)

    def sessions(self) -> list[Entry]:
        """Every session, by name: its usage and whether a server holds it."""
        return self._entries(SESSIONS, locks=True)

    def stores_list(self) -> list[Entry]:
        """Every store, by name, with its usage."""
        return list_stores(self.stores, self.confinement)

    def _entries(self, where: str, *, locks: bool) -> list[Entry]:
        found = []
        with self._listing(where) as parent:
            for name in _directory_names(parent):
                try:
                    with parent.child(name, name) as child:
                        # A server holds a shared lock: an exclusive one, not kept, fails.
                        in_use = locks and not _try_lock(child.fd, fcntl.LOCK_EX)
                        found.append(Entry(name, usage(child, self.limits), in_use))
                except OSError:
                    continue  # removed meanwhile, or not a directory after all
        return found

    def prune(self, age: float, *, now: float | None = None) -> PruneReport:
        """Remove every session idle (nothing in it modified) for more than ``age``
        seconds that no server holds.  Stores are never touched."""
        now = time.time() if now is None else now
        removed: list[str] = []
        kept: list[str] = []
        busy: list[str] = []
        failed: list[tuple[str, str]] = []
        with self._listing(SESSIONS) as sessions:
            for name in _directory_names(sessions):
                try:
                    child = sessions.child(name, name)
                except OSError:
                    continue
                with child:
                    if not _try_lock(child.fd, fcntl.LOCK_EX):
                        busy.append(name)
                        continue
                    if now - usage(child, self.limits).newest <= age:
                        kept.append(name)
                        continue
                    try:
                        remove_contents(child, self.limits)
                        sessions.rmdir(name)
                    except (OSError, DepthExceeded) as exc:
                        failed.append((name, _reason(exc)))
                        continue
                    removed.append(name)
        return PruneReport(tuple(removed), tuple(kept), tuple(busy), tuple(failed))


@final
@dataclass(frozen=True, slots=True)
class PruneReport:
    removed: tuple[str, ...]
    kept: tuple[str, ...]
    busy: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


# -- stores (also used by the tools) -----------------------------------------------------


def _stores_directory(stores: Root, confinement: Confinement) -> Directory:
    fd = Location(stores, ()).open(
        confinement, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK, exact=True
    )
    return Directory(fd, Location(stores, ()), stores.given, confinement, readable=True)


def list_stores(stores: Root, confinement: Confinement) -> list[Entry]:
    """The stores (directories with valid names in ``stores``), by name, with usage."""
    found = []
    with _stores_directory(stores, confinement) as parent:
        for name in _directory_names(parent):
            if NAME_PATTERN.fullmatch(name) is None or name in (".", ".."):
                continue
            try:
                with parent.child(name, name) as child:
                    found.append(Entry(name, usage(child)))
            except OSError:
                continue
    return found


def create_store(stores: Root, confinement: Confinement, name: str) -> bool:
    """Make the store ``name`` (``0700``); False if it already existed (as a directory).
    Raises ValueError for a bad name, OSError otherwise."""
    check_name(name, "store name")
    with _stores_directory(stores, confinement) as parent:
        try:
            parent.mkdir(name, MODE)
        except FileExistsError:
            with parent.child(name, name):  # NotADirectoryError / ELOOP if not a store
                return False
        return True


# -- walks on descriptors ----------------------------------------------------------------


class DepthExceeded(Exception):
    """A tree deeper than the ``tree_depth`` limit: left as it is."""


#: Errors of opening a subdirectory that say it is something else now: it is unlinked.
_SWAPPED: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EXDEV})


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


def _try_lock(fd: int, kind: int) -> bool:
    """Take ``kind`` on ``fd`` without waiting; False if someone holds a conflicting lock."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _directory_names(directory: Directory) -> list[str]:
    """Names of the subdirectories (not symlinks to one) of a readable directory, sorted."""
    with directory.scandir() as entries:
        return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))


def usage(directory: Directory, limits: Limits = DEFAULT_LIMITS) -> Usage:
    """Bytes of the regular files below a readable directory and the newest
    modification time (the directory's own included), never following a symlink
    nor crossing a mount point; at most MAX_ENTRIES entries and ``tree_depth`` levels."""
    top = directory.stat()
    size, newest = 0, top.st_mtime
    complete = True
    walk = below(
        directory,
        directory.path,
        bounds=Bounds(limits.tree_depth + 1, MAX_ENTRIES),
        with_stat=True,
        unreadable=lambda error: isinstance(error, OSError),  # swapped or removed meanwhile
    )
    for step in walk:
        if step.kind in (TOO_MANY, TOO_DEEP):
            complete = False
        elif step.kind == ENTRY and step.entry is not None and step.entry.lstat is not None:
            st = step.entry.lstat
            newest = max(newest, st.st_mtime)
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
            elif stat.S_ISDIR(st.st_mode) and st.st_dev != top.st_dev:
                complete = False
                walk.prune()
    return Usage(size, newest, complete)


def remove_contents(directory: Directory, limits: Limits = DEFAULT_LIMITS) -> None:
    """Remove everything in a readable directory, descriptor-relative: a subdirectory
    is opened exactly (never through a symlink), emptied, then ``rmdir``-ed; anything
    else, a symlink included, is ``unlink``-ed (its target is never touched).  A mount
    point is not descended into (its ``rmdir`` then fails).  Raises OSError or
    DepthExceeded (deeper than ``tree_depth``), with what was removed so far gone."""
    walk = below(
        directory,
        directory.path,
        bounds=Bounds(limits.tree_depth, UNCOUNTED),
        with_stat=True,
        unreadable=lambda error: getattr(error, "errno", None) in _SWAPPED,
    )
    devices: dict[tuple[str, ...], int] = {}
    for step in walk:
        parent = step.parent
        if step.kind == ENTER:
            assert step.directory is not None
            devices[step.rel] = step.directory.stat().st_dev
        elif step.kind == TOO_DEEP:
            raise DepthExceeded(f"deeper than {limits.tree_depth} levels")
        elif step.kind == UNREADABLE:  # swapped for a symlink or a file meanwhile
            assert parent is not None
            parent.unlink(step.name)
        elif step.kind == LEAVE:
            assert parent is not None
            parent.rmdir(step.name)
        elif step.kind == ENTRY and step.entry is not None and step.entry.lstat is not None:
            assert parent is not None
            st = step.entry.lstat
            if not stat.S_ISDIR(st.st_mode):
                parent.unlink(step.name)
            elif st.st_dev != devices[step.rel[:-1]] or parent.is_mount_point(step.name):
                walk.prune()
                parent.rmdir(step.name)

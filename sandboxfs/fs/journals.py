"""The journal directory of a server: one journal, or one per workspace session.

A server without ``--workspaces`` keeps one journal in the directory it was given.
With ``--workspaces`` every session has its own, ``DIR/sessions/<id>``, made
``0700`` beneath the directory's descriptor the first time the session changes
something, so no session's records or copies are in another's journal; the
journals of the sessions a process used lately stay open.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from typing import Final, final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.chokepoint import Confinement, Directory, Location
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.journalobjects import DIR_MODE
from sandboxfs.fs.journalstore import (
    DEFAULT_KEEP_SECONDS,
    DEFAULT_MAX_BYTES,
    SESSIONS,
    JournalStore,
)
from sandboxfs.fs.recovery import recover
from sandboxfs.fs.workspaces import check_name

#: Journals of sessions kept open at once (each holds a lock file's descriptor).
OPEN_SESSIONS: Final = 64


@final
class Journals:
    """The journal directory, opened once at startup beneath its own descriptor."""

    def __init__(
        self,
        root: Root,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep_seconds: float = DEFAULT_KEEP_SECONDS,
        per_session: bool = False,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.keep_seconds = keep_seconds
        self.per_session = per_session
        self.confinement = Confinement()
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, JournalStore] = OrderedDict()
        self._recovered: set[int] = set()
        #: The one journal, when there is one for the whole server.
        self.main: JournalStore | None = None
        if not per_session:
            self.main = self._open(root)
        else:
            with self._top() as top, contextlib.suppress(FileExistsError):
                top.mkdir(SESSIONS, DIR_MODE)

    def _open(self, root: Root) -> JournalStore:
        return JournalStore(root, max_bytes=self.max_bytes, keep_seconds=self.keep_seconds)

    def _top(self) -> Directory:
        location = Location(self.root, ())
        fd = location.open(self.confinement, os.O_PATH | os.O_DIRECTORY, exact=True)
        return Directory(fd, location, self.root.path, self.confinement)

    def store(self, session: str | None) -> JournalStore:
        """The journal of ``session`` (a workspace id) or of the server."""
        if self.main is not None:
            return self.main
        if session is None:
            raise ValueError("a journal per session needs the session")
        check_name(session, "workspace id")
        with self._lock:
            store = self._sessions.get(session)
            if store is not None:
                self._sessions.move_to_end(session)
                return store
            rel = (SESSIONS, session)
            with (
                self._top() as top,
                top.subdirectory(SESSIONS, SESSIONS) as sessions,
                contextlib.suppress(FileExistsError),
            ):
                sessions.mkdir(session, DIR_MODE)
            fd = Location(self.root, rel).open(
                self.confinement, os.O_PATH | os.O_DIRECTORY, exact=True
            )
            path = "/".join((self.root.path, *rel))
            store = self._open(Root(fd, path, path))
            self._sessions[session] = store
            while len(self._sessions) > OPEN_SESSIONS:
                # Dropped, not closed: a call still using it keeps it (and its lock) open.
                self._sessions.popitem(last=False)
            return store

    def recover_once(self, store: JournalStore, ctx: FsContext) -> list[str]:
        """Roll back the patches a crashed process left in progress in ``store``, the
        first time this process uses it (``ctx``: the allowed directories they were made
        in, not journaled); what was done, in words."""
        with self._lock:
            if id(store) in self._recovered:
                return []
            self._recovered.add(id(store))
        return recover(ctx, store)

    def opened(self) -> list[JournalStore]:
        """Every journal open now."""
        with self._lock:
            return [self.main] if self.main is not None else list(self._sessions.values())

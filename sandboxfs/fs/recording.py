"""One call's record for the change journal, while the call runs: the steps it made
(each naming the place it changed, :class:`Where`) and the content it kept, written as
one journal record when the call is over (:meth:`Recording.finish`)."""

from __future__ import annotations

import logging
import time as _time
from dataclasses import dataclass
from typing import Any, final

from sandboxfs.fs.journalobjects import JournalError, Stored
from sandboxfs.fs.journalstore import JournalStore

log = logging.getLogger("sandboxfs")

JSON = dict[str, Any]


@final
@dataclass(frozen=True, slots=True)
class Where:
    """A place a step changed: the client's path, the allowed directory's real path
    and the canonical names below it."""

    path: str
    root: str
    rel: tuple[str, ...]

    def to_json(self) -> JSON:
        return {"path": self.path, "root": self.root, "rel": list(self.rel)}

    @classmethod
    def from_json(cls, value: JSON) -> Where:
        return cls(str(value["path"]), str(value["root"]), tuple(str(n) for n in value["rel"]))


@final
class Recording:
    """The changes of one call, and the objects kept for them (held until the record
    is written).  Thread-safe enough for one call: steps are appended in order."""

    def __init__(
        self,
        store: JournalStore,
        *,
        tool: str = "",
        session: str | None = None,
        client: str | None = None,
        paths: tuple[str, ...] = (),
    ) -> None:
        self.store = store
        self.tool = tool
        self.session = session
        self.client = client
        self.paths = paths
        self.steps: list[JSON] = []
        #: Objects this call kept (pinned until :meth:`finish`).
        self.kept: list[str] = []
        #: Bytes of content this call may still keep.
        self.budget = store.max_bytes
        #: Set when the call stopped part-way: what it says.
        self.partial: str | None = None
        #: The records this call undoes (undo_changes).
        self.undoes: tuple[int, ...] = ()
        #: The id of the record written, once :meth:`finish` wrote it.
        self.entry: int | None = None
        self._finished = False

    # -- keeping content ---------------------------------------------------------------

    def _too_big(self, size: int) -> JSON | None:
        if size <= self.budget:
            return None
        return {
            "object": None,
            "note": f"not kept: {size} bytes is more than the journal may hold "
            f"({self.store.max_bytes} bytes, --journal-max-bytes)",
        }

    def keep_bytes(self, data: bytes, revision: str | None = None) -> JSON:
        """State fields for content held in memory: its object, or why it is not kept."""
        refused = self._too_big(len(data))
        if refused is not None:
            return refused
        digest = revision.removeprefix("sha256:") if revision else None
        stored = self.store.put_bytes(data, digest)
        return self._kept(stored)

    def keep_fd(self, fd: int, size: int, revision: str | None = None) -> JSON:
        """State fields for the first ``size`` bytes of an open regular file."""
        refused = self._too_big(size)
        if refused is not None:
            return refused
        if revision is not None and revision.startswith("sha256:"):
            digest = revision.removeprefix("sha256:")
            self.store.pin(digest)
            if self.store.has(digest):
                return self._kept(Stored(digest, size))
            self.store.unpin(digest)
        return self._kept(self.store.put_stream(fd, size))

    def _kept(self, stored: Stored) -> JSON:
        self.kept.append(stored.digest)
        self.budget -= stored.size
        return {"object": stored.digest, "revision": "sha256:" + stored.digest}

    # -- steps -------------------------------------------------------------------------

    def add(self, step: JSON) -> None:
        self.steps.append(step)

    def finish(self, *, time: float | None = None) -> int | None:
        """Write the record of this call (None if it changed nothing) and let go of the
        objects it kept; a second call does nothing.  A journal that cannot be written
        is logged, never turned into a failure of a change that was made."""
        if self._finished:
            return self.entry
        self._finished = True
        try:
            if not self.steps:
                return self.entry  # a patch writes its own record (see fs/patches.py)
            record: JSON = {
                "time": _time.time() if time is None else time,
                "session": self.session,
                "client": self.client,
                "tool": self.tool,
                "paths": list(self.paths),
                "steps": self.steps,
            }
            if self.undoes:
                record["undoes"] = list(self.undoes)
            if self.partial is not None:
                record["partial"] = self.partial
            try:
                self.entry = self.store.commit(record)
            except (OSError, JournalError) as exc:
                log.error("the change journal could not record a change by %s: %s", self.tool, exc)
            return self.entry
        finally:
            self.release()

    def release(self) -> None:
        """Let go of the objects kept (those no record references are removed)."""
        kept, self.kept = self.kept, []
        for digest in kept:
            self.store.unpin(digest)
        if kept and not self.steps:
            try:
                self.store.release_unreferenced(kept)
            except (OSError, JournalError) as exc:
                log.warning("the change journal could not remove unused copies: %s", exc)

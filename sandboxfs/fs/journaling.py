"""What one call changes, captured for the change journal where each change is made.

The filesystem operations call the functions here at the one point where they
hold the entry they change (a :class:`~sandboxfs.core.chokepoint.ParentDir`,
under the entry's lock when it has one): *before* the change, the state it
replaces is taken through that same descriptor (a file's bytes, kept in the
store under their hash; a symlink's text; every entry of a directory tree being
removed); *after* it, one step is added to the call's :class:`Recording`, which
the caller turns into one journal record once the call is over.  Without a
journal (``ctx.journal`` is None) each function returns at once.

A step names the place it changed as the client gave it (``path``) and as it
resolved: the allowed directory's real path (``root``) and the canonical
(symlink-free) names below it (``rel``).  States are JSON objects::

    {"kind": "absent"}
    {"kind": "file", "revision": "sha256:…", "size": N, "mode": M, "object": "<sha256>"}
    {"kind": "file", "size": N, "mode": M, "prefix": true}      (before an append)
    {"kind": "symlink", "target": "…"}
    {"kind": "directory", "mode": M, "tree": [{"rel": […], "kind": …, …}, …]}

``object`` is None (with a ``note``) when the content was not kept: it was
larger than the journal may hold.  Guarantee: a step is added only after its
change was made; content is kept before the change is made, so a step never
names content the journal does not have (unless it says so).
"""

from __future__ import annotations

import logging
import os
import stat
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir, same_file
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import join
from sandboxfs.fs.approval import Question, Touched
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import read_entries
from sandboxfs.fs.journalstore import JournalError, JournalStore, Stored
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.revisions import SameBytes, content_revision, revision_soon, stat_key

log = logging.getLogger("sandboxfs")

JSON = dict[str, Any]
ABSENT_STATE: Final[JSON] = {"kind": "absent"}
#: New content below this size is hashed in the calling thread (a thread's start costs
#: more than hashing a few MiB on a busy machine).
INLINE_HASH_BYTES: Final = 4 * 1024 * 1024


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


# -- where a change is -----------------------------------------------------------------


def where(ctx: FsContext, parent: ParentDir) -> Where:
    """The canonical place of ``parent``'s leaf (its directory checked by identity)."""
    try:
        location = ctx.resolver.canonical_directory(parent.dir, parent.path)
    except SandboxError:
        location = parent.dir.location
    return Where(parent.path, location.root.path, (*location.rel, parent.leaf))


def where_in(ctx: FsContext, directory: Directory, name: str, path: str) -> Where:
    try:
        location = ctx.resolver.canonical_directory(directory, path)
    except SandboxError:
        location = directory.location
    return Where(path, location.root.path, (*location.rel, name))


# -- approval (--ask) ------------------------------------------------------------------------


def shown(place: Where) -> str:
    """A place as the user is shown it: the absolute path it resolved to."""
    return quote_path(join((place.root.rstrip("/"), *place.rel)))


def _approve(
    ctx: FsContext, what: str, places: list[tuple[Where, bytes | None, bytes | None]]
) -> None:
    """Ask the user, if a place needs it (``--ask``): raises NotApproved for a no."""
    gate = ctx.approval
    if gate is None:
        return
    question = Question(
        what, tuple(Touched(shown(place), before, after) for place, before, after in places)
    )
    gate.check([(place.root, place.rel) for place, _, _ in places], question)


def _current_bytes(
    ctx: FsContext, parent: ParentDir, st: os.stat_result | None, expected: str | SameBytes | None
) -> bytes | None:
    """What the file holds now, for the user to see what a write replaces (None: nothing
    there, not a regular file, or over the edit limit)."""
    if isinstance(expected, SameBytes):
        return expected.data
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > ctx.limits.edit_bytes:
        return None
    fd = parent.open(READ_FLAGS)
    try:
        if not same_file(os.fstat(fd), st):
            return None
        chunks = []
        while chunk := os.read(fd, 1024 * 1024):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# -- the hooks the operations call -------------------------------------------------------


@final
@dataclass(slots=True)
class Before:
    """What a change is about to replace: where, and the state there."""

    where: Where
    state: JSON
    #: The new content's revision, hashed meanwhile (writes).
    revision: Callable[[], str] | None = None
    extra: JSON = field(default_factory=dict)


def file_state(recording: Recording, ctx: FsContext, fd: int, st: os.stat_result) -> JSON:
    """The state of the regular file open at ``fd`` (its ``fstat`` ``st``), its bytes kept."""
    known = ctx.revisions.get(stat_key(st)) if st.st_size <= ctx.limits.edit_bytes else None
    state: JSON = {"kind": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode)}
    state.update(recording.keep_fd(fd, st.st_size, known))
    return state


def before_write(
    ctx: FsContext,
    parent: ParentDir,
    st: os.stat_result | None,
    expected: str | SameBytes | None,
    data: bytes,
    *,
    revision: Callable[[], str] | None = None,
) -> Before | None:
    """Before ``data`` replaces (or creates) ``parent``'s leaf, whose ``lstat`` under
    the lock was ``st``: keep what is there.  ``revision`` is ``data``'s, when the
    caller has it (being) computed already."""
    recording = ctx.journal
    if recording is None and ctx.approval is None:
        return None
    place = where(ctx, parent)
    if ctx.approval is not None:
        old = _current_bytes(ctx, parent, st, expected)
        verb = "write" if st is not None else "create"
        _approve(ctx, f"{verb} {shown(place)}", [(place, old, data)])
    if recording is None:
        return None
    if revision is None:
        revision = _revision_of(data)
    if st is None:
        return Before(place, dict(ABSENT_STATE), revision)
    if not stat.S_ISREG(st.st_mode):
        return Before(place, {"kind": "other"}, revision)
    state: JSON = {"kind": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode)}
    if isinstance(expected, SameBytes):  # the bytes are in hand (edit_file), checked under the lock
        known = ctx.revisions.get(stat_key(st))
        state.update(recording.keep_bytes(expected.data, known))
        return Before(place, state, revision)
    fd = parent.open(READ_FLAGS)
    try:
        opened = os.fstat(fd)
        if not same_file(opened, st):
            raise SandboxError(
                f"The file changed while it was being written; try again: {parent.path}",
                "ESTALE",
            )
        return Before(place, file_state(recording, ctx, fd, opened), revision)
    finally:
        os.close(fd)


def _revision_of(data: bytes) -> Callable[[], str]:
    """``data``'s revision: here, unless it is big enough to be worth a thread that
    hashes while the data is written."""
    if len(data) < INLINE_HASH_BYTES:
        revision = content_revision(data)
        return lambda: revision
    return revision_soon(data)


def wrote(ctx: FsContext, before: Before | None, new: os.stat_result | None, size: int) -> None:
    """``before``'s place now holds the new content (its ``fstat`` ``new``)."""
    recording = ctx.journal
    if recording is None or before is None:
        return
    assert before.revision is not None
    revision = before.revision()
    if new is not None:
        ctx.revisions.put(stat_key(new), revision)  # the next change keeps it without hashing
    after: JSON = {"kind": "file", "revision": revision, "size": size}
    recording.add({"op": "write", **before.where.to_json(), "before": before.state, "after": after})


def before_append(ctx: FsContext, parent: ParentDir, st: os.stat_result | None) -> Before | None:
    """Before an append to ``parent``'s leaf: only its size (the append is undone by
    keeping that many bytes of what it left)."""
    if ctx.journal is None and ctx.approval is None:
        return None
    place = where(ctx, parent)
    _approve(ctx, f"append to {shown(place)}", [(place, None, None)])
    if ctx.journal is None:
        return None
    if st is None:
        return Before(place, dict(ABSENT_STATE))
    return Before(
        place,
        {"kind": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode), "prefix": True},
    )


def appended(ctx: FsContext, before: Before | None, change: Change, created: bool) -> None:
    recording = ctx.journal
    if recording is None or before is None:
        return
    state = dict(ABSENT_STATE) if created else before.state
    after: JSON = {"kind": "file", "revision": change.revision, "size": change.size}
    recording.add({"op": "append", **before.where.to_json(), "before": state, "after": after})


def before_move(ctx: FsContext, src: ParentDir, dst: ParentDir) -> tuple[Where, Where] | None:
    if ctx.journal is None and ctx.approval is None:
        return None
    places = where(ctx, src), where(ctx, dst)
    moved: list[tuple[Where, bytes | None, bytes | None]] = [(p, None, None) for p in places]
    if ctx.approval is not None:  # what lies below a directory moves too, both ways
        below = _names_below(ctx, src)
        moved += [(Where(p.path, p.root, p.rel + rel), None, None) for p in places for rel in below]
    _approve(ctx, f"move {shown(places[0])} to {shown(places[1])}", moved)
    return places if ctx.journal is not None else None


def _names_below(ctx: FsContext, parent: ParentDir) -> list[tuple[str, ...]]:
    """The names of everything below ``parent``'s leaf, if it is a directory (for the
    rules of --ask; at most the walk's entry cap, depth first)."""
    st = parent.lstat()
    if st is None or not stat.S_ISDIR(st.st_mode):
        return []
    found: list[tuple[str, ...]] = []

    def visit(directory: Directory, rel: tuple[str, ...]) -> None:
        for entry in read_entries(directory, with_stat=False):
            if len(found) >= ctx.limits.walk_entries or len(rel) >= ctx.limits.tree_depth:
                return
            here = (*rel, entry.name)
            found.append(here)
            if entry.kind == "directory":
                with directory.child(entry.name, parent.path) as below:
                    visit(below, here)

    with parent.dir.child(parent.leaf, parent.path) as top:
        visit(top, ())
    return found


def before_copy(ctx: FsContext, dst: ParentDir) -> None:
    """Before a copy is made at ``dst``'s leaf."""
    if ctx.approval is not None:
        place = where(ctx, dst)
        _approve(ctx, f"copy a file to {shown(place)}", [(place, None, None)])


def before_mkdirs(ctx: FsContext, directory: Directory, names: tuple[str, ...], path: str) -> None:
    """Before ``names`` (each inside the one before) are made in ``directory``."""
    if ctx.approval is None or not names:
        return
    first = where_in(ctx, directory, names[0], path)
    places = [
        Where(path, first.root, first.rel + names[1:depth]) for depth in range(1, len(names) + 1)
    ]
    _approve(ctx, f"create directory {shown(places[-1])}", [(p, None, None) for p in places])


def moved(
    ctx: FsContext, places: tuple[Where, Where] | None, dst: ParentDir, change: Change
) -> None:
    """What ``places`` named was moved; ``dst`` holds it now.  Its revision is the
    entry's own (a symlink's is its text's), as a conditional change checks it."""
    recording = ctx.journal
    if recording is None or places is None:
        return
    source, destination = places
    st = dst.lstat()
    kind = "absent" if st is None else entry_kind(st.st_mode)
    revision = change.revision
    if kind == "symlink":
        try:
            revision = content_revision(os.fsencode(dst.readlink()))
        except OSError:
            revision = None
    recording.add(
        {
            "op": "move",
            **source.to_json(),
            "to": destination.to_json(),
            "after": {"kind": kind, "revision": revision},
        }
    )


def content_line(rel: tuple[str, ...], kind: str, what: str) -> str:
    return "\0".join(("/".join(rel), kind, what))


def tree_content(tree: list[JSON]) -> str:
    """A revision of what a tree holds, whatever its times: each entry's path, kind,
    and bytes (a file's revision) or text (a symlink's)."""
    lines = []
    for entry in tree:
        kind = str(entry["kind"])
        what = str(entry.get("revision") or entry.get("target") or "")
        lines.append(content_line(tuple(str(n) for n in entry["rel"]), kind, what))
    return (
        "content:"
        + content_revision("\n".join(sorted(lines)).encode("utf-8", "surrogateescape"))[7:]
    )


def entry_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "other"


def linked(ctx: FsContext, parent: ParentDir, target: str) -> None:
    """A symlink holding ``target`` was made at ``parent``'s leaf (an undo put it back)."""
    recording = ctx.journal
    if recording is None:
        return
    recording.add(
        {
            "op": "symlink",
            **where(ctx, parent).to_json(),
            "before": dict(ABSENT_STATE),
            "after": {
                "kind": "symlink",
                "target": target,
                "revision": content_revision(os.fsencode(target)),
            },
        }
    )


def restored(ctx: FsContext, parent: ParentDir, state: JSON, revision: str | None) -> None:
    """A directory tree described by ``state`` was made again at ``parent``'s leaf."""
    recording = ctx.journal
    if recording is None:
        return
    after = {**state, "revision": revision, "content": tree_content(state.get("tree") or [])}
    recording.add(
        {
            "op": "restore",
            **where(ctx, parent).to_json(),
            "before": dict(ABSENT_STATE),
            "after": after,
        }
    )


def copied(ctx: FsContext, dst: ParentDir, change: Change) -> None:
    recording = ctx.journal
    if recording is None:
        return
    after: JSON = {"kind": "file", "revision": change.revision, "size": change.size}
    recording.add(
        {"op": "copy", **where(ctx, dst).to_json(), "before": dict(ABSENT_STATE), "after": after}
    )


def made_directory(ctx: FsContext, directory: Directory, name: str, path: str) -> None:
    """``name`` was made (empty) in ``directory``."""
    recording = ctx.journal
    if recording is None:
        return
    place = where_in(ctx, directory, name, path)
    recording.add(
        {
            "op": "mkdir",
            **place.to_json(),
            "before": dict(ABSENT_STATE),
            "after": {"kind": "directory", "tree": []},
        }
    )


def before_remove(
    ctx: FsContext, parent: ParentDir, st: os.stat_result, *, recursive: bool
) -> Before | None:
    """Before ``parent``'s leaf (``lstat`` ``st``) is removed: keep all of it."""
    recording = ctx.journal
    if recording is None and ctx.approval is None:
        return None
    place = where(ctx, parent)
    whole = recursive and stat.S_ISDIR(st.st_mode)
    removed: list[tuple[Where, bytes | None, bytes | None]] = [(place, None, None)]
    if whole and ctx.approval is not None:  # everything below it goes too
        below = _names_below(ctx, parent)
        removed += [(Where(place.path, place.root, place.rel + rel), None, None) for rel in below]
    what = " and everything below it" if whole else ""
    _approve(ctx, f"delete {shown(place)}{what}", removed)
    if recording is None:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return Before(place, {"kind": "symlink", "target": parent.readlink()})
    if stat.S_ISREG(st.st_mode):
        fd = parent.open(READ_FLAGS)
        try:
            opened = os.fstat(fd)
            if not same_file(opened, st):
                raise SandboxError(
                    f"The file changed while it was being removed; try again: {parent.path}",
                    "ESTALE",
                )
            return Before(place, file_state(recording, ctx, fd, opened))
        finally:
            os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        tree: list[JSON] = []
        state: JSON = {"kind": "directory", "mode": mode, "tree": tree}
        if recursive:
            with parent.dir.child(parent.leaf, parent.path) as directory:
                note = _keep_tree(recording, ctx, directory, parent.path, rel=(), out=tree)
            if note is not None:
                state = {"kind": "directory", "mode": mode, "tree": None, "note": note}
                # Objects kept for the part already read stay pinned until the record is written.
        return Before(place, state)
    return Before(place, {"kind": "other", "mode": mode})


def _keep_tree(
    recording: Recording,
    ctx: FsContext,
    directory: Directory,
    path: str,
    *,
    rel: tuple[str, ...],
    out: list[JSON],
) -> str | None:
    """Describe and keep everything below ``directory`` into ``out`` (parents before
    what they hold); a note instead when it cannot all be kept."""
    if len(rel) >= ctx.limits.tree_depth:
        return f"not kept: deeper than {ctx.limits.tree_depth} levels"
    with ctx.watch.step(path):
        entries = read_entries(directory, with_stat=True)
    for entry in entries:
        if len(out) >= ctx.limits.walk_entries:
            return f"not kept: more than {ctx.limits.walk_entries} entries"
        here = (*rel, entry.name)
        lst = entry.lstat
        if lst is None:
            continue
        mode = stat.S_IMODE(lst.st_mode)
        if entry.kind == "directory":
            out.append({"rel": list(here), "kind": "directory", "mode": mode})
            with directory.child(entry.name, path) as below:
                note = _keep_tree(recording, ctx, below, path, rel=here, out=out)
            if note is not None:
                return note
        elif entry.kind == "symlink":
            out.append(
                {"rel": list(here), "kind": "symlink", "target": directory.readlink(entry.name)}
            )
        elif entry.kind == "file":
            fd = directory.open(entry.name, READ_FLAGS)
            try:
                opened = os.fstat(fd)
                if not stat.S_ISREG(opened.st_mode):
                    return "not kept: an entry changed while it was read"
                state = file_state(recording, ctx, fd, opened)
            finally:
                os.close(fd)
            if state.get("object") is None:
                return str(state.get("note") or "not kept")
            out.append({"rel": list(here), **state})
        else:
            out.append({"rel": list(here), "kind": "other", "mode": mode})
    return None


def removed(ctx: FsContext, before: Before | None) -> None:
    recording = ctx.journal
    if recording is None or before is None:
        return
    recording.add(
        {"op": "remove", **before.where.to_json(), "before": before.state, "after": ABSENT_STATE}
    )


def stopped(ctx: FsContext, message: str) -> None:
    """The call stopped part-way (what it did is recorded; ``message`` says the rest)."""
    if ctx.journal is not None:
        ctx.journal.partial = message

"""Taking journaled changes back, never blindly.

:func:`undo` takes the steps of one or more journal records back, newest first.
Guarantees:

* **Conditional on the revision.**  Before anything changes, every step is
  checked against what its place holds now (taking into account the steps
  before it in this undo): a place must still hold exactly what the step left
  (the same bytes, the same tree, the same symlink text, nothing), else the
  whole undo is refused and the message names the place that changed.  Each
  change is then made as a conditional change of its own (under the entry's
  lock, :mod:`sandboxfs.fs.guard`), so a writer racing the undo is never
  overwritten either.
* **Through the same operations.**  Undoing a write writes the old bytes back
  (:func:`sandboxfs.fs.writes.replace_file`), undoing a move moves back, undoing
  a creation removes what was created, undoing a removal makes it again (files
  with their bytes and permission bits, symlinks with their text, directory
  trees whole), each beneath an allowed directory's descriptor with the
  policy's checks: an undo can do nothing a tool could not.
* **Journaled.**  The undo's own changes are captured like any call's (the
  caller records them as one new record), so an undo can itself be undone.
* **What cannot be undone says so**: content the journal did not keep (too
  big), special files, a place in a directory the server does not serve now.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.core.chokepoint import READ_FLAGS, ParentDir
from sandboxfs.core.errors import NotADirectory, NotFound, SandboxError
from sandboxfs.fs import journaling, moves, writes
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.files import cached_file_revision
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalplaces import Place, UndoRefused, find_place, shown
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.restoring import restore, tree_content_at
from sandboxfs.fs.revisions import ABSENT, SameBytes, content_revision, tree_revision
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below

JSON = dict[str, Any]

#: The revision of an empty directory (what create_directory leaves).
EMPTY_TREE: Final = tree_revision(iter(()))
#: A state nobody knows in advance (the bytes before an append): an older step's
#: check against it is left to that step's own conditional change.
UNKNOWN: Final = None
#: What undoing a directory's move needs at the destination: a directory (moving it
#: back never replaces anything, so what is inside it does not matter).
ANY_DIRECTORY: Final = "dir:any"
#: A directory tree put back by this undo (its revision is known only once made).
RESTORED_TREE: Final = "dir:restored"


# -- what a place holds now ----------------------------------------------------------------


def now(ctx: FsContext, place: Place) -> str:
    """What ``place`` holds, as a revision: ``absent``, a file's bytes, a symlink's text,
    a directory's tree (``dir:too-big`` when a tree is too big to describe,
    ``file:too-big`` likewise for a file)."""
    path = place.path
    try:
        parent = ctx.resolver.parent(path)
    except (NotFound, NotADirectory):
        # Its directory is missing (maybe put back earlier in this undo), or is a file.
        return ABSENT
    with parent:
        st = parent.lstat()
        if st is None:
            return ABSENT
        if stat.S_ISLNK(st.st_mode):
            return content_revision(os.fsencode(parent.readlink()))
        return _revision_of_leaf(ctx, parent, st)


def _revision_of_leaf(ctx: FsContext, parent: ParentDir, st: os.stat_result) -> str:
    path = parent.path
    if stat.S_ISREG(st.st_mode):
        fd = parent.open(READ_FLAGS)
        try:
            return cached_file_revision(ctx, fd, os.fstat(fd), fresh=True) or "file:too-big"
        finally:
            os.close(fd)
    if not stat.S_ISDIR(st.st_mode):
        return "other"
    with parent.dir.child(parent.leaf, path) as directory:
        try:
            return tree_revision_below(ctx, directory, path, ctx.limits.walk_entries)
        except TooManyEntries:
            return "dir:too-big"


def _is_directory(token: str) -> bool:
    return token.startswith(("tree:", "dir:"))


def matches(held: str | None, expect: str | None) -> bool:
    """Whether a place holding ``held`` (None: not known before the undo is made)
    meets ``expect`` (None: anything)."""
    if held is None or expect is None:
        return True
    if expect == ANY_DIRECTORY:
        return _is_directory(held)
    if held.startswith("dir:") and expect.startswith(("tree:", "content:")):
        return True  # a tree changed earlier in this undo: its own change checks it
    return held == expect


# -- what each step expects, and leaves once undone ----------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Effect:
    """One place a step's undo touches: what it must hold first (None: not known in
    advance), and what it holds after (None: not known)."""

    place: JSON
    expect: str | None
    leaves: str | None


def _revision(state: JSON) -> str | None:
    value = state.get("revision")
    return value if isinstance(value, str) else None


def _before_token(state: JSON) -> str | None:
    kind = state.get("kind")
    if kind == "absent":
        return ABSENT
    if kind == "symlink":
        return content_revision(os.fsencode(str(state["target"])))
    if kind == "file" and not state.get("prefix"):
        return _revision(state)
    if kind == "directory":
        return RESTORED_TREE
    return UNKNOWN


def _moved_token(after: JSON) -> str | None:
    if after.get("kind") == "directory":
        return ANY_DIRECTORY
    return _revision(after)


def effects(step: JSON) -> list[Effect]:
    """The places undoing ``step`` touches, in the order they are checked."""
    op = step["op"]
    if op == "move":
        moved = _moved_token(step["after"])
        leaves = RESTORED_TREE if moved == ANY_DIRECTORY else moved
        return [Effect(step["to"], moved, ABSENT), Effect(step, ABSENT, leaves)]
    after = step.get("after", {})
    if op == "mkdir":
        expect: str | None = EMPTY_TREE
    elif op == "remove":
        expect = ABSENT
    elif op == "restore":
        expect = str(after.get("content") or "") or None
    else:
        expect = _revision(after)
    return [Effect(step, expect, _before_token(step.get("before", {})))]


def check_undoable(step: JSON, entry_id: int) -> None:
    """Refuse a step whose undo would need what the journal does not have."""
    op = step["op"]
    where = shown(step)
    before = step.get("before", {})
    after = step.get("after", {})
    kind = before.get("kind")

    def refuse(why: str) -> None:
        raise UndoRefused(f"Cannot undo change {entry_id} to {where}: {why}", "EINVAL")

    if op in ("write", "append", "copy", "symlink", "restore") and _revision(after) is None:
        refuse("what it left was not recorded (too big to hash, over --max-edit-bytes)")
    if op == "move" and _moved_token(after) is None:
        refuse("what it moved was not recorded")
    if op in ("write", "remove") and kind == "file" and not before.get("object"):
        refuse(f"the content before it was {before.get('note') or 'not kept'}")
    if op == "remove" and kind == "directory" and before.get("tree") is None:
        refuse(f"the tree before it was {before.get('note') or 'not kept'}")
    if op == "remove" and kind == "directory":
        for entry in before["tree"]:
            if entry.get("kind") not in ("file", "symlink", "directory"):
                refuse("it removed a special file (FIFO, socket or device) below it")
            if entry.get("kind") == "file" and not entry.get("object"):
                refuse("some content below it was not kept")
    if op == "remove" and kind not in ("file", "symlink", "directory"):
        refuse("it removed a special file (FIFO, socket or device), which cannot be made again")
    if op == "write" and kind not in ("absent", "file"):
        refuse("what it replaced was not a regular file")


# -- undoing -------------------------------------------------------------------------------


Simulated = dict[tuple[str, tuple[str, ...]], str | None]


def _held(ctx: FsContext, place: Place, simulated: Simulated, expect: str | None) -> str | None:
    """What ``place`` will hold when the undo reaches it: what an earlier step of this
    undo leaves there, else what it holds now; a directory something below which this
    undo changes first holds what is not known yet (an empty one is worked out)."""
    if place.key in simulated:
        return simulated[place.key]
    root, rel = place.key
    if any(key[0] == root and key[1] == rel[: len(key[1])] for key in simulated):
        # A directory above it was moved, removed or put back earlier in this undo: what
        # the disk holds here now says nothing; the step's own conditional change checks.
        return None
    held = now(ctx, place)
    if not _is_directory(held):
        return held
    return _directory_held(ctx, place, simulated, expect, held)


def _directory_held(
    ctx: FsContext, place: Place, simulated: Simulated, expect: str | None, held: str
) -> str:
    """A directory's tree once the earlier steps of this undo changed what is below it
    (only whether it will be empty can be told in advance)."""
    root, rel = place.key
    changed = [
        key
        for key in simulated
        if key[0] == root and len(key[1]) > len(rel) and key[1][: len(rel)] == rel
    ]
    if not changed:
        if expect is not None and expect.startswith("content:"):
            return tree_content_at(ctx, place)
        return held
    if expect != EMPTY_TREE:
        return "dir:changed-below"
    with ctx.resolver.parent(place.path) as parent, parent.dir.child(parent.leaf, place.path) as d:
        names, _ = d.entries()
    gone = {
        key[1][len(rel)]
        for key in changed
        if len(key[1]) == len(rel) + 1 and simulated[key] == ABSENT
    }
    return EMPTY_TREE if set(names) <= gone else held


Plan = list[tuple[int, JSON]]


def check(ctx: FsContext, records: list[JSON]) -> Plan:
    """The steps undoing ``records`` (newest first) takes, last first, once each was
    checked: it can be undone, and every place holds what the step left (taking the
    steps before it into account).  Raises UndoRefused, naming the place, otherwise."""
    plan = [(int(record["id"]), step) for record in records for step in reversed(record["steps"])]
    for entry_id, step in plan:
        check_undoable(step, entry_id)
    simulated: Simulated = {}
    for entry_id, step in plan:
        for effect in effects(step):
            place = find_place(ctx, effect.place)
            held = _held(ctx, place, simulated, effect.expect)
            if not matches(held, effect.expect):
                raise UndoRefused(
                    f"Cannot undo change {entry_id}: {shown(effect.place)} changed since "
                    f"(it holds {held}, the change left {effect.expect}); nothing was undone"
                )
            simulated[place.key] = effect.leaves
    return plan


def undo(ctx: FsContext, store: JournalStore, records: list[JSON]) -> int:
    """Undo ``records`` (newest first), each one's steps last first.  Returns how many
    steps were undone.  Raises UndoRefused (nothing done) if any step cannot be
    undone or its place changed since.  A step that fails once others were made
    (something changed between the check and the change) takes those back too, so
    the undo changes nothing; only if that fails as well does it say how much was
    done (and the caller's record of this undo says so)."""
    plan = check(ctx, records)
    done = 0
    for entry_id, step in plan:
        try:
            perform(ctx, store, step)
        except (SandboxError, JournalError) as exc:
            message = str(exc)
            code = exc.code if isinstance(exc, SandboxError) else "EIO"
            if done:
                message = _take_back(ctx, store, message, entry_id, done=done, total=len(plan))
            raise UndoRefused(message, code) from None
        done += 1
    return done


def _take_back(
    ctx: FsContext, store: JournalStore, message: str, entry_id: int, *, done: int, total: int
) -> str:
    """Put back what the steps of a failed undo made (in reverse, unjournaled, without
    asking again); the message to refuse with."""
    recording = ctx.journal
    made = list(recording.steps) if recording is not None else []
    plain = dataclasses.replace(ctx, journal=None, approval=None)
    try:
        for step in reversed(made):
            perform(plain, store, step)
    except (SandboxError, JournalError) as again:
        partial = (
            f"{message} (undoing change {entry_id}; {done} of the {total} steps were undone "
            f"before this, and could not be put back: {again})"
        )
        journaling.stopped(ctx, partial)
        return partial
    if recording is not None:
        recording.steps.clear()  # nothing of this undo remains: nothing to record
    return (
        f"{message} (undoing change {entry_id}: the steps undone before it were put back; "
        "nothing changed)"
    )


def perform(ctx: FsContext, store: JournalStore, step: JSON) -> None:
    op = step["op"]
    before = step.get("before", {})
    after = step.get("after", {})
    if op == "move":
        source = find_place(ctx, step)
        target = find_place(ctx, step["to"])
        moved = _moved_token(after)
        if moved == ANY_DIRECTORY:
            _require_directory(ctx, target)
            moved = None  # a directory goes back whatever it holds: nothing is replaced
        moves.rename(ctx, target.path, source.path, expected=moved, expected_destination=ABSENT)
        return
    place = find_place(ctx, step)
    if op == "mkdir":
        moves.remove(ctx, place.path, recursive=False, expected=EMPTY_TREE)
    elif op == "remove":
        restore(ctx, store, place, before)
    elif op == "restore":
        # A tree put back goes again only if it holds what it was put back with (its
        # times cannot match); the removal keeps all of it, as every removal does.
        content = str(after.get("content"))
        if tree_content_at(ctx, place) != content:
            raise UndoRefused(f"Cannot undo: {place.path} changed since it was put back")
        moves.remove(ctx, place.path, recursive=True, expected=None)
    elif before.get("kind") == "absent":
        recursive = after.get("kind") == "directory"
        moves.remove(ctx, place.path, recursive=recursive, expected=_revision(after))
    elif op == "append":
        _take_append_back(ctx, place, int(before["size"]), str(after["revision"]))
    else:  # a write over a file
        data = store.read_object(str(before["object"]))
        writes.replace_file(ctx, place.path, data, expected=_revision(after))


def _require_directory(ctx: FsContext, place: Place) -> None:
    with ctx.resolver.parent(place.path) as parent:
        st = parent.lstat()
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise UndoRefused(f"Cannot move {place.path} back: it is no longer a directory")


def _take_append_back(ctx: FsContext, place: Place, size: int, revision: str) -> None:
    """Keep the first ``size`` bytes of the file, if it still holds what the append left."""
    path = place.path
    with ctx.resolver.parent(path) as parent:
        fd = parent.open(READ_FLAGS)
        try:
            data = _read_all(fd)
        finally:
            os.close(fd)
    if content_revision(data) != revision or len(data) < size:
        raise UndoRefused(f"Cannot undo the append to {path}: it changed since")
    writes.replace_file(ctx, path, data[:size], expected=SameBytes(data))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1024 * 1024):
        chunks.append(chunk)
    return b"".join(chunks)

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir, same_file
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.approval import approve, current_bytes, shown
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.journaltrees import file_state, keep_tree, names_below, tree_content
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.recording import Where
from sandboxfs.fs.revisions import SameBytes, content_revision, revision_soon, stat_key

log = logging.getLogger("sandboxfs")

JSON = dict[str, Any]
ABSENT_STATE: Final[JSON] = {"kind": "absent"}
#: New content below this size is hashed in the calling thread (a thread's start costs
#: more than hashing a few MiB on a busy machine).
INLINE_HASH_BYTES: Final = 4 * 1024 * 1024


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
        old = current_bytes(ctx, parent, st, expected)
        verb = "write" if st is not None else "create"
        approve(ctx, f"{verb} {shown(place)}", [(place, old, data)])
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
    approve(ctx, f"append to {shown(place)}", [(place, None, None)])
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
        below = names_below(ctx, src)
        moved += [(Where(p.path, p.root, p.rel + rel), None, None) for p in places for rel in below]
    approve(ctx, f"move {shown(places[0])} to {shown(places[1])}", moved)
    return places if ctx.journal is not None else None


def before_copy(ctx: FsContext, dst: ParentDir) -> None:
    """Before a copy is made at ``dst``'s leaf."""
    if ctx.approval is not None:
        place = where(ctx, dst)
        approve(ctx, f"copy a file to {shown(place)}", [(place, None, None)])


def before_mkdirs(ctx: FsContext, directory: Directory, names: tuple[str, ...], path: str) -> None:
    """Before ``names`` (each inside the one before) are made in ``directory``."""
    if ctx.approval is None or not names:
        return
    first = where_in(ctx, directory, names[0], path)
    places = [
        Where(path, first.root, first.rel + names[1:depth]) for depth in range(1, len(names) + 1)
    ]
    approve(ctx, f"create directory {shown(places[-1])}", [(p, None, None) for p in places])


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
        below = names_below(ctx, parent)
        removed += [(Where(place.path, place.root, place.rel + rel), None, None) for rel in below]
    what = " and everything below it" if whole else ""
    approve(ctx, f"delete {shown(place)}{what}", removed)
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
                note = keep_tree(recording, ctx, directory, parent.path, rel=(), out=tree)
            if note is not None:
                state = {"kind": "directory", "mode": mode, "tree": None, "note": note}
                # Objects kept for the part already read stay pinned until the record is written.
        return Before(place, state)
    return Before(place, {"kind": "other", "mode": mode})


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

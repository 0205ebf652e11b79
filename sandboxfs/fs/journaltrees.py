"""What the change journal keeps of whole trees and files: a file's state (its bytes
kept by hash), everything below a directory about to be removed, the names below a
directory (for the rules of ``--ask``), and what a tree holds whatever its times.

Every directory is opened exactly beneath the one before (no symlink followed), depth
first, within the walk's entry cap and depth (:func:`sandboxfs.fs.below.below`).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from sandboxfs.core import ENTRY, READ_FLAGS, TOO_DEEP, TOO_MANY, Directory, ParentDir
from sandboxfs.fs.below import below, bounds
from sandboxfs.fs.entries import Entry
from sandboxfs.fs.operation import FsContext
from sandboxfs.fs.revisions import content_revision, stat_key

if TYPE_CHECKING:
    from sandboxfs.fs.recording import Recording

JSON = dict[str, Any]


def file_state(recording: Recording, ctx: FsContext, fd: int, st: os.stat_result) -> JSON:
    """The state of the regular file open at ``fd`` (its ``fstat`` ``st``), its bytes kept."""
    known = ctx.revisions.get(stat_key(st)) if st.st_size <= ctx.limits.edit_bytes else None
    state: JSON = {"kind": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode)}
    state.update(recording.keep_fd(fd, st.st_size, known))
    return state


def names_below(ctx: FsContext, parent: ParentDir) -> list[tuple[str, ...]]:
    """The names of everything below ``parent``'s leaf, if it is a directory (for the
    rules of --ask; at most the walk's entry cap, depth first)."""
    st = parent.lstat()
    if st is None or not stat.S_ISDIR(st.st_mode):
        return []
    found: list[tuple[str, ...]] = []
    cap = ctx.limits.walk_entries
    with parent.dir.child(parent.leaf, parent.path) as top:
        for step in below(top, parent.path, bounds=bounds(ctx.limits), watch=ctx.watch):
            if step.kind == ENTRY:
                found.append(step.rel)
            elif step.kind == TOO_MANY:  # the names of that listing that fit the cap
                room = cap - len(found)
                found += [(*step.rel, entry.name) for entry in step.entries[:room]]
    return found


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


def keep_tree(
    recording: Recording, ctx: FsContext, directory: Directory, path: str, *, out: list[JSON]
) -> str | None:
    """Describe and keep everything below ``directory`` into ``out`` (parents before
    what they hold); a note instead when it cannot all be kept."""
    walk = below(
        directory,
        path,
        bounds=bounds(ctx.limits, entries=ctx.limits.walk_entries),
        watch=ctx.watch,
        with_stat=True,
    )
    for step in walk:
        if step.kind == TOO_DEEP:
            return f"not kept: deeper than {ctx.limits.tree_depth} levels"
        if step.kind == TOO_MANY:
            return f"not kept: more than {ctx.limits.walk_entries} entries"
        if step.kind != ENTRY or step.entry is None or step.entry.lstat is None:
            continue
        assert step.parent is not None
        note = _keep_entry(recording, ctx, step.parent, step.rel, step.entry, out=out)
        if note is not None:
            return note
    return None


def _keep_entry(
    recording: Recording,
    ctx: FsContext,
    directory: Directory,
    here: tuple[str, ...],
    entry: Entry,
    *,
    out: list[JSON],
) -> str | None:
    """Describe and keep one entry of ``directory``; a note when it cannot be kept."""
    assert entry.lstat is not None
    mode = stat.S_IMODE(entry.lstat.st_mode)
    if entry.kind == "directory":
        out.append({"rel": list(here), "kind": "directory", "mode": mode})
    elif entry.kind == "symlink":
        out.append({"rel": list(here), "kind": "symlink", "target": directory.readlink(entry.name)})
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

"""What the change journal keeps of whole trees and files: a file's state (its bytes
kept by hash), everything below a directory about to be removed, the names below a
directory (for the rules of ``--ask``), and what a tree holds whatever its times.

Every directory is opened exactly beneath the one before (no symlink followed), depth
first, within the walk's entry cap and depth.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import read_entries
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
                note = keep_tree(recording, ctx, below, path, rel=here, out=out)
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

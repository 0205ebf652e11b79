"""Making again what a journaled change removed: a file with its bytes and permission
bits, a symlink with its text, a directory tree whole; and what a tree put back holds.

Every entry is made beneath the allowed directory's descriptor, in a place that must be
free (else nothing is made), with the policy asked about every name first; what is made
is captured for the journal like any change (:mod:`sandboxfs.fs.journaling`).
"""

from __future__ import annotations

import os
from typing import Any

from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir
from sandboxfs.core.errors import AlreadyExists, SandboxError
from sandboxfs.fs import journaling, writes
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import read_entries
from sandboxfs.fs.files import cached_file_revision
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalplaces import Place
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.journaltrees import tree_content
from sandboxfs.fs.staging import StagedFile, write_all
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below

JSON = dict[str, Any]


def tree_content_at(ctx: FsContext, place: Place) -> str:
    """What the directory at ``place`` holds, as :func:`journaling.tree_content` tells
    it (``dir:too-big`` beyond the walk's entry cap)."""
    path = place.path
    tree: list[JSON] = []
    with ctx.resolver.parent(path) as parent, parent.dir.child(parent.leaf, path) as top:
        if not _describe_content(ctx, top, path, (), tree):
            return "dir:too-big"
    return tree_content(tree)


def _describe_content(
    ctx: FsContext, directory: Directory, path: str, rel: tuple[str, ...], out: list[JSON]
) -> bool:
    if len(rel) >= ctx.limits.tree_depth:
        return False
    for entry in read_entries(directory, with_stat=True):
        if len(out) >= ctx.limits.walk_entries or entry.lstat is None:
            return False
        here = (*rel, entry.name)
        if entry.kind == "directory":
            out.append({"rel": list(here), "kind": "directory"})
            with directory.child(entry.name, path) as below:
                if not _describe_content(ctx, below, path, here, out):
                    return False
        elif entry.kind == "symlink":
            out.append(
                {"rel": list(here), "kind": "symlink", "target": directory.readlink(entry.name)}
            )
        elif entry.kind == "file":
            fd = directory.open(entry.name, READ_FLAGS)
            try:
                revision = cached_file_revision(ctx, fd, os.fstat(fd), fresh=True)
            finally:
                os.close(fd)
            out.append({"rel": list(here), "kind": "file", "revision": revision})
        else:
            out.append({"rel": list(here), "kind": "other"})
    return True


def restore(ctx: FsContext, store: JournalStore, place: Place, state: JSON) -> None:
    """Make what ``state`` describes at ``place``, which must be free (else nothing is
    done and the error says something is there)."""
    path = place.path
    kind = state["kind"]
    with ctx.resolver.parent(path) as parent:
        try:
            if kind == "file":
                data = store.read_object(str(state["object"]))
                before = journaling.before_write(ctx, parent, None, None, data)
                mode = int(state.get("mode", 0o644))
                change, st = writes.stage(parent, _filler(data, mode), replace=False)
                journaling.wrote(ctx, before, st, change.size or 0)
            elif kind == "symlink":
                target = str(state["target"])
                parent.symlink(target)
                journaling.linked(ctx, parent, target)
            else:
                _restore_tree(ctx, store, parent, state)
        except FileExistsError:
            raise AlreadyExists(
                f"Cannot put {path} back: something is there now; nothing was changed"
            ) from None
        except AlreadyExists:
            raise AlreadyExists(
                f"Cannot put {path} back: something is there now; nothing was changed"
            ) from None


def _filler(data: bytes, mode: int) -> Any:
    def fill(fd: int) -> None:
        write_all(fd, data)
        os.fchmod(fd, mode & 0o1777)

    return fill


def _restore_tree(ctx: FsContext, store: JournalStore, parent: ParentDir, state: JSON) -> None:
    """A directory and everything below it as ``state`` describes it (parents first,
    as the journal lists them).  The policy is asked about every name first."""
    path = parent.path
    tree = state.get("tree") or []
    parent.dir.check_creatable((parent.leaf,))
    for entry in tree:
        parent.dir.check_creatable((parent.leaf, *(str(n) for n in entry["rel"])))
    parent.mkdir(0o700)
    with parent.dir.child(parent.leaf, path) as top:
        stack: list[tuple[tuple[str, ...], Directory]] = [((), top)]
        try:
            for entry in tree:
                rel = tuple(str(n) for n in entry["rel"])
                while len(stack) > 1 and stack[-1][0] != rel[:-1]:
                    stack.pop()[1].close()
                if stack[-1][0] != rel[:-1]:
                    raise JournalError(f"the journal's description of {path} is damaged")
                made = _make_entry(store, stack[-1][1], rel[-1], entry, path)
                if made is not None:
                    stack.append((rel, made))
        finally:
            for _, directory in stack[1:]:
                directory.close()
        os.fchmod(top.fd, int(state.get("mode", 0o755)) & 0o1777)
    revision = None
    try:
        with parent.dir.child(parent.leaf, path) as again:
            revision = tree_revision_below(ctx, again, path, ctx.limits.walk_entries)
    except (OSError, TooManyEntries):
        pass
    journaling.restored(ctx, parent, state, revision)


def _make_entry(
    store: JournalStore, directory: Directory, name: str, entry: JSON, path: str
) -> Directory | None:
    """Make one entry of a tree in ``directory``; a directory made is returned open."""
    kind = entry["kind"]
    mode = int(entry.get("mode", 0o644)) & 0o1777
    if kind == "directory":
        directory.mkdir(name, 0o700)
        made = directory.child(name, path)
        os.fchmod(made.fd, mode)
        return made
    if kind == "symlink":
        directory.symlink(str(entry["target"]), name)
    elif kind == "file":
        data = store.read_object(str(entry["object"]))
        staged = StagedFile(directory, name)
        try:
            write_all(staged.fd, data)
            os.fchmod(staged.fd, mode)
            staged.publish_new(name)
        finally:
            staged.close()
    else:
        raise SandboxError(f"EINVAL: a special file below {path} cannot be made again", "EINVAL")
    return None

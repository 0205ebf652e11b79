"""Changes to several files made as one: all of them, or none.

:func:`apply` takes the files of a patch (each: the bytes it was read with, the
bytes it will hold, or its removal or move) and makes them in three phases:

1. **Prepare**, changing nothing: every path resolved once beneath its allowed
   directory; the policy asked about every file (and every directory to make); no
   place named twice; every existing file locked (the OFD lock of conditional
   writes, taken in inode order) and checked to hold exactly the bytes it was read
   with, every new place checked free; every new content written to an unnamed
   temporary file in its directory and flushed.
2. **Commit**: with the change journal on, first an *intent* (the record of the
   patch, marked in progress, with everything it replaces kept, flushed to disk,
   and locked while this process works on it); then each change, one rename,
   link or unlink at a time.  If one fails, the ones made are taken back in
   reverse (old bytes and permissions put back, new files removed, moves moved
   back), and the error says so.
3. **Finish**: the intent becomes an ordinary journal record.

A crash (a kill, a power failure) between 2 and 3 leaves the intent in progress
and unlocked: :func:`sandboxfs.fs.recovery.roll_back` (run when the journal is
next opened) takes back whatever the patch had changed, so the files are all as
they were.  Without a journal nothing is written first, and a crash in the
middle of step 2 can leave part of a patch made.

Test seam: :data:`STEP` is called with the name of each point a crash may come
at (the tests kill the process there); it does nothing otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, final

from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint import READ_FLAGS, Directory, ParentDir, same_file
from sandboxfs.core.errors import AlreadyExists, Conflict, NotFound, SandboxError
from sandboxfs.fs import journaling
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.entries import require_regular
from sandboxfs.fs.metadata import carry_owner_and_mode, copy_xattrs
from sandboxfs.fs.patchintent import Intent, approve_patch
from sandboxfs.fs.revisions import exclusive_lock, holds_exactly
from sandboxfs.fs.staging import StagedFile, open_for_sync, sync_and_close, write_all

JSON = dict[str, Any]


def _no_step(name: str) -> None:
    """Nothing happens at a step (the tests replace :data:`STEP` to crash there)."""


#: Called at each point of a commit a crash may come at; the tests kill the process.
STEP: Callable[[str], None] = _no_step


@final
@dataclass(frozen=True, slots=True)
class FileChange:
    """One file of a patch.  ``expected``: the bytes it was read with (None: it must
    not exist); ``data``: what it will hold (None: removed, or moved unchanged);
    ``to``: where it moves."""

    path: str
    expected: bytes | None
    data: bytes | None
    to: str | None = None


@dataclass(slots=True)
class _Planned:
    change: FileChange
    src: ParentDir
    dst: ParentDir | None = None
    #: Directories to make before the file (names, below ``made_in``).
    mkdirs: tuple[str, ...] = ()
    old: os.stat_result | None = None
    lock_fd: int = -1
    staged: StagedFile | None = None
    temp: str | None = None
    done: list[str] = field(default_factory=list)

    @property
    def target(self) -> ParentDir:
        return self.dst if self.dst is not None else self.src

    @property
    def kind(self) -> str:
        change = self.change
        if change.to is not None:
            return "move" if change.data is None and self.staged is None else "move-data"
        if change.expected is None:
            return "create"
        return "delete" if change.data is None else "write"


def apply(ctx: FsContext, changes: list[FileChange]) -> int | None:
    """Make every change or none (see the module).  Returns the journal record's id
    (None without a journal).  Raises SandboxError, naming the file, with nothing
    changed, or saying what could not be taken back."""
    with contextlib.ExitStack() as stack:
        plan = [_resolve(ctx, change, stack) for change in changes]
        _distinct(ctx, plan)
        _lock_and_check(plan, stack)
        approve_patch(ctx, plan)
        for item in plan:
            _stage(item, stack)
        STEP("prepared")
        intent = Intent.begin(ctx, plan)
        stack.callback(intent.close)
        STEP("intent")
        for item in plan:
            _name_temp(item)
        made: list[_Planned] = []
        try:
            for number, item in enumerate(plan):
                STEP(f"change {number}")
                _commit(item)
                made.append(item)
            STEP("changed")
        except BaseException as exc:
            problems = _take_back(made)
            intent.end("rolled-back")
            if isinstance(exc, SandboxError | OSError):
                raise _failed(ctx, exc, item, problems) from None
            raise
        _flush_directories(plan)
        intent.end("done")
        STEP("finished")
        return intent.entry


def _failed(
    ctx: FsContext, exc: BaseException, item: _Planned, problems: list[str]
) -> SandboxError:
    path = item.change.path
    error = exc if isinstance(exc, SandboxError) else ctx.resolver.error(exc, path)  # type: ignore[arg-type]
    if problems:
        return SandboxError(
            f"{error.message} (the patch stopped at {path}; these changes could NOT be taken "
            f"back: {'; '.join(problems)})",
            error.code,
        )
    return type(error)(
        f"{error.message} (the patch stopped at {path}; every change it had made was taken "
        "back: nothing changed)",
        error.code,
    )


# -- prepare --------------------------------------------------------------------------------


def _resolve(ctx: FsContext, change: FileChange, stack: contextlib.ExitStack) -> _Planned:
    resolver = ctx.resolver
    try:
        if change.expected is not None and change.data is not None and change.to is None:
            src = resolver.follow_leaf(resolver.parent(change.path))  # written through a link
        elif change.expected is None:
            src, mkdirs = _free_place(ctx, change.path)
            stack.enter_context(src)
            src.dir.check_creatable((src.leaf, *mkdirs))
            return _Planned(change, src, mkdirs=mkdirs)
        else:
            src = resolver.parent(change.path)
        stack.enter_context(src)
        src.dir.check_creatable((src.leaf,))
        if change.to is None:
            return _Planned(change, src)
        dst, mkdirs = _free_place(ctx, change.to)
        stack.enter_context(dst)
        dst.dir.check_creatable((dst.leaf, *mkdirs))
        return _Planned(change, src, dst, mkdirs=mkdirs)
    except OSError as exc:
        raise resolver.error(exc, change.path) from None


def _free_place(ctx: FsContext, path: str) -> tuple[ParentDir, tuple[str, ...]]:
    """The parent of a place that will be made, and the directories missing above it
    (made with the patch, as ``git apply`` does)."""
    resolver = ctx.resolver
    location = resolver.locate(path)
    missing: list[str] = []
    while True:
        try:
            directory = resolver.directory_at(location.parent, path)
            break
        except NotFound:
            if len(location.rel) <= 1:
                raise
            missing.insert(0, location.parent.name)
            location = location.parent
    leaf_location = resolver.locate(path)
    if missing:
        return ParentDir(directory, missing[0], path), (*missing[1:], leaf_location.name)
    return ParentDir(directory, leaf_location.name, path), ()


def _distinct(ctx: FsContext, plan: list[_Planned]) -> None:
    seen: dict[tuple[str, tuple[str, ...]], str] = {}
    for item in plan:
        places = [item.src] + ([item.dst] if item.dst is not None else [])
        for parent in places:
            where = journaling.where(ctx, parent)
            key = (where.root, where.rel + _mkdirs_of(item, parent))
            if key in seen:
                raise SandboxError(
                    f"EINVAL: the patch changes one file twice: {seen[key]} and {parent.path}",
                    "EINVAL",
                )
            seen[key] = parent.path


def _mkdirs_of(item: _Planned, parent: ParentDir) -> tuple[str, ...]:
    return item.mkdirs if parent is item.target and item.mkdirs else ()


def _lock_and_check(plan: list[_Planned], stack: contextlib.ExitStack) -> None:
    """Lock every existing file (in inode order: two patches never wait on each other
    in a circle) and check it holds what it was read with; check new places free."""
    existing = []
    for item in plan:
        change = item.change
        target = item.target
        creates = change.expected is None or item.dst is not None
        if creates and not item.mkdirs and target.lstat() is not None:
            raise AlreadyExists(f"EEXIST: the patch would create {target.path}, which exists")
        if change.expected is not None:
            st = item.src.lstat()
            if st is None:
                raise NotFound(f"ENOENT: no such file: {change.path}")
            require_regular(st, change.path)
            item.old = st
            existing.append(item)
    for item in sorted(existing, key=lambda i: (i.old.st_dev, i.old.st_ino)):  # type: ignore[union-attr]
        fd = _open_to_lock(item.src)
        stack.callback(os.close, fd)
        item.lock_fd = fd
        stack.enter_context(exclusive_lock(fd, item.change.path))
        now = item.src.lstat()
        assert item.old is not None and item.change.expected is not None
        if now is None or not same_file(now, os.fstat(fd)) or not same_file(now, item.old):
            raise Conflict(f"{item.change.path} changed while the patch was prepared; try again")
        if not holds_exactly(fd, item.change.expected):
            raise Conflict(
                f"Revision mismatch for {item.change.path}: it changed after it was read; "
                "nothing was changed. Read it again and retry."
            )


def _open_to_lock(parent: ParentDir) -> int:
    try:
        return parent.open(os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    except PermissionError:
        return parent.open(READ_FLAGS)


def _stage(item: _Planned, stack: contextlib.ExitStack) -> None:
    """The new content, written out of sight in the directory it will appear in."""
    change = item.change
    if (
        item.dst is not None
        and change.data is None
        and (item.mkdirs or item.dst.dir.stat().st_dev != item.src.dir.stat().st_dev)
    ):
        # A rename cannot do it: the bytes are written there, then the source removed.
        item.change = change = dataclasses.replace(change, data=change.expected)
    if change.data is None or item.mkdirs:
        return  # nothing to write, or written once its directories are made
    staged = StagedFile(item.target.dir, item.target.leaf)
    stack.callback(staged.close)
    _fill(staged.fd, change.data, item)
    item.staged = staged


def _fill(fd: int, data: bytes, item: _Planned) -> None:
    if item.old is not None:  # the file's permissions, owner and attributes carry over
        carry_owner_and_mode(item.old, fd)
        copy_xattrs(item.lock_fd, fd)
    write_all(fd, data)
    os.fsync(fd)


def _name_temp(item: _Planned) -> None:
    """A new content needs a name to be renamed from: linked only now, after the intent
    (which names it, so a crash leaves nothing a restart does not remove)."""
    if item.staged is None or item.temp is None:
        return
    item.target.dir.link(item.staged.fd, item.temp)
    item.staged.name = item.temp  # removed again if the patch stops before it is used


# -- commit ---------------------------------------------------------------------------------


def _commit(item: _Planned) -> None:
    change = item.change
    target = item.target
    if item.mkdirs:
        with _make_directories(item) as directory:
            assert change.data is not None
            staged = StagedFile(directory, item.mkdirs[-1])
            try:
                _fill(staged.fd, change.data, item)
                staged.publish_new(item.mkdirs[-1])
            finally:
                staged.close()
        item.done.append("written")
    elif item.staged is not None:
        assert item.temp is not None
        flags = 0 if item.kind == "write" else syscalls.RENAME_NOREPLACE
        target.dir.rename(item.temp, target.dir, target.leaf, flags)
        item.staged.name = None
        item.done.append("written")
    elif change.to is not None:
        try:
            item.src.rename_to(target, syscalls.RENAME_NOREPLACE)
            item.done.append("moved")
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _copy_across(item)  # another filesystem, or a Landlock domain that forbids it
    if change.data is None or change.to is not None:
        item.src.unlink()
        item.done.append("removed")


def _flush_directories(plan: list[_Planned]) -> None:
    """Each directory the patch changed, flushed to disk once (a failure there is
    logged: the changes are made)."""
    seen: set[tuple[int, int]] = set()
    for item in plan:
        for parent in (item.src, item.dst):
            if parent is None:
                continue
            st = parent.dir.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            sync_and_close(open_for_sync(parent.dir))


def _copy_across(item: _Planned) -> None:
    """A move a rename cannot make: the bytes written at the destination (the source is
    removed after)."""
    target = item.target
    staged = StagedFile(target.dir, target.leaf)
    try:
        _fill(staged.fd, item.change.expected or b"", item)
        staged.publish_new(target.leaf)
    finally:
        staged.close()
    item.done.append("written")


@contextlib.contextmanager
def _make_directories(item: _Planned) -> Iterator[Directory]:
    """Make the missing directories above a new file; yields the innermost, open."""
    target = item.target
    target.mkdir()
    item.done.append("mkdir")
    directory = target.dir.subdirectory(target.leaf, target.path)
    try:
        for name in item.mkdirs[:-1]:
            directory.mkdir(name)
            item.done.append("mkdir")
            below = directory.subdirectory(name, target.path)
            directory.close()
            directory = below
        yield directory
    finally:
        directory.close()


def _take_back(made: list[_Planned]) -> list[str]:
    """Undo the changes made, newest first; what could not be undone, in words."""
    problems = []
    for item in reversed(made):
        try:
            _undo(item)
        except (OSError, SandboxError) as exc:
            problems.append(f"{item.change.path}: {getattr(exc, 'strerror', None) or exc}")
    return problems


def _undo(item: _Planned) -> None:
    change = item.change
    target = item.target
    if "removed" in item.done:  # the old bytes back where they were
        _restore(item.src, change.expected or b"", item, replace=False)
    if "moved" in item.done:
        target.rename_to(item.src, syscalls.RENAME_NOREPLACE)
    if "written" in item.done and not item.mkdirs:
        if item.kind == "write":
            _restore(target, change.expected or b"", item, replace=True)
        else:
            target.unlink()
    if item.mkdirs:
        _remove_made(item, written="written" in item.done, made=item.done.count("mkdir"))


def _restore(parent: ParentDir, data: bytes, item: _Planned, *, replace: bool) -> None:
    staged = StagedFile(parent.dir, parent.leaf)
    try:
        _fill(staged.fd, data, item)
        if replace:
            staged.publish_over(parent.leaf)
        else:
            staged.publish_new(parent.leaf)
    finally:
        staged.close()


def _remove_made(item: _Planned, *, written: bool, made: int) -> None:
    """Remove a new file and the ``made`` directories made for it, innermost first."""
    target = item.target
    names = (target.leaf, *item.mkdirs)
    dirs = [target.dir]
    try:
        for name in names[: made - 1] if made else ():
            dirs.append(dirs[-1].subdirectory(name, target.path))
        if written:
            dirs.append(dirs[-1].subdirectory(names[made - 1], target.path))
            dirs[-1].unlink(names[-1])
            dirs.pop().close()
        for depth in range(made - 1, -1, -1):
            dirs[depth].rmdir(names[depth])
    finally:
        for directory in dirs[1:]:
            directory.close()

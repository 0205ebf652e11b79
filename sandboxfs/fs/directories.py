"""Creating directories: each missing one beneath the descriptor of the one before.

Guarantee: ``create_directory`` creates the missing components one at a time, each
with ``mkdirat`` in the descriptor of its parent and then opened exactly (never
through a symlink) to go on; an existing path is reported, never changed; a
creation that stops part-way says how many directories it made.
"""

from __future__ import annotations

import errno

from sandboxfs.core.chokepoint import Directory, Location
from sandboxfs.core.errors import AlreadyExists, Conflict, NotADirectory, NotFound, SandboxError
from sandboxfs.fs import journaling
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.files import revision_of_handle
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.revisions import ABSENT, check
from sandboxfs.fs.trees import TooManyEntries, tree_revision_below


def make_dirs(ctx: FsContext, path: str, *, expected: str | None = None) -> Change:
    """Create ``path`` and any missing parents, each one beneath the descriptor of
    the one before (never through a symlink).  ``count`` says how many were
    created (0: it existed).  With ``expected="absent"`` it must not exist yet."""
    loc = ctx.resolver.locate(path)
    existing = _existing_directory(ctx, loc, path, expected)
    if existing is not None:
        return existing
    if expected not in (None, ABSENT):
        check(expected, ABSENT, path)
    depth = len(loc.rel) - 1
    while True:  # the deepest ancestor that exists
        try:
            directory = ctx.resolver.directory_at(Location(loc.root, loc.rel[:depth]), path)
            break
        except NotFound:
            if depth == 0:
                raise
            depth -= 1
    missing = loc.rel[depth:]
    try:
        directory.check_creatable(missing)
        journaling.before_mkdirs(ctx, directory, missing, path)
    except OSError as exc:
        directory.close()
        raise ctx.resolver.error(exc, path) from None
    except BaseException:
        directory.close()
        raise
    created = [0]
    try:
        with _create_below(
            ctx, directory, missing, path, created, exclusive=expected == ABSENT
        ) as last:
            return Change(revision=_tree_revision_of(ctx, last, path), count=created[0])
    except (OSError, SandboxError) as exc:
        if not created[0]:
            raise
        failure = exc if isinstance(exc, SandboxError) else ctx.resolver.error(exc, path)
        message = (
            f"{failure.message} ({created[0]} of the {len(missing)} missing directories "
            "were created before this failure)"
        )
        journaling.stopped(ctx, message)
        raise type(failure)(message, failure.code) from None


def _existing_directory(
    ctx: FsContext, loc: Location, path: str, expected: str | None
) -> Change | None:
    """The answer for a directory that exists already (None: nothing is there)."""
    try:
        handle = ctx.resolver.resolve_location(loc, path)
    except NotFound:
        return None
    with handle:
        if not handle.is_dir:
            raise AlreadyExists(f"EEXIST: a file that is not a directory already exists: {path}")
        if expected is not None:
            check(expected, revision_of_handle(ctx, handle, fresh=True) or "unknown", path)
        return Change(revision=revision_of_handle(ctx, handle), count=0)


def _create_below(
    ctx: FsContext,
    directory: Directory,
    missing: tuple[str, ...],
    path: str,
    created: list[int],
    *,
    exclusive: bool,
) -> Directory:
    """Create ``missing`` one below the other, starting in ``directory`` (consumed:
    closed, whatever happens); returns the last one, open.  ``created`` counts what
    was made."""
    try:
        for depth, name in enumerate(missing):
            try:
                directory.mkdir(name)
                created[0] += 1
                journaling.made_directory(ctx, directory, name, path)
            except FileExistsError:
                if exclusive and depth == len(missing) - 1:
                    raise Conflict(
                        f"Revision mismatch for {path}: it was created meanwhile"
                    ) from None
            try:
                below = directory.subdirectory(name, path)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise NotADirectory(f"ENOTDIR: not a directory: {path}") from None
                raise
            directory.close()
            directory = below
    except BaseException:
        directory.close()
        raise
    return directory


def _tree_revision_of(ctx: FsContext, directory: Directory, path: str) -> str | None:
    """The revision of a directory just created (None when it cannot be told)."""
    try:
        fd = directory.for_sync()
    except OSError:
        return None
    readable = Directory(fd, directory.location, path, directory.confinement, readable=True)
    with readable:
        try:
            return tree_revision_below(ctx, readable, path, ctx.limits.revision_entries)
        except (OSError, TooManyEntries):
            return None

"""The façade the tools call: every filesystem operation sandboxfs performs.

Synchronous, thread-safe, no MCP types.  Each operation takes request paths as
the client gave them (positional-only), resolves each of them once, and raises
:class:`~sandboxfs.core.errors.SandboxError` with messages naming only those
paths: an :class:`OSError` that reaches this layer is converted here, by the
one converter, naming the paths of the call; a name the kernel cannot be given
(a lone surrogate that stands for no byte, however the client spelled it) is
refused as an invalid path.

Every public operation is declared with :func:`operation`, which says which of
its parameters are client paths and whether each follows a final symlink:
``FOLLOW`` (what the path leads to, inside only: an escape is refused) or
``ENTRY`` (the entry itself: a symlink is acted on as a link, never followed).
The escape tests are generated from these declarations.

Guarantees (see the modules for how): reads open only regular files; mutations
act on one leaf inside an opened parent; writes replace atomically; appends
happen in place only on a file with a single name; no descriptor outlives the
call that opened it; a mutation either happened (and its result says so,
with any failure after the change as a warning) or raised and left no trace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, final

from sandboxfs.core import InvalidPath, Resolver, Statx, Watch
from sandboxfs.fs import describe as describing
from sandboxfs.fs import directories, files, listings, moves, patches, walks, writes
from sandboxfs.fs.describe import Description
from sandboxfs.fs.files import OpenFile
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.listings import Listing
from sandboxfs.fs.operation import Change, FsContext
from sandboxfs.fs.patchplan import FileChange
from sandboxfs.fs.revisions import RevisionCache, SameBytes
from sandboxfs.fs.staging import CopyProgress
from sandboxfs.fs.walks import TreeWalk
from sandboxfs.fs.writes import Rewriter

if TYPE_CHECKING:
    from sandboxfs.fs.approval import Gate
    from sandboxfs.fs.recording import Recording

PathRole = Literal["follow", "entry"]
#: The path is followed to what it leads to (inside only).
FOLLOW: Final[PathRole] = "follow"
#: The path names an entry acted on itself (a symlink as a link).
ENTRY: Final[PathRole] = "entry"

F = TypeVar("F", bound=Callable[..., Any])


def operation(*roles: PathRole) -> Callable[[F], F]:
    """Declare a public operation whose first positional parameters are client
    paths with these roles, and put it behind the error gate."""

    def declare(method: F) -> F:
        count = len(roles)

        @functools.wraps(method)
        def gated(self: Sandbox, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                named = " -> ".join(str(path) for path in args[:count])
                raise self.resolver.error(exc, named) from None
            except UnicodeEncodeError:
                # A name the kernel cannot be given (a lone surrogate that stands for
                # no byte), however it was spelled: refused, never an internal error.
                raise InvalidPath(
                    "Path is not valid Unicode (it contains a lone surrogate)"
                ) from None

        gated.path_roles = roles  # type: ignore[attr-defined]
        return gated  # type: ignore[return-value]

    return declare


@final
class Sandbox:
    """Filesystem operations confined to the allowed directories of a Resolver."""

    __slots__ = ("ctx",)

    #: Public methods that take no client path (not operations in the escape sense).
    #: (apply_changes takes a list of files: tests/test_escapes.py attacks each of them.)
    NOT_OPERATIONS: Final = (
        "with_watch",
        "file_revision",
        "recording",
        "journal",
        "approval",
        "gated",
        "apply_changes",
    )

    def __init__(
        self,
        resolver: Resolver,
        limits: Limits | None = None,
        revisions: RevisionCache | None = None,
        journal: Recording | None = None,
        approval: Gate | None = None,
    ) -> None:
        self.ctx = FsContext(
            resolver, limits or Limits(), revisions or RevisionCache(), journal, approval
        )

    @property
    def resolver(self) -> Resolver:
        return self.ctx.resolver

    @property
    def limits(self) -> Limits:
        return self.ctx.limits

    @property
    def revisions(self) -> RevisionCache:
        return self.ctx.revisions

    @property
    def journal(self) -> Recording | None:
        return self.ctx.journal

    @property
    def approval(self) -> Gate | None:
        return self.ctx.approval

    def with_watch(self, watch: Watch) -> Sandbox:
        """A view of this sandbox whose blocking steps report to ``watch``."""
        resolver = self.resolver.with_watch(watch)
        return Sandbox(resolver, self.limits, self.revisions, self.journal, self.approval)

    def recording(self, journal: Recording | None) -> Sandbox:
        """A view of this sandbox whose changes are captured in ``journal`` (a call's
        record for the change journal; see :mod:`sandboxfs.fs.journaling`)."""
        return Sandbox(self.resolver, self.limits, self.revisions, journal, self.approval)

    def gated(self, approval: Gate | None) -> Sandbox:
        """A view of this sandbox whose changes to chosen paths need ``approval``
        (``--ask``; see :mod:`sandboxfs.fs.approval`)."""
        return Sandbox(self.resolver, self.limits, self.revisions, self.journal, approval)

    # -- reading ---------------------------------------------------------------

    @operation(FOLLOW)
    def open_file(self, path: str, /) -> OpenFile:
        """The regular file ``path`` opened for reading (symlinks inside followed);
        special files are refused before they are ever opened for reading."""
        return files.open_file(self.ctx, path)

    def file_revision(self, f: OpenFile) -> str | None:
        """The revision of an open file (from the cache when its ``fstat`` is
        unchanged); None if it is larger than the edit limit.  An OSError is the
        client-safe error naming the file (as it was opened)."""
        return files.open_file_revision(self.ctx, f)

    @operation(FOLLOW)
    def stat(self, path: str, /, *, follow: bool = True) -> Statx:
        """``statx`` of ``path``; with ``follow=False`` a final symlink is described itself."""
        with self.resolver.resolve(path, follow=follow) as handle:
            return handle.statx()

    @operation(ENTRY)
    def describe(self, path: str, /, *, tree_revision: bool = False) -> Description:
        """What get_file_info reports of ``path``, from one resolution of it (a
        directory's revision only with ``tree_revision``)."""
        return describing.describe(self.ctx, path, tree_revision=tree_revision)

    @operation(FOLLOW)
    def list_dir(
        self, path: str, /, *, sizes: bool = False, tree_revision: bool = False
    ) -> Listing:
        """The entries of the directory ``path`` in byte order, with ``sizes`` each
        entry's size, and with ``tree_revision`` its revision, from one reading of it."""
        return listings.list_dir(self.ctx, path, sizes=sizes, tree_revision=tree_revision)

    @operation(FOLLOW)
    def list_names(self, path: str, /) -> tuple[list[str], str]:
        """The names of the directory ``path``'s entries in byte order and their kind
        letters (``f``, ``d``, ``l``, ``o``), from one reading of it."""
        return listings.list_names(self.ctx, path)

    @operation(FOLLOW)
    def revision(self, path: str, /, *, fresh: bool = False) -> str | None:
        """The revision of what ``path`` names (symlinks inside followed): a file's
        bytes, a directory's tree, ``absent`` if nothing is there; None for special
        files, files larger than the edit limit, and (unless ``fresh``) trees larger
        than the revision budget."""
        return files.revision(self.ctx, path, fresh=fresh)

    @operation(FOLLOW)
    def walk(self, path: str, /) -> TreeWalk:
        """A walk below the directory ``path``."""
        return walks.walk(self.ctx, path)

    @operation(FOLLOW)
    def search_target(self, path: str, /) -> TreeWalk | OpenFile:
        """What grep_files searches: the tree below a directory, or one regular file."""
        return walks.search_target(self.ctx, path)

    # -- creating and writing ----------------------------------------------------

    @operation(ENTRY)
    def create_file(self, path: str, data: bytes, /) -> Change:
        """Create ``path`` with ``data``; fails if anything exists there already."""
        return writes.create_file(self.ctx, path, data)

    @operation(FOLLOW)
    def replace_file(
        self,
        path: str,
        data: bytes,
        /,
        *,
        expected: str | SameBytes | None = None,
        revision: Callable[[], str] | None = None,
    ) -> Change:
        """Write ``data`` to ``path`` atomically (see :func:`writes.replace_file`)."""
        return writes.replace_file(self.ctx, path, data, expected=expected, revision=revision)

    @operation(FOLLOW)
    def rewrite(self, path: str, edit: Rewriter, /) -> Change:
        """Read the file ``path``, compute its new bytes with ``edit`` and write them in
        its place, from one resolution of ``path`` (see :func:`writes.rewrite`)."""
        return writes.rewrite(self.ctx, path, edit)

    @operation(FOLLOW)
    def append_file(self, path: str, data: bytes, /, *, expected: str | None = None) -> Change:
        """Append ``data`` to ``path`` in place (see :func:`writes.append_file`)."""
        return writes.append_file(self.ctx, path, data, expected=expected)

    @operation(FOLLOW)
    def make_dirs(self, path: str, /, *, expected: str | None = None) -> Change:
        """Create ``path`` and any missing parents (see :func:`directories.make_dirs`)."""
        return directories.make_dirs(self.ctx, path, expected=expected)

    def apply_changes(self, changes: list[FileChange]) -> int | None:
        """Make the changes to several files all, or none (see :mod:`sandboxfs.fs.patches`);
        the journal record's id, with a journal."""
        try:
            return patches.apply(self.ctx, changes)
        except OSError as exc:
            raise self.resolver.error(exc, changes[0].path if changes else ".") from None

    # -- moving, copying, removing -----------------------------------------------

    @operation(ENTRY, ENTRY)
    def rename(
        self,
        source: str,
        destination: str,
        /,
        *,
        expected: str | None = None,
        expected_destination: str | None = None,
    ) -> Change:
        """Move ``source`` to ``destination``, never replacing anything there."""
        return moves.rename(
            self.ctx,
            source,
            destination,
            expected=expected,
            expected_destination=expected_destination,
        )

    @operation(FOLLOW, ENTRY)
    def copy_file(
        self,
        source: str,
        destination: str,
        /,
        *,
        expected: str | None = None,
        expected_destination: str | None = None,
        progress: CopyProgress | None = None,
    ) -> Change:
        """Copy the regular file ``source`` to a new ``destination``."""
        return moves.copy_file(
            self.ctx,
            source,
            destination,
            expected=expected,
            expected_destination=expected_destination,
            progress=progress,
        )

    @operation(ENTRY)
    def remove(
        self, path: str, /, *, recursive: bool = False, expected: str | None = None
    ) -> Change:
        """Remove a file, symlink (as a link) or empty directory; with ``recursive``
        a directory and everything below it."""
        return moves.remove(self.ctx, path, recursive=recursive, expected=expected)

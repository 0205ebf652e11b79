"""Client paths to handles beneath the allowed directories, resolved in the kernel.

Guarantee: every :class:`~sandboxfs.core.chokepoint.Handle`,
:class:`~sandboxfs.core.chokepoint.Directory` and
:class:`~sandboxfs.core.chokepoint.ParentDir` this module returns was opened by
``openat2`` through the chokepoint, relative to an allowed directory's
descriptor, so it names something beneath that directory at the moment of the
call, whatever other processes do to the tree.  No path string is checked and
then used.

Resolution of a request path:

1. Lexical: refuse empty/NUL paths; make it absolute (relative paths resolve
   against the first allowed directory); collapse ``.``, ``..``, ``//``; pick
   the allowed directory it lies in by prefix with a separator boundary.
2. Fast path: one ``openat2`` beneath that directory.  The kernel follows
   relative symlinks that stay inside and refuses everything else.
3. On ``EXDEV``/``ELOOP`` only: walk component by component (each step again an
   ``openat2`` beneath a root descriptor, never following), reading each symlink
   ourselves.  A relative target is resolved as the kernel would (``..`` is
   physical) and may not climb above its allowed directory.  An absolute
   target must lie lexically inside an allowed directory; resolution then
   continues beneath that directory's descriptor.  Links on procfs (magic
   links) are refused; at most ``symlink_hops`` links are followed.

Following a symlink that was already opened (:meth:`Resolver.resolve_link`,
:meth:`Resolver.follow_leaf`) reads its text once, from its own handle, and
resolves that text relative to the directory that holds it: the text shown,
the "stays inside" decision and the object described all come from that one
reading.

Every method raises :class:`~sandboxfs.core.errors.SandboxError` with a message
naming only the client's path.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field, replace
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import AllowList
from sandboxfs.core.chokepoint import (
    LIST_FLAGS,
    Confinement,
    Directory,
    Handle,
    Location,
    ParentDir,
    same_file,
)
from sandboxfs.core.errors import (
    AccessDenied,
    Conflict,
    LimitExceeded,
    NotADirectory,
    NotFound,
    SandboxError,
    outside,
)
from sandboxfs.core.names import unquote_path
from sandboxfs.core.pathnames import (
    absolute_request,
    check_leaf,
    check_request_path,
    normalize_absolute,
    split_components,
)
from sandboxfs.core.watch import NO_WATCH, Watch

#: The default bound on symlinks followed while resolving one path.
DEFAULT_SYMLINK_HOPS: Final = 40
#: How often a resolution is tried again when the tree changes under it.
_CHANGED_ATTEMPTS: Final = 8


@final
@dataclass(frozen=True)
class Resolver:
    """Maps request paths to handles beneath the allowed directories.

    Immutable and thread-safe; :meth:`with_watch` gives a per-call view.
    """

    allow: AllowList
    symlink_hops: int = DEFAULT_SYMLINK_HOPS
    confinement: Confinement = field(default_factory=Confinement)
    watch: Watch = NO_WATCH
    home: str | None = field(default_factory=lambda: os.environ.get("HOME"))

    def with_watch(self, watch: Watch) -> Resolver:
        return replace(self, watch=watch)

    def error(self, exc: OSError, path: str) -> SandboxError:
        """The client-safe error for an OSError met while working on ``path``."""
        return self.confinement.error(exc, path)

    # -- lexical ---------------------------------------------------------------

    def locate(self, path: str) -> Location:
        """The allowed directory ``path`` names lexically, and the components below it.

        Raises AccessDenied when the path lies outside every allowed directory.
        """
        check_request_path(path)
        if self.allow.empty:
            raise AccessDenied("Access denied - no allowed directories")
        # A name in the quoted form the tools show (core.names) stands for the exact name.
        absolute = absolute_request(unquote_path(path), self.allow.base, self.home)
        hit = None if absolute is None else self.allow.map(absolute)
        if hit is None:
            raise outside(path)
        return Location(*hit)

    # -- kernel ----------------------------------------------------------------

    def _open(self, loc: Location, flags: int, path: str, *, follow: bool) -> tuple[int, Location]:
        """Open ``loc``: one ``openat2`` if the kernel can resolve it alone, else the
        component walk.  Returns the descriptor and a location that reopens it."""
        if not follow:
            flags |= os.O_NOFOLLOW
        with self.watch.step(path):
            try:
                return loc.open(self.confinement, flags, exact=False), loc
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ELOOP):
                    raise self.error(exc, path) from None
            canonical = self._walk(loc, path, follow_final=follow)
            try:
                return canonical.open(self.confinement, flags, exact=False), canonical
            except OSError as exc:
                raise self.error(exc, path) from None

    def resolve(self, path: str, *, follow: bool = True) -> Handle:
        """An ``O_PATH`` handle of what ``path`` names.  With ``follow=False`` a final
        symlink is the handle's object itself."""
        return self.resolve_location(self.locate(path), path, follow=follow)

    def resolve_location(
        self, loc: Location, path: str, *, follow: bool = True, directory: bool = False
    ) -> Handle:
        """An ``O_PATH`` handle of ``loc`` (``path`` names it in errors); with
        ``directory``, only a directory (else NotADirectory)."""
        flags = os.O_PATH | (os.O_DIRECTORY if directory else 0)
        fd, opened = self._open(loc, flags, path, follow=follow)
        return Handle(fd, opened, path, follow=follow, confinement=self.confinement)

    def directory_at(self, loc: Location, path: str) -> Directory:
        """An ``O_PATH`` descriptor of the directory at ``loc`` (symlinks inside followed)."""
        fd, opened = self._open(loc, os.O_PATH | os.O_DIRECTORY, path, follow=True)
        return Directory(fd, opened, path, self.confinement)

    def open_directory(self, path: str) -> Directory:
        """The directory ``path`` names, opened for listing in one resolution (a
        non-directory is refused by the kernel before it is opened: ENOTDIR)."""
        fd, opened = self._open(self.locate(path), LIST_FLAGS, path, follow=True)
        return Directory(fd, opened, path, self.confinement, readable=True)

    def open_exact(self, loc: Location, flags: int, path: str) -> int:
        """``loc`` opened exactly as named: no symlink followed anywhere in it (a walk
        reopening what it listed).  Raises SandboxError."""
        with self.watch.step(path):
            try:
                return loc.open(self.confinement, flags, exact=True)
            except OSError as exc:
                raise self.error(exc, path) from None

    def parent(self, path: str) -> ParentDir:
        """The directory that holds ``path``'s final entry, and that entry's name:
        mutations act on this one name.  The leaf itself is not followed.  An
        allowed directory itself has no parent here: that raises AccessDenied."""
        return self.parent_at(self.locate(path), path)

    def parent_at(self, loc: Location, path: str) -> ParentDir:
        if not loc.rel:
            raise AccessDenied(
                f"Access denied - an allowed directory itself cannot be changed: {path}"
            )
        check_leaf(loc.name, path)
        return ParentDir(self.directory_at(loc.parent, path), loc.name, path)

    # -- following a symlink already opened ---------------------------------------

    def resolve_link(self, base: Location, text: str, path: str) -> Handle:
        """What the symlink text ``text``, held by the directory at the canonical
        location ``base``, leads to, inside the allowed directories (further links
        followed).  The caller reads the text once and passes it: what it shows,
        the "stays inside" decision and the object returned all come from that
        one reading.  Raises AccessDenied if it leads outside, NotFound if it
        dangles inside, NotADirectory if the text can only name a directory (it
        ends in ``/`` or ``/.``) and what it names is not one, as the kernel would."""
        target = self._target(base, text, path)
        return self.resolve_location(target, path, follow=True, directory=_names_a_directory(text))

    def follow_leaf(self, parent: ParentDir) -> ParentDir:
        """``parent`` itself if its leaf is not a symlink (or is missing); else the
        parent directory and leaf of what the symlink chain leads to, each link's
        text read once and resolved relative to the directory holding it.  The
        ParentDir given is consumed (closed when replaced)."""
        path = parent.path
        hops = 0
        try:
            while True:
                try:
                    st = parent.lstat()
                    if st is None or not stat.S_ISLNK(st.st_mode):
                        return parent
                    text = parent.readlink()
                except OSError as exc:
                    if exc.errno == errno.EINVAL:  # no longer a symlink: look again
                        continue
                    raise self.error(exc, path) from None
                hops += 1
                if hops > self.symlink_hops:
                    raise LimitExceeded(f"ELOOP: too many levels of symbolic links: {path}")
                base = self.canonical_directory(parent.dir, path)
                if _names_a_directory(text):  # nothing to write there, as the kernel says
                    with self.directory_at(self._target(base, text, path), path):
                        raise self.error(OSError(errno.EISDIR, "Is a directory"), path)
                target = self.parent_at(self._target(base, text, path), path)
                parent.close()
                parent = target
        except BaseException:
            parent.close()
            raise

    def _target(self, base: Location, text: str, path: str) -> Location:
        """Where the symlink text ``text``, held by the directory at ``base``
        (canonical), points: beneath an allowed directory, or AccessDenied."""
        if not text:
            raise NotFound(f"ENOENT: no such file or directory: {path}")
        if text.startswith("/"):
            hit = self.allow.map(normalize_absolute(text))
            if hit is None:
                raise outside(path)
            return Location(*hit)
        rel: list[str] = list(base.rel)
        canonical = len(rel)  # how many leading components are known symlink-free
        for name in split_components(text):
            if name != ".." or len(rel) > canonical:
                # A ".." after a component of the text itself stays physical: the
                # kernel (or the walk) resolves it after following that component.
                rel.append(name)
            elif rel:
                rel.pop()
                canonical -= 1
            else:
                raise outside(path)
        return Location(base.root, tuple(rel))

    def canonical_directory(self, directory: Directory, path: str) -> Location:
        """A symlink-free location that names ``directory`` now (checked by identity)."""
        try:
            expected = directory.stat()
        except OSError as exc:
            raise self.error(exc, path) from None
        return self._verified(directory.location, expected, path, follow=True)

    def canonical_handle(self, handle: Handle) -> Location:
        """A symlink-free location that names ``handle``'s object now (checked by
        identity); for a symlink handle, its ``parent`` is the directory holding it."""
        return self._verified(handle.location, handle.stat, handle.path, follow=handle.follow)

    def _verified(
        self, loc: Location, expected: os.stat_result, path: str, *, follow: bool
    ) -> Location:
        flags = os.O_PATH | (0 if follow else os.O_NOFOLLOW)
        for _ in range(_CHANGED_ATTEMPTS):
            candidate = loc
            with self.watch.step(path):
                try:
                    fd = candidate.open(self.confinement, flags, exact=True)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.EXDEV):
                        raise self.error(exc, path) from None
                    candidate = self._walk(loc, path, follow_final=follow)
                    try:
                        fd = candidate.open(self.confinement, flags, exact=True)
                    except OSError as again:
                        if again.errno in (errno.ELOOP, errno.ENOENT):
                            continue  # changed between the walk and the open
                        raise self.error(again, path) from None
            try:
                found = os.fstat(fd)
            finally:
                os.close(fd)
            if same_file(found, expected):
                return candidate
        raise Conflict(f"{path} changed while it was being resolved; try again")

    # -- the component walk -----------------------------------------------------

    def canonical(self, path: str, *, follow: bool = True) -> Location:
        """The symlink-free location ``path`` resolves to (its final component may
        not exist yet).  With ``follow=False`` a final symlink is kept as is."""
        loc = self.locate(path)
        with self.watch.step(path):
            return self._walk(loc, path, follow_final=follow)

    def _walk(self, loc: Location, path: str, *, follow_final: bool) -> Location:
        """Resolve ``loc`` one component at a time, following symlinks ourselves.

        Returns a symlink-free location (the final component may be missing,
        or, with ``follow_final=False``, a symlink).  Every step is an
        ``openat2`` beneath a root descriptor; nothing is trusted across steps.
        """
        root = loc.root
        done: list[str] = []
        pending = list(reversed(loc.rel))
        hops = 0
        while pending:
            name = pending.pop()
            if name == "..":  # only from a relative link's target: physical, like openat2
                if not done:
                    raise outside(path)
                done.pop()
                continue
            here = Location(root, (*done, name))
            try:
                target = self._link_target(
                    here, path, follow=bool(pending) or follow_final, more=bool(pending)
                )
            except OSError as exc:
                if exc.errno == errno.ENOENT and not pending:
                    return here
                raise self.error(exc, path) from None
            if target is None:
                done.append(name)
                continue
            hops += 1
            if hops > self.symlink_hops:
                raise LimitExceeded(f"ELOOP: too many levels of symbolic links: {path}")
            if not target:
                raise NotFound(f"ENOENT: no such file or directory: {path}")
            if target.startswith("/"):
                # An absolute link is re-anchored only if its target lies lexically
                # inside an allowed directory; the walk continues beneath that root.
                hit = self.allow.map(normalize_absolute(target))
                if hit is None:
                    raise outside(path)
                root, below = hit
                done = []
                pending.extend(reversed(below))
            else:
                pending.extend(reversed(split_components(target)))
        return Location(root, tuple(done))

    def _link_target(self, here: Location, path: str, *, follow: bool, more: bool) -> str | None:
        """The target of ``here`` if it is a symlink to follow, None for a component to
        keep.  Refuses magic links, and a non-directory with ``more`` components after it."""
        link = Handle(
            here.open(self.confinement, os.O_PATH | os.O_NOFOLLOW, exact=False),
            here,
            path,
            follow=False,
            confinement=self.confinement,
        )
        with link:
            if link.is_symlink and follow:
                if link.fstatfs_type() == syscalls.PROC_SUPER_MAGIC:
                    raise AccessDenied(f"Access denied - magic link refused: {path}")
                return link.readlink()
            if more and not link.is_dir:
                raise NotADirectory(f"ENOTDIR: not a directory: {path}")
            return None


def _names_a_directory(text: str) -> bool:
    """Whether symlink text can name only a directory: it ends in ``/``, or its last
    component is ``.`` or ``..`` (which the lexical form of the text drops)."""
    return text.endswith("/") or text.rsplit("/", 1)[-1] in (".", "..")

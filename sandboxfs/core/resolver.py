"""Path resolution beneath allowed directories, in the kernel.

Guarantee: every descriptor this module returns was opened by ``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` relative to an allowed directory's
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
   ``openat2`` beneath a root fd, never following), reading each symlink
   ourselves.  A relative target is resolved as the kernel would (``..`` is
   physical) and may not climb above its allowed directory.  An absolute
   target must lie lexically inside an allowed directory; resolution then
   continues beneath that directory's descriptor.  Links on procfs (magic
   links) are refused; at most ``symlink_hops`` links are followed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import (
    AccessDenied,
    InvalidPath,
    LimitExceeded,
    NotADirectory,
    NotFound,
    SandboxError,
    from_oserror,
    outside,
)
from sandboxfs.core.pathnames import (
    absolute_request,
    check_leaf,
    check_request_path,
    join,
    normalize_absolute,
    split_components,
)
from sandboxfs.core.watch import NO_WATCH, Watch

#: openat2 answers EAGAIN when a rename races with ``..`` resolution; retry this often.
EAGAIN_RETRIES: Final = 64
#: The default bound on symlinks followed while resolving one path.
DEFAULT_SYMLINK_HOPS: Final = 40


@final
@dataclass(frozen=True, slots=True)
class Location:
    """A place beneath an allowed directory: its root and the components below it."""

    root: Root
    rel: tuple[str, ...]

    def child(self, name: str) -> Location:
        return Location(self.root, (*self.rel, name))

    @property
    def parent(self) -> Location:
        return Location(self.root, self.rel[:-1])

    @property
    def name(self) -> str:
        return self.rel[-1]

    @property
    def relpath(self) -> str:
        return join(self.rel)


@contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """Close ``fd`` when the block ends, however it ends."""
    try:
        yield fd
    finally:
        os.close(fd)


@final
@dataclass(frozen=True)
class Resolver:
    """Maps request paths to descriptors beneath the allowed directories.

    Immutable and thread-safe; :meth:`with_watch` gives a per-call view.
    """

    allow: AllowList
    symlink_hops: int = DEFAULT_SYMLINK_HOPS
    #: Refuse paths that cross a mount point inside an allowed directory.
    no_xdev: bool = False
    watch: Watch = NO_WATCH
    home: str | None = field(default_factory=lambda: os.environ.get("HOME"))

    def with_watch(self, watch: Watch) -> Resolver:
        return replace(self, watch=watch)

    @property
    def resolve_flags(self) -> int:
        flags = syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_MAGICLINKS
        return flags | syscalls.RESOLVE_NO_XDEV if self.no_xdev else flags

    # -- lexical ---------------------------------------------------------------

    def locate(self, path: str) -> Location:
        """The allowed directory ``path`` names lexically, and the components below it.

        Raises AccessDenied when the path lies outside every allowed directory.
        """
        check_request_path(path)
        if self.allow.empty:
            raise AccessDenied("Access denied - no allowed directories")
        absolute = absolute_request(path, self.allow.base, self.home)
        hit = None if absolute is None else self.allow.map(absolute)
        if hit is None:
            raise outside(path)
        return Location(*hit)

    # -- kernel ----------------------------------------------------------------

    def openat(self, loc: Location, flags: int, *, mode: int = 0) -> int:
        """``openat2`` of ``loc`` beneath its root, retrying on EAGAIN.  Raises OSError."""
        for _ in range(EAGAIN_RETRIES):
            try:
                return syscalls.openat2(
                    loc.root.fd, loc.relpath, flags, resolve=self.resolve_flags, mode=mode
                )
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
        raise OSError(errno.EAGAIN, "resolution kept racing with renames")

    def open(self, path: str, flags: int, *, follow: bool = True) -> tuple[int, Location]:
        """Open ``path`` with ``flags`` beneath its allowed directory.

        Returns the descriptor and a location that reopens the same object.
        With ``follow=False`` a final symlink is not followed (pass ``O_PATH`` to
        get the link itself).  Raises SandboxError with a client-safe message.
        """
        return self.open_location(self.locate(path), flags, path, follow=follow)

    def open_location(
        self, loc: Location, flags: int, path: str, *, follow: bool = True
    ) -> tuple[int, Location]:
        """Open ``loc``: one ``openat2`` if the kernel can resolve it alone, else the
        component walk.  ``path`` (as the client gave it) names it in errors."""
        if not follow:
            flags |= os.O_NOFOLLOW
        with self.watch.step(path):
            try:
                return self.openat(loc, flags), loc
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ELOOP):
                    raise self.error(exc, path) from None
            canonical = self.walk(loc, path, follow_final=follow)
            try:
                return self.openat(canonical, flags), canonical
            except OSError as exc:
                raise self.error(exc, path) from None

    def canonical(self, path: str, *, follow: bool = True) -> Location:
        """The symlink-free location ``path`` resolves to (its final component may
        not exist yet).  With ``follow=False`` a final symlink is kept as is."""
        loc = self.locate(path)
        with self.watch.step(path):
            return self.walk(loc, path, follow_final=follow)

    def walk(self, loc: Location, path: str, *, follow_final: bool) -> Location:
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
        fd = self.openat(here, os.O_PATH | os.O_NOFOLLOW)
        with closing_fd(fd):
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode) and follow:
                if syscalls.fstatfs_type(fd) == syscalls.PROC_SUPER_MAGIC:
                    raise AccessDenied(f"Access denied - magic link refused: {path}")
                return os.readlink("", dir_fd=fd)
            if more and not stat.S_ISDIR(mode):
                raise NotADirectory(f"ENOTDIR: not a directory: {path}")
            return None

    def parent(self, path: str, *, follow_leaf: bool) -> tuple[int, str, Location]:
        """An ``O_PATH`` descriptor of the directory that holds ``path``'s final
        entry, and that entry's name: mutations act on this one name.

        With ``follow_leaf`` a final symlink is resolved (inside the allowed
        directories) and the pair names its target instead.  An allowed
        directory itself has no parent here: that raises AccessDenied.
        """
        loc = self.locate(path)
        for attempt in (1, 2):
            if not loc.rel:
                raise AccessDenied(
                    f"Access denied - an allowed directory itself cannot be changed: {path}"
                )
            check_leaf(loc.name, path)
            with self.watch.step(path):
                fd, _ = self.open_location(loc.parent, os.O_PATH | os.O_DIRECTORY, path)
                if not follow_leaf or attempt == 2:
                    return fd, loc.name, loc
                try:
                    is_link = stat.S_ISLNK(
                        os.stat(loc.name, dir_fd=fd, follow_symlinks=False).st_mode
                    )
                except FileNotFoundError:
                    is_link = False
                except OSError as exc:
                    os.close(fd)
                    raise self.error(exc, path) from None
                if not is_link:
                    return fd, loc.name, loc
                os.close(fd)
                loc = self.walk(loc, path, follow_final=True)
        raise AssertionError("unreachable")

    def error(self, exc: OSError, path: str) -> SandboxError:
        """The client-safe error for an OSError met while resolving ``path``."""
        if exc.errno == errno.EXDEV:
            if self.no_xdev:
                return AccessDenied(
                    f"Access denied - path crosses a mount point (--no-xdev): {path}"
                )
            return outside(path)
        if exc.errno == errno.ELOOP:
            return LimitExceeded(f"ELOOP: too many levels of symbolic links: {path}")
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidPath(f"ENAMETOOLONG: name too long: {path}")
        return from_oserror(exc, path)

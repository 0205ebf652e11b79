"""A mutation's place: :class:`ParentDir`, an opened parent directory and one checked
leaf name, and the allowed directories opened beneath a Root's own descriptor."""

from __future__ import annotations

import os
from typing import final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.chokepoint.confinement import Confinement, Location, entry_name
from sandboxfs.core.chokepoint.directory import Directory, Handle


@final
class ParentDir:
    """A directory (owned) and one checked leaf name in it: the one entry a mutation
    changes."""

    __slots__ = ("dir", "leaf", "path")

    def __init__(self, directory: Directory, leaf: str, path: str) -> None:
        self.dir = directory
        self.leaf = entry_name(leaf)
        self.path = path

    def close(self) -> None:
        self.dir.close()

    def __enter__(self) -> ParentDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def location(self) -> Location:
        return self.dir.location.child(self.leaf)

    def lstat(self) -> os.stat_result | None:
        return self.dir.lstat(self.leaf)

    def open(self, flags: int, *, mode: int = 0) -> int:
        """The leaf opened with ``flags``, never through a symlink (ELOOP if it is one)."""
        return self.dir.open(self.leaf, flags, mode=mode)

    def entry(self) -> Handle:
        """An ``O_PATH`` handle of the leaf entry itself."""
        return self.dir.entry(self.leaf, self.path)

    def readlink(self) -> str:
        return self.dir.readlink(self.leaf)

    def mkdir(self, mode: int = 0o777) -> None:
        self.dir.mkdir(self.leaf, mode)

    def symlink(self, target: str) -> None:
        self.dir.symlink(target, self.leaf)

    def unlink(self) -> None:
        self.dir.unlink(self.leaf)

    def rmdir(self) -> None:
        self.dir.rmdir(self.leaf)

    def rename_to(self, other: ParentDir, flags: int) -> None:
        """Rename the leaf to ``other``'s leaf (``renameat2`` with ``flags``)."""
        self.dir.rename(self.leaf, other.dir, other.leaf, flags)


def open_root_beneath(
    root: Root, below: tuple[str, ...], confinement: Confinement, real: str, given: str
) -> Root:
    """A client's root that lies inside the allowed directory ``root``, opened beneath
    that directory's descriptor (symlinks inside followed), so it cannot be
    anywhere else; it keeps ``root``'s policy (ENOENT if the policy hides it).
    Raises OSError."""
    fd = Location(root, below).open(confinement, os.O_PATH | os.O_DIRECTORY, exact=False)
    return Root(fd, real, given, root.policy.beneath(below))

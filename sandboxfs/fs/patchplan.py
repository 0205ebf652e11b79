"""What an all-or-nothing patch works on: the files it changes (:class:`FileChange`,
as the tools hand them over) and each one's plan on its way to the commit
(:class:`Planned`), shared by the commit (``patches``) and its journal intent
(``patchintent``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import final

from sandboxfs.core import ParentDir
from sandboxfs.fs.staging import StagedFile


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
class Planned:
    """One file of a patch on its way: resolved, locked, staged, then committed."""

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

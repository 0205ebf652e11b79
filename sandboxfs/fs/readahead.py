"""Read-ahead of a walk's files, for grep_files: :func:`read_runs` gives the runs of
files a walk found, in walk order, each opened, checked and read in C by the
searching thread or one helper thread while the walk goes on.

A run is the files of one directory between two of its subdirectories.  Each is
read in one call into C (:meth:`~sandboxfs.core.chokepoint.Directory.read_files`,
native/scan.c) with the GIL released: each file opened beneath its directory as an
exact open is (never through a symlink), checked to be a regular file, read whole
when it fits one read; a literal is searched there, a regex over all the files of
one read at once (:meth:`Run._keep`), so Python sees only the files that may match.

Bounded: a run keeps at most ``run_bytes`` of files to search (further files are
read again when their turn comes), a batch's arena is ``batch_bytes``, and the
search reads a fixed number of runs ahead, whatever the files hold.  A file C could
not open or read (``EIO``, ``EACCES``...) is marked :data:`UNREADABLE_FILE`, counted by
the search and never read again; one that is gone or replaced meanwhile is not.
"""

from __future__ import annotations

import bisect
import collections
import errno
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.core import (
    LEAF_GONE,
    LEAF_LATER,
    LEAF_SEARCH,
    Directory,
    LeafBatch,
    LimitExceeded,
    SandboxError,
)
from sandboxfs.fs.walks import TreeWalk

#: The kind of a file of a run that could not be opened or read (a ``LEAF_*`` is
#: smaller): it is counted, not searched.
UNREADABLE_FILE: Final = 0xFF
#: Errors of a file C could not open or read that mean it is gone or is something
#: else now (not a file that could not be read), or none.
_GONE_ERRNOS: Final = frozenset({0, errno.ENOENT, errno.ELOOP, errno.ENOTDIR})


@final
@dataclass(frozen=True, slots=True)
class ReadSizes:
    """How runs are read: ``block`` (most bytes of a file read at once) and ``probe``
    (bytes inspected for a NUL), a batch's arena and names, the bytes a run keeps."""

    block: int
    probe: int
    batch_bytes: int
    batch_names: int
    run_bytes: int


@final
class Run:
    """The files of one directory between two of its subdirectories (``files``:
    relative path and name, in walk order), read in C by whichever thread claims the
    run (``claim``), the searching thread or the helper; ``read`` is set once they
    are, with a kind for each file (``kinds``) and the bytes of each to search
    (``kept``)."""

    __slots__ = (
        "claim",
        "directory",
        "error",
        "files",
        "kept",
        "kept_bytes",
        "kinds",
        "read",
        "shown",
    )

    def __init__(
        self, directory: Directory | None, files: list[tuple[str, str]], shown: str
    ) -> None:
        self.directory = directory
        self.files = files
        self.shown = shown
        self.claim = threading.Lock()
        self.read = threading.Event()
        self.kinds = b""
        self.kept: dict[int, bytes] = {}
        self.kept_bytes = 0
        self.error: BaseException | None = None

    def read_files(self, batch: LeafBatch, needle: bytes, scanner: Any, sizes: ReadSizes) -> None:
        """Read the files (by the thread that claimed the run), then close the directory."""
        try:
            if self.directory is None:  # vanished or unreadable: none of its files is there
                self.kinds = bytes([LEAF_GONE]) * len(self.files)
                return
            names = [name for _, name in self.files]
            parts: list[bytes] = []
            done = 0
            while done < len(names):
                count = self.directory.read_files(
                    batch,
                    os.fsencode("\0".join(names[done : done + batch.slots]) + "\0"),
                    block=sizes.block,
                    probe=sizes.probe,
                    needle=needle,
                )
                kinds = batch.kinds(count)
                if LEAF_SEARCH in kinds:
                    kinds = self._keep(batch, kinds, done, scanner, sizes.run_bytes)
                if LEAF_GONE in kinds or LEAF_LATER in kinds:
                    kinds = unreadable_marked(batch, kinds)
                parts.append(kinds)
                done += count
            self.kinds = b"".join(parts)
        except BaseException as exc:  # raised again in the searching thread
            self.error = exc
        finally:
            if self.directory is not None:
                self.directory.close()
            self.read.set()

    def _keep(
        self, batch: LeafBatch, kinds: bytes, done: int, scanner: Any, run_bytes: int
    ) -> bytes:
        """Copy out the files of one read that are to be searched: with a ``scanner``
        (RE2), only those it finds a match in when it searches all of them as one text
        (each file followed by a newline, so no line joins two files: a file with a
        match of its own has one there; a match found may be no match of the file's,
        which its own search then shows)."""
        spans, view = batch.spans, batch.view
        chosen = [index for index, kind in enumerate(kinds) if kind == LEAF_SEARCH]
        if scanner is not None:
            starts = [spans[2 * index] for index in chosen]
            last = chosen[-1]
            text = view[: spans[2 * last] + spans[2 * last + 1] + 1]
            found: list[int] = []
            position = 0
            while (match := scanner.search(text, position)) is not None:
                at = max(0, bisect.bisect_right(starts, match.start()) - 1)
                found.append(chosen[at])
                if at + 1 >= len(chosen):
                    break
                position = starts[at + 1]
            chosen = found
        later = bytearray(kinds)
        for index in chosen:
            start, length = spans[2 * index], spans[2 * index + 1]
            if self.kept_bytes and self.kept_bytes + length > run_bytes:
                later[index] = LEAF_LATER  # bounded memory: read again in its turn
                continue
            self.kept[done + index] = bytes(view[start : start + length])
            self.kept_bytes += length
        return bytes(later)


def unreadable_marked(batch: LeafBatch, kinds: bytes) -> bytes:
    """``kinds`` with each file that C could not open or read for an error other
    than its being gone or replaced (``EIO``, ``EACCES``...) marked
    :data:`UNREADABLE_FILE`: counted, never read again."""
    marked = bytearray(kinds)
    for index, kind in enumerate(kinds):
        if kind in (LEAF_GONE, LEAF_LATER) and batch.error(index) not in _GONE_ERRNOS:
            marked[index] = UNREADABLE_FILE
    return bytes(marked)


@final
class Reader:
    """Runs read ahead of the search, in walk order, by one helper thread (started
    when a second run is waiting) and by the searching thread, which reads a run
    itself rather than wait.  The helper only reads (C, the GIL released); every
    directory is opened, and every result searched, in the searching thread, so the
    answer is the one a single thread gives.  The searching thread marks each wait
    as a step of the call's watch (the helper never touches the watch)."""

    def __init__(self, tree: TreeWalk, needle: bytes, scanner: Any, sizes: ReadSizes) -> None:
        self.tree = tree
        self.needle = needle
        self.scanner = scanner
        self.sizes = sizes
        self.pending: collections.deque[Run] = collections.deque()
        self._queue: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._helper: threading.Thread | None = None
        self._batch: LeafBatch | None = None

    def submit(self, rel: tuple[str, ...], files: list[tuple[str, str]], shown: str) -> None:
        try:
            directory: Directory | None = self.tree.directory(rel, shown)
        except SandboxError:
            directory = None
        run = Run(directory, files, shown)
        self.pending.append(run)
        if len(self.pending) > 1:
            if self._helper is None:
                self._helper = threading.Thread(
                    target=self._help, name="sandboxfs grep reader", daemon=True
                )
                self._helper.start()
            self._queue.put(run)

    def _help(self) -> None:
        batch = LeafBatch(self.sizes.batch_bytes, self.sizes.batch_names)
        while (run := self._queue.get()) is not None:
            if run.claim.acquire(blocking=False):
                run.read_files(batch, self.needle, self.scanner, self.sizes)

    def _read_here(self, run: Run) -> None:
        if self._batch is None:
            self._batch = LeafBatch(self.sizes.batch_bytes, self.sizes.batch_names)
        with self.tree.ctx.watch.step(run.shown):
            run.read_files(self._batch, self.needle, self.scanner, self.sizes)

    def next(self) -> Run:
        """The oldest run, read."""
        run = self.pending.popleft()
        if run.claim.acquire(blocking=False):
            self._read_here(run)
        else:
            for other in reversed(self.pending):  # the helper has it: read a later one
                if run.read.is_set():
                    break
                if other.claim.acquire(blocking=False):
                    self._read_here(other)
            with self.tree.ctx.watch.step(run.shown):
                run.read.wait()
        if run.error is not None:
            raise run.error
        return run

    def close(self) -> None:
        """Stop the helper; close what was opened and never read (wait for what it reads)."""
        if self._helper is not None:
            self._queue.put(None)
        for run in self.pending:
            if run.claim.acquire(blocking=False):
                if run.directory is not None:
                    run.directory.close()
            else:
                with self.tree.ctx.watch.step(run.shown):
                    run.read.wait()
        self.pending.clear()


def read_runs(
    tree: TreeWalk,
    runs: Iterable[tuple[tuple[str, ...], list[tuple[str, str]], str]],
    reading: tuple[bytes, Any, ReadSizes],
    *,
    ahead: int,
    stop: Callable[[], bool],
) -> Iterator[Run]:
    """The ``runs`` of a walk (the directory's relative path, its files, its name as
    shown), each read (:class:`Reader`), in walk order, at most ``ahead`` runs read
    ahead of the one given.  ``reading``: the literal C searches for, the RE2
    pattern that keeps only files that may match, and the sizes of the reads.
    ``stop()`` is asked before each run is read and after each is given: once it
    says so, nothing more is read or given.  A LimitExceeded of the walk is raised
    after the runs found before it are given (unless ``stop()`` says so by then)."""
    needle, scanner, sizes = reading
    reader = Reader(tree, needle, scanner, sizes)
    limit: LimitExceeded | None = None
    try:
        try:
            for rel, files, shown in runs:
                if stop():
                    return
                reader.submit(rel, files, shown)
                pending = reader.pending
                while pending and (len(pending) > ahead or pending[0].read.is_set()):
                    yield reader.next()
                    if stop():
                        return
        except LimitExceeded as exc:
            limit = exc  # what was walked before it is given first
        while reader.pending:
            if stop():
                return
            yield reader.next()
        if limit is not None and not stop():
            raise limit
    finally:
        reader.close()

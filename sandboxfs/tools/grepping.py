"""grep_files: search file contents below a directory (or in one file).

Literal by default.  With ``regex`` the pattern is RE2 syntax, matched by a
linear-time engine (google-re2), so no pattern can stall the server; an invalid
pattern is one clear error before the walk.  Binary files (a NUL byte in their
first 8 KiB) are skipped.  The walk is the same bounded, descriptor-based walk
as search_files: it never follows a symlink.  It stops early, and says so, at
``maxResults`` matches, at the entry cap, after ``search_seconds``, or once the
lines it would answer with pass the read cap.

Bounded whatever a file's shape: a line longer than a block (4 MiB) is cut there
(its first block is searched as the line, the rest only read for its end; a match
in it is reported with the line marked, and the answer counts the lines cut), so a
search holds at most two blocks of a file.  A file that cannot be read (``EIO``
from a failing disk, a FUSE or NFS server, a procfs file, ``EACCES``) is skipped
and counted, never the end of the search.

Speed: the walk's files are read ahead in C (:mod:`sandboxfs.fs.readahead`), where
a literal is searched too, RE2 over all the files of one read at once; a long file
is read block by block into one buffer.  Either way the blocks, and so
the answers, are the ones a file-by-file search gives (tests/grep_reference.py is
that search, kept as the tests' oracle).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from sandboxfs.fs import (
    LEAF_BINARY,
    LEAF_LATER,
    LEAF_SEARCH,
    LEAF_TEXT,
    RUN,
    UNREADABLE_FILE,
    Conflict,
    Glob,
    GlobError,
    InvalidArgument,
    IsADirectory,
    LimitExceeded,
    NotADirectory,
    NotARegularFile,
    NotFound,
    OpenFile,
    ReadSizes,
    Run,
    SandboxError,
    TreeWalk,
    compile_glob,
    count_byte,
    read_runs,
)
from sandboxfs.tools.grepmatch import (
    Matcher,
    exact_path,
    lines_cut,
    not_read,
    shown_line,
    shown_path,
    size_text,
)
from sandboxfs.tools.spec import READ_ONLY, CallContext, Param, Progress, ToolResult, ToolSpec
from sandboxfs.tools.walking import Walker

#: Bytes inspected to decide that a file is binary.
_BINARY_PROBE: Final = 8192
#: Bytes searched at once; a block always ends at a line boundary.
_BLOCK: Final = 4 * 1024 * 1024
#: The files of one directory are opened, checked and read in C, this many bytes and
#: names at a time; a longer file is searched block by block in Python.
_BATCH_BYTES: Final = 1024 * 1024
_BATCH_NAMES: Final = 256
#: Runs of files (a directory's files between two of its subdirectories, at most
#: ``_RUN_FILES`` of them: the time limit is checked between runs) read ahead of the
#: search, at most; and the bytes a run keeps to be searched in Python, at most
#: (further files are searched as a long file is: read again when their turn comes).
_READ_AHEAD: Final = 16
_RUN_FILES: Final = 256
_RUN_BYTES: Final = 1024 * 1024
_NEWLINE: Final = 0x0A
#: Errors of a file that vanished or became something else while the walk went on:
#: not a match, and not a file that could not be read.
_REPLACED: Final = (NotFound, Conflict, NotARegularFile, IsADirectory, NotADirectory)


@dataclass
class _Place:
    """Where the search of one file is: the lines before its buffer, and whether the
    buffer starts inside a cut line (whose bytes are dropped up to its newline)."""

    lines: int = 0
    skipping: bool = False


@dataclass
class _Search:
    """The state of one grep_files call."""

    matcher: Matcher
    context: int
    max_results: int
    deadline: float
    lines: list[str] = field(default_factory=list)
    matches: list[dict[str, Any]] = field(default_factory=list)
    files_searched: int = 0
    binary_skipped: int = 0
    #: Files that could not be opened or read (to their end): skipped, counted.
    unreadable: int = 0
    #: Lines longer than a block, searched only in their first block.
    lines_cut: int = 0
    #: Characters of the lines reported so far, and the most they may reach.
    answer_chars: int = 0
    answer_cap: int = 32 * 1024 * 1024
    stopped: str | None = None
    #: Hears the bytes searched of a single file (a walk reports its entries instead).
    progress: Progress | None = None

    def full(self) -> bool:
        return len(self.matches) >= self.max_results or self.answer_chars > self.answer_cap

    def out_of_time(self, seconds: float) -> bool:
        """True (and the reason noted) once the time budget is spent."""
        if time.monotonic() <= self.deadline:
            return False
        self.stopped = f"stopped after {seconds:g} s; narrow path or use glob"
        return True

    def search_file(
        self, f: OpenFile, shown_path: str, seconds: float, exact_path: str | None = None
    ) -> None:
        """Search one file; its lines are reported as ``shown_path`` (and as
        ``exact_path`` in structured content, when that differs).

        Blocks of ``_BLOCK`` bytes are read into one buffer; each block searched
        ends at its last newline (the rest, the start of a line, is carried into the
        next block), and only in a block with a match are lines looked at, around
        its matches.  A line longer than a block is cut: its first ``_BLOCK`` bytes
        are searched as the line, the rest is read only to find its end.  So the
        buffer never holds more than two blocks, whatever the file's shape; the time
        budget is checked after every block.  A read error is raised (gated)."""
        paths = (shown_path, exact_path or shown_path)
        # A file smaller than a block is read at once (a short read means its end),
        # and its first read holds what decides whether it is binary.
        size = min(_BLOCK, max(f.stat.st_size + 1, _BINARY_PROBE))
        # Room for a block and what a block carries over (the start of a line).
        buffer = bytearray(size if size > f.stat.st_size else 2 * size)
        end = 0  # bytes held: buffer[:end] begins at the start of a line
        at = _Place()
        first = True
        while not self.full():
            if len(buffer) < end + size:  # it grew past its size: room for one more block
                buffer.extend(bytearray(end + size - len(buffer)))
            with memoryview(buffer) as view:
                got = f.file.readinto(view[end : end + size])
            if first:
                first = False
                if buffer.find(b"\0", 0, min(got, _BINARY_PROBE)) >= 0:
                    self.binary_skipped += 1
                    return
                self.files_searched += 1
            end = self._take(buffer, end + got, got < size, at, paths)
            if got < size:
                return
            size = _BLOCK  # longer than its size said (it grew, or procfs): whole blocks
            if self.progress is not None:
                self.progress(f.file.tell(), f.stat.st_size, "bytes searched")
            if self.out_of_time(seconds):
                return

    def _take(
        self, buffer: bytearray, end: int, done: bool, at: _Place, paths: tuple[str, str]
    ) -> int:
        """Search the whole lines of ``buffer[:end]`` (all of it when ``done``, the
        file's end) and keep the start of the last, unfinished one at the buffer's
        start: how many bytes are kept.  A line longer than a block is cut there."""
        if at.skipping:  # buffer[:end]: more of a cut line, and maybe its end
            newline = buffer.find(b"\n", 0, end)
            if newline < 0:
                return 0
            at.skipping = False
            at.lines += 1
            end -= newline + 1
            buffer[:end] = buffer[newline + 1 : newline + 1 + end]
        start = buffer.rfind(b"\n", 0, end) + 1  # where the last line starts
        if end - start > _BLOCK:  # that line is longer than a block: cut it there
            self.lines_cut += 1
            # Searched as if it ended there (the byte after the cut is not kept).
            buffer[start + _BLOCK] = _NEWLINE
            self._region(buffer, start + _BLOCK + 1, at.lines, paths, cut=True)
            at.lines += count_byte(buffer, _NEWLINE, 0, start)
            at.skipping = True
            return 0
        if done:
            if end:
                self._region(buffer, end, at.lines, paths)
            return 0
        if start:
            newlines, counted_to = self._region(buffer, start, at.lines, paths)
            at.lines += newlines + count_byte(buffer, _NEWLINE, counted_to, start)
            end -= start
            buffer[:end] = buffer[start : start + end]
        return end

    def _region(
        self,
        buffer: bytearray,
        end: int,
        before: int,
        paths: tuple[str, str],
        *,
        cut: bool = False,
    ) -> tuple[int, int]:
        """Search ``buffer[:end]`` as one block (``cut``: its last line is one that was
        cut); the newlines counted, and up to where."""
        return self._block(buffer, end, before, paths, cut=cut)

    def search_run(self, run: Run, tree: TreeWalk, prefix: str, seconds: float) -> None:
        """Count or search each file of a run that has been read, in order, until the
        results are full; a file longer than a read is searched by :meth:`search_file`."""
        kinds = run.kinds
        if not run.kept and LEAF_LATER not in kinds:
            # No file can match, so none fills the results: count them at once.
            self.files_searched += kinds.count(LEAF_TEXT) + kinds.count(LEAF_SEARCH)
            self.binary_skipped += kinds.count(LEAF_BINARY)
            self.unreadable += kinds.count(UNREADABLE_FILE)
            return
        prefiltered = self.matcher.literal is not None
        files = run.files
        for index, kind in enumerate(kinds):
            if self.full():
                return
            if kind == LEAF_TEXT:
                self.files_searched += 1
            elif kind == LEAF_BINARY:
                self.binary_skipped += 1
            elif kind == UNREADABLE_FILE:
                self.unreadable += 1
            elif kind == LEAF_SEARCH:
                self.files_searched += 1
                data = run.kept.get(index)
                if data and (prefiltered or self.matcher.any_hit(data, 0, len(data))):
                    relative = files[index][0]
                    paths = (shown_path(prefix, relative), exact_path(prefix, relative))
                    self._block(data, len(data), 0, paths)
            elif kind == LEAF_LATER:
                relative = files[index][0]
                shown = shown_path(prefix, relative)
                try:
                    with tree.open_file(tuple(relative.split("/")), shown) as f:
                        self.search_file(f, shown, seconds, exact_path(prefix, relative))
                except _REPLACED:
                    continue  # vanished or replaced meanwhile: not a match
                except SandboxError as exc:
                    if exc.code in ("ELOOP", "ENOENT"):
                        continue  # a symlink now, or gone: not a match
                    self.unreadable += 1  # what it matched before the error stays

    def _block(
        self,
        data: bytes | bytearray,
        end: int,
        before: int,
        paths: tuple[str, str],
        *,
        cut: bool = False,
    ) -> tuple[int, int]:
        """Report the matches in the block ``data[:end]`` (``before`` lines precede it)
        as ``path:line:text``, with context lines from the same block; only the
        lines shown are looked at (the block is never split into lines), each
        decoded only as far as it is shown.  ``cut``: the block's last line is one
        that was cut (it is marked where shown).  Returns how many newlines it
        counted, from the block's start up to where."""
        shown_path, exact_path = paths
        context = self.context
        # The block's lines are those of data[:end].split(b"\n"), less a last empty one.
        ends_line = end > 0 and data[end - 1] == _NEWLINE
        counted = counted_to = 0  # newlines in data[:counted_to]
        last_printed = -1
        for hit in self.matcher.hits(data, end):
            counted += count_byte(data, _NEWLINE, counted_to, hit)
            counted_to = hit
            if self.full():
                break
            if hit == end and ends_line:  # an empty match after the last newline
                index = counted - 1
                start = data.rfind(b"\n", 0, end - 1) + 1
            else:
                index = counted
                start = data.rfind(b"\n", 0, hit) + 1
            lo = max(0, index - context)
            shown: list[str] = []  # lines lo .. hi - 1, as shown
            with memoryview(data) as whole:
                cursor = start
                for _ in range(index - lo):
                    previous = data.rfind(b"\n", 0, cursor - 1) + 1
                    shown.append(shown_line(whole[previous : cursor - 1]))
                    cursor = previous
                shown.reverse()
                cursor = start
                for _ in range(context + 1):
                    stop = data.find(b"\n", cursor, end)
                    last = stop < 0 or stop + 1 >= end
                    line = whole[cursor : end if stop < 0 else stop]
                    shown.append(shown_line(line, cut_at=_BLOCK if cut and last else None))
                    if last:
                        break  # that was the last line
                    cursor = stop + 1
            hi = lo + len(shown)
            if context and self.lines and lo > last_printed + 1:
                self._say("--")
            for k in range(max(lo, last_printed + 1), hi):
                mark = ":" if k == index else "-"
                self._say(f"{shown_path}{mark}{before + k + 1}{mark}{shown[k - lo]}")
            last_printed = max(last_printed, hi - 1)
            self.answer_chars += sum(map(len, shown))
            self.matches.append(
                {
                    "path": exact_path,
                    "line": before + index + 1,
                    "text": shown[index - lo],
                    "before": shown[: index - lo],
                    "after": shown[index - lo + 1 :],
                }
            )
        return counted, counted_to

    def _say(self, line: str) -> None:
        """One line of the text answer, counted against the answer's cap."""
        self.lines.append(line)
        self.answer_chars += len(line)


def grep_files(
    ctx: CallContext,
    /,
    pattern: str,
    *,
    path: str = ".",
    regex: bool = False,
    glob: str | None = None,
    context: int = 0,
    maxResults: int = 50,
    caseSensitive: bool = True,
) -> ToolResult:
    matcher = Matcher(pattern, regex=regex, case_sensitive=caseSensitive)
    name_filter: Glob | None = None
    if glob is not None:
        try:
            name_filter = compile_glob(glob)
        except GlobError as exc:
            raise InvalidArgument(f"Invalid glob pattern: {exc}") from None
    search = _Search(matcher, context, maxResults, time.monotonic() + ctx.limits.search_seconds)
    search.answer_cap = ctx.limits.read_bytes
    target = ctx.sandbox.search_target(path)
    unreadable_dirs = 0
    if isinstance(target, OpenFile):
        if ctx.wants_progress:
            search.progress = ctx.progress
        with target:
            search.search_file(target, path, ctx.limits.search_seconds)
    else:
        walker = Walker(ctx, path, "grep_files", tree=target)
        _walk(ctx, walker, search, name_filter)
        unreadable_dirs = len(walker.unreadable)
    if search.stopped is None and search.answer_chars > search.answer_cap:
        search.stopped = (
            f"stopped after {size_text(search.answer_cap)} of matching lines; lower context "
            "or maxResults, or narrow the search"
        )
    elif search.stopped is None and search.full():
        search.stopped = (
            f"stopped after {maxResults} matches; raise maxResults or narrow the search"
        )
    text = "\n".join(search.lines) if search.lines else "No matches found"
    if search.stopped:
        text += f"\n[{search.stopped}]"
    if search.lines_cut:
        text += f"\n[{lines_cut(search.lines_cut, _BLOCK)}]"
    if search.unreadable or unreadable_dirs:
        text += f"\n[{not_read(search.unreadable, unreadable_dirs)}]"
    return ToolResult(
        text=text,
        structured={
            "matches": search.matches,
            "filesSearched": search.files_searched,
            "binaryFilesSkipped": search.binary_skipped,
            "unreadableFiles": search.unreadable,
            "unreadableDirectories": unreadable_dirs,
            "linesCut": search.lines_cut,
            "complete": search.stopped is None
            and not (search.lines_cut or search.unreadable or unreadable_dirs),
            "stoppedReason": search.stopped,
        },
    )


def _runs(
    walker: Walker, name_filter: Glob | None
) -> Iterator[tuple[tuple[str, ...], list[tuple[str, str]], str]]:
    """The files to search, depth first in byte order, as runs: the files of one
    directory between two of its subdirectories (relative path and name, at most
    ``_RUN_FILES``), with the directory and its name as shown.  Raises
    LimitExceeded where the walk reaches a limit."""
    by_path = name_filter is not None and "/" in (name_filter.pattern or "")
    prefix = walker.path.rstrip("/") or "/"
    for step in walker:
        if step[0] != RUN:
            continue
        rel = step.rel
        inner = "/".join(rel) + "/" if rel else ""
        shown = shown_path(prefix, inner[:-1]) if rel else walker.path
        run: list[tuple[str, str]] = []
        for name, kind, _ in step.entries:
            if kind != "file":
                continue
            relative = inner + name
            if name_filter is None or name_filter.matches(relative if by_path else name):
                run.append((relative, name))
                if len(run) == _RUN_FILES:
                    yield rel, run, shown
                    run = []
        if run:
            yield rel, run, shown


def _walk(ctx: CallContext, walker: Walker, search: _Search, name_filter: Glob | None) -> None:
    """Search the runs of the walk in walk order, each read ahead
    (:func:`~sandboxfs.fs.readahead.read_runs`) while the walk goes on, at most
    ``_READ_AHEAD`` runs ahead of the search."""
    prefix = walker.path.rstrip("/") or "/"
    seconds = ctx.limits.search_seconds
    sizes = ReadSizes(_BLOCK, _BINARY_PROBE, _BATCH_BYTES, _BATCH_NAMES, _RUN_BYTES)
    reading = (search.matcher.literal or b"", search.matcher.scanner, sizes)

    def stop() -> bool:
        return search.full() or search.out_of_time(seconds)

    runs = _runs(walker, name_filter)
    try:
        for run in read_runs(walker.tree, runs, reading, ahead=_READ_AHEAD, stop=stop):
            search.search_run(run, walker.tree, prefix, seconds)
    except LimitExceeded as exc:
        search.stopped = str(exc)


GREP_FILES = ToolSpec(
    name="grep_files",
    title="Search File Contents",
    description="Search the contents of files below 'path' (or the one file it names) and "
    "report matching lines as 'path:line:text' (GNU grep style; with context, context lines "
    "are 'path-line-text' and groups are separated by '--'). The pattern is literal text "
    "unless 'regex' is true (RE2 syntax, linear time). 'glob' keeps only files whose name "
    "(or, if the glob has a '/', relative path) matches. Binary files are skipped; symlinks "
    "are never followed. Stops early, and says so, at maxResults matches, at 100,000 "
    "visited entries, after the server's time limit, or when the matching lines reach the "
    "server's read limit. A line longer than 4 MiB is searched only in its first 4 MiB and "
    "shown ending in '[line cut at 4 MiB]'; files and directories that cannot be read are "
    "skipped and counted ('[N files could not be read]'). Only searches within allowed "
    "directories.",
    params=(
        Param(
            "pattern",
            {"type": "string", "minLength": 1},
            "Text (or RE2 regex) to find (at most 65,536 characters).",
            required=True,
        ),
        Param(
            "path",
            {"type": "string", "minLength": 1, "default": "."},
            "Directory to search below, or one file (default: the first allowed directory).",
        ),
        Param("regex", {"type": "boolean", "default": False}, "Treat pattern as an RE2 regex."),
        Param("glob", {"type": "string"}, "Only search files whose name matches, e.g. '*.py'."),
        Param(
            "context",
            {"type": "integer", "minimum": 0, "maximum": 20, "default": 0},
            "Lines of context to show around each match.",
        ),
        Param(
            "maxResults",
            {"type": "integer", "minimum": 1, "maximum": 10000, "default": 50},
            "Stop after this many matching lines.",
        ),
        Param(
            "caseSensitive",
            {"type": "boolean", "default": True},
            "Match case exactly (false: ignore case).",
        ),
    ),
    annotations=READ_ONLY,
    handler=grep_files,
)

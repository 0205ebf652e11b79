"""The grep_files of commit 2f15ed6, before its reads moved into C: the oracle the
differential tests in test_grep_scan.py compare today's grep_files with.  Kept as it
was (only this docstring, and the imports its tool declaration needed, changed): its
output is the contract.

Changed since, with the contract (issue 26): a line longer than a block is cut there
(searched as its first block, as if it ended there, shown with the cut mark; the
rest of it is only read for its end), the answer counts the lines cut and the files
and directories that could not be read, and ``complete`` is false when any was.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import re2

from sandboxfs.core.errors import (
    Conflict,
    InvalidArgument,
    IsADirectory,
    LimitExceeded,
    NotADirectory,
    NotARegularFile,
    NotFound,
    SandboxError,
)
from sandboxfs.core.globs import Glob, GlobError, compile_glob
from sandboxfs.core.names import quote_path, structured_path
from sandboxfs.core.traversal import RUN
from sandboxfs.fs.files import OpenFile
from sandboxfs.tools.spec import CallContext, Progress, ToolResult
from sandboxfs.tools.walking import Walker

#: Bytes inspected to decide that a file is binary.
_BINARY_PROBE: Final = 8192
#: Bytes searched at once; a block always ends at a line boundary.
_BLOCK: Final = 4 * 1024 * 1024
#: Longest line text reported; longer lines are cut with an ellipsis.
_LINE_SHOWN: Final = 500


class _Matcher:
    """Finds matching lines in a block of bytes, with RE2 or a plain substring search."""

    def __init__(self, pattern: str, *, regex: bool, case_sensitive: bool) -> None:
        if pattern == "":
            raise InvalidArgument("pattern must not be empty")
        options = re2.Options()
        options.log_errors = False
        options.case_sensitive = case_sensitive
        self.literal = None if regex or not case_sensitive else pattern.encode("utf-8")
        # (?m): ^ and $ match at line boundaries, as in grep.
        source = "(?m)" + pattern if regex else re2.escape(pattern)
        try:
            self.compiled = re2.compile(source.encode("utf-8"), options=options)
        except re2.error as exc:
            raw = exc.args[0] if exc.args else b""
            detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            detail = detail.replace("(?m)", "")
            raise InvalidArgument(f"Invalid regular expression {pattern!r}: {detail}") from None

    def hits(self, block: bytes) -> Iterator[int]:
        """Start offsets of matches in ``block`` (at most one per line)."""
        if self.literal is not None:
            start = 0
            while (at := block.find(self.literal, start)) >= 0:
                yield at
                start = block.find(b"\n", at)
                if start < 0:
                    return
            return
        position = 0
        while position <= len(block):
            found = self.compiled.search(block, position)
            if found is None:
                return
            yield found.start()
            newline = block.find(b"\n", found.start())
            if newline < 0:
                return
            position = newline + 1


def _shown(line: bytes, cut: bool = False) -> str:
    text = line.decode("utf-8", "replace").removesuffix("\r")
    text = text if len(text) <= _LINE_SHOWN else text[:_LINE_SHOWN] + "…"
    if cut:
        size = f"{_BLOCK // 2**20} MiB" if _BLOCK % 2**20 == 0 else f"{_BLOCK} bytes"
        text += f" [line cut at {size}]"
    return text


@dataclass
class _Search:
    """The state of one grep_files call."""

    matcher: _Matcher
    context: int
    max_results: int
    deadline: float
    lines: list[str] = field(default_factory=list)
    matches: list[dict[str, Any]] = field(default_factory=list)
    files_searched: int = 0
    binary_skipped: int = 0
    unreadable: int = 0
    lines_cut: int = 0
    stopped: str | None = None
    #: Hears the bytes searched of a single file (a walk reports its entries instead).
    progress: Progress | None = None

    def full(self) -> bool:
        return len(self.matches) >= self.max_results

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
        ``exact_path`` in structured content, when that differs)."""
        exact = exact_path or shown_path
        # A file smaller than a block is read at once (a short read means its end).
        size = min(_BLOCK, f.stat.st_size + 1)
        line_number = 0  # lines before the current block
        carry = b""
        first = True
        skipping = False  # in a cut line
        while not self.full():
            chunk = f.file.read(size)
            if first:
                first = False
                if b"\0" in chunk[:_BINARY_PROBE]:
                    self.binary_skipped += 1
                    return
                self.files_searched += 1
            done = not chunk or len(chunk) < size
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    if done:
                        return
                    continue
                skipping = False
                line_number += 1
                chunk = chunk[newline + 1 :]
            block = carry + chunk if carry else chunk
            last = block.rfind(b"\n") + 1
            if len(block) - last > _BLOCK:
                self.lines_cut += 1
                self._block(block[: last + _BLOCK] + b"\n", line_number, (shown_path, exact), True)
                if done:
                    return
                line_number += block.count(b"\n", 0, last)
                skipping = True
                carry = b""
                continue
            if done:
                if block:
                    self._block(block, line_number, (shown_path, exact))
                return
            cut = last
            if cut == 0:
                carry = block
                continue
            self._block(block[:cut], line_number, (shown_path, exact))
            line_number += block.count(b"\n", 0, cut)
            carry = block[cut:]
            if self.progress is not None:
                self.progress(f.file.tell(), f.stat.st_size, "bytes searched")
            if self.out_of_time(seconds):
                return

    def _block(self, block: bytes, before: int, paths: tuple[str, str], cut: bool = False) -> None:
        shown_path, exact_path = paths
        hits = list(self.matcher.hits(block))
        if not hits:
            return
        lines = block.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        shown = [_shown(line, cut and k == len(lines) - 1) for k, line in enumerate(lines)]
        starts = [0]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        last_printed = -1
        for hit in hits:
            index = bisect.bisect_right(starts, hit) - 1
            if self.full():
                break
            number = before + index + 1
            lo = max(0, index - self.context)
            hi = min(len(lines), index + self.context + 1)
            if self.context and self.lines and lo > last_printed + 1:
                self.lines.append("--")
            for k in range(max(lo, last_printed + 1), hi):
                mark = ":" if k == index else "-"
                self.lines.append(f"{shown_path}{mark}{before + k + 1}{mark}{shown[k]}")
            last_printed = max(last_printed, hi - 1)
            self.matches.append(
                {
                    "path": exact_path,
                    "line": number,
                    "text": shown[index],
                    "before": shown[lo:index],
                    "after": shown[index + 1 : hi],
                }
            )


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
    matcher = _Matcher(pattern, regex=regex, case_sensitive=caseSensitive)
    name_filter: Glob | None = None
    if glob is not None:
        try:
            name_filter = compile_glob(glob)
        except GlobError as exc:
            raise InvalidArgument(f"Invalid glob pattern: {exc}") from None
    search = _Search(matcher, context, maxResults, time.monotonic() + ctx.limits.search_seconds)
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
    if search.stopped is None and search.full():
        search.stopped = (
            f"stopped after {maxResults} matches; raise maxResults or narrow the search"
        )
    text = "\n".join(search.lines) if search.lines else "No matches found"
    if search.stopped:
        text += f"\n[{search.stopped}]"
    if search.lines_cut:
        size = f"{_BLOCK // 2**20} MiB" if _BLOCK % 2**20 == 0 else f"{_BLOCK} bytes"
        some = "1 line" if search.lines_cut == 1 else f"{search.lines_cut} lines"
        text += f"\n[{some} longer than {size} cut: only the first {size} of each was searched]"
    if search.unreadable or unreadable_dirs:
        parts = []
        if search.unreadable:
            parts.append(f"{search.unreadable} file{'' if search.unreadable == 1 else 's'}")
        if unreadable_dirs:
            parts.append(f"{unreadable_dirs} director{'y' if unreadable_dirs == 1 else 'ies'}")
        text += "\n[" + " and ".join(parts) + " could not be read]"
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


def _walk(ctx: CallContext, walker: Walker, search: _Search, name_filter: Glob | None) -> None:
    path = walker.path
    prefix = path.rstrip("/") or "/"
    try:
        for step in walker:
            for name, kind, _ in step.entries if step.kind == RUN else ():
                if kind == "file":
                    _search_one(ctx, walker, search, name_filter, (*step.rel, name), prefix)
                if search.full() or search.out_of_time(ctx.limits.search_seconds):
                    return
            # Before the walk goes on (into a directory, to the next entry).
            if search.full() or search.out_of_time(ctx.limits.search_seconds):
                return
    except LimitExceeded as exc:
        search.stopped = str(exc)


def _search_one(
    ctx: CallContext,
    walker: Walker,
    search: _Search,
    name_filter: Glob | None,
    rel: tuple[str, ...],
    prefix: str,
) -> None:
    relative = "/".join(rel)
    if name_filter is not None:
        subject = relative if "/" in (name_filter.pattern or "") else rel[-1]
        if not name_filter.matches(subject):
            return
    shown = f"{prefix}/{quote_path(relative)}" if prefix != "/" else f"/{relative}"
    exact = f"{prefix}/{structured_path(relative)}" if prefix != "/" else f"/{relative}"
    try:
        with walker.tree.open_file(rel, shown) as f:
            search.search_file(f, shown, ctx.limits.search_seconds, exact)
    except (NotFound, Conflict, NotARegularFile, IsADirectory, NotADirectory):
        return  # vanished or replaced meanwhile: not a match
    except SandboxError as exc:
        if exc.code not in ("ELOOP", "ENOENT"):
            search.unreadable += 1

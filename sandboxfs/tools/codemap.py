"""code_map: a ranked skeleton of the code below a directory.

The walk is search_files' and grep_files' (:class:`~sandboxfs.tools.walking.Walker`
over a :class:`~sandboxfs.fs.walks.TreeWalk`): every directory reopened exactly
beneath its allowed directory, no symlink followed, hidden entries never listed,
each directory read one timed step (``--fs-timeout``), at most ``walk_entries``
entries and ``tree_depth`` levels.  Below the start it never enters
:data:`SKIPPED_DIRS`, a dot-directory or a virtualenv, and it takes at most
:data:`FILE_CAP` source files.  Each file is opened as grep opens one (an ``O_PATH``
handle that must show a regular file, then the same inode for reading: special
files are never opened for reading), at most :data:`FILE_BYTES` of it is read,
and unless the server's parse cache (:mod:`~sandboxfs.tools.codecache`) knows it
by its ``fstat``, its bytes go to a sandboxed parse helper
(:mod:`~sandboxfs.tools.parsepool`): this process never parses.  The whole call,
ranking included, has ``search_seconds`` (``--max-search-seconds``), of which
walking, reading and parsing get :data:`PARSE_SHARE`; files it had no time for,
and files whose helper failed, are counted in the summary.
Ranking: :mod:`~sandboxfs.tools.coderank`; what is printed within ``maxChars``:
:mod:`~sandboxfs.tools.coderender`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.fs import (
    ENTER,
    ENTRY,
    InvalidArgument,
    LimitExceeded,
    OpenFile,
    SandboxError,
    quote_path,
    structured_path,
)
from sandboxfs.tools.codecache import ParseKey, parse_key
from sandboxfs.tools.codefacts import Parsed, language_of
from sandboxfs.tools.coderank import Source
from sandboxfs.tools.coderender import (
    DEFAULT_CHARS,
    MAX_CHARS,
    MIN_CHARS,
    RANKED_IN_PART,
    Walked,
    build_map,
)
from sandboxfs.tools.parsepool import ParserUnavailable, shared
from sandboxfs.tools.parserun import Outcome, ParseRun, Unparsed
from sandboxfs.tools.spec import (
    READ_ONLY,
    STRING_LIST,
    CallContext,
    Param,
    ToolResult,
    ToolSpec,
)
from sandboxfs.tools.walking import Walker

#: Source files one map reads, at most; the walk stops there and says so.
FILE_CAP: Final = 5000
#: Bytes of one file a map reads, at most; larger files are skipped (and counted).
FILE_BYTES: Final = 1024 * 1024
#: The share of the call's budget that walking, reading and parsing may take; the
#: rest is the ranking's, so that a file that stalls its parser costs the map its
#: own lines, not its order.
PARSE_SHARE: Final = 0.9
#: Names (definitions plus distinct names referred to, summed over files) one map
#: ranks, at most: the walk stops reading files there, and says so.  It bounds the
#: ranking's memory, which is linear in them.
NAMES_MAX: Final = 500_000
#: Directories never entered below the start (besides dot-directories and virtualenvs).
SKIPPED_DIRS: Final = frozenset(
    {"node_modules", "target", "build", "dist", "vendor", "__pycache__", "site-packages"}
)
#: An entry that makes its directory a virtualenv (venv, virtualenv, conda).
_VIRTUALENV_MARKS: Final = frozenset({"pyvenv.cfg", "conda-meta"})
#: Bytes inspected to decide that a file is binary (as grep_files does).
_BINARY_PROBE: Final = 8192
#: Focus paths one call may name, and characters of a query, at most.
_FOCUS_MAX: Final = 100
_QUERY_MAX: Final = 1000
_NARROW: Final = "narrow path"


@final
@dataclass(frozen=True, slots=True)
class _Found:
    """A source file the walk found: where it is below the start, and its language."""

    rel: tuple[str, ...]
    language: str


@final
@dataclass(frozen=True, slots=True)
class _Sent:
    """A file waiting for its helper's answer: where its source goes in the map, how
    it is shown, and its cache key (None if it changed while it was read)."""

    order: int
    shown: str
    exact: str
    key: ParseKey | None
    focus: bool


@final
class _Mapper:
    """One code_map call: the walk, then reading and parsing what it found."""

    def __init__(self, ctx: CallContext, path: str) -> None:
        self.ctx = ctx
        self.walker = Walker(ctx, path, "code_map")
        self.prefix = path.rstrip("/") or "/"
        budget = ctx.limits.search_seconds
        started = time.monotonic()
        #: When the call must have answered, and when reading and parsing stop (the
        #: rest of the budget is the ranking's).
        self.deadline = started + budget
        self.parse_deadline = started + budget * PARSE_SHARE
        self.walked = Walked()
        self.parsed = 0
        self.cached = 0
        #: Names of the sources so far (see NAMES_MAX).
        self.names = 0
        self._run: ParseRun | None = None
        self._sent: dict[int, _Sent] = {}
        #: The map's sources, by their order (focus files first, then the walk's).
        self.sources: dict[int, Source] = {}

    def out_of_time(self) -> bool:
        return time.monotonic() > self.parse_deadline

    def _shown(self, rel: tuple[str, ...]) -> tuple[str, str]:
        """A file's path as the text shows it and as structured content carries it."""
        relative = "/".join(rel)
        if self.prefix == "/":
            return f"/{quote_path(relative)}", f"/{structured_path(relative)}"
        return f"{self.prefix}/{quote_path(relative)}", f"{self.prefix}/{structured_path(relative)}"

    # -- the walk -------------------------------------------------------------------------

    def walk(self) -> list[_Found]:
        """The source files below the start, depth first in byte order."""
        found: list[_Found] = []
        try:
            for rel, language in self._files():
                if len(found) == FILE_CAP:
                    self.walked.stopped = f"stopped at {FILE_CAP:,} source files: {_NARROW}"
                    break
                found.append(_Found(rel, language))
        except LimitExceeded:
            entries = self.ctx.limits.walk_entries
            self.walked.stopped = f"stopped after visiting {entries:,} entries: {_NARROW}"
        self.walked.unreadable_dirs = len(self.walker.unreadable)
        return found

    def _files(self) -> Iterator[tuple[tuple[str, ...], str]]:
        """Each directory's source files when it is read (so depth first, a
        directory's files before what its subdirectories hold, in byte order); a
        virtualenv, a skipped or hidden directory and one at the depth limit are
        not entered."""
        depth = self.ctx.limits.tree_depth
        walker = self.walker
        if self.out_of_time():
            self._timed_out()
            return
        for step in walker:
            if step.kind == ENTRY and step.entry is not None and step.entry.kind == "directory":
                name = step.rel[-1]
                if name in SKIPPED_DIRS or name.startswith("."):
                    walker.prune()
                elif len(step.rel) >= depth:
                    self.walked.too_deep = depth
                    walker.prune()
                elif self.out_of_time():
                    self._timed_out()
                    return
            elif step.kind == ENTER:
                if step.rel and any(entry.name in _VIRTUALENV_MARKS for entry in step.entries):
                    walker.prune()  # a virtualenv: nothing of it is mapped
                    continue
                for name, kind, _ in step.entries:
                    if kind != "file":
                        continue
                    language = language_of(name)
                    if language is None:
                        self.walked.not_code += 1
                    else:
                        yield (*step.rel, name), language

    def _timed_out(self) -> None:
        seconds = self.ctx.limits.search_seconds
        self.walked.stopped = f"stopped after {seconds:g} s: {_NARROW}"

    # -- reading and parsing --------------------------------------------------------------

    def _parse(self, order: int, language: str, data: bytes, sent: _Sent) -> None:
        """Send ``data`` to a helper; its answer comes back through :meth:`_take`."""
        if self._run is None:
            pool = shared(self.ctx.limits.search_seconds)
            self._run = ParseRun(pool, self.parse_deadline)
        self._sent[order] = sent
        self._take(self._run.submit(order, language, data))

    def _take(self, outcomes: list[tuple[int, Outcome]]) -> None:
        for order, outcome in outcomes:
            sent = self._sent.pop(order)
            if isinstance(outcome, Parsed):
                self.parsed += 1
                if sent.key is not None:
                    self.ctx.parses.put(sent.key, outcome)
                self._add(order, Source(sent.shown, sent.exact, outcome, focus=sent.focus))
            elif outcome is Unparsed.FAILED:
                self.walked.parser_failed += 1
            else:
                self.walked.unparsed += 1

    def _add(self, order: int, source: Source) -> None:
        self.sources[order] = source
        self.names += len(source.parsed.definitions) + len(source.parsed.references)

    def finish(self) -> list[Source]:
        """Every source, in order, once the helpers answered or the deadline passed."""
        if self._run is not None:
            self._take(self._run.finish())
        return [self.sources[order] for order in sorted(self.sources)]

    def parse_open(
        self, f: OpenFile, language: str, order: int, shown: str, exact: str, *, focus: bool
    ) -> None:
        """What the open file ``f`` defines and uses: from the cache when its ``fstat``
        is known, else from a helper; counted if it is too large or binary."""
        if f.stat.st_size > FILE_BYTES:
            self.walked.too_large += 1
            return
        key = parse_key(language, f.stat)
        known = self.ctx.parses.get(key)
        if known is not None:
            self.cached += 1
            self._add(order, Source(shown, exact, known, focus=focus))
            return
        with self.walker.tree.ctx.watch.step(shown):
            data = f.file.read(FILE_BYTES + 1)
        if len(data) > FILE_BYTES:
            self.walked.too_large += 1
            return
        if b"\0" in data[:_BINARY_PROBE]:
            self.walked.binary += 1
            return
        unchanged = parse_key(language, os.fstat(f.fd)) == key  # while it was read
        sent = _Sent(order, shown, exact, key if unchanged else None, focus)
        self._parse(order, language, data, sent)

    def read(self, found: list[_Found], focus: set[tuple[int, int]]) -> None:
        """Read the walk's files (the focus files among them were mapped already)."""
        progress = self.ctx.progress
        visited = self.walker.visited  # progress goes on from the walk's count
        first = len(focus)
        for index, item in enumerate(found):
            if self.out_of_time():
                self.walked.unparsed += len(found) - index
                break
            if self.names >= NAMES_MAX:
                self.walked.stopped = f"stopped at {NAMES_MAX:,} names: {_NARROW}"
                break
            shown, exact = self._shown(item.rel)
            try:
                with self.walker.tree.open_file(item.rel, shown) as f:
                    if (f.stat.st_dev, f.stat.st_ino) in focus:
                        continue  # mapped once, as the focus file it is
                    self.parse_open(f, item.language, first + index, shown, exact, focus=False)
            except ParserUnavailable:
                raise
            except SandboxError:  # vanished, replaced, unreadable meanwhile
                self.walked.unreadable += 1
                continue
            progress(visited + index + 1, visited + len(found), "entries visited, files mapped")

    def focus_files(self, paths: list[str]) -> set[tuple[int, int]]:
        """Map the focus files, each opened once from its own path (errors name it);
        their device and inode numbers."""
        focus: set[tuple[int, int]] = set()
        for path in dict.fromkeys(paths):
            name = path.rstrip("/").rpartition("/")[2]
            language = language_of(name)
            with self.ctx.sandbox.open_file(path) as f:
                identity = (f.stat.st_dev, f.stat.st_ino)
                if language is not None and identity not in focus:
                    order = len(focus)
                    self.parse_open(f, language, order, quote_path(path), path, focus=True)
                focus.add(identity)
        return focus


def code_map(
    ctx: CallContext,
    /,
    path: str = ".",
    *,
    query: str | None = None,
    focus: list[str] | None = None,
    maxChars: int = DEFAULT_CHARS,
) -> ToolResult:
    if not MIN_CHARS <= maxChars <= MAX_CHARS:
        raise InvalidArgument(
            f"maxChars must be between {MIN_CHARS} and {MAX_CHARS}, got {maxChars}"
        )
    if focus is not None and len(focus) > _FOCUS_MAX:
        raise InvalidArgument(f"focus may name at most {_FOCUS_MAX} files")
    if query is not None and len(query) > _QUERY_MAX:
        raise InvalidArgument(f"query may be at most {_QUERY_MAX} characters long")
    mapper = _Mapper(ctx, path)
    focused = mapper.focus_files(focus or [])
    found = mapper.walk()
    mapper.read(found, focused)
    sources = mapper.finish()
    result = build_map(
        sources, mapper.walked, query=query, max_chars=maxChars, deadline=mapper.deadline
    )
    walked = mapper.walked
    stopped = walked.stopped or (RANKED_IN_PART if result.cut else None)
    stopped = stopped if stopped or not walked.unparsed else "out of time"
    return ToolResult(
        text=result.text,
        structured={
            **result.structured,
            "filesSkipped": {
                "notSourceCode": walked.not_code,
                "tooLarge": walked.too_large,
                "binary": walked.binary,
                "unreadable": walked.unreadable,
                "notParsedInTime": walked.unparsed,
                "parserFailed": walked.parser_failed,
            },
            "unreadableDirectories": walked.unreadable_dirs,
            "parsed": mapper.parsed,
            "fromCache": mapper.cached,
            "complete": stopped is None,
            "stoppedReason": stopped,
        },
    )


CODE_MAP = ToolSpec(
    name="code_map",
    title="Code Map",
    description="A ranked skeleton of the code below 'path': the files that matter most "
    "first, each as 'path:' followed by the 1-based numbers and text of its definition lines "
    "(functions, classes, types, ...; never bodies), '⋮' between lines that are not adjacent, "
    "and a bracketed summary last. Call it before reading: the line numbers pair with "
    "read_text_file's offset. Files are ranked by how much the rest of the tree refers to "
    "what they define (PageRank); 'query' (words of your question) and 'focus' (files you "
    "already have in view; they steer the map and are not shown) steer it. Python, "
    "JavaScript/TypeScript, Go, Rust, Java, C/C++, Ruby and shell. maxChars bounds the "
    "answer: files lose their least-referenced lines first, then whole files are left out, "
    "never cut. Skips .git, node_modules, target, build, dist, vendor, __pycache__, "
    "virtualenvs and dot-directories; reads at most 5,000 files of at most 1 MiB; symlinks "
    "are never followed. Only works within allowed directories.",
    params=(
        Param(
            "path",
            {"type": "string", "minLength": 1, "default": "."},
            "Directory to map (default: the first allowed directory).",
        ),
        Param(
            "query",
            {"type": "string"},
            "Words of the question at hand (at most 1,000 characters); files and definitions "
            "whose names match come first.",
        ),
        Param(
            "focus",
            STRING_LIST,
            "Files already in view (at most 100): what they refer to ranks higher; they are "
            "not shown.",
        ),
        Param(
            "maxChars",
            {
                "type": "integer",
                "minimum": MIN_CHARS,
                "maximum": MAX_CHARS,
                "default": DEFAULT_CHARS,
            },
            f"Longest answer, in characters ({MIN_CHARS} to {MAX_CHARS}).",
        ),
    ),
    annotations=READ_ONLY,
    handler=code_map,
)

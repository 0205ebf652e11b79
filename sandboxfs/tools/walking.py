"""Tools that walk a tree: search_files and directory_tree.

Walks go through directory descriptors, reopening each directory beneath its
allowed directory and never following a symlink.  They are bounded: each
directory read is one timed step, at most ``walk_entries`` entries are visited
(excluded entries do not count, and are never read), and at most
``tree_depth`` levels are descended.  A subdirectory that cannot be read (its
permissions, gone or replaced meanwhile, an I/O error) is noted with its code and
the walk goes on; only the start directory's failure is the call's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final, cast

from sandboxfs.fs import (
    ENTER,
    ENTRY,
    LEAVE,
    RUN,
    TOO_DEEP,
    TOO_MANY,
    UNREADABLE,
    Bounds,
    Entry,
    Glob,
    GlobError,
    InvalidArgument,
    LimitExceeded,
    Rel,
    SandboxError,
    Step,
    TreeWalk,
    compile_glob,
    quote_name,
    quote_names,
    structured_names,
    structured_path,
    traversal,
)
from sandboxfs.tools.format import display_base
from sandboxfs.tools.spec import (
    READ_ONLY,
    STRING_LIST,
    CallContext,
    Param,
    ToolResult,
    ToolSpec,
    path_param,
)
from sandboxfs.tools.treejson import tree_json

_NARROW: Final = "narrow path, or name the large or slow folder in excludePatterns"


class Walker:
    """The steps of a bounded walk below a start directory (see
    :meth:`~sandboxfs.fs.walks.TreeWalk.traversal`), with the tool's bounds turned
    into its answers: a directory that cannot be read is noted (``unreadable``) and
    the walk goes on; the entry cap, or the depth limit, ends the call with
    LimitExceeded.  With ``depth`` (directory_tree's), a directory that many levels
    down is a ``TOO_DEEP`` step, not read."""

    def __init__(
        self,
        ctx: CallContext,
        path: str,
        tool: str,
        exclude: Callable[[str], bool] | None = None,
        *,
        tree: TreeWalk | None = None,
        depth: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.path = path
        self.tool = tool
        self.exclude = exclude
        self.depth = depth
        #: The one resolution of ``path`` everything below is read through.
        self.tree: TreeWalk = tree if tree is not None else ctx.sandbox.walk(path)
        #: The start as an absolute path the client can reuse (never a resolved one).
        self.base = display_base(path, ctx.sandbox.resolver.allow.base, ctx.home).rstrip("/")
        self.unreadable: list[tuple[str, str]] = []
        limits = ctx.limits
        levels = limits.tree_depth if depth is None else min(depth, limits.tree_depth)
        self.walk = traversal(
            self.tree,
            Bounds(levels, limits.walk_entries),
            self.display,
            None if exclude is None else self._kept,
            self._check,
        )

    @property
    def visited(self) -> int:
        """Entries visited so far (excluded entries are not counted)."""
        return self.walk.visited

    def display(self, rel: tuple[str, ...]) -> str:
        """Where ``rel`` is, for the client: below the path it gave, names quoted."""
        return "/".join((self.base, *map(quote_name, rel))) if rel else self.path

    def _kept(self, rel: tuple[str, ...], entries: list[Entry]) -> list[Entry]:
        assert self.exclude is not None
        exclude = self.exclude
        prefix = "/".join(rel) + "/" if rel else ""
        return [entry for entry in entries if not exclude(prefix + entry.name)]

    def prune(self) -> None:
        """Keep out of the directory of the ``ENTRY`` step just given (or skip the
        entries of the ``ENTER`` step just given)."""
        self.walk.prune()

    def __iter__(self) -> Iterator[Step[Rel, Entry]]:
        """The walk's steps (``UNREADABLE`` ones noted, the bounds raised by
        :meth:`_check` before they are given)."""
        return iter(self.walk)

    def _check(self, step: Step[Rel, Entry]) -> None:
        kind = step.kind
        limits = self.ctx.limits
        if kind in (ENTER, TOO_MANY):
            self.ctx.progress(self.walk.visited, None, "entries visited")
            if kind == TOO_MANY:
                raise LimitExceeded(
                    f"{self.tool} stopped after visiting {limits.walk_entries} entries "
                    f"below {self.path}; {_NARROW}"
                )
        elif kind == UNREADABLE:  # EACCES, gone, replaced, EIO: noted, the walk goes on
            code = step.error.code if isinstance(step.error, SandboxError) else "EIO"
            self.unreadable.append((self.display(step.rel), code))
        elif kind == TOO_DEEP and (self.depth is None or len(step.rel) < self.depth):
            raise LimitExceeded(
                f"{self.tool} stopped: the tree is deeper than {limits.tree_depth} "
                f"levels below {self.path}; {_NARROW}"
            )


def _compile(patterns: list[str]) -> list[Glob]:
    try:
        return [compile_glob(p) for p in patterns]
    except GlobError as exc:
        raise InvalidArgument(f"Invalid glob pattern: {exc}") from None


def _excluder(patterns: list[str]) -> Callable[[str], bool] | None:
    globs = _compile(patterns)
    if not globs:
        return None
    return lambda rel: any(g.matches(rel) for g in globs)


#: Glob steps one search_files call remembers (bounded memory on huge trees).
_REMEMBERED_STEPS: Final = 65_536


class _Frame:
    """One directory being visited by search_files: its entries' names as shown
    (checked once per directory), in order, the glob's state there, and its path as
    shown.  ``plain``: no name on the way holds bytes that are not UTF-8, so
    structured content carries paths as they are."""

    __slots__ = ("known", "names", "plain", "rel", "relative", "shown", "state")

    def __init__(
        self, rel: Rel, entries: Sequence[Entry], state: int, shown: str, *, plain: bool
    ) -> None:
        names = [entry.name for entry in entries]
        self.names: Iterator[str] = iter(quote_names(names))
        self.rel = rel
        self.relative = "/".join(rel) + "/" if rel else ""
        self.state = state
        self.shown = shown
        self.plain = plain and structured_names(names) is names
        #: The glob's steps from this state, remembered by name.
        self.known: dict[str, int] = {}


class _Matching:
    """search_files' walk: depth-first, pre-order (a directory's contents come right
    after it); the glob advances name by name, and below a directory whose state is
    0 nothing can match (the walk is kept out of it).  A step is pure and names
    repeat across a tree (__init__.py, index.js): each is remembered, per state, up
    to _REMEMBERED_STEPS in all."""

    def __init__(self, matcher: Glob, walker: Walker) -> None:
        self.matcher = matcher
        self.walker = walker
        self.prune = not matcher.negated
        self.matches: list[str] = []  # as shown: names quoted where they need it
        self.exact: list[str] = []  # as structured content carries them
        self.steps: dict[int, dict[str, int]] = {}
        self.remembered = 0
        self.frames: list[_Frame] = []
        # The glob's state, and the path as shown, of the directory entered next.
        self.state, self.shown = matcher.start(), walker.base + "/"

    def walk(self) -> None:
        for visit in self.walker:
            what = visit[0]
            if what == RUN:
                self.visit(visit.entries)
            elif what == ENTRY:  # a subdirectory
                self.visit((cast("Entry", visit.entry),))
            elif what == ENTER:
                frames = self.frames
                plain = not frames or frames[-1].plain
                frame = _Frame(visit.rel, visit.entries, self.state, self.shown, plain=plain)
                frame.known = self.steps.setdefault(self.state, {})
                frames.append(frame)
            elif what == LEAVE:
                self.frames.pop()

    def visit(self, entries: Sequence[Entry]) -> None:
        """Match the next ``entries`` of the directory being visited."""
        frame = self.frames[-1]
        known, state, base = frame.known, frame.state, self.walker.base
        step, accepts = self.matcher.step, self.matcher.accepts
        remembered = self.remembered
        # (frame.names holds the names of the rest of the directory: it outlasts entries.)
        for (name, kind, _), shown_name in zip(entries, frame.names, strict=False):
            here = known.get(name, -1)
            if here < 0:
                here = step(state, name) if state else 0
                if remembered < _REMEMBERED_STEPS:
                    known[name] = here
                    remembered += 1
            if accepts(here):
                full = frame.shown + shown_name
                if kind != "symlink" or self.walker.tree.link_stays_inside(
                    (*frame.rel, name), full
                ):
                    self.matches.append(full)
                    relative = frame.relative + name
                    shown = relative if frame.plain else structured_path(relative)
                    self.exact.append(f"{base}/{shown}")
            if kind == "directory":
                if here or not self.prune:
                    self.state, self.shown = here, frame.shown + shown_name + "/"
                else:
                    self.walker.prune()
        self.remembered = remembered


def search_files(
    ctx: CallContext,
    /,
    path: str,
    pattern: str,
    *,
    excludePatterns: list[str] | None = None,
) -> ToolResult:
    matcher = _compile([pattern])[0]
    walker = Walker(ctx, path, "search_files", _excluder(excludePatterns or []))
    search = _Matching(matcher, walker)
    search.walk()
    matches, exact = search.matches, search.exact
    text = "\n".join(matches) if matches else "No matches found"
    if walker.unreadable:
        note = "\n".join(f"  {p} ({code})" for p, code in walker.unreadable)
        text += (
            f"\n\nSearch incomplete: {len(walker.unreadable)} "
            f"director{'y' if len(walker.unreadable) == 1 else 'ies'} could not be read:\n{note}"
        )
    return ToolResult(
        text=text,
        structured={
            "matches": exact,
            "unreadable": [{"path": p, "code": c} for p, c in walker.unreadable],
            "visited": walker.visited,
        },
    )


def _tree_excluder(patterns: list[str]) -> Callable[[str], bool] | None:
    """directory_tree's rule: a pattern without '*' also matches at any depth and
    everything below it (``node_modules``, ``.git``, ``lib/deep``)."""
    globs: list[Glob] = []
    for pattern in patterns:
        globs.extend(_compile([pattern]))
        if "*" not in pattern:
            globs.extend(_compile([f"**/{pattern}", f"**/{pattern}/**"]))
    if not globs:
        return None
    return lambda rel: any(g.matches(rel) for g in globs)


def directory_tree(
    ctx: CallContext,
    /,
    path: str,
    *,
    excludePatterns: list[str] | None = None,
    depth: int | None = None,
) -> ToolResult:
    walker = Walker(ctx, path, "directory_tree", _tree_excluder(excludePatterns or []), depth=depth)
    text = tree_json(walker, lambda error: walker.unreadable[-1][1])
    # The reference's structuredContent: the same JSON text (a client parses it once;
    # a nested copy would cost the server a second serialization of the whole tree).
    return ToolResult(text=text, structured={"content": text})


_EXCLUDES = Param(
    "excludePatterns",
    {**STRING_LIST, "default": []},
    "Glob patterns of entries to skip (relative to path). An excluded entry is never read, "
    "so excluding a slow or huge folder keeps the walk out of it.",
)

SEARCH_FILES = ToolSpec(
    name="search_files",
    title="Search Files",
    description="Recursively find files and directories by name with a glob matched, "
    "case-sensitively, against each entry's path relative to 'path': '*.ext' matches entries "
    "directly under path, '**/*.ext' or '**/name' at any depth ('*' never crosses '/'). Never "
    "reads file contents. Returns full paths. Symlinks are listed, not followed. Directories "
    "that cannot be read are listed in a note after the matches. Stops with an error after "
    "100,000 visited entries or a directory read slower than 15 s. Only searches within "
    "allowed directories.",
    params=(
        path_param("Directory to search from."),
        Param("pattern", {"type": "string"}, "Glob to match, e.g. '**/*.py'.", required=True),
        _EXCLUDES,
    ),
    annotations=READ_ONLY,
    handler=search_files,
)

DIRECTORY_TREE = ToolSpec(
    name="directory_tree",
    title="Directory Tree",
    description="A recursive tree of a directory as 2-space-indented JSON: each entry has "
    "'name', 'type' ('file' or 'directory') and, for directories, 'children' (empty for an "
    "empty directory; omitted at the last level when 'depth' is set, since that level is not "
    "read). Symlinks are shown as files and not followed. An exclude pattern without '*' "
    "matches that name at any depth. Stops with an error after 100,000 visited entries. Only "
    "works within allowed directories.",
    params=(
        path_param("Directory to start from."),
        _EXCLUDES,
        Param(
            "depth",
            {"type": "integer", "minimum": 1},
            "How many levels to descend: 1 lists only the entries directly in path. Omitted, "
            "the whole tree.",
        ),
    ),
    annotations=READ_ONLY,
    handler=directory_tree,
)

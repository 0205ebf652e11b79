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

from collections.abc import Callable, Iterator
from typing import Final

from sandboxfs.fs import (
    Entry,
    Glob,
    GlobError,
    InvalidArgument,
    LimitExceeded,
    SandboxError,
    TreeWalk,
    compile_glob,
    quote_name,
    quote_names,
    structured_names,
    structured_path,
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
    """Reads directories below a start directory, counting what it visits."""

    def __init__(
        self,
        ctx: CallContext,
        path: str,
        tool: str,
        exclude: Callable[[str], bool] | None = None,
        *,
        tree: TreeWalk | None = None,
    ) -> None:
        self.ctx = ctx
        self.path = path
        self.tool = tool
        self.exclude = exclude
        #: The one resolution of ``path`` everything below is read through.
        self.tree: TreeWalk = tree if tree is not None else ctx.sandbox.walk(path)
        #: The start as an absolute path the client can reuse (never a resolved one).
        self.base = display_base(path, ctx.sandbox.resolver.allow.base, ctx.home).rstrip("/")
        self.visited = 0
        self.unreadable: list[tuple[str, str]] = []

    def display(self, rel: tuple[str, ...]) -> str:
        """Where ``rel`` is, for the client: below the path it gave, names quoted."""
        return "/".join((self.base, *map(quote_name, rel))) if rel else self.path

    def children(self, rel: tuple[str, ...]) -> list[tuple[str, Entry]] | None:
        """(relative path, entry) for each entry of the directory at ``rel`` that is not
        excluded; None (and a note) if it cannot be read."""
        entries = self.entries(rel)
        if entries is None:
            return None
        prefix = "/".join(rel) + "/" if rel else ""
        return [(prefix + entry.name, entry) for entry in entries]

    def entries(self, rel: tuple[str, ...]) -> list[Entry] | None:
        """The entries of the directory at ``rel`` that are not excluded, in byte
        order; None (and a note) if it cannot be read."""
        limits = self.ctx.limits
        if len(rel) >= limits.tree_depth:
            raise LimitExceeded(
                f"{self.tool} stopped: the tree is deeper than {limits.tree_depth} "
                f"levels below {self.path}; {_NARROW}"
            )
        try:
            entries = self.tree.children(rel, self.display(rel))
        except SandboxError as exc:  # EACCES, gone, replaced, EIO: noted, the walk goes on
            if not rel:
                raise
            self.unreadable.append((self.display(rel), exc.code))
            return None
        if self.exclude is not None:
            exclude = self.exclude
            prefix = "/".join(rel) + "/" if rel else ""
            entries = [entry for entry in entries if not exclude(prefix + entry.name)]
        self.visited += len(entries)
        self.ctx.progress(self.visited, None, "entries visited")
        if self.visited > limits.walk_entries:
            raise LimitExceeded(
                f"{self.tool} stopped after visiting {limits.walk_entries} entries "
                f"below {self.path}; {_NARROW}"
            )
        return entries


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
    """One directory being visited by search_files: its entries, each with its name
    as shown (checked once per directory), the glob's state there, and the
    directory's relative path and path as shown.  ``plain``: no name on the way
    holds bytes that are not UTF-8, so structured content carries paths as they are."""

    __slots__ = ("items", "plain", "rel", "relative", "shown", "state")

    def __init__(
        self,
        rel: tuple[str, ...],
        entries: list[Entry],
        state: int,
        shown: str,
        *,
        plain: bool,
    ) -> None:
        names = [entry.name for entry in entries]
        self.items: Iterator[tuple[Entry, str]] = zip(entries, quote_names(names), strict=True)
        self.rel = rel
        self.relative = "/".join(rel) + "/" if rel else ""
        self.state = state
        self.shown = shown
        self.plain = plain and structured_names(names) is names


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
    matches: list[str] = []  # as shown: names quoted where they need it
    exact: list[str] = []  # as structured content carries them
    base = walker.base
    # Depth-first, pre-order: a directory's contents come right after it.  The glob
    # advances name by name; below a directory whose state is 0 nothing can match.
    prune = not matcher.negated
    # A step is pure and names repeat across a tree (__init__.py, index.js): remember,
    # per state, up to _REMEMBERED_STEPS in all.
    steps: dict[int, dict[str, int]] = {}
    remembered = 0
    step, accepts = matcher.step, matcher.accepts
    pending = [_Frame((), walker.entries(()) or [], matcher.start(), base + "/", plain=True)]
    while pending:
        frame = pending[-1]
        state = frame.state
        known = steps.setdefault(state, {})
        for entry, shown_name in frame.items:  # resumed where it stopped, after a descent
            name, kind, _ = entry
            here = known.get(name, -1)
            if here < 0:
                here = step(state, name) if state else 0
                if remembered < _REMEMBERED_STEPS:
                    known[name] = here
                    remembered += 1
            if accepts(here):
                full = frame.shown + shown_name
                if kind != "symlink" or walker.tree.link_stays_inside((*frame.rel, name), full):
                    matches.append(full)
                    relative = frame.relative + name
                    exact.append(f"{base}/{relative if frame.plain else structured_path(relative)}")
            if kind == "directory" and (here or not prune):
                rel = (*frame.rel, name)
                below = walker.entries(rel)
                if below:
                    shown = frame.shown + shown_name + "/"
                    pending.append(_Frame(rel, below, here, shown, plain=frame.plain))
                    break  # depth first: its contents come next
        else:
            pending.pop()
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
    walker = Walker(ctx, path, "directory_tree", _tree_excluder(excludePatterns or []))
    text = tree_json(
        walker.entries(()) or [], walker.entries, lambda: walker.unreadable[-1][1], depth
    )
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

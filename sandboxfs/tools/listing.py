"""Tools that describe the filesystem without walking it: list_directory,
list_directory_with_sizes, get_file_info, list_allowed_directories."""

from __future__ import annotations

import base64
import operator
import stat
from typing import Any, Final

from sandboxfs.fs import (
    Description,
    Entry,
    kind_of,
    quote_name,
    quote_names,
    quote_path,
    structured_name,
    structured_names,
    structured_path,
)
from sandboxfs.tools.format import format_size, iso_time
from sandboxfs.tools.spec import READ_ONLY, CallContext, Param, ToolResult, ToolSpec, path_param

#: What list_directory writes before a name, by kind letter (Directory.entries).
_MARKS: Final = {"d": "[DIR] ", "f": "[FILE] ", "l": "[FILE] ", "o": "[FILE] "}
#: The structured entry types, by kind letter.
_TYPES: Final = {"d": "directory", "f": "file", "l": "symlink", "o": "other"}


def list_directory(ctx: CallContext, /, path: str, *, withRevision: bool = False) -> ToolResult:
    revision = None
    if withRevision:
        listing = ctx.sandbox.list_dir(path, tree_revision=True)
        names = [e.name for e in listing.entries]
        kinds = "".join(_LETTERS[e.kind] for e in listing.entries)
        revision = listing.revision
    else:  # names and kind letters only: no object per entry
        names, kinds = ctx.sandbox.list_names(path)
    text = "\n".join(map(operator.add, map(_MARKS.__getitem__, kinds), quote_names(names)))
    types = _TYPES
    return ToolResult(
        text=text,
        structured={
            "path": path,
            "entries": [
                {"name": name, "type": types[kind]}
                for name, kind in zip(structured_names(names), kinds, strict=True)
            ],
            "revision": revision,
        },
    )


_LETTERS: Final = {kind: letter for letter, kind in _TYPES.items()}


def list_directory_with_sizes(
    ctx: CallContext, /, path: str, *, sortBy: str = "name", withRevision: bool = False
) -> ToolResult:
    listing = ctx.sandbox.list_dir(path, sizes=True, tree_revision=withRevision)
    assert listing.sizes is not None
    rows = list(zip(listing.entries, listing.sizes, strict=True))
    if sortBy == "size":
        # A directory's own size counts its entries, hidden ones included: under a
        # policy that hides entries, directories sort as empty (by name among them).
        directory_sizes = not listing.counts_withheld

        def key(row: tuple[Entry, int | None]) -> int:
            entry, size = row
            if entry.kind == "directory":
                return -(entry.lstat.st_size if entry.lstat and directory_sizes else 0)
            return 1 if size is None else -size

        rows.sort(key=key)
    lines = []
    files = dirs = total = 0
    shown_names = quote_names([entry.name for entry, _ in rows])
    for (entry, size), name in zip(rows, shown_names, strict=True):
        if entry.kind == "directory":
            dirs += 1
            lines.append(f"[DIR] {name:<30} ")
            continue
        files += 1
        total += size or 0
        shown = "unknown" if size is None else format_size(size)
        lines.append(f"[FILE] {name:<30} {shown:>10}")
    lines += [
        "",
        f"Total: {files} files, {dirs} directories",
        f"Combined size: {format_size(total)}",
    ]
    structured: dict[str, Any] = {
        "path": path,
        "entries": [
            {"name": name, "type": e.kind, "size": s}
            for (e, s), name in zip(rows, structured_names([e.name for e, _ in rows]), strict=True)
        ],
        "totalFiles": files,
        "totalDirectories": dirs,
        "combinedSize": total,
        "revision": listing.revision,
    }
    return ToolResult(text="\n".join(lines), structured=structured)


def _shown_xattrs(attributes: dict[str, bytes]) -> dict[str, str]:
    """Extended attributes as text: UTF-8 as it is, anything else as base64."""
    shown: dict[str, str] = {}
    for name, value in attributes.items():
        try:
            shown[structured_name(name)] = value.decode("utf-8")
        except UnicodeDecodeError:
            shown[structured_name(name)] = "base64:" + base64.b64encode(value).decode("ascii")
    return shown


def _shown_field(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return quote_path(value) if isinstance(value, str) else str(value)


def _link_fields(found: Description) -> dict[str, Any]:
    """Whether the path is itself a symlink, and its text when that leads inside."""
    if not found.is_symlink:
        return {"isSymlink": False}
    if not found.target_inside:
        return {"isSymlink": True, "symlinkTarget": None, "symlinkTargetInside": False}
    text = structured_path(found.link_text) if found.link_text is not None else None
    return {"isSymlink": True, "symlinkTarget": text, "symlinkTargetInside": True}


def get_file_info(ctx: CallContext, /, path: str, *, withRevision: bool = False) -> ToolResult:
    found = ctx.sandbox.describe(path, tree_revision=withRevision)
    info = found.info
    fields: dict[str, Any] = {
        # A symlink leading outside: its own size is the length of an outside path; a
        # directory under a policy that hides entries: its size counts them.
        "size": None if found.size_hidden else info.size,
        "created": iso_time(info.btime_ns),
        "modified": iso_time(info.mtime_ns),
        "accessed": iso_time(info.atime_ns),
        "isDirectory": stat.S_ISDIR(info.mode),
        "isFile": stat.S_ISREG(info.mode),
        "type": kind_of(info.mode),
        "permissions": f"{stat.S_IMODE(info.mode) & 0o777:03o}",
        "hardLinks": found.links,
        "owner": ctx.accounts.user(info.uid),
        "group": ctx.accounts.group(info.gid),
        **_link_fields(found),
    }
    xattrs = _shown_xattrs(found.xattrs)
    lines = [f"{key}: {_shown_field(value)}" for key, value in fields.items() if value is not None]
    if found.counts_withheld:
        lines.append(WITHHELD_NOTE)
    lines += [f"xattr {quote_name(name)}: {quote_name(value)}" for name, value in xattrs.items()]
    revision = found.revision
    if revision is not None:
        lines.append(f"revision: {revision}")
    elif withRevision and found.target_described and stat.S_ISDIR(info.mode):
        lines.append(
            f"revision: not computed (more than {ctx.limits.revision_entries} entries below)"
        )
    return ToolResult(
        text="\n".join(lines),
        structured={"path": path, **fields, "xattrs": xattrs, "revision": revision},
    )


#: What get_file_info says of a directory under a policy that hides entries.
WITHHELD_NOTE = (
    "note: this directory's policy hides entries, so its size is not shown and hardLinks "
    "counts only what is visible (2 + the visible subdirectories)"
)


def _with_revision(what: str) -> Param:
    return Param(
        "withRevision",
        {"type": "boolean", "default": False},
        f"Also return {what} revision in structuredContent, to pass back as "
        "expectedRevision. A directory's revision describes everything below it (a stat "
        "per entry), so it is computed only when asked for, and only for trees within the "
        "server's revision budget.",
    )


def list_allowed_directories(ctx: CallContext, /) -> ToolResult:
    lines = ["Allowed directories:", *ctx.allowed, *ctx.notes]
    structured: dict[str, object] = {"directories": list(ctx.allowed), "notes": list(ctx.notes)}
    if ctx.workspace is not None:  # what each workspace directory is for
        roles = {d: r for d, r in ctx.workspace.roles().items() if d in ctx.allowed}
        lines.extend(f"{directory}: {role}" for directory, role in roles.items())
        structured["roles"] = roles
    return ToolResult(text="\n".join(lines), structured=structured)


LIST_DIRECTORY = ToolSpec(
    name="list_directory",
    title="List Directory",
    description="List the entries of a directory, one per line, each marked [DIR] or [FILE] "
    "(symlinks and special files are [FILE]), in byte order. Only works within allowed "
    "directories.",
    params=(path_param("Path of the directory to list."), _with_revision("the directory's")),
    annotations=READ_ONLY,
    handler=list_directory,
    quick=True,
)

LIST_DIRECTORY_WITH_SIZES = ToolSpec(
    name="list_directory_with_sizes",
    title="List Directory with Sizes",
    description="List the entries of a directory with [DIR]/[FILE] prefixes and file sizes, "
    "then the number of files and directories and their combined size. An entry whose size "
    "cannot be known (unreadable, a dangling symlink, or a symlink leaving the allowed "
    "directories) shows 'unknown' and is left out of the total. Only works within allowed "
    "directories.",
    params=(
        path_param("Path of the directory to list."),
        Param(
            "sortBy",
            {"type": "string", "enum": ["name", "size"], "default": "name"},
            "Sort by name (byte order) or by size (largest first).",
        ),
        _with_revision("the directory's"),
    ),
    annotations=READ_ONLY,
    handler=list_directory_with_sizes,
    quick=True,
)

GET_FILE_INFO = ToolSpec(
    name="get_file_info",
    title="Get File Info",
    description="Metadata of a file or directory without reading it: size, creation, "
    "modification and access times (UTC), type, permissions, owner and group, the number of "
    "hard links (more than 1 means the file has other names), whether it is a symlink (and "
    "its target when that stays inside), extended attributes, and its revision (a "
    "directory's only with withRevision). Under a policy that hides entries, a directory's "
    "size is not shown and its hard links are 2 + its visible subdirectories. Symlinks "
    "inside the allowed directories are followed. Only works within allowed directories.",
    params=(
        path_param("Path of the file or directory."),
        Param(
            "withRevision",
            {"type": "boolean", "default": False},
            "For a directory, also compute its revision (it describes everything below it, "
            "a stat per entry, within the server's revision budget). A file's revision is "
            "always given.",
        ),
    ),
    annotations=READ_ONLY,
    handler=get_file_info,
    quick=True,
)

LIST_ALLOWED_DIRECTORIES = ToolSpec(
    name="list_allowed_directories",
    title="List Allowed Directories",
    description="List the directories this server may access; everything below them is "
    "accessible too. A directory reached through a symlink is listed in both forms. Use it "
    "first to learn where you can work.",
    params=(),
    annotations=READ_ONLY,
    handler=list_allowed_directories,
    touches_filesystem=False,
    quick=True,
)

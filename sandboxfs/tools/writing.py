"""Tools that change the filesystem: write_file, append_file, edit_file,
create_directory, move_file, copy_file."""

from __future__ import annotations

from typing import Any

from sandboxfs.core.errors import InvalidArgument, LimitExceeded
from sandboxfs.fs.outcome import Change
from sandboxfs.fs.revisions import ABSENT, SameBytes, check, content_revision, revision_soon
from sandboxfs.tools.reading import whole_bytes
from sandboxfs.tools.spec import (
    Annotations,
    CallContext,
    Param,
    ToolResult,
    ToolSpec,
    path_param,
)
from sandboxfs.tools.textedit import Edit, EditError, apply_edits, exact_edits_on_bytes
from sandboxfs.tools.unidiff import fenced, unified_diff


def _done(text: str, structured: dict[str, Any], change: Change) -> ToolResult:
    """A change that happened; a step after it that failed (flushing to disk) is said
    too, in the text and as ``warning``, without turning the answer into an error."""
    if change.warning is not None:
        text += f"\nWarning: {change.warning}"
        structured = {**structured, "warning": change.warning}
    return ToolResult(text=text, structured=structured)


def encode_content(content: str, ctx: CallContext) -> bytes:
    """UTF-8 bytes of ``content``, within the write limit."""
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            "content is not valid Unicode (it contains a lone surrogate)"
        ) from None
    if len(data) > ctx.limits.write_bytes:
        raise LimitExceeded(
            f"content is {len(data)} bytes, more than the {ctx.limits.write_bytes} bytes "
            "the server accepts in one call"
        )
    return data


def write_file(
    ctx: CallContext, /, path: str, content: str, *, expectedRevision: str | None = None
) -> ToolResult:
    data = encode_content(content, ctx)
    revision = content_revision(data)  # (the journal, if on, takes it from here)
    change = ctx.sandbox.replace_file(
        path, data, expected=expectedRevision, revision=lambda: revision
    )
    return _done(
        f"Successfully wrote to {path}",
        {"path": path, "size": len(data), "revision": revision},
        change,
    )


def append_file(
    ctx: CallContext, /, path: str, content: str, *, expectedRevision: str | None = None
) -> ToolResult:
    data = encode_content(content, ctx)
    change = ctx.sandbox.append_file(path, data, expected=expectedRevision)
    return _done(
        f"Successfully appended to {path}",
        {"path": path, "appended": len(data), "size": change.size, "revision": change.revision},
        change,
    )


def edit_file(
    ctx: CallContext,
    /,
    path: str,
    edits: list[dict[str, Any]],
    *,
    dryRun: bool = False,
    strict: bool = False,
    replaceAll: bool = False,
    expectedRevision: str | None = None,
) -> ToolResult:
    with ctx.sandbox.open_file(path) as f:
        before = whole_bytes(f, ctx.limits.edit_bytes, path)
    # The old revision is needed only to check or report it; the write below is
    # conditional on the exact bytes read, which is as strong and cheaper.
    seen = content_revision(before) if expectedRevision is not None or dryRun else None
    if seen is not None:
        check(expectedRevision, seen, path)
    wanted = [Edit(e["oldText"], e["newText"]) for e in edits]
    after = exact_edits_on_bytes(before, wanted, strict=strict, replace_all=replaceAll)
    if after is None:  # some edit needs the tolerant rules, or fails: on text
        # surrogateescape keeps bytes that are not UTF-8 exactly as they were.
        original = before.decode("utf-8", "surrogateescape")
        try:
            edited = apply_edits(original, wanted, strict=strict, replace_all=replaceAll)
        except EditError as exc:
            raise InvalidArgument(str(exc)) from None
        try:
            after = edited.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise InvalidArgument(
                "newText is not valid Unicode (it contains a lone surrogate)"
            ) from None
    new_revision = None if dryRun else revision_soon(after)  # hashed meanwhile
    change = Change()
    if not dryRun:
        # Conditional on the bytes just read: a concurrent change is never overwritten.
        change = ctx.sandbox.replace_file(
            path, after, expected=SameBytes(before), revision=new_revision
        )
    diff = unified_diff(before, after, path)
    revision = seen if new_revision is None else new_revision()
    return _done(
        fenced(diff),
        {"path": path, "diff": diff, "dryRun": dryRun, "edits": len(edits), "revision": revision},
        change,
    )


def create_directory(
    ctx: CallContext, /, path: str, *, expectedRevision: str | None = None
) -> ToolResult:
    change = ctx.sandbox.make_dirs(path, expected=expectedRevision)
    return _done(
        f"Successfully created directory {path}",
        {"path": path, "created": change.count > 0, "revision": change.revision},
        change,
    )


def move_file(
    ctx: CallContext,
    /,
    source: str,
    destination: str,
    *,
    expectedRevision: str | None = None,
    expectedDestinationRevision: str | None = None,
) -> ToolResult:
    change = ctx.sandbox.rename(
        source,
        destination,
        expected=expectedRevision,
        expected_destination=expectedDestinationRevision,
    )
    return _done(
        f"Successfully moved {source} to {destination}",
        {"source": source, "destination": destination, "revision": change.revision},
        change,
    )


def copy_file(
    ctx: CallContext,
    /,
    source: str,
    destination: str,
    *,
    expectedRevision: str | None = None,
    expectedDestinationRevision: str | None = None,
) -> ToolResult:
    def copied(done: int, total: int) -> None:
        ctx.progress(done, total, "bytes copied")

    change = ctx.sandbox.copy_file(
        source,
        destination,
        expected=expectedRevision,
        expected_destination=expectedDestinationRevision,
        progress=copied if ctx.wants_progress else None,
    )
    return _done(
        f"Successfully copied {source} to {destination}",
        {
            "source": source,
            "destination": destination,
            "size": change.size,
            "revision": change.revision,
        },
        change,
    )


def delete_file(
    ctx: CallContext,
    /,
    path: str,
    *,
    recursive: bool = False,
    expectedRevision: str | None = None,
) -> ToolResult:
    removed = ctx.sandbox.remove(path, recursive=recursive, expected=expectedRevision).count
    what = "and everything below it" if removed > 1 else ""
    return ToolResult(
        text=f"Successfully deleted {path}" + (f" {what} ({removed} entries)" if what else ""),
        structured={"path": path, "removed": removed, "revision": ABSENT},
    )


_REVISION = Param(
    "expectedRevision",
    {"type": "string", "minLength": 1},
    "Only act if the path still has this revision (from an earlier result's "
    "structuredContent.revision; 'absent' means nothing may be there). On a mismatch "
    "nothing changes and the error says so.",
)
_DESTINATION_REVISION = Param(
    "expectedDestinationRevision",
    {"type": "string", "minLength": 1},
    "Likewise for the destination; since nothing is ever overwritten, only 'absent' can match.",
)

_CONTENT = {"type": "string"}

WRITE_FILE = ToolSpec(
    name="write_file",
    title="Write File",
    description="Create a file or replace an existing file's content completely. The "
    "replacement is atomic: readers see the old or the new content, never a mix, and a "
    "failed write leaves the old file intact. The file keeps its permissions, owner (where "
    "permitted) and extended attributes; a read-only file is refused. A file with other hard "
    "links gets a name of its own: the other names keep the old content. Only works within "
    "allowed directories.",
    params=(
        path_param("Path of the file to write."),
        Param("content", _CONTENT, "The complete new content (UTF-8 text).", required=True),
        _REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=True, destructive=True),
    handler=write_file,
)

APPEND_FILE = ToolSpec(
    name="append_file",
    title="Append to File",
    description="Append text to the end of a file, creating it if it does not exist. The "
    "text is appended exactly as given: no newline is added before or after it. The file is "
    "changed in place; a directory or other non-regular file is refused, and so is a file "
    "with more than one hard link (the change would also appear at its other names). Only "
    "works within allowed directories.",
    params=(
        path_param("Path of the file to append to."),
        Param("content", _CONTENT, "Text to append, exactly as given.", required=True),
        _REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=False, destructive=False),
    handler=append_file,
)

_EDITS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "oldText": {
                "type": "string",
                "description": "Text to find: exactly, or as whole lines equal once leading "
                "and trailing whitespace is ignored. Line endings never matter.",
            },
            "newText": {"type": "string", "description": "Text to put in its place."},
        },
        "required": ["oldText", "newText"],
        "additionalProperties": False,
    },
}

EDIT_FILE = ToolSpec(
    name="edit_file",
    title="Edit File",
    description="Make selective edits to a text file and return a git-style diff. Each "
    "oldText must match the file exactly (line endings never matter) or, failing that, as a "
    "run of whole lines equal once leading and trailing whitespace is ignored; each "
    "replacement line then takes the indentation of the line it replaces. Edits apply in "
    "order; if any edit has no match, none is applied and the error shows the closest lines. "
    "The file keeps its line endings (LF or CRLF). Use dryRun to preview. Only works within "
    "allowed directories.",
    params=(
        path_param("Path of the file to edit."),
        Param("edits", _EDITS, "Edits to apply, in order.", required=True),
        Param(
            "dryRun",
            {"type": "boolean", "default": False},
            "Preview the diff without changing the file.",
        ),
        Param(
            "strict",
            {"type": "boolean", "default": False},
            "Match oldText byte for byte (CRLF included) and require exactly one occurrence.",
        ),
        Param(
            "replaceAll",
            {"type": "boolean", "default": False},
            "Replace every byte-for-byte occurrence of oldText (at least one is required).",
        ),
        _REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=False, destructive=True),
    handler=edit_file,
)

CREATE_DIRECTORY = ToolSpec(
    name="create_directory",
    title="Create Directory",
    description="Create a directory, with any missing parents, or succeed silently if it "
    "already exists. Only works within allowed directories.",
    params=(path_param("Path of the directory to create."), _REVISION),
    annotations=Annotations(read_only=False, idempotent=True, destructive=False),
    handler=create_directory,
)

MOVE_FILE = ToolSpec(
    name="move_file",
    title="Move File",
    description="Move or rename a file or directory. Fails if the destination exists: it "
    "never replaces anything. A symlink is moved as a link. Across filesystems a regular file "
    "is copied (with its permissions and modification time) and then removed; a directory "
    "cannot be moved across filesystems. Both paths must be within allowed directories.",
    params=(
        Param("source", {"type": "string", "minLength": 1}, "What to move.", required=True),
        Param(
            "destination", {"type": "string", "minLength": 1}, "Where to move it.", required=True
        ),
        _REVISION,
        _DESTINATION_REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=False, destructive=True),
    handler=move_file,
)

COPY_FILE = ToolSpec(
    name="copy_file",
    title="Copy File",
    description="Copy one regular file to a new path, without its content passing through "
    "the conversation. Never overwrites: fails if the destination exists. Keeps permissions "
    "(never setuid/setgid) and modification time; a directory or special file is refused; a "
    "failed copy leaves nothing behind. Both paths must be within allowed directories.",
    params=(
        Param("source", {"type": "string", "minLength": 1}, "The file to copy.", required=True),
        Param(
            "destination",
            {"type": "string", "minLength": 1},
            "Where to create the copy.",
            required=True,
        ),
        _REVISION,
        _DESTINATION_REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=True, destructive=False),
    handler=copy_file,
)

DELETE_FILE = ToolSpec(
    name="delete_file",
    title="Delete File",
    description="Delete a file, a symlink (the link itself, never its target), or an empty "
    "directory; a non-empty directory only with recursive, which removes everything below "
    "it without following any symlink. There is no undo. An allowed directory itself cannot "
    "be deleted. Only works within allowed directories.",
    params=(
        path_param("Path to delete."),
        Param(
            "recursive",
            {"type": "boolean", "default": False},
            "Also delete a non-empty directory and everything below it.",
        ),
        _REVISION,
    ),
    annotations=Annotations(read_only=False, idempotent=True, destructive=True),
    handler=delete_file,
)

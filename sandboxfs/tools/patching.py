"""apply_patch: changes to several files in one call, made all or none.

The changes come as a unified diff (``patch``: what ``git diff`` and most agents
write; see :mod:`sandboxfs.tools.patchparse`), as a list of files (``files``: per
file the ``edits`` of edit_file, a whole new ``content``, ``delete`` or
``moveTo``, each with an optional ``expectedRevision``), or both.  Every file is
read once (through the chokepoint, like any read) and its new content worked out
before anything changes: a hunk or edit that does not fit, a revision that does
not match, a file named twice, is refused with nothing done.  The change itself
is :func:`sandboxfs.fs.patches.apply`: all files or none, journaled as one change
when the journal is on.  ``dryRun`` returns the combined diff and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.core.errors import InvalidArgument, NotFound, SandboxError
from sandboxfs.fs.patches import FileChange
from sandboxfs.fs.revisions import ABSENT, content_revision
from sandboxfs.tools.patchparse import FilePatch, PatchError, apply_hunks, parse_patch
from sandboxfs.tools.reading import whole_bytes
from sandboxfs.tools.spec import Annotations, CallContext, Param, ToolResult, ToolSpec
from sandboxfs.tools.textedit import Edit, EditError, apply_edits, exact_edits_on_bytes
from sandboxfs.tools.unidiff import fenced, unified_diff

JSON = dict[str, Any]

#: How far a hunk may be placed from the line it states, unless maxOffset says.
DEFAULT_OFFSET: Final = 50
MAX_OFFSET: Final = 100_000
#: Most files one patch may change.
MAX_FILES: Final = 1000


@final
@dataclass(frozen=True, slots=True)
class Planned:
    """One file of the patch, worked out: what it holds, what it will hold."""

    path: str
    old: bytes | None
    new: bytes | None
    to: str | None = None

    @property
    def action(self) -> str:
        if self.to is not None:
            return "moved"
        if self.old is None:
            return "created"
        return "deleted" if self.new is None else "modified"


def _read(ctx: CallContext, path: str) -> bytes | None:
    """What ``path`` holds (None: nothing is there)."""
    try:
        with ctx.sandbox.open_file(path) as f:
            return whole_bytes(f, ctx.limits.edit_bytes, path)
    except NotFound:
        return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")  # bytes that are not UTF-8 kept as they are


def _bytes(text: str, path: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"the new content of {path} is not valid Unicode (a lone surrogate)"
        ) from None


def _check(expected: str | None, data: bytes | None, path: str) -> None:
    if expected is None:
        return
    current = ABSENT if data is None else content_revision(data)
    if expected != current:
        raise SandboxError(
            f"Revision mismatch for {path}: expected {expected}, but it is now {current}; "
            "nothing was changed. Read it again and retry.",
            "ESTALE",
        )


def _from_diff(ctx: CallContext, patch: FilePatch, max_offset: int) -> Planned:
    old_name, new_name = patch.old, patch.new
    name = patch.path
    if old_name is None:  # a new file
        assert new_name is not None
        if _read(ctx, new_name) is not None:
            raise SandboxError(f"EEXIST: the patch creates {new_name}, which exists", "EEXIST")
        return Planned(new_name, None, _bytes(apply_hunks("", patch.hunks, new_name, 0), name))
    old = _read(ctx, old_name)
    if old is None:
        raise NotFound(f"ENOENT: no such file: {old_name} (the patch changes it)")
    text = apply_hunks(_text(old), patch.hunks, old_name, max_offset)
    new = _bytes(text, name)
    if new_name is None:
        if new:
            raise InvalidArgument(
                f"the patch deletes {old_name}, but its hunks do not remove all of it"
            )
        return Planned(old_name, old, None)
    if new_name != old_name:
        return Planned(old_name, old, new if patch.hunks else None, to=new_name)
    return Planned(old_name, old, new)


def _from_file(ctx: CallContext, spec: JSON) -> Planned:
    path = str(spec["path"])
    actions = [k for k in ("edits", "content", "delete") if k in spec]
    if len(actions) > 1:
        raise InvalidArgument(f"{path}: give one of edits, content and delete")
    if spec.get("delete") and "moveTo" in spec:
        raise InvalidArgument(f"{path}: a file cannot be both deleted and moved")
    old = _read(ctx, path)
    _check(spec.get("expectedRevision"), old, path)
    to = spec.get("moveTo")
    if "content" in spec:
        return Planned(path, old, _bytes(str(spec["content"]), path), to=to)
    if old is None:
        raise NotFound(f"ENOENT: no such file: {path}")
    if spec.get("delete"):
        return Planned(path, old, None)
    if "edits" not in spec:
        if to is None:
            raise InvalidArgument(f"{path}: give edits, content, delete or moveTo")
        return Planned(path, old, None, to=to)
    wanted = [Edit(e["oldText"], e["newText"]) for e in spec["edits"]]
    new = exact_edits_on_bytes(old, wanted, strict=False, replace_all=False)
    if new is None:
        try:
            new = _bytes(apply_edits(_text(old), wanted), path)
        except EditError as exc:
            raise InvalidArgument(f"{path}: {exc}") from None
    return Planned(path, old, new, to=to)


def _plan(
    ctx: CallContext, patch: str | None, files: list[JSON] | None, offset: int
) -> list[Planned]:
    plan: list[Planned] = []
    if patch is not None:
        try:
            plan += [_from_diff(ctx, p, offset) for p in parse_patch(patch)]
        except PatchError as exc:
            raise InvalidArgument(str(exc)) from None
    plan += [_from_file(ctx, spec) for spec in files or ()]
    if not plan:
        raise InvalidArgument("give a patch (a unified diff) or files to change")
    if len(plan) > MAX_FILES:
        raise InvalidArgument(f"a patch may change at most {MAX_FILES} files")
    total = sum(len(p.new or b"") for p in plan)
    if total > ctx.limits.edit_bytes:
        raise InvalidArgument(
            f"the patch's new content is {total} bytes, more than the server accepts in one "
            f"call ({ctx.limits.edit_bytes}, --max-edit-bytes)"
        )
    return plan


def _diff(plan: list[Planned]) -> str:
    parts = []
    for item in plan:
        if item.to is not None:
            parts.append(f"Renamed: {item.path} -> {item.to}\n")
            if item.new is not None and item.new != item.old:
                parts.append(unified_diff(item.old or b"", item.new, item.to))
            continue
        parts.append(unified_diff(item.old or b"", item.new or b"", item.path))
    return "".join(parts)


def apply_patch(
    ctx: CallContext,
    /,
    *,
    patch: str | None = None,
    files: list[JSON] | None = None,
    dryRun: bool = False,
    maxOffset: int = DEFAULT_OFFSET,
) -> ToolResult:
    plan = _plan(ctx, patch, files, maxOffset)
    diff = _diff(plan)
    summary = [{"path": p.path, "action": p.action, **({"to": p.to} if p.to else {})} for p in plan]
    if dryRun:
        text = f"The patch would change {len(plan)} files (dry run: nothing was changed).\n"
        return ToolResult(
            text=text + fenced(diff),
            structured={"files": summary, "diff": diff, "dryRun": True},
        )
    changes = [FileChange(p.path, p.old, p.new, p.to) for p in plan]
    entry = ctx.sandbox.apply_changes(changes)
    for item, row in zip(plan, summary, strict=True):
        new = item.new if item.new is not None else (item.old if item.to else None)
        row["revision"] = content_revision(new) if new is not None else ABSENT
    words = ", ".join(f"{p.action} {p.path}" + (f" -> {p.to}" if p.to else "") for p in plan)
    text = f"Applied the patch to {len(plan)} files: {words}.\n"
    return ToolResult(
        text=text + fenced(diff),
        structured={"files": summary, "diff": diff, "dryRun": False, "entry": entry},
    )


_EDIT = {
    "type": "object",
    "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
    "required": ["oldText", "newText"],
    "additionalProperties": False,
}

_FILE = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "description": "The file."},
        "edits": {
            "type": "array",
            "items": _EDIT,
            "description": "Edits as edit_file takes them, applied in order.",
        },
        "content": {"type": "string", "description": "The whole new content (or a new file)."},
        "delete": {"type": "boolean", "description": "Remove the file."},
        "moveTo": {
            "type": "string",
            "minLength": 1,
            "description": "Move (rename) the file there, with any edits or content applied.",
        },
        "expectedRevision": {
            "type": "string",
            "minLength": 1,
            "description": "Only if the file still has this revision ('absent': must not exist).",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}

APPLY_PATCH = ToolSpec(
    name="apply_patch",
    title="Apply Patch",
    description="Change several files in one call, all or nothing: give a unified diff "
    "(patch: what 'git diff' prints, with new, deleted and renamed files) and/or a list of "
    "files (each with edits as edit_file takes them, a whole new content, delete, or moveTo, "
    "and an optional expectedRevision). Every file is checked before the first one changes; "
    "if anything fails, nothing is changed. A hunk must match exactly (line endings aside) "
    "within maxOffset lines of the line it states; a hunk that does not match names the "
    "file and shows the closest lines. Missing directories of new files are made. Use dryRun "
    "to see the combined diff. Only works within allowed directories.",
    params=(
        Param("patch", {"type": "string", "minLength": 1}, "A unified diff."),
        Param(
            "files",
            {"type": "array", "items": _FILE, "minItems": 1},
            "Files to change, each with what to do.",
        ),
        Param(
            "dryRun",
            {"type": "boolean", "default": False},
            "Return the combined diff without changing anything.",
        ),
        Param(
            "maxOffset",
            {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": DEFAULT_OFFSET},
            "How many lines from its stated line a hunk may be found.",
        ),
    ),
    annotations=Annotations(read_only=False, idempotent=False, destructive=True),
    handler=apply_patch,
)

"""Reviewing the change journal: what each record says, in words, and as diffs.

Shared by the ``list_changes`` tool (an agent sees only what it may see now: a
step in a directory it is not served, or at a path the policy hides, is left
out, and a record left with no step is not listed) and the operator's
``sandboxfs journal`` command (which sees everything).  Content shown in a diff
comes from the journal's own copies (what a change replaced, or what a later
change kept) or, for what is still in place, from the file itself, read
through the chokepoint like any read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, final

from sandboxfs.core.allowlist import Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import join
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.revisions import content_revision
from sandboxfs.fs.sandbox import Sandbox
from sandboxfs.tools.format import format_size
from sandboxfs.tools.reading import whole_bytes
from sandboxfs.tools.unidiff import fenced, unified_diff

JSON = dict[str, Any]

#: Whether a place (an allowed directory's real path, the names below it) may be shown.
Visible = Callable[[str, tuple[str, ...]], bool]
#: Most characters of one step's diff; longer ones are cut, and say so.
MAX_DIFF_CHARS: Final = 64 * 1024


def everything(root: str, rel: tuple[str, ...]) -> bool:
    """The operator sees every place."""
    return True


def visible_to(sandbox: Sandbox) -> Visible:
    """What an agent served by ``sandbox`` may see: places in its allowed directories
    that the policy does not hide now."""
    roots: dict[str, Root] = {}
    for root in sandbox.resolver.allow.roots:
        roots.setdefault(root.path, root)

    def visible(root_path: str, rel: tuple[str, ...]) -> bool:
        root = roots.get(root_path)
        return root is not None and not root.policy.verdict(rel).hidden

    return visible


def place(value: JSON) -> str:
    """A step's place as shown: the absolute path it resolved to."""
    rel = tuple(str(n) for n in value["rel"])
    return quote_path(join((str(value["root"]).rstrip("/"), *rel)))


def _rel(value: JSON) -> tuple[str, ...]:
    return tuple(str(n) for n in value["rel"])


def step_visible(step: JSON, visible: Visible) -> bool:
    if not visible(str(step["root"]), _rel(step)):
        return False
    target = step.get("to")
    return target is None or visible(str(target["root"]), _rel(target))


def _size(state: JSON) -> str:
    size = state.get("size")
    return format_size(int(size)) if isinstance(size, int) else "?"


def _describe_removal(before: JSON, where: str) -> str:
    kind = before.get("kind")
    if kind == "directory":
        tree = before.get("tree")
        below = "" if tree is None else f" and {len(tree)} entries below it"
        return f"removed directory {where}{below}"
    if kind == "symlink":
        return f"removed symlink {where} (-> {before.get('target')!r})"
    return f"removed {where} ({_size(before)})"


def describe_step(step: JSON) -> str:
    """One step in words."""
    op = step["op"]
    before, after = step.get("before", {}), step.get("after", {})
    where = place(step)
    words = {
        "move": lambda: f"moved {after.get('kind', 'entry')} {where} to {place(step['to'])}",
        "mkdir": lambda: f"made directory {where}",
        "copy": lambda: f"copied a file to {where} ({_size(after)})",
        "symlink": lambda: f"made symlink {where} -> {after.get('target')!r}",
        "restore": lambda: (
            f"put back directory {where} ({len(after.get('tree') or [])} entries below it)"
        ),
        "remove": lambda: _describe_removal(before, where),
    }
    if op in words:
        text = words[op]()
    elif before.get("kind") == "absent":
        text = f"created {where} ({_size(after)})"
    elif op == "append":
        text = f"appended to {where} ({_size(before)} -> {_size(after)})"
    else:
        text = f"wrote {where} ({_size(before)} -> {_size(after)})"
    if before.get("note"):
        text += f" [{before['note']}]"
    return text


def _when(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@final
@dataclass(frozen=True, slots=True)
class Shown:
    """A record as a reader may see it: the steps it may see."""

    record: JSON
    steps: list[JSON]
    undone_by: int | None


def heading(shown: Shown) -> str:
    record = shown.record
    parts = [f"#{record['id']}", _when(float(record.get("time", 0))), str(record.get("tool"))]
    if record.get("session"):
        parts.append(f"session {record['session']}")
    if record.get("client"):
        parts.append(f"client {quote_path(str(record['client']))}")
    line = "  ".join(parts)
    if record.get("undoes"):
        line += "  (undoes " + ", ".join(f"#{i}" for i in record["undoes"]) + ")"
    state = record.get("state", "done")
    if state == "pending":
        line += "  [in progress: not yet finished]"
    elif state == "rolled-back":
        line += "  [rolled back: it never took effect]"
    if shown.undone_by is not None:
        line += f"  [undone by #{shown.undone_by}]"
    return line


def structured(shown: Shown) -> JSON:
    record = shown.record
    return {
        "id": record["id"],
        "time": _when(float(record.get("time", 0))),
        "tool": record.get("tool"),
        "session": record.get("session"),
        "client": record.get("client"),
        "state": record.get("state", "done"),
        "undoes": record.get("undoes", []),
        "undoneBy": shown.undone_by,
        "partial": record.get("partial"),
        "changes": [
            {"op": step["op"], "path": place(step), "text": describe_step(step)}
            for step in shown.steps
        ],
    }


# -- diffs ---------------------------------------------------------------------------------


Reader = Callable[[str], bytes | None]


def sandbox_reader(sandbox: Sandbox) -> Reader:
    """Reads what is in place now, through ``sandbox`` (None if it cannot be read)."""

    def read(path: str) -> bytes | None:
        try:
            with sandbox.open_file(path) as f:
                return whole_bytes(f, sandbox.limits.edit_bytes, path)
        except SandboxError:
            return None

    return read


def content(store: JournalStore, state: JSON, reader: Reader, where: str) -> bytes | None:
    """The bytes a state stands for: the journal's copy, or the file in place if it
    still holds them; b"" for nothing; None when they are not available."""
    kind = state.get("kind")
    if kind == "absent":
        return b""
    revision = state.get("revision")
    digest = state.get("object") or (
        revision.removeprefix("sha256:") if isinstance(revision, str) else None
    )
    if kind != "file" or digest is None:
        return None
    try:
        kept = store.read_object(digest) if store.has(digest) else None
    except (JournalError, OSError):
        kept = None
    if kept is not None:
        return kept
    data = reader(where)
    return data if data is not None and content_revision(data) == "sha256:" + digest else None


def step_diff(store: JournalStore, step: JSON, reader: Reader, visible: Visible) -> str:
    """A step as a unified diff (or a line saying why there is none)."""
    op = step["op"]
    where = place(step)
    if op == "move":
        return f"(moved: {where} -> {place(step['to'])})\n"
    before, after = step.get("before", {}), step.get("after", {})
    if before.get("kind") == "directory" or after.get("kind") == "directory":
        return _tree_listing(step, visible)
    if before.get("prefix"):  # an append: the bytes before are the start of what it left
        now = content(store, after, reader, where)
        size = int(before.get("size", 0))
        old = now[:size] if now is not None else None
        new = now
    else:
        old = content(store, before, reader, where)
        new = content(store, after, reader, where)
    if old is None or new is None:
        return "(no diff: the content on one side is no longer kept)\n"
    if b"\0" in old[:8192] or b"\0" in new[:8192]:
        return f"(binary content: {len(old)} -> {len(new)} bytes)\n"
    diff = unified_diff(old, new, where)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[diff cut at {MAX_DIFF_CHARS} characters]\n"
    return fenced(diff)


def _tree_listing(step: JSON, visible: Visible) -> str:
    state = step.get("before", {}) if step["op"] == "remove" else step.get("after", {})
    tree = state.get("tree")
    if not tree:
        return ""
    root, top = str(step["root"]), _rel(step)
    lines = []
    for entry in tree:
        rel = tuple(str(n) for n in entry["rel"])
        if not visible(root, (*top, *rel)):
            continue
        mark = {"directory": "[DIR]", "symlink": "[LINK]"}.get(str(entry["kind"]), "[FILE]")
        lines.append(f"  {mark} {quote_path(join(rel))}")
    return "\n".join(lines) + "\n" if lines else ""


def select_shown(
    store: JournalStore,
    visible: Visible,
    *,
    path: tuple[str, tuple[str, ...]] | None = None,
    session: str | None = None,
    entry: int | None = None,
) -> list[Shown]:
    """The records a reader may see, newest first, filtered by a place (and what lies
    below it), a session (or client name) and an id."""
    undone = store.undone()
    found: list[Shown] = []
    for item in store.index():
        if entry is not None and item.id != entry:
            continue
        if session is not None and session not in (item.session, item.client):
            continue
        record = store.record(item.id)
        if record is None:
            continue
        steps = [s for s in record.get("steps", []) if step_visible(s, visible)]
        if not steps:
            continue
        if path is not None and not any(_touches(s, path) for s in steps):
            continue
        found.append(Shown(record, steps, undone.get(item.id)))
    return found


def _touches(step: JSON, path: tuple[str, tuple[str, ...]]) -> bool:
    root, rel = path
    places = [step, step["to"]] if "to" in step else [step]
    return any(
        str(p["root"]) == root and _rel(p)[: len(rel)] == rel for p in places if p is not None
    )


def render(
    shown: list[Shown], store: JournalStore, reader: Reader, visible: Visible, *, diff: bool
) -> str:
    lines: list[str] = []
    for item in shown:
        lines.append(heading(item))
        if item.record.get("partial"):
            lines.append(f"  stopped part-way: {item.record['partial']}")
        for step in item.steps:
            lines.append("  " + describe_step(step))
            if diff:
                text = step_diff(store, step, reader, visible)
                if text:
                    lines.append(text.rstrip("\n"))
    return "\n".join(lines)

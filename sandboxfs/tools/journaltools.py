"""The change journal's tools (served only with ``--journal``): list_changes, undo_changes.

``list_changes`` shows the journal's records newest first, in words and on request
as diffs, leaving out what the agent may not see now (see
:mod:`sandboxfs.tools.changes`).  ``undo_changes`` undoes the last N changes, every
change back to one, or the ones named, through :mod:`sandboxfs.fs.undoing`:
conditional on what each place holds (refused whole, naming the place, when
something changed since), through the agent's own allowed directories and
policy, and journaled itself (undoing an undo redoes).  The journal is held while
the changes to undo are chosen and checked, not while they are made (a change may wait
for the user's yes, ``--ask``): each step is conditional, so a second undo of the same
change is refused.
"""

from __future__ import annotations

from typing import Final

from sandboxfs.core.errors import InvalidArgument, SandboxError, Unsupported
from sandboxfs.fs import undoing
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalplaces import UndoRefused
from sandboxfs.fs.journalrecords import Indexed
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.tools.changes import (
    render,
    sandbox_reader,
    select_shown,
    step_visible,
    structured,
    visible_to,
)
from sandboxfs.tools.spec import (
    READ_ONLY,
    Annotations,
    CallContext,
    Param,
    ToolResult,
    ToolSpec,
)

#: Most records one list_changes answer shows.
MAX_LIMIT: Final = 500


def _journal(ctx: CallContext) -> JournalStore:
    if ctx.journal is None:
        raise Unsupported("this server keeps no change journal (start it with --journal DIR)")
    return ctx.journal


def _journal_failed(exc: JournalError) -> SandboxError:
    return SandboxError(f"The change journal cannot be used: {exc}", "EIO")


def list_changes(
    ctx: CallContext,
    /,
    *,
    path: str | None = None,
    session: str | None = None,
    entry: int | None = None,
    limit: int = 20,
    diff: bool = False,
) -> ToolResult:
    store = _journal(ctx)
    where = None
    if path is not None:
        location = ctx.sandbox.resolver.canonical(path, follow=False)
        where = (location.root.path, location.rel)
    visible = visible_to(ctx.sandbox)
    try:
        shown = select_shown(store, visible, path=where, session=session, entry=entry)
        total = len(shown)
        shown = shown[:limit]
        reader = sandbox_reader(ctx.sandbox)
        text = render(shown, store, reader, visible, diff=diff)
    except JournalError as exc:
        raise _journal_failed(exc) from None
    if not shown:
        text = "No changes recorded" + (" that match" if path or session or entry else "") + "."
    elif total > len(shown):
        text += f"\n[{total - len(shown)} older changes not shown: raise limit to see them]"
    return ToolResult(
        text=text,
        structured={"changes": [structured(s) for s in shown], "total": total},
    )


def _live(store: JournalStore) -> list[Indexed]:
    """Records that can be undone now, newest first: finished, and not undone."""
    undone = store.undone()
    return [item for item in store.index() if item.state == "done" and item.id not in undone]


def _chosen(
    store: JournalStore,
    *,
    count: int | None,
    back_to: int | None,
    entries: list[int] | None,
    session: str | None,
) -> list[int]:
    given = [name for name, v in (("count", count), ("backTo", back_to), ("entries", entries)) if v]
    if len(given) > 1:
        raise InvalidArgument(f"give one of count, backTo and entries, not {' and '.join(given)}")
    live = _live(store)
    if entries and len(entries) > MAX_LIMIT:
        raise InvalidArgument(f"entries names more than {MAX_LIMIT} changes")
    if entries:
        ids = {item.id for item in live}
        for wanted in entries:
            if wanted not in ids:
                known = any(item.id == wanted for item in store.index())
                why = (
                    "is already undone, or was never finished" if known else "is not in the journal"
                )
                raise InvalidArgument(f"change #{wanted} {why}")
        return sorted(set(entries), reverse=True)
    own = [
        item
        for item in live
        if not item.undoes and (session is None or session in (item.session, item.client))
    ]
    if back_to is not None:
        chosen = [item.id for item in own if item.id >= back_to]
    else:
        chosen = [item.id for item in own[: count or 1]]
    if not chosen:
        raise InvalidArgument("there is no change to undo" + (" that matches" if session else ""))
    return chosen


def undo_changes(
    ctx: CallContext,
    /,
    *,
    count: int | None = None,
    backTo: int | None = None,
    entries: list[int] | None = None,
    session: str | None = None,
    dryRun: bool = False,
) -> ToolResult:
    store = _journal(ctx)
    recording = ctx.sandbox.journal
    fs = ctx.sandbox.ctx
    visible = visible_to(ctx.sandbox)
    try:
        with store.locked():
            ids = _chosen(store, count=count, back_to=backTo, entries=entries, session=session)
            records = []
            for entry_id in ids:
                record = store.record(entry_id)
                if record is None:
                    raise InvalidArgument(f"change #{entry_id} is no longer in the journal")
                if not all(step_visible(s, visible) for s in record["steps"]):
                    raise UndoRefused(
                        f"Cannot undo change #{entry_id}: it changed places this session cannot "
                        "see now",
                        "EACCES",
                    )
                records.append(record)
            listed = ", ".join(f"#{r['id']} ({r.get('tool')})" for r in records)
            if dryRun:
                plan = undoing.check(fs, records)
                text = f"Would undo {listed}: {len(plan)} steps; every place still holds what "
                text += "the change left."
                return ToolResult(text=text, structured={"undone": ids, "dryRun": True})
        if recording is None:
            raise Unsupported("this call is not journaled, so it cannot undo")
        # Made without holding the journal (a change may wait for the user's yes, --ask):
        # each step is conditional, so a second undo of the same change is refused.
        recording.undoes = tuple(ids)
        steps = undoing.undo(fs, store, records)
        entry = recording.finish()
    except JournalError as exc:
        raise _journal_failed(exc) from None
    text = f"Undid {listed}: {steps} steps."
    if entry is not None:
        text += f" This undo is change #{entry}: undo it (entries: [{entry}]) to redo."
    return ToolResult(text=text, structured={"undone": ids, "entry": entry, "steps": steps})


_ID = {"type": "integer", "minimum": 1}

LIST_CHANGES = ToolSpec(
    name="list_changes",
    title="List Changes",
    description="List the changes made to files through this server, newest first: each "
    "with its number, time, tool, session and what it changed (created, wrote, appended, "
    "moved, copied, removed), and with diff the content changes as unified diffs. A change "
    "that was undone says by which change. Use the numbers with undo_changes.",
    params=(
        Param(
            "path",
            {"type": "string", "minLength": 1},
            "Only changes to this path or anything below it.",
        ),
        Param("session", {"type": "string", "minLength": 1}, "Only changes by this session."),
        Param("entry", _ID, "Only the change with this number."),
        Param(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20},
            "Most changes to show.",
        ),
        Param("diff", {"type": "boolean", "default": False}, "Show each change as a diff."),
    ),
    annotations=READ_ONLY,
    handler=list_changes,
)

UNDO_CHANGES = ToolSpec(
    name="undo_changes",
    title="Undo Changes",
    description="Undo changes made through this server: the last count changes (default "
    "1), every change back to and including backTo, or the changes numbered in entries "
    "(list_changes shows the numbers). Each file must still hold exactly what the change "
    "left: if anything changed since, nothing is undone and the error names the file. The "
    "undo is itself a change: undo it to redo. Use dryRun to check without changing.",
    params=(
        Param("count", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}, "Undo the last N."),
        Param("backTo", _ID, "Undo this change and every later one."),
        Param(
            "entries",
            {"type": "array", "items": _ID, "minItems": 1},
            "Undo exactly these changes (an undo among them is redone).",
        ),
        Param("session", {"type": "string", "minLength": 1}, "Only changes by this session."),
        Param("dryRun", {"type": "boolean", "default": False}, "Check, but change nothing."),
    ),
    annotations=Annotations(read_only=False, idempotent=False, destructive=True),
    handler=undo_changes,
)

JOURNAL_TOOLS: Final[tuple[ToolSpec, ...]] = (LIST_CHANGES, UNDO_CHANGES)

"""Taking back a patch a crash interrupted, from its intent in the journal.

A patch writes its intent (the record of every change it will make, with what each
replaces) before its first change, and holds a lock on it while it works
(:mod:`sandboxfs.fs.patches`).  An intent found in progress and unlocked is a crash:
:func:`roll_back` undoes each step whose places hold what it would have left, leaves
alone each step that was never made, removes the temporary files the intent names, and
marks the record rolled back.
"""

from __future__ import annotations

import stat
from typing import Any

from sandboxfs.core.errors import NotADirectory, NotFound, SandboxError
from sandboxfs.core.names import quote_path
from sandboxfs.core.pathnames import join
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalplaces import find_place, shown
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.undoing import effects, now, perform

JSON = dict[str, Any]


def roll_back(ctx: FsContext, store: JournalStore, record: JSON) -> list[str]:
    """Take back what a patch left in progress (its intent, found after a crash) had
    changed, last first: a step whose places hold what it would have left is undone,
    one whose places still hold what was there before is left alone (it was never
    made), and temporary files it named are removed.  ``ctx`` must not journal.
    Marks the record rolled back; returns what could not be taken back, in words."""
    problems: list[str] = []
    undone = 0
    for step in reversed(record.get("steps", [])):
        try:
            _remove_temp(ctx, step)
            found = [(effect, now(ctx, find_place(ctx, effect.place))) for effect in effects(step)]
            if all(held == effect.expect for effect, held in found):
                perform(ctx, store, step)
                undone += 1
            elif not all(held == effect.leaves for effect, held in found):
                problems.append(
                    f"{shown(step)} holds neither what the patch left nor what was there "
                    "before; left as it is"
                )
        except (SandboxError, JournalError, OSError) as exc:
            problems.append(f"{shown(step)}: {exc}")
    finished = {**record, "state": "rolled-back", "recovered": {"undone": undone}}
    if problems:
        finished["recovered"]["problems"] = problems
    store.replace(finished)
    return problems


def _remove_temp(ctx: FsContext, step: JSON) -> None:
    """A temporary file a patch named for this step, if it is still there."""
    temp = step.get("temp")
    if not isinstance(temp, str):
        return
    place = find_place(ctx, step)
    path = quote_path(join((place.root.path.rstrip("/"), *place.rel[:-1], temp)))
    try:
        parent = ctx.resolver.parent(path)
    except (NotFound, NotADirectory):
        return
    with parent:
        st = parent.lstat()
        if st is not None and stat.S_ISREG(st.st_mode):
            parent.unlink()


def recover(ctx: FsContext, store: JournalStore) -> list[str]:
    """Roll back every patch a crashed process left in progress in ``store``; what it
    did, in words, for the log."""
    said = []
    for record in store.abandoned():
        problems = roll_back(ctx, store, record)
        said.append(
            f"an interrupted patch (change #{record['id']}, by {record.get('tool')}) was "
            "taken back" + (": " + "; ".join(problems) if problems else ": nothing of it remains")
        )
    return said

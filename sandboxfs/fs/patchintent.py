"""What a patch tells the journal and the user before it changes anything: its intent
(every step, with the content each replaces kept, flushed to disk and locked while this
process makes the patch: see :mod:`sandboxfs.fs.patches`) and, with ``--ask``, one
question for the whole patch."""

from __future__ import annotations

import os
import secrets
import stat
from typing import TYPE_CHECKING, Any, final

from sandboxfs.fs import journaling
from sandboxfs.fs.approval import Question, Touched, shown
from sandboxfs.fs.context import FsContext
from sandboxfs.fs.recording import Where
from sandboxfs.fs.revisions import content_revision

if TYPE_CHECKING:
    from sandboxfs.fs.patches import _Planned

JSON = dict[str, Any]


def approve_patch(ctx: FsContext, plan: list[_Planned]) -> None:
    """One question for the whole patch, if any of its places needs approval (--ask)."""
    gate = ctx.approval
    if gate is None:
        return
    places: list[tuple[str, tuple[str, ...]]] = []
    touched = []
    for item in plan:
        source = journaling.where(ctx, item.src)
        places.append((source.root, source.rel))
        change = item.change
        if item.dst is not None:
            target = journaling.where(ctx, item.dst)
            target = Where(target.path, target.root, target.rel + item.mkdirs)
            places.append((target.root, target.rel))
            touched.append(Touched(shown(source), change.expected, None))
            touched.append(Touched(shown(target), None, change.data or change.expected))
        else:
            if item.mkdirs:
                source = Where(source.path, source.root, source.rel + item.mkdirs)
                places.append((source.root, source.rel))
            touched.append(Touched(shown(source), change.expected, change.data))
    gate.check(places, Question(f"apply a patch to {len(plan)} files", tuple(touched)))


@final
class Intent:
    """The journal record of a patch while it is made (none without a journal)."""

    def __init__(self, ctx: FsContext, record: JSON | None) -> None:
        self.ctx = ctx
        self.record = record
        self.entry: int | None = None
        self.fd = -1

    @classmethod
    def begin(cls, ctx: FsContext, plan: list[_Planned]) -> Intent:
        recording = ctx.journal
        for item in plan:
            if item.staged is not None:
                item.temp = f".sandboxfs-{secrets.token_hex(8)}.tmp"
        if recording is None:
            return cls(ctx, None)
        steps = [step for item in plan for step in steps_of(ctx, item)]
        record: JSON = {
            "session": recording.session,
            "client": recording.client,
            "tool": recording.tool,
            "paths": list(recording.paths),
            "steps": steps,
            "state": "pending",
        }
        intent = cls(ctx, record)
        intent.entry, intent.fd = recording.store.begin(record)
        recording.entry = intent.entry
        return intent

    def end(self, state: str) -> None:
        recording = self.ctx.journal
        if recording is None or self.record is None or self.entry is None:
            return
        recording.store.replace({**self.record, "id": self.entry, "state": state})
        if state != "done":
            recording.entry = None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the lock that says "in progress" goes with it
            self.fd = -1


def steps_of(ctx: FsContext, item: _Planned) -> list[JSON]:
    """The journal steps of one file of a patch (as the changes they stand for record
    themselves), with the temporary names a restart must remove."""
    recording = ctx.journal
    assert recording is not None
    change = item.change
    steps: list[JSON] = []
    before: JSON = dict(journaling.ABSENT_STATE)
    if change.expected is not None:
        assert item.old is not None
        before = {
            "kind": "file",
            "size": len(change.expected),
            "mode": stat.S_IMODE(item.old.st_mode),
        }
        before.update(recording.keep_bytes(change.expected))
    source = journaling.where(ctx, item.src)
    if item.mkdirs:
        made = journaling.where(ctx, item.target)
        for depth in range(len(item.mkdirs)):
            rel = made.rel + item.mkdirs[:depth]
            steps.append(
                {
                    "op": "mkdir",
                    "path": item.target.path,
                    "root": made.root,
                    "rel": list(rel),
                    "before": dict(journaling.ABSENT_STATE),
                    "after": {"kind": "directory", "tree": []},
                }
            )
    target = journaling.where(ctx, item.target)
    if item.mkdirs:
        target = Where(target.path, target.root, target.rel + item.mkdirs)
    if change.to is not None and change.data is None and item.staged is None:
        moved: JSON = {"kind": "file", "revision": content_revision(change.expected or b"")}
        return [{"op": "move", **source.to_json(), "to": target.to_json(), "after": moved}]
    if change.to is not None or change.data is None:
        after_removal = dict(journaling.ABSENT_STATE)
        steps.append({"op": "remove", **source.to_json(), "before": before, "after": after_removal})
        before = dict(journaling.ABSENT_STATE)
    if change.data is not None:
        after: JSON = {
            "kind": "file",
            "revision": content_revision(change.data),
            "size": len(change.data),
        }
        step: JSON = {"op": "write", **target.to_json(), "before": before, "after": after}
        if item.temp is not None:
            step["temp"] = item.temp
        steps.append(step)
    return steps

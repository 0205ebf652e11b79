"""Races with an attacker process that changes the tree while the server works."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import trio

from sandboxfs.audit.attacker import AttackerProcess, Tally, prepare
from sandboxfs.audit.cases.base import CaseFn, case, size_pattern
from sandboxfs.audit.harness import (
    CANARY_SIZE,
    CaseError,
    CaseFailed,
    CaseSkipped,
    Fixture,
    Reply,
    Session,
)
from sandboxfs.audit.verdicts import Trials


def _prepared(kind: str) -> Callable[[Fixture], None]:
    return lambda fx: prepare(kind, fx.root, fx.outside, fx.canary)


def race(
    category: str, name: str, kind: str, *, hard_links: bool = False
) -> Callable[[CaseFn], CaseFn]:
    """Register a race: probabilistic (it attacks until the first escape or its budget
    of attempts) and exclusive (one race at a time, so attempts weigh the same)."""
    return case(
        category,
        name,
        _prepared(kind),
        hard_links=hard_links,
        probabilistic=True,
        exclusive=True,
    )


# -- races with an attacker process ----------------------------------------------------------


async def _race(
    kind: str,
    s: Session,
    fx: Fixture,
    calls: list[tuple[str, dict[str, object]]],
    shows_outside: Callable[[Reply], bool] | None = None,
) -> None:
    """Call the tools in turn while the ``kind`` attacker changes the tree, one
    attempt per call, until an escape is seen (outside content in a reply, or an
    outside file changed) or the budget's attempts are made (``s.budget``; its time
    bound only stops a server too slow to get there); a reply for which
    ``shows_outside`` holds is an escape too.  The attempts made go to ``s.trials``.
    An attacker that made no change proves nothing: the case then ends in ERROR."""
    present = [(tool, arguments) for tool, arguments in calls if s.has(tool)]
    if not present:
        raise CaseSkipped(f"the server has none of {', '.join(sorted({t for t, _ in calls}))}")
    planned = s.budget.race_attempts
    before = _outside_state(fx.outside)
    # Through a planted hard link the outside content is the inside file's: seeing it
    # is no escape (changing it is, and the outside state shows that).
    token = None if kind == "plant-hardlink" else fx.token
    with trio.CancelScope(shield=True):  # never an attacker started and not stopped
        attacker = await trio.to_thread.run_sync(AttackerProcess, kind, fx.root, fx.outside)
    made = 0
    escaped = False
    described: tuple[str, Reply] | None = None  # a reply that shows_outside held for
    try:
        deadline = trio.current_time() + s.budget.race_seconds
        while made < planned and trio.current_time() < deadline:
            tool, arguments = present[made % len(present)]
            spelled = json.dumps(arguments).replace("{i}", str(made))
            reply = await s.call(tool, **json.loads(spelled))
            made += 1
            if shows_outside is not None and shows_outside(reply):
                described = (tool, reply)
            if (
                (token is not None and token in reply.raw)
                or described is not None
                or _outside_state(fx.outside) != before
            ):
                escaped = True
                break
    finally:
        with trio.CancelScope(shield=True):  # cancelled or not, the attack stops here
            tally = await trio.to_thread.run_sync(_stopped, attacker)
    moved = fx.outside / "moved-d"
    if moved.exists():  # the attacker stopped mid-move: put it back for the checks
        moved.rename(fx.root / "d")
    if tally.swaps == 0:
        raise CaseError(f"the {kind} attacker made no change in {made} calls: nothing was tested")
    s.trials = Trials(made, planned, escaped)
    s.notes.append(f"the attacker made {tally.swaps:,} changes")
    if described is not None:
        tool, reply = described
        raise CaseFailed(f"{tool} answered about the file outside: {reply.text[:160]!r}")


def _outside_state(outside: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry below ``outside`` with its mode, size and mtime, read while the
    attacker may be moving things: what vanishes meanwhile is left out, and the
    directory the attacker itself moves out and back (``moved-d``) is not looked at."""
    state: dict[str, tuple[int, int, int]] = {}
    for directory, dirs, files in os.walk(outside):
        dirs[:] = [d for d in dirs if not (directory == str(outside) and d == "moved-d")]
        for name in (*dirs, *files):
            full = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                st = os.lstat(full)
                state[os.path.relpath(full, outside)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def _stopped(attacker: AttackerProcess) -> Tally:
    try:
        return attacker.stop()
    finally:
        attacker.kill()


@race("races", "exchange-dir-during-reads-and-walks", "exchange-dir")
async def _race_read(s: Session, fx: Fixture) -> None:
    await _race(
        "exchange-dir",
        s,
        fx,
        [
            ("read_text_file", {"path": fx.rel("d", "f")}),
            ("list_directory", {"path": fx.rel("d")}),
            ("directory_tree", {"path": fx.rel("d")}),
            ("search_files", {"path": fx.rel("d"), "pattern": "**/*"}),
            ("read_text_file", {"path": fx.rel("d", "secret.txt")}),
        ],
    )


@race("races", "exchange-dir-during-writes", "exchange-dir")
async def _race_write(s: Session, fx: Fixture) -> None:
    await _race(
        "exchange-dir",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("d", "w.txt"), "content": "written"}),
            ("create_directory", {"path": fx.rel("d", "made{i}")}),
            ("copy_file", {"source": fx.rel("inside.txt"), "destination": fx.rel("d", "c{i}")}),
            ("append_file", {"path": fx.rel("d", "f"), "content": "+"}),
        ],
    )


@race("races", "file-symlink-swap-during-write-edit-copy", "swap-file")
async def _race_swap(s: Session, fx: Fixture) -> None:
    await _race(
        "swap-file",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("f"), "content": "written {i}\n"}),
            ("edit_file", {"path": fx.rel("f"), "edits": [{"oldText": "e", "newText": "e"}]}),
            ("copy_file", {"source": fx.rel("f"), "destination": fx.rel("copy{i}")}),
            ("read_text_file", {"path": fx.rel("f")}),
        ],
    )


@race("races", "directory-renamed-away-during-walks", "rename-away")
async def _race_rename(s: Session, fx: Fixture) -> None:
    await _race(
        "rename-away",
        s,
        fx,
        [
            ("directory_tree", {"path": str(fx.root)}),
            ("search_files", {"path": str(fx.root), "pattern": "**/*"}),
            ("read_text_file", {"path": fx.rel("d", "inner", "inside.txt")}),
        ],
    )


@race("races", "hard-links-planted-during-writes", "plant-hardlink", hard_links=True)
async def _race_hardlink(s: Session, fx: Fixture) -> None:
    await _race(
        "plant-hardlink",
        s,
        fx,
        [
            ("write_file", {"path": fx.rel("h"), "content": "written"}),
            ("append_file", {"path": fx.rel("h"), "content": "appended"}),
            ("edit_file", {"path": fx.rel("h"), "edits": [{"oldText": "w", "newText": "w"}]}),
        ],
    )


@race("races", "symlink-flipped-within-one-call", "swap-file")
async def _race_within_call(s: Session, fx: Fixture) -> None:
    """A name flipped between an inside file and a symlink to outside while one call
    checks it and then uses it: a successful answer must never describe the outside
    file (its size, its path).  (A refusal naming the link's target is a leak the
    harness reports too, but not this race.)"""
    outside = str(fx.base / "outside")
    sized = size_pattern(CANARY_SIZE)

    def shows_outside(reply: Reply) -> bool:
        return not reply.error and (outside in reply.raw or bool(sized.search(reply.text)))

    await _race(
        "swap-file",
        s,
        fx,
        [
            ("get_file_info", {"path": fx.rel("f")}),
            ("get_file_info", {"path": fx.rel("f-link")}),
        ],
        shows_outside,
    )

"""Race attackers in separate processes against the tool functions: a directory
exchanged with an escaping symlink, a file swapped with a symlink, a directory
renamed away mid-walk, hard links planted during writes.  Zero escapes.

Every test proves it raced: the attacker reports readiness before the first
call and how many changes it made (it plants its symlink again whenever a
write of the test replaced it), and the calls must have met the attacked state
(refusals with the code that state causes).  Iteration counts are parameters:
the default run is bounded; ``-m slow`` runs long ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers import CANARY, Tree
from sandboxfs.audit.attacker import AttackerProcess, Tally, prepare
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext
from sandboxfs.tools.grepping import grep_files
from sandboxfs.tools.listing import list_directory
from sandboxfs.tools.reading import read_text_file
from sandboxfs.tools.walking import directory_tree, search_files
from sandboxfs.tools.writing import (
    append_file,
    copy_file,
    create_directory,
    edit_file,
    write_file,
)

Operation = Callable[[CallContext, int], Any]


@contextmanager
def attacker(kind: str, tree: Tree, tally: list[Tally]) -> Iterator[None]:
    """Run the ``kind`` attacker for the block (it is ready before the block
    starts); its tally is appended to ``tally`` when it stops."""
    prepare(kind, tree.root, tree.outside, CANARY)
    process = AttackerProcess(kind, tree.root, tree.outside)
    try:
        yield
        tally.append(process.stop())
    finally:
        process.kill()


def _canaries_intact(tree: Tree) -> None:
    for canary in tree.outside.glob("canary*.txt"):
        assert canary.read_bytes() == CANARY, canary
    unexpected = {p.name for p in tree.outside.iterdir()} - {
        "canary.txt",
        "secret.txt",
        "dir",
        "moved-d",
    }
    assert {n for n in unexpected if not n.startswith("canary-")} == set()
    assert not list((tree.outside / "dir").iterdir())[1:]  # dir holds only secret.txt


def _run(tree: Tree, operations: list[Operation], attempts: int) -> Counter[str]:
    ctx = CallContext(tree.sandbox(), Limits())
    counts: Counter[str] = Counter()
    for i in range(attempts):
        operation = operations[i % len(operations)]
        try:
            result = operation(ctx, i)
        except SandboxError as exc:
            counts["refused"] += 1
            counts[exc.code] += 1
            continue
        counts["served"] += 1
        seen = json.dumps([result.text, result.structured], default=str)
        # (the canary's text without its newline: JSON writes a newline as "\\n")
        assert CANARY.decode().strip() not in seen, (operation, seen[:200])
        assert "canary" not in seen, (operation, seen[:200])
    _canaries_intact(tree)
    return counts


def _exchange_ops() -> list[Operation]:
    return [
        lambda c, i: read_text_file(c, "d/f"),
        lambda c, i: write_file(c, "d/w", "written"),
        lambda c, i: create_directory(c, f"d/x{i % 7}/y"),
        lambda c, i: list_directory(c, "d"),
        lambda c, i: directory_tree(c, "d"),
        lambda c, i: search_files(c, "d", "**/*"),
        lambda c, i: grep_files(c, "C", path="d"),
        lambda c, i: copy_file(c, "d/f", f"d/copy{i}"),
    ]


def _swap_ops() -> list[Operation]:
    return [
        lambda c, i: write_file(c, "f", f"version {i}\n"),
        lambda c, i: edit_file(c, "f", [{"oldText": "inside", "newText": "inside"}]),
        lambda c, i: read_text_file(c, "f"),
        lambda c, i: copy_file(c, "f", f"copy{i}"),
        lambda c, i: append_file(c, "f", "."),
    ]


def _rename_away_ops() -> list[Operation]:
    return [
        lambda c, i: directory_tree(c, "."),
        lambda c, i: search_files(c, ".", "**/*"),
        lambda c, i: grep_files(c, "C", path="."),
        lambda c, i: write_file(c, "d/inner/w.txt", "x"),
        lambda c, i: read_text_file(c, "d/inner/inside.txt"),
    ]


def _hardlink_ops() -> list[Operation]:
    return [
        lambda c, i: write_file(c, "h", "replaced"),
        lambda c, i: append_file(c, "h", "appended"),
        lambda c, i: edit_file(c, "h", [{"oldText": "replaced", "newText": "edited"}]),
    ]


ATTACKS = {
    "exchange-dir": _exchange_ops,
    "swap-file": _swap_ops,
    "rename-away": _rename_away_ops,
    "plant-hardlink": _hardlink_ops,
}
#: The refusal that shows a call met the attacked state.
MET = {
    "exchange-dir": "EACCES",  # d was the symlink leading outside
    "swap-file": "EACCES",  # f was the symlink to the outside canary
    "rename-away": "ENOENT",  # d was away
    "plant-hardlink": "EMLINK",  # h was the outside canary's second name
}
#: The fewest changes an attacker must have made for a run to count.
SWAPS_FLOOR = 100


def _proved(kind: str, counts: Counter[str], tally: list[Tally]) -> None:
    assert tally and tally[0].swaps >= SWAPS_FLOOR, (kind, tally)
    assert counts[MET[kind]] > 0, (kind, counts)
    assert counts["served"] > 0, (kind, counts)


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_attacker_process_never_gets_an_escape(tree: Tree, kind: str) -> None:
    tally: list[Tally] = []
    with attacker(kind, tree, tally):
        counts = _run(tree, ATTACKS[kind](), attempts=3000)
    _proved(kind, counts, tally)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_attacker_process_never_gets_an_escape_long(tree: Tree, kind: str) -> None:
    tally: list[Tally] = []
    with attacker(kind, tree, tally):
        counts = _run(tree, ATTACKS[kind](), attempts=200_000)
    _proved(kind, counts, tally)


def test_append_only_never_lands_in_a_planted_hard_link(tree: Tree) -> None:
    """Appends alone, against an attacker that links the outside canary in under
    the appended name and unlinks it again: the window that matters is an
    unlink under way, which only appends racing it back to back can hit."""
    tally: list[Tally] = []
    with attacker("plant-hardlink", tree, tally):
        counts = _run(tree, [lambda c, i: append_file(c, "h", "+")], attempts=20_000)
    _proved("plant-hardlink", counts, tally)


def test_a_write_cannot_disarm_the_attacker(tree: Tree) -> None:
    """The test's own writes replace the planted symlink now and then; the attacker
    plants it again, so the attack lasts the whole run."""
    tally: list[Tally] = []
    with attacker("swap-file", tree, tally):
        counts = _run(tree, [lambda c, i: write_file(c, "f", f"v{i}")], attempts=3000)
    _proved("swap-file", counts, tally)
    assert (tree.root / "f").is_symlink() or (tree.root / "f-link").is_symlink()


def test_attacker_fixture_needs_no_root(tmp_path: Path) -> None:
    """The attacker runs as an ordinary process with the fixture's own permissions."""
    root, outside = tmp_path / "r", tmp_path / "o"
    root.mkdir()
    prepare("swap-file", root, outside, CANARY)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxfs.audit.attacker",
            "swap-file",
            str(root),
            str(outside),
            "100",
        ],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert (outside / "canary.txt").read_bytes() == CANARY

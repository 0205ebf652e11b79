"""Appends land only in a file whose one and only name is the one inside.

The dangerous window is an unlink under way: the kernel has dropped the link
count of the file (so it looks single-named) but the directory entry is still
found by a lookup.  The kernel cannot be paused there, so the test reproduces
that state exactly: the outside file's second name is unlinked right after the
append opened it, and the next lookup of the name still answers with it.  The
rename barrier (the name renamed onto itself, which takes the directory's lock
and fails once the name is gone) must see through it.
"""

from __future__ import annotations

import os

import pytest

from helpers import CANARY, Tree
from sandboxfs.core.chokepoint import ParentDir
from sandboxfs.core.errors import HardLinked
from sandboxfs.fs import writes


def test_the_rename_barrier_catches_a_name_whose_unlink_is_under_way(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = tree.outside / "secret.txt"
    os.link(canary, tree.root / "h")  # h and the outside canary: one file, two names
    stale = os.stat(tree.root / "h")
    window = {"opened": False, "stale lookups": 0}
    real_open, real_lstat = writes._open_for_append, ParentDir.lstat

    def open_then_unlink(parent: ParentDir, *, exclusive: bool) -> int:
        fd = real_open(parent, exclusive=exclusive)
        if not window["opened"]:
            window["opened"] = True
            os.unlink(tree.root / "h")  # the unlink's link count drop, done
        return fd

    def lookup(parent: ParentDir) -> os.stat_result | None:
        if window["opened"] and not window["stale lookups"]:
            window["stale lookups"] += 1
            return stale  # ... while its directory entry is still found
        return real_lstat(parent)

    monkeypatch.setattr(writes, "_open_for_append", open_then_unlink)
    monkeypatch.setattr(ParentDir, "lstat", lookup)
    change = tree.sandbox().append_file("h", b"appended")
    assert window == {"opened": True, "stale lookups": 1}  # the window was reproduced
    assert canary.read_bytes() == CANARY
    assert (tree.root / "h").read_bytes() == b"appended"  # a new file of its own
    assert change.size == len(b"appended")


def test_a_file_with_another_name_is_refused(tree: Tree) -> None:
    os.link(tree.outside / "secret.txt", tree.root / "h")
    with pytest.raises(HardLinked):
        tree.sandbox().append_file("h", b"x")
    assert (tree.outside / "secret.txt").read_bytes() == CANARY

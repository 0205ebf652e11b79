"""The change journal below the tools: the store, what each operation records, undo.

Each operation of the façade that changes anything is run with a recording; its
record must say what it changed, keep what it replaced, and undoing it must
bring the tree back exactly, or refuse (naming the place) when the place
changed since.  The tree is compared whole (type, bytes, symlink text, mode).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs import undoing
from sandboxfs.fs.journalobjects import JournalError
from sandboxfs.fs.journalplaces import UndoRefused
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.recording import Recording
from sandboxfs.fs.sandbox import Sandbox

Snapshot = dict[str, tuple[Any, ...]]


def snapshot(root: Path) -> Snapshot:
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", Path(full).read_bytes(), stat.S_IMODE(st.st_mode))
    return out


class Journaled:
    """A sandbox over ``root`` whose calls are journaled in ``store``."""

    def __init__(self, root: Path, journal: Path, **store_options: Any) -> None:
        self.root = root
        journal.mkdir(exist_ok=True)
        self.store = JournalStore(Root.open(str(journal)), **store_options)
        self.sandbox = Sandbox(Resolver(AllowList.of([Root.open(str(root))])), Limits())

    def call(self, fn: Callable[[Sandbox], object], *, undoes: tuple[int, ...] = ()) -> int | None:
        recording = Recording(self.store, tool="test", session="s", client="c")
        recording.undoes = undoes
        try:
            fn(self.sandbox.recording(recording))
        finally:
            entry = recording.finish()
        return entry

    def undo(self, *ids: int) -> int | None:
        records = [self.store.record(i) for i in sorted(ids, reverse=True)]
        assert all(records)
        return self.call(
            lambda s: undoing.undo(s.ctx, self.store, records),  # type: ignore[arg-type]
            undoes=tuple(ids),
        )


@pytest.fixture
def journaled(tmp_path: Path) -> Journaled:
    root = tmp_path / "root"
    root.mkdir()
    return Journaled(root, tmp_path / "journal")


def _write(path: str, data: bytes) -> Callable[[Sandbox], object]:
    return lambda s: s.replace_file(path, data)


OPERATIONS: dict[str, Callable[[Sandbox], object]] = {
    "create-file": _write("new.txt", b"fresh\n"),
    "replace-file": _write("a.txt", b"replaced\n"),
    "append": lambda s: s.append_file("a.txt", b"more\n"),
    "append-creates": lambda s: s.append_file("new.txt", b"fresh\n"),
    "mkdir-p": lambda s: s.make_dirs("x/y/z"),
    "move-file": lambda s: s.rename("a.txt", "d/moved.txt"),
    "move-directory": lambda s: s.rename("d", "e"),
    "move-symlink": lambda s: s.rename("link", "d/link"),
    "copy": lambda s: s.copy_file("a.txt", "copy.txt"),
    "remove-file": lambda s: s.remove("a.txt"),
    "remove-symlink": lambda s: s.remove("link"),
    "remove-empty-directory": lambda s: s.remove("empty"),
    "remove-tree": lambda s: s.remove("d", recursive=True),
    "edit-through-symlink": _write("link", b"through the link\n"),
}


def _populate(root: Path) -> None:
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "a.txt").chmod(0o640)
    (root / "d" / "sub").mkdir(parents=True)
    (root / "d" / "f.bin").write_bytes(bytes(range(256)))
    (root / "d" / "sub" / "g.txt").write_bytes(b"gamma\n")
    (root / "d" / "sub" / "g.txt").chmod(0o600)
    (root / "d" / "l").symlink_to("../a.txt")
    (root / "link").symlink_to("a.txt")
    (root / "empty").mkdir()


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_change_is_recorded_and_undone_exactly(journaled: Journaled, operation: str) -> None:
    _populate(journaled.root)
    before = snapshot(journaled.root)
    entry = journaled.call(OPERATIONS[operation])
    after = snapshot(journaled.root)
    assert entry is not None and after != before
    record = journaled.store.record(entry)
    assert record is not None and record["steps"]
    undo = journaled.undo(entry)
    assert snapshot(journaled.root) == before
    assert undo is not None and journaled.store.undone() == {entry: undo}
    # the undo is journaled too: undoing it brings the change back
    journaled.undo(undo)
    assert snapshot(journaled.root) == after
    assert journaled.store.undone() == {undo: undo + 1}


def test_undo_refuses_naming_the_file_when_it_changed_since(journaled: Journaled) -> None:
    _populate(journaled.root)
    entry = journaled.call(_write("a.txt", b"agent\n"))
    assert entry is not None
    (journaled.root / "a.txt").write_bytes(b"someone else\n")
    with pytest.raises(UndoRefused, match=r"a\.txt changed since"):
        journaled.undo(entry)
    assert (journaled.root / "a.txt").read_bytes() == b"someone else\n"
    assert journaled.store.undone() == {}


def test_undo_of_several_entries_is_checked_whole_before_anything_changes(
    journaled: Journaled,
) -> None:
    _populate(journaled.root)
    first = journaled.call(_write("a.txt", b"one\n"))
    second = journaled.call(_write("b.txt", b"two\n"))
    assert first is not None and second is not None
    (journaled.root / "a.txt").write_bytes(b"changed\n")
    before = snapshot(journaled.root)
    with pytest.raises(UndoRefused, match=r"a\.txt"):
        journaled.undo(first, second)
    assert snapshot(journaled.root) == before  # b.txt was not removed either


def test_a_sequence_undone_newest_first_in_one_call(journaled: Journaled) -> None:
    _populate(journaled.root)
    start = snapshot(journaled.root)
    ids = [
        journaled.call(_write("a.txt", b"one\n")),
        journaled.call(lambda s: s.make_dirs("n/m")),
        journaled.call(_write("n/m/f", b"f\n")),
        journaled.call(lambda s: s.rename("n", "N")),
        journaled.call(_write("N/m/f", b"g\n")),
        journaled.call(lambda s: s.remove("N", recursive=True)),
    ]
    assert None not in ids
    journaled.undo(*[i for i in ids if i is not None])
    assert snapshot(journaled.root) == start


def test_content_is_kept_once(journaled: Journaled) -> None:
    _populate(journaled.root)
    for _ in range(3):
        journaled.call(_write("a.txt", b"same\n"))
    found = [name for _, _, files in os.walk(journaled.store.path + "/objects") for name in files]
    assert len(found) == 2  # alpha, and "same" once


def test_a_change_too_big_to_keep_says_so_and_still_happens(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "big").write_bytes(b"x" * 5000)
    journaled = Journaled(root, tmp_path / "journal", max_bytes=4000)
    entry = journaled.call(_write("big", b"small"))
    assert (root / "big").read_bytes() == b"small"
    assert entry is not None
    record = journaled.store.record(entry)
    assert record is not None
    before = record["steps"][0]["before"]
    assert before["object"] is None and "not kept" in before["note"]
    with pytest.raises(UndoRefused, match="not kept"):
        journaled.undo(entry)


def test_the_oldest_records_go_first_beyond_the_bounds(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    journaled = Journaled(root, tmp_path / "journal", max_bytes=6000)
    ids = [journaled.call(_write("f", os.urandom(1000))) for _ in range(12)]
    kept = [item.id for item in journaled.store.index()]
    assert kept == sorted(kept, reverse=True) and kept[0] == ids[-1]
    assert len(kept) < 12 and ids[0] not in kept
    assert journaled.store.usage() <= 6000
    objects = sum(len(files) for _, _, files in os.walk(tmp_path / "journal" / "objects"))
    referenced = {d for item in journaled.store.index() for d in item.objects}
    assert objects == len(referenced)  # objects of dropped records went with them


def test_records_older_than_keep_are_dropped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    journaled = Journaled(root, tmp_path / "journal", keep_seconds=3600)
    old = journaled.call(_write("f", b"1"))
    assert old is not None
    # age the record by rewriting its time, as a record written long ago
    path = tmp_path / "journal" / "entries" / f"{old:012d}.json"
    record = json.loads(path.read_text())
    record["time"] -= 7200
    path.write_text(json.dumps(record))
    fresh = Journaled(root, tmp_path / "journal", keep_seconds=3600)
    fresh.call(_write("f", b"2"))
    assert [i.id for i in fresh.store.index()] == [old + 1]


def test_another_process_sees_the_records(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    one = Journaled(root, tmp_path / "journal")
    two = Journaled(root, tmp_path / "journal")
    a = one.call(_write("f", b"1"))
    b = two.call(_write("f", b"2"))
    c = one.call(_write("f", b"3"))
    assert (a, b, c) == (1, 2, 3)
    assert [i.id for i in one.store.index()] == [3, 2, 1]


def test_a_directory_that_is_not_a_journal_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "important.txt").write_text("mine")
    with pytest.raises(JournalError, match="not empty"):
        JournalStore(Root.open(str(tmp_path / "j")))


def test_a_failed_call_leaves_no_record_and_no_copy(journaled: Journaled) -> None:
    _populate(journaled.root)
    with pytest.raises(SandboxError):
        journaled.call(lambda s: s.replace_file("a.txt", b"x", expected="sha256:00"))
    assert journaled.store.index() == []
    assert sum(len(f) for _, _, f in os.walk(journaled.store.root.path + "/objects")) == 0

"""Stateful property test of the change journal: random sequences of changes through
the tools (several sessions), someone else changing files behind the journal's back,
and undos (and redos) of random changes in random order.

The model is the tree's content (kinds and bytes).  Every change is predicted, and
for every record the test knows what it did: the places it reverted (their content
before and after) or the subtree it moved.  An undo must then either do exactly the
inverse (the tree equals the model with those places put back, or the subtree moved
back) when every place still held what the change left, or be refused and change
nothing when one did not.  Hidden and protected entries are never changed, and the
journal never holds a hidden file's bytes or shows its name to the agent.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.policy import Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.recording import Recording
from sandboxfs.fs.sandbox import Sandbox
from sandboxfs.tools import CallContext
from sandboxfs.tools.journaltools import list_changes, undo_changes
from sandboxfs.tools.writing import (
    append_file,
    copy_file,
    create_directory,
    delete_file,
    edit_file,
    move_file,
    write_file,
)

NAMES = ["a", "b", "c", "keep", "x.secret"]
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
TEXT = st.text(alphabet="xyz\n", min_size=1, max_size=10)
SESSIONS = st.sampled_from(["one", "two", "three"])
#: Where a move may go: every path of up to two of the plain names.
FREE = [*"abc", *(f"{x}/{y}" for x in "abc" for y in "abc")]
SECRET = b"SECRET-BYTES-NEVER-JOURNALED"

Tree = dict[str, tuple[Any, ...]]  # path -> ("file", bytes) | ("dir",)
#: What the runs did, over every example: the test must have undone, redone and been
#: refused, each kind of change undone at least once.
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _the_machine_undid_things() -> Iterator[None]:
    yield
    assert SEEN["undone"] and SEEN["refused"] and SEEN["redone"], SEEN
    assert SEEN["undone relocate"] and SEEN["undone revert"], SEEN
    assert SEEN["someone else"], SEEN


def blocked(path: str) -> bool:
    """Hidden (*.secret) or protected (keep) by the policy, or below one."""
    return any(fnmatch.fnmatchcase(part, "*.secret") or part == "keep" for part in path.split("/"))


def below(tree: Tree, path: str) -> list[str]:
    return [p for p in tree if p == path or p.startswith(path + "/")]


@dataclass
class Known:
    """What one record did, as the test saw it."""

    kind: str  # "revert": places from `before` to `after`; "relocate": subtree src -> dst
    places: dict[str, tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]
    source: str = ""
    destination: str = ""


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="sandboxfs-journal-state-"))
        self.root = self.base / "root"
        self.root.mkdir()
        (self.root / "keep").write_text("protected\n")
        (self.root / "x.secret").write_bytes(SECRET)
        (self.base / "journal").mkdir()
        self.store = JournalStore(Root.open(str(self.base / "journal")))
        policy = Policy(hide=("*.secret",), protect=("keep",))
        root = Root.open(str(self.root), policy)
        self.sandbox = Sandbox(Resolver(AllowList.of([root])), Limits())
        self.model: Tree = self.read()
        self.known: dict[int, Known] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------

    def read(self) -> Tree:
        tree: Tree = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, self.root)
                mode = os.lstat(full).st_mode
                tree[rel] = ("dir",) if stat.S_ISDIR(mode) else ("file", Path(full).read_bytes())
        return tree

    def call(self, fn: Any, session: str, tool: str, *args: Any, **kwargs: Any) -> Any:
        recording = Recording(self.store, tool=tool, session=session)
        context = CallContext(self.sandbox.recording(recording), Limits(), journal=self.store)
        try:
            return fn(context, *args, **kwargs), None
        except SandboxError as exc:
            return None, exc
        finally:
            recording.finish()

    def parent_is_dir(self, path: str) -> bool:
        parent = path.rpartition("/")[0]
        return parent == "" or self.model.get(parent, ("none",))[0] == "dir"

    def newest(self) -> int:
        items = self.store.index()
        return items[0].id if items else 0

    def changed(self, before_id: int, known: Known) -> None:
        """Remember what the record just written (if any) did."""
        latest = self.newest()
        if latest > before_id:
            assert latest == before_id + 1
            self.known[latest] = known

    def revert(self, before: Tree, after: Tree, paths: list[str]) -> Known:
        return Known("revert", {p: (before.get(p), after.get(p)) for p in paths})

    # -- changes ---------------------------------------------------------------------------------

    @rule(path=PATHS, content=TEXT, session=SESSIONS)
    def write(self, path: str, content: str, session: str) -> None:
        before, last = dict(self.model), self.newest()
        _, error = self.call(write_file, session, "write_file", path, content)
        entry = self.model.get(path)
        ok = (
            not blocked(path) and self.parent_is_dir(path) and (entry is None or entry[0] == "file")
        )
        assert (error is None) == ok, error
        if ok:
            self.model[path] = ("file", content.encode())
            self.changed(last, self.revert(before, self.model, [path]))

    @rule(path=PATHS, content=TEXT, session=SESSIONS)
    def append(self, path: str, content: str, session: str) -> None:
        before, last = dict(self.model), self.newest()
        _, error = self.call(append_file, session, "append_file", path, content)
        entry = self.model.get(path)
        ok = (
            not blocked(path) and self.parent_is_dir(path) and (entry is None or entry[0] == "file")
        )
        assert (error is None) == ok, error
        if ok:
            old = entry[1] if entry is not None else b""
            self.model[path] = ("file", old + content.encode())
            self.changed(last, self.revert(before, self.model, [path]))

    @rule(path=PATHS, new=TEXT, session=SESSIONS)
    def edit(self, path: str, new: str, session: str) -> None:
        entry = self.model.get(path)
        if entry is None or entry[0] != "file" or blocked(path) or not entry[1].strip():
            return
        old = entry[1].decode()[:1]
        if not old.strip():
            return
        before, last = dict(self.model), self.newest()
        _, error = self.call(
            edit_file, session, "edit_file", path, [{"oldText": old, "newText": new}]
        )
        assert error is None, error
        self.model[path] = ("file", entry[1].replace(old.encode(), new.encode(), 1))
        self.changed(last, self.revert(before, self.model, [path]))

    @rule(path=PATHS, session=SESSIONS)
    def mkdir(self, path: str, session: str) -> None:
        before, last = dict(self.model), self.newest()
        _, error = self.call(create_directory, session, "create_directory", path)
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        ok = not blocked(path) and all(self.model.get(p, ("dir",))[0] == "dir" for p in prefixes)
        assert (error is None) == ok, error
        if ok:
            made = [p for p in prefixes if p not in self.model]
            for prefix in prefixes:
                self.model[prefix] = ("dir",)
            self.changed(last, self.revert(before, self.model, made))

    @precondition(lambda self: any(not blocked(p) for p in self.model))
    @rule(data=st.data(), session=SESSIONS)
    def move(self, data: st.DataObject, session: str) -> None:
        # Something that exists and may move, to a free place whose directory exists.
        source = data.draw(st.sampled_from(sorted(p for p in self.model if not blocked(p))))
        free = [p for p in FREE if p not in self.model and self.parent_is_dir(p)]
        if not free:
            return
        destination = data.draw(st.sampled_from(free))
        last = self.newest()
        _, error = self.call(move_file, session, "move_file", source, destination)
        if error is not None:
            assert self.read() == self.model
            return
        assert source in self.model and destination not in self.model
        assert not any(blocked(p) for p in [*below(self.model, source), destination])
        for old in sorted(below(self.model, source)):
            self.model[destination + old[len(source) :]] = self.model.pop(old)
        self.changed(last, Known("relocate", {}, source, destination))
        SEEN["moved"] += 1

    @rule(source=PATHS, destination=PATHS, session=SESSIONS)
    def copy(self, source: str, destination: str, session: str) -> None:
        before, last = dict(self.model), self.newest()
        _, error = self.call(copy_file, session, "copy_file", source, destination)
        if error is not None:
            assert self.read() == self.model
            return
        assert self.model[source][0] == "file" and destination not in self.model
        self.model[destination] = self.model[source]
        self.changed(last, self.revert(before, self.model, [destination]))

    @rule(path=PATHS, recursive=st.booleans(), session=SESSIONS)
    def delete(self, path: str, recursive: bool, session: str) -> None:
        before, last = dict(self.model), self.newest()
        _, error = self.call(delete_file, session, "delete_file", path, recursive=recursive)
        if error is not None:
            assert self.read() == self.model
            return
        gone = below(self.model, path)
        assert not any(blocked(p) for p in gone)
        for p in gone:
            del self.model[p]
        self.changed(last, self.revert(before, self.model, gone))

    @rule(path=st.sampled_from(["a", "b", "a/b", "b/a"]), content=TEXT)
    def someone_else_writes(self, path: str, content: str) -> None:
        """A change behind the journal's back (another process): never recorded."""
        if not self.parent_is_dir(path) or self.model.get(path, ("file",))[0] != "file":
            return
        (self.root / path).write_text(content)
        self.model[path] = ("file", content.encode())
        SEEN["someone else"] += 1

    # -- undoing ---------------------------------------------------------------------------------

    def holds(self, known: Known) -> bool:
        """Whether every place still holds what the change left."""
        if known.kind == "relocate":
            moved = self.model.get(known.destination)
            return moved is not None and known.source not in self.model
        for p, (before, after) in known.places.items():
            if self.model.get(p) != after:
                return False
            parent = p.rpartition("/")[0]
            put_back = known.places.get(parent, (None, None))[0] == ("dir",)
            if (
                before is not None
                and parent
                and self.model.get(parent) != ("dir",)
                and not put_back
            ):
                return False  # what it put back would have no directory to go in
            if after == ("dir",) and any(
                q not in known.places for q in below(self.model, p) if q != p
            ):
                return False  # a directory it made holds more than it made: not empty
        return True

    def inverse(self, known: Known) -> tuple[Tree, Known]:
        tree = dict(self.model)
        if known.kind == "relocate":
            for old in sorted(below(tree, known.destination)):
                tree[known.source + old[len(known.destination) :]] = tree.pop(old)
            return tree, Known("relocate", {}, known.destination, known.source)
        for p, (before, _) in known.places.items():
            if before is None:
                tree.pop(p, None)
            else:
                tree[p] = before
        flipped = {p: (after, before) for p, (before, after) in known.places.items()}
        return tree, Known("revert", flipped)

    @precondition(lambda self: bool(self.known))
    @rule(data=st.data(), session=SESSIONS)
    def undo(self, data: st.DataObject, session: str) -> None:
        """Undo (or redo) a random change still in force."""
        undone = self.store.undone()
        live = sorted(i for i in self.known if i not in undone and self.is_live(i))
        if live:
            self.try_undo(data.draw(st.sampled_from(live)), session, entries=[0])

    @precondition(lambda self: bool(self.known))
    @rule(session=SESSIONS)
    def undo_last(self, session: str) -> None:
        """``count: 1``: the newest change in force that is not itself an undo."""
        undone = self.store.undone()
        own = [
            item.id
            for item in self.store.index()
            if item.state == "done" and item.id not in undone and not item.undoes
        ]
        if own and own[0] in self.known:
            self.try_undo(own[0], session, count=1)

    def try_undo(self, target: int, session: str, **how: Any) -> None:
        if "entries" in how:
            how["entries"] = [target]
        known = self.known[target]
        last = self.newest()
        _, error = self.call(undo_changes, session, "undo_changes", **how)
        if error is None:
            assert self.holds(known), f"undid #{target} though a place changed since"
            self.model, redo = self.inverse(known)
            assert self.read() == self.model
            self.changed(last, redo)
            SEEN["undone"] += 1
            SEEN[f"undone {known.kind}"] += 1
            if self.store.record(target).get("undoes"):  # type: ignore[union-attr]
                SEEN["redone"] += 1
        else:
            assert self.read() == self.model, f"a refused undo changed the tree: {error}"
            assert not self.holds(known) or known.kind == "relocate", error
            SEEN["refused"] += 1

    def is_live(self, entry_id: int) -> bool:
        return any(item.id == entry_id and item.state == "done" for item in self.store.index())

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def tree_matches_model(self) -> None:
        assert self.read() == self.model

    @invariant()
    def hidden_entries_are_never_journaled(self) -> None:
        assert (self.root / "x.secret").read_bytes() == SECRET
        for dirpath, _, filenames in os.walk(self.base / "journal"):
            for name in filenames:
                assert SECRET not in Path(dirpath, name).read_bytes()
        listing, error = self.call(list_changes, "one", "list_changes", diff=True, limit=500)
        assert error is None
        assert "secret" not in listing.text and SECRET.decode() not in listing.text


_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}

TestJournalMachine = JournalMachine.TestCase
TestJournalMachine.settings = settings(max_examples=40, stateful_step_count=40, **_SETTINGS)


@pytest.mark.slow
class TestJournalMachineLong(JournalMachine.TestCase):  # type: ignore[name-defined]
    settings = settings(max_examples=500, stateful_step_count=60, **_SETTINGS)

"""Stateful property test: random sequences of tool calls over a real directory,
interleaved with an outside actor planting symlinks and hard links inside it.

Invariants after every step: nothing outside the allowed directory changed, no
read returned content from outside through a symlink, and the real tree is
exactly what a model of the calls predicts.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from helpers import CANARY, snapshot
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import AccessDenied, HardLinked, SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext
from sandboxfs.tools.reading import read_text_file
from sandboxfs.tools.writing import (
    append_file,
    copy_file,
    create_directory,
    delete_file,
    edit_file,
    move_file,
    write_file,
)

NAMES = ["a", "b", "c"]
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
TEXT = st.text(alphabet="xyz\n", min_size=0, max_size=12)

# Model entries: ("file", content, hard_linked_outside) | ("dir",) | ("link", target)
Entry = tuple[object, ...]


class SandboxMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="sandboxfs-state-"))
        self.root = self.base / "root"
        self.outside = self.base / "outside"
        self.root.mkdir()
        self.outside.mkdir()
        (self.outside / "canary.txt").write_bytes(CANARY)
        (self.outside / "dir").mkdir()
        self.before = snapshot(self.outside)
        resolver = Resolver(AllowList.of([Root.open(str(self.root))]))
        self.ctx = CallContext(Sandbox(resolver), Limits())
        self.model: dict[str, Entry] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # -- model helpers -------------------------------------------------------------

    def parent_is_dir(self, path: str) -> bool:
        parent = path.rpartition("/")[0]
        return parent == "" or self.model.get(parent, ("none",))[0] == "dir"

    def below(self, path: str) -> list[str]:
        return [p for p in self.model if p == path or p.startswith(path + "/")]

    def attempt(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return fn(self.ctx, *args, **kwargs), None
        except SandboxError as exc:
            return None, exc

    # -- tool calls --------------------------------------------------------------------

    @rule(path=PATHS, content=TEXT)
    def write(self, path: str, content: str) -> None:
        entry = self.model.get(path)
        _, error = self.attempt(write_file, path, content)
        if entry is not None and entry[0] == "link":
            assert isinstance(error, AccessDenied)
        elif (entry is None or entry[0] == "file") and self.parent_is_dir(path):
            assert error is None, error
            self.model[path] = ("file", content.encode(), False)
        else:
            assert error is not None

    @rule(path=PATHS, content=TEXT)
    def append(self, path: str, content: str) -> None:
        entry = self.model.get(path)
        _, error = self.attempt(append_file, path, content)
        if entry is not None and entry[0] == "file" and entry[2]:
            assert isinstance(error, HardLinked)
        elif entry is not None and entry[0] == "link":
            assert isinstance(error, AccessDenied)
        elif (entry is None or entry[0] == "file") and self.parent_is_dir(path):
            assert error is None, error
            old = entry[1] if entry is not None else b""
            self.model[path] = ("file", old + content.encode(), False)  # type: ignore[operator]
        else:
            assert error is not None

    @rule(path=PATHS, new=TEXT)
    def edit(self, path: str, new: str) -> None:
        entry = self.model.get(path)
        if entry is None or entry[0] != "file" or not entry[1]:
            return
        old = entry[1][:2].decode()  # type: ignore[index, union-attr]
        if not old.strip() or "\n" in old:
            return
        _, error = self.attempt(edit_file, path, [{"oldText": old, "newText": new}])
        assert error is None, error
        content = entry[1].replace(old.encode(), new.encode(), 1)  # type: ignore[union-attr]
        self.model[path] = ("file", content, False)

    @rule(path=PATHS)
    def mkdir(self, path: str) -> None:
        _, error = self.attempt(create_directory, path)
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if all(self.model.get(p, ("dir",))[0] == "dir" for p in prefixes):
            assert error is None, error
            for prefix in prefixes:
                self.model[prefix] = ("dir",)
        else:
            assert error is not None

    @rule(source=PATHS, destination=PATHS)
    def move(self, source: str, destination: str) -> None:
        _, error = self.attempt(move_file, source, destination)
        if error is not None:
            return
        assert source in self.model and destination not in self.model
        for old in sorted(self.below(source)):
            self.model[destination + old[len(source) :]] = self.model.pop(old)

    @rule(source=PATHS, destination=PATHS)
    def copy(self, source: str, destination: str) -> None:
        _, error = self.attempt(copy_file, source, destination)
        if error is not None:
            return
        entry = self.model[source]
        assert entry[0] == "file" and destination not in self.model
        self.model[destination] = ("file", entry[1], False)

    @rule(path=PATHS, recursive=st.booleans())
    def delete(self, path: str, recursive: bool) -> None:
        _, error = self.attempt(delete_file, path, recursive=recursive)
        if error is not None:
            return
        for gone in self.below(path):
            del self.model[gone]

    @rule(path=PATHS)
    def read(self, path: str) -> None:
        result, error = self.attempt(read_text_file, path)
        entry = self.model.get(path)
        if entry is not None and entry[0] == "link":
            assert isinstance(error, AccessDenied)
        if error is None:
            assert entry is not None and entry[0] == "file"
            assert result.text == entry[1].decode("utf-8", "replace")  # type: ignore[union-attr]

    # -- the outside actor ---------------------------------------------------------------

    @rule(path=PATHS, absolute=st.booleans(), to_dir=st.booleans())
    def plant_symlink(self, path: str, absolute: bool, to_dir: bool) -> None:
        if path in self.model or not self.parent_is_dir(path):
            return
        target = self.outside / ("dir" if to_dir else "canary.txt")
        depth = path.count("/") + 1
        text = str(target) if absolute else "../" * depth + "outside/" + target.name
        os.symlink(text, self.root / path)
        self.model[path] = ("link", text)

    @rule(path=PATHS)
    def plant_hardlink(self, path: str) -> None:
        if path in self.model or not self.parent_is_dir(path):
            return
        os.link(self.outside / "canary.txt", self.root / path)
        self.model[path] = ("file", CANARY, True)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def outside_unchanged(self) -> None:
        assert snapshot(self.outside) == self.before

    @invariant()
    def tree_matches_model(self) -> None:
        actual: dict[str, Entry] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                relative = os.path.relpath(full, self.root)
                mode = os.lstat(full).st_mode
                if stat.S_ISLNK(mode):
                    actual[relative] = ("link", os.readlink(full))
                elif stat.S_ISDIR(mode):
                    actual[relative] = ("dir",)
                else:
                    hard = os.lstat(full).st_nlink > 1
                    actual[relative] = ("file", Path(full).read_bytes(), hard)
        assert actual == self.model


TestSandboxMachine = SandboxMachine.TestCase
TestSandboxMachine.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

"""Stateful property test of the policy: random sequences of tool calls (writes,
appends, directories, copies, moves of files and of parents, deletes, reads,
listings, trees, searches, greps) against a model of what the agent may see.

The model's rules are written here from scratch (a name ending ``.secret`` or
named ``vault`` is hidden with everything below it; ``keep.txt`` and ``frozen``
are protected), independent of the glob engine.  After every step: the tree on
disk, less the hidden entries, is exactly the model; the hidden and protected
entries are byte for byte what they were; no answer ever carried a hidden
entry's name or content.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from helpers import snapshot
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import NotFound, SandboxError
from sandboxfs.core.policy import Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext, ToolResult
from sandboxfs.tools.grepping import grep_files
from sandboxfs.tools.listing import list_directory, list_directory_with_sizes
from sandboxfs.tools.reading import read_text_file
from sandboxfs.tools.walking import directory_tree, search_files
from sandboxfs.tools.writing import (
    append_file,
    copy_file,
    create_directory,
    delete_file,
    move_file,
    write_file,
)

SECRET = "HIDDEN-7c1e"
NAMES = ["a", "box", "d", "x.secret", "vault", "keep.txt", "frozen", "ln-s", "ln-v"]
#: A symlink in the model (planted, inside the protected directory, so it stays).
LINK = "<symlink>"
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
TEXT = st.text(alphabet="xyz\n", min_size=0, max_size=8)
POLICY = Policy.of(hide=["*.secret", "vault"], protect=["keep.txt", "frozen"])

#: Planted before the run: hidden entries (never in the model) and protected ones.
HIDDEN_PLANTED = {
    "top.secret": SECRET,
    "vault/in.txt": SECRET,
    "d/deep.secret": SECRET,
    "box/k.secret": SECRET,
}
#: Symlinks to hidden entries, planted where nothing can move them.
LINKS_PLANTED = {"frozen/ln-s": "../top.secret", "frozen/ln-v": "../vault"}
PROTECTED_PLANTED = {"keep.txt": "kept\n", "frozen/f": "frozen\n", "d/keep.txt": "kept too\n"}


#: What the machine tried, over the whole run (the test asserts that it attacked).
SEEN: collections.Counter[str] = collections.Counter()


def hidden(path: str) -> bool:
    return any(name.endswith(".secret") or name == "vault" for name in path.split("/"))


def protected(path: str) -> bool:
    return any(name in ("keep.txt", "frozen") for name in path.split("/"))


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="sandboxfs-policy-"))
        self.root = self.base / "root"
        self.root.mkdir()
        #: What the agent may see: path -> file content, or None for a directory.
        self.model: dict[str, str | None] = {}
        for path, content in {**HIDDEN_PLANTED, **PROTECTED_PLANTED}.items():
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        self.model.update(PROTECTED_PLANTED)
        for path, target in LINKS_PLANTED.items():
            (self.root / path).symlink_to(target)
            self.model[path] = LINK
        self.model.update({"d": None, "frozen": None, "box": None})
        self.guarded = self._guarded_now()
        resolver = Resolver(AllowList.of([Root.open(str(self.root), POLICY)]))
        self.ctx = CallContext(Sandbox(resolver), Limits())
        self.refusals = 0

    def teardown(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------

    def _guarded_now(self) -> dict[str, object]:
        return {
            path: value
            for path, value in snapshot(self.root).items()
            if hidden(path) or protected(path)
        }

    def is_dir(self, path: str) -> bool:
        return path == "" or (path in self.model and self.model[path] is None)

    def below(self, path: str) -> list[str]:
        return [p for p in self.model if p.startswith(path + "/")]

    def hidden_below(self, path: str) -> bool:
        return any(p.startswith(path + "/") for p in HIDDEN_PLANTED) or any(
            p.startswith(path + "/") for p in ("vault",)
        )

    def attempt(self, fn, *args, **kwargs) -> tuple[ToolResult | None, SandboxError | None]:  # type: ignore[no-untyped-def]
        try:
            result = fn(self.ctx, *args, **kwargs)
        except SandboxError as exc:
            self.refusals += 1
            assert SECRET not in str(exc)
            return None, exc
        self.check_clean(result)
        return result, None

    def check_clean(self, result: ToolResult) -> None:
        shown = result.text + json.dumps(result.structured)
        assert SECRET not in shown
        for name in ("top.secret", "deep.secret", "vault", "in.txt", "x.secret"):
            assert name not in shown, (name, shown)

    def creatable(self, path: str) -> bool:
        return not hidden(path) and not protected(path) and self.is_dir(parent_of(path))

    # -- tool calls ------------------------------------------------------------------

    @rule(path=PATHS, content=TEXT)
    def write(self, path: str, content: str) -> None:
        _, error = self.attempt(write_file, path, content)
        if protected(path) and path in self.model:
            SEEN["write to a protected file tried"] += 1
        existing = self.model.get(path, "absent")
        if self.creatable(path) and existing is not None:
            assert error is None, error
            self.model[path] = content
        else:
            assert error is not None, path

    @rule(path=PATHS, content=TEXT)
    def append(self, path: str, content: str) -> None:
        _, error = self.attempt(append_file, path, content)
        existing = self.model.get(path, "absent")
        if self.creatable(path) and existing is not None:
            assert error is None, error
            self.model[path] = ("" if existing == "absent" else existing) + content
        else:
            assert error is not None, path

    @rule(path=PATHS)
    def mkdir(self, path: str) -> None:
        _, error = self.attempt(create_directory, path)
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        ok = True
        for prefix in prefixes:
            if self.is_dir(prefix):
                continue
            if prefix in self.model or hidden(prefix) or protected(prefix):
                ok = False
                break
        if ok:
            assert error is None, (path, error)
            for prefix in prefixes:
                self.model.setdefault(prefix, None)
        else:
            assert error is not None, path

    @rule(path=PATHS, recursive=st.booleans())
    def delete(self, path: str, recursive: bool) -> None:
        _, error = self.attempt(delete_file, path, recursive=recursive)
        if path not in self.model or protected(path):
            assert error is not None, path
            return
        if self.model[path] is not None:
            assert error is None, error
            del self.model[path]
            return
        below = self.below(path)
        blocked = self.hidden_below(path) or any(protected(p) for p in below)
        if blocked or (below and not recursive):
            assert error is not None, path
            return
        assert error is None, (path, error)
        for p in [path, *below]:
            del self.model[p]

    @rule(source=st.one_of(st.sampled_from(["d", "box"]), PATHS), destination=PATHS)
    def move(self, source: str, destination: str) -> None:
        _, error = self.attempt(move_file, source, destination)
        plain = (
            source in self.model
            and not protected(source)
            and destination not in self.model
            and self.creatable(destination)
            and destination != source
            and not destination.startswith(source + "/")
        )
        carries = (
            plain
            and self.model[source] is None
            and (
                self.hidden_below(source)
                or any(
                    protected(p)
                    or hidden(destination + p[len(source) :])
                    or protected(destination + p[len(source) :])
                    for p in self.below(source)
                )
            )
        )
        if not plain or carries:
            assert error is not None, (source, destination)
            if carries:  # refused only because of what lies below
                SEEN["move of a parent of hidden or protected entries refused"] += 1
            return
        assert error is None, (source, destination, error)
        for p in [source, *self.below(source)]:
            self.model[destination + p[len(source) :]] = self.model.pop(p)

    @rule(source=PATHS, destination=PATHS)
    def copy(self, source: str, destination: str) -> None:
        _, error = self.attempt(copy_file, source, destination)
        content = self.model.get(source)
        if (
            content not in (None, LINK)
            and destination not in self.model
            and self.creatable(destination)
        ):
            assert error is None, (source, destination, error)
            self.model[destination] = content
        else:
            assert error is not None, (source, destination)

    @rule(path=st.one_of(st.sampled_from(["frozen/ln-s", "frozen/ln-v/in.txt"]), PATHS))
    def read(self, path: str) -> None:
        result, error = self.attempt(read_text_file, path)
        content = self.model.get(path)
        if content == LINK or path.startswith(("frozen/ln-s/", "frozen/ln-v/")):
            assert isinstance(error, NotFound), (path, error)  # leads to a hidden entry
            SEEN["read through a symlink to a hidden entry refused"] += 1
        elif content is not None:
            assert error is None, error
            assert result is not None and result.text == content
        else:
            assert error is not None
            if hidden(path):
                assert isinstance(error, NotFound), error
                SEEN["hidden read refused"] += 1

    @rule(path=st.sampled_from(["", "d", "frozen", "a", "vault", "d/x.secret"]))
    def observe(self, path: str) -> None:
        for fn in (list_directory, list_directory_with_sizes, directory_tree):
            self.attempt(fn, path or ".")
        self.attempt(search_files, path or ".", "**")
        self.attempt(grep_files, ".", path=path or ".")

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def hidden_and_protected_entries_never_change(self) -> None:
        now = self._guarded_now()
        for path, value in self.guarded.items():
            assert now.get(path) == value, path

    @invariant()
    def the_visible_tree_is_the_model(self) -> None:
        seen: dict[str, str | None] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                full = Path(dirpath, name)
                rel = str(full.relative_to(self.root))
                if hidden(rel):
                    continue
                if full.is_symlink():
                    seen[rel] = LINK
                else:
                    seen[rel] = None if full.is_dir() else full.read_text()
        assert seen == self.model

    @invariant()
    def the_tree_tool_shows_exactly_the_model(self) -> None:
        result, error = self.attempt(search_files, ".", "**")
        assert error is None and result is not None
        shown = {
            os.path.relpath(match["path"] if isinstance(match, dict) else match, self.root)
            for match in result.structured["matches"]
        }
        # A symlink to a hidden entry is shown as a dangling one is: not at all.
        assert shown == {path for path, value in self.model.items() if value != LINK}


def test_no_sequence_of_calls_reveals_a_hidden_entry_or_changes_a_protected_one() -> None:
    SEEN.clear()
    run_state_machine_as_test(
        PolicyMachine,
        settings=settings(
            max_examples=80,
            stateful_step_count=30,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    # The run attacked: each kind of attempt happened, and was refused.
    for kind in (
        "move of a parent of hidden or protected entries refused",
        "hidden read refused",
        "read through a symlink to a hidden entry refused",
        "write to a protected file tried",
    ):
        assert SEEN[kind] > 0, (kind, SEEN)

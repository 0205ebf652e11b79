"""apply_patch below the wire: parsing and placing hunks, all-or-nothing, the policy
on every file, revisions per file, undo, and a crash (kill -9) at every step of a
commit leaving all the old files or all the new ones once the journal is opened
again."""

from __future__ import annotations

import difflib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.policy import Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs import patches
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.recording import Recording
from sandboxfs.fs.recovery import recover
from sandboxfs.fs.sandbox import Sandbox
from sandboxfs.tools import CallContext
from sandboxfs.tools.journaltools import undo_changes
from sandboxfs.tools.patching import apply_patch
from sandboxfs.tools.patchparse import PatchError, apply_hunks, parse_patch

Tree = dict[str, Any]


def content(root: Path) -> Tree:
    """Kinds and bytes (and leftover temporaries, which must never stay)."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = str(full.relative_to(root))
            out[rel] = "dir" if full.is_dir() else full.read_bytes()
    return out


class Patcher:
    def __init__(self, tmp: Path, policy: Policy | None = None) -> None:
        self.root = tmp / "root"
        self.root.mkdir(exist_ok=True)
        (tmp / "journal").mkdir(exist_ok=True)
        self.journal = tmp / "journal"
        self.store = JournalStore(Root.open(str(self.journal)))
        root = Root.open(str(self.root), policy) if policy else Root.open(str(self.root))
        self.sandbox = Sandbox(Resolver(AllowList.of([root])), Limits())

    def call(self, fn: Callable[..., Any], **arguments: Any) -> Any:
        recording = Recording(self.store, tool=fn.__name__, session="test")
        context = CallContext(self.sandbox.recording(recording), Limits(), journal=self.store)
        try:
            return fn(context, **arguments)
        finally:
            recording.finish()


def git_diff(tmp: Path, before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """What ``git diff`` says between two sets of files (renames found)."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, check=True)  # noqa: E731
    run("init", "-q")
    for name, data in before.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    run("add", "-A")
    run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "before")
    for name in before:
        (repo / name).unlink()
    for name, data in after.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    run("add", "-A")
    return subprocess.run(
        ["git", "diff", "--cached", "-M"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


BEFORE = {
    "a.txt": b"one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n",
    "b.txt": b"moved unchanged\n",
    "c.txt": b"deleted\n",
    "d.txt": b"alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\niota\nkappa\n",
    "crlf.txt": b"first\r\nsecond\r\nthird\r\n",
}
AFTER = {
    "a.txt": b"one\nTWO\nthree\nfour\nfive\nsix\nseven\nEIGHT\n",
    "sub/bb.txt": b"moved unchanged\n",
    "D.txt": b"alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\niota\nKAPPA\n",
    "crlf.txt": b"first\r\nSECOND\r\nthird\r\n",
    "new/dir/n.txt": b"fresh\n",
}


def populate(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_a_git_diff_applies_whole(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    (patcher.root / "sub").mkdir()
    diff = git_diff(tmp_path, BEFORE, AFTER)
    dry = patcher.call(apply_patch, patch=diff, dryRun=True)
    assert "-two\n+TWO" in dry.text and content(patcher.root)["a.txt"] == BEFORE["a.txt"]
    result = patcher.call(apply_patch, patch=diff)
    assert {f["action"] for f in result.structured["files"]} == {
        "modified",
        "moved",
        "deleted",
        "created",
    }
    got = content(patcher.root)
    for name, data in AFTER.items():
        assert got[name] == data, name
    assert "c.txt" not in got and "b.txt" not in got
    # one change in the journal; undoing it puts everything back
    undone = patcher.call(undo_changes)
    assert "Undid #1 (apply_patch)" in undone.text
    got = content(patcher.root)
    for name, data in BEFORE.items():
        assert got[name] == data, name
    assert "new" not in got and "sub/bb.txt" not in got and "D.txt" not in got


def test_the_files_form_and_both_forms_together(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    revision = "sha256:" + __import__("hashlib").sha256(BEFORE["d.txt"]).hexdigest()
    patcher.call(
        apply_patch,
        patch="--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n",
        files=[
            {
                "path": "d.txt",
                "edits": [{"oldText": "gamma", "newText": "GAMMA"}],
                "expectedRevision": revision,
            },
            {"path": "c.txt", "delete": True},
            {"path": "b.txt", "moveTo": "b2.txt", "content": "moved and rewritten\n"},
            {"path": "e.txt", "content": "new\n", "expectedRevision": "absent"},
        ],
    )
    got = content(patcher.root)
    assert got["a.txt"].startswith(b"one\n2\nthree")
    assert b"GAMMA" in got["d.txt"] and got["b2.txt"] == b"moved and rewritten\n"
    assert "c.txt" not in got and "b.txt" not in got and got["e.txt"] == b"new\n"


def test_a_revision_that_does_not_match_refuses_everything(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    before = content(patcher.root)
    with pytest.raises(SandboxError, match=r"Revision mismatch for d\.txt"):
        patcher.call(
            apply_patch,
            files=[
                {"path": "a.txt", "content": "x"},
                {"path": "d.txt", "content": "y", "expectedRevision": "sha256:00"},
            ],
        )
    assert content(patcher.root) == before and patcher.store.index() == []


def test_a_hunk_is_placed_only_within_the_offset_and_a_miss_shows_the_closest_lines(
    tmp_path: Path,
) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    # the hunk says line 2, but ten lines were added on top since
    (patcher.root / "a.txt").write_bytes(b"x\n" * 10 + BEFORE["a.txt"])
    diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    with pytest.raises(SandboxError) as missed:
        patcher.call(apply_patch, patch=diff, maxOffset=5)
    message = str(missed.value)
    assert "Hunk 1 of 1 for a.txt" in message and "within 5 lines" in message
    assert "Closest lines in the file (lines 10-14)" in message and "12| two" in message
    patcher.call(apply_patch, patch=diff, maxOffset=10)
    assert b"x\n" * 10 + b"one\nTWO\n" in (patcher.root / "a.txt").read_bytes()


def test_one_bad_file_changes_nothing(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    before = content(patcher.root)
    diff = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-two\n+2\n"
        "--- a/d.txt\n+++ b/d.txt\n@@ -1 +1 @@\n-not there\n+x\n"
    )
    with pytest.raises(SandboxError, match=r"for d\.txt"):
        patcher.call(apply_patch, patch=diff)
    assert content(patcher.root) == before


def test_a_failure_while_committing_takes_back_what_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    (patcher.root / "sub").mkdir()
    before = content(patcher.root)
    diff = git_diff(tmp_path, BEFORE, AFTER)

    def fail(name: str) -> None:
        if name == "change 3":
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(patches, "STEP", fail)
    with pytest.raises(SandboxError, match="every change it had made was taken back"):
        patcher.call(apply_patch, patch=diff)
    assert content(patcher.root) == before
    assert [(i.state, i.tool) for i in patcher.store.index()] == [("rolled-back", "apply_patch")]
    with pytest.raises(SandboxError, match="no change to undo"):
        patcher.call(undo_changes)


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        (Policy(protect=("d.txt",)), "protected"),
        (Policy(hide=("c.txt",)), "ENOENT"),
        (Policy(writable=False), "read-only"),
    ],
)
def test_the_policy_applies_to_every_file(tmp_path: Path, policy: Policy, refusal: str) -> None:
    patcher = Patcher(tmp_path, policy)
    populate(patcher.root, BEFORE)
    (patcher.root / "sub").mkdir()
    before = content(patcher.root)
    with pytest.raises(SandboxError, match=refusal):
        patcher.call(apply_patch, patch=git_diff(tmp_path, BEFORE, AFTER))
    assert content(patcher.root) == before


def test_a_file_named_twice_is_refused(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    with pytest.raises(SandboxError, match="one file twice"):
        patcher.call(
            apply_patch,
            files=[{"path": "a.txt", "content": "1"}, {"path": "./a.txt", "content": "2"}],
        )


def test_malformed_patches_say_where(tmp_path: Path) -> None:
    patcher = Patcher(tmp_path)
    populate(patcher.root, BEFORE)
    for text, where in [
        ("--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n", "line 3"),
        ("@@ -1 +1 @@\n-x\n+y\n", "line 1"),
        ("--- a/a.txt\n+++ b/a.txt\n@@ nonsense @@\n", "line 3"),
        ("hello\n", "no file changes"),
        ("diff --git a/x b/x\nGIT binary patch\n", "binary"),
    ]:
        with pytest.raises((PatchError, SandboxError), match=where):
            patcher.call(apply_patch, patch=text)


# -- parsing and placing, against difflib -------------------------------------------------

LINES = st.lists(st.sampled_from(["a", "b", "c", "", "  x", "d\td"]), min_size=0, max_size=30)


@settings(max_examples=200, deadline=None)
@given(old=LINES, new=LINES, shift=st.integers(0, 5), newline=st.booleans())
# Found in CI: "a a a" occurs at the stated line and one below it once the file moved on.
@example(
    old=["b", "b", "a", "a", "a", "a"],
    new=["b", "b", "a", "a", "a", "a", "b"],
    shift=1,
    newline=True,
)
def test_any_difflib_diff_applies_exactly(
    old: list[str], new: list[str], shift: int, newline: bool
) -> None:
    """A diff of two texts, applied to the first (with lines added on top, as if the
    file moved on), gives the second (with the same lines on top)."""
    end = "\n" if newline else ""
    a = "\n".join(old) + (end if old else "")
    b = "\n".join(new) + (end if new else "")
    diff = "".join(
        difflib.unified_diff(
            [line + "\n" for line in a.split("\n")][: len(old)] if old else [],
            [line + "\n" for line in b.split("\n")][: len(new)] if new else [],
            "a/f",
            "b/f",
        )
    )
    if not diff or not newline:
        return  # difflib writes no "\\ No newline" lines: only whole-line texts here
    [patch] = parse_patch(diff)
    assert apply_hunks(a, patch.hunks, "f", 5) == b
    top = "top\n" * shift if old else ""  # a pure insertion has no context to be found by
    if all(_occurrences(old, hunk.old_lines()) == 1 for hunk in patch.hunks):
        # Moved on by ``shift`` lines, each hunk is found where its lines now are; where
        # they occur twice, the one nearer the stated line wins (as GNU patch does), so
        # only a hunk whose lines occur once is sure to land on the moved ones.
        assert apply_hunks(top + a, patch.hunks, "f", 5) == top + b


def _occurrences(lines: list[str], run: list[str]) -> int:
    return sum(lines[i : i + len(run)] == run for i in range(len(lines) - len(run) + 1))


def test_no_newline_at_end_of_file_is_honoured_both_ways(tmp_path: Path) -> None:
    cases = [(b"x\ny", b"x\ny\nz\n"), (b"x\ny\n", b"x\nY"), (b"only", b"other"), (b"", b"a\n")]
    for number, (old, new) in enumerate(cases):
        diff = (
            git_diff(tmp_path / str(number), {"f": old}, {"f": new})
            if old
            else ("--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+a\n")
        )
        [patch] = parse_patch(diff)
        assert apply_hunks(old.decode(), patch.hunks, "f", 0) == new.decode(), (old, new)


# -- a crash at every step ------------------------------------------------------------------


def _crash_at(tmp_path: Path, step: int) -> tuple[int, list[str]]:
    """Apply the patch in a child that kills itself (SIGKILL) at ``step``; returns how the
    child ended and the steps it reached."""
    seen_path = tmp_path / "seen"
    pid = os.fork()
    if pid == 0:  # the child: the server, crashing
        try:
            patcher = Patcher(tmp_path)
            reached: list[str] = []

            def at(name: str) -> None:
                reached.append(name)
                seen_path.write_text("\n".join(reached))
                if len(reached) - 1 == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            patches.STEP = at
            patcher.call(apply_patch, patch=(tmp_path / "patch.diff").read_text())
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status, seen_path.read_text().split("\n")


def test_a_crash_at_every_step_leaves_all_old_or_all_new(tmp_path: Path) -> None:
    diff = git_diff(tmp_path / "g", BEFORE, AFTER)
    outcomes = {"all old": 0, "all new": 0}
    steps_seen: list[str] = []
    step = 0
    while True:
        case = tmp_path / f"crash-{step}"
        case.mkdir()
        (case / "patch.diff").write_text(diff)
        root = case / "root"
        root.mkdir()
        populate(root, BEFORE)
        (root / "sub").mkdir()
        old = content(root)
        status, reached = _crash_at(case, step)
        crashed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        # the restart: the journal is opened again and what was in progress taken back
        restarted = Patcher(case)
        recover(restarted.sandbox.ctx, restarted.store)
        now = content(root)
        new = {**{k: v for k, v in old.items() if k not in ("b.txt", "c.txt", "d.txt")}}
        new.update(AFTER)
        new.update({"new": "dir", "new/dir": "dir"})
        if now == old:
            outcomes["all old"] += 1
        else:
            assert now == new, f"crash at {reached[-1]!r} left a mix: {sorted(now)}"
            outcomes["all new"] += 1
        assert not any(".sandboxfs-" in name for name in now)
        assert not [i for i in restarted.store.index() if i.state == "pending"]
        if not crashed:
            break
        steps_seen.append(reached[-1])
        step += 1
    # Every point of the commit was crashed at: prepared, the intent, each of the six files
    # (modified, renamed, deleted, renamed and modified, CRLF, created in new directories),
    # after them, finished.  Up to "finished" the intent is in progress: all old.
    files = len(parse_patch(diff))
    assert files == 6
    assert steps_seen == [
        "prepared",
        "intent",
        *(f"change {n}" for n in range(files)),
        "changed",
        "finished",
    ]
    assert outcomes == {"all old": files + 3, "all new": 2}, outcomes  # (+ the run to the end)

"""Directory metadata never counts hidden entries (issue 26).

A directory's size (on tmpfs, 20 bytes per entry) and link count (one per
subdirectory) count every entry, hidden ones included.  Two directories that
differ only in hidden entries, files and subdirectories, on a tmpfs, must give
identical answers for everything derived from them: get_file_info (times aside),
list_directory, list_directory_with_sizes (its order included) and
directory_tree.  Each test first proves the filesystem's own counts differ, so
it attacks something.  Directory times, which do change when a hidden entry
does, are out of scope (README: Policies).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_client import run, session
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.policy import OPEN, Policy
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.tools.listing import (
    WITHHELD_NOTE,
    get_file_info,
    list_directory,
    list_directory_with_sizes,
)
from sandboxfs.tools.spec import CallContext, ToolResult
from sandboxfs.tools.walking import directory_tree
from unprivileged import nobody_command, nobody_pythonpath

HIDE = ("secrets", "*.log")
POLICY = Policy.of(hide=HIDE, presets=["secrets"])
TIMES = ("created", "modified", "accessed")
#: The same policy on the command line.
ARGS = ("--preset", "secrets", *(f"--hide={p}" for p in HIDE))


@pytest.fixture
def disk() -> Iterator[Path]:
    """A fresh tmpfs (where a directory's size counts its entries), else a directory
    in /dev/shm; reachable by an ordinary user."""
    point = Path(tempfile.mkdtemp(prefix="sandboxfs-test-"))
    point.chmod(0o755)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", str(point)], capture_output=True
    )
    try:
        if mounted.returncode == 0:
            try:
                yield point
            finally:
                subprocess.run(["umount", "-l", str(point)], check=True)
        elif Path("/dev/shm").is_dir():
            shm = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="sandboxfs-test-"))
            shm.chmod(0o755)
            try:
                yield shm
            finally:
                shutil.rmtree(shm, ignore_errors=True)
        else:
            pytest.skip(f"no tmpfs here: {mounted.stderr.decode().strip()}")
    finally:
        point.rmdir()


def _populate(top: Path, *, hidden: bool) -> None:
    """The same visible tree in both; ``hidden`` adds hidden files and directories at
    the top and inside ``other`` (and none inside ``sub``)."""
    top.mkdir()
    (top / "a.txt").write_text("a")
    (top / "sub").mkdir()
    (top / "sub" / "b.txt").write_text("bb")
    (top / "sub" / "c.txt").write_text("ccc")
    (top / "other").mkdir()
    (top / "link").symlink_to("a.txt")
    if hidden:
        for holder in (top, top / "other"):
            (holder / ".env").write_text("TOKEN=1")
            (holder / "app.log").write_text("log")
            (holder / "secrets").mkdir()
            (holder / "secrets" / "s.txt").write_text("s")
            (holder / ".ssh").mkdir()
            for i in range(8):
                (holder / f"k{i}.key").write_text("k")
                (holder / f"secrets-{i}.log").mkdir()


@pytest.fixture
def pair(disk: Path) -> tuple[Path, Path, Path]:
    """An allowed directory holding ``with`` (hidden entries) and ``sans`` (none)."""
    root = disk / "root"
    root.mkdir()
    _populate(root / "with", hidden=True)
    _populate(root / "sans", hidden=False)
    return root, root / "with", root / "sans"


def _ctx(root: Path, policy: Policy = POLICY) -> CallContext:
    sandbox = Sandbox(Resolver(AllowList.of([Root.open(str(root), policy)])))
    return CallContext(sandbox, Limits())


def _shown(result: ToolResult, top: Path) -> Any:
    """A result with its path and its times taken out, for comparison."""
    structured = dict(result.structured or {})
    for key in TIMES:
        structured.pop(key, None)
    lines = [line for line in (result.text or "").splitlines() if not line.startswith(TIMES)]
    return json.loads(json.dumps([lines, structured]).replace(top.name, "TOP"))


def _answers(ctx: CallContext, top: Path) -> dict[str, Any]:
    """Everything derived from ``top`` and its subdirectories that the tools report."""
    answers: dict[str, Any] = {}
    for rel in ("", "/sub", "/other"):
        path = f"{top}{rel}"
        answers[f"get_file_info {rel}"] = _shown(get_file_info(ctx, path), top)
        answers[f"list_directory {rel}"] = _shown(list_directory(ctx, path), top)
        for order in ("name", "size"):
            listed = list_directory_with_sizes(ctx, path, sortBy=order)
            answers[f"list_directory_with_sizes {rel} by {order}"] = _shown(listed, top)
    answers["directory_tree"] = _shown(directory_tree(ctx, str(top)), top)
    return answers


def test_directories_with_and_without_hidden_entries_look_the_same(
    pair: tuple[Path, Path, Path],
) -> None:
    root, with_hidden, sans = pair
    # The filesystem's own counts differ: what a leak would show.
    for rel in ("", "other"):
        raw_with, raw_sans = os.lstat(with_hidden / rel), os.lstat(sans / rel)
        assert raw_with.st_nlink > raw_sans.st_nlink
        assert raw_with.st_size > raw_sans.st_size
    # Raw, the size order of the subdirectories differs too: "other" is the bigger
    # one only where it holds hidden entries.
    assert os.lstat(with_hidden / "other").st_size > os.lstat(with_hidden / "sub").st_size
    assert os.lstat(sans / "other").st_size < os.lstat(sans / "sub").st_size
    ctx = _ctx(root)
    seen_with, seen_sans = _answers(ctx, with_hidden), _answers(ctx, sans)
    for what, answer in seen_sans.items():
        assert seen_with[what] == answer, what
    info = get_file_info(ctx, str(with_hidden)).structured
    assert info is not None
    assert info["size"] is None and info["hardLinks"] == 2 + 2  # sub and other
    assert WITHHELD_NOTE in (get_file_info(ctx, str(with_hidden)).text or "")


def test_a_policy_that_hides_nothing_reports_the_filesystems_counts(
    pair: tuple[Path, Path, Path],
) -> None:
    root, with_hidden, _sans = pair
    raw = os.lstat(with_hidden)
    for policy in (OPEN, Policy.of(protect=["a.txt"]), Policy.of(writable=False)):
        result = get_file_info(_ctx(root, policy), str(with_hidden))
        assert result.structured is not None
        assert result.structured["size"] == raw.st_size
        assert result.structured["hardLinks"] == raw.st_nlink
        assert WITHHELD_NOTE not in (result.text or "")
    # A file's counts are its own, under any policy.
    result = get_file_info(_ctx(root), str(with_hidden / "a.txt"))
    assert result.structured is not None
    assert result.structured["size"] == 1 and result.structured["hardLinks"] == 1


def test_a_directory_that_cannot_be_listed_shows_no_link_count(
    pair: tuple[Path, Path, Path],
) -> None:
    """Its visible subdirectories cannot be counted, and the filesystem's count would
    count hidden ones: neither is shown (served to an ordinary user: root reads any
    directory)."""
    root, with_hidden, _sans = pair
    locked = with_hidden / "other"
    locked.chmod(0o311)  # searchable, not readable
    assert os.lstat(locked).st_nlink > 2  # hidden subdirectories in it
    command = nobody_command(*ARGS, str(root))

    async def main() -> None:
        async with session(command=command, env={"PYTHONPATH": nobody_pythonpath()}) as s:
            result = await s.call("get_file_info", path=str(locked))
            assert not result.is_error
            assert result.structured_content["hardLinks"] is None
            assert result.structured_content["size"] is None
            text = await s.text("get_file_info", path=str(locked))
            assert "hardLinks:" not in text and WITHHELD_NOTE in text

    run(main)


def test_over_stdio_with_hide_and_the_secrets_preset(pair: tuple[Path, Path, Path]) -> None:
    root, with_hidden, sans = pair

    async def main() -> None:
        async with session(*ARGS, str(root)) as s:
            seen = {}
            for top in (with_hidden, sans):
                result = await s.call("get_file_info", path=str(top))
                structured = {k: v for k, v in result.structured_content.items() if k not in TIMES}
                seen[top.name] = json.dumps(structured).replace(top.name, "TOP")
                text = await s.text("get_file_info", path=str(top))
                assert "hardLinks: 4" in text and "\nsize:" not in text
                assert WITHHELD_NOTE in text
            assert seen["with"] == seen["sans"]

    run(main)

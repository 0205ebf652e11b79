"""Every read is bounded by its cap whatever the file's shape: a line longer than a
block is cut and said so, a file with no newline costs what its cap allows, and the
time budget holds inside one long line.

Memory is measured in a child process (its ``ru_maxrss`` after the call, less its
``ru_maxrss`` just before), with bounds generous enough for any machine and far
below what the unbounded readers took (grep_files over a 128 MiB sparse file with no
newline: +640 MiB; an edit_file dry run in a 30 MiB line: +300 MiB).  No timing is
asserted anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import Tree
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext, grepping
from sandboxfs.tools.grepping import grep_files

MiB = 1024 * 1024

#: Runs one tool call over ``f.txt`` in a fresh process and prints its peak memory
#: growth and a digest of the answer.  argv: directory, tool, JSON arguments, JSON limits.
_CHILD = """
import json, resource, sys
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.facade import Sandbox
from sandboxfs.tools import TOOLS, CallContext

root, tool, arguments, limits = sys.argv[1], sys.argv[2], *map(json.loads, sys.argv[3:])
limits = Limits(**limits)
sandbox = Sandbox(Resolver(AllowList.of([Root.open(root)])), limits)
handler = {spec.name: spec.handler for spec in TOOLS}[tool]
ctx = CallContext(sandbox, limits)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    result = handler(ctx, **arguments)
    answer = {"text": result.text[-2000:], "structured": result.structured}
except SandboxError as exc:
    answer = {"error": str(exc)}
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
if "structured" in answer:
    s = answer["structured"]
    for key in ("content", "diff"):
        if isinstance(s.get(key), str):
            s[key] = s[key][:2000]
print(json.dumps({"grown_mib": grown / 1024, **answer}))
"""


def _measured(root: Path, tool: str, arguments: dict[str, Any], **limits: Any) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), tool, json.dumps(arguments), json.dumps(limits)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def _sparse_line(path: Path, size: int, text: bytes = b"a" * 9000 + b"needle") -> None:
    """A file of ``size`` bytes with no newline: ``text`` (past the binary probe, so it
    is searched), then a hole of NUL bytes."""
    with path.open("wb") as out:
        out.write(text)
        out.truncate(size)


@pytest.mark.parametrize("mib", [128, pytest.param(512, marks=pytest.mark.slow)])
def test_grep_over_a_line_longer_than_a_block_holds_two_blocks_at_most(
    tree: Tree, mib: int
) -> None:
    _sparse_line(tree.root / "f.txt", mib * MiB)
    for path in ("f.txt", "."):  # the file itself, and the file in a walk
        found = _measured(tree.root, "grep_files", {"pattern": "needle", "path": path})
        assert found["grown_mib"] < 48, found  # two 4 MiB blocks, and room to spare
        s = found["structured"]
        assert (s["linesCut"], s["complete"], len(s["matches"])) == (1, False, 1)
        assert s["matches"][0]["line"] == 1
        assert s["matches"][0]["text"].endswith("… [line cut at 4 MiB]")
        assert found["text"].endswith(
            "\n[1 line longer than 4 MiB cut: only the first 4 MiB of each was searched]"
        )


def test_grep_checks_its_time_budget_inside_one_long_line(tree: Tree) -> None:
    _sparse_line(tree.root / "f.txt", 64 * MiB)
    ctx = CallContext(tree.sandbox(), Limits(search_seconds=1e-9))
    result = grep_files(ctx, "needle", path="f.txt")
    assert result.structured is not None
    assert result.structured["stoppedReason"] == ("stopped after 1e-09 s; narrow path or use glob")


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "f.txt", "head": 1},
        {"path": "f.txt", "tail": 1},
        {"path": "f.txt", "offset": 1, "limit": 1},
        {"path": "f.txt", "offset": 2, "limit": 1},
        {"path": "f.txt"},
    ],
    ids=["head", "tail", "window", "past-the-line", "whole"],
)
def test_reads_of_a_file_with_no_newline_stay_within_the_cap(
    tree: Tree, arguments: dict[str, Any]
) -> None:
    _sparse_line(tree.root / "f.txt", 128 * MiB)
    found = _measured(tree.root, "read_text_file", arguments, read_bytes=8 * MiB)
    assert found["grown_mib"] < 40, found  # the 8 MiB cap, a copy or two, and room to spare
    if arguments.get("offset") == 2:
        assert found["structured"]["totalLines"] == 1  # a window past the one line
    else:
        assert "larger than 8 MiB" in found["error"] or "more than the 8 MiB" in found["error"]


def test_read_multiple_files_of_lines_with_no_newline_share_one_cap(tree: Tree) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        _sparse_line(tree.root / name, 6 * MiB)
    paths = ["a.txt", "b.txt", "c.txt"]
    found = _measured(tree.root, "read_multiple_files", {"paths": paths}, read_bytes=16 * MiB)
    assert found["grown_mib"] < 96, found
    read, _, refused = found["structured"]["files"]
    assert "content" in read
    assert refused["error"]["code"] == "E2BIG"


def test_an_edit_in_one_long_line_is_summarized_not_diffed(tree: Tree) -> None:
    _sparse_line(tree.root / "f.txt", 30 * MiB, b"a" * 9000 + b"needle" + b"b" * 9000)
    edit = {"path": "f.txt", "edits": [{"oldText": "needle", "newText": "pin"}], "dryRun": True}
    found = _measured(tree.root, "edit_file", edit)
    assert found["grown_mib"] < 120, found  # the bytes before and after, and room to spare
    diff = found["structured"]["diff"]
    assert diff.endswith(
        "[diff not shown: line 1 (30.0 MiB) became line 1 (30.0 MiB), more than the "
        "4 MiB a diff shows]\n"
    )


# -- the cut, line by line (a small block) ---------------------------------------------


def test_a_line_longer_than_a_block_is_searched_in_its_first_block_only(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grepping, "_BLOCK", 64)
    (tree.root / "f.txt").write_bytes(
        b"one needle\n"
        + b"x" * 10 + b"needle" + b"x" * 200 + b"\n"  # cut: its needle is shown
        + b"y" * 100 + b"needle" + b"\n"  # cut: its needle is past the cut
        + b"needle three\n"
        + b"z" * 70  # the last line, cut, no newline
    )  # fmt: skip
    result = grep_files(CallContext(tree.sandbox(), Limits()), "needle", path="f.txt")
    assert result.structured is not None
    assert result.text == (
        "f.txt:1:one needle\n"
        f"f.txt:2:{'x' * 10}needle{'x' * 48} [line cut at 64 bytes]\n"
        "f.txt:4:needle three\n"
        "[3 lines longer than 64 bytes cut: only the first 64 bytes of each was searched]"
    )
    assert result.structured["matches"][1]["text"].endswith(" [line cut at 64 bytes]")
    assert [m["line"] for m in result.structured["matches"]] == [1, 2, 4]
    assert result.structured["linesCut"] == 3


def test_the_lines_of_an_answer_are_capped_at_the_read_cap(tree: Tree) -> None:
    (tree.root / "f.txt").write_text(("needle " + "w" * 493 + "\n") * 2000)
    ctx = CallContext(tree.sandbox(), Limits(read_bytes=256 * 1024))
    result = grep_files(ctx, "needle", path="f.txt", context=20, maxResults=10000)
    assert result.structured is not None
    assert result.structured["stoppedReason"] == (
        "stopped after 262144 bytes of matching lines; lower context or maxResults, "
        "or narrow the search"
    )
    shown = sum(len(line) for line in (result.text or "").splitlines())
    shown += sum(
        len(m["text"]) + sum(map(len, m["before"] + m["after"]))
        for m in result.structured["matches"]
    )
    assert shown < 256 * 1024 + 41 * 520 * 2  # the cap, and the match that passed it

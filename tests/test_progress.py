"""Progress for long work: a tools/call with a progressToken hears how far walks,
greps, big reads and copies have come, through the SDK client, in both eras over
stdio (HTTP: tests/test_http_transport.py), and never after its answer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from helpers import Tree
from mcp_client import ERAS, Era, run, session

BIG = 6 * 1024 * 1024  # over the size from which reads and copies report as they go


def _populate(root: Path) -> None:
    for i in range(40):
        d = root / "tree" / f"d{i}"
        d.mkdir(parents=True)
        for j in range(25):
            (d / f"f{j}.txt").write_text(f"line {i} {j}\nneedle\n")
    (root / "big.txt").write_bytes(b"x" * 100 + b"\n" + b"needle\n" + b"y" * BIG)


CASES: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    # tool, arguments, the unit reported, whether a total is known
    "directory_tree": ("directory_tree", {"path": "tree"}, "entries visited", False),
    "search_files": ("search_files", {"path": "tree", "pattern": "**/*.txt"}, "entries", False),
    "grep over a tree": ("grep_files", {"path": "tree", "pattern": "needle"}, "entries", False),
    "grep in a big file": ("grep_files", {"path": "big.txt", "pattern": "zz"}, "bytes", True),
    "code map": ("code_map", {"path": "tree"}, "entries", False),
    "big read": ("read_text_file", {"path": "big.txt"}, "bytes read", True),
    "copy": ("copy_file", {"source": "big.txt", "destination": "copy.txt"}, "bytes", True),
}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_long_calls_report_progress_through_the_sdk_client(tree: Tree, era: Era, case: str) -> None:
    _populate(tree.root)
    tool, arguments, unit, has_total = CASES[case]
    arguments = {
        k: str(tree.root / v) if k in ("path", "source", "destination") else v
        for k, v in arguments.items()
    }
    heard: list[tuple[float, float | None, str | None]] = []
    answered = False

    async def progress(done: float, total: float | None, message: str | None) -> None:
        assert not answered, "progress after the answer"
        heard.append((done, total, message))

    async def main() -> None:
        nonlocal answered
        async with session(str(tree.root), era=era) as s:
            result = await s.client.call_tool(tool, arguments, progress_callback=progress)
            answered = True
            assert not result.is_error, result
            # Without a token nothing is reported (and the call works the same).
            plain = await s.client.call_tool("list_allowed_directories", {})
            assert not plain.is_error

    run(main)
    assert heard, "no progress was reported"
    done = [d for d, _t, _m in heard]
    assert done == sorted(done) and done[0] > 0
    assert all(m is not None and unit in m for _d, _t, m in heard), heard
    if has_total:
        size = os.path.getsize(tree.root / "big.txt")
        assert {t for _d, t, _m in heard} == {size}
        if case != "grep in a big file":  # the last block of a grep is not reported
            assert done[-1] == size  # the end is always told

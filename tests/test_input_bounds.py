"""What a client sends is bounded in what it costs and in what the answer repeats of
it: the whole-line match of edit_file is one linear search (the same answers as the
window-by-window comparison it replaced, checked here against it), a miss quotes a
few KiB whatever oldText and the file hold, and a refused argument, an invalid
pattern or a path longer than any path is quoted cut, never whole.
"""

from __future__ import annotations

import io
import json

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import Tree
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import InvalidArgument
from sandboxfs.fs.limits import Limits
from sandboxfs.session.access import AccessControl
from sandboxfs.session.auditlog import AuditLog
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.effects import Caller
from sandboxfs.tools import CallContext
from sandboxfs.tools.grepping import grep_files
from sandboxfs.tools.reading import read_multiple_files
from sandboxfs.tools.textedit import WHITESPACE, Edit, EditError, _match_lines, apply_edits


def _window_by_window(file_lines: list[str], old_lines: list[str]) -> int | None:
    """The whole-line match as it was (time: the file's lines times oldText's)."""
    wanted = [line.strip(WHITESPACE) for line in old_lines]
    for i in range(len(file_lines) - len(wanted) + 1):
        if all(file_lines[i + j].strip(WHITESPACE) == wanted[j] for j in range(len(wanted))):
            return i
    return None


_LINES = st.lists(st.sampled_from(["a", " a", "a\t", "b", "", "  ", "c\r", "\u3000a", "x y"]))


@settings(max_examples=500, deadline=None)
@given(file_lines=_LINES, old_lines=_LINES.filter(bool))
def test_the_whole_line_match_is_the_window_by_window_match(
    file_lines: list[str], old_lines: list[str]
) -> None:
    assert _match_lines(file_lines, old_lines) == _window_by_window(file_lines, old_lines)


def test_the_whole_line_match_finds_a_window_among_a_million_lines() -> None:
    file_lines = ["x"] * 1_000_000 + ["  y"]
    assert _match_lines(file_lines, ["x"] * 500_000 + ["y"]) == 500_000
    assert _match_lines(file_lines, ["x"] * 500_000 + ["z"]) is None


@pytest.mark.parametrize(
    ("text", "old"),
    [
        ("x\n" * 200_000, "x\n" * 200_000 + "zz"),  # every line of oldText equal to every line
        ("y" * 3_000_000, "y" * 2_999_999 + "z"),  # one huge line each
        ("a\n" * 10 + "b" * 1_000_000 + "\n", "a\n" * 3 + "b" * 999_999 + "c\n"),
    ],
    ids=["repeated-lines", "one-huge-line", "huge-line-among-lines"],
)
def test_a_miss_quotes_a_few_kib_whatever_the_shapes(text: str, old: str) -> None:
    with pytest.raises(EditError) as caught:
        apply_edits(text, [Edit(old, "new")])
    message = str(caught.value)
    assert message.startswith("Could not find a match for edit 1 of 1")
    assert len(message) < 16 * 1024
    assert "characters)" in message or "more lines" in message


def test_a_refused_argument_is_explained_without_repeating_it(tree: Tree) -> None:
    access = AccessControl(AllowList.of([Root.open(str(tree.root))]), confine=False)
    server = SandboxfsServer(ServerOptions(), access)
    huge = "é\n" * (8 << 20)  # 16 MiB: quoting it whole took 25 s and 2 GiB
    result = trio.run(
        server.run_tool,
        "list_directory_with_sizes",
        {"path": ".", "sortBy": huge},
        Caller("2026-07-28"),
    )
    assert result["isError"] is True
    message = result["content"][0]["text"]
    assert message.startswith("Invalid arguments for tool list_directory_with_sizes: 'sortBy':")
    assert len(message) < 2048


def test_grep_quotes_an_invalid_pattern_cut_and_refuses_a_huge_one(tree: Tree) -> None:
    ctx = CallContext(tree.sandbox(), Limits())
    with pytest.raises(InvalidArgument) as caught:
        grep_files(ctx, "(" * 60_000, regex=True)
    assert len(str(caught.value)) < 1024
    assert "… (60000 characters)" in str(caught.value)
    with pytest.raises(InvalidArgument, match="pattern is longer than 65536 characters"):
        grep_files(ctx, "(" * (16 << 20), regex=True)


def test_read_multiple_files_names_a_path_longer_than_any_path_briefly(tree: Tree) -> None:
    (tree.root / "f.txt").write_text("content")
    huge = "d/" * (1 << 20)
    result = read_multiple_files(CallContext(tree.sandbox(), Limits()), [huge, "f.txt"])
    assert result.structured is not None
    refused, read = result.structured["files"]
    assert refused["path"] == f"{huge[:200]}… ({len(huge)} characters)"
    assert refused["error"]["code"] == "EINVAL"
    assert read == {"path": "f.txt", "content": "content", "revision": read["revision"]}
    assert len(result.text or "") < 1024


def test_the_audit_log_keeps_a_bounded_line_whatever_a_client_sends() -> None:
    """A 16 MiB path, 20,000 paths, a huge client name and an object where a path
    belongs: each audit line stays a few hundred KiB at most, and says what it cut."""
    stream = io.StringIO()
    log = AuditLog(stream)
    huge = "p/" * (8 << 20)
    arguments = {"path": huge, "paths": ["x" * 10_000] * 20_000, "source": {"a": [1] * 10**6}}
    log.record(
        tool="read_multiple_files",
        arguments=arguments,
        era="2025",
        protocol="2025-06-18",
        client="c" * (1 << 20),
        peer=None,
        outcome="error",
        code="-32602",
        size=0,
        seconds=0.001,
    )
    line = stream.getvalue()
    assert line.count("\n") == 1 and len(line) < 600_000
    entry = json.loads(line)
    assert entry["paths"]["path"].endswith(f"... [{len(huge):,} characters]")
    assert entry["paths"]["paths"][-1] == "... [20,000 items]"
    assert entry["paths"]["source"] == "<dict>"
    assert entry["client"].startswith("c" * 4096)

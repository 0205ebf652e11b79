"""Writing tools end to end, through the SDK client, in both protocol eras."""

from __future__ import annotations

import os
import stat

import pytest

from helpers import Tree, snapshot
from mcp_client import ERAS, Era, run, session


@pytest.mark.parametrize("era", ERAS)
def test_write_and_append(tree: Tree, era: Era) -> None:
    (tree.root / "keep.txt").write_text("old")
    (tree.root / "keep.txt").chmod(0o640)
    os.link(tree.root / "keep.txt", tree.outside / "other-name")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            assert await s.text("write_file", path="new.txt", content="héllo\n") == (
                "Successfully wrote to new.txt"
            )
            await s.text("write_file", path="keep.txt", content="new")
            assert await s.text("append_file", path="log.txt", content="a") == (
                "Successfully appended to log.txt"
            )
            await s.text("append_file", path="log.txt", content="b\n")
            refused = await s.error("append_file", path="keep2.txt", content="x")
            assert "hard links" in refused
            assert "ENOENT" in await s.error("write_file", path="no/such/dir.txt", content="x")
            assert "Access denied" in await s.error(
                "write_file", path=str(tree.outside / "x"), content="x"
            )
            assert "content" in await s.error("write_file", path="x.txt")

    (tree.root / "keep2.txt").write_text("two names")
    os.link(tree.root / "keep2.txt", tree.root / "keep2-link.txt")
    before = snapshot(tree.outside)
    run(main)
    assert (tree.root / "new.txt").read_text() == "héllo\n"
    assert (tree.root / "keep.txt").read_text() == "new"
    assert stat.S_IMODE((tree.root / "keep.txt").stat().st_mode) == 0o640
    assert (tree.outside / "other-name").read_text() == "old"
    assert (tree.root / "log.txt").read_text() == "ab\n"
    assert (tree.root / "keep2.txt").read_text() == "two names"
    assert snapshot(tree.outside) == before


@pytest.mark.parametrize("era", ERAS)
def test_edit_file(tree: Tree, era: Era) -> None:
    source = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    (tree.root / "code.py").write_text(source)
    (tree.root / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            preview = await s.text(
                "edit_file",
                path="code.py",
                edits=[{"oldText": "return 1", "newText": "return 10"}],
                dryRun=True,
            )
            assert preview.startswith("```diff\nIndex: code.py\n")
            assert "-        return 1\n+        return 10\n" in preview
            assert (tree.root / "code.py").read_text() == source  # a dry run changes nothing

            await s.text(
                "edit_file",
                path="code.py",
                edits=[
                    {"oldText": "if x:\n    return 1", "newText": "if y:\n    return 3\n    # ok"},
                    {"oldText": "return 2", "newText": "return 4"},
                ],
            )
            assert (tree.root / "code.py").read_text() == (
                "def f(x):\n    if y:\n        return 3\n        # ok\n    return 4\n"
            )
            await s.text(
                "edit_file", path="crlf.txt", edits=[{"oldText": "two\nthree", "newText": "2\n3"}]
            )
            missing = await s.error(
                "edit_file",
                path="code.py",
                edits=[
                    {"oldText": "return 4", "newText": "return 5"},
                    {"oldText": "    if y:\n        return  3", "newText": "x"},
                ],
            )
            assert "edit 2 of 2" in missing
            assert "no edits were applied" in missing
            assert "2|     if y:" in missing  # the closest lines, numbered
            assert '"        return 3"' in missing  # the first differing line, JSON-quoted
            assert "return 4" in (tree.root / "code.py").read_text()  # edit 1 not applied
            assert "Access denied" in await s.error(
                "edit_file",
                path=str(tree.outside / "secret.txt"),
                edits=[{"oldText": "C", "newText": "D"}],
            )

    run(main)
    assert (tree.root / "crlf.txt").read_bytes() == b"one\r\n2\r\n3\r\n"


@pytest.mark.parametrize("era", ERAS)
def test_directories_moves_and_copies(tree: Tree, era: Era) -> None:
    (tree.root / "f.txt").write_text("content")
    os.utime(tree.root / "f.txt", ns=(10**18, 10**18))

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            assert await s.text("create_directory", path="a/b/c") == (
                "Successfully created directory a/b/c"
            )
            await s.text("create_directory", path="a/b/c")  # exists: silently fine
            assert "EEXIST" in await s.error("create_directory", path="f.txt")
            assert await s.text("copy_file", source="f.txt", destination="a/copy.txt") == (
                "Successfully copied f.txt to a/copy.txt"
            )
            assert "EEXIST" in await s.error("copy_file", source="f.txt", destination="a/copy.txt")
            assert "EISDIR" in await s.error("copy_file", source="a", destination="a2")
            assert await s.text("move_file", source="a/copy.txt", destination="a/b/moved.txt") == (
                "Successfully moved a/copy.txt to a/b/moved.txt"
            )
            assert "EEXIST" in await s.error(
                "move_file", source="f.txt", destination="a/b/moved.txt"
            )
            await s.text("move_file", source="a", destination="renamed")
            assert "Access denied" in await s.error(
                "move_file", source="f.txt", destination=str(tree.outside / "stolen")
            )
            assert "Access denied" in await s.error(
                "copy_file", source=str(tree.outside / "secret.txt"), destination="leak"
            )

    before = snapshot(tree.outside)
    run(main)
    assert (tree.root / "renamed" / "b" / "moved.txt").read_text() == "content"
    assert (tree.root / "renamed" / "b" / "moved.txt").stat().st_mtime_ns == 10**18
    assert (tree.root / "f.txt").read_text() == "content"
    assert not (tree.root / "leak").exists()
    assert snapshot(tree.outside) == before


def test_read_only_mode_serves_only_read_only_tools(tree: Tree) -> None:
    async def main() -> None:
        async with session("--read-only", str(tree.root)) as s:
            tools = (await s.client.list_tools()).tools
            names = {t.name for t in tools}
            assert names == {
                "read_file",
                "read_text_file",
                "read_media_file",
                "read_multiple_files",
                "list_directory",
                "list_directory_with_sizes",
                "directory_tree",
                "search_files",
                "get_file_info",
                "list_allowed_directories",
                "grep_files",
                "code_map",
            }
            assert all(t.annotations and t.annotations.read_only_hint for t in tools)
            with pytest.raises(Exception, match="Unknown tool: write_file"):
                await s.call("write_file", path="x", content="y")

    run(main)
    assert not (tree.root / "x").exists()

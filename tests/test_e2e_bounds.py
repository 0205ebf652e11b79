"""Slow and huge trees: per-step timeouts, the entry cap, special files that must
not hang the server, and one slow call never blocking the others."""

from __future__ import annotations

import os

import trio

from helpers import Tree
from mcp_client import run, session

STALL = {"SANDBOXFS_TEST_STALL": "5:slow"}


def test_a_stalled_directory_read_times_out_alone(tree: Tree) -> None:
    (tree.root / "slow").mkdir()
    (tree.root / "slow" / "f.txt").write_text("x")
    (tree.root / "fast.txt").write_text("fast")

    async def main() -> None:
        async with session(str(tree.root), "--fs-timeout", "1", env=STALL) as s:
            message = await s.error("search_files", path=".", pattern="**/*")
            assert message == f"Filesystem call timed out after 1000 ms: {tree.root}/slow"
            message = await s.error("read_text_file", path="slow/f.txt")
            assert message == "Filesystem call timed out after 1000 ms: slow/f.txt"
            excluded = await s.text(
                "search_files", path=".", pattern="**/*.txt", excludePatterns=["slow"]
            )
            assert excluded == f"{tree.root}/fast.txt"
        # While slow calls are stalled in the background, fast ones still answer.
        async with session(str(tree.root), "--fs-timeout", "3", env=STALL) as s:
            results: list[str] = []

            async def slow_call() -> None:
                results.append(await s.error("list_directory", path="slow"))

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(slow_call)
                await s.wait_for_log("TEST MODE: stalling a step about slow", count=3)
                assert await s.text("read_text_file", path="fast.txt") == "fast"
                assert results == []  # answered while all three were stalled
            assert len(results) == 3 and all("timed out" in r for r in results)

    run(main)


def test_walks_stop_at_the_entry_cap(tree: Tree) -> None:
    for i in range(60):
        (tree.root / f"f{i:02}").write_text("")
    (tree.root / "big").mkdir()
    for i in range(100):
        (tree.root / "big" / f"b{i:03}").write_text("")

    async def main() -> None:
        async with session(str(tree.root), "--max-walk-entries", "100") as s:
            stopped = await s.error("search_files", path=".", pattern="**/none")
            assert "search_files stopped after visiting 100 entries" in stopped
            tree_stopped = await s.error("directory_tree", path=".")
            assert "directory_tree stopped after visiting 100 entries" in tree_stopped
            # Excluded entries do not count and are never read.
            ok = await s.text("search_files", path=".", pattern="f5*", excludePatterns=["big"])
            assert len(ok.splitlines()) == 10
            shallow = await s.text("directory_tree", path=".", depth=1)
            assert shallow.count('"name"') == 61

    run(main)


def test_default_cap_is_100000_entries(tree: Tree) -> None:
    many = tree.root / "many"
    many.mkdir()
    fd = os.open(many, os.O_PATH | os.O_DIRECTORY)
    try:
        for i in range(100_001):
            os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)

    async def main() -> None:
        async with session(str(tree.root)) as s:
            message = await s.error("search_files", path=".", pattern="**/none")
            assert "stopped after visiting 100000 entries" in message
            assert "excludePatterns" in message

    run(main)


def test_special_files_never_hang_the_server(tree: Tree) -> None:
    os.mkfifo(tree.root / "fifo")

    async def main() -> None:
        async with session(str(tree.root)) as s:
            with trio.fail_after(60):  # a guard against a hang, not a speed check
                for tool, extra in [
                    ("read_text_file", {}),
                    ("read_media_file", {}),
                    ("write_file", {"content": "x"}),
                    ("append_file", {"content": "x"}),
                    ("edit_file", {"edits": [{"oldText": "a", "newText": "b"}]}),
                    ("copy_file", {}),
                ]:
                    if tool == "copy_file":
                        message = await s.error(tool, source="fifo", destination="copy")
                    else:
                        message = await s.error(tool, path="fifo", **extra)
                    assert "Not a regular file" in message, (tool, message)
                info = await s.text("get_file_info", path="fifo")
                assert "type: other" in info

    run(main)

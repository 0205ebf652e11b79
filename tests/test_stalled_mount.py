"""A stalled mount never freezes the server, now that quick calls on local
filesystems run inline (on the event loop, no worker thread).

The stalled mount is a real FUSE filesystem that never answers
(tests/stalled_fuse.py), mounted inside an allowed directory on a local
filesystem: before the server starts, after it started (the mount table is read
again when it changes), and under a call already on its way (the inline path
resolves with RESOLVE_NO_XDEV, so it stops at the mount point instead of waiting
on it).  Each test waits for the FUSE connection's own count of waiting
operations, never for a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from stalled_fuse import StalledMount, stalled_mount

from helpers import Tree
from mcp_client import Session, run, session, wait_for
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Confinement, CrossesMount
from sandboxfs.core.mounts import MountTable
from sandboxfs.core.resolver import Resolver


@pytest.fixture
def stalled(tree: Tree) -> Iterator[StalledMount]:
    (tree.root / "stalled").mkdir()
    (tree.root / "fast.txt").write_text("fast")
    with stalled_mount(tree.root / "stalled") as mount:
        yield mount


async def _stalled_calls_leave_others_answered(s: Session, mount: StalledMount) -> None:
    """Two calls stall on the mount; while both wait there, quick calls are answered;
    once the mount's connection is aborted, the stalled ones are answered too."""
    results: list[str] = []

    async def stalled_call(tool: str, path: str) -> None:
        result = await s.call(tool, path=path)
        results.append(f"{result.is_error}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stalled_call, "get_file_info", "stalled/x")
        nursery.start_soon(stalled_call, "read_text_file", "stalled/y")
        await wait_for(lambda: mount.waiting() >= 2)
        assert await s.text("read_text_file", path="fast.txt") == "fast"
        assert "fast.txt" in await s.text("list_directory", path=".")
        assert results == []  # answered while both calls were stalled on the mount
        mount.abort()
    assert results == ["True", "True"]


def test_a_stalled_mount_beneath_a_directory_sends_its_calls_to_threads(
    tree: Tree, stalled: StalledMount
) -> None:
    async def main() -> None:
        async with session(str(tree.root), "--fs-timeout", "600") as s:
            notes = await s.text("list_allowed_directories")
            assert "worker threads" in notes and "fuse.stalled mount beneath it" in notes
            assert "worker threads" in s.log()  # the startup log says it too
            await _stalled_calls_leave_others_answered(s, stalled)

    run(main)


def test_a_stalled_call_times_out(tree: Tree, stalled: StalledMount) -> None:
    async def main() -> None:
        async with session(str(tree.root), "--fs-timeout", "1") as s:
            message = await s.error("get_file_info", path="stalled/x")
            assert message == "Filesystem call timed out after 1000 ms: stalled/x"
            assert stalled.waiting() >= 1  # it did reach the mount, and still waits there
            assert await s.text("read_text_file", path="fast.txt") == "fast"

    run(main)


def test_a_mount_made_after_start_is_seen_by_the_next_call(tree: Tree) -> None:
    (tree.root / "stalled").mkdir()
    (tree.root / "fast.txt").write_text("fast")

    async def main() -> None:
        async with session(str(tree.root), "--fs-timeout", "600") as s:
            assert "Calls run inline" in await s.text("list_allowed_directories")
            with stalled_mount(tree.root / "stalled") as mount:
                assert "worker threads" in await s.text("list_allowed_directories")
                await _stalled_calls_leave_others_answered(s, mount)
            assert "Calls run inline" in await s.text("list_allowed_directories")

    run(main)


def test_the_inline_path_stops_at_a_mount_point_without_waiting(
    tree: Tree, stalled: StalledMount
) -> None:
    """A mount made while an inline call is on its way, after the mount table was
    looked at: its resolution stops at the mount point (EXDEV, CrossesMount, the call
    runs again in a worker thread) instead of waiting on the mount."""
    resolver = Resolver(
        AllowList.of([Root.open(str(tree.root))]), confinement=Confinement(inline=True)
    )
    outcome: list[BaseException | None] = []

    def resolve() -> None:
        try:
            resolver.resolve("stalled/x").close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(timeout=20)  # a deadline for a hang, not a measure: it takes microseconds
    stuck = worker.is_alive()
    stalled.abort()  # let a resolution that did wait on the mount end
    worker.join()
    assert not stuck, "the inline resolution waited on the stalled mount"
    assert len(outcome) == 1 and isinstance(outcome[0], CrossesMount)


def test_the_mount_table_knows_what_is_local(tree: Tree, stalled: StalledMount) -> None:
    table = MountTable.open()
    st = tree.root.stat()
    device = (st.st_dev >> 8 & 0xFFF, st.st_dev & 0xFF | st.st_dev >> 12 & 0xFFF00)
    local, kind = table.local(str(tree.root), device)
    assert not local and kind.endswith("with a fuse.stalled mount beneath it")
    assert table.local(str(Path(tree.root / "stalled")), (0, 0)) == (False, "fuse.stalled")
    table.close()

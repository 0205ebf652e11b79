"""Roots (2025-era clients only), scenario by scenario as the seed's "How It Works" says."""

from __future__ import annotations

import json

import mcp_types as types
import trio
import trio.testing

from helpers import Tree
from mcp_client import Roots, run, session, spawn_stdio, wait_for


async def _allowed(s) -> list[str]:  # type: ignore[no-untyped-def]
    result = await s.call("list_allowed_directories")
    return list(result.structured_content["directories"])


async def _changed(s, roots: Roots, paths: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Change the client's Roots and wait until the server has asked for them (calls
    from then on wait for the update to land)."""
    asked = roots.asked
    roots.paths = paths
    await s.client.session.send_notification(types.RootsListChangedNotification())
    await wait_for(lambda: roots.asked > asked)


def test_client_roots_replace_the_command_line(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    (other / "o.txt").write_text("from roots")
    (tree.root / "r.txt").write_text("from cli")
    roots = Roots([str(other)])

    async def main() -> None:
        async with session("--no-landlock", str(tree.root), era="2025", roots=roots) as s:
            assert await _allowed(s) == [str(other)]
            assert await s.text("read_text_file", path=str(other / "o.txt")) == "from roots"
            assert "Access denied" in await s.error("read_text_file", path=str(tree.root / "r.txt"))
            log = s.log()
        assert (
            "Effective allowed directories (from the client's Roots, which replaced the "
            f"command-line directories):\n  {other}" in log
        )

    run(main)


def test_confine_roots_narrows_clamps_and_ignores(tree: Tree) -> None:
    (tree.root / "project").mkdir()
    (tree.root / "project" / "p.txt").write_text("project")
    (tree.root / "sibling.txt").write_text("sibling")
    elsewhere = tree.base / "elsewhere"
    elsewhere.mkdir()
    roots = Roots([str(tree.root / "project"), str(elsewhere)])

    async def main() -> None:
        async with session("--confine-roots", str(tree.root), era="2025", roots=roots) as s:
            # Inside a command-line directory: allowed as given (narrowing).
            assert await _allowed(s) == [str(tree.root / "project")]
            assert (
                await s.text("read_text_file", path=str(tree.root / "project" / "p.txt"))
                == "project"
            )
            assert "Access denied" in await s.error(
                "read_text_file", path=str(tree.root / "sibling.txt")
            )
            # A root containing the command-line directory is clamped to it.
            await _changed(s, roots, ["/"])
            assert await _allowed(s) == [str(tree.root)]
            assert await s.text("read_text_file", path=str(tree.root / "sibling.txt")) == "sibling"
            assert "Access denied" in await s.error("list_directory", path=str(elsewhere))
            log = s.log()
        assert (
            f"Ignoring client root outside the command-line directories: file://{elsewhere}" in log
        )
        assert "confined to the command-line directories" in log

    run(main)


def test_calls_wait_for_roots_being_fetched(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()

    class HeldRoots(Roots):
        """Answers roots/list only once the test releases it."""

        def __init__(self, paths: list[str]) -> None:
            super().__init__(paths)
            self.entered = 0
            self.release = trio.Event()
            self.release.set()  # the first answer (at initialize) is not held

        async def answer(self, ctx):  # type: ignore[no-untyped-def]
            self.entered += 1
            await self.release.wait()
            return await super().answer(ctx)

    roots = HeldRoots([str(other)])

    async def main() -> None:
        async with session("--no-landlock", str(tree.root), era="2025", roots=roots) as s:
            assert await _allowed(s) == [str(other)]
            roots.paths = [str(tree.root)]
            roots.release = trio.Event()
            await s.client.session.send_notification(types.RootsListChangedNotification())
            await wait_for(lambda: roots.entered == 2)  # the server asked; no answer yet
            answers: list[list[str]] = []

            async def call() -> None:
                answers.append(await _allowed(s))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await trio.testing.wait_all_tasks_blocked()  # the call was sent: it waits
                assert answers == []
                roots.release.set()
            assert answers == [[str(tree.root)]]

    run(main)


def test_empty_update_revokes_once_roots_were_in_force(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    (other / "o.txt").write_text("o")
    roots = Roots([])

    async def main() -> None:
        async with session("--no-landlock", str(tree.root), era="2025", roots=roots) as s:
            # No root has been in force yet: an empty answer keeps the command line.
            assert await _allowed(s) == [str(tree.root)]
            await _changed(s, roots, [str(other)])
            assert await _allowed(s) == [str(other)]
            await _changed(s, roots, [])
            assert await _allowed(s) == []
            denied = await s.error("read_text_file", path=str(other / "o.txt"))
            assert denied == "Access denied - no allowed directories"
            await _changed(s, roots, [str(other / "missing"), str(other / "o.txt")])
            assert await _allowed(s) == []
            await _changed(s, roots, [str(other)])
            assert await s.text("read_text_file", path=str(other / "o.txt")) == "o"
            log = s.log()
        assert "access is revoked until it exposes one again" in log
        assert "Skipping client root that cannot be opened" in log
        assert "Skipping client root that is not a directory" in log

    run(main)


def test_no_directories_and_no_roots_capability_exits_1(tree: Tree) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        },
    }
    process = spawn_stdio()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(init) + "\n").encode())
    process.stdin.flush()  # stdin stays open: the server must leave by itself
    reply = json.loads(process.stdout.readline())
    code = process.wait(timeout=20)
    stderr = process.stderr.read().decode()  # type: ignore[union-attr]
    process.stdin.close()
    process.stdout.close()
    process.stderr.close()  # type: ignore[union-attr]
    assert code == 1
    assert "no allowed directories" in reply["error"]["message"]
    assert "Server cannot operate" in stderr


def test_no_directories_but_roots_capability_keeps_the_connection(tree: Tree) -> None:
    (tree.root / "f").write_text("late")
    roots = Roots([])

    async def main() -> None:
        async with session(era="2025", roots=roots) as s:
            assert await _allowed(s) == []
            assert "no allowed directories" in await s.error(
                "read_text_file", path=str(tree.root / "f")
            )
            await _changed(s, roots, [str(tree.root)])
            assert await s.text("read_text_file", path=str(tree.root / "f")) == "late"

    run(main)


def test_a_2026_connection_never_asks_for_roots(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    roots = Roots([str(other)])

    async def main() -> None:
        async with session(str(tree.root), era="2026", roots=roots) as s:
            assert await _allowed(s) == [str(tree.root)]
        async with session(era="2026", roots=roots) as s:
            message = await s.error("list_directory", path="/")
            assert message.startswith("Server cannot operate: no allowed directories")
            assert "2026-07-28" in message
        assert roots.asked == 0

    run(main)


def test_symlinked_root_is_allowed_in_both_forms(tree: Tree) -> None:
    real = tree.base / "real"
    real.mkdir()
    (real / "f").write_text("both")
    link = tree.base / "link"
    link.symlink_to(real)
    roots = Roots([str(link)])

    async def main() -> None:
        async with session("--no-landlock", str(tree.root), era="2025", roots=roots) as s:
            assert await _allowed(s) == [str(link), str(real)]
            assert await s.text("read_text_file", path=str(link / "f")) == "both"
            assert await s.text("read_text_file", path=str(real / "f")) == "both"

    run(main)


def test_landlock_confines_client_roots_to_the_command_line(tree: Tree) -> None:
    (tree.root / "project").mkdir()
    elsewhere = tree.base / "elsewhere"
    elsewhere.mkdir()
    roots = Roots([str(tree.root / "project"), str(elsewhere)])

    async def main() -> None:
        async with session(str(tree.root), era="2025", roots=roots) as s:
            result = await s.call("list_allowed_directories")
            assert result.structured_content["directories"] == [str(tree.root / "project")]
            notes = result.structured_content["notes"]
            assert any("Landlock confines this server" in note for note in notes)
            log = s.log()
        assert "Landlock ABI" in log
        assert (
            f"Ignoring client root outside the command-line directories: file://{elsewhere}" in log
        )

    run(main)


def test_answers_the_sdk_client_sends_over_the_bounds_are_refused_whole(tree: Tree) -> None:
    """Through the SDK's own client: an error answer, 20,000 roots and a 100 kB URI
    (all of which the SDK lets through) are each dropped whole, with the Roots in
    force kept; the good answer after them is taken."""
    first, good = tree.base / "first", tree.base / "good"
    first.mkdir()
    good.mkdir()

    class Scripted(Roots):
        def __init__(self) -> None:
            super().__init__([str(first)])
            self.next: types.ListRootsResult | types.ErrorData | None = None

        async def answer(self, ctx):  # type: ignore[no-untyped-def]
            if self.next is None:
                return await super().answer(ctx)
            self.asked += 1
            return self.next

    roots = Scripted()
    many = [types.Root(uri=(first / str(i)).as_uri()) for i in range(20_000)]
    scripted = [
        types.ErrorData(code=-32603, message="roots are busy\nforged"),
        types.ListRootsResult(roots=many),
        types.ListRootsResult(roots=[types.Root(uri="file:///" + "a" * 100_000)]),
    ]

    async def main() -> None:
        async with session("--no-landlock", era="2025", roots=roots) as s:
            assert await _allowed(s) == [str(first)]
            for answer in scripted:
                roots.next = answer
                await _changed(s, roots, [])
                assert await _allowed(s) == [str(first)]
            roots.next = None
            await _changed(s, roots, [str(good)])
            assert await _allowed(s) == [str(good)]
            log = s.log()
        assert "the client answered with an error -32603: " in log
        assert "it names 20000 roots; at most 256 are taken" in log
        assert "root 1 has a URI of 100008 characters" in log
        assert "roots are busy\nforged" not in log

    run(main)

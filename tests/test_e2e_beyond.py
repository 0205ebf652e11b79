"""Beyond the reference: grep_files, delete_file, ranged reads, revisions and
conditional writes, richer get_file_info, strict edits — end to end."""

from __future__ import annotations

import os
import tracemalloc

import pytest
import trio

from helpers import Tree, snapshot
from mcp_client import ERAS, Era, run, session
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext
from sandboxfs.tools.reading import read_text_file


@pytest.mark.parametrize("era", ERAS)
def test_grep_files(tree: Tree, era: Era) -> None:
    root = tree.root
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "a.py").write_text("import os\n# TODO: one\nx = 1\n")
    (root / "src" / "pkg" / "b.py").write_text("def f():\n    pass  # todo: two\n")
    (root / "src" / "notes.txt").write_text("TODO in text\n")
    (root / "src" / "image.bin").write_bytes(b"\x00\x01TODO")
    (root / "src" / "out").symlink_to(tree.outside)  # never followed
    (tree.outside / "leak.py").write_text("TODO outside\n")

    async def main() -> None:
        async with session(str(root), era=era) as s:
            found = await s.text("grep_files", pattern="TODO", path="src")
            assert found.splitlines() == ["src/a.py:2:# TODO: one", "src/notes.txt:1:TODO in text"]
            result = await s.call("grep_files", pattern="todo", path="src", caseSensitive=False)
            assert [m["line"] for m in result.structured_content["matches"]] == [2, 1, 2]
            assert result.structured_content["binaryFilesSkipped"] == 1
            only_py = await s.text("grep_files", pattern="TODO", path="src", glob="*.py")
            assert only_py == "src/a.py:2:# TODO: one"
            regex = await s.text("grep_files", pattern=r"^def \w+", path="src", regex=True)
            assert regex == "src/pkg/b.py:1:def f():"
            literal = await s.text("grep_files", pattern="x = 1", path="src/a.py")
            assert literal == "src/a.py:3:x = 1"
            with_context = await s.text("grep_files", pattern="TODO", path="src/a.py", context=1)
            assert with_context.splitlines() == [
                "src/a.py-1-import os",
                "src/a.py:2:# TODO: one",
                "src/a.py-3-x = 1",
            ]
            capped = await s.text("grep_files", pattern="o", path="src", maxResults=2)
            assert capped.splitlines()[-1].startswith("[stopped after 2 matches")
            invalid = await s.error("grep_files", pattern="(unclosed", regex=True)
            assert invalid.startswith("Invalid regular expression '(unclosed'")
            assert "leak" not in await s.text("grep_files", pattern="outside", path="src")
            assert "Access denied" in await s.error(
                "grep_files", pattern="x", path=str(tree.outside)
            )

    run(main)


def test_a_catastrophic_regex_answers_quickly(tree: Tree) -> None:
    (tree.root / "big.txt").write_text(("a" * 5000 + "!\n") * 200)

    async def main() -> None:
        # A backtracking engine would take longer than the age of the universe on
        # these; RE2 answers (the client's read timeout bounds the wait).
        async with session(str(tree.root)) as s:
            assert await s.text("grep_files", pattern="(a+)+$", regex=True) == "No matches found"
            assert await s.text("grep_files", pattern="(a|aa)*b", regex=True) == "No matches found"

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_delete_file(tree: Tree, era: Era) -> None:
    root = tree.root
    (root / "f.txt").write_text("x")
    (root / "empty").mkdir()
    (root / "full" / "deep").mkdir(parents=True)
    (root / "full" / "deep" / "g").write_text("g")
    (root / "full" / "escape").symlink_to(tree.outside)
    (root / "link").symlink_to(tree.outside / "secret.txt")
    before = snapshot(tree.outside)

    async def main() -> None:
        async with session(str(root), era=era) as s:
            assert await s.text("delete_file", path="f.txt") == "Successfully deleted f.txt"
            await s.text("delete_file", path="empty")
            refused = await s.error("delete_file", path="full")
            assert "ENOTEMPTY" in refused and "recursive" in refused
            assert "4 entries" in await s.text("delete_file", path="full", recursive=True)
            await s.text("delete_file", path="link")  # the link, never its target
            assert "ENOENT" in await s.error("delete_file", path="f.txt")
            assert "Access denied" in await s.error("delete_file", path=str(root), recursive=True)
            assert "Access denied" in await s.error(
                "delete_file", path=str(tree.outside / "secret.txt")
            )
        async with session("--read-only", str(root), era=era) as s:
            with pytest.raises(Exception, match="Unknown tool: delete_file"):
                await s.call("delete_file", path="x")

    run(main)
    assert os.listdir(root) == []
    assert snapshot(tree.outside) == before


def test_ranged_reads(tree: Tree) -> None:
    (tree.root / "log.txt").write_text("".join(f"line {i}\n" for i in range(1, 901)))
    (tree.root / "crlf.txt").write_bytes(b"a\r\nb\r\nc")

    async def main() -> None:
        async with session(str(tree.root)) as s:
            window = await s.text("read_text_file", path="log.txt", offset=40, limit=3)
            assert window == "40\tline 40\n41\tline 41\n42\tline 42\n\n[lines 40-42 of 900 total]"
            result = await s.call("read_text_file", path="log.txt", offset=899)
            assert result.structured_content["lines"] == ["line 899", "line 900"]
            past = await s.text("read_text_file", path="log.txt", offset=5000)
            assert past == "'log.txt' has 900 lines; offset 5000 is past the end"
            first = await s.text("read_text_file", path="log.txt", limit=1)
            assert first == "1\tline 1\n\n[lines 1-1 of 900 total]"
            crlf = await s.text("read_text_file", path="crlf.txt", offset=2)
            assert crlf == "2\tb\n3\tc\n\n[lines 2-3 of 3 total]"
            assert "offset" in await s.error("read_text_file", path="log.txt", offset=0)
            assert "cannot be combined" in await s.error(
                "read_text_file", path="log.txt", offset=2, head=1
            )

    run(main)


def test_a_window_deep_in_a_huge_file_needs_only_the_window(tree: Tree) -> None:
    """A sparse 1 GiB file of 64 KiB lines; a window near its end is read in bounded
    memory (the whole file streams past, only the window is kept)."""
    size, line = 1 << 30, 1 << 16
    with (tree.root / "huge.txt").open("wb") as f:
        f.truncate(size)
        for end in range(line, size + 1, line):
            f.seek(end - 1)
            f.write(b"\n")
    ctx = CallContext(tree.sandbox(), Limits())
    tracemalloc.start()
    try:
        result = read_text_file(ctx, "huge.txt", offset=16_000, limit=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.text is not None
    assert result.text.endswith("[lines 16000-16009 of 16384 total]")
    assert result.structured is not None and result.structured["revision"] is None  # too big
    assert peak < 16 * line * 8, peak  # the window (640 KiB) and chunks, never the file


@pytest.mark.parametrize("era", ERAS)
def test_revisions_and_conditional_mutations(tree: Tree, era: Era) -> None:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f.txt").write_text("v1")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            read = await s.call("read_text_file", path="d/f.txt")
            rev1 = read.structured_content["revision"]
            assert rev1.startswith("sha256:")
            info = await s.call("get_file_info", path="d/f.txt")
            assert info.structured_content["revision"] == rev1
            plain = await s.call("list_directory", path="d")
            assert plain.structured_content["revision"] is None  # only when asked for
            listing = (
                await s.call("list_directory", path="d", withRevision=True)
            ).structured_content["revision"]
            assert listing.startswith("tree:")
            written = await s.call(
                "write_file", path="d/f.txt", content="v2", expectedRevision=rev1
            )
            rev2 = written.structured_content["revision"]
            stale = await s.error("write_file", path="d/f.txt", content="v3", expectedRevision=rev1)
            assert "Revision mismatch" in stale and "nothing was changed" in stale
            assert await s.text("read_text_file", path="d/f.txt") == "v2"
            again = (
                await s.call("list_directory", path="d", withRevision=True)
            ).structured_content["revision"]
            assert again != listing  # a change below changes the directory's revision
            assert "Revision mismatch" in await s.error(
                "edit_file",
                path="d/f.txt",
                edits=[{"oldText": "v2", "newText": "v3"}],
                expectedRevision=rev1,
            )
            assert "Revision mismatch" in await s.error(
                "append_file", path="d/f.txt", content="+", expectedRevision=rev1
            )
            await s.text("append_file", path="d/f.txt", content="+", expectedRevision=rev2)
            await s.text("write_file", path="d/new.txt", content="n", expectedRevision="absent")
            assert "Revision mismatch" in await s.error(
                "write_file", path="d/new.txt", content="n", expectedRevision="absent"
            )
            rev3 = (await s.call("get_file_info", path="d/f.txt")).structured_content["revision"]
            assert "Revision mismatch" in await s.error(
                "move_file", source="d/f.txt", destination="d/g.txt", expectedRevision=rev1
            )
            moved = await s.call(
                "move_file",
                source="d/f.txt",
                destination="d/g.txt",
                expectedRevision=rev3,
                expectedDestinationRevision="absent",
            )
            assert moved.structured_content["revision"] == rev3
            copied = await s.call(
                "copy_file", source="d/g.txt", destination="d/h.txt", expectedRevision=rev3
            )
            assert copied.structured_content["revision"] == rev3
            assert (await s.call("get_file_info", path="d")).structured_content["revision"] is None
            tree_rev = (
                await s.call("get_file_info", path="d", withRevision=True)
            ).structured_content["revision"]
            assert "Revision mismatch" in await s.error(
                "delete_file", path="d", recursive=True, expectedRevision=listing
            )
            await s.text("delete_file", path="d", recursive=True, expectedRevision=tree_rev)

    run(main)
    assert not (tree.root / "d").exists()


def test_two_servers_cannot_lose_an_update(tree: Tree) -> None:
    """Two sandboxfs processes increment one counter with conditional writes."""
    (tree.root / "counter").write_text("0")
    attempts = 60

    async def worker(successes: list[int]) -> None:
        async with session(str(tree.root)) as s:
            for _ in range(attempts):
                read = await s.call("read_text_file", path="counter")
                value = int(read.content[0].text)  # type: ignore[union-attr]
                revision = read.structured_content["revision"]  # type: ignore[index]
                write = await s.call(
                    "write_file", path="counter", content=str(value + 1), expectedRevision=revision
                )
                if not write.is_error:
                    successes.append(1)
                else:  # a conflict: the other server wrote first
                    assert write.structured_content["error"]["code"] == "ESTALE"  # type: ignore[index]

    async def main() -> None:
        successes: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker, successes)
            nursery.start_soon(worker, successes)
        assert int((tree.root / "counter").read_text()) == len(successes)
        assert len(successes) >= attempts  # both made progress

    run(main)


def test_big_trees_are_listed_without_a_revision(tree: Tree) -> None:
    for i in range(30):
        (tree.root / "big" / f"d{i}").mkdir(parents=True)

    async def main() -> None:
        async with session(str(tree.root), "--max-revision-entries", "20") as s:
            listing = await s.call("list_directory", path="big", withRevision=True)
            assert not listing.is_error and listing.structured_content["revision"] is None
            assert len(listing.structured_content["entries"]) == 30
            info = await s.call("get_file_info", path="big", withRevision=True)
            assert info.structured_content["revision"] is None
            assert "revision: not computed (more than 20 entries below)" in info.content[0].text  # type: ignore[union-attr]
            plain = await s.call("get_file_info", path="big")
            assert "revision" not in plain.content[0].text  # type: ignore[union-attr]
            small = await s.call("list_directory", path="big/d0", withRevision=True)
            assert small.structured_content["revision"].startswith("tree:")
            # A conditional mutation still checks the whole tree (up to the walk limit).
            assert "Revision mismatch" in await s.error(
                "create_directory", path="big", expectedRevision="tree:0"
            )

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_richer_file_info(tree: Tree, era: Era) -> None:
    target = tree.root / "f.txt"
    target.write_text("data")
    os.setxattr(str(target), "user.origin", b"test")
    (tree.root / "in-link").symlink_to("f.txt")
    (tree.root / "out-link").symlink_to(tree.outside / "secret.txt")
    (tree.root / "out-missing").symlink_to(tree.outside / "missing-but-just-as-long")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            info = (await s.call("get_file_info", path="f.txt")).structured_content
            assert info["owner"] == "root" and info["group"] == "root"
            assert info["isSymlink"] is False
            assert info["xattrs"] == {"user.origin": "test"}
            assert info["created"].endswith("Z")
            link = (await s.call("get_file_info", path="in-link")).structured_content
            assert link["isSymlink"] is True and link["symlinkTarget"] == "f.txt"
            assert link["size"] == 4
            out = await s.call("get_file_info", path="out-link")
            text = out.content[0].text  # type: ignore[union-attr]
            assert out.structured_content["symlinkTargetInside"] is False
            assert str(tree.outside) not in text and "symlinkTarget:" not in text
            # Nothing derived from the target: no size (the length of the outside path),
            # and the same answer whether the outside target exists or not.
            assert out.structured_content["size"] is None and "size:" not in text
            missing = await s.call("get_file_info", path="out-missing")
            fields = ("size", "isSymlink", "symlinkTarget", "symlinkTargetInside", "type")
            assert {k: missing.structured_content[k] for k in fields} == {
                k: out.structured_content[k] for k in fields
            }

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_strict_edits(tree: Tree, era: Era) -> None:
    (tree.root / "crlf.txt").write_bytes(b"a = 1\r\nb = 1\r\nc = 1\r\n")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            twice = await s.error(
                "edit_file",
                path="crlf.txt",
                edits=[{"oldText": "= 1", "newText": "= 2"}],
                strict=True,
            )
            assert "occurs 3 times" in twice
            await s.text(
                "edit_file",
                path="crlf.txt",
                edits=[{"oldText": "b = 1\r\n", "newText": "b = 2\r\n"}],
                strict=True,
            )
            assert "no edits were applied" in await s.error(
                "edit_file",
                path="crlf.txt",
                edits=[{"oldText": "a = 1\n", "newText": "x"}],
                strict=True,
            )
            await s.text(
                "edit_file",
                path="crlf.txt",
                edits=[{"oldText": "= 1", "newText": "= 9"}],
                replaceAll=True,
            )

    run(main)
    assert (tree.root / "crlf.txt").read_bytes() == b"a = 9\r\nb = 2\r\nc = 9\r\n"

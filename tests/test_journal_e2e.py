"""The change journal end to end: list_changes and undo_changes through the SDK client
over stdio and HTTP in both protocol eras, the operator's ``sandboxfs journal``
command (with and without a server running), what startup refuses, one journal
per workspace session, and the policy keeping hidden paths out of every answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sidecar_helpers import http_client, sidecar

from helpers import Tree
from mcp_client import ERAS, SERVER, Era, run, server_env, session


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """What a tree holds (kinds, bytes, symlink text, permission bits), not its times:
    an undo puts content back, not modification times."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            st = full.lstat()
            if full.is_symlink():
                out[str(full.relative_to(root))] = ("link", os.readlink(full))
            elif full.is_dir():
                out[str(full.relative_to(root))] = ("dir", st.st_mode)
            else:
                out[str(full.relative_to(root))] = ("file", full.read_bytes(), st.st_mode)
    return out


def journal_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, "journal", *args], capture_output=True, text=True, env=server_env(), timeout=60
    )


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("era", ERAS)
def test_changes_are_listed_and_undone_over_stdio(tree: Tree, era: Era) -> None:
    journal = tree.base / "journal"
    (tree.root / "keep.txt").write_text("original\n")
    (tree.root / "d").mkdir()
    (tree.root / "d" / "inner.txt").write_text("inner\n")
    start = snapshot(tree.root)

    async def main() -> None:
        async with session("--journal", str(journal), str(tree.root), era=era) as s:
            await s.text("write_file", path="keep.txt", content="changed\n")
            await s.text(
                "edit_file", path="keep.txt", edits=[{"oldText": "changed", "newText": "edited"}]
            )
            await s.text("write_file", path="new.txt", content="new\n")
            await s.text("delete_file", path="d", recursive=True)
            listing = await s.text("list_changes", diff=True)
            lines = listing.splitlines()
            assert lines[0].startswith("#4 ") and "delete_file" in lines[0]
            assert f"removed directory {tree.root}/d and 1 entries below it" in listing
            assert "-changed\n+edited" in listing  # the edit, as a diff
            assert "-original\n+changed" in listing
            only = await s.text("list_changes", path="new.txt")
            assert "created" in only and "keep.txt" not in only
            undone = await s.text("undo_changes", count=2)
            assert undone.startswith("Undid #4 (delete_file), #3 (write_file): 2 steps.")
            assert (tree.root / "d" / "inner.txt").read_text() == "inner\n"
            assert not (tree.root / "new.txt").exists()
            again = await s.text("undo_changes", backTo=1)
            assert "#2 (edit_file), #1 (write_file)" in again
            assert snapshot(tree.root) == start
            listing = await s.text("list_changes")
            assert "[undone by #5]" in listing and "[undone by #6]" in listing
            # redo: undo the last undo
            await s.text("undo_changes", entries=[6])
            assert (tree.root / "keep.txt").read_text() == "edited\n"
            # never blind: a file changed behind the journal's back is named, nothing done
            (tree.root / "keep.txt").write_text("someone else\n")
            refused = await s.error("undo_changes", entries=[7])
            assert f"{tree.root}/keep.txt changed since" in refused
            assert (tree.root / "keep.txt").read_text() == "someone else\n"
            assert "no change" not in await s.error("undo_changes", entries=[999])

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_changes_are_undone_over_http(tmp_path: Path, era: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("before\n")
    journal = tmp_path / "journal"

    async def main(url: str) -> None:
        async with http_client(url, era) as client:  # type: ignore[arg-type]
            result = await client.call_tool("write_file", {"path": "a.txt", "content": "after\n"})
            assert not result.is_error
            result = await client.call_tool("list_changes", {"diff": True})
            assert "-before\n+after" in _text(result)
            result = await client.call_tool("undo_changes", {})
            assert not result.is_error, _text(result)
            assert (root / "a.txt").read_text() == "before\n"

    with sidecar("--journal", str(journal), str(root), tmp=tmp_path) as served:
        run(lambda: main(served.url))


def test_the_operator_reviews_and_undoes_with_and_without_a_server(tree: Tree) -> None:
    journal = tree.base / "journal"
    (tree.root / "f.txt").write_text("one\n")

    async def main() -> None:
        async with session("--journal", str(journal), str(tree.root)) as s:
            await s.text("write_file", path="f.txt", content="two\n")
            await s.text("write_file", path="g.txt", content="g\n")
            shown = journal_command(str(journal), "show", "1")
            assert shown.returncode == 0 and "-one\n+two" in shown.stdout
            # the operator undoes while the server runs; the server sees the undo
            done = journal_command(str(journal), "undo", "2")
            assert done.returncode == 0, done.stderr
            assert not (tree.root / "g.txt").exists()
            listing = await s.text("list_changes")
            assert "[undone by #3]" in listing and "sandboxfs journal undo" in listing

    run(main)
    listed = journal_command(str(journal), "list")
    assert listed.returncode == 0 and listed.stdout.startswith("#3 ")
    done = journal_command(str(journal), "undo", "--count", "1")
    assert done.returncode == 0, done.stderr
    assert (tree.root / "f.txt").read_text() == "one\n"
    (tree.root / "f.txt").write_text("changed by hand\n")
    refused = journal_command(str(journal), "undo", "4")  # redo #1: f.txt changed since
    assert refused.returncode == 1 and "f.txt changed since" in refused.stderr
    assert (tree.root / "f.txt").read_text() == "changed by hand\n"
    usage = journal_command(str(journal), "undo")
    assert usage.returncode == 2
    missing = journal_command(str(tree.base / "nowhere"), "list")
    assert missing.returncode == 1


def _start(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *args], input="", capture_output=True, text=True, env=server_env(), timeout=60
    )


def test_startup_refuses_a_journal_the_agent_could_reach(tree: Tree) -> None:
    inside = _start("--journal", str(tree.root / "journal"), str(tree.root))
    assert inside.returncode == 1 and "inside the allowed directory" in inside.stderr
    assert not (tree.root / "journal").exists()
    around = _start("--journal", str(tree.base), str(tree.root))
    assert around.returncode == 1 and "holds the allowed directory" in around.stderr
    alias = tree.base / "alias"
    alias.symlink_to(tree.root)
    through = _start("--journal", str(alias / "j"), str(tree.root))
    assert through.returncode == 1 and "inside the allowed directory" in through.stderr
    read_only = _start("--read-only", "--journal", str(tree.base / "j"), str(tree.root))
    assert read_only.returncode == 2 and "--read-only" in read_only.stderr
    bare = _start("--journal-keep", "7d", str(tree.root))
    assert bare.returncode == 2 and "needs --journal" in bare.stderr
    bad_age = _start("--journal", str(tree.base / "j"), "--journal-keep", "soon", str(tree.root))
    assert bad_age.returncode == 2
    (tree.base / "notes").mkdir()
    (tree.base / "notes" / "mine.txt").write_text("mine")
    taken = _start("--journal", str(tree.base / "notes"), str(tree.root))
    assert taken.returncode == 1 and "not empty" in taken.stderr
    assert sorted(os.listdir(tree.base / "notes")) == ["mine.txt"]


def test_each_workspace_session_has_its_own_journal(tmp_path: Path) -> None:
    base, journal = tmp_path / "base", tmp_path / "journal"

    async def main() -> None:
        async with session(
            "--workspaces", str(base), "--workspace-id", "alpha", "--journal", str(journal)
        ) as a:
            await a.text("write_file", path="a.txt", content="alpha\n")
            async with session(
                "--workspaces", str(base), "--workspace-id", "beta", "--journal", str(journal)
            ) as b:
                await b.text("write_file", path="b.txt", content="beta\n")
                assert "b.txt" in await b.text("list_changes")
                assert "b.txt" not in await a.text("list_changes")
                assert "a.txt" not in await b.text("list_changes")
                await b.text("undo_changes")
            assert (base / "sessions" / "alpha" / "a.txt").exists()
            assert not (base / "sessions" / "beta" / "b.txt").exists()

    run(main)
    assert sorted(os.listdir(journal / "sessions")) == ["alpha", "beta"]
    hint = journal_command(str(journal), "list")
    assert hint.returncode == 1 and "sessions/ID" in hint.stderr and "alpha" in hint.stderr
    alpha = journal_command(str(journal / "sessions" / "alpha"), "list")
    assert alpha.returncode == 0 and "a.txt" in alpha.stdout and "b.txt" not in alpha.stdout


def test_a_path_hidden_now_is_never_shown_or_undone(tree: Tree) -> None:
    journal = tree.base / "journal"
    (tree.root / "app.env").write_text("SECRET=old\n")

    async def write() -> None:
        async with session("--journal", str(journal), str(tree.root)) as s:
            await s.text("write_file", path="app.env", content="SECRET=new\n")
            await s.text("write_file", path="plain.txt", content="plain\n")

    async def review() -> None:
        async with session("--journal", str(journal), "--hide", "*.env", str(tree.root)) as s:
            listing = await s.text("list_changes", diff=True)
            assert "plain.txt" in listing
            assert "app.env" not in listing and "SECRET" not in listing
            refused = await s.error("undo_changes", entries=[1])
            assert "cannot see" in refused and "SECRET" not in refused
            assert "app.env" not in await s.text("list_changes", entry=1)

    run(write)
    run(review)
    assert (tree.root / "app.env").read_text() == "SECRET=new\n"


def test_the_journal_is_served_only_with_journal(tree: Tree) -> None:
    async def main() -> None:
        async with session(str(tree.root)) as s:
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert "list_changes" not in names and "undo_changes" not in names
        async with session("--journal", str(tree.base / "j"), str(tree.root)) as s:
            names = {t.name for t in (await s.client.list_tools()).tools}
            assert {"list_changes", "undo_changes"} <= names

    run(main)


def test_help_names_the_journal() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sandboxfs", "journal", "--help"],
        capture_output=True,
        text=True,
        env=server_env(),
    )
    assert out.returncode == 0 and "undo" in out.stdout


def test_the_journal_and_patches_as_an_ordinary_user(public_tree: Tree) -> None:
    """Run as uid 65534 (the server must work as an ordinary user): the journal is made
    by that user, a write, a patch and their undo go through it, under Landlock."""
    from unprivileged import nobody_command, nobody_pythonpath  # noqa: PLC0415

    pythonpath = nobody_pythonpath()
    root = public_tree.root
    root.chmod(0o777)
    var = public_tree.base / "var"
    var.mkdir()
    var.chmod(0o1777)
    journal = var / "journal"  # made by the server, as that user
    (root / "a.txt").write_text("one\n")
    (root / "a.txt").chmod(0o666)

    async def main() -> None:
        command = nobody_command("--journal", str(journal), str(root))
        async with session(command=command, env={"PYTHONPATH": pythonpath}) as s:
            await s.text("write_file", path="a.txt", content="two\n")
            await s.text("apply_patch", patch="--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n")
            assert "#2" in await s.text("list_changes")
            await s.text("undo_changes", count=2)

    run(main)
    assert (root / "a.txt").read_text() == "one\n" and not (root / "new.txt").exists()
    assert journal.stat().st_uid == 65534 and (journal.stat().st_mode & 0o777) == 0o700

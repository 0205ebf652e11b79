"""The policy from the README's command lines, through the real server: stdio in
both protocol eras and streamable HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import types
from sidecar_helpers import http_client, sidecar

from mcp_client import ERAS, Era, run, session

SECRET = "sk-live-0123456789"
MUTATING = {
    "write_file",
    "append_file",
    "edit_file",
    "create_directory",
    "move_file",
    "copy_file",
    "delete_file",
}


def _plant(top: Path) -> None:
    (top / ".env").write_text(f"KEY={SECRET}\n")
    (top / "app").mkdir()
    (top / "app" / "id_rsa").write_text(SECRET)
    (top / "app" / "main.py").write_text("print('hi')\n")
    (top / "README.md").write_text("read me\n")


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("era", ERAS)
def test_the_secrets_preset_and_a_protected_file_over_stdio(tmp_path: Path, era: Era) -> None:
    _plant(tmp_path)

    async def main() -> None:
        async with session(
            "--preset", "secrets", "--protect", "README.md", str(tmp_path), era=era
        ) as s:
            listing = await s.text("list_directory", path=str(tmp_path))
            assert ".env" not in listing and "README.md" in listing
            tree = await s.text("directory_tree", path=str(tmp_path))
            assert "id_rsa" not in tree and "main.py" in tree
            assert "ENOENT" in await s.error("read_text_file", path=str(tmp_path / ".env"))
            grep = await s.call("grep_files", pattern="sk-live", path=str(tmp_path))
            assert SECRET not in _text(grep)
            refusal = await s.error("write_file", path=str(tmp_path / "README.md"), content="x")
            assert "protected by policy" in refusal
            refusal = await s.error("write_file", path=str(tmp_path / ".env"), content="x")
            assert "hidden by policy" in refusal
            notes = await s.text("list_allowed_directories")
            assert "README.md" in notes and "hidden by policy" in notes
            assert (tmp_path / "README.md").read_text() == "read me\n"
            assert SECRET in (tmp_path / ".env").read_text()

    run(main)


def test_a_read_only_directory_serves_no_mutating_tool_and_landlock_says_so(
    tmp_path: Path,
) -> None:
    _plant(tmp_path)

    async def main() -> None:
        async with session(f"{tmp_path}:ro") as s:
            names = {tool.name for tool in (await s.client.list_tools()).tools}
            assert names and not names & MUTATING
            assert await s.text("read_text_file", path=str(tmp_path / "README.md")) == "read me\n"
            assert "is read-only" in await s.text("list_allowed_directories")
            assert "read-only beneath the allowed directories" in s.log()

    run(main)


def test_one_read_only_directory_beside_a_writable_one(tmp_path: Path) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()

    async def main() -> None:
        async with session(f"{ro}:ro", f"{rw}:rw") as s:
            await s.text("write_file", path=str(rw / "a.txt"), content="a")
            refusal = await s.error("write_file", path=str(ro / "a.txt"), content="a")
            assert "read-only directory" in refusal
            refusal = await s.error(
                "move_file", source=str(rw / "a.txt"), destination=str(ro / "a.txt")
            )
            assert "read-only directory" in refusal
            assert "read-only beneath 1 of them" in s.log()
        assert not (ro / "a.txt").exists()
        assert (rw / "a.txt").read_text() == "a"

    run(main)


def test_a_policy_file_over_http(tmp_path: Path) -> None:
    data, docs = tmp_path / "data", tmp_path / "docs"
    data.mkdir()
    docs.mkdir()
    _plant(data)
    (docs / "guide.md").write_text("guide\n")
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'preset = "secrets"\n'
        f'[[directory]]\npath = "{data}"\nprotect = ["README.md"]\n'
        f'[[directory]]\npath = "{docs}"\nmode = "ro"\n'
    )
    with sidecar("--policy", str(policy), tmp=tmp_path) as server:

        async def main() -> None:
            async with http_client(f"http://127.0.0.1:{server.port}/mcp", "2026") as client:
                listing = await client.call_tool("list_directory", {"path": str(data)})
                assert ".env" not in _text(listing) and "README.md" in _text(listing)
                refused = await client.call_tool(
                    "write_file", {"path": str(docs / "new.md"), "content": "x"}
                )
                assert refused.is_error and "read-only directory" in _text(refused)
                wrote = await client.call_tool(
                    "write_file", {"path": str(data / "new.md"), "content": "x"}
                )
                assert not wrote.is_error, _text(wrote)

        run(main)
    assert not (docs / "new.md").exists()


def test_workspace_and_store_directories_carry_the_rules_for_every_directory(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"

    async def main() -> None:
        async with session(
            "--workspaces", str(base), "--workspace-id", "w1", "--preset", "secrets"
        ) as s:
            refusal = await s.error("write_file", path=".env", content="KEY=1")
            assert "hidden by policy" in refusal
            await s.text("write_file", path="notes.txt", content="ok")
            await s.text("create_store", name="shared")
            store = base / "stores" / "shared"
            refusal = await s.error("write_file", path=str(store / "id_rsa"), content="k")
            assert "hidden by policy" in refusal
            (base / "sessions" / "w1" / "server.pem").write_text(SECRET)
            listing = await s.text("list_directory", path=str(base / "sessions" / "w1"))
            assert "notes.txt" in listing and "server.pem" not in listing

    run(main)
    assert not (base / "sessions" / "w1" / ".env").exists()


def test_nested_directories_keep_each_ones_anchored_rules(tmp_path: Path) -> None:
    """Issue 26: ``--hide x/secret --protect y/keep R R/sub`` once judged R/sub/... by
    R's rules alone (the outermost directory resolves it): the secret was read and
    the protected file overwritten."""
    outer = tmp_path / "R"
    for where in (outer, outer / "sub"):
        (where / "x").mkdir(parents=True)
        (where / "x" / "secret").write_text(SECRET)
        (where / "y").mkdir()
        (where / "y" / "keep").write_text("kept\n")

    async def main() -> None:
        args = ("--hide", "x/secret", "--protect", "y/keep", str(outer), str(outer / "sub"))
        async with session(*args) as s:
            for top in (outer, outer / "sub"):
                assert "ENOENT" in await s.error("read_text_file", path=str(top / "x/secret"))
                refusal = await s.error("write_file", path=str(top / "y/keep"), content="x")
                assert "protected by policy" in refusal
                assert "secret" not in await s.text("list_directory", path=str(top / "x"))
            grep = await s.call("grep_files", pattern="sk-live", path=str(outer))
            assert SECRET not in _text(grep)
        for where in (outer, outer / "sub"):
            assert (where / "y" / "keep").read_text() == "kept\n"

    run(main)

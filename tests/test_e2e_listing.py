"""Listing, searching and metadata tools end to end, in both protocol eras."""

from __future__ import annotations

import json
import os

import pytest

from helpers import Tree
from mcp_client import ERAS, Era, run, session


def _fixture(tree: Tree) -> None:
    root = tree.root
    (root / "src" / "lib" / "deep").mkdir(parents=True)
    (root / "src" / "index.ts").write_text("x")
    (root / "src" / "lib" / "util.ts").write_text("y" * 1536)
    (root / "src" / "lib" / "deep" / "x.ts").write_text("")
    (root / "src" / ".git").mkdir()
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "index.ts").write_text("")
    (root / "README.md").write_text("readme")
    (root / "b.TS").write_text("")
    (root / "empty").mkdir()
    (root / "in-link").symlink_to("README.md")
    (root / "out-link").symlink_to(tree.outside / "secret.txt")
    (root / "dangling").symlink_to("nowhere")


@pytest.mark.parametrize("era", ERAS)
def test_list_directory_and_sizes(tree: Tree, era: Era) -> None:
    _fixture(tree)

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            listing = await s.text("list_directory", path=".")
            assert listing.splitlines() == [
                "[FILE] README.md",
                "[FILE] b.TS",
                "[FILE] dangling",
                "[DIR] empty",
                "[FILE] in-link",
                "[DIR] node_modules",
                "[FILE] out-link",
                "[DIR] src",
            ]
            assert await s.text("list_directory", path="empty") == ""
            sized = (await s.text("list_directory_with_sizes", path=".")).splitlines()
            assert sized[0] == f"[FILE] {'README.md':<30} {'6 B':>10}"
            assert f"[FILE] {'out-link':<30} {'unknown':>10}" in sized
            assert f"[FILE] {'dangling':<30} {'unknown':>10}" in sized
            assert f"[FILE] {'in-link':<30} {'6 B':>10}" in sized
            assert f"[DIR] {'src':<30} " in sized
            assert sized[-2:] == ["Total: 5 files, 3 directories", "Combined size: 12 B"]
            by_size = await s.call("list_directory_with_sizes", path="src/lib", sortBy="size")
            entries = by_size.structured_content["entries"]  # type: ignore[index]
            assert [e["name"] for e in entries] == ["deep", "util.ts"]
            assert "sortBy" in await s.error("list_directory_with_sizes", path=".", sortBy="date")
            assert "ENOTDIR" in await s.error("list_directory", path="README.md")

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_search_files_globs(tree: Tree, era: Era) -> None:
    _fixture(tree)
    root = str(tree.root)

    async def main() -> None:
        async with session(root, era=era) as s:

            async def search(pattern: str, **extra: object) -> list[str]:
                text = await s.text("search_files", path=root, pattern=pattern, **extra)
                if text == "No matches found":
                    return []
                return [line[len(root) + 1 :] for line in text.splitlines()]

            assert await search("*.ts") == []
            assert await search("**/*.ts") == [
                "node_modules/pkg/index.ts",
                "src/index.ts",
                "src/lib/deep/x.ts",
                "src/lib/util.ts",
            ]
            assert await search("**/*.TS") == ["b.TS"]
            assert await search("src/*") == ["src/.git", "src/index.ts", "src/lib"]
            assert await search("**/*.ts", excludePatterns=["node_modules"]) == [
                "src/index.ts",
                "src/lib/deep/x.ts",
                "src/lib/util.ts",
            ]
            assert await search("**/lib/**") == [
                "src/lib/deep",
                "src/lib/deep/x.ts",
                "src/lib/util.ts",
            ]
            assert await search("*.{md,TS}") == ["README.md", "b.TS"]
            # Symlinks: listed when they stay inside, dropped when they leave or dangle.
            assert await search("*-link") == ["in-link"]
            relative = await s.text("search_files", path="src", pattern="*.ts")
            assert relative == f"{root}/src/index.ts"

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_directory_tree(tree: Tree, era: Era) -> None:
    _fixture(tree)

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            text = await s.text("directory_tree", path="src")
            assert text == json.dumps(json.loads(text), indent=2)  # 2-space JSON
            assert json.loads(text) == [
                {"name": ".git", "type": "directory", "children": []},
                {"name": "index.ts", "type": "file"},
                {
                    "name": "lib",
                    "type": "directory",
                    "children": [
                        {
                            "name": "deep",
                            "type": "directory",
                            "children": [{"name": "x.ts", "type": "file"}],
                        },
                        {"name": "util.ts", "type": "file"},
                    ],
                },
            ]
            shallow = json.loads(await s.text("directory_tree", path="src", depth=1))
            assert shallow == [
                {"name": ".git", "type": "directory"},
                {"name": "index.ts", "type": "file"},
                {"name": "lib", "type": "directory"},
            ]
            excluded = json.loads(
                await s.text(
                    "directory_tree", path=".", excludePatterns=["deep", "node_modules", "*.md"]
                )
            )
            names = [n["name"] for n in excluded]
            assert "node_modules" not in names and "README.md" not in names
            lib = next(n for n in excluded if n["name"] == "src")["children"][2]
            assert lib["children"] == [{"name": "util.ts", "type": "file"}]
            links = {n["name"]: n["type"] for n in excluded if "link" in n["name"]}
            assert links == {"in-link": "file", "out-link": "file"}  # never followed
            assert "depth" in await s.error("directory_tree", path=".", depth=0)

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_file_info_and_allowed_directories(tree: Tree, era: Era) -> None:
    (tree.root / "f.txt").write_text("12345")
    (tree.root / "f.txt").chmod(0o640)
    os.link(tree.root / "f.txt", tree.root / "g.txt")
    alias = tree.base / "alias"
    alias.symlink_to(tree.root)

    async def main() -> None:
        async with session(str(alias), era=era) as s:
            info = (await s.text("get_file_info", path="f.txt")).splitlines()
            assert info[0] == "size: 5"
            assert info[1].startswith("created: 20") and info[1].endswith("Z")
            assert "isDirectory: false" in info and "isFile: true" in info
            assert "permissions: 640" in info and "hardLinks: 2" in info
            assert "type: file" in info
            listed = await s.text("list_allowed_directories")
            assert listed.splitlines()[:3] == ["Allowed directories:", str(alias), str(tree.root)]
            assert "Access denied" in await s.error("get_file_info", path=str(tree.outside))

    run(main)

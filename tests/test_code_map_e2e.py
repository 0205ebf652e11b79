"""code_map end to end: served over stdio and streamable HTTP to clients of both
protocol eras (the SDK's client, under Landlock), annotated read-only and served
under --read-only, its budget refused out of range, and its parse cache shared by
the calls of one server."""

from __future__ import annotations

from pathlib import Path

import pytest
from sidecar_helpers import http_client, sidecar
from test_code_map import FULL_MAP, POLYGLOT, SMALL_MAP, write

from helpers import Tree, make_tree
from mcp_client import ERAS, Era, run, session

# The SDK's HTTP client (httpx2) leaves async generators for the garbage collector to
# close under trio (see test_sidecar.py).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.mark.parametrize("era", ERAS)
def test_code_map_over_stdio(tree: Tree, era: Era) -> None:
    write(tree.root, POLYGLOT)
    (tree.root / "out.py").symlink_to(tree.outside / "secret.txt")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            [tool] = [t for t in (await s.client.list_tools()).tools if t.name == "code_map"]
            assert tool.annotations is not None and tool.annotations.read_only_hint is True
            assert tool.input_schema["properties"]["maxChars"]["default"] == 8192
            first = await s.call("code_map", path=".")
            assert not first.is_error and first.content[0].text == FULL_MAP  # type: ignore[union-attr]
            assert first.structured_content is not None
            assert first.structured_content["parsed"] == 6
            again = await s.call("code_map")  # path defaults to the first allowed directory
            assert again.structured_content is not None
            assert (again.structured_content["parsed"], again.structured_content["fromCache"]) == (
                0,
                6,
            )
            assert await s.text("code_map", path=".", maxChars=512) == SMALL_MAP
            for bad in (511, 65537):
                error = await s.error("code_map", path=".", maxChars=bad)
                assert "maxChars" in error and "Invalid arguments for tool code_map" in error
            assert "ENOTDIR" in await s.error("code_map", path="app/cli.py")
            assert "Access denied" in await s.error("code_map", path=str(tree.outside))
            assert "Access denied" in await s.error("code_map", focus=["out.py"])

    run(main)


def test_code_map_is_served_read_only(tree: Tree) -> None:
    write(tree.root, POLYGLOT)

    async def main() -> None:
        async with session("--read-only", str(tree.root)) as s:
            names = [t.name for t in (await s.client.list_tools()).tools]
            assert "code_map" in names and "write_file" not in names
            assert await s.text("code_map", path=".", maxChars=512) == SMALL_MAP

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_code_map_over_http(tmp_path: Path, era: Era) -> None:
    tree = make_tree(tmp_path)
    write(tree.root, POLYGLOT)
    with sidecar(str(tree.root), tmp=tmp_path) as served:

        async def main() -> None:
            async with http_client(served.url, era) as client:
                result = await client.call_tool("code_map", {"path": str(tree.root)})
                text = result.content[0].text  # type: ignore[union-attr]
                assert not result.is_error
                assert text == FULL_MAP.replace("./", f"{tree.root}/")
                steered = await client.call_tool(
                    "code_map", {"path": ".", "query": "Record", "maxChars": 512}
                )
                assert steered.structured_content is not None
                assert steered.structured_content["files"][0]["path"] == "./lib/record.rs"
                # Each HTTP request is its own session; the server's cache is one.
                assert steered.structured_content["parsed"] == 0

        run(main)

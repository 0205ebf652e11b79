"""The protocol surface: eras, discovery, resources, framing errors, the command line."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from helpers import Tree
from mcp_client import (
    ERAS,
    INIT_2025,
    INITIALIZED,
    SERVER,
    Era,
    call_line,
    raw_exchange,
    run,
    server_env,
    session,
)

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern(request_id: int, method: str, params: dict[str, object] | None = None) -> str:
    body = {**(params or {}), "_meta": ENVELOPE}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body})


def test_discover_lists_every_served_version(tree: Tree) -> None:
    replies, _, code = raw_exchange([str(tree.root)], [modern(1, "server/discover")])
    assert code == 0
    result = replies[0]["result"]
    assert result["supportedVersions"] == [
        "2024-11-05",
        "2025-03-26",
        "2025-06-18",
        "2025-11-25",
        "2026-07-28",
    ]
    assert result["resultType"] == "complete"
    assert "tools" in result["capabilities"] and "resources" in result["capabilities"]


def test_both_eras_serve_the_same_tools(tree: Tree) -> None:
    async def main() -> None:
        names = {}
        for era in ERAS:
            async with session(str(tree.root), era=era) as s:
                tools = (await s.client.list_tools()).tools
                names[era] = [t.name for t in tools]
                for tool in tools:
                    a = tool.annotations
                    assert a is not None and a.open_world_hint is False
                    assert None not in (a.read_only_hint, a.idempotent_hint, a.destructive_hint)
                    assert tool.input_schema["type"] == "object"
                    assert tool.title
        assert names["2025"] == names["2026"] and len(names["2025"]) == 20

    run(main)


def test_annotation_table_matches_the_contract(tree: Tree) -> None:
    expected = {  # tool: (readOnly, idempotent, destructive), from the seed README
        "read_file": (True, True, False),
        "read_text_file": (True, True, False),
        "read_media_file": (True, True, False),
        "read_multiple_files": (True, True, False),
        "list_directory": (True, True, False),
        "list_directory_with_sizes": (True, True, False),
        "directory_tree": (True, True, False),
        "search_files": (True, True, False),
        "get_file_info": (True, True, False),
        "list_allowed_directories": (True, True, False),
        "create_directory": (False, True, False),
        "write_file": (False, True, True),
        "append_file": (False, False, False),
        "edit_file": (False, False, True),
        "move_file": (False, False, True),
        "copy_file": (False, True, False),
        "delete_file": (False, True, True),
        "grep_files": (True, True, False),
        "code_map": (True, True, False),
        "apply_patch": (False, False, True),
    }

    async def main() -> None:
        async with session(str(tree.root)) as s:
            for tool in (await s.client.list_tools()).tools:
                a = tool.annotations
                assert a is not None
                got = (a.read_only_hint, a.idempotent_hint, a.destructive_hint)
                assert got == expected[tool.name], tool.name

    run(main)


def test_malformed_lines_get_json_rpc_errors(tree: Tree) -> None:
    replies, _, code = raw_exchange(
        [str(tree.root), "--max-line-bytes", "1000"],
        [
            "this is not json",
            "[1, 2]",
            '{"jsonrpc": "2.0", "id": null, "method": "tools/list"}',
            '{"jsonrpc": "1.0", "id": 7, "method": "tools/list"}',
            '{"jsonrpc": "2.0", "id": 8, "method": 5}',
            '{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}',
            "x" * 5000,
            INIT_2025,
            INITIALIZED,
            call_line(10, "no_such_tool"),
            '{"jsonrpc": "2.0", "id": 11, "method": "ping"}',
        ],
    )
    assert code == 0
    by_id: dict[object, list[dict[str, object]]] = {}
    for reply in replies:
        by_id.setdefault(reply.get("id"), []).append(reply)
    null_errors = [r["error"]["code"] for r in by_id[None]]  # type: ignore[index]
    assert null_errors.count(-32700) == 1
    assert null_errors.count(-32600) == 3  # batch, null id, too-long line
    assert any("Request too large" in r["error"]["message"] for r in by_id[None])  # type: ignore[index]
    assert by_id[7][0]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[8][0]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[9][0]["error"]["code"] == -32600  # type: ignore[index]
    assert by_id[10][0]["error"]["code"] == -32602  # type: ignore[index]
    assert by_id[11][0]["result"] == {}


def test_requests_in_flight_are_answered_at_end_of_input(tree: Tree) -> None:
    (tree.root / "f").write_text("x")
    lines = [
        INIT_2025,
        INITIALIZED,
        *(call_line(i, "read_text_file", path="f") for i in range(1, 30)),
    ]
    replies, _, code = raw_exchange([str(tree.root)], lines)
    assert code == 0
    answered = {r["id"] for r in replies if "result" in r}
    assert answered == {0, *range(1, 30)}


@pytest.mark.parametrize("era", ERAS)
def test_resources(tree: Tree, era: Era) -> None:
    (tree.root / "notes dir").mkdir()
    (tree.root / "notes dir" / "a b.md").write_text("# hi\n")
    (tree.root / "pic.png").write_bytes(b"\x89PNG\r\n")
    (tree.root / "data.weird").write_text("plain utf-8 text")
    (tree.root / "bin.weird").write_bytes(b"\xff\xfe\x00")
    (tree.root / "out").symlink_to(tree.outside / "secret.txt")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            templates = (await s.client.list_resource_templates()).resource_templates
            assert [(t.name, t.uri_template) for t in templates] == [("file", "file://{+path}")]
            assert (await s.client.list_resources()).resources == []
            text = await s.client.read_resource((tree.root / "notes dir" / "a b.md").as_uri())
            content = text.contents[0]
            assert isinstance(content, types.TextResourceContents)
            assert content.text == "# hi\n" and content.mime_type == "text/markdown"
            plain = (await s.client.read_resource((tree.root / "data.weird").as_uri())).contents[0]
            assert isinstance(plain, types.TextResourceContents) and plain.mime_type == "text/plain"
            pic = (await s.client.read_resource((tree.root / "pic.png").as_uri())).contents[0]
            assert isinstance(pic, types.BlobResourceContents) and pic.mime_type == "image/png"
            assert base64.b64decode(pic.blob) == b"\x89PNG\r\n"
            raw = (await s.client.read_resource((tree.root / "bin.weird").as_uri())).contents[0]
            assert isinstance(raw, types.BlobResourceContents)
            assert raw.mime_type == "application/octet-stream"
            for uri, needle in [
                ((tree.outside / "secret.txt").as_uri(), "Access denied"),
                ((tree.root / "out").as_uri(), "Access denied"),
                ((tree.root / "missing").as_uri(), "Resource not found"),
                ((tree.root / "notes dir").as_uri(), "Resource not found"),
            ]:
                with pytest.raises(MCPError) as caught:
                    await s.client.read_resource(uri)
                assert caught.value.error.code == -32602
                assert needle in caught.value.error.message
                if needle == "Resource not found":
                    assert caught.value.error.data == {"uri": uri}

    run(main)


def test_resource_reads_carry_private_zero_ttl(tree: Tree) -> None:
    (tree.root / "f.txt").write_text("x")
    uri = (tree.root / "f.txt").as_uri()
    replies, _, _ = raw_exchange([str(tree.root)], [modern(1, "resources/read", {"uri": uri})])
    assert replies[0]["result"]["ttlMs"] == 0
    assert replies[0]["result"]["cacheScope"] == "private"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVER, *args], capture_output=True, text=True, input="", env=server_env(), timeout=60
    )


def test_command_line(tree: Tree, tmp_path: Path) -> None:
    assert _cli("--version").stdout.startswith("sandboxfs ")
    help_text = _cli("--help").stdout
    for option in ("--read-only", "--confine-roots", "--max-read-bytes", "--fs-timeout"):
        assert option in help_text
    missing = _cli(str(tmp_path / "nope"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    (tmp_path / "file").write_text("")
    not_dir = _cli(str(tmp_path / "file"))
    assert not_dir.returncode == 1 and "is not a directory" in not_dir.stderr
    assert _cli("--bogus", str(tree.root)).returncode == 2
    named = tmp_path / "--read-only"
    named.mkdir()
    started = subprocess.run(
        [*SERVER, "--", str(named)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        input="",
        env=server_env(),
        timeout=60,
    )
    assert started.returncode == 0
    assert str(named) in started.stderr


def test_options_anywhere_and_dash_dash(tree: Tree, tmp_path: Path) -> None:
    named = tmp_path / "--read-only"
    named.mkdir()

    async def main() -> None:
        async with session(str(tree.root), "--read-only") as s:
            assert len((await s.client.list_tools()).tools) == 12
        async with session("--", str(named)) as s:  # a directory, not the flag
            assert len((await s.client.list_tools()).tools) == 20
            listed = await s.text("list_allowed_directories")
            assert str(named) in listed

    run(main)


def test_refuses_to_start_without_openat2(tree: Tree) -> None:
    for simulated, reason in (("ENOSYS", "Linux 5.6"), ("EPERM", "seccomp")):
        result = subprocess.run(
            [*SERVER, str(tree.root)],
            capture_output=True,
            text=True,
            input="",
            env=server_env({"SANDBOXFS_TEST_OPENAT2_ERRNO": simulated}),
            timeout=60,
        )
        assert result.returncode == 1
        assert reason in result.stderr and "never falls back" in result.stderr


def test_bad_arguments_are_refused_with_what_is_wrong(tree: Tree) -> None:
    (tree.root / "a.txt").write_text("one\ntwo\n")

    async def main() -> None:
        for era in ERAS:
            async with session(str(tree.root), era=era) as s:
                wrong_type = await s.error("read_text_file", path="a.txt", head="2")
                assert wrong_type.startswith("Invalid arguments for tool read_text_file:")
                assert "'head': '2' is not of type 'integer'" in wrong_type
                unknown = await s.error("read_text_file", path="a.txt", lines=2)
                assert "Additional properties are not allowed ('lines' was unexpected)" in unknown
                missing = await s.error("edit_file", path="a.txt")
                assert "'edits' is a required property" in missing
                nested = await s.error("edit_file", path="a.txt", edits=[{"oldText": "one"}])
                assert "'edits/0': 'newText' is a required property" in nested
                empty = await s.error("read_multiple_files", paths=[])
                assert "'paths': [] should be non-empty" in empty
                assert (tree.root / "a.txt").read_text() == "one\ntwo\n"
                one = await s.text("read_text_file", path="a.txt", head=1)
                assert await s.text("read_text_file", path="a.txt", head=1.0) == one

    run(main)


def test_small_answers_written_at_once_never_cut_into_a_big_one(tree: Tree) -> None:
    """A lone small answer is written straight to stdout; one that comes while a big
    answer is still being written (in pieces) waits its turn: every line stays whole.
    """
    big = "".join(f"line {i:07d} of a big file to be written in pieces\n" for i in range(60_000))
    (tree.root / "big.txt").write_text(big)
    lines = [INIT_2025, INITIALIZED]
    for round_ in range(3):
        lines.append(call_line(100 + round_, "read_text_file", path="big.txt"))
        lines += [
            json.dumps({"jsonrpc": "2.0", "id": 1000 * (round_ + 1) + i, "method": "ping"})
            for i in range(40)
        ]
    replies, _, code = raw_exchange([str(tree.root)], lines)
    assert code == 0
    texts = [
        r["result"]["structuredContent"]["content"] for r in replies if r["id"] in (100, 101, 102)
    ]
    assert texts == [big] * 3
    assert sorted(r["id"] for r in replies) == sorted(
        json.loads(line)["id"] for line in lines if '"id"' in line
    )

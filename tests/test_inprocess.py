"""The MCP adapter in-process (SDK client over memory streams): fd hygiene under
concurrency, and behaviour that needs a view inside the server process."""

from __future__ import annotations

import dataclasses
import gc
import os

import mcp_types as types
import trio
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from helpers import Tree, open_fd_count
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.session.access import AccessControl
from sandboxfs.session.sdkserver import SdkAdapter
from sandboxfs.session.sdkwire import sanitize
from sandboxfs.session.server import SandboxfsServer, ServerOptions
from sandboxfs.transports.stdio import LineSplitter


def _server(tree: Tree) -> SandboxfsServer:
    access = AccessControl(AllowList.of([Root.open(str(tree.root))]), confine=False)
    return SandboxfsServer(ServerOptions(), access)


def test_fd_count_returns_to_baseline_after_1000_concurrent_calls(tree: Tree) -> None:
    (tree.root / "d").mkdir()
    for i in range(20):
        (tree.root / "d" / f"f{i}.txt").write_text(f"file {i}\n")
    (tree.root / "escape").symlink_to(tree.outside)
    os.mkfifo(tree.root / "fifo")
    server = _server(tree)
    calls = [
        ("read_text_file", {"path": "d/f1.txt"}),
        ("read_text_file", {"path": "missing"}),
        ("read_text_file", {"path": "fifo"}),
        ("read_text_file", {"path": "escape/secret.txt"}),
        ("list_directory", {"path": "d"}),
        ("list_directory_with_sizes", {"path": "."}),
        ("search_files", {"path": ".", "pattern": "**/*.txt"}),
        ("directory_tree", {"path": "d"}),
        ("get_file_info", {"path": "d/f2.txt"}),
        ("write_file", {"path": "d/w.txt", "content": "x"}),
        ("append_file", {"path": "d/a.txt", "content": "x"}),
        ("edit_file", {"path": "d/f3.txt", "edits": [{"oldText": "nope", "newText": "x"}]}),
        ("copy_file", {"source": "d/f4.txt", "destination": "d/f5.txt"}),
        ("read_text_file", {"path": 5}),
    ]

    async def main() -> tuple[int, int, int]:
        async with Client(SdkAdapter(server).server, mode="2026-07-28", cache=None) as client:
            errors = 0

            async def one(i: int) -> None:
                nonlocal errors
                name, arguments = calls[i % len(calls)]
                result = await client.call_tool(name, arguments)
                errors += bool(result.is_error)

            async with trio.open_nursery() as nursery:  # warm up caches and threads
                for i in range(len(calls)):
                    nursery.start_soon(one, i)
            gc.collect()  # descriptors of earlier tests' roots close now, not mid-test
            baseline = open_fd_count()
            errors = 0
            async with trio.open_nursery() as nursery:
                for i in range(1000):
                    nursery.start_soon(one, i)
            gc.collect()
            return baseline, open_fd_count(), errors

    baseline, after, errors = trio.run(main)
    assert errors > 400
    assert after == baseline


def test_unexpected_exceptions_become_internal_error_without_details(
    tree: Tree,
    monkeypatch,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    server = _server(tree)
    spec = server.by_name["get_file_info"]

    def explode(*args: object, **kwargs: object) -> object:
        raise RuntimeError("secret host path /home/alice/.ssh/id_rsa")

    monkeypatch.setitem(server.by_name, "get_file_info", dataclasses.replace(spec, handler=explode))

    async def main() -> None:
        for mode in ("legacy", "2026-07-28"):
            async with Client(SdkAdapter(server).server, mode=mode, cache=None) as client:  # type: ignore[arg-type]
                try:
                    await client.call_tool("get_file_info", {"path": "x"})
                except MCPError as exc:
                    assert exc.error.code == -32603
                    assert exc.error.message == "Internal error"
                    assert "alice" not in str(exc.error.model_dump())
                else:
                    raise AssertionError("an internal error must not succeed")

    trio.run(main)
    assert "secret host path" in caplog.text  # the details go to the log only


def test_sdk_code_zero_errors_are_rewritten() -> None:
    leaky = types.JSONRPCError(
        jsonrpc="2.0", id=3, error=types.ErrorData(code=0, message="/home/alice/secret")
    )
    clean = sanitize(leaky, ["2026-07-28"])
    assert isinstance(clean, types.JSONRPCError)
    assert (clean.error.code, clean.error.message) == (-32603, "Internal error")


def test_line_splitter_never_buffers_past_the_cap() -> None:
    splitter = LineSplitter(max_line=1000)
    results: list[bytes | None] = []
    chunk = b"x" * 65536
    for _ in range(1024):  # a 64 MiB line, fed as it would arrive
        results += splitter.feed(chunk)
        assert len(splitter._buffer) <= 1000
    results += splitter.feed(b"tail\n{}\n")
    assert results == [None, b"{}"]
    assert splitter.feed(b"a\nb") == [b"a"]
    assert splitter.finish() == [b"b"]

"""The session core and its driver in-process (no pipes): descriptor hygiene under
concurrency, and behaviour that needs a view inside the server process.  Every
message the server sends is checked by the SDK's models."""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any

import pytest
import trio
from wire_oracle import WireOracle

from helpers import Tree, open_fd_count
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.session.access import AccessControl
from sandboxfs.session.dispatcher import SandboxfsServer, ServerOptions
from sandboxfs.session.driver import Driver
from sandboxfs.session.protocol import Session
from sandboxfs.transports.stdio import LineSplitter

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "inprocess", "version": "1"},
    },
}


def _server(tree: Tree) -> SandboxfsServer:
    access = AccessControl(AllowList.of([Root.open(str(tree.root))]), confine=False)
    return SandboxfsServer(ServerOptions(), access)


class InProcess:
    """One session of ``server`` driven in this process; ``answers`` by request id."""

    def __init__(self, server: SandboxfsServer, nursery: trio.Nursery, era: str) -> None:
        self.era = era
        self.oracle = WireOracle()
        self.answers: dict[Any, dict[str, Any]] = {}
        self.driver = Driver(Session(server.session_config()), server, self._sent, nursery)
        self._ids = iter(range(1, 1 << 30))
        if era == "2025":
            self.feed(INITIALIZE)
            self.feed({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _sent(self, message: dict[str, Any]) -> None:
        self.oracle.received(message)
        if "id" in message and "method" not in message:
            self.answers[message["id"]] = message

    def feed(self, message: dict[str, Any]) -> None:
        self.oracle.sent(message)
        self.driver.receive(message)

    def call(self, name: str, arguments: dict[str, Any]) -> int:
        request_id = next(self._ids)
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if self.era == "2026":
            params["_meta"] = MODERN_META
        self.feed({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        return request_id

    async def settle(self) -> None:
        await self.driver.idle()
        assert self.oracle.unanswered() == []


def test_fd_count_returns_to_baseline_after_1000_concurrent_calls(tree: Tree) -> None:
    (tree.root / "d").mkdir()
    for i in range(20):
        (tree.root / "d" / f"f{i}.txt").write_text(f"file {i}\n")
    (tree.root / "escape").symlink_to(tree.outside)
    os.mkfifo(tree.root / "fifo")
    server = _server(tree)
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
        async with trio.open_nursery() as nursery:
            conversation = InProcess(server, nursery, "2026")
            for i in range(len(calls)):  # warm up caches and threads
                conversation.call(*calls[i])
            await conversation.settle()
            gc.collect()  # descriptors of earlier tests' roots close now, not mid-test
            baseline = open_fd_count()
            ids = [conversation.call(*calls[i % len(calls)]) for i in range(1000)]
            await conversation.settle()
            gc.collect()
            errors = sum(bool(conversation.answers[i]["result"].get("isError")) for i in ids)
            return baseline, open_fd_count(), errors

    baseline, after, errors = trio.run(main)
    assert errors > 400
    assert after == baseline


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_unexpected_exceptions_become_internal_error_without_details(
    tree: Tree, era: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = _server(tree)
    spec = server.by_name["get_file_info"]

    def explode(*args: object, **kwargs: object) -> object:
        raise RuntimeError("secret host path /home/alice/.ssh/id_rsa")

    monkeypatch.setitem(server.by_name, "get_file_info", dataclasses.replace(spec, handler=explode))

    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            conversation = InProcess(server, nursery, era)
            request_id = conversation.call("get_file_info", {"path": "x"})
            ok = conversation.call("list_allowed_directories", {})
            await conversation.settle()
            assert "result" in conversation.answers[ok]  # the others go on
            return conversation.answers[request_id]

    answer = trio.run(main)
    assert answer["error"] == {"code": -32603, "message": "Internal error"}
    assert "secret host path" in caplog.text  # the details go to the log only


def test_line_splitter_never_buffers_past_the_cap() -> None:
    splitter = LineSplitter(max_line=1000)
    results: list[bytes | None] = []
    chunk = b"x" * 65536
    for _ in range(1024):  # a 64 MiB line, fed as it would arrive
        results += splitter.feed(chunk)
        assert splitter.buffered <= 1000
    results += splitter.feed(b"tail\n{}\n")
    assert results == [None, b"{}"]
    assert splitter.feed(b"a\nb") == [b"a"]
    assert splitter.finish() == [b"b"]

"""The session core over stdio, end to end: every tool in both eras, hostile text,
cancellation, Roots under pressure and many requests in flight.

Every reply is checked by the SDK's models (``raw_exchange`` and :class:`LiveClient`
run it through :class:`wire_oracle.WireOracle`).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from roots_answers import REPORTED_MALFORMED_ANSWERS
from wire_oracle import WireOracle

from helpers import Tree
from mcp_client import PATCHED, SERVER, raw_exchange, server_env

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
}
HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body)


def tool(request_id: int, name: str, **arguments: Any) -> str:
    return request(request_id, "tools/call", {"name": name, "arguments": arguments})


def initialize(version: str = "2025-06-18", capabilities: Any = None) -> list[str]:
    params = {
        "protocolVersion": version,
        "capabilities": capabilities or {},
        "clientInfo": {"name": "e2e", "version": "1"},
    }
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return [request(0, "initialize", params), initialized]


def enveloped(line: str) -> str:
    body = json.loads(line)
    params = body.setdefault("params", {})
    params["_meta"] = {**params.get("_meta", {}), **MODERN_META}
    return json.dumps(body)


def populate(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "sub" / "b.py").write_text("print('b')\n")
    (root / "pixel.png").write_bytes(PNG)
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")
    (root / "blob.bin").write_bytes(bytes(range(256)))
    (root / "w").mkdir()
    for name in ("edit.txt", "move.txt", "delete.txt", "append.txt"):
        (root / "w" / name).write_text("one\ntwo\n")
    (root / "w" / "patched.txt").write_text("x\n")


# Requests run concurrently: the mutations touch only w/, which nothing else reads.
CALLS = [
    tool(1, "read_text_file", path="a.txt"),
    tool(2, "read_text_file", path="a.txt", head=2),
    tool(3, "read_text_file", path="a.txt", tail=1),
    tool(4, "read_file", path="latin1.txt"),
    tool(5, "read_media_file", path="pixel.png"),
    tool(6, "read_multiple_files", paths=["a.txt", "missing.txt", "sub/b.py"]),
    tool(7, "list_directory", path="sub"),
    tool(8, "list_directory_with_sizes", path="sub", sortBy="size"),
    tool(9, "directory_tree", path="sub"),
    tool(10, "search_files", path="sub", pattern="**/*.py"),
    tool(11, "grep_files", pattern="t", path="sub"),
    tool(12, "list_allowed_directories"),
    tool(13, "read_text_file", path="missing.txt"),
    tool(14, "read_text_file", path="../outside.txt"),
    tool(15, "read_text_file", path="a.txt", head="2"),
    tool(16, "read_text_file", path="a.txt", unknown=True),
    tool(17, "no_such_tool"),
    tool(18, "write_file", path="w/new.txt", content="fresh\n"),
    tool(19, "edit_file", path="w/edit.txt", edits=[{"oldText": "two", "newText": "TWO"}]),
    tool(20, "create_directory", path="w/made/deep"),
    tool(21, "move_file", source="w/move.txt", destination="w/moved.txt"),
    tool(22, "delete_file", path="w/delete.txt"),
    tool(23, "get_file_info", path="a.txt"),
    request(24, "tools/call", {"name": "list_allowed_directories", "_meta": {"progressToken": 5}}),
    request(25, "tools/call", {"name": "read_text_file", "arguments": {"path": "a.txt"}, "x": 1}),
    request(26, "tools/call", {"name": "read_text_file", "arguments": None}),
    request(27, "tools/list"),
    tool(28, "read_media_file", path="blob.bin"),  # an embedded resource block
    request(29, "resources/templates/list"),
    request(30, "resources/list"),
    request(31, "resources/read", {"uri": "file://{root}/a.txt"}),
    tool(32, "append_file", path="w/append.txt", content="three\n"),
    tool(33, "copy_file", source="a.txt", destination="w/copy.txt"),
    tool(34, "code_map", path="sub", maxChars=512),
    tool(
        35, "apply_patch", patch="--- a/w/patched.txt\n+++ b/w/patched.txt\n@@ -1 +1 @@\n-x\n+y\n"
    ),
]


def _served_tools(root: Path) -> set[str]:
    replies, _, _ = raw_exchange([str(root)], [*initialize(), request(1, "tools/list")])
    return {t["name"] for t in replies[-1]["result"]["tools"]}


def _check_calls(root: Path, answers: dict[Any, dict[str, Any]]) -> None:
    assert set(answers) >= set(range(1, len(CALLS) + 1))
    for request_id in range(1, len(CALLS) + 1):
        assert answers[request_id].get("error", {}).get("code") != -32603, answers[request_id]
    assert answers[1]["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
    assert answers[14]["result"]["isError"] is True
    assert answers[17]["error"]["code"] == -32602  # an unknown tool, as the SDK answers it
    assert (root / "w" / "edit.txt").read_text() == "one\nTWO\n"
    assert (root / "w" / "append.txt").read_text() == "one\ntwo\nthree\n"
    assert (root / "w" / "patched.txt").read_text() == "y\n"
    assert sorted(p.name for p in (root / "w").iterdir()) == [
        "append.txt",
        "copy.txt",
        "edit.txt",
        "made",
        "moved.txt",
        "new.txt",
        "patched.txt",
    ]


def _lines(root: Path) -> list[str]:
    return [line.replace("{root}", str(root)) for line in CALLS]


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
def test_every_tool_is_served_through_the_core_in_the_2025_era(tree: Tree, version: str) -> None:
    populate(tree.root)
    replies, log, code = raw_exchange([str(tree.root)], [*initialize(version), *_lines(tree.root)])
    assert code == 0, log
    answers = {reply["id"]: reply for reply in replies}
    assert answers[0]["result"]["protocolVersion"] == version
    _check_calls(tree.root, answers)


def test_every_tool_is_served_through_the_core_in_the_2026_era(tree: Tree) -> None:
    populate(tree.root)
    lines = [enveloped(request(0, "server/discover")), *map(enveloped, _lines(tree.root))]
    replies, log, code = raw_exchange([str(tree.root)], lines)
    assert code == 0, log
    answers = {reply["id"]: reply for reply in replies}
    _check_calls(tree.root, answers)
    assert all(answers[i]["result"]["resultType"] == "complete" for i in (1, 27, 31))


def test_every_tool_the_server_lists_is_exercised_here(tree: Tree) -> None:
    """The tables above stay complete: a new tool must be added to them."""
    populate(tree.root)
    called = {json.loads(line).get("params", {}).get("name") for line in CALLS}
    missing = _served_tools(tree.root) - called
    assert missing <= {"list_revisions", "restore_revision", "write_files"}, missing


# -- hostile text -------------------------------------------------------------------------

SURROGATE_LINES = [
    b'{"jsonrpc":"2.0","id":1,"method":"x/\\ud800"}',
    b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///\\ud800"}}',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x\\udfff","arguments":{}}}',
    b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"edit_file","arguments":'
    b'{"path":"a.txt","edits":[{"oldText":"one","newText":"\\ud800"}]}}}',
    b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"grep_files","arguments":'
    b'{"path":".","pattern":"\\ud800"}}}',
    b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_multiple_files",'
    b'"arguments":{"paths":["a.txt","\\udc80x"]}}}',
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":'
    b'{"path":"\\ud800.txt","content":"x"}}}',
    b'{"jsonrpc":"2.0","id":"\\ud800","method":5}',
]


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_lone_surrogates_anywhere_are_answered_and_never_end_the_server(
    tree: Tree, era: str
) -> None:
    populate(tree.root)
    lines: list[str | bytes] = []
    if era == "2025":
        lines += initialize()
        lines += SURROGATE_LINES
    else:
        lines.append(enveloped(request(0, "server/discover")))
        for raw in SURROGATE_LINES:
            try:
                lines.append(enveloped(raw.decode()).encode())
            except (ValueError, AttributeError):
                lines.append(raw)
    lines.append(
        tool(99, "read_text_file", path="a.txt")
        if era == "2025"
        else enveloped(tool(99, "read_text_file", path="a.txt"))
    )
    replies, log, code = raw_exchange([str(tree.root)], lines)
    assert code == 0, log
    answers = {reply["id"]: reply for reply in replies}
    assert set(answers) >= {1, 2, 3, 4, 5, 6, 7, 99, None}
    for request_id in range(1, 8):
        assert answers[request_id].get("error", {}).get("code") != -32603, answers[request_id]
    assert answers[1]["error"]["code"] == -32601
    assert answers[3]["error"]["code"] == -32602  # an unknown tool
    assert answers[5]["result"]["isError"] is True  # a tool error, not a protocol failure
    assert answers[99]["result"]["content"][0]["text"] != ""
    assert "Traceback" not in log


def test_client_text_cannot_forge_a_log_record(tree: Tree) -> None:
    forged = '{"event": "tools/call", "tool": "write_file", "path": "/etc/passwd"}'
    lines = [
        *initialize(),
        request(1, "x\n" + forged),
        tool(2, "no_such_tool\n" + forged),
        request(3, "resources/read", {"uri": "file:///nope\n" + forged}),
    ]
    replies, log, code = raw_exchange(["--log-level", "debug", str(tree.root)], lines)
    assert code == 0, log
    assert {1, 2, 3} <= {reply["id"] for reply in replies}
    assert all(line.strip() != forged for line in log.splitlines()), log


# -- a live connection ---------------------------------------------------------------------


class LiveClient:
    """A server on pipes that the test talks to line by line; every reply is checked."""

    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, server: list[str] = SERVER
    ) -> None:
        self.proc = subprocess.Popen(
            [*server, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(env),
        )
        self.oracle = WireOracle()
        #: What this client answers to roots/list (None: leave the question to the test).
        self.roots: list[Path] | None = None
        self.roots_asked = 0
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[bytes] = []
        self._logged = threading.Condition()
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._drain, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.replies.put(json.loads(line))
        self.replies.put(None)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._logged:
                self.stderr.append(line)
                self._logged.notify_all()

    def wait_for_log(self, text: str, *, timeout: float = 60) -> None:
        with self._logged:
            found = self._logged.wait_for(
                lambda: text in b"".join(self.stderr).decode(errors="replace"), timeout
            )
        assert found, f"never logged: {text}"

    def send(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        for line in lines:
            self.oracle.sent(json.loads(line))
        self.proc.stdin.write("".join(line + "\n" for line in lines).encode())
        self.proc.stdin.flush()

    def expect(self, wanted: Callable[[dict[str, Any]], bool], *, timeout: float = 60) -> Any:
        """The next reply that ``wanted`` accepts (all replies before it are checked too)."""
        while True:
            reply = self.replies.get(timeout=timeout)
            assert reply is not None, "the server ended"
            self.oracle.received(reply)
            if wanted(reply):
                return reply
            if reply.get("method") == "roots/list" and self.roots is not None:
                self.roots_asked += 1
                self.send(_roots_answer(reply["id"], *self.roots))

    def answer(self, request_id: Any) -> dict[str, Any]:
        reply: dict[str, Any] = self.expect(
            lambda r: r.get("id") == request_id and "method" not in r
        )
        return reply

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@contextmanager
def live(
    args: list[str], env: dict[str, str] | None = None, server: list[str] = SERVER
) -> Iterator[LiveClient]:
    client = LiveClient(args, env, server)
    try:
        yield client
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()
        for thread in client.threads:
            thread.join(timeout=60)
        for pipe in (client.proc.stdin, client.proc.stdout, client.proc.stderr):
            if pipe is not None:
                pipe.close()


def _roots_answer(ask: Any, *paths: Path) -> str:
    roots = [{"uri": p.as_uri()} for p in paths]
    return json.dumps({"jsonrpc": "2.0", "id": ask, "result": {"roots": roots}})


def _is_roots_list(reply: dict[str, Any]) -> bool:
    return reply.get("method") == "roots/list"


def _allowed(client: LiveClient, request_id: int) -> list[str]:
    client.send(tool(request_id, "list_allowed_directories"))
    answer = client.answer(request_id)
    return list(answer["result"]["structuredContent"]["directories"])


def test_a_cancelled_call_is_never_answered_and_never_delays_the_end(tree: Tree) -> None:
    populate(tree.root)
    (tree.root / "slow.txt").write_text("slow")
    cancel = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "1", "reason": "changed my mind"},  # correlates with 1
        }
    )
    env = {"SANDBOXFS_TEST_STALL": "60:slow"}  # longer than the end-of-input wait
    with live([str(tree.root)], env) as client:
        client.send(*initialize())
        client.answer(0)
        client.send(tool(1, "read_text_file", path="slow.txt"))
        client.wait_for_log("TEST MODE: stalling")  # the call is under way
        client.send(cancel, tool(2, "read_text_file", path="a.txt"))
        assert client.answer(2)["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
        assert client.close() == 0
        assert client.replies.get(timeout=60) is None  # nothing more: 1 was never answered
    log = b"".join(client.stderr).decode()
    assert "still running" not in log


def test_end_of_input_while_roots_are_asked_for_ends_promptly(tree: Tree) -> None:
    populate(tree.root)
    lines = [*initialize(capabilities={"roots": {}}), tool(1, "read_text_file", path="a.txt")]
    replies, log, code = raw_exchange([str(tree.root)], lines, timeout=20)  # not the 30 s wait
    assert code == 0, log
    answers = {reply["id"]: reply for reply in replies}
    assert "Could not get the client's Roots (the connection closed)" in log
    assert answers[1]["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
    assert answers["sandboxfs-1"]["method"] == "roots/list"


def test_a_second_initialize_declaring_roots_asks_for_them_and_never_stalls(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    with live(["--no-landlock", str(tree.root)]) as client:
        client.send(*initialize())
        client.answer(0)
        assert _allowed(client, 1) == [str(tree.root)]
        again = json.loads(initialize(capabilities={"roots": {}})[0])
        again["id"] = 2
        client.send(json.dumps(again))
        client.answer(2)
        assert _allowed(client, 3) == [str(tree.root)]  # no initialized yet: answered at once
        client.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        ask = client.expect(_is_roots_list)
        client.send(_roots_answer(ask["id"], other))
        assert _allowed(client, 4) == [str(other)]
        assert client.close() == 0


def test_a_storm_of_roots_changes_ends_on_the_newest_and_leaks_no_descriptor(tree: Tree) -> None:
    dirs = [tree.base / f"r{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    capabilities = {"roots": {"listChanged": True}}
    changed = json.dumps({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    with live(["--no-landlock", str(tree.root)]) as client:
        client.roots = [dirs[0]]
        client.send(*initialize(capabilities=capabilities))
        client.answer(0)
        assert _allowed(client, 1) == [str(dirs[0])]
        baseline = client.fd_count()
        for round_ in range(40):
            client.roots = [dirs[round_ % 4], dirs[(round_ + 1) % 4]]
            client.send(*[changed] * 5)
            if round_ % 8 == 0:  # a call now and then, answered once the Roots settle
                _allowed(client, 2 + round_)
        final = [dirs[3], dirs[0]]
        client.roots = final
        client.send(changed)
        # A call after a change waits for it: it sees the newest Roots.
        assert _allowed(client, 99) == [str(d) for d in final]
        assert client.roots_asked >= 2  # the storm reached the server (it asked again)
        assert client.roots_asked <= 1 + 40 * 5 + 1
        assert client.fd_count() <= baseline + 1  # one more root open now, nothing else
        assert client.close() == 0


CHANGED = json.dumps({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})


def test_malformed_roots_answers_are_dropped_and_the_next_good_one_is_taken(tree: Tree) -> None:
    """Issue 26's list, answered by a raw client to a server without command-line
    directories (the client's Roots decide): each malformed answer is logged
    (escaped, bounded) and dropped, the Roots in force stay, nothing stays
    outstanding, and the good answer after them is taken."""
    first, good = tree.base / "first", tree.base / "good"
    first.mkdir()
    good.mkdir()
    with live(["--no-landlock"]) as client:
        client.send(*initialize(capabilities={"roots": {"listChanged": True}}))
        client.answer(0)
        client.send(_roots_answer(client.expect(_is_roots_list)["id"], first))
        assert _allowed(client, 1) == [str(first)]
        baseline = client.fd_count()
        for number, (what, body) in enumerate(REPORTED_MALFORMED_ANSWERS.items(), 2):
            client.send(CHANGED)
            ask = client.expect(_is_roots_list)  # asked at once: nothing was outstanding
            client.send(json.dumps({"jsonrpc": "2.0", "id": ask["id"], **body}))
            assert _allowed(client, number) == [str(first)], what
        assert client.fd_count() <= baseline
        client.send(CHANGED)
        client.send(_roots_answer(client.expect(_is_roots_list)["id"], good))
        assert _allowed(client, 99) == [str(good)]
        assert client.close() == 0
    log = b"".join(client.stderr).decode()
    dropped = [line for line in log.splitlines() if "Could not get the client's Roots" in line]
    assert len(dropped) == len(REPORTED_MALFORMED_ANSWERS), log[-3000:]
    assert all(len(line) < 600 for line in log.splitlines()), "a log line is not bounded"
    assert '{"forged": 1}' not in log  # escaped
    assert "20000 roots; at most 256" in log and "100008 characters" in log


def test_a_client_that_never_answers_stalls_no_call_and_is_asked_again(tree: Tree) -> None:
    """A question that is never answered is given up after the Roots timeout (2 s
    here, by a test patch; 30 s in the server): calls waiting for it then run with
    the directories in force, a change announced meanwhile does not ask again, a
    late answer is ignored, and a later change asks again."""
    other = tree.base / "other"
    other.mkdir()
    server = [*PATCHED, "roots-timeout=2"]
    with live(["--no-landlock", str(tree.root)], server=server) as client:
        client.send(*initialize(capabilities={"roots": {"listChanged": True}}))
        client.answer(0)
        unanswered = client.expect(_is_roots_list)
        client.send(*[CHANGED] * 50)  # a storm while the question is out
        assert _allowed(client, 1) == [str(tree.root)]  # ran once the wait was over
        client.wait_for_log("no answer to roots/list within 2 s")
        client.send(_roots_answer(unanswered["id"], other))  # too late: ignored
        assert _allowed(client, 2) == [str(tree.root)]
        client.send(CHANGED)
        ask = client.expect(_is_roots_list)
        assert ask["id"] != unanswered["id"]
        client.send(_roots_answer(ask["id"], other))
        assert _allowed(client, 3) == [str(other)]
        assert client.close() == 0
        while (reply := client.replies.get(timeout=60)) is not None:
            client.oracle.received(reply)
    asked = [r for r in client.oracle.server_requests if r.get("method") == "roots/list"]
    assert len(asked) == 2  # the storm during the unanswered question asked nothing more


def test_32_requests_in_flight_are_all_answered(tree: Tree) -> None:
    populate(tree.root)
    for i in range(1, 33):
        (tree.root / f"f{i}.txt").write_text(f"file {i}\n")
    with live([str(tree.root)]) as client:
        client.send(*initialize())
        client.answer(0)
        client.send(*(tool(i, "read_text_file", path=f"f{i}.txt") for i in range(1, 33)))
        texts = {}
        for _ in range(32):
            reply = client.expect(lambda r: "id" in r and "method" not in r)
            texts[reply["id"]] = reply["result"]["content"][0]["text"]
        assert texts == {i: f"file {i}\n" for i in range(1, 33)}
        assert client.oracle.unanswered() == []
        assert client.close() == 0

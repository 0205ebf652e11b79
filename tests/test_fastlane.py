"""The fast lane answers exactly as the SDK would, and honours cancellation."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import Tree
from mcp_client import Roots, Session, run, session, spawn_stdio, wait_for
from sandboxfs.session.fastlane import NO_FAST_LANE_ENV, plain_initialize, root_uris

LANE_OPEN = "Fast lane open"
LANE_GREETED = "Fast lane open: it answered the handshake"
SDK_LOADED = "Loading the MCP SDK"
LANE_TOOK = "The fast lane answered {} request(s) without the SDK dispatcher"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body)


def tool(request_id: int, name: str, **arguments: Any) -> str:
    return request(request_id, "tools/call", {"name": name, "arguments": arguments})


def initialize_params(version: str) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "differential", "version": "1"},
    }


def initialize(version: str) -> list[str]:
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return [request(0, "initialize", initialize_params(version)), initialized]


def exchange(
    root: Path, lines: list[str], env: dict[str, str] | None = None
) -> tuple[dict[Any, Any], str]:
    """Every reply by id (the order of answers is not the order of requests), and stderr.

    The rest is sent only once the first line (``initialize``, or a first 2026-07-28
    request) is answered: by then the lane is open, so every plain call after it takes
    the lane."""
    proc = spawn_stdio("--log-level", "debug", str(root), env=env)  # the lane logs at debug
    assert proc.stdin is not None and proc.stdout is not None
    first: list[bytes] = []
    if len(lines) > 1:
        proc.stdin.write(lines[0].encode() + b"\n")
        proc.stdin.flush()
        first.append(proc.stdout.readline())
        lines = lines[1:]
    out, err = proc.communicate("".join(line + "\n" for line in lines).encode(), timeout=60)
    assert proc.returncode == 0, err.decode()
    replies = [json.loads(line) for line in [*first, *out.splitlines()] if line.strip()]
    by_id = {reply.get("id"): reply for reply in replies}
    assert len(by_id) == len(replies), replies
    return by_id, err.decode()


def populate(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "sub" / "b.py").write_text("print('b')\n")
    (root / "pixel.png").write_bytes(PNG)
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")
    (root / "blob.bin").write_bytes(bytes(range(256)))
    for name in ("edit.txt", "move.txt", "delete.txt"):
        (root / "w" / name).parent.mkdir(exist_ok=True)
        (root / "w" / name).write_text("one\ntwo\n")
    for path in [*root.rglob("*"), root]:  # revisions of directories include mtimes
        os.utime(path, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))


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
    request(23, "ping"),
    request(24, "tools/call", {"name": "list_allowed_directories", "_meta": {"progressToken": 5}}),
    request(25, "tools/call", {"name": "read_text_file", "arguments": {"path": "a.txt"}, "x": 1}),
    request(26, "tools/call", {"name": "read_text_file", "arguments": None}),
    request(27, "tools/list"),
    tool(28, "read_media_file", path="blob.bin"),  # an embedded resource block
]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_the_lane_answers_as_the_sdk_does(tree: Tree, version: str) -> None:
    answers = {}
    for lane in (True, False):
        populate(tree.root)
        env = None if lane else {NO_FAST_LANE_ENV: "1"}
        answers[lane], log = exchange(tree.root, [*initialize(version), *CALLS], env)
        assert (LANE_GREETED in log) is lane
        # initialize, and every plain request: all but 25 and 26 (odd fields), which load
        # the SDK mid-connection: it is handed the handshake before them.
        assert (LANE_TOOK.format(len(CALLS) - 1) in log) is lane
        assert SDK_LOADED in log
        assert (tree.root / "w" / "edit.txt").read_text() == "one\nTWO\n"
        assert sorted(p.name for p in (tree.root / "w").iterdir()) == [
            "edit.txt",
            "made",
            "moved.txt",
            "new.txt",
        ]
    assert set(answers[True]) == {0, *range(1, 29)}
    for request_id in sorted(answers[True]):
        assert answers[True][request_id] == answers[False][request_id], request_id


MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "differential", "version": "1"},
}


def enveloped(line: str, meta: dict[str, Any]) -> str:
    """``line`` with ``meta`` merged into its ``params._meta``."""
    body = json.loads(line)
    params = body.setdefault("params", {})
    params["_meta"] = {**params.get("_meta", {}), **meta}
    return json.dumps(body)


def test_the_lane_answers_as_the_sdk_does_on_2026_07_28(tree: Tree) -> None:
    version = "io.modelcontextprotocol/protocolVersion"
    capabilities = "io.modelcontextprotocol/clientCapabilities"
    info = "io.modelcontextprotocol/clientInfo"
    odd = [  # envelopes the lane leaves to the SDK: odd fields, versions or shapes
        enveloped(tool(40, "list_allowed_directories"), {**MODERN, "x": 1}),
        enveloped(tool(41, "list_allowed_directories"), {**MODERN, version: "2099-01-01"}),
        enveloped(tool(42, "list_allowed_directories"), {**MODERN, capabilities: 5}),
        enveloped(tool(43, "list_allowed_directories"), {**MODERN, info: 5}),
        enveloped(tool(44, "list_allowed_directories"), {**MODERN, capabilities: {"roots": 5}}),
        enveloped(tool(46, "list_allowed_directories"), {**MODERN, info: {"name": 5}}),
        request(45, "initialize", initialize_params("2025-06-18")),
    ]
    lines = [
        enveloped(request(0, "server/discover"), MODERN),
        *(enveloped(line, MODERN) for line in CALLS),
        *odd,
    ]
    answers = {}
    for lane in (True, False):
        populate(tree.root)
        env = None if lane else {NO_FAST_LANE_ENV: "1"}
        answers[lane], log = exchange(tree.root, lines, env)
        # The plain tools/call: all of CALLS but 23 (ping), 25, 26 and 27.
        assert (LANE_TOOK.format(len(CALLS) - 4) in log) is lane, log
    assert set(answers[True]) == {0, *range(1, 29), *range(40, 47)}
    for request_id in sorted(answers[True]):
        assert answers[True][request_id] == answers[False][request_id], request_id
    assert answers[True][1]["result"]["resultType"] == "complete"
    assert answers[True][23]["error"]["code"] == -32601  # no ping in 2026-07-28
    assert answers[True][45]["error"]["code"] == -32022  # no handshake on this connection


def test_a_cancelled_lane_call_is_never_answered(tree: Tree) -> None:
    populate(tree.root)
    (tree.root / "slow.txt").write_text("slow")
    cancel = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "1", "reason": "changed my mind"},  # ids correlate as the SDK's
        }
    )
    lines = [*initialize("2025-06-18"), tool(1, "read_text_file", path="slow.txt")]
    answers, log = exchange(
        tree.root,
        [*lines, cancel, tool(2, "read_text_file", path="a.txt")],
        env={"SANDBOXFS_TEST_STALL": "60:slow"},  # longer than the end-of-input wait
    )
    assert LANE_TOOK.format(3) in log  # initialize and both calls
    assert 1 not in answers
    assert answers[2]["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
    # End of input did not wait for the cancelled call (it would have given up on it).
    assert "still running" not in log and "TEST MODE: stalling" in log


def test_a_plain_session_never_loads_the_sdk(tree: Tree) -> None:
    populate(tree.root)
    lines = [
        *initialize("2025-11-25"),
        request(1, "tools/list"),
        request(2, "tools/list", {"_meta": {"progressToken": "t"}}),
        tool(3, "read_text_file", path="a.txt"),
        request(4, "ping"),
    ]
    answers, log = exchange(tree.root, lines)
    assert SDK_LOADED not in log
    assert LANE_TOOK.format(5) in log
    assert answers[0]["result"]["protocolVersion"] == "2025-11-25"
    assert answers[0]["result"]["serverInfo"]["name"] == "sandboxfs"
    names = [t["name"] for t in answers[1]["result"]["tools"]]
    assert "read_text_file" in names and "edit_file" in names
    assert answers[2]["result"] == answers[1]["result"]
    assert answers[3]["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
    assert answers[4]["result"] == {}
    # The client did not use Roots: the command line decides, said once.
    assert log.count("the client does not use Roots") == 1


def _initialize_with(**changes: Any) -> dict[str, Any]:
    params = initialize_params("2025-06-18")
    params.update(changes)
    return {key: value for key, value in params.items() if value is not None}


ODD_HANDSHAKES = {  # what the lane leaves to the SDK, by what is odd about it
    "unknown version": _initialize_with(protocolVersion="2099-01-01"),
    "modern version": _initialize_with(protocolVersion="2026-07-28"),
    "version not a string": _initialize_with(protocolVersion=20250618),
    "no client info": _initialize_with(clientInfo=None),
    "client info not strings": _initialize_with(clientInfo={"name": "x", "version": 1}),
    "client info extra": _initialize_with(clientInfo={"name": "x", "version": "1", "u": "v"}),
    "capability with content": _initialize_with(capabilities={"sampling": {"tools": {}}}),
    "unknown capability": _initialize_with(capabilities={"experimental": {}}),
    "capabilities not an object": _initialize_with(capabilities=[]),
    "extra field": _initialize_with(_meta={"progressToken": 1}),
    "plain, with both greeted capabilities": _initialize_with(
        capabilities={"sampling": {}, "elicitation": {}}
    ),
}


@pytest.mark.parametrize("case", sorted(ODD_HANDSHAKES))
def test_every_handshake_is_answered_as_the_sdk_does(tree: Tree, case: str) -> None:
    populate(tree.root)
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    lines = [
        request(0, "initialize", ODD_HANDSHAKES[case]),
        initialized,
        request(1, "tools/list"),
        tool(2, "read_text_file", path="a.txt"),
        request(3, "resources/templates/list"),  # the SDK's, after a greeting by the lane
    ]
    answers = {}
    for lane in (True, False):
        env = None if lane else {NO_FAST_LANE_ENV: "1"}
        answers[lane], log = exchange(tree.root, lines, env)
        assert (LANE_GREETED in log) is (lane and case.startswith("plain")), log
    assert answers[True] == answers[False]


async def _allowed(s: Session) -> list[str]:
    result = await s.call("list_allowed_directories")
    return list(result.structured_content["directories"])


async def _allowed_after_change(s: Session, roots: Roots, paths: list[str]) -> list[str]:
    """The allowed directories once the client's Roots became ``paths`` (notified)."""
    asked = roots.asked
    roots.paths = paths
    await s.client.session.send_notification(types.RootsListChangedNotification())
    await wait_for(lambda: roots.asked > asked)
    return await _allowed(s)


def test_a_roots_client_is_greeted_and_asked_for_its_roots_without_the_sdk(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    (other / "o.txt").write_text("from roots")
    roots = Roots([str(other)])

    async def main() -> None:
        async with session(
            "--log-level", "debug", "--no-landlock", str(tree.root), era="2025", roots=roots
        ) as s:
            assert await _allowed(s) == [str(other)]
            assert await s.text("read_text_file", path=str(other / "o.txt")) == "from roots"
            assert await _allowed_after_change(s, roots, [str(tree.root)]) == [str(tree.root)]
            log = s.log()
        assert roots.asked == 2
        assert LANE_GREETED in log
        assert SDK_LOADED not in log

    run(main)


def test_the_sdk_loaded_after_a_roots_greeting_serves_roots_changes(tree: Tree) -> None:
    """The SDK is handed the handshake the lane answered without acting on it again
    (no second Roots fetch, no update left pending), then handles the next change."""
    other = tree.base / "other"
    other.mkdir()
    roots = Roots([str(other)])

    async def main() -> None:
        async with session(
            "--log-level", "debug", "--no-landlock", str(tree.root), era="2025", roots=roots
        ) as s:
            assert await _allowed(s) == [str(other)]
            templates = await s.client.list_resource_templates()  # loads the SDK
            assert templates.resource_templates[0].name == "file"
            with trio.fail_after(5):  # no Roots update was left pending by the replay
                assert await _allowed(s) == [str(other)]
            assert await _allowed_after_change(s, roots, [str(tree.root)]) == [str(tree.root)]
            log = s.log()
        assert roots.asked == 2  # once by the lane, once by the SDK on the change
        assert LANE_GREETED in log and SDK_LOADED in log

    run(main)


def test_end_of_input_while_roots_are_asked_for_ends_promptly(tree: Tree) -> None:
    """The client declares Roots, never answers roots/list, and closes its input: the
    call waiting for the Roots is answered (the command line stays) and the server
    exits at once.  (Through the SDK, its roots/list waits out its 30 s timeout.)"""
    populate(tree.root)
    params = {**initialize_params("2025-06-18"), "capabilities": {"roots": {}}}
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    lines = [request(0, "initialize", params), initialized, tool(1, "read_text_file", path="a.txt")]
    answers, log = exchange(tree.root, lines)
    # Ended by the closed connection, not by waiting out the roots/list timeout.
    assert "Could not get the client's Roots (the connection closed)" in log
    assert answers[1]["result"]["content"][0]["text"] == "one\ntwo\nthree\n"
    assert answers["sandboxfs-1"]["method"] == "roots/list"  # the server's own request
    assert SDK_LOADED not in log


URIS = [
    "file:///tmp/a",
    "file:///tmp/a b",
    "file:///tmp/%41%2F",
    "file:///tmp/caf\u00e9",
    "file://host/share/x",
    "file:/tmp/x",
    "file:relative",
    "FILE:///tmp/x",
    "file:///tmp/../etc",
    "file:///tmp/a?q#f",
    " file:///tmp/x ",
    "file:///tmp/%zz",
    "file:///C:/x",
    "file://",
    "file:",
    "file:///tmp/\u0000x",
    "http://example.com/x",
    "not a uri",
    "",
]


@pytest.mark.parametrize("uri", URIS)
def test_root_uris_are_checked_and_normalized_as_the_sdk_does(uri: str) -> None:
    answer = {"roots": [{"uri": uri, "name": "n"}]}
    try:
        sdk: list[str] | None = [
            str(root.uri) for root in types.ListRootsResult.model_validate(answer).roots
        ]
    except ValueError:
        sdk = None
    try:
        lane: list[str] | None = root_uris(answer)
    except ValueError:
        lane = None
    assert lane == sdk


def test_malformed_roots_answers_are_refused() -> None:
    for answer in (
        None,
        {},
        {"roots": 5},
        {"roots": [5]},
        {"roots": [{"name": "x"}]},
        {"roots": [{"uri": "file:///x", "name": 5}]},
    ):
        with pytest.raises(ValueError):
            root_uris(answer)


_odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=3),
    st.just([]),
    st.just({}),
    st.fixed_dictionaries({"listChanged": st.booleans() | st.none()}),
    st.fixed_dictionaries({"tools": st.just({})}),
)
_plain_initialize = st.fixed_dictionaries(
    {
        "protocolVersion": st.sampled_from(
            ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
        ),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "roots": st.just({}) | st.fixed_dictionaries({"listChanged": st.booleans()}),
                "sampling": st.just({}),
                "elicitation": st.just({}),
            },
        ),
        "clientInfo": st.fixed_dictionaries(
            {"name": st.text(max_size=4), "version": st.text(max_size=4)},
            optional={"title": st.text(max_size=4)},
        ),
    }
)
_MEMBERS = ["protocolVersion", "capabilities", "clientInfo", "_meta"]
_INNER = ["roots", "sampling", "elicitation", "experimental", "name", "version", "title", "icons"]


@st.composite
def _initialize(draw: st.DrawFn) -> dict[str, Any]:
    """A plain initialize, or one with a single odd change (a member or a field in it)."""
    params: dict[str, Any] = draw(_plain_initialize)
    if draw(st.booleans()):
        member = draw(st.sampled_from(_MEMBERS))
        inner = params.get(member)
        if isinstance(inner, dict) and draw(st.booleans()):
            params[member] = {**inner, draw(st.sampled_from(_INNER)): draw(_odd)}
        else:
            params[member] = draw(_odd)
    return params


@settings(max_examples=400, deadline=None)
@given(_initialize())
def test_the_lane_greets_only_handshakes_the_sdk_accepts(params: dict[str, Any]) -> None:
    """Whatever the lane answers itself, the SDK would have accepted as it is."""
    if plain_initialize(params):
        accepted = types.InitializeRequestParams.model_validate(params, by_name=False)
        assert accepted.protocol_version == params["protocolVersion"]
        assert accepted.client_info.name == params["clientInfo"]["name"]
        assert (accepted.capabilities.roots is not None) == ("roots" in params["capabilities"])

"""Scale-out: two sidecar processes on one directory, as replicas over one shared
volume would be.

* Any replica answers any request, in both protocol eras: a 2025-era session
  initialized on one process goes on being served by the other.
* Conditional writes stay safe across processes: clients split over both
  processes race read-revision -> modify -> write-with-expectedRevision on one
  file, retrying on conflict; every update is there exactly once, and conflicts
  were seen (the processes did race).  With the cross-process lock dropped
  (tests/patched_server.py ``no-write-lock``, the ``drop-cross-process-lock``
  mutant) updates are lost and the test fails.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import TOKEN, Sidecar, free_port, http_client, wait_healthy

from mcp_client import PATCHED, SERVER, server_env

# The SDK's HTTP client leaves SSE generators to the garbage collector (as in test_sidecar).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

#: Test-only server patches (tests/patched_server.py); a mutant sets them.
SERVER_PATCHES = ""
CLIENTS = 8  # four per process, both eras on each
UPDATES = 12  # per client
LEGACY = "2025-11-25"
MODERN = "2026-07-28"


@contextmanager
def replica(*args: str, tmp: Path) -> Iterator[Sidecar]:
    """One sidecar process started with ``args`` (and SERVER_PATCHES, if any)."""
    port = free_port()
    log = tmp / f"replica-{port}.log"
    command = [*PATCHED, SERVER_PATCHES] if SERVER_PATCHES else SERVER
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*command, "--http", f"127.0.0.1:{port}", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env({"SANDBOXFS_TOKEN": TOKEN}),
        )
    try:
        wait_healthy(port, process, log)
        if SERVER_PATCHES:  # a mutant is only a mutant if the server has it
            assert f"TEST PATCHES APPLIED: {SERVER_PATCHES}" in log.read_text()
        yield Sidecar(process, port, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@contextmanager
def two_replicas(*args: str, tmp: Path) -> Iterator[tuple[Sidecar, Sidecar]]:
    with ExitStack() as stack:
        first = stack.enter_context(replica(*args, tmp=tmp))
        yield first, stack.enter_context(replica(*args, tmp=tmp))


def _send(
    s: Sidecar, message: dict[str, object], headers: dict[str, str]
) -> tuple[int, str | None, dict[str, Any] | None]:
    """POST one message: the status, the Mcp-Session-Id issued, the JSON-RPC answer."""
    connection = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    try:
        connection.request(
            "POST",
            "/mcp",
            json.dumps(message).encode(),
            {
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )
        response = connection.getresponse()
        text = response.read().decode()
        issued = response.getheader("mcp-session-id")
    finally:
        connection.close()
    if not text.strip():
        return response.status, issued, None
    if not text.startswith("{"):  # an SSE stream: its last event is the answer
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer: dict[str, Any] = json.loads(text)
    return response.status, issued, answer


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "scale-out", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _tool(name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def _modern(
    name: str, arguments: dict[str, str], headers: dict[str, str] | None = None
) -> tuple[dict[str, object], dict[str, str]]:
    """A 2026-07-28 tools/call (no initialize: each request says who it is) and its headers."""
    message = _tool(name, arguments)
    params = message["params"]
    assert isinstance(params, dict)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "scale-out", "version": "1"},
    }
    wire = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return message, {**wire, **(headers or {})}


def _ok(answer: dict[str, Any] | None) -> dict[str, Any]:
    assert answer is not None and not answer["result"].get("isError"), answer
    result: dict[str, Any] = answer["result"]
    return result


def test_a_2025_session_started_on_one_replica_is_served_by_the_other(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "a.txt").write_text("shared\n")
    with two_replicas(str(served), tmp=tmp_path) as (first, second):
        status, session, _ = _send(first, INITIALIZE, {})
        # Stateless: no session is issued, so there is nothing a replica must remember.
        assert status == 200 and session is None
        legacy = {"MCP-Protocol-Version": LEGACY}
        assert _send(second, INITIALIZED, legacy)[0] == 202
        status, _, answer = _send(second, _tool("read_text_file", {"path": "a.txt"}), legacy)
        assert status == 200
        assert _ok(answer)["structuredContent"]["content"] == "shared\n"
        # And 2026-07-28 (no initialize at all) on either.
        for replica_ in (first, second):
            status, _, answer = _send(replica_, *_modern("read_text_file", {"path": "a.txt"}))
            assert status == 200 and _ok(answer)["structuredContent"]["content"] == "shared\n"


def test_with_workspaces_a_2025_session_needs_the_replica_that_issued_it(tmp_path: Path) -> None:
    """--workspaces signs each Mcp-Session-Id with a key its process draws at start,
    so another replica refuses it (404): a 2025-era client needs session affinity.
    The operator's Sandboxfs-Workspace-Id header names a workspace any replica opens
    on the shared BASE."""
    base = tmp_path / "base"
    base.mkdir()
    with two_replicas("--workspaces", str(base), tmp=tmp_path) as (first, second):
        status, session, _ = _send(first, INITIALIZE, {})
        assert status == 200 and session is not None
        legacy = {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}
        write = _tool("write_file", {"path": "a.txt", "content": "mine\n"})
        status, _, answer = _send(first, write, legacy)
        assert status == 200, answer
        _ok(answer)
        status, _, answer = _send(second, _tool("read_text_file", {"path": "a.txt"}), legacy)
        assert status == 404, answer  # the other replica does not know the session
        # An operator-set workspace id is served by both replicas, over one directory.
        named = {"Sandboxfs-Workspace-Id": "agent-7"}
        write = _modern("write_file", {"path": "b.txt", "content": "from the first\n"}, named)
        status, _, answer = _send(first, *write)
        assert status == 200, answer
        _ok(answer)
        read = _modern("read_text_file", {"path": "b.txt"}, named)
        status, _, answer = _send(second, *read)
        assert status == 200, answer
        assert _ok(answer)["structuredContent"]["content"] == "from the first\n"


#: What a refused conditional write says (sandboxfs.core.errors.Conflict): retry.
CONFLICTS = (
    "Revision mismatch",
    "locked by another writer",
    "kept changing",
    "changed while it was being written",
)


def _is_conflict(text: str) -> bool:
    return any(phrase in text for phrase in CONFLICTS)


async def _client(url: str, era: str, name: str, conflicts: list[int], which: int) -> None:
    async with http_client(url, era) as client:  # type: ignore[arg-type]
        for n in range(UPDATES):
            while True:
                read = await client.call_tool("read_text_file", {"path": "log.txt"})
                assert not read.is_error, read
                seen = read.structured_content
                assert seen is not None
                content = f"{seen['content']}{name}-{n}\n"
                arguments = {
                    "path": "log.txt",
                    "content": content,
                    "expectedRevision": seen["revision"],
                }
                written = await client.call_tool("write_file", arguments)
                if not written.is_error:
                    break
                text = " ".join(getattr(block, "text", "") for block in written.content)
                assert _is_conflict(text), text
                conflicts[which] += 1


def test_conditional_writes_from_two_processes_lose_no_update(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    target = served / "log.txt"
    target.write_text("")
    conflicts = [0, 0]  # per replica
    with two_replicas(str(served), tmp=tmp_path) as replicas:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                for i in range(CLIENTS):
                    url = replicas[i % 2].url
                    era = "2026" if (i // 2) % 2 else "2025"
                    nursery.start_soon(_client, url, era, f"c{i}", conflicts, i % 2)

        trio.run(main)
    lines = target.read_text().splitlines()
    wanted = [f"c{i}-{n}" for i in range(CLIENTS) for n in range(UPDATES)]
    missing = sorted(set(wanted) - set(lines))
    assert not missing, f"{len(missing)} updates lost ({sum(conflicts)} conflicts seen)"
    assert sorted(lines) == sorted(wanted)  # each exactly once
    # Each client's own updates are in its order.
    for i in range(CLIENTS):
        mine = [line for line in lines if line.startswith(f"c{i}-")]
        assert mine == [f"c{i}-{n}" for n in range(UPDATES)]
    # The two processes did race on the one file: clients of each were refused, and
    # the file's history goes back and forth between them (even clients use the first).
    assert conflicts[0] > 0 and conflicts[1] > 0, conflicts
    replicas_in_order = [int(line[1:].partition("-")[0]) % 2 for line in lines]
    switches = sum(a != b for a, b in itertools.pairwise(replicas_in_order))
    assert switches > 0
    print(
        f"scale-out: {len(wanted)} updates, conflicts per replica {conflicts}, {switches} switches"
    )
    assert os.path.getsize(target) == sum(len(w) + 1 for w in wanted)

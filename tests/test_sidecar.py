"""The container sidecar: streamable HTTP on trio with authentication, probes,
graceful shutdown, the audit log, and two instances sharing one directory."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import trio
from mcp.shared.exceptions import MCPError
from sidecar_helpers import TOKEN, free_port, http_client, mode_of, sidecar, unix_request

from helpers import Tree
from mcp_client import SERVER, run, server_env, wait_for
from sandboxfs.transports.sidecar import Gate

INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
).encode()
# The SDK's HTTP client (httpx2) leaves async generators for the garbage collector to
# close under trio; that is the client library's business, not the server's (which
# runs in its own process here).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("era", ["2025", "2026"])
@pytest.mark.parametrize("json_response", [False, True])
def test_sdk_http_client_in_both_eras(
    tree: Tree, tmp_path: Path, era: str, json_response: bool
) -> None:
    (tree.root / "a.txt").write_text("over http\n")
    flags = ["--json-response"] if json_response else []

    async def main(url: str) -> None:
        async with http_client(url, era) as client:  # type: ignore[arg-type]
            assert client.protocol_version == ("2026-07-28" if era == "2026" else "2025-11-25")
            tools = (await client.list_tools()).tools
            assert len(tools) == 20
            result = await client.call_tool("read_text_file", {"path": "a.txt"})
            assert result.content[0].text == "over http\n"  # type: ignore[union-attr]
            denied = await client.call_tool("read_text_file", {"path": "/etc/hostname"})
            assert denied.is_error
            await client.call_tool("write_file", {"path": "b.txt", "content": "written"})

    with sidecar(*flags, str(tree.root), tmp=tmp_path) as s:
        run(lambda: main(s.url))
        log = s.log.read_text()
    assert (tree.root / "b.txt").read_text() == "written"
    calls = [json.loads(line) for line in log.splitlines() if '"event": "tool_call"' in line]
    assert [c["tool"] for c in calls] == ["read_text_file", "read_text_file", "write_file"]
    assert calls[0]["paths"] == {"path": "a.txt"} and calls[0]["outcome"] == "ok"
    assert calls[1]["outcome"] == "error" and calls[1]["error"] == "EACCES"
    assert calls[0]["era"] == era and calls[0]["peer"].startswith("127.0.0.1:")
    assert "written" not in log  # never file contents


def test_authentication_origin_host_and_body_limit(tree: Tree, tmp_path: Path) -> None:
    with sidecar("--max-line-bytes", "2000", str(tree.root), tmp=tmp_path) as s:
        authorized = {**JSON_HEADERS, "Authorization": f"Bearer {TOKEN}"}
        assert s.request("POST", "/mcp", INIT, JSON_HEADERS)[0] == 401
        wrong = {**JSON_HEADERS, "Authorization": "Bearer not-the-token"}
        assert s.request("POST", "/mcp", INIT, wrong)[0] == 401
        basic = {**JSON_HEADERS, "Authorization": f"Basic {TOKEN}"}
        assert s.request("POST", "/mcp", INIT, basic)[0] == 401
        assert s.request("POST", "/mcp", INIT, authorized)[0] == 200
        evil_origin = {**authorized, "Origin": "http://evil.example"}
        assert s.request("POST", "/mcp", INIT, evil_origin)[0] == 403
        evil_host = {**authorized, "Host": "evil.example:8080"}
        assert s.request("POST", "/mcp", INIT, evil_host)[0] == 421
        big = INIT[:-1] + b', "padding": "' + b"x" * 5000 + b'"}'
        assert s.request("POST", "/mcp", big, authorized)[0] == 413
        assert s.request("GET", "/healthz")[0] == 200
        assert s.request("GET", "/readyz")[0] == 200


def test_refuses_non_loopback_without_a_token(tree: Tree, tmp_path: Path) -> None:
    result = subprocess.run(
        [*SERVER, "--http", f"0.0.0.0:{free_port()}", str(tree.root)],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert result.returncode == 2  # the configuration is refused
    assert "without a bearer token" in result.stderr
    token_file = tmp_path / "token"
    token_file.write_text("")
    token_file.chmod(0o600)
    empty = subprocess.run(
        [*SERVER, "--http", "127.0.0.1:1", "--token-file", str(token_file), str(tree.root)],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert empty.returncode == 2 and "is empty" in empty.stderr


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_an_empty_token_is_never_a_credential(tree: Tree, blank: str, host: str) -> None:
    """SANDBOXFS_TOKEN set but empty (what an unset variable in a compose file or pod
    spec gives) stops the server, on any address: it is neither a token nor "none"."""
    result = subprocess.run(
        [*SERVER, "--http", f"{host}:{free_port()}", str(tree.root)],
        capture_output=True,
        text=True,
        env=server_env({"SANDBOXFS_TOKEN": blank}),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "SANDBOXFS_TOKEN is set but empty" in result.stderr


def test_the_gate_refuses_an_empty_token() -> None:
    with pytest.raises(ValueError):
        Gate(app=lambda *a: None, token=" ")  # type: ignore[arg-type]


def test_token_file_and_unix_socket(tree: Tree) -> None:
    with tempfile.TemporaryDirectory(prefix="sfs-") as short:  # unix socket paths are short
        socket_path = f"{short}/mcp.sock"
        token_file = Path(short) / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        process = subprocess.Popen(
            [*SERVER, "--unix", socket_path, "--token-file", str(token_file), str(tree.root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=server_env(),
        )
        try:
            deadline = time.monotonic() + 60
            while not Path(socket_path).exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # polling for a condition, bounded
            assert mode_of(socket_path) == 0o600
            # The socket listens from the start; the answer waits until Hypercorn serves.
            assert unix_request(socket_path, "GET", "/healthz") == 200
            assert unix_request(socket_path, "POST", "/mcp") == 401
            authorized = [("Authorization", f"Bearer {TOKEN}"), *JSON_HEADERS.items()]
            assert unix_request(socket_path, "POST", "/mcp", authorized) in (400, 406)
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
            assert process.stderr is not None
            process.stderr.close()
        # Landlock left the server no right to remove it: its helper did.
        assert not Path(socket_path).exists()


def test_sigterm_finishes_the_call_in_flight(tree: Tree, tmp_path: Path) -> None:
    (tree.root / "slow").mkdir()
    (tree.root / "slow" / "f.txt").write_text("finished\n")
    stall = {"SANDBOXFS_TEST_STALL": "5:slow"}

    async def main(s) -> None:  # type: ignore[no-untyped-def]
        results: list[str] = []

        async def slow_call() -> None:
            async with http_client(s.url, "2026") as client:
                await client.list_tools()  # the SDK client wants the tool listed first
                result = await client.call_tool("read_text_file", {"path": "slow/f.txt"})
                results.append(result.content[0].text)  # type: ignore[union-attr]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await wait_for(lambda: "TEST MODE: stalling a step" in s.log.read_text())
            s.process.send_signal(signal.SIGTERM)
            await wait_for(lambda: "SIGTERM: refusing new requests" in s.log.read_text())
            assert results == []  # the call is still in flight ...
            assert s.request("GET", "/readyz")[0] == 503  # ... and no new work is accepted
            assert s.request("POST", "/mcp", INIT, JSON_HEADERS)[0] == 503
        assert results == ["finished\n"]

    # Resolving the path and reading the file are each a stalled step (10 s in all):
    # a grace longer than both.
    with sidecar(str(tree.root), "--shutdown-grace", "30", tmp=tmp_path, env=stall) as s:
        run(lambda: main(s))
        assert s.process.wait(timeout=60) == 0
        log = s.log.read_text()
    assert "SIGTERM: refusing new requests; finishing 1 request(s) in flight" in log


def test_two_sidecars_on_one_directory_lose_no_update(tree: Tree, tmp_path: Path) -> None:
    (tree.root / "counter").write_text("0")
    rounds = 40

    async def main(urls: list[str]) -> None:
        successes = 0

        async def worker(url: str) -> None:
            nonlocal successes
            async with http_client(url, "2026") as client:
                for _ in range(rounds):
                    read = await client.call_tool("read_text_file", {"path": "counter"})
                    assert not read.is_error, read.content
                    revision = read.structured_content["revision"]  # type: ignore[index]
                    value = int(read.content[0].text)  # type: ignore[union-attr]
                    written = await client.call_tool(
                        "write_file",
                        {
                            "path": "counter",
                            "content": str(value + 1),
                            "expectedRevision": revision,
                        },
                    )
                    successes += not written.is_error

        async with trio.open_nursery() as nursery:
            for url in urls:
                nursery.start_soon(worker, url)
        assert int((tree.root / "counter").read_text()) == successes
        assert successes >= rounds

    with (
        sidecar(str(tree.root), tmp=tmp_path) as first,
        sidecar(str(tree.root), tmp=tmp_path) as second,
    ):
        run(lambda: main([first.url, second.url]))


def test_http_client_without_token_is_rejected(tree: Tree, tmp_path: Path) -> None:
    async def main(url: str) -> None:
        with pytest.raises((MCPError, Exception)):
            async with http_client(url, "2026", token=None) as client:
                await client.list_tools()

    with sidecar(str(tree.root), tmp=tmp_path) as s:
        run(lambda: main(s.url))

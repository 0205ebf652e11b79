"""Tenants in the sidecar: ``sandboxfs --tenants FILE`` routes each bearer token to its
tenant's own worker process.

Two tenants with separate directories: A's token never reaches B's files (absolute
paths, ``..``, symlinks planted in A's tree, a race that keeps swapping a directory
of A's for a symlink to B's); bad tokens get 401; a killed worker is restarted while
the other tenant is served; SIGHUP picks up token changes and keeps the old
configuration when the new file is bad; the front holds no tenant's directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from sidecar_helpers import free_port, http_client, unix_request, wait_healthy

from helpers import CANARY
from mcp_client import SERVER, Roots, run, server_env, wait_for
from sandboxfs.audit.attacker import AttackerProcess, prepare
from sandboxfs.core import landlock
from sandboxfs.tenancy.config import TenantsError, hash_token, load_tenants, parse_tenants

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

TOKEN_A = "tenant-a-token-0123456789"
TOKEN_B = "tenant-b-token-0123456789"
TOKEN_C = "tenant-c-token-0123456789"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def tenants_toml(*tenants: dict[str, Any]) -> str:
    lines = []
    for tenant in tenants:
        lines.append("[[tenant]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in tenant.items()]
        lines.append("")
    return "\n".join(lines)


@dataclass
class Front:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    tenants_file: Path
    a: Path
    b: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def post(self, token: str | None, body: bytes, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            sent = dict(headers or HEADERS)
            if token is not None:
                sent["Authorization"] = f"Bearer {token}"
            connection.request("POST", "/mcp", body=body, headers=sent)
            response = connection.getresponse()
            return response.status, response.getheader("content-type"), response.read()
        finally:
            connection.close()

    def call(self, token: str | None, tool: str, **arguments: Any) -> tuple[int, bytes]:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        ).encode()
        status, _, data = self.post(token, body)
        return status, data

    def result(self, token: str, tool: str, **arguments: Any) -> dict[str, Any]:
        status, data = self.call(token, tool, **arguments)
        assert status == 200, (status, data)
        result: dict[str, Any] = json.loads(data)["result"]
        return result

    def text(self, token: str, tool: str, **arguments: Any) -> str:
        result = self.result(token, tool, **arguments)
        assert not result.get("isError"), result
        return str(result["content"][0]["text"])

    def ready_pids(self, name: str) -> list[int]:
        """Every pid the front logged as tenant ``name``'s ready worker, in order."""
        pattern = rf"^tenant {re.escape(name)}: worker ready \(pid (\d+)\)$"
        return [int(m) for m in re.findall(pattern, self.log_text(), re.MULTILINE)]

    def pid(self, name: str) -> int:
        return self.ready_pids(name)[-1]


def _launch(
    tenants_file: Path, log: Path, *listen: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A tenants' front on ``listen`` (``--http HOST:PORT`` or ``--unix PATH`` and any
    other options), its log written as the operator's text to ``log``: these tests read
    the front's log as a person would."""
    with log.open("wb") as errlog:
        return subprocess.Popen(
            [*SERVER, "--tenants", str(tenants_file), *listen, "--log-format", "text"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env(env),
        )


def _wait(condition: Any, seconds: float = 60) -> None:
    """Wait (polling) for ``condition()``; fail after ``seconds``: a guard, never a timing."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def front(tmp: Path, env: dict[str, str] | None = None, *extra: str) -> Iterator[Front]:
    a, b = tmp / "tenant-a", tmp / "tenant-b"
    (tmp / "tenant-a-ro").mkdir()
    a.mkdir()
    b.mkdir()
    (a / "a.txt").write_text("A's own file\n")
    (tmp / "tenant-a-ro" / "kept.txt").write_text("kept\n")
    (a / "key.secret").write_text("hidden from A\n")
    (b / "b.txt").write_bytes(CANARY)
    tenants_file = tmp / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {
                "name": "a",
                "token_sha256": hash_token(TOKEN_A),
                "directories": [str(a), f"{tmp / 'tenant-a-ro'}:ro"],
                "hide": ["*.secret"],
            },
            {
                "name": "b",
                "token_sha256": hash_token(TOKEN_B),
                "directories": [str(b)],
                "audit_log": str(tmp / "b-audit.jsonl"),
            },
            {"name": "c", "token_sha256": hash_token(TOKEN_C), "workspaces": str(tmp / "ws-c")},
        )
    )
    port = free_port()
    log = tmp / "front.log"
    process = _launch(tenants_file, log, "--http", f"127.0.0.1:{port}", *extra, env=env)
    try:
        wait_healthy(port, process, log)
        f = Front(process, port, log, tenants_file, a, b)
        _wait(lambda: "starts in a row" in f.log_text() or all(f.ready_pids(n) for n in "abc"))
        assert "starts in a row" not in f.log_text(), f.log_text()
        yield f
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    with front(tmp_path_factory.mktemp("tenants")) as f:
        yield f


def _refused(front: Front, token: str, tool: str, **arguments: Any) -> str:
    """A call that must fail: its error code (and never B's content in the answer)."""
    status, data = front.call(token, tool, **arguments)
    assert CANARY.strip() not in data and b"CANARY" not in data
    assert status == 200, (status, data)
    result = json.loads(data)["result"]
    assert result["isError"], result
    return str(result["structuredContent"]["error"]["code"])


def test_a_token_reaches_only_its_own_tenant(shared: Front) -> None:
    f = shared
    assert f.text(TOKEN_A, "read_text_file", path=str(f.a / "a.txt")) == "A's own file\n"
    assert f.text(TOKEN_B, "read_text_file", path=str(f.b / "b.txt")) == CANARY.decode()
    # B's file by its absolute path, by '..' from A's directory, relative too.
    assert _refused(f, TOKEN_A, "read_text_file", path=str(f.b / "b.txt")) == "EACCES"
    assert _refused(f, TOKEN_A, "read_text_file", path=f"{f.a}/../tenant-b/b.txt") == "EACCES"
    assert _refused(f, TOKEN_A, "read_text_file", path="../tenant-b/b.txt") == "EACCES"
    assert _refused(f, TOKEN_A, "list_directory", path=str(f.b)) == "EACCES"
    assert _refused(f, TOKEN_A, "write_file", path=str(f.b / "new.txt"), content="x") == "EACCES"
    # Symlinks planted in A's tree (as a local process of A's could): absolute and relative.
    (f.a / "to-b").symlink_to(f.b)
    (f.a / "to-b-rel").symlink_to("../tenant-b")
    (f.a / "b-file").symlink_to(f.b / "b.txt")
    for path in ("to-b/b.txt", "to-b-rel/b.txt", "b-file"):
        _refused(f, TOKEN_A, "read_text_file", path=str(f.a / path))
        # A link leading out is described as a link, with nothing of its target.
        info = f.result(TOKEN_A, "get_file_info", path=str(f.a / path))
        assert "tenant-b" not in json.dumps(info) and info["structuredContent"].get("size") is None
    _refused(f, TOKEN_A, "copy_file", source=str(f.a / "b-file"), destination=str(f.a / "c"))
    listing = f.result(TOKEN_A, "directory_tree", path=str(f.a))
    assert "CANARY" not in json.dumps(listing)
    assert not (f.a / "c").exists() and not (f.b / "new.txt").exists()
    # And B's token never reaches A's files either.
    assert _refused(f, TOKEN_B, "read_text_file", path=str(f.a / "a.txt")) == "EACCES"


def test_the_tenants_policy_reaches_its_worker(shared: Front) -> None:
    """hide = [...] and a DIR:ro directory, from the tenants file, in A's worker."""
    f = shared
    assert _refused(f, TOKEN_A, "read_text_file", path=str(f.a / "key.secret")) == "ENOENT"
    listing = f.text(TOKEN_A, "list_directory", path=str(f.a))
    assert "a.txt" in listing and "key.secret" not in listing
    assert _refused(f, TOKEN_A, "write_file", path=f"{f.a}-ro/new", content="x") == "EROFS"
    assert not Path(f"{f.a}-ro/new").exists()
    f.text(TOKEN_A, "write_file", path=str(f.a / "written.txt"), content="ok")
    assert (f.a / "written.txt").read_text() == "ok"
    cmdline = Path(f"/proc/{f.pid('a')}/cmdline").read_bytes().split(b"\0")
    assert b"--hide" in cmdline and f"{f.a}-ro:ro".encode() in cmdline


def test_a_tenants_own_audit_log(shared: Front) -> None:
    f = shared
    f.text(TOKEN_B, "get_file_info", path=str(f.b / "b.txt"))
    (f.a / "only-a.txt").write_text("a\n")
    f.text(TOKEN_A, "get_file_info", path=str(f.a / "only-a.txt"))
    lines = [json.loads(line) for line in (f.a.parent / "b-audit.jsonl").read_text().splitlines()]
    assert {"path": str(f.b / "b.txt")} in [line["paths"] for line in lines]
    assert {"path": str(f.a / "only-a.txt")} not in [line["paths"] for line in lines]
    # a's audit lines reach the front's stderr (JSON, with their tenant); b's go to its file.
    relayed = r'^\{"time": "[^"]*", "log": "audit", "tenant": "%s", .*"tool": "get_file_info"'
    assert re.search(relayed % "a", f.log_text(), re.M)
    assert not re.search(relayed % "b", f.log_text(), re.M)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {TOKEN_A}"},
        {"Authorization": f"Bearer {TOKEN_A}x"},
        {"Authorization": f"Bearer {hash_token(TOKEN_A)}"},  # the stored hash is no token
    ],
)
def test_a_wrong_or_missing_token_gets_401(shared: Front, headers: dict[str, str]) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    status, _, data = shared.post(None, body, {**HEADERS, **headers})
    assert status == 401 and b"tools" not in data


def test_host_and_origin_are_checked_by_the_front(shared: Front) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    status, _, refused = shared.post(TOKEN_A, body, {**HEADERS, "Host": "evil.com"})
    assert status == 421 and b"Host evil.com;" in refused  # named, with the option
    assert refused.endswith(b"start it with --allowed-host evil.com\n")
    origin = {**HEADERS, "Origin": "http://127.0.0.1:1.evil.com"}
    assert shared.post(TOKEN_A, body, origin)[0] == 403
    assert shared.post(TOKEN_A, body, {**HEADERS, "Origin": "http://localhost:3000"})[0] == 200


def test_an_sse_stream_is_relayed(shared: Front) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()
    stream = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    status, content_type, data = shared.post(TOKEN_A, body, stream)
    assert status == 200 and content_type == "text/event-stream"
    event = json.loads(data.split(b"data: ", 1)[1].split(b"\r\n", 1)[0])
    assert event["id"] == 7 and len(event["result"]["tools"]) >= 18


def test_the_sdk_client_through_the_front(shared: Front) -> None:
    async def main() -> None:
        for era in ("2025", "2026"):
            async with http_client(f"http://127.0.0.1:{shared.port}/mcp", era, TOKEN_B) as c:  # type: ignore[arg-type]
                await c.list_tools()
                result = await c.call_tool("read_text_file", {"path": str(shared.b / "b.txt")})
                assert result.content[0].text == CANARY.decode()  # type: ignore[union-attr]

    run(main)


def test_a_tenants_workspaces_through_the_front(shared: Front) -> None:
    """workspaces = BASE: the session id headers pass through the front both ways."""
    base = shared.a.parent / "ws-c"

    async def main() -> None:
        url = f"http://127.0.0.1:{shared.port}/mcp"
        async with http_client(url, "2025", TOKEN_C) as client:  # Mcp-Session-Id
            await client.list_tools()
            await client.call_tool("write_file", {"path": "note.txt", "content": "C's note"})
            result = await client.call_tool("read_text_file", {"path": "note.txt"})
            assert result.content[0].text == "C's note"  # type: ignore[union-attr]

    run(main)
    (note,) = base.glob("sessions/*/note.txt")
    assert note.read_text() == "C's note"
    assert _refused(shared, TOKEN_A, "read_text_file", path=str(note)) == "EACCES"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "read_text_file", "arguments": {"path": "note.txt"}},
        }
    ).encode()
    named = {**HEADERS, "Sandboxfs-Workspace-Id": note.parent.name}
    status, _, data = shared.post(TOKEN_C, body, named)
    assert status == 200 and json.loads(data)["result"]["content"][0]["text"] == "C's note"


@pytest.mark.parametrize(
    "attempts", [300, pytest.param(5000, marks=pytest.mark.slow)], ids=["short", "long"]
)
def test_a_race_in_as_tree_never_reaches_b(shared: Front, attempts: int) -> None:
    """An attacker keeps exchanging A's directory ``d`` with a symlink to B's directory
    while A's client reads through ``d``: never B's content, and the attack was met."""
    f = shared
    root = f.a / f"race-{attempts}"
    root.mkdir()
    prepare("exchange-dir", root, f.b, CANARY)  # B's directory holds canary.txt now
    counts: Counter[str] = Counter()
    process = AttackerProcess("exchange-dir", root, f.b)
    try:
        for i in range(attempts):
            path = str(root / "d" / ("f" if i % 2 else "canary.txt"))
            status, data = f.call(TOKEN_A, "read_text_file", path=path)
            assert b"CANARY" not in data, data
            assert status == 200
            result = json.loads(data)["result"]
            if result.get("isError"):
                counts[result["structuredContent"]["error"]["code"]] += 1
            else:
                assert result["content"][0]["text"] == "inside\n"
                counts["served"] += 1
        tally = process.stop()
    finally:
        process.kill()
    assert tally.swaps > 0, tally
    assert counts["served"] > 0, counts  # reads of d/f went through when d was A's
    # d/canary.txt is absent in A's d, and outside when d was the symlink to B's.
    assert counts["ENOENT"] + counts["EACCES"] + counts["EXDEV"] > 0, counts


def _fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return targets


def test_the_front_holds_no_tenant_directory(shared: Front) -> None:
    f = shared
    front_fds = _fd_targets(f.process.pid)
    assert front_fds  # it was inspected
    assert not [t for t in front_fds if t.startswith((str(f.a), str(f.b)))], front_fds
    # The method sees descriptors where they are: each worker holds its own directory,
    # and never the other tenant's.
    a_fds, b_fds = _fd_targets(f.pid("a")), _fd_targets(f.pid("b"))
    assert str(f.a) in a_fds and not [t for t in a_fds if t.startswith(str(f.b))]
    assert str(f.b) in b_fds and not [t for t in b_fds if t.startswith(str(f.a))]


def test_each_worker_is_landlocked_over_its_own_directories(shared: Front) -> None:
    """What this shows: each worker runs as its own process whose command line names
    only its tenant's directories, and it logged Landlock as enforced (its normal
    startup confines it to the directories of its command line)."""
    f = shared
    for name, own, other in (("a", f.a, f.b), ("b", f.b, f.a)):
        pid = f.pid(name)
        assert pid != f.process.pid
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        directories = cmdline[cmdline.index(b"--", cmdline.index(b"--unix")) + 1 :]
        assert directories and all(d.startswith(str(own).encode()) for d in directories if d)
        assert not any(str(other).encode() in part for part in cmdline)
        landlock = re.findall(rf"^tenant {name}: Landlock ABI \d+: (.*)$", f.log_text(), re.M)
        assert landlock and "beneath the allowed directories" in landlock[0]
    assert "WARNING: Landlock" not in f.log_text()


def test_a_front_on_a_unix_socket(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    tenants_file = tmp_path / "t.toml"
    tenants_file.write_text(
        tenants_toml(
            {"name": "u", "token_sha256": hash_token(TOKEN_A), "directories": [str(tmp_path / "d")]}
        )
    )
    path = str(tmp_path / "front.sock")
    log = tmp_path / "front.log"
    process = _launch(tenants_file, log, "--unix", path)
    try:
        _wait(lambda: "tenant u: worker ready" in log.read_text() or process.poll() is not None)
        assert process.poll() is None, log.read_text()
        assert os.stat(path).st_mode & 0o777 == 0o600
        post = [("Content-Type", "application/json"), ("Accept", "application/json")]
        assert unix_request(path, "POST", "/mcp", post) == 401
        authorized = [*post, ("Authorization", f"Bearer {TOKEN_A}")]
        # No body: the worker answers 400 (it was reached: the front forwarded it).
        assert unix_request(path, "POST", "/mcp", authorized) == 400
        assert unix_request(path, "GET", "/healthz") == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_a_worker_that_cannot_start_is_given_up_until_a_reload_adds_tenants(
    tmp_path: Path,
) -> None:
    """Tenant z names a directory that does not exist: its worker fails its starts, is
    given up (502), and the other tenant is served; after SIGHUP (z's directory made,
    tenant y added) both are served."""
    good, missing, added = tmp_path / "good", tmp_path / "missing", tmp_path / "added"
    good.mkdir()
    added.mkdir()
    (added / "y.txt").write_text("y\n")
    entries = [
        {"name": "a", "token_sha256": hash_token(TOKEN_A), "directories": [str(good)]},
        {"name": "z", "token_sha256": hash_token(TOKEN_B), "directories": [str(missing)]},
    ]
    tenants_file = tmp_path / "t.toml"
    tenants_file.write_text(tenants_toml(*entries))
    port = free_port()
    log = tmp_path / "front.log"
    process = _launch(tenants_file, log, "--http", f"127.0.0.1:{port}")
    try:
        wait_healthy(port, process, log)
        f = Front(process, port, log, tenants_file, good, missing)
        _wait(lambda: "tenant z: worker failed 5 starts in a row" in f.log_text())
        assert "tenant z: sandboxfs: error: allowed directory" in f.log_text()
        status, data = f.call(TOKEN_B, "list_directory", path=str(missing))
        assert status == 502 and json.loads(data)["error"]["code"] == -32603
        assert readyz(port) == (  # not everything configured is served: not ready
            503,
            b"not ready: 1 of 2 tenants not served (1 given up after failed starts)\n",
        )
        (good / "g.txt").write_text("g\n")
        assert f.text(TOKEN_A, "read_text_file", path=str(good / "g.txt")) == "g\n"
        missing.mkdir()
        (missing / "z.txt").write_text("z\n")
        token_y = "tenant-y-token-0123456789"
        entries.append(
            {"name": "y", "token_sha256": hash_token(token_y), "directories": [str(added)]}
        )
        tenants_file.write_text(tenants_toml(*entries))
        process.send_signal(signal.SIGHUP)
        _wait(lambda: f.ready_pids("z") and f.ready_pids("y"))
        assert f.text(TOKEN_B, "read_text_file", path=str(missing / "z.txt")) == "z\n"
        assert f.text(token_y, "read_text_file", path=str(added / "y.txt")) == "y\n"
        assert readyz(port) == (200, b"ready\n")  # every tenant is served again
        assert _refused(f, token_y, "read_text_file", path=str(missing / "z.txt")) == "EACCES"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def readyz(port: int) -> tuple[int, bytes]:
    """The front's /readyz: its status and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/readyz")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_front_caps_bodies_and_refuses_ambiguous_framing(tmp_path: Path) -> None:
    """The front's own cap (its workers keep theirs, 16 MiB): a declared and a chunked
    body over it get 413 from the front; Content-Length with Transfer-Encoding gets 400."""
    with front(tmp_path, None, "--max-line-bytes", "1000") as f:
        payload = "x" * 2000
        status, _ = f.call(TOKEN_A, "write_file", path=str(f.a / "big"), content=payload)
        assert status == 413
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "write_file",
                    "arguments": {"path": str(f.a / "big"), "content": payload},
                },
            }
        ).encode()
        connection = http.client.HTTPConnection("127.0.0.1", f.port, timeout=60)
        headers = {**HEADERS, "Authorization": f"Bearer {TOKEN_A}"}
        connection.request(
            "POST",
            "/mcp",
            body=iter([body[:500], body[500:]]),
            headers=headers,
            encode_chunked=True,
        )
        assert connection.getresponse().status == 413
        connection.close()
        assert not (f.a / "big").exists()
        with socket.create_connection(("127.0.0.1", f.port), timeout=60) as raw:
            raw.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nAccept: application/json\r\n"
                b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                % (f.port, TOKEN_A.encode())
            )
            answer = raw.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400"), answer
        small = f.text(TOKEN_A, "write_file", path=str(f.a / "small"), content="ok")
        assert "Successfully" in small


def test_a_killed_worker_is_restarted_and_others_are_served(tmp_path: Path) -> None:
    with front(tmp_path, {"SANDBOXFS_TEST_STALL": "60:slow"}) as f:
        (f.a / "slow").write_text("slow\n")
        old = f.pid("a")
        in_flight: list[tuple[int, bytes]] = []
        caller = threading.Thread(
            target=lambda: in_flight.append(f.call(TOKEN_A, "read_text_file", path="slow"))
        )
        caller.start()
        _wait(lambda: "tenant a: TEST MODE: stalling a step" in f.log_text())
        os.kill(old, signal.SIGKILL)
        caller.join(timeout=60)
        assert in_flight and in_flight[0][0] == 502, in_flight
        assert json.loads(in_flight[0][1])["error"]["code"] == -32603
        served = 0
        deadline = time.monotonic() + 60  # a guard, not a timing
        while len(f.ready_pids("a")) < 2:  # B is served while A's worker comes back
            assert f.text(TOKEN_B, "read_text_file", path=str(f.b / "b.txt")) == CANARY.decode()
            served += 1
            assert time.monotonic() < deadline
        assert served > 0
        assert f.pid("a") != old and not _alive(old)
        assert f.text(TOKEN_A, "read_text_file", path=str(f.a / "a.txt")) == "A's own file\n"
        assert f.text(TOKEN_B, "read_text_file", path=str(f.b / "b.txt")) == CANARY.decode()


def test_sighup_changes_a_token_and_keeps_the_other_tenants_session(tmp_path: Path) -> None:
    new_token = "tenant-a-new-token-987654321"
    with front(tmp_path) as f:
        pids = f.pid("a"), f.pid("b")

        async def main() -> None:
            url = f"http://127.0.0.1:{f.port}/mcp"
            async with http_client(url, "2026", TOKEN_B) as b_client:
                await b_client.list_tools()
                text = f.tenants_file.read_text().replace(
                    hash_token(TOKEN_A), hash_token(new_token)
                )
                f.tenants_file.write_text(text)
                f.process.send_signal(signal.SIGHUP)
                await wait_for(lambda: "SIGHUP: re-read" in f.log_text())
                result = await b_client.call_tool("read_text_file", {"path": str(f.b / "b.txt")})
                assert result.content[0].text == CANARY.decode()  # type: ignore[union-attr]

        run(main)
        assert f.text(new_token, "read_text_file", path=str(f.a / "a.txt")) == "A's own file\n"
        assert f.call(TOKEN_A, "read_text_file", path=str(f.a / "a.txt"))[0] == 401
        assert (f.pid("a"), f.pid("b")) == pids  # a token change keeps the workers

        # A malformed file on reload: the old configuration stays, the error is logged.
        f.tenants_file.write_text(text_with_unknown_key(f.tenants_file.read_text()))
        f.process.send_signal(signal.SIGHUP)
        _wait(lambda: "keeping the tenants as they were" in f.log_text())
        assert "unknown key 'colour'" in f.log_text()
        assert f.text(new_token, "read_text_file", path=str(f.a / "a.txt")) == "A's own file\n"
        assert f.text(TOKEN_B, "read_text_file", path=str(f.b / "b.txt")) == CANARY.decode()

        # Removing B stops B's worker; its token is refused.
        good = f.tenants_file.read_text().replace('\ncolour = "red"', "")
        f.tenants_file.write_text(good.split('[[tenant]]\nname = "b"')[0])
        f.process.send_signal(signal.SIGHUP)
        _wait(lambda: not _alive(pids[1]))
        assert f.call(TOKEN_B, "read_text_file", path=str(f.b / "b.txt"))[0] == 401
        assert f.pid("a") == pids[0]


def text_with_unknown_key(text: str) -> str:
    return text.replace('name = "a"', 'name = "a"\ncolour = "red"', 1)


def test_sigterm_stops_the_front_and_every_worker(tmp_path: Path) -> None:
    with front(tmp_path) as f:
        pids = f.pid("a"), f.pid("b")
        rundir = re.search(r"workers' sockets in (\S+)", f.log_text())
        assert rundir is not None and os.stat(rundir[1]).st_mode & 0o777 == 0o700
        f.process.send_signal(signal.SIGTERM)
        assert f.process.wait(timeout=60) == 0
    assert not any(_alive(pid) for pid in pids)
    assert not os.path.exists(rundir[1])


def test_a_killed_front_takes_its_workers_along(tmp_path: Path) -> None:
    with front(tmp_path) as f:
        pids = f.pid("a"), f.pid("b")
        rundir = re.search(r"workers' sockets in (\S+)", f.log_text())
        assert rundir is not None
        f.process.kill()
        f.process.wait()
        _wait(lambda: not any(_alive(pid) for pid in pids))
    # A killed front cannot remove its socket directory: that is left to the operator.
    for name in os.listdir(rundir[1]):
        os.unlink(os.path.join(rundir[1], name))
    os.rmdir(rundir[1])


def test_the_front_confines_itself_to_no_tcp(shared: Front) -> None:
    """The front applied its own Landlock (network and scopes, not the filesystem, which
    its workers inherit); here, in a child, the same call is seen to refuse TCP."""
    assert re.search(r"^front: Landlock ABI \d+: no TCP bind or connect", shared.log_text(), re.M)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        pid = os.fork()
        if pid == 0:  # the child: confine, then try TCP and a file
            code = 1
            try:
                assert landlock.confine_network().enforced
                Path("/proc/self/status").read_text()  # the filesystem is untouched
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                except PermissionError:
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_hash_token_matches_sha256sum() -> None:
    done = subprocess.run(
        [*SERVER, "hash-token"], input=f"{TOKEN_A}\n".encode(), capture_output=True, check=True
    )
    assert done.stdout.decode().strip() == hashlib.sha256(TOKEN_A.encode()).hexdigest()
    assert hash_token(f" {TOKEN_A}\n") == hashlib.sha256(TOKEN_A.encode()).hexdigest()
    empty = subprocess.run([*SERVER, "hash-token"], input=b"\n", capture_output=True)
    assert empty.returncode == 1 and b"no token" in empty.stderr


GOOD = {"name": "a", "token_sha256": "0" * 64, "directories": ["/srv/a"]}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"tenant": [{**GOOD, "colour": "red"}]}, "unknown key 'colour'"),
        ({"tenant": [GOOD], "tenants": []}, "unknown key 'tenants'"),
        ({"tenant": [GOOD, {**GOOD, "name": "b"}]}, "same token_sha256 as tenant 'a'"),
        ({"tenant": [GOOD, {**GOOD, "token_sha256": "1" * 64}]}, "'a' appears twice"),
        ({"tenant": [{**GOOD, "directories": []}]}, "no 'directories'"),
        ({"tenant": [{**GOOD, "workspaces": ""}]}, "'workspaces' must be a non-empty string"),
        ({"tenant": [{k: v for k, v in GOOD.items() if k != "directories"}]}, "no 'directories'"),
        ({"tenant": [{**GOOD, "token_sha256": "abc"}]}, "'token_sha256' must be 64 hex digits"),
        ({"tenant": [{**GOOD, "token_sha256": "g" * 64}]}, "'token_sha256' must be 64 hex"),
        ({"tenant": [{**GOOD, "name": "../x"}]}, "'name' must be"),
        ({"tenant": [{**GOOD, "directories": "/srv/a"}]}, "'directories' must be a list"),
        ({"tenant": [{**GOOD, "read_only": "yes"}]}, "'read_only' must be true or false"),
        (
            {
                "tenant": [
                    {**GOOD, "journal": "/var/j"},
                    {**GOOD, "name": "b", "token_sha256": "1" * 64, "journal": "/var/j/"},
                ]
            },
            "same journal as tenant 'a'",
        ),
        ({}, "no [[tenant]] table"),
    ],
)
def test_a_malformed_tenants_file_is_refused(document: dict[str, Any], problem: str) -> None:
    with pytest.raises(TenantsError) as raised:
        parse_tenants(document, "t.toml")
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_a_tenants_entry_becomes_the_workers_options(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        tenants_toml(
            {
                **GOOD,
                "directories": ["/srv/a", "/srv/b:ro"],
                "hide": ["*.pem"],
                "protect": [".git"],
                "preset": "secrets",
                "policy": "/etc/p.toml",
                "workspaces": "/srv/ws",
                "read_only": True,
                "audit_log": "/var/log/a.jsonl",
                "journal": "/var/lib/j/a",
                "ask": ["*.cfg"],
            }
        )
    )
    tenant = load_tenants(str(path)).by_name["a"]
    assert tenant.options() == [
        "--read-only",
        *("--hide", "*.pem", "--protect", ".git", "--preset", "secrets"),
        *("--policy", "/etc/p.toml", "--workspaces", "/srv/ws", "--audit-log", "/var/log/a.jsonl"),
        *("--journal", "/var/lib/j/a", "--ask", "*.cfg"),
        *("--", "/srv/a", "/srv/b:ro"),
    ]
    assert load_tenants(str(path)).authenticate("") is None


def test_the_readmes_tenants_file_loads() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Tenants\n", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    tenants = parse_tenants(tomllib.loads(block), "README.md")
    assert sorted(tenants.by_name) == ["alice", "bob"]
    assert tenants.by_name["alice"].options()[-3:] == ["--", "/srv/alice", "/srv/shared:ro"]
    assert tenants.by_name["bob"].read_only


def test_the_command_line_of_tenants(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(tenants_toml({**GOOD, "token_sha256": "xyz"}))
    port = str(free_port())
    cases = [
        (["--tenants", str(bad), "--http", f"127.0.0.1:{port}"], 2, "64 hex digits"),
        (["--tenants", str(tmp_path / "none.toml"), "--unix", str(tmp_path / "s")], 1, "cannot"),
        (["--tenants", str(bad)], 2, "--tenants needs --http"),
        (["--tenants", str(bad), "--http", ":0", str(tmp_path)], 2, "replaces command-line"),
        (["--tenants", str(bad), "--http", ":0", "--read-only"], 2, "--read-only cannot"),
        (["--tenants", str(bad), "--http", ":0", "--hide", "x"], 2, "--hide cannot"),
        (["--tenants", str(bad), "--http", ":0", "--audit-log", "off"], 2, "--audit-log cannot"),
    ]
    for args, status, message in cases:
        done = subprocess.run([*SERVER, *args], capture_output=True, env=server_env(), timeout=60)
        assert done.returncode == status, (args, done.stderr)
        assert message in done.stderr.decode(), (args, done.stderr)
        assert done.stderr.decode().startswith("sandboxfs: error:")


def test_a_roots_trick_through_the_front_does_not_reach_b(shared: Front) -> None:
    """A 2025-era client of tenant A offers B's directory and / as its Roots and says
    they changed: HTTP never takes client Roots (the worker never even asks), and B's
    files stay out of A's reach."""
    roots = Roots(paths=[str(shared.b), "/"])

    async def main() -> None:
        headers = {"Authorization": f"Bearer {TOKEN_A}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as transport:
            client = Client(
                streamable_http_client(
                    f"http://127.0.0.1:{shared.port}/mcp", http_client=transport
                ),
                mode="legacy",
                cache=None,
                list_roots_callback=roots.answer,
            )
            async with client:
                await client.session.send_notification(types.RootsListChangedNotification())
                for path in (str(shared.b / "b.txt"), "b.txt"):
                    result = await client.call_tool("read_text_file", {"path": path})
                    assert result.is_error and CANARY.decode() not in str(result.content)
                listed = await client.call_tool("list_allowed_directories", {})
                assert str(shared.b) not in str(listed.content)

    run(main)
    assert roots.asked == 0


def test_each_tenant_has_its_own_journal(tmp_path: Path) -> None:
    """A tenant's changes are recorded in its journal alone, by its own worker; the
    front opens none of them."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    tenants_file = tmp_path / "tenants.toml"
    tenants_file.write_text(
        tenants_toml(
            {
                "name": "a",
                "token_sha256": hash_token(TOKEN_A),
                "directories": [str(a)],
                "journal": str(tmp_path / "journal-a"),
            },
            {
                "name": "b",
                "token_sha256": hash_token(TOKEN_B),
                "directories": [str(b)],
                "journal": str(tmp_path / "journal-b"),
            },
        )
    )
    port = free_port()
    log = tmp_path / "front.log"
    process = _launch(tenants_file, log, "--http", f"127.0.0.1:{port}")
    try:
        wait_healthy(port, process, log)
        f = Front(process, port, log, tenants_file, a, b)
        _wait(lambda: all(f.ready_pids(n) for n in "ab"))
        status, data = f.call(TOKEN_A, "write_file", path="a.txt", content="by a\n")
        assert status == 200 and b'"result"' in data, (data, f.log_text())
        status, data = f.call(TOKEN_A, "list_changes")
        assert b'"result"' in data, (data, f.log_text())
        assert "a.txt" in f.text(TOKEN_A, "list_changes")
        assert f.text(TOKEN_B, "list_changes") == "No changes recorded."
        status, data = f.call(TOKEN_A, "undo_changes")
        assert b'"result"' in data, (data, f.log_text())
        assert not (a / "a.txt").exists()
        assert len(os.listdir(tmp_path / "journal-a" / "entries")) == 2
        assert os.listdir(tmp_path / "journal-b" / "entries") == []
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

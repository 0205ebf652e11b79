"""--workers N: N server processes behind one listener, each a whole confined server.

* Each replica is a forked copy of the confined server (seccomp filter, no new
  privileges, Landlock inherited), in a process group of its own.
* They share nothing but the filesystem: any replica serves any request, and with
  --workspaces a 2025-era Mcp-Session-Id issued by one is honoured by another (the
  signing key is drawn before the fork).  Which replica answers is made certain by
  stopping the other one (SIGSTOP), never by chance.
* Conditional writes from many clients of one multi-process server lose no update.
* SIGTERM stops them all (status 0, one "stopped" line), Ctrl-C too (status 130,
  one line), and a replica whose parent is killed stops on its own.
* /metrics shows the whole server: whichever replica answers a scrape sums every
  replica's counts (a replica that does not answer is left out after a bounded wait,
  and the answer says how many were read).
* Their log lines are written whole, one at a time: lines longer than a pipe's
  atomic write, from both replicas at once, each parse as one JSON line.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import TOKEN, Sidecar, free_port, wait_healthy
from test_scale_out import (
    CLIENTS,
    INITIALIZE,
    LEGACY,
    UPDATES,
    _client,
    _modern,
    _ok,
    _send,
    _tool,
)

from mcp_client import SERVER, said, server_env, wait_for

parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is needed")

INTERRUPTED = "sandboxfs: interrupted"


@contextmanager
def workers(*args: str, tmp: Path, count: int = 2, stderr: int | None = None) -> Iterator[Sidecar]:
    port = free_port()
    log = tmp / f"workers-{port}.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*SERVER, "--http", f"127.0.0.1:{port}", "--workers", str(count), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog if stderr is None else stderr,
            env=server_env({"SANDBOXFS_TOKEN": TOKEN}),
        )
    try:
        wait_healthy(port, process, log)
        yield Sidecar(process, port, log)
    finally:
        for pid in replicas_of(process.pid):
            _signal(pid, signal.SIGCONT)  # a test may leave one stopped
        if process.poll() is None:
            process.kill()
        process.wait()


def replicas_of(parent: int) -> list[int]:
    """The server's replicas: its children that run its own command line (the parse
    supervisors are other programs)."""
    try:
        own = Path(f"/proc/{parent}/cmdline").read_bytes()
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return []
    found = []
    for child in map(int, children):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == own:
                found.append(child)
        except OSError:
            continue
    return found


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _signal(pid: int, signum: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        return _status(pid)["State"][0] not in "ZX"
    except (OSError, KeyError):
        return False


def test_each_worker_is_a_confined_server_in_a_group_of_its_own(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with workers(str(served), tmp=tmp_path, count=3) as server:
        found = replicas_of(server.process.pid)
        assert len(found) == 3, found
        for pid in found:
            status = _status(pid)
            assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", status
            assert os.getpgid(pid) == pid  # a terminal's Ctrl-C reaches only the parent
        # A worker may answer /healthz before the parent has heard from the others.
        trio.run(wait_for, lambda: "sandboxfs serving MCP on " in server.log.read_text())
        log = server.log.read_text()
        assert "3 server processes" in log
        assert log.count("sandboxfs serving MCP on ") == 1


def test_a_workspace_session_issued_by_one_worker_is_served_by_another(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    with workers("--workspaces", str(base), tmp=tmp_path) as server:
        first, second = replicas_of(server.process.pid)
        os.kill(second, signal.SIGSTOP)  # only the first accepts now
        status, session, _ = _send(server, INITIALIZE, {})
        assert status == 200 and session is not None
        legacy = {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}
        status, _, answer = _send(
            server, _tool("write_file", {"path": "a.txt", "content": "1\n"}), legacy
        )
        assert status == 200, answer
        _ok(answer)
        os.kill(second, signal.SIGCONT)
        os.kill(first, signal.SIGSTOP)  # and now only the second
        status, _, answer = _send(server, _tool("read_text_file", {"path": "a.txt"}), legacy)
        assert status == 200, answer
        assert _ok(answer)["structuredContent"]["content"] == "1\n"
        os.kill(first, signal.SIGCONT)


def test_conditional_writes_from_many_clients_of_the_workers_lose_no_update(
    tmp_path: Path,
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    target = served / "log.txt"
    target.write_text("")
    conflicts = [0]
    with workers(str(served), tmp=tmp_path) as server:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                for i in range(CLIENTS):
                    era = "2026" if i % 2 else "2025"
                    nursery.start_soon(_client, server.url, era, f"c{i}", conflicts, 0)

        trio.run(main)
    lines = target.read_text().splitlines()
    wanted = [f"c{i}-{n}" for i in range(CLIENTS) for n in range(UPDATES)]
    assert sorted(lines) == sorted(wanted), f"{len(set(wanted) - set(lines))} updates lost"
    assert conflicts[0] > 0  # the clients did race


def _stop(server: Sidecar, signum: signal.Signals) -> tuple[int, list[str]]:
    """Signal the parent; its exit status and the log lines written after the signal."""
    before = len(server.log.read_text().splitlines())
    found = replicas_of(server.process.pid)
    server.process.send_signal(signum)
    code = server.process.wait(timeout=60)
    assert not any(_alive(pid) for pid in found)
    return code, [said(line) for line in server.log.read_text().splitlines()[before:]]


def test_sigterm_stops_every_worker_with_one_line(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with workers(str(served), tmp=tmp_path) as server:
        code, lines = _stop(server, signal.SIGTERM)
    assert code == 0, lines
    assert lines.count("sandboxfs stopped") == 1 and not any("Traceback" in x for x in lines)


def test_ctrl_c_stops_every_worker_with_one_line(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with workers(str(served), tmp=tmp_path) as server:
        code, lines = _stop(server, signal.SIGINT)
    assert code == 130, lines
    assert lines == [INTERRUPTED]


def test_workers_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    with workers(str(served), tmp=tmp_path) as server:
        found = replicas_of(server.process.pid)
        assert len(found) == 2
        server.process.kill()
        server.process.wait()

        async def gone() -> None:
            await wait_for(lambda: not any(_alive(pid) for pid in found))

        trio.run(gone)


def _get(connection: http.client.HTTPConnection, path: str) -> tuple[int, str]:
    connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
    response = connection.getresponse()
    return response.status, response.read().decode()


def _calls(text: str, tool: str) -> tuple[float, float]:
    """A scrape's count of ``tool``'s successful calls, and how many processes it sums."""
    found = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    calls = found[("sandboxfs_tool_calls_total", (("outcome", "ok"), ("tool", tool)))]
    return calls, found[("sandboxfs_workers_read", ())]


@contextmanager
def _only(server: Sidecar, serving: int, stopped: int) -> Iterator[http.client.HTTPConnection]:
    """A keep-alive connection accepted by the replica ``serving`` (the other one is
    stopped until the connection has been answered once), for the body to use with
    both replicas running."""
    os.kill(stopped, signal.SIGSTOP)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        assert _get(connection, "/healthz")[0] == 200  # accepted, by `serving` alone
    finally:
        os.kill(stopped, signal.SIGCONT)
    try:
        yield connection
    finally:
        connection.close()


def test_metrics_of_the_workers_count_the_calls_every_worker_answered(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "a.txt").write_text("hello\n")
    with workers(str(served), tmp=tmp_path) as server:
        first, second = replicas_of(server.process.pid)
        answered = {first: 3, second: 2}
        for pid, count in answered.items():
            other = second if pid == first else first
            with _only(server, pid, other) as connection:
                for _ in range(count):
                    connection.request("POST", "/mcp", body=_READ, headers=_HEADERS)
                    response = connection.getresponse()
                    assert response.status == 200
                    _ok(json.loads(response.read()))
        # Scraped through each replica in turn: each answers with both replicas' calls.
        for pid, other in ((first, second), (second, first)):
            with _only(server, pid, other) as connection:
                status, text = _get(connection, "/metrics")
            assert status == 200, text
            assert _calls(text, "read_text_file") == (5, 2)
        # A replica that cannot answer (stopped) is left out after a bounded wait.
        with _only(server, first, second) as connection:
            os.kill(second, signal.SIGSTOP)
            try:
                status, text = _get(connection, "/metrics")
            finally:
                os.kill(second, signal.SIGCONT)
        assert status == 200 and _calls(text, "read_text_file") == (3, 1)


_MESSAGE, _WIRE = _modern("read_text_file", {"path": "a.txt"})
_READ = json.dumps(_MESSAGE).encode()
_HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Content-Type": "application/json",
    "Accept": "application/json",
    **_WIRE,
}


def test_the_workers_log_lines_never_interleave(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    # Each call's audit line is longer than a pipe writes at once (4,096 bytes): two
    # processes writing such lines to one pipe would cut into each other's.
    long_path = "d/" * 2040 + "x.txt"
    calls = 60
    chunks: list[bytes] = []
    with workers(
        "--log-format", "json", str(served), tmp=tmp_path, stderr=subprocess.PIPE
    ) as server:
        assert server.process.stderr is not None
        # One page: a line never fits whole, so a writer must wait for the reader
        # part-way through it, and another process's write could then come between.
        fcntl.fcntl(server.process.stderr.fileno(), _F_SETPIPE_SZ, 4096)
        reader = threading.Thread(target=_drain, args=(server.process.stderr, chunks))
        reader.start()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(calls):
                    nursery.start_soon(_long_call, server, long_path)

        trio.run(main)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
        reader.join(timeout=60)
        server.process.stderr.close()
    lines = b"".join(chunks).decode().splitlines()
    records = [json.loads(line) for line in lines]  # every line whole
    audited = [r for r in records if r["log"] == "audit"]
    assert len(audited) == calls and all(len(json.dumps(r)) > 4096 for r in audited)
    operator = [r["message"] for r in records if r["log"] == "operator"]
    assert operator.count("sandboxfs stopped") == 1, operator  # the parent's, in JSON


_F_SETPIPE_SZ = 1031


def _drain(stream: Any, chunks: list[bytes]) -> None:
    while chunk := stream.read1(1024):  # small reads: the pipe stays nearly full
        chunks.append(chunk)


async def _long_call(server: Sidecar, path: str) -> None:
    message, _ = _modern("read_text_file", {"path": path})
    body = json.dumps(message).encode()
    await trio.to_thread.run_sync(server.request, "POST", "/mcp", body, _HEADERS)


def test_ask_is_served_by_one_process(tmp_path: Path) -> None:
    """A 2025-era client answers --ask's question with a POST of its own, which must
    reach the process whose call waits for it: the default becomes one process, and
    --workers N beside --ask is refused."""
    served = tmp_path / "served"
    served.mkdir()
    port = free_port()
    log = tmp_path / "ask.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*SERVER, "--http", f"127.0.0.1:{port}", "--ask", "*.cfg", str(served)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=server_env({"SANDBOXFS_TOKEN": TOKEN}),
        )
    try:
        wait_healthy(port, process, log)
        assert replicas_of(process.pid) == []  # the process that set up serves itself
        said_lines = [said(line) for line in log.read_text().splitlines()]
        assert any(line.startswith("--ask: served by one process") for line in said_lines)
    finally:
        process.kill()
        process.wait()
    refused = subprocess.run(
        [*SERVER, "--http", "127.0.0.1:0", "--workers", "2", "--ask", "*.cfg", str(served)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=server_env({"SANDBOXFS_TOKEN": TOKEN}),
        timeout=120,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr
    last = refused.stderr.decode().splitlines()[-1]
    assert last.startswith("sandboxfs: error: --workers 2 cannot serve --ask"), last

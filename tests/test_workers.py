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
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import trio
from sidecar_helpers import TOKEN, Sidecar, free_port, wait_healthy
from test_scale_out import CLIENTS, INITIALIZE, LEGACY, UPDATES, _client, _ok, _send, _tool

from mcp_client import SERVER, server_env, wait_for

INTERRUPTED = "sandboxfs: interrupted"


@contextmanager
def workers(*args: str, tmp: Path, count: int = 2) -> Iterator[Sidecar]:
    port = free_port()
    log = tmp / f"workers-{port}.log"
    with log.open("wb") as errlog:
        process = subprocess.Popen(
            [*SERVER, "--http", f"127.0.0.1:{port}", "--workers", str(count), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
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
    return code, server.log.read_text().splitlines()[before:]


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

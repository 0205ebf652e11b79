"""code_map's parse helpers (issue 28): what confines them, what a crash or a kill
costs, and that a planted pathological file stalls no other call.

The helpers are real processes forked by a real supervisor; the confinement is read
from /proc (Seccomp: 2, no directory descriptor, the limits); a crash is the test-only
abort hook (SANDBOXFS_TEST_PARSER_ABORT) or a SIGKILL sent to the helper that is
parsing; the stall is 200,000 open parentheses, which tree-sitter's query takes
tens of seconds over.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_helpers import http_client, sidecar
from test_code_map import POLYGLOT, write

from helpers import Tree
from mcp_client import run, session, wait_for
from sandboxfs.core import landlock
from sandboxfs.tools import parsepool
from sandboxfs.tools.codefacts import Parsed
from sandboxfs.tools.parsepool import ParserPool
from sandboxfs.tools.parserun import ParseRun, Unparsed
from sandboxfs.tools.parsewire import TEST_ABORT_ENV
from unprivileged import nobody_command, nobody_pythonpath

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

#: What makes tree-sitter's query take tens of seconds: 200 kB of open parentheses.
PARENS = b"x=" + b"(" * 200_000
MARKER = "ABORT-THE-PARSER-HERE"


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _limits(pid: int) -> dict[str, str]:
    """/proc/PID/limits: limit name -> soft limit."""
    found = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        match = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _descriptors(pid: int) -> dict[int, tuple[str, int]]:
    """Each open descriptor of ``pid``: what it points to and its file type."""
    found = {}
    for entry in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{entry}"
        found[int(entry)] = (os.readlink(path), stat.S_IFMT(os.stat(path).st_mode))
    return found


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (zombies left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


#: The server under test is the process that serves (not a --workers parent and its
#: replicas, each with a supervisor of its own: tests/test_workers.py).
ONE_PROCESS = ("--workers", "1")


def _supervisor_of(server: int) -> int:
    [supervisor] = [
        pid
        for pid in _children(server)
        if b"parsehelper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return supervisor


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[ParserPool]:
    """A fresh pool whose helpers abort on MARKER."""
    monkeypatch.setenv(TEST_ABORT_ENV, MARKER)
    started = ParserPool.start(cpu_seconds=30)
    try:
        yield started
    finally:
        started.close()


def _assert_no_directory(pid: int, *, helper: bool) -> None:
    for fd, (target, kind) in _descriptors(pid).items():
        assert kind != stat.S_IFDIR, (pid, fd, target)
        if helper or fd != 2:  # the supervisor's stderr is the server's log
            assert not target.startswith("/") or target == "/dev/null", (pid, fd, target)


def _assert_confined(pid: int, *, helper: bool) -> None:
    status = _status(pid)
    assert status["Seccomp"] == "2", status["Seccomp"]
    assert status["NoNewPrivs"] == "1"
    _assert_no_directory(pid, helper=helper)
    limits = _limits(pid)
    assert limits["Max address space"] == str(parsepool.MEMORY_BYTES)
    assert limits["Max core file size"] == "0"
    if helper:
        assert limits["Max cpu time"] == str(30 + parsepool.CPU_GRACE)
        targets = [target for target, _ in _descriptors(pid).values()]
        assert sum(t.startswith("socket:") for t in targets) == 1  # its socket to the server
        assert len(targets) == 4  # and /dev/null as stdin, stdout and stderr


def test_the_supervisor_and_its_helpers_hold_no_directory_and_are_confined(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process that starts the pool holds directories, inheritable ones even, with
    # numbers past what a helper closes on its own: the clean exec must not pass them.
    held = []
    for _ in range(40):
        fd = os.open(tree.root, os.O_RDONLY | os.O_DIRECTORY)
        os.set_inheritable(fd, True)
        held.append(fd)
    try:
        started = ParserPool.start(cpu_seconds=30)
    finally:
        for fd in held:
            os.close(fd)
    try:
        assert started.process is not None
        _assert_no_directory(started.process.pid, helper=False)  # as exec'd, before all else
        deadline = time.monotonic() + 60
        helpers = started.checkout(1, deadline) + started.checkout(1, deadline)
        assert started.process is not None
        _assert_confined(started.process.pid, helper=False)
        for helper in helpers:
            _assert_confined(helper.pid, helper=True)
        assert {h.pid for h in helpers} <= set(_children(started.process.pid))
        started.discard(helpers)
    finally:
        started.close()


def test_landlock_leaves_a_helper_no_filesystem(tree: Tree) -> None:
    """The supervisor's Landlock layer alone (seccomp would stop these calls first)."""
    (tree.root / "f.py").write_text("x = 1\n")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 0
        try:
            status = landlock.confine_nothing()
            code = 3 if not status.enforced else 0
            for attempt in (
                lambda: os.open(tree.root / "f.py", os.O_RDONLY),
                lambda: os.listdir("/"),
                lambda: os.open(tree.root / "new", os.O_CREAT | os.O_WRONLY, 0o600),
            ):
                try:
                    attempt()
                    code = code or 1
                except PermissionError:
                    pass
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 3:
        pytest.skip("the kernel has no Landlock")
    assert os.waitstatus_to_exitcode(status) == 0
    assert not (tree.root / "new").exists()


def _files(count: int) -> list[bytes]:
    return [f"def f{i}(x):\n    return g{i + 1}(x)\n".encode() for i in range(count)]


def test_a_helper_that_aborts_costs_that_one_file(pool: ParserPool) -> None:
    files = _files(6)
    files[3] = f"def crash():\n    '{MARKER}'\n".encode()
    run_ = ParseRun(pool, time.monotonic() + 60)
    outcomes: dict[int, Any] = {}
    for tag, data in enumerate(files):
        outcomes.update(run_.submit(tag, "python", data))
    outcomes.update(run_.finish())
    assert outcomes[3] is Unparsed.FAILED
    for tag in (0, 1, 2, 4, 5):
        parsed = outcomes[tag]
        assert isinstance(parsed, Parsed), (tag, parsed)
        assert [d.name for d in parsed.definitions] == [f"f{tag}"]
        assert parsed.references == {f"g{tag + 1}": 1}
    # Every helper of the call is gone; fresh ones replace them.
    assert pool.process is not None
    supervisor = pool.process.pid
    run_async(lambda: wait_for(lambda: len(_children(supervisor)) == parsepool.SPARE))
    again = ParseRun(pool, time.monotonic() + 60)
    assert [tag for tag, _ in again.submit(0, "python", files[0]) + again.finish()] == [0]


def run_async(fn: Any) -> None:
    trio.run(fn)


def test_the_pool_gives_no_helper_when_its_supervisor_is_gone() -> None:
    started = ParserPool.start(cpu_seconds=30)
    assert started.process is not None
    started.process.kill()
    started.process.wait()
    # The helpers it had forked are killed with it (their sockets may still be queued).
    taken = []
    with pytest.raises(parsepool.ParserUnavailable, match="supervisor is gone"):
        for _ in range(parsepool.SPARE + 1):
            taken += started.checkout(1, time.monotonic() + 60)
    started.discard(taken)
    started.close()


def test_a_killed_helper_costs_one_file_and_the_server_lives(tmp_path: Path) -> None:
    """A helper killed while it parses (as the OOM killer or an operator would):
    its file is 'not parsed: the parser failed', the call answers, the server goes
    on, and a fresh helper replaces it."""
    root = tmp_path / "root"
    write(root, {**POLYGLOT, "slow.py": PARENS.decode()})

    async def main(url: str, server: int) -> None:
        supervisor = _supervisor_of(server)
        await wait_for(lambda: len(_children(supervisor)) == parsepool.SPARE)
        result: dict[str, Any] = {}
        killed: list[int] = []

        async def mapping(client: Any) -> None:
            answer = await client.call_tool("code_map", {"path": "."})
            result.update(answer.structured_content)

        async def killer() -> None:
            def busy() -> list[int]:  # the helper stuck on slow.py
                return [p for p in _children(supervisor) if _cpu_ticks(p) > 50]

            await wait_for(lambda: bool(busy()))
            [pid] = busy()
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        async with http_client(url, "2026") as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(mapping, client)
                nursery.start_soon(killer)
            assert killed
            assert result["filesSkipped"]["parserFailed"] == 1
            assert result["filesSkipped"]["notParsedInTime"] == 0
            assert result["filesMapped"] == len(POLYGLOT)
            listed = await client.call_tool("list_allowed_directories", {})
            assert not listed.is_error
        await wait_for(lambda: len(_children(supervisor)) == parsepool.SPARE)
        assert killed[0] not in _children(supervisor)

    with sidecar("--max-search-seconds", "120", *ONE_PROCESS, str(root), tmp=tmp_path) as server:
        run(lambda: main(server.url, server.process.pid))
        assert server.process.poll() is None


def test_an_aborting_parser_costs_one_file_over_the_wire_and_the_server_lives(
    tree: Tree,
) -> None:
    write(tree.root, {**POLYGLOT, "crash.py": f"def crash():\n    '{MARKER}'\n"})

    async def main() -> None:
        async with session(str(tree.root), env={TEST_ABORT_ENV: MARKER}) as s:
            for _ in range(2):  # not remembered: a crash is tried again, and costs the same
                result = await s.call("code_map", path=".")
                assert not result.is_error
                assert result.structured_content is not None
                assert result.structured_content["filesSkipped"]["parserFailed"] == 1
                assert result.structured_content["filesMapped"] == len(POLYGLOT)
                text = result.content[0].text  # type: ignore[union-attr]
                assert "1 not parsed: the parser failed" in text
            assert not (await s.call("list_allowed_directories")).is_error
            assert f"TEST MODE: {TEST_ABORT_ENV} is set" in s.log()

    run(main)


def test_the_server_never_loads_a_parser(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root, POLYGLOT)

    async def main(url: str, server: int) -> None:
        async with http_client(url, "2026") as client:
            answer = await client.call_tool("code_map", {"path": "."})
            assert answer.structured_content["parsed"] == len(POLYGLOT)
        maps = Path(f"/proc/{server}/maps").read_text()
        assert "tree_sitter" not in maps
        supervisor = _supervisor_of(server)
        await wait_for(lambda: len(_children(supervisor)) == parsepool.SPARE)
        helpers = _children(supervisor)
        assert any("tree_sitter" in Path(f"/proc/{p}/maps").read_text() for p in helpers)
        status = _status(server)
        assert status["Seccomp"] == "2"

    with sidecar(*ONE_PROCESS, str(root), tmp=tmp_path) as server:
        run(lambda: main(server.url, server.process.pid))


def test_a_planted_pathological_file_costs_the_budget_and_stalls_no_other_call(
    tmp_path: Path,
) -> None:
    """The issue's attack: code_map over 200,000 open parentheses.  Meanwhile the same
    client's other calls and another client's are answered; the map answers within
    its budget (a generous bound: no timing assertion beyond it), saying which file
    it had no time for."""
    root = tmp_path / "root"
    write(root, {**POLYGLOT, "slow.py": PARENS.decode()})
    budget = 8

    async def main(url: str) -> None:
        answered = {"same": 0, "other": 0}
        result: dict[str, Any] = {}
        async with http_client(url, "2026") as first, http_client(url, "2025") as second:
            await first.list_tools()

            async def mapping() -> None:
                answer = await first.call_tool("code_map", {"path": "."})
                result.update(answer.structured_content)

            async def others(client: Any, key: str) -> None:
                while not result:
                    with trio.fail_after(30):  # generous: each takes milliseconds
                        listed = await client.call_tool("list_allowed_directories", {})
                        await client.list_tools()
                    assert not listed.is_error
                    if not result:
                        answered[key] += 1
                    await trio.sleep(0.05)

            with trio.fail_after(budget + 60):  # a generous bound
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(mapping)
                    nursery.start_soon(others, first, "same")
                    nursery.start_soon(others, second, "other")
        assert answered["same"] >= 1 and answered["other"] >= 1, answered
        assert result["filesSkipped"]["notParsedInTime"] == 1
        assert result["filesMapped"] == len(POLYGLOT)
        assert result["complete"] is False

    with sidecar(
        "--max-search-seconds", str(budget), *ONE_PROCESS, str(root), tmp=tmp_path
    ) as server:
        run(lambda: main(server.url))


def test_code_map_works_for_an_ordinary_user(public_tree: Tree) -> None:
    """As uid 65534: the supervisor and its helpers confine themselves without any
    privilege (no_new_privs, Landlock, lowered limits, seccomp) and the map is whole."""
    tree = public_tree
    tree.root.chmod(0o755)
    write(tree.root, POLYGLOT)
    for path in tree.root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    pythonpath = nobody_pythonpath()

    async def main() -> None:
        async with session(
            command=nobody_command(str(tree.root)), env={"PYTHONPATH": pythonpath}
        ) as s:
            result = await s.call("code_map", path=".")
            assert not result.is_error, result.content
            assert result.structured_content is not None
            assert result.structured_content["parsed"] == len(POLYGLOT)
            assert result.structured_content["filesSkipped"]["parserFailed"] == 0
            assert "seccomp: server (sockets: none) filter applied" in s.log()

    run(main)

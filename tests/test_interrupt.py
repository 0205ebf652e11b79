"""Ctrl-C on a server run by hand (issue 26): exit status 130, one line, no traceback,
nothing left behind.

Each test sends SIGINT to a real server process and waits for it to end; it waits
for the server's own lines (or its health answer) before signalling, never sleeps.
Whether SIGINT lands before the server handles signals or after, the outcome is the
same, which the startup cases check on purpose.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sidecar_helpers import unix_request

from helpers import Tree
from mcp_client import SERVER, said, server_env
from sandboxfs.cli.arguments import EXIT_INTERRUPTED

INTERRUPTED = "sandboxfs: interrupted"
TOKEN = "interrupt-token-0123456789abcdef"


def _start(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SERVER, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env({"SANDBOXFS_TOKEN": TOKEN} if "--unix" in argv else None),
    )


def _until(process: subprocess.Popen[str], marker: str) -> str:
    """Read the server's log up to the first line holding ``marker``."""
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if marker in line:
            return said(line)
    raise AssertionError(f"the server never said {marker!r}:\n" + "".join(seen))


def _interrupt(process: subprocess.Popen[str]) -> list[str]:
    """SIGINT, then the lines the server wrote after it; its exit status is 130."""
    assert process.stderr is not None and process.stdin is not None
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=60)
    rest = process.stderr.read().splitlines()
    process.stderr.close()
    process.stdin.close()
    assert code == EXIT_INTERRUPTED, rest
    assert not any("Traceback" in line for line in rest), rest
    assert rest.count(INTERRUPTED) == 1 and rest[-1] == INTERRUPTED, rest
    return rest


@pytest.mark.parametrize("marker", ["serving MCP on stdio", "Configuration: "])
def test_ctrl_c_ends_a_stdio_server_with_one_line(tree: Tree, marker: str) -> None:
    process = _start(str(tree.root))
    _until(process, marker)
    rest = _interrupt(process)
    if marker.startswith("serving"):
        assert rest == [INTERRUPTED]


def test_ctrl_c_ends_an_http_server_with_status_130(tree: Tree) -> None:
    process = _start("--http", "127.0.0.1:0", str(tree.root))
    url = _until(process, "serving MCP on ").rpartition(" ")[2].strip()
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(url.removesuffix("/mcp") + "/healthz", timeout=60) as answer:
        assert answer.status == 200  # it serves, and handles SIGINT itself
    rest = _interrupt(process)
    assert not any(line.startswith("sandboxfs: error") for line in rest)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose path is short enough for a unix socket."""
    with tempfile.TemporaryDirectory(prefix="sfs-") as path:
        yield Path(path)


@pytest.mark.parametrize("landlock", ["landlock", "no-landlock"])
@pytest.mark.parametrize("when", ["serving", "starting"])
def test_ctrl_c_leaves_no_unix_socket_behind(
    tree: Tree, short_dir: Path, landlock: str, when: str
) -> None:
    """Under Landlock the server may not remove the socket itself (its directory is
    outside the allowed ones): its helper does, before the exit status is known."""
    socket_path = str(short_dir / "mcp.sock")
    flags = ["--no-landlock"] if landlock == "no-landlock" else []
    process = _start("--unix", socket_path, *flags, str(tree.root))
    if when == "serving":
        _until(process, "serving MCP on ")
        assert unix_request(socket_path, "GET", "/healthz") == 200
    else:
        _until(process, "Configuration: ")  # the socket exists; serving may not yet
    _interrupt(process)
    assert not Path(socket_path).exists()
    assert sorted(p.name for p in short_dir.iterdir()) == []


def test_a_killed_servers_socket_is_removed_by_its_helper(tree: Tree, short_dir: Path) -> None:
    socket_path = short_dir / "mcp.sock"
    process = _start("--unix", str(socket_path), str(tree.root))
    _until(process, "serving MCP on ")
    assert socket_path.exists()
    process.kill()
    process.wait(timeout=60)
    assert process.stderr is not None and process.stdin is not None
    process.stderr.close()
    process.stdin.close()
    deadline = time.monotonic() + 60
    while socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for a condition (the helper's unlink), bounded
    assert not socket_path.exists()


def test_a_socket_that_is_not_the_servers_own_is_left_alone(tree: Tree, short_dir: Path) -> None:
    """Replaced while the server ran (another server took the path): not removed."""
    socket_path = short_dir / "mcp.sock"
    process = _start("--unix", str(socket_path), str(tree.root))
    _until(process, "serving MCP on ")
    socket_path.unlink()
    socket_path.write_text("someone else's\n")
    _interrupt(process)
    assert socket_path.read_text() == "someone else's\n"

"""Landlock, the second layer: it confines the process even if the first layer failed."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import CANARY, Tree, snapshot
from mcp_client import PATCHED, SERVER, run, server_env, session
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import Root

pytestmark = pytest.mark.skipif(
    landlock.abi_version() < 1, reason="the kernel has no Landlock (the CLI tests cover that)"
)


def _in_confined_child(
    root: Path, check: Callable[[], Any], *, read_only: bool = False, under_front: bool = False
) -> str:
    """Apply Landlock in a forked child, run ``check`` there, return its outcome
    (``under_front``: on top of the tenants' front's layer, as a worker is)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            if under_front:
                landlock.confine_network()
            landlock.confine([Root.open(str(root))], read_only=read_only)
            outcome = f"ok:{check()}"
        except OSError as exc:
            outcome = f"errno:{errno.errorcode.get(exc.errno or 0)}"
        except BaseException as exc:
            outcome = f"error:{exc!r}"
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as inp:
        outcome = inp.read()
    os.waitpid(pid, 0)
    return outcome


def test_outside_reads_and_writes_fail_even_with_the_openat2_layer_bypassed(tree: Tree) -> None:
    """The layer on its own: a test-only patch makes the openat2 layer admit "/"."""
    (tree.root / "in.txt").write_text("inside")
    before = snapshot(tree.outside)

    async def main() -> None:
        async with session(command=[*PATCHED, "bypass-openat2", str(tree.root)]) as s:
            assert await s.text("read_text_file", path="in.txt") == "inside"
            await s.text("write_file", path="new.txt", content="fine")
            secret = str(tree.outside / "secret.txt")
            denied = await s.error("read_text_file", path=secret)
            assert "EACCES" in denied and CANARY.decode() not in denied
            assert "EACCES" in await s.error("read_text_file", path="/etc/hostname")
            assert "EACCES" in await s.error("write_file", path=secret, content="pwned")
            assert "EACCES" in await s.error(
                "write_file", path=str(tree.outside / "new"), content="x"
            )
            assert "EACCES" in await s.error("create_directory", path=str(tree.outside / "d"))
            assert "EACCES" in await s.error(
                "move_file", source="new.txt", destination=str(tree.outside / "moved")
            )
            assert "EACCES" in await s.error("list_directory", path=str(tree.outside))
            log = s.log()
        assert "TEST PATCHES APPLIED: bypass-openat2" in log

    run(main)
    assert snapshot(tree.outside) == before
    assert (tree.root / "new.txt").read_text() == "fine"


@pytest.mark.parametrize("under_front", [False, True])
def test_a_file_moves_between_directories_inside_also_in_a_tenants_worker(
    tree: Tree, under_front: bool
) -> None:
    """A rename into another directory is a reparenting, which a Landlock layer that
    does not handle REFER denies: the front's network layer once made every tenant
    worker's move_file fall back to a copy (EXDEV), and an apply_patch rename fail."""
    (tree.root / "a").mkdir()
    (tree.root / "b").mkdir()
    (tree.root / "a" / "f").write_text("moved")

    def move() -> str:
        os.rename(tree.root / "a" / "f", tree.root / "b" / "f")
        os.link(tree.root / "b" / "f", tree.root / "a" / "g")
        return "moved"

    assert _in_confined_child(tree.root, move, under_front=under_front) == "ok:moved"
    assert (tree.root / "b" / "f").read_text() == "moved"
    assert (
        _in_confined_child(
            tree.outside, lambda: Path("/etc/hostname").read_text(), under_front=under_front
        )
        == "errno:EACCES"
    )


def test_read_only_rights_refuse_writes_inside(tree: Tree) -> None:
    (tree.root / "f").write_text("x")
    target = tree.root / "f"

    def write() -> str:
        with open(target, "a") as f:
            f.write("y")
        return "written"

    assert _in_confined_child(tree.root, lambda: target.read_text(), read_only=True) == "ok:x"
    assert _in_confined_child(tree.root, write, read_only=True) == "errno:EACCES"
    assert _in_confined_child(tree.root, write) == "ok:written"
    assert _in_confined_child(tree.root, Path("/etc/hostname").read_text) == "errno:EACCES"


@pytest.mark.skipif(landlock.abi_version() < 4, reason="TCP rules need Landlock ABI 4")
def test_no_tcp_connect_or_bind(tree: Tree) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:

        def connect() -> str:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return "connected"

        def bind() -> str:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                s.listen()
                return "bound"

        assert _in_confined_child(tree.root, connect) == "errno:EACCES"
        assert _in_confined_child(tree.root, bind) == "errno:EACCES"
    finally:
        listener.close()


@pytest.mark.skipif(landlock.abi_version() < 6, reason="scoping needs Landlock ABI 6")
def test_signals_and_abstract_sockets_are_scoped(tree: Tree) -> None:
    parent = os.getpid()

    def signal_parent() -> str:
        os.kill(parent, 0)
        return "signalled"

    def abstract_connect() -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect("\0sandboxfs-test-abstract")
            return "connected"

    server = socket.socket(socket.AF_UNIX)
    server.bind("\0sandboxfs-test-abstract")
    server.listen()
    try:
        assert _in_confined_child(tree.root, signal_parent) == "errno:EPERM"
        assert _in_confined_child(tree.root, abstract_connect) == "errno:EPERM"
    finally:
        server.close()


def _start(
    *args: str, env: dict[str, str] | None = None, patches: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = SERVER if patches is None else [*PATCHED, patches]
    return subprocess.run(
        [*command, *args],
        input="",
        capture_output=True,
        text=True,
        env=server_env(env),
        timeout=60,
    )


def test_missing_landlock_is_reported_loudly(tree: Tree) -> None:
    no_landlock = "landlock-abi=0"
    warned = _start(str(tree.root), patches=no_landlock)
    assert warned.returncode == 0
    assert "WARNING: the kernel does not support Landlock" in warned.stderr
    refused = _start("--require-landlock", str(tree.root), patches=no_landlock)
    assert refused.returncode == 1
    assert "--require-landlock" in refused.stderr
    assert _start("--require-landlock").returncode == 2  # nothing to confine to: usage
    enforced = _start(str(tree.root))
    assert "Landlock ABI" in enforced.stderr
    disabled = _start("--no-landlock", str(tree.root))
    assert "Landlock disabled" in disabled.stderr


def test_a_test_switch_that_would_widen_access_is_refused(tree: Tree) -> None:
    """The switch that once admitted "/" (and any switch the server does not know)
    stops the server at startup instead of being ignored or obeyed."""
    for switch in ("SANDBOXFS_TEST_BYPASS_OPENAT2", "SANDBOXFS_TEST_LANDLOCK_ABI"):
        started = _start("--no-landlock", str(tree.root), env={switch: "1"})
        assert started.returncode == 1, started.stderr
        assert f"unknown test switch {switch}" in started.stderr

"""The launcher: huge pages asked for once, by re-executing in place; operators' choice kept."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import Tree
from mcp_client import INIT_2025, SERVER, spawn_stdio
from sandboxfs.cli.launch import huge_pages_on_request


def served_state(root: Path, env: dict[str, str]) -> tuple[dict[str, str], list[str], int]:
    """The environment (as exec'd: glibc cuts GLIBC_TUNABLES at its first colon
    there), the argv of a running server, and how many of its mappings malloc asked
    huge pages for (``hg`` in smaps), read from /proc once it answers."""
    proc = spawn_stdio(str(root), env=env, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INIT_2025.encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "sandboxfs"
        raw = Path(f"/proc/{proc.pid}/environ").read_bytes()
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        smaps = Path(f"/proc/{proc.pid}/smaps").read_text()
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()
    huge = sum(1 for line in smaps.splitlines() if line.startswith("VmFlags") and " hg" in line)
    pairs = (item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    return dict(pairs), argv, huge


@pytest.mark.skipif(not huge_pages_on_request(), reason="transparent huge pages are not madvise")
def test_the_server_runs_with_huge_pages_asked_for(tree: Tree) -> None:
    environ, argv, huge = served_state(tree.root, {})
    assert environ["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert argv == [*SERVER, str(tree.root)]  # same process, same arguments
    assert huge > 0
    # Other tunables are kept, and ours is added.
    _, _, huge = served_state(tree.root, {"GLIBC_TUNABLES": "glibc.malloc.check=0"})
    assert huge > 0


def test_an_operators_setting_is_kept(tree: Tree) -> None:
    environ, _, huge = served_state(tree.root, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert environ["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"
    assert huge == 0

"""`sandboxfs audit` against sandboxfs itself: every case passes, in both eras.

Also checks that the audit can fail: a deliberately weak "server" (the reference
tool names, but path checks done on strings) is caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_client import SERVER, server_env


def _audit(tmp_path: Path, *args: str, server: list[str]) -> tuple[int, str, list[dict[str, str]]]:
    report = tmp_path / "audit.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxfs",
            "audit",
            "--json",
            str(report),
            "--log",
            str(tmp_path / "server.log"),
            *args,
            "--",
            *server,
        ],
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=900,
    )
    return result.returncode, result.stdout, json.loads(report.read_text())


@pytest.mark.parametrize("era", ["2025", "2026"])
def test_sandboxfs_passes_its_own_audit(tmp_path: Path, era: str) -> None:
    code, output, results = _audit(tmp_path, "--era", era, server=[*SERVER, "{root}"])
    assert code == 0, output
    assert output.splitlines()[-1] == f"{len(results)} passed, 0 failed, 0 skipped"
    categories = {r["case"].split("/")[0] for r in results}
    assert categories == {
        "path-syntax",
        "symlinks",
        "destination",
        "hard-links",
        "special-files",
        "resource-exhaustion",
        "races",
        "leaks",
    }


WEAK_SERVER = """
import os, sys
from mcp.server.mcpserver import MCPServer
root = os.path.realpath(sys.argv[1])
app = MCPServer("weak")

def check(path):  # the classic mistake: a string prefix test, then use the string
    full = os.path.abspath(path)
    if not full.startswith(root):
        raise ValueError("Access denied")
    return full

@app.tool()
def read_text_file(path: str) -> str:
    return open(check(path)).read()

@app.tool()
def list_directory(path: str) -> str:
    return "\\n".join(sorted(os.listdir(check(path))))

app.run()
"""


def test_the_audit_catches_a_weak_server(tmp_path: Path) -> None:
    script = tmp_path / "weak_server.py"
    script.write_text(WEAK_SERVER)
    code, output, results = _audit(
        tmp_path,
        "--timeout",
        "5",
        "--category",
        "path-syntax",
        "--category",
        "symlinks",
        server=[sys.executable, str(script), "{root}"],
    )
    assert code == 1
    failed = {r["case"] for r in results if r["status"] == "FAIL"}
    assert "path-syntax/prefix-sibling" in failed  # "/x/root-evil" starts with "/x/root"
    assert "symlinks/read-read_text_file" in failed  # symlinks are followed out
    assert "failed" in output.splitlines()[-1]


def test_an_audit_leaves_nothing_behind_unless_asked_for_a_log(tmp_path: Path) -> None:
    """Without --log the server's stderr goes nowhere: the directory the audit runs
    in (a user's repository) gains nothing.  With --log it goes to that file."""
    work = tmp_path / "repo"
    work.mkdir()
    command = [sys.executable, "-m", "sandboxfs", "audit", "--category", "leaks"]
    for log in (None, tmp_path / "server.log"):
        extra = ["--log", str(log)] if log is not None else []
        result = subprocess.run(
            [*command, *extra, "--", *SERVER, "{root}"],
            capture_output=True,
            text=True,
            env=server_env(),
            timeout=900,
            cwd=work,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert list(work.iterdir()) == []
    assert (tmp_path / "server.log").read_text().startswith("$ ")

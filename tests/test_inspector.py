"""MCP Inspector (CLI mode), a real third-party client, against sandboxfs over stdio
and over streamable HTTP with a bearer token.

Needs the inspector: set SANDBOXFS_INSPECTOR to the command that runs it (``.ci/run``
installs Node 24 and @modelcontextprotocol/inspector and sets it)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from sidecar_helpers import TOKEN, sidecar

from mcp_client import SERVER, server_env

INSPECTOR = os.environ.get("SANDBOXFS_INSPECTOR")
pytestmark = pytest.mark.skipif(
    not INSPECTOR, reason="set SANDBOXFS_INSPECTOR to run MCP Inspector (CI does)"
)


def _inspect(*args: str) -> dict[str, object]:
    assert INSPECTOR is not None
    result = subprocess.run(
        [*shlex.split(INSPECTOR), "--cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **server_env()},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_inspector_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello inspector\n")
    listed = _inspect(*SERVER, str(tmp_path), "--method", "tools/list")
    assert len(listed["tools"]) == 20  # type: ignore[arg-type]
    called = _inspect(
        *SERVER,
        str(tmp_path),
        "--method",
        "tools/call",
        "--tool-name",
        "read_text_file",
        "--tool-arg",
        "path=hello.txt",
    )
    assert called["content"] == [{"type": "text", "text": "hello inspector\n"}]


def test_inspector_over_http_with_a_token(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("hello over http\n")
    with sidecar(str(root), tmp=tmp_path) as s:
        called = _inspect(
            s.url,
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--method",
            "tools/call",
            "--tool-name",
            "read_text_file",
            "--tool-arg",
            "path=hello.txt",
        )
    assert called["content"] == [{"type": "text", "text": "hello over http\n"}]

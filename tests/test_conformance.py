"""@modelcontextprotocol/conformance against the streamable HTTP transport, both lines:
0.1.16 (the 2025 era) and 0.2.x with ``--requirements 2026-07-28``.  Each run must
match its baseline in tests/conformance/ exactly: no unexpected failure (a
regression) and no stale entry.

Needs Node >= 22 and the suite: set SANDBOXFS_CONFORMANCE_0_1 and
SANDBOXFS_CONFORMANCE_0_2 to the commands that run each (``.ci/run`` installs them
beside MCP Inspector and sets both)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from sidecar_helpers import sidecar

BASELINES = Path(__file__).resolve().parent / "conformance"
LINES = {
    "0.1": ("SANDBOXFS_CONFORMANCE_0_1", []),
    "0.2": ("SANDBOXFS_CONFORMANCE_0_2", ["--requirements", "2026-07-28"]),
}


#: Scenarios in a baseline although most of their checks pass: only these checks (each
#: needs a diagnostic tool or prompt of the suite's own server) may fail in them.
FIXTURE_CHECKS = {
    "server-stateless": {
        "ServerRejectsUndeclaredCapability",
        "MissingCapabilityHttp400",
        "HttpServerNoIndependentRequestsOnStream",
        "ServerNoLogWithoutLogLevel",
    },
    "caching": {"PromptsListCachingHints", "ResourcesReadCachingHints"},
}


def _failed_checks(results: Path) -> dict[str, set[str]]:
    failed: dict[str, set[str]] = {}
    for checks in results.glob("*/checks.json"):
        for check in json.loads(checks.read_text()):
            if check["status"] == "FAILURE":
                name = checks.parent.name.removeprefix("server-")
                scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", name)
                failed.setdefault(scenario, set()).add(check["name"])
    return failed


@pytest.mark.parametrize("line", sorted(LINES))
def test_conformance_matches_its_baseline(tmp_path: Path, line: str) -> None:
    variable, extra = LINES[line]
    command = os.environ.get(variable)
    if not command:
        pytest.skip(f"set {variable} to run the conformance suite {line} (CI does)")
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    with sidecar(str(root), tmp=tmp_path, token=None) as s:
        url = f"http://localhost:{s.port}/mcp"
        result = subprocess.run(
            [
                *shlex.split(command),
                "server",
                "--url",
                url,
                *extra,
                "--expected-failures",
                str(BASELINES / f"baseline-{line}.yml"),
                "-o",
                str(tmp_path / "results"),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        log = s.log.read_text()
    summary = result.stdout.partition("=== SUMMARY ===")[2]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Baseline check passed" in result.stdout
    assert "✓ dns-rebinding-protection" in summary
    if line == "0.2":
        assert "✓ http-header-validation: 14 passed, 0 failed" in summary
    assert "Traceback" not in log
    failed = _failed_checks(tmp_path / "results")
    if line == "0.2":
        assert "server-stateless" in failed  # the results were read
    for scenario, allowed in FIXTURE_CHECKS.items():
        assert failed.get(scenario, set()) <= allowed, (scenario, failed.get(scenario))

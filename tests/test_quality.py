"""The project's own promises about itself: lint, types, and docs that match the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sandboxfs.cli.arguments import LIMIT_OPTIONS, help_text
from sandboxfs.tools import annotation_table

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_ruff_is_clean() -> None:
    check = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_tool_table_is_rendered_from_the_declarations() -> None:
    table = re.search(r"<!-- tools-table -->\n(.*?)\n<!-- /tools-table -->", README, re.S)
    assert table is not None
    assert table.group(1) == annotation_table()


def test_ci_runs_the_readme_test_command() -> None:
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci_lines[-1]
    assert "pytest" in command
    assert f"\n{command}\n" in README


def test_every_limit_is_documented() -> None:
    text = help_text()
    for option in LIMIT_OPTIONS:
        assert option in text
        assert f"`{option} N`" in README

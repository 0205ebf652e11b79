"""The installed product, not the clone: the wheel .ci/run built (from the sdist)
and repaired to manylinux, installed with pipx into a fresh environment
(``SANDBOXFS_WHEEL``, ``SANDBOXFS_INSTALLED``); the quick start and one client
call run against the installed command, from outside the clone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import trio

from mcp_client import session
from sandboxfs import __version__

ROOT = Path(__file__).resolve().parent.parent


def _installed() -> Path:
    command = os.environ.get("SANDBOXFS_INSTALLED")
    if not command:
        pytest.skip(
            "set SANDBOXFS_INSTALLED to a sandboxfs installed from the built wheel "
            "(.ci/run builds it and installs it with pipx)"
        )
    return Path(command)


def _environment() -> dict[str, str]:
    """The user's environment, without anything that points into the clone."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("SANDBOXFS_")
    }


def test_the_wheel_is_manylinux_abi3_and_carries_the_license() -> None:
    wheel = os.environ.get("SANDBOXFS_WHEEL")
    if not wheel:
        pytest.skip("set SANDBOXFS_WHEEL to the built wheel (.ci/run builds it)")
    name = Path(wheel).name
    assert re.fullmatch(
        rf"sandboxfs-{re.escape(__version__)}-cp311-abi3-manylinux_2_\d+_(x86_64|aarch64)"
        r"(\.manylinux\w+)*\.whl",
        name,
    ), name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"sandboxfs-{__version__}.dist-info/METADATA").decode()
        license_text = archive.read(f"sandboxfs-{__version__}.dist-info/licenses/LICENSE")
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert any(n.startswith("sandboxfs/_native") and n.endswith(".abi3.so") for n in names)


def test_the_installed_command_runs_its_own_copy(tmp_path: Path) -> None:
    command = _installed()
    python = command.read_text().splitlines()[0].removeprefix("#!").split()[0]
    found = subprocess.run(
        [python, "-c", "import sandboxfs, sandboxfs._native; print(sandboxfs.__file__)"],
        cwd=tmp_path,
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert "site-packages" in found and not found.startswith(str(ROOT / "sandboxfs"))
    version = subprocess.run(
        [str(command), "--version"],
        cwd=tmp_path,
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert version.stdout.strip() == f"sandboxfs {__version__}"


def test_the_quick_start_and_a_client_call_against_the_installed_command(tmp_path: Path) -> None:
    command = _installed()
    (tmp_path / "notes.txt").write_text("installed from the wheel\n")
    # The quick start: serve a directory over stdio; end of input ends it (status 0).
    done = subprocess.run(
        [str(command), str(tmp_path)],
        cwd=tmp_path,
        env=_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b"serving MCP on stdio" in done.stderr

    async def main() -> None:
        # (PYTHONPATH emptied: the tests' own import path leads into the clone.)
        async with session(command=[str(command), str(tmp_path)], env={"PYTHONPATH": ""}) as s:
            text = await s.text("read_text_file", path="notes.txt")
            assert text == "installed from the wheel\n"

    trio.run(main)


def _commands(value: object) -> list[str]:
    """Every "command" of a client configuration."""
    if isinstance(value, dict):
        found = [str(value["command"])] if "command" in value else []
        return found + [c for v in value.values() for c in _commands(v)]
    if isinstance(value, list):
        return [c for v in value for c in _commands(v)]
    return []


def test_the_readme_points_clients_at_the_command_pipx_installs() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start") : readme.index("## Using it from a client")]
    assert "\npipx install ./sandboxfs-" in quick_start and "\npipx install .\n" in quick_start
    assert "~/.local/bin" in quick_start and "command -v sandboxfs" in quick_start
    blocks = re.findall(r"^```json\n(.*?)^```\n", readme, re.S | re.M)
    commands = [c for block in blocks for c in _commands(json.loads(block))]
    servers = [c for c in commands if c.endswith("sandboxfs")]
    assert servers and set(servers) == {"/home/me/.local/bin/sandboxfs"}
    assert '"$(command -v sandboxfs)"' in readme  # Claude Code's line
    assert "/opt/sandboxfs/.venv" not in readme and ".venv/bin/sandboxfs" not in readme

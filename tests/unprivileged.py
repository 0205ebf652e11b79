"""Running the real server as an ordinary user (uid 65534).

The test interpreter and its packages may live where that user cannot reach
(a Python under /root), so this copies the installed packages into a
world-readable directory and runs them with the system ``python3``, dropping
privileges with ``setpriv``.
"""

from __future__ import annotations

import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

import sandboxfs

SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534


def _world_readable(top: Path) -> None:
    for dirpath, _, filenames in os.walk(top):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            mode = os.stat(path).st_mode
            os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


@cache
def nobody_pythonpath() -> str:
    """A world-readable copy of the packages the server needs."""
    if shutil.which("setpriv") is None or not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("needs setpriv and the system python3")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.stdout.strip() != version:
        pytest.skip(f"the system python3 is not Python {version}")
    target = Path(tempfile.mkdtemp(prefix="sandboxfs-nobody-"))
    for source in site.getsitepackages():
        for item in Path(source).iterdir():
            if item.name.startswith(("__editable__", "sandboxfs", "_pytest", "pytest", "pip")):
                continue
            destination = target / item.name
            if item.is_dir():
                shutil.copytree(item, destination, dirs_exist_ok=True)
            else:
                shutil.copy2(item, destination)
    shutil.copytree(Path(sandboxfs.__file__).parent, target / "sandboxfs", dirs_exist_ok=True)
    _world_readable(target)
    os.chmod(target, 0o755)
    return str(target)


def nobody_command(*args: str) -> list[str]:
    """Argv that runs ``python -m sandboxfs ARGS`` as uid/gid 65534."""
    return [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        SYSTEM_PYTHON,
        "-m",
        "sandboxfs",
        *args,
    ]

"""What `pip install .` (not editable) ships: every module of the package.

A non-editable install is what the README quick start and the container image use; an
editable install (the test venv) hides a module missing from the package list.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


#: Build products and caches: a wheel built next to them could pick up stale files.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "*.egg-info",
    "__pycache__",
    "*.so",
    "_native.c",
    "node_modules",
    ".reference",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".pytest_cache",
)


def test_the_wheel_holds_every_module_and_the_compiled_shim(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("sandboxfs-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "sandboxfs").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sources - shipped == set()
    assert "sandboxfs/py.typed" in shipped
    assert any(name.startswith("sandboxfs/_native") and name.endswith(".so") for name in shipped)
    assert not any(name.startswith("tests/") for name in shipped)

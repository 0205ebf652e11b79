"""What `pip install .` (not editable) ships: every module of the package.

A non-editable install is what the README quick start and the container image use; an
editable install (the test venv) hides a module missing from the package list.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

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


def test_the_sdist_carries_the_shims_sources_and_the_license(tmp_path: Path) -> None:
    """The sdist (``python -m build --sdist``) holds what a machine with a compiler
    builds the wheel from (.ci/run builds the wheel from it): the shim's sources, the
    syscall table, the license; no tests, which need the repository."""
    pytest.importorskip("build", reason="build is in the test extra")
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (sdist,) = tmp_path.glob("sandboxfs-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    natives = {p.relative_to(REPO).as_posix() for p in (REPO / "native").iterdir() if p.is_file()}
    assert natives <= names
    assert {"LICENSE", "setup.py", "pyproject.toml", "sandboxfs/_native.pyi"} <= names
    assert not any(name.startswith("tests/") for name in names)


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
    assert any(
        name.startswith("sandboxfs/_native") and name.endswith(".abi3.so") for name in shipped
    )
    assert not any(name.startswith("tests/") for name in shipped)
    # One wheel per architecture for every CPython >= 3.11, and the license in its metadata.
    assert wheel.name.startswith("sandboxfs-") and "-cp311-abi3-linux_" in wheel.name
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in shipped if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
        license_text = archive.read(metadata.replace("METADATA", "licenses/LICENSE"))
    assert "License-Expression: MIT" in text and "License-File: LICENSE" in text
    assert license_text == (REPO / "LICENSE").read_bytes()
    assert "Requires-Dist: pyxattr" not in text  # PyPI has no wheel of it: a compiler for all

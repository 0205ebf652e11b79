"""--no-xdev: refuse paths that cross a mount point inside an allowed directory."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Tree
from mcp_client import run, session
from sandboxfs.core.errors import AccessDenied


@pytest.fixture
def mounted(tree: Tree) -> Iterator[Path]:
    """A tmpfs mounted at root/mnt (needs CAP_SYS_ADMIN, which CI's root has)."""
    point = tree.root / "mnt"
    point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    (point / "f.txt").write_text("on another mount")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)


def test_mount_crossing_refused_only_with_no_xdev(tree: Tree, mounted: Path) -> None:
    (tree.root / "plain.txt").write_text("same mount")
    (tree.root / "via-link").symlink_to("mnt/f.txt")
    crossing = tree.sandbox(no_xdev=True)
    default = tree.sandbox()
    with default.open_file("mnt/f.txt") as f:
        assert f.file.read() == b"on another mount"
    for path in ("mnt/f.txt", "via-link", str(mounted / "f.txt")):
        with pytest.raises(AccessDenied, match="crosses a mount point"):
            crossing.open_file(path).file.close()
    with pytest.raises(AccessDenied):
        crossing.list_dir("mnt")
    with pytest.raises(AccessDenied):
        crossing.replace_file("mnt/new.txt", b"x")
    with crossing.open_file("plain.txt") as f:
        assert f.file.read() == b"same mount"

    async def main() -> None:
        async with session("--no-xdev", str(tree.root)) as s:
            assert "crosses a mount point" in await s.error("read_text_file", path="mnt/f.txt")
            assert await s.text("read_text_file", path="plain.txt") == "same mount"
        async with session(str(tree.root)) as s:
            assert await s.text("read_text_file", path="mnt/f.txt") == "on another mount"

    run(main)

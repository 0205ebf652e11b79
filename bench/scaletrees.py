"""The --scale trees: how each is laid out (leaves of files, the needle in a hundred of
them), made once and kept (a stamp says a tree is complete), and whether the disk has room."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rpc import log

SCALE_FORMAT = 1  # bump when the layout changes, so the trees are made again
FILES_PER_LEAF = 20
LEAVES_PER_TOP = 100
HITS = 100  # files holding the needle (and named *.hit), in every tree
NEEDLE = "NEEDLE_SANDBOXFS_SCALE"
BYTES_PER_FILE = 4096  # one block each, for the free-space check


@dataclass(frozen=True)
class ScaleTree:
    files: int
    path: Path

    @property
    def leaves(self) -> int:
        return -(-self.files // FILES_PER_LEAF)

    @property
    def tops(self) -> int:
        return -(-self.leaves // LEAVES_PER_TOP)

    @property
    def entries(self) -> int:
        return self.files + self.leaves + self.tops

    @property
    def step(self) -> int:
        return max(1, self.files // HITS)

    @property
    def hits(self) -> int:
        return self.files // self.step

    @property
    def stamp(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def want(self) -> dict[str, int]:
        return {"format": SCALE_FORMAT, "files": self.files, "hits": self.hits}


def scale_tree(root: Path, files: int) -> ScaleTree:
    return ScaleTree(files, root / "scale" / f"files-{files}")


def fits(root: Path, trees: list[ScaleTree]) -> str | None:
    """Why the trees not yet made cannot fit on root's filesystem, or None."""
    todo = [t for t in trees if not is_ready(t)]
    if not todo:
        return None
    probe = root
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    inodes = sum(t.entries for t in todo)
    space = sum((t.files + t.leaves + t.tops) * BYTES_PER_FILE for t in todo)
    if st.f_favail and inodes * 1.1 > st.f_favail:
        return f"needs {inodes:,} inodes, {st.f_favail:,} free"
    if space * 1.1 > st.f_bavail * st.f_frsize:
        return f"needs {space / 2**30:.1f} GiB, {st.f_bavail * st.f_frsize / 2**30:.1f} GiB free"
    return None


def is_ready(tree: ScaleTree) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(tree.stamp.read_text()) == tree.want() and tree.path.is_dir())
    return False


def make_tree(tree: ScaleTree) -> None:
    """Create the tree (or reuse it if its stamp says it is complete)."""
    if is_ready(tree):
        log(f"reusing the {tree.files:,}-file scale tree in {tree.path}")
        return
    tree.stamp.unlink(missing_ok=True)
    partial = tree.path.with_name(tree.path.name + ".partial")
    for old in (tree.path, partial):
        if old.exists():
            shutil.rmtree(old)
    log(f"generating a scale tree of {tree.files:,} files ({tree.entries:,} entries) ...")
    t0 = time.perf_counter()
    partial.mkdir(parents=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    k = 0
    for a in range(tree.tops):
        top = partial / f"d{a:03d}"
        top.mkdir()
        for b in range(min(LEAVES_PER_TOP, tree.leaves - a * LEAVES_PER_TOP)):
            leaf = top / f"e{b:03d}"
            leaf.mkdir()
            dfd = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for c in range(min(FILES_PER_LEAF, tree.files - k)):
                    k += 1
                    hit = k % tree.step == 0 and k // tree.step <= tree.hits
                    ext = ".hit" if hit else (".py" if c % 2 == 0 else ".txt")
                    needle = f"# {NEEDLE} here\n" if hit else ""
                    body = f"# file {k}\ndef f_{k}():\n    return {k}\n{needle}x = 'lorem'\n"
                    fd = os.open(f"m{c:02d}{ext}", flags, 0o644, dir_fd=dfd)
                    try:
                        os.write(fd, body.encode())
                    finally:
                        os.close(fd)
            finally:
                os.close(dfd)
        if a % 50 == 49:
            log(f"  {k:,} files ...")
    partial.rename(tree.path)
    os.sync()
    tree.stamp.write_text(json.dumps(tree.want()))
    log(f"  made in {time.perf_counter() - t0:.0f} s")

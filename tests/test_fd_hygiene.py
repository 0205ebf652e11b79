"""No descriptor outlives its call: the fd count is unchanged after many operations,
failures included."""

from __future__ import annotations

import contextlib
import gc
import os

from helpers import Tree, open_fd_count
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.walks import TreeWalk


def test_fd_count_unchanged_after_10000_operations(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f").write_bytes(b"data")
    (tree.root / "esc").symlink_to(tree.outside)
    (tree.root / "loop").symlink_to("loop")
    (tree.root / "in").symlink_to(tree.root / "d")
    os.mkfifo(tree.root / "fifo")
    (tree.root / "hl").hardlink_to(tree.outside / "secret.txt")

    def walk_all(walk: TreeWalk, rel: tuple[str, ...] = ()) -> None:
        for entry in walk.children(rel, "."):
            here = (*rel, entry.name)
            if entry.kind == "directory":
                walk_all(walk, here)
            elif entry.kind == "file":
                with contextlib.suppress(SandboxError), walk.open_file(here, "f"):
                    pass
            elif entry.kind == "symlink":
                walk.link_stays_inside(here, "l")

    def read(p: str) -> object:
        with sandbox.open_file(p) as f:
            return f.file.read()

    operations = [
        lambda: read("d/f"),
        lambda: read("in/f"),  # absolute link: the component walk
        lambda: read("esc/secret.txt"),
        lambda: read("loop"),
        lambda: read("fifo"),
        lambda: read("missing"),
        lambda: read("d"),
        lambda: sandbox.list_dir("d"),
        lambda: sandbox.list_dir("d/f"),
        lambda: sandbox.stat("in/f"),
        lambda: sandbox.replace_file("d/w", b"x"),
        lambda: sandbox.replace_file("fifo", b"x"),
        lambda: sandbox.append_file("hl", b"x"),
        lambda: sandbox.append_file("d/a", b"x"),
        lambda: sandbox.create_file("d/f", b"x"),
        lambda: sandbox.make_dirs("d/m/n"),
        lambda: sandbox.make_dirs("esc/m"),
        lambda: sandbox.copy_file("d/f", "d/f"),
        lambda: sandbox.rename("missing", "d/z"),
        lambda: sandbox.remove("d/m", recursive=True),
        lambda: sandbox.describe("esc"),
        lambda: sandbox.describe("in"),
        lambda: sandbox.list_dir(".", sizes=True),
        lambda: sandbox.revision("d"),
        lambda: walk_all(sandbox.walk(".")),
        lambda: sandbox.search_target("d"),
        lambda: sandbox.search_target("d/f").file.close(),  # type: ignore[union-attr]
    ]
    for operation in operations:  # warm up lazily created state
        with contextlib.suppress(SandboxError):
            operation()
    gc.collect()
    baseline = open_fd_count()
    failures = 0
    for i in range(10_000):
        try:
            operations[i % len(operations)]()
        except SandboxError:
            failures += 1
    assert failures > 3000
    gc.collect()
    assert open_fd_count() == baseline

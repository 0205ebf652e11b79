"""No descriptor outlives its call: the fd count is unchanged after many operations,
failures included."""

from __future__ import annotations

import contextlib
import gc
import os

from helpers import Tree, open_fd_count
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.sandbox import Sandbox


def test_fd_count_unchanged_after_10000_operations(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f").write_bytes(b"data")
    (tree.root / "esc").symlink_to(tree.outside)
    (tree.root / "loop").symlink_to("loop")
    (tree.root / "in").symlink_to(tree.root / "d")
    os.mkfifo(tree.root / "fifo")
    (tree.root / "hl").hardlink_to(tree.outside / "secret.txt")

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
        lambda: sandbox.remove_tree("d/m"),
        lambda: sandbox.readlink("esc"),
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

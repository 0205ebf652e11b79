"""Race: an attacker thread swaps a directory inside the root with a symlink to an
outside canary directory (renameat2 RENAME_EXCHANGE) while reads, writes, mkdirs
and listings run through the Root layer.  Zero canary reads, zero outside changes.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from helpers import CANARY, Tree, exchanging, snapshot
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.facade import Sandbox


def _attack(tree: Tree, sandbox: Sandbox, attempts: int) -> Counter[str]:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f").write_bytes(b"inside")
    (tree.outside / "dir" / "f").write_bytes(CANARY)
    (tree.root / "s").symlink_to(tree.outside / "dir")
    before = snapshot(tree.outside)

    def read() -> object:
        with sandbox.open_file("d/f") as f:
            return f.file.read()

    operations = [
        ("read", read),
        ("write", lambda: sandbox.replace_file("d/w", b"written")),
        ("create", lambda: sandbox.create_file(f"d/c{os.urandom(4).hex()}", b"c")),
        ("append", lambda: sandbox.append_file("d/log", b".")),
        ("mkdir", lambda: sandbox.make_dirs("d/x/y")),
        ("list", lambda: sandbox.list_dir("d")),
        ("stat", lambda: sandbox.stat("d/f")),
        ("copy", lambda: sandbox.copy_file("d/f", f"d/k{os.urandom(4).hex()}")),
    ]
    outcomes: Counter[str] = Counter()
    with exchanging(tree.root, "d", "s") as attacker:
        for i in range(attempts):
            _, operation = operations[i % len(operations)]
            try:
                result = operation()
            except SandboxError:
                outcomes["refused"] += 1
                continue
            outcomes["served"] += 1
            if result == CANARY or (
                isinstance(result, list) and any(e.name == "secret.txt" for e in result)
            ):
                outcomes["canary"] += 1
    outcomes["swaps"] = attacker.swaps
    assert snapshot(tree.outside) == before
    return outcomes


def test_exchange_race_never_escapes(tree: Tree, sandbox: Sandbox) -> None:
    outcomes = _attack(tree, sandbox, attempts=20_000)
    assert outcomes["canary"] == 0
    # The race was real: the attacker swapped, and both states were observed.
    assert outcomes["swaps"] > 1000
    assert outcomes["served"] > 0
    assert outcomes["refused"] > 0


@pytest.mark.slow
def test_exchange_race_never_escapes_long(tree: Tree, sandbox: Sandbox) -> None:
    outcomes = _attack(tree, sandbox, attempts=500_000)
    assert outcomes["canary"] == 0
    assert outcomes["refused"] > 0

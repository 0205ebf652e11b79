from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Tree, make_tree, snapshot
from sandboxfs.fs.sandbox import Sandbox


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return make_tree(tmp_path)


@pytest.fixture
def public_tree() -> Iterator[Tree]:
    """A tree an ordinary user can reach (pytest's own temp root is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="sandboxfs-test-"))
    base.chmod(0o755)
    try:
        yield make_tree(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def sandbox(tree: Tree) -> Sandbox:
    return tree.sandbox()


@pytest.fixture
def outside_unchanged(tree: Tree):
    """Asserts after the test that nothing outside the allowed directory changed."""
    before = snapshot(tree.outside)
    yield
    assert snapshot(tree.outside) == before

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Tree, make_tree, snapshot

from sandboxfs.sandbox import Sandbox


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return make_tree(tmp_path)


@pytest.fixture
def sandbox(tree: Tree) -> Sandbox:
    return tree.sandbox()


@pytest.fixture
def outside_unchanged(tree: Tree):
    """Asserts after the test that nothing outside the allowed directory changed."""
    before = snapshot(tree.outside)
    yield
    assert snapshot(tree.outside) == before

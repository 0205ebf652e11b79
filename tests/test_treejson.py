"""directory_tree's text, written as the tree is walked, is byte for byte what the
tree of objects serialized with ``json.dumps(indent=2, ensure_ascii=False)`` is."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxfs.core.names import quote_names
from sandboxfs.core.traversal import Bounds, Traversal
from sandboxfs.fs.entries import Entry
from sandboxfs.tools.treejson import tree_json

#: A directory: its entries in order, each a name and, for a directory, what it holds
#: (None: it cannot be read).
Node = list[tuple[str, Any]]

names = st.text(min_size=1, max_size=8).filter(lambda n: "/" not in n and "\0" not in n)
trees: st.SearchStrategy[Node] = st.recursive(
    st.lists(st.tuples(names, st.just("file")), max_size=4),
    lambda inner: st.lists(
        st.tuples(names, st.one_of(inner, st.none(), st.just("file"))), max_size=4
    ),
    max_leaves=40,
)


def _entries(node: Node) -> list[Entry]:
    return [Entry(name, "file" if kind == "file" else "directory") for name, kind in node]


def _at(root: Node, rel: tuple[str, ...]) -> Any:
    node: Any = root
    for name in rel:
        node = dict(node)[name]
    return node


def _walk(root: Node, depth: int | None, read: list[tuple[str, ...]]) -> Traversal[Any, Entry]:
    """The traversal of ``root`` as directory_tree walks a tree (``read``: each
    directory below the start in the order it is read)."""

    def listing(rel: tuple[str, ...], _: tuple[str, ...]) -> list[Entry]:
        if rel:
            read.append(rel)
        node = _at(root, rel)
        if node is None:
            raise PermissionError("EACCES")
        return _entries(node)

    return Traversal(
        (),
        bounds=Bounds(depth or 1000, 10**6),
        listing=listing,
        is_dir=lambda entry: entry.kind == "directory",
        opening=lambda parent, rel, entry: rel,
        closing=lambda rel: None,
        unreadable=lambda error: True,
        batched=True,
    )


def _oracle(root: Node, depth: int | None) -> str:
    def build(node: Node, level: int) -> list[dict[str, Any]]:
        shown = quote_names([name for name, _ in node])
        out: list[dict[str, Any]] = []
        for (_, kind), name in zip(node, shown, strict=True):
            if kind == "file":
                out.append({"name": name, "type": "file"})
                continue
            item: dict[str, Any] = {"name": name, "type": "directory"}
            if depth is None or level + 1 < depth:
                item["children"] = [] if kind is None else build(kind, level + 1)
                if kind is None:
                    item["error"] = "EACCES"
            out.append(item)
        return out

    return json.dumps(build(root, 0), indent=2, ensure_ascii=False)


def _unique(node: Node) -> Node:
    seen: set[str] = set()
    kept = []
    for name, kind in node:
        if name not in seen:
            seen.add(name)
            kept.append((name, _unique(kind) if isinstance(kind, list) else kind))
    return kept


@settings(max_examples=300, deadline=None)
@given(trees, st.one_of(st.none(), st.integers(min_value=1, max_value=4)))
def test_the_text_is_the_serialized_tree(tree: Node, depth: int | None) -> None:
    root = _unique(tree)
    read: list[tuple[str, ...]] = []
    text = tree_json(_walk(root, depth, read), str)
    assert text == _oracle(root, depth)
    assert json.loads(text) == json.loads(_oracle(root, depth))
    # Directories are read depth first, in the order the text shows them.
    assert read == _depth_first(root, (), depth)


def _depth_first(node: Node, rel: tuple[str, ...], depth: int | None) -> list[tuple[str, ...]]:
    order: list[tuple[str, ...]] = []
    if depth is not None and len(rel) + 1 >= depth:
        return order
    for name, kind in node:
        if kind != "file":
            order.append((*rel, name))
            if kind is not None:
                order += _depth_first(kind, (*rel, name), depth)
    return order


def test_names_that_need_escapes() -> None:
    root: Node = [
        ('quo"te', "file"),
        ("back\\slash", "file"),
        ("new\nline", []),
        ("tab\tand\u2028sep", None),
        ("é✓😀", [("\x7f", "file")]),
    ]
    assert tree_json(_walk(root, None, []), str) == _oracle(root, None)
    assert tree_json(_walk([], None, []), str) == "[]"

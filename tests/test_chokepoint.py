"""The chokepoint's own promises: leaves and listed names are never followed, a
reopened handle is the same object, a symlink's text is resolved from the
directory that holds it, and a description never mixes two links."""

from __future__ import annotations

import errno
import os
from collections import Counter

import pytest

from helpers import CANARY, Tree, exchanging
from sandboxfs.core.chokepoint import Location
from sandboxfs.core.errors import AccessDenied, Conflict, SandboxError


def test_a_leaf_is_never_followed_even_when_it_stays_inside(tree: Tree) -> None:
    """Exact opens (a leaf under its parent, a listed child) refuse every symlink,
    also one that points right next to it: NO_SYMLINKS is the one mechanism."""
    (tree.root / "target.txt").write_bytes(b"inside")
    (tree.root / "sub").mkdir()
    (tree.root / "link").symlink_to("target.txt")
    (tree.root / "dlink").symlink_to("sub")
    resolver = tree.sandbox().resolver
    with resolver.parent("link") as parent:
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND, os.O_RDWR):
            with pytest.raises(OSError) as caught:
                os.close(parent.open(flags))
            assert caught.value.errno == errno.ELOOP
        with parent.entry() as entry:  # the link itself, as an O_PATH handle
            assert entry.is_symlink and entry.readlink() == "target.txt"
    with resolver.open_directory(".") as directory:
        with pytest.raises(OSError) as caught:
            directory.child("dlink", "dlink").close()
        assert caught.value.errno == errno.ELOOP
        directory.child("sub", "sub").close()


def test_an_exact_location_refuses_a_symlink_anywhere_in_it(tree: Tree) -> None:
    (tree.root / "sub").mkdir()
    (tree.root / "sub" / "f").write_bytes(b"x")
    (tree.root / "dlink").symlink_to("sub")
    resolver = tree.sandbox().resolver
    root = resolver.locate(".").root
    os.close(resolver.open_exact(Location(root, ("sub", "f")), os.O_PATH, "sub/f"))
    with pytest.raises(SandboxError, match="ELOOP"):
        resolver.open_exact(Location(root, ("dlink", "f")), os.O_PATH, "dlink/f")
    with pytest.raises(AccessDenied):
        resolver.open_exact(Location(root, ("..", "outside")), os.O_PATH, "x")


def test_a_reopened_handle_is_the_same_object_or_nothing(tree: Tree) -> None:
    (tree.root / "f").write_bytes(b"old")
    (tree.root / "g").write_bytes(b"new")
    resolver = tree.sandbox().resolver
    with resolver.resolve("f") as handle:
        os.close(handle.reopen(os.O_RDONLY))
        os.rename(tree.root / "g", tree.root / "f")
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(Conflict):
            handle.reopen(os.O_RDONLY)
        assert len(os.listdir("/proc/self/fd")) == before


def test_a_links_text_is_resolved_from_its_own_directory(tree: Tree) -> None:
    """``..`` in a link's text is physical: relative to the directory holding the
    link, even when the path reached that directory through another symlink."""
    (tree.root / "a" / "b").mkdir(parents=True)
    (tree.root / "a" / "c").write_bytes(b"a/c")
    (tree.root / "c").write_bytes(b"top c")
    (tree.root / "a" / "b" / "l").symlink_to("../c")
    (tree.root / "s").symlink_to("a/b")
    resolver = tree.sandbox().resolver
    with resolver.resolve("s/l", follow=False) as link:
        base = resolver.canonical_handle(link).parent
        assert base.rel == ("a", "b")
        with (
            resolver.resolve_link(base, link.readlink(), "s/l") as target,
            os.fdopen(target.reopen(os.O_RDONLY), "rb") as f,
        ):
            assert f.read() == b"a/c"
    with resolver.follow_leaf(resolver.parent("s/l")) as parent:
        assert parent.leaf == "c" and parent.dir.location.rel in (("a",), ("a", "b", ".."))


def test_a_chain_of_links_is_followed_link_by_link_and_bounded(tree: Tree) -> None:
    (tree.root / "z").write_bytes(b"end")
    (tree.root / "y").symlink_to("z")
    (tree.root / "x").symlink_to(str(tree.root / "y"))  # absolute, inside
    (tree.root / "loop1").symlink_to("loop2")
    (tree.root / "loop2").symlink_to("loop1")
    (tree.root / "out").symlink_to("y/../../outside/secret.txt")
    resolver = tree.sandbox().resolver
    with resolver.follow_leaf(resolver.parent("x")) as parent:
        assert parent.leaf == "z"
    with pytest.raises(SandboxError, match="ELOOP"):
        resolver.follow_leaf(resolver.parent("loop1")).close()
    with pytest.raises(SandboxError):
        resolver.follow_leaf(resolver.parent("out")).close()


def test_a_description_never_mixes_two_links(tree: Tree) -> None:
    """An attacker keeps exchanging ``l`` between a link inside and a link outside.
    Every description shows the text it resolved, and decides "inside" about that
    text: never the outside text, never the outside target's size."""
    (tree.root / "inside.txt").write_bytes(b"x" * 7)
    outside_text = str(tree.outside / "secret.txt")
    (tree.root / "l").symlink_to("inside.txt")
    (tree.root / "other").symlink_to(outside_text)
    sandbox = tree.sandbox()
    seen: Counter[str] = Counter()
    with exchanging(tree.root, "l", "other") as attacker:
        while (min(seen["inside"], seen["outside"]) < 50 or attacker.swaps < 100) and sum(
            seen.values()
        ) < 500_000:
            try:
                found = sandbox.describe("l")
            except SandboxError:
                seen["refused"] += 1
                continue
            assert str(tree.outside) not in repr(found)
            if found.target_inside:
                assert found.link_text == "inside.txt" and found.info.size == 7, found
                seen["inside"] += 1
            else:
                assert found.link_text is None and found.size_hidden, found
                seen["outside"] += 1
    # The race was real: the attacker swapped, and both states were described.
    assert attacker.swaps >= 100
    assert seen["inside"] >= 50 and seen["outside"] >= 50, seen
    assert (tree.outside / "secret.txt").read_bytes() == CANARY

"""One escape table applied to every operation (after Go's os.Root tests).

Each case plants something inside the allowed directory that tries to reach
the outside canaries; every operation must refuse it and leave the outside
exactly as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import CANARY, Tree, snapshot
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import AccessDenied, SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.sandbox import Sandbox

Setup = Callable[[Tree], str]


def _relative_dotdot(t: Tree) -> str:
    return "../outside/secret.txt"


def _absolute_outside(t: Tree) -> str:
    return str(t.outside / "secret.txt")


def _prefix_sibling(t: Tree) -> str:
    evil = t.base / "root-evil"
    evil.mkdir()
    (evil / "secret.txt").write_bytes(CANARY)
    return str(evil / "secret.txt")


def _dotdot_inside_absolute(t: Tree) -> str:
    return str(t.root) + "/../outside/secret.txt"


def _link_relative_file(t: Tree) -> str:
    (t.root / "l").symlink_to("../outside/secret.txt")
    return "l"


def _link_absolute_file(t: Tree) -> str:
    (t.root / "l").symlink_to(t.outside / "secret.txt")
    return "l"


def _link_dir_then_child(t: Tree) -> str:
    (t.root / "d").symlink_to(t.outside / "dir")
    return "d/secret.txt"


def _link_chain(t: Tree) -> str:
    (t.root / "l1").symlink_to("l2")
    (t.root / "l2").symlink_to("l3")
    (t.root / "l3").symlink_to(t.outside / "secret.txt")
    return "l1"


def _link_to_parent(t: Tree) -> str:
    (t.root / "up").symlink_to("..")
    return "up/outside/secret.txt"


def _link_deep_climb(t: Tree) -> str:
    (t.root / "a" / "b").mkdir(parents=True)
    (t.root / "a" / "b" / "l").symlink_to("../../../outside/secret.txt")
    return "a/b/l"


def _link_through_inside_link_then_out(t: Tree) -> str:
    (t.root / "in").mkdir()
    (t.root / "hop").symlink_to("in")
    (t.root / "in" / "out").symlink_to("../../outside")
    return "hop/out/secret.txt"


def _magic_link_proc_root(t: Tree) -> str:
    (t.root / "m").symlink_to("/proc/self/root" + str(t.outside / "secret.txt"))
    return "m"


def _magic_link_proc_fd(t: Tree) -> str:
    fd = os.open(t.outside / "secret.txt", os.O_RDONLY)  # deliberately kept open
    (t.root / "m").symlink_to(f"/proc/self/fd/{fd}")
    return "m"


def _link_to_root_parent_absolute(t: Tree) -> str:
    (t.root / "l").symlink_to(str(t.root) + "/..")
    return "l/outside/secret.txt"


def _dangling_to_outside(t: Tree) -> str:
    (t.root / "l").symlink_to("../outside/created-by-sandboxfs")
    return "l"


def _trailing_slash_link(t: Tree) -> str:
    (t.root / "d").symlink_to(t.outside / "dir")
    return "d/"


CASES: dict[str, Setup] = {
    "relative-dotdot": _relative_dotdot,
    "absolute-outside": _absolute_outside,
    "prefix-sibling": _prefix_sibling,
    "dotdot-inside-absolute": _dotdot_inside_absolute,
    "link-relative-file": _link_relative_file,
    "link-absolute-file": _link_absolute_file,
    "link-dir-then-child": _link_dir_then_child,
    "link-chain": _link_chain,
    "link-to-parent": _link_to_parent,
    "link-deep-climb": _link_deep_climb,
    "link-inside-then-out": _link_through_inside_link_then_out,
    "magic-proc-root": _magic_link_proc_root,
    "magic-proc-fd": _magic_link_proc_fd,
    "link-root-parent-absolute": _link_to_root_parent_absolute,
    "dangling-to-outside": _dangling_to_outside,
    "trailing-slash-link": _trailing_slash_link,
}


def _read(s: Sandbox, p: str) -> object:
    with s.open_file(p) as f:
        return f.file.read()


#: Operations that follow the path to its end: every escape must be AccessDenied
#: (or, for a dangling escape, never create anything outside).
FOLLOWING: dict[str, Callable[[Sandbox, str], object]] = {
    "read": _read,
    "stat": lambda s, p: s.stat(p),
    "list": lambda s, p: s.list_dir(p),
    "replace": lambda s, p: s.replace_file(p, b"pwned"),
    "append": lambda s, p: s.append_file(p, b"pwned"),
    "make_dirs": lambda s, p: s.make_dirs(p + "/new"),
    "copy-from": lambda s, p: s.copy_file(p, "copied"),
    "directory": lambda s, p: s.directory(p),
    "create-below": lambda s, p: s.create_file(p + "/new", b"pwned"),
}

#: Operations on the final name itself (links not followed): may succeed on the
#: link inside, but never touch the outside.
LEAF: dict[str, Callable[[Sandbox, str], object]] = {
    "create": lambda s, p: s.create_file(p, b"pwned"),
    "copy-to": lambda s, p: s.copy_file("inside.txt", p),
    "rename-to": lambda s, p: s.rename("inside.txt", p),
    "rename-from": lambda s, p: s.rename(p, "moved"),
    "unlink": lambda s, p: s.unlink(p),
    "remove-tree": lambda s, p: s.remove_tree(p),
    "rmdir": lambda s, p: s.rmdir(p),
}


@pytest.mark.parametrize("operation", sorted(FOLLOWING))
@pytest.mark.parametrize("case", sorted(CASES))
def test_following_operations_refuse_escapes(tree: Tree, case: str, operation: str) -> None:
    path = CASES[case](tree)
    before = snapshot(tree.outside)
    sandbox = tree.sandbox()
    with pytest.raises(SandboxError) as caught:
        result = FOLLOWING[operation](sandbox, path)
        assert CANARY not in repr(result)
    assert isinstance(caught.value, AccessDenied), caught.value
    assert path in str(caught.value) or path.rstrip("/") in str(caught.value)
    assert str(tree.outside) not in str(caught.value).replace(path, "")
    assert snapshot(tree.outside) == before


@pytest.mark.parametrize("operation", sorted(LEAF))
@pytest.mark.parametrize("case", sorted(CASES))
def test_leaf_operations_never_touch_outside(tree: Tree, case: str, operation: str) -> None:
    path = CASES[case](tree)
    (tree.root / "inside.txt").write_bytes(b"inside")
    before = snapshot(tree.outside)
    sandbox = tree.sandbox()
    try:
        LEAF[operation](sandbox, path)
    except SandboxError as exc:
        assert str(tree.outside) not in str(exc).replace(path, "")
    assert snapshot(tree.outside) == before


def test_error_messages_never_reveal_link_targets_or_the_allow_list(tree: Tree) -> None:
    (tree.root / "l").symlink_to(tree.outside / "secret.txt")
    sandbox = tree.sandbox()
    with pytest.raises(AccessDenied) as caught:
        _read(sandbox, "l")
    message = str(caught.value)
    assert "outside" not in message.replace("outside allowed", "")
    assert str(tree.root) not in message


def test_outside_path_reached_through_allowed_root_alias(tree: Tree) -> None:
    """An allowed directory given through a symlink answers to both of its names."""
    alias = tree.base / "alias"
    alias.symlink_to(tree.root)
    (tree.root / "f").write_bytes(b"via alias")
    sandbox = Sandbox(Resolver(AllowList.of([Root.open(str(alias))])))
    assert _read(sandbox, str(alias / "f")) == b"via alias"
    assert _read(sandbox, str(tree.root / "f")) == b"via alias"
    with pytest.raises(AccessDenied):
        _read(sandbox, str(tree.base / "outside" / "secret.txt"))


def test_root_as_allowed_directory_still_refuses_magic_links(tree: Tree) -> None:
    """Even with "/" allowed, /proc magic links are refused."""
    sandbox = tree.sandbox(Path("/"))
    fd = os.open(tree.outside / "secret.txt", os.O_RDONLY)
    try:
        with pytest.raises(AccessDenied):
            _read(sandbox, f"/proc/self/fd/{fd}")
        with pytest.raises(AccessDenied):
            _read(sandbox, "/proc/self/root/etc/hostname")
        with pytest.raises(AccessDenied):
            _read(sandbox, f"/proc/{os.getpid()}/root/etc/hostname")
    finally:
        os.close(fd)

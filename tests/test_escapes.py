"""One escape table applied to every operation (after Go's os.Root tests).

Each case plants something inside the allowed directory that tries to reach
the outside canaries.  The operations are not listed here: they are every
public operation of the façade, with the path parameters each declares
(``FOLLOW`` or ``ENTRY``), and every public operation of a walk.  Each is
attacked through each of its paths, with the escape as the path itself and as
a directory on the way; every one must refuse or stay inside, and leave the
outside exactly as it was.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import CANARY, Tree, snapshot
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.errors import AccessDenied, SandboxError
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.files import OpenFile
from sandboxfs.fs.journalstore import JournalStore
from sandboxfs.fs.patches import FileChange
from sandboxfs.fs.recording import Recording
from sandboxfs.fs.sandbox import ENTRY, FOLLOW, Sandbox
from sandboxfs.fs.walks import TreeWalk

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


# -- the table, generated from the façade's declarations ----------------------------


def _public(cls: type, skipped: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in skipped
    }


OPERATIONS = _public(Sandbox, Sandbox.NOT_OPERATIONS)


def _extra_arguments(method: Callable[..., Any], paths: int) -> list[object]:
    """Values for the positional parameters after the paths (the data to write)."""
    positional = [
        p
        for p in inspect.signature(method).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.name != "self"
    ]
    extra: list[object] = []
    for parameter in positional[paths:]:
        assert parameter.annotation in ("bytes", bytes), (method, parameter)
        extra.append(b"pwned")
    return extra


#: (operation, index of the path parameter attacked, its role)
TARGETS = [
    (name, index, role)
    for name, method in sorted(OPERATIONS.items())
    for index, role in enumerate(getattr(method, "path_roles", ()))
]


def test_every_public_operation_declares_its_paths() -> None:
    """A new public operation cannot escape the table: it must declare its path
    parameters (and so is attacked below), or be listed as taking none."""
    undeclared = [name for name, m in OPERATIONS.items() if not hasattr(m, "path_roles")]
    assert undeclared == []
    for name, method in OPERATIONS.items():
        positional = [
            p.name
            for p in inspect.signature(method).parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.name != "self"
        ]
        roles = method.path_roles  # type: ignore[attr-defined]
        assert positional[: len(roles)] and all(
            n in ("path", "source", "destination") for n in positional[: len(roles)]
        ), name
    assert {name for name, _, _ in TARGETS} == set(OPERATIONS)


def _consume(result: object) -> object:
    """Everything an operation's result can give a tool, read out."""
    if isinstance(result, OpenFile):
        with result:
            return result.file.read()
    if isinstance(result, TreeWalk):
        return _walk_everything(result)
    return result


def _walk_everything(walk: TreeWalk, rel: tuple[str, ...] = ()) -> list[object]:
    seen: list[object] = []
    for entry in walk.children(rel, "/".join(rel) or "."):
        here = (*rel, entry.name)
        seen.append(entry)
        if entry.kind == "directory":
            seen.extend(_walk_everything(walk, here))
        elif entry.kind == "file":
            with walk.open_file(here, "/".join(here)) as f:
                seen.append(f.file.read())
        elif entry.kind == "symlink":
            seen.append(walk.link_stays_inside(here, "/".join(here)))
    return seen


def _call(sandbox: Sandbox, operation: str, index: int, path: str) -> object:
    method = OPERATIONS[operation]
    roles = method.path_roles  # type: ignore[attr-defined]
    paths = ["inside.txt" if i == 0 else f"fresh-{i}" for i in range(len(roles))]
    paths[index] = path
    return _consume(getattr(sandbox, operation)(*paths, *_extra_arguments(method, len(roles))))


def _refused_cleanly(tree: Tree, path: str, caught: SandboxError) -> None:
    message = str(caught)
    assert isinstance(caught, AccessDenied), caught
    assert path in message or path.rstrip("/") in message
    assert str(tree.outside) not in message.replace(path, "")


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_operation_refuses_escapes(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    """The escape as the path itself: followed, it is refused; as an entry, the link
    inside may be acted on, but nothing outside is read or changed."""
    path = CASES[case](tree)
    (tree.root / "inside.txt").write_bytes(b"inside")
    before = snapshot(tree.outside)
    sandbox = tree.sandbox()
    try:
        result = _call(sandbox, operation, index, path)
    except SandboxError as exc:
        if role == FOLLOW:
            _refused_cleanly(tree, path, exc)
        assert str(tree.outside) not in str(exc).replace(path, "")
    else:
        assert role == ENTRY, f"{operation} followed {path!r} and did not refuse it"
        assert CANARY not in repr(result).encode()
        assert str(tree.outside) not in repr(result)
    assert snapshot(tree.outside) == before


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_operation_refuses_escapes_in_a_parent(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    """The escape as a directory on the way: every operation refuses it."""
    path = CASES[case](tree).rstrip("/") + "/below"
    (tree.root / "inside.txt").write_bytes(b"inside")
    before = snapshot(tree.outside)
    sandbox = tree.sandbox()
    with pytest.raises(SandboxError) as caught:
        result = _call(sandbox, operation, index, path)
        assert CANARY not in repr(result).encode()
    _refused_cleanly(tree, path, caught.value)
    assert snapshot(tree.outside) == before


WALK_OPERATIONS = _public(TreeWalk, ("location",))
RELATIVE_CASES = sorted(
    name for name in CASES if not name.startswith(("absolute", "prefix", "dotdot-inside"))
)


def test_every_walk_operation_is_attacked() -> None:
    assert set(WALK_OPERATIONS) == {"children", "directory", "open_file", "link_stays_inside"}


@pytest.mark.parametrize("operation", sorted(WALK_OPERATIONS))
@pytest.mark.parametrize("case", RELATIVE_CASES)
def test_walk_operations_never_leave_the_tree(tree: Tree, case: str, operation: str) -> None:
    """Below a walk's start, names come from listings: each is opened exactly (no
    symlink followed at all), so a planted link is never a way out."""
    rel = tuple(part for part in CASES[case](tree).split("/") if part)
    before = snapshot(tree.outside)
    walk = tree.sandbox().walk(".")
    try:
        result = getattr(walk, operation)(rel, "/".join(rel))
    except SandboxError as exc:
        assert str(tree.outside) not in str(exc)
    else:
        seen = _consume(result)
        assert CANARY not in repr(seen).encode() and result is not True
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


# -- the change journal ------------------------------------------------------------------
#
# The journal lies outside every allowed directory (beside the outside canaries) and
# holds a canary as a kept object and in a record; what it held must stay exactly as it
# was (an operation that legitimately changes something inside adds a record of its own).  Every operation, with the call journaled (so the capture code runs too), is
# attacked through every name of it: absolute, relative, through symlinks of both kinds,
# a chain, a link to its parent, the magic links of the descriptors the server holds.


def _journal_tree(t: Tree) -> JournalStore:
    journal = t.base / "journal"
    journal.mkdir(exist_ok=True)
    store = JournalStore(Root.open(str(journal)))
    recording = Recording(store, tool="test")
    recording.add(
        {"op": "write", "path": "x", "root": "/x", "rel": ["x"], **recording.keep_bytes(CANARY)}
    )
    recording.finish()
    t.journal_store = store  # type: ignore[attr-defined]
    return store


def _journal_object(t: Tree) -> str:
    store = _journal_tree(t)
    digest = next(iter(store.index()[0].objects))
    return f"{store.path}/objects/{digest}"


JOURNAL_CASES: dict[str, Setup] = {
    "journal-absolute": lambda t: _journal_tree(t).path,
    "journal-record-absolute": lambda t: _journal_tree(t).path + "/entries/000000000001.json",
    "journal-object-absolute": _journal_object,
    "journal-relative": lambda t: (_journal_tree(t), "../journal/entries")[1],
    "journal-link-absolute": lambda t: (
        (t.root / "j").symlink_to(_journal_tree(t).path),
        "j/entries/000000000001.json",
    )[1],
    "journal-link-relative": lambda t: (
        _journal_tree(t),
        (t.root / "j").symlink_to("../journal"),
        "j/lock",
    )[2],
    "journal-object-link": lambda t: ((t.root / "o").symlink_to(_journal_object(t)), "o")[1],
    "journal-link-chain": lambda t: (
        (t.root / "c2").symlink_to(_journal_object(t)),
        (t.root / "c1").symlink_to("c2"),
        "c1",
    )[2],
    "journal-parent-link": lambda t: (
        _journal_tree(t),
        (t.root / "up").symlink_to(".."),
        "up/journal/sandboxfs-journal",
    )[2],
    "journal-magic-fd": lambda t: (
        (t.root / "m").symlink_to(f"/proc/self/fd/{_journal_tree(t).root.fd}/entries"),
        "m",
    )[1],
    "journal-magic-lock-fd": lambda t: (
        (t.root / "m").symlink_to(f"/proc/self/fd/{_journal_tree(t)._lock_fd}"),
        "m",
    )[1],
}


def _journaled(tree: Tree) -> Sandbox:
    store = getattr(tree, "journal_store", None) or _journal_tree(tree)
    return tree.sandbox().recording(Recording(store, tool="attack"))


def _untouched(tree: Tree) -> dict[str, object]:
    """The outside and what the journal held before the attack."""
    journal = snapshot(tree.base / "journal")
    return {
        "outside": snapshot(tree.outside),
        "journal": {
            k: v
            for k, v in journal.items()
            if (k != "entries" and "/0000000000" not in k) or k.endswith("01.json")
        },
    }


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(JOURNAL_CASES))
def test_every_operation_refuses_the_journal(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    """The journal by every name, as the path itself: never read, changed or shown."""
    path = JOURNAL_CASES[case](tree)
    (tree.root / "inside.txt").write_bytes(b"inside")
    sandbox = _journaled(tree)
    before = _untouched(tree)
    try:
        result = _call(sandbox, operation, index, path)
    except SandboxError as exc:
        if role == FOLLOW:
            _refused_cleanly(tree, path, exc)
        assert str(tree.outside) not in str(exc).replace(path, "")
    else:
        assert role == ENTRY, f"{operation} followed {path!r} into the journal"
        assert CANARY not in repr(result).encode()
        assert str(tree.outside) not in repr(result)
    finally:
        sandbox.journal.finish()  # type: ignore[union-attr]
    assert _untouched(tree) == before
    for record in _records(tree):
        for step in record["steps"]:
            assert {step["root"], step.get("to", step)["root"]} == {str(tree.root)}


@pytest.mark.parametrize(("operation", "index", "role"), TARGETS)
@pytest.mark.parametrize("case", sorted(JOURNAL_CASES))
def test_every_operation_refuses_the_journal_in_a_parent(
    tree: Tree, case: str, operation: str, index: int, role: str
) -> None:
    """The journal by every name, as a directory on the way: refused."""
    path = JOURNAL_CASES[case](tree).rstrip("/") + "/below"
    (tree.root / "inside.txt").write_bytes(b"inside")
    sandbox = _journaled(tree)
    before = _untouched(tree)
    with pytest.raises(SandboxError) as caught:
        result = _call(sandbox, operation, index, path)
        assert CANARY not in repr(result).encode()
    sandbox.journal.finish()  # type: ignore[union-attr]
    _refused_cleanly(tree, path, caught.value)
    assert _untouched(tree) == before
    assert [item.id for item in tree.journal_store.index()] == [1]  # type: ignore[attr-defined]


def _records(tree: Tree) -> list[dict[str, Any]]:
    """Every record the attack's operation added (their places must all be inside)."""
    store: JournalStore = tree.journal_store  # type: ignore[attr-defined]
    return [store.record(item.id) or {} for item in store.index() if item.id != 1]


def test_the_journal_cases_cover_every_name_kind() -> None:
    """Absolute, relative, symlinked (absolute, relative, chained, via a parent) and
    magic-link names of the journal, its records, its objects and its lock."""
    assert len(JOURNAL_CASES) >= 11


# -- apply_changes: every file of a patch, in every role ------------------------------------
#
# The façade's apply_changes takes a list of files (so it is not an operation of the table
# above): each escape case is the path of one file of a patch, in each role a file can have,
# after a legitimate change to a file inside.  The attack claims the outside canary's very
# bytes as what the file holds, so only the resolution stands in the way.  It must be refused
# (or act only inside), leave the outside as it was, and, when refused, change nothing at all.

PATCH_ROLES: dict[str, Callable[[str], FileChange]] = {
    "modify": lambda p: FileChange(p, CANARY, b"pwned"),
    "create": lambda p: FileChange(p, None, b"pwned"),
    "delete": lambda p: FileChange(p, CANARY, None),
    "move-source": lambda p: FileChange(p, CANARY, None, to="fresh"),
    "move-destination": lambda p: FileChange("inside.txt", b"inside", None, to=p),
    "move-destination-rewritten": lambda p: FileChange("inside.txt", b"inside", b"pwned", to=p),
}


@pytest.mark.parametrize("role", sorted(PATCH_ROLES))
@pytest.mark.parametrize("below", [False, True])
@pytest.mark.parametrize("case", sorted(CASES) + sorted(JOURNAL_CASES))
def test_every_file_of_a_patch_refuses_escapes(
    tree: Tree, case: str, below: bool, role: str
) -> None:
    path = {**CASES, **JOURNAL_CASES}[case](tree)
    if below:
        path = path.rstrip("/") + "/below"
    (tree.root / "inside.txt").write_bytes(b"inside")
    (tree.root / "first.txt").write_bytes(b"first")
    sandbox = _journaled(tree)
    before = _untouched(tree)
    changes = [FileChange("first.txt", b"first", b"changed"), PATCH_ROLES[role](path)]
    refused: SandboxError | None = None
    try:
        sandbox.apply_changes(changes)
    except SandboxError as exc:
        refused = exc
        assert str(tree.outside) not in str(exc).replace(path, "")
        assert (tree.root / "first.txt").read_bytes() == b"first"  # all or nothing
    finally:
        sandbox.journal.finish()  # type: ignore[union-attr]
    if below or role == "modify":  # through the escape, or following it: always refused
        assert isinstance(refused, AccessDenied), (case, role, refused)
    assert _untouched(tree) == before
    assert CANARY not in b"".join(
        p.read_bytes() for p in tree.root.rglob("*") if p.is_file() and not p.is_symlink()
    )

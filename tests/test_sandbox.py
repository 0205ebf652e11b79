"""The Root layer, operation by operation: typical use and every failure path.

Real files and real syscalls; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import sandboxfs.fs.trees as trees_module
from helpers import CANARY, Tree, in_child, run_as_nobody, snapshot
from sandboxfs.core.chokepoint import Location
from sandboxfs.core.errors import (
    AccessDenied,
    AlreadyExists,
    Conflict,
    DirectoryNotEmpty,
    HardLinked,
    IsADirectory,
    LimitExceeded,
    NotADirectory,
    NotARegularFile,
    NotFound,
    PermissionDenied,
    SandboxError,
    Unsupported,
)
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import OpenFile, Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.fs.operation import Change
from sandboxfs.fs.revisions import (
    ABSENT,
    SameBytes,
    content_revision,
    describe_entry,
    holds_exactly,
    stat_key,
    tree_revision,
)
from sandboxfs.fs.writes import Rewrite, Rewriter
from sandboxfs.tools import CallContext
from sandboxfs.tools.reading import whole_bytes
from sandboxfs.tools.writing import edit_file, move_file


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A blocked open (a FIFO without O_NONBLOCK) fails the test instead of hanging it."""

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError("operation blocked")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def read(sandbox: Sandbox, path: str) -> bytes:
    with sandbox.open_file(path) as f:
        return f.file.read()


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if "sandboxfs" in name)


# -- reading --------------------------------------------------------------------


def test_reads_regular_files_by_relative_and_absolute_path(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "a.txt").write_bytes(b"alpha")
    assert read(sandbox, "a.txt") == b"alpha"
    assert read(sandbox, str(tree.root / "a.txt")) == b"alpha"
    assert read(sandbox, str(tree.root) + "//./a.txt") == b"alpha"


def test_reads_through_symlinks_that_stay_inside(tree: Tree) -> None:
    other = tree.base / "other"
    other.mkdir()
    (other / "o.txt").write_bytes(b"other root")
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f.txt").write_bytes(b"inside")
    (tree.root / "rel").symlink_to("d/f.txt")
    (tree.root / "d" / "up").symlink_to("../d/f.txt")
    (tree.root / "abs").symlink_to(tree.root / "d" / "f.txt")
    (tree.root / "cross").symlink_to(other / "o.txt")
    (tree.root / "chain").symlink_to("abs")
    sandbox = tree.sandbox(other)
    assert read(sandbox, "rel") == b"inside"
    assert read(sandbox, "d/up") == b"inside"
    assert read(sandbox, "abs") == b"inside"
    assert read(sandbox, "chain") == b"inside"
    assert read(sandbox, "cross") == b"other root"


def test_relative_link_resolves_dotdot_physically(tree: Tree, sandbox: Sandbox) -> None:
    # l -> b/c/../x: the kernel resolves ".." after "c" (a symlink to "d/e") physically.
    (tree.root / "d" / "e").mkdir(parents=True)
    (tree.root / "d" / "x").write_bytes(b"physical")
    (tree.root / "b").mkdir()
    (tree.root / "b" / "c").symlink_to("../d/e")
    (tree.root / "abs").symlink_to(str(tree.root / "b" / "c") + "/../x")
    (tree.root / "l").symlink_to("b/c/../x")
    assert read(sandbox, "l") == b"physical"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_special_files_are_refused_without_blocking(
    tree: Tree, sandbox: Sandbox, kind: str
) -> None:
    target = tree.root / "special"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    else:
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null
    with pytest.raises(NotARegularFile):
        read(sandbox, "special")
    (tree.root / "link").symlink_to("special")
    with pytest.raises(NotARegularFile):
        read(sandbox, "link")


def test_read_errors_name_the_request(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "dir").mkdir()
    (tree.root / "f").write_bytes(b"")
    with pytest.raises(NotFound, match=r"missing\.txt"):
        read(sandbox, "missing.txt")
    with pytest.raises(IsADirectory):
        read(sandbox, "dir")
    with pytest.raises(NotADirectory):
        read(sandbox, "f/below")
    with pytest.raises(NotFound):
        read(sandbox, "missing-dir/x")


def test_reads_never_fail_while_another_writer_replaces_the_file(
    tree: Tree, sandbox: Sandbox
) -> None:
    """An atomic replace between the O_PATH probe and the open is not an error: the
    read returns the old or the new content, whole."""
    target = tree.root / "counter"
    target.write_text("old")
    stop = threading.Event()

    def replacer() -> None:
        staged = tree.root / "staged"
        turn = 0
        while not stop.is_set():
            turn += 1
            staged.write_text("new" if turn % 2 else "old")
            os.replace(staged, target)

    attacker = threading.Thread(target=replacer)
    attacker.start()
    try:
        seen = {read(sandbox, "counter") for _ in range(3000)}
    finally:
        stop.set()
        attacker.join()
    assert seen <= {b"old", b"new"}


def test_unreadable_file_is_permission_denied(tree: Tree, sandbox: Sandbox) -> None:
    secret = tree.root / "private.txt"
    secret.write_bytes(b"mine")
    secret.chmod(0o600)
    tree.root.chmod(0o755)
    tree.base.chmod(0o755)
    with pytest.raises(PermissionDenied):
        run_as_nobody(lambda: read(sandbox, "private.txt"))


def test_stat_follows_or_describes_the_link(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "f").write_bytes(b"12345")
    (tree.root / "l").symlink_to("f")
    assert sandbox.stat("l").size == 5
    assert stat.S_ISLNK(sandbox.stat("l", follow=False).mode)
    assert stat.S_ISDIR(sandbox.stat(str(tree.root)).mode)


def test_list_dir_in_byte_order_without_following(tree: Tree, sandbox: Sandbox) -> None:
    for name in ["b", "B", "a", "_", "é"]:
        (tree.root / name).write_bytes(b"")
    (tree.root / "sub").mkdir()
    (tree.root / "link").symlink_to(tree.outside)
    os.mkfifo(tree.root / "fifo")
    os.mkdir(os.path.join(os.fsencode(tree.root), b"\xff-not-utf8"))
    expected = ["B", "_", "a", "b", "fifo", "link", "sub", "é", "\udcff-not-utf8"]
    # The plain listing (kinds from the directory, read and sorted in C) and the one
    # with each entry's lstat (sorted in Python) agree on names, order and kinds.
    plain = sandbox.list_dir(str(tree.root)).entries
    stat_ed = sandbox.list_dir(str(tree.root), tree_revision=True).entries
    for entries in (plain, stat_ed):
        assert [e.name for e in entries] == expected
        kinds = {e.name: e.kind for e in entries}
        assert kinds["sub"] == kinds["\udcff-not-utf8"] == "directory"
        assert kinds["link"] == "symlink"
        assert kinds["fifo"] == "other"
        assert kinds["a"] == "file"
    assert all(e.lstat is None for e in plain)
    assert all(e.lstat is not None for e in stat_ed)


def test_names_that_share_their_first_bytes_sort_by_the_rest(tree: Tree, sandbox: Sandbox) -> None:
    """The C sort compares the first eight bytes at once, then the rest: names of
    under, at and over eight bytes that share a beginning keep strcmp's order."""
    names = ["abcdefgh", "abcdefg", "abcdefghi", "abcdefgh\x01", "abcdefgh0", "abcdefgg",
             "a", "ab", "A", "z" * 40, "zz", "été", "abcdefgh\xe9"]  # fmt: skip
    for name in names:
        (tree.root / name).write_bytes(b"")
    os.mkdir(os.path.join(os.fsencode(tree.root), b"abcdefgh\xff"))
    expected = sorted([*names, "abcdefgh\udcff"], key=lambda n: os.fsencode(n))
    assert [e.name for e in sandbox.list_dir(str(tree.root)).entries] == expected
    listed, kinds = sandbox.list_names(str(tree.root))
    assert listed == expected
    assert kinds == "".join("d" if n == "abcdefgh\udcff" else "f" for n in expected)


def test_list_dir_errors(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "f").write_bytes(b"")
    with pytest.raises(NotFound):
        sandbox.list_dir("nope")
    with pytest.raises(NotADirectory):
        sandbox.list_dir("f")


def test_root_is_held_by_descriptor_not_name(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "f.txt").write_bytes(b"original")
    moved = tree.base / "moved"
    tree.root.rename(moved)
    tree.root.mkdir()
    (tree.root / "f.txt").write_bytes(b"impostor")
    assert read(sandbox, "f.txt") == b"original"
    sandbox.replace_file("new.txt", b"x")
    assert (moved / "new.txt").read_bytes() == b"x"
    assert not (tree.root / "new.txt").exists()


# -- creating -------------------------------------------------------------------


def test_make_dirs_component_by_component(tree: Tree, sandbox: Sandbox) -> None:
    assert sandbox.make_dirs("a/b/c").count > 0
    assert (tree.root / "a" / "b" / "c").is_dir()
    assert sandbox.make_dirs("a/b/c").count == 0
    assert sandbox.make_dirs(str(tree.root)).count == 0
    (tree.root / "f").write_bytes(b"")
    with pytest.raises(NotADirectory):
        sandbox.make_dirs("f/x")
    (tree.root / "in").symlink_to("a")
    assert sandbox.make_dirs("in/new").count > 0
    assert (tree.root / "a" / "new").is_dir()


def test_make_dirs_never_creates_outside(
    tree: Tree, sandbox: Sandbox, outside_unchanged: None
) -> None:
    (tree.root / "out").symlink_to(tree.outside)
    (tree.root / "rel").symlink_to("../outside")
    for path in ["out/new", "rel/new/deeper", "../outside/new", str(tree.outside / "x")]:
        with pytest.raises(AccessDenied):
            sandbox.make_dirs(path)


def test_create_file_is_exclusive(tree: Tree, sandbox: Sandbox, outside_unchanged: None) -> None:
    stat_result = sandbox.create_file("new.txt", b"hello")
    assert (tree.root / "new.txt").read_bytes() == b"hello"
    assert stat_result.size == 5
    with pytest.raises(AlreadyExists):
        sandbox.create_file("new.txt", b"again")
    assert (tree.root / "new.txt").read_bytes() == b"hello"
    (tree.root / "dangling").symlink_to("../outside/created-through-link")
    with pytest.raises(AlreadyExists):
        sandbox.create_file("dangling", b"x")
    with pytest.raises(NotFound):
        sandbox.create_file("no/such/dir.txt", b"x")
    assert leftovers(tree.root) == []


def test_new_files_follow_the_umask(tree: Tree, sandbox: Sandbox) -> None:
    sandbox.replace_file("n.txt", b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tree.root / "n.txt").stat().st_mode) == 0o666 & ~umask


# -- replacing --------------------------------------------------------------------


def test_replace_keeps_mode_and_xattrs_and_breaks_hard_links(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "f.txt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    os.setxattr(str(target), "user.origin", b"kept")
    other_name = tree.outside / "hardlink"
    os.link(target, other_name)
    sandbox.replace_file("f.txt", b"new content")
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.getxattr(str(target), "user.origin") == b"kept"
    assert other_name.read_bytes() == b"old"  # the write never reached the other name
    assert target.stat().st_nlink == 1
    assert leftovers(tree.root) == []


def test_replace_never_keeps_setuid_or_file_capabilities(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "tool"
    target.write_bytes(b"#!/bin/sh\n")
    target.chmod(0o6755)
    sandbox.replace_file("tool", b"#!/bin/sh\necho replaced\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_replace_writes_through_inside_links(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "real.txt").write_bytes(b"old")
    (tree.root / "link").symlink_to("d/real.txt")
    (tree.root / "abs").symlink_to(tree.root / "d" / "real.txt")
    sandbox.replace_file("link", b"via relative link")
    assert (tree.root / "d" / "real.txt").read_bytes() == b"via relative link"
    assert (tree.root / "link").is_symlink()
    sandbox.replace_file("abs", b"via absolute link")
    assert (tree.root / "d" / "real.txt").read_bytes() == b"via absolute link"
    assert (tree.root / "abs").is_symlink()


def test_replace_refuses_what_is_not_a_regular_file(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "dir").mkdir()
    os.mkfifo(tree.root / "fifo")
    with pytest.raises(IsADirectory):
        sandbox.replace_file("dir", b"x")
    with pytest.raises(NotARegularFile):
        sandbox.replace_file("fifo", b"x")
    with pytest.raises(AccessDenied):
        sandbox.replace_file(str(tree.root), b"x")


def test_replace_of_read_only_file_is_refused_for_an_ordinary_user(
    tree: Tree, sandbox: Sandbox
) -> None:
    tree.base.chmod(0o755)
    tree.root.chmod(0o777)
    target = tree.root / "ro.txt"
    target.write_bytes(b"keep me")
    target.chmod(0o444)
    with pytest.raises(PermissionDenied, match=r"ro\.txt"):
        run_as_nobody(lambda: sandbox.replace_file("ro.txt", b"changed"))
    assert target.read_bytes() == b"keep me"
    assert leftovers(tree.root) == []


def test_ordinary_user_can_write_where_permitted(tree: Tree, sandbox: Sandbox) -> None:
    tree.base.chmod(0o755)
    tree.root.chmod(0o777)

    def work() -> bytes:
        sandbox.replace_file("mine.txt", b"one")
        sandbox.replace_file("mine.txt", b"two")
        sandbox.append_file("mine.txt", b"+three")
        sandbox.make_dirs("d/e")
        sandbox.copy_file("mine.txt", "d/e/copy.txt")
        sandbox.rename("d/e/copy.txt", "d/moved.txt")
        return read(sandbox, "d/moved.txt")

    assert run_as_nobody(work) == b"two+three"
    assert (tree.root / "mine.txt").stat().st_uid == 65534


def _in_child_with_file_size_limit(fn, limit: int = 4096):  # type: ignore[no-untyped-def]
    """Run fn in a forked child where files cannot grow past ``limit`` bytes (EFBIG):
    ``"ok"``, or the name of the SandboxError it raised."""

    def limited() -> str:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        try:
            fn()
        except SandboxError as exc:
            return type(exc).__name__
        return "ok"

    return in_child(limited)


def test_failed_replace_leaves_the_old_file_and_no_debris(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "f.txt"
    target.write_bytes(b"precious")
    outcome = _in_child_with_file_size_limit(lambda: sandbox.replace_file("f.txt", b"x" * 100_000))
    assert outcome == "LimitExceeded"
    assert target.read_bytes() == b"precious"
    assert os.listdir(tree.root) == ["f.txt"]


def test_replace_with_expected_revision(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "f").write_bytes(b"v1")
    seen = sandbox.revision("f")
    assert seen == content_revision(b"v1")
    sandbox.replace_file("f", b"v2", expected=seen)
    with pytest.raises(Conflict, match="Revision mismatch"):
        sandbox.replace_file("f", b"v3", expected=seen)
    assert (tree.root / "f").read_bytes() == b"v2"
    with pytest.raises(Conflict):
        sandbox.replace_file("f", b"v3", expected=ABSENT)
    sandbox.replace_file("new", b"n", expected=ABSENT)
    assert (tree.root / "new").read_bytes() == b"n"
    assert sandbox.revision("missing") == ABSENT


def test_reads_reuse_a_hash_only_while_the_file_is_unchanged(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "f"
    target.write_bytes(b"one!")
    assert sandbox.revision("f") == content_revision(b"one!")
    before = target.stat()
    target.write_bytes(b"two!")  # same size, and the old times put back
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert sandbox.revision("f") == content_revision(b"two!")  # the ctime moved on


def test_conditional_writes_hash_afresh_and_mend_the_cache(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "f"
    target.write_bytes(b"real")
    assert sandbox.revision("f") == content_revision(b"real")
    poisoned = content_revision(b"wrong")
    sandbox.revisions.put(stat_key(target.stat()), poisoned)
    assert sandbox.revision("f") == poisoned  # reads trust the cache...
    with pytest.raises(Conflict, match="Revision mismatch"):
        sandbox.replace_file("f", b"lost update", expected=poisoned)  # ...a check does not
    assert target.read_bytes() == b"real"
    assert sandbox.revision("f") == content_revision(b"real")


def test_holds_exactly_compares_every_byte(tree: Tree) -> None:
    data = os.urandom(700_000)  # several read chunks
    target = tree.root / "f"
    target.write_bytes(data)
    fd = os.open(target, os.O_RDONLY)
    try:
        assert holds_exactly(fd, data)
        assert not holds_exactly(fd, data[:-1])
        assert not holds_exactly(fd, data + b"x")
        for at in (0, 300_000, len(data) - 1):  # same size, one byte differs
            changed = bytearray(data)
            changed[at] ^= 0xFF
            assert not holds_exactly(fd, bytes(changed))
    finally:
        os.close(fd)
    empty = tree.root / "empty"
    empty.write_bytes(b"")
    fd = os.open(empty, os.O_RDONLY)
    try:
        assert holds_exactly(fd, b"")
        assert not holds_exactly(fd, b"x")
    finally:
        os.close(fd)


def test_replace_conditional_on_the_exact_bytes_read(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "f"
    target.write_bytes(b"v1")
    sandbox.replace_file("f", b"v2", expected=SameBytes(b"v1"))
    assert target.read_bytes() == b"v2"
    for stale in (b"v1", b"v2 and more", b""):
        with pytest.raises(Conflict, match="Revision mismatch"):
            sandbox.replace_file("f", b"lost", expected=SameBytes(stale))
    assert target.read_bytes() == b"v2"
    target.unlink()
    with pytest.raises(Conflict, match="Revision mismatch"):
        sandbox.replace_file("f", b"lost", expected=SameBytes(b"v2"))
    assert not target.exists()
    target.mkdir()
    with pytest.raises(Conflict, match="Revision mismatch"):
        sandbox.replace_file("f", b"lost", expected=SameBytes(b""))
    assert target.is_dir()


@pytest.mark.parametrize("sneak", [b"someone else's text\n", b"inside, changed!\n"])
def test_an_edit_never_overwrites_a_change_made_after_its_read(tree: Tree, sneak: bytes) -> None:
    """A writer that ignores our locks changes the file between the edit's read and
    its write (the second one keeps the size and the times): the edit is refused."""
    target = tree.root / "f"
    target.write_bytes(b"inside, original\n")
    before = target.stat()

    class WriterSneaksIn(Sandbox):
        def rewrite(self, path: str, edit: Rewriter, /) -> Change:
            def read_then_sneak(f: OpenFile) -> Rewrite | None:
                planned = edit(f)
                target.write_bytes(sneak)
                os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
                return planned

            return super().rewrite(path, read_then_sneak)

    plain = tree.sandbox()
    ctx = CallContext(WriterSneaksIn(plain.resolver, plain.limits), Limits())
    with pytest.raises(Conflict, match="Revision mismatch"):
        edit_file(ctx, "f", [{"oldText": "original", "newText": "edited!!"}])
    assert target.read_bytes() == sneak
    assert os.listdir(tree.root) == ["f"]  # no staged file left behind


def test_an_edit_resolves_its_path_once(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """edit_file turns the client's path into a place once (Resolver.locate is where a
    client path becomes a location): the file it reads is the file whose entry it
    replaces.  A write, by contrast, resolves its path once too; before, an edit was
    a read and a write, two resolutions."""
    (tree.root / "f").write_bytes(b"inside, original\n")
    located: list[str] = []
    real = Resolver.locate

    def counted(self: Resolver, path: str) -> Location:
        located.append(path)
        return real(self, path)

    monkeypatch.setattr(Resolver, "locate", counted)
    ctx = CallContext(tree.sandbox(), Limits())
    edit_file(ctx, "f", [{"oldText": "original", "newText": "edited"}])
    assert (tree.root / "f").read_bytes() == b"inside, edited\n"
    assert located == ["f"]


def test_an_edit_replaces_the_file_it_read_when_its_path_changes_meanwhile(tree: Tree) -> None:
    """Between the read and the write the path comes to name another file with the
    same bytes (a directory symlink on the way is retargeted): the edit changes the
    file it read, never the one the path names by then (a second resolution would
    have written there, its bytes being the ones read)."""
    for name in ("a", "b"):
        (tree.root / name).mkdir()
        (tree.root / name / "f").write_bytes(b"inside, original\n")
    (tree.root / "d").symlink_to("a")

    class Retargets(Sandbox):
        def rewrite(self, path: str, edit: Rewriter, /) -> Change:
            def read_then_retarget(f: OpenFile) -> Rewrite | None:
                planned = edit(f)
                (tree.root / "d").unlink()
                (tree.root / "d").symlink_to("b")
                return planned

            return super().rewrite(path, read_then_retarget)

    plain = tree.sandbox()
    ctx = CallContext(Retargets(plain.resolver, plain.limits), Limits())
    edit_file(ctx, "d/f", [{"oldText": "original", "newText": "edited"}])
    assert (tree.root / "a" / "f").read_bytes() == b"inside, edited\n"
    assert (tree.root / "b" / "f").read_bytes() == b"inside, original\n"


def test_a_big_edit_reports_the_revision_of_what_it_wrote(tree: Tree, sandbox: Sandbox) -> None:
    target = tree.root / "big.txt"
    target.write_bytes(b"line\n" * 600_000 + b"the end\n")  # hashed in a helper thread
    ctx = CallContext(sandbox, Limits())
    result = edit_file(ctx, "big.txt", [{"oldText": "the end", "newText": "THE END"}])
    assert target.read_bytes().endswith(b"THE END\n")
    assert result.structured is not None
    assert result.structured["revision"] == content_revision(target.read_bytes())
    assert sandbox.revision("big.txt") == result.structured["revision"]


def test_a_tree_revision_is_the_hash_of_its_sorted_lines() -> None:
    """Revisions outlive a server process: their definition must not drift."""
    lines = ["b\0file\x001\x002\0", "a\0directory\x000\x005\0", "caf\udce9\0file\x003\x004\0"]
    text = b"".join(line.encode("utf-8", "surrogateescape") + b"\n" for line in sorted(lines))
    assert tree_revision(iter(lines)) == "tree:" + hashlib.sha256(text).hexdigest()
    assert tree_revision(iter([])) == "tree:" + hashlib.sha256(b"").hexdigest()


def test_moving_a_symlink_that_leads_outside_reports_success(tree: Tree, sandbox: Sandbox) -> None:
    """Found by the stateful test: the move happened, then computing the revision of
    what it left (following the link outside) failed, and the tool reported an error."""
    (tree.root / "a").symlink_to("../outside/secret.txt")
    result = move_file(CallContext(sandbox, Limits()), "a", "b")
    assert result.structured == {"source": "a", "destination": "b", "revision": None}
    assert os.readlink(tree.root / "b") == "../outside/secret.txt"
    assert not (tree.root / "a").is_symlink()


def test_a_listing_and_its_revision_come_from_one_reading(tree: Tree) -> None:
    (tree.root / "d" / "e").mkdir(parents=True)
    (tree.root / "d" / "e" / "f.txt").write_text("deep")
    (tree.root / "d" / "g.txt").write_text("g")
    (tree.root / "d" / "link").symlink_to("g.txt")
    sandbox = Sandbox(tree.sandbox().resolver, Limits(revision_entries=4))
    assert sandbox.list_dir("d").revision is None  # computed only when asked for
    entries, revision, *_ = sandbox.list_dir("d", tree_revision=True)
    assert [(e.name, e.kind) for e in entries] == [
        ("e", "directory"),
        ("g.txt", "file"),
        ("link", "symlink"),
    ]
    assert all(e.lstat is not None for e in entries)
    assert revision is not None and revision == sandbox.revision("d")
    (tree.root / "d" / "e" / "h.txt").write_text("one too many")
    assert sandbox.list_dir("d", tree_revision=True).revision is None  # over the budget
    assert sandbox.revision("d") is None


def test_a_directory_revision_sees_a_change_four_levels_down_by_another_process(
    tree: Tree,
) -> None:
    deep = tree.root / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("one")
    sandbox = tree.sandbox()
    before = sandbox.list_dir("a", tree_revision=True).revision
    assert before is not None and before.startswith("tree:")
    assert before == sandbox.describe("a", tree_revision=True).revision == sandbox.revision("a")
    # Another process rewrites the file with as many bytes and sets its times back:
    # only the change time, which no one can set, tells.
    st = (deep / "f.txt").stat()
    rewrite = (
        "import os, sys; path = sys.argv[1]; open(path, 'w').write('two'); "
        "os.utime(path, ns=(int(sys.argv[2]), int(sys.argv[3])))"
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            rewrite,
            str(deep / "f.txt"),
            str(st.st_atime_ns),
            str(st.st_mtime_ns),
        ],
        check=True,
    )
    assert (deep / "f.txt").stat().st_mtime_ns == st.st_mtime_ns
    after = sandbox.list_dir("a", tree_revision=True).revision
    assert after is not None and after != before
    assert sandbox.describe("a", tree_revision=True).revision == after
    # A conditional removal with the revision from before is refused and changes nothing.
    with pytest.raises(Conflict):
        sandbox.remove("a", recursive=True, expected=before)
    assert (deep / "f.txt").read_text() == "two"
    sandbox.remove("a", recursive=True, expected=after)
    assert not (tree.root / "a").exists()


def test_a_description_says_what_stat_xattrs_and_revision_say(tree: Tree) -> None:
    (tree.root / "d").mkdir()
    (tree.root / "d" / "f.txt").write_text("f")
    os.setxattr(str(tree.root / "d" / "f.txt"), "user.note", b"hello")
    os.setxattr(str(tree.root / "d"), "user.dir", b"\xff")
    os.mkfifo(tree.root / "pipe")
    (tree.root / "link").symlink_to("d/f.txt")
    (tree.root / "out").symlink_to(tree.outside / "secret.txt")
    (tree.root / "out-missing").symlink_to(tree.outside / "missing.txt")
    (tree.root / "dangling").symlink_to("nowhere")
    sandbox = tree.sandbox()
    assert sandbox.describe("d").revision is None  # a directory's only when asked for
    assert sandbox.describe("d/f.txt").revision == sandbox.revision("d/f.txt")
    for path in ("d", "d/f.txt", "d/", "link"):
        found = sandbox.describe(path, tree_revision=True)
        # (reading a directory for its revision may move its access time)
        assert replace(found.info, atime_ns=0) == replace(sandbox.stat(path), atime_ns=0)
        assert found.revision == sandbox.revision(path)
    assert sandbox.describe("d/f.txt").xattrs == {"user.note": b"hello"}
    assert sandbox.describe("d").xattrs == {"user.dir": b"\xff"}
    fifo = sandbox.describe("pipe")  # described, never opened (that would block)
    assert stat.S_ISFIFO(fifo.info.mode)
    assert (fifo.xattrs, fifo.revision) == ({}, None)
    link = sandbox.describe("link")
    assert (link.is_symlink, link.link_text, link.target_inside) == (True, "d/f.txt", True)
    assert link.xattrs == {"user.note": b"hello"}
    # Leading outside: nothing derived from the target, the same whether it exists.
    out, missing = sandbox.describe("out"), sandbox.describe("out-missing")
    for found in (out, missing):
        assert (found.is_symlink, found.link_text, found.target_inside) == (True, None, False)
        assert found.size_hidden and (found.xattrs, found.revision) == ({}, None)
    dangling = sandbox.describe("dangling")
    assert (dangling.link_text, dangling.target_inside, dangling.target_described) == (
        "nowhere",
        True,
        False,
    )
    with pytest.raises(NotFound):
        sandbox.describe("missing")


def test_a_whole_read_sees_growth_after_its_fstat(tree: Tree) -> None:
    target = tree.root / "log.txt"
    target.write_bytes(b"0123456789")
    stale = os.stat(target)
    target.write_bytes(b"0123456789" * 3)  # grew after the stat the read relies on
    with OpenFile(os.open(target, os.O_RDONLY), stale, "log.txt") as f:
        assert whole_bytes(f, 64, "log.txt") == b"0123456789" * 3
    with (
        OpenFile(os.open(target, os.O_RDONLY), stale, "log.txt") as f,
        pytest.raises(LimitExceeded, match="grew past"),
    ):
        whole_bytes(f, 25, "log.txt")
    target.write_bytes(b"01234")  # and shrinking is no error
    with OpenFile(os.open(target, os.O_RDONLY), stale, "log.txt") as f:
        assert whole_bytes(f, 64, "log.txt") == b"01234"


def test_a_tree_over_the_revision_budget_has_none_in_reads(tree: Tree) -> None:
    big = tree.root / "big"
    for i in range(5):
        (big / f"d{i}").mkdir(parents=True)
        (big / f"d{i}" / "f").write_text(str(i))
    sandbox = Sandbox(tree.sandbox().resolver, Limits(revision_entries=9, walk_entries=10))
    assert sandbox.revision("big") is None
    assert (sandbox.revision("big/d0", fresh=True) or "").startswith("tree:")
    full = sandbox.revision("big", fresh=True)  # 10 entries: within the walk limit
    assert full is not None and full.startswith("tree:")
    sandbox.make_dirs("big", expected=full)
    (big / "d5").mkdir()
    with pytest.raises(LimitExceeded, match="its revision cannot be computed"):
        sandbox.revision("big", fresh=True)


def _described(top: Path, max_slashes: int) -> list[str]:
    """The description lines of the tree below ``top``, by path and lstat (an oracle)."""
    lines: list[str] = []

    def walk(directory: Path, prefix: str) -> None:
        for child in directory.iterdir():
            relative, st = prefix + child.name, child.lstat()
            if stat.S_ISDIR(st.st_mode):
                lines.append(describe_entry(relative, "directory", st))
                if relative.count("/") < max_slashes:
                    walk(child, relative + "/")
            elif stat.S_ISLNK(st.st_mode):
                lines.append(describe_entry(relative, "symlink", st, os.readlink(child)))
            else:
                kind = "file" if stat.S_ISREG(st.st_mode) else "other"
                lines.append(describe_entry(relative, kind, st))

    walk(top, "")
    return lines


def test_a_tree_over_the_budget_is_given_up_before_any_entry_is_stat_ed(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(30):
        (tree.root / "big" / f"d{i}").mkdir(parents=True)
        (tree.root / "big" / f"d{i}" / "f").write_text(str(i))
    (tree.root / "big" / "deep" / "a" / "b").mkdir(parents=True)
    stat_ed: list[int] = []
    real = trees_module._level
    monkeypatch.setattr(trees_module, "_level", lambda d: stat_ed.append(d.fd) or real(d))
    limits = Limits(revision_entries=50, tree_depth=1)
    sandbox = Sandbox(tree.sandbox().resolver, limits)
    assert sandbox.revision("big") is None  # 62 entries
    entries, revision, *_ = sandbox.list_dir("big", tree_revision=True)
    assert len(entries) == 31 and revision is None
    assert stat_ed == []
    # Within the budget once the depth limit is counted as the description counts it:
    # "deep/a" is listed, "deep/a/b" below the depth limit is not.
    for i in range(20):
        shutil.rmtree(tree.root / "big" / f"d{i}")
    revision = sandbox.revision("big")
    assert revision is not None and stat_ed
    assert revision == tree_revision(iter(_described(tree.root / "big", max_slashes=1)))
    assert sandbox.list_dir("big", tree_revision=True).revision == revision


# -- appending ----------------------------------------------------------------------


def test_append_creates_and_appends_in_place(tree: Tree, sandbox: Sandbox) -> None:
    sandbox.append_file("log.txt", b"one\n")
    inode = (tree.root / "log.txt").stat().st_ino
    sandbox.append_file("log.txt", b"two\n")
    assert (tree.root / "log.txt").read_bytes() == b"one\ntwo\n"
    assert (tree.root / "log.txt").stat().st_ino == inode


def test_append_refuses_hard_linked_files(
    tree: Tree, sandbox: Sandbox, outside_unchanged: None
) -> None:
    inside = tree.root / "planted"
    os.link(tree.outside / "secret.txt", inside)
    with pytest.raises(HardLinked, match="planted"):
        sandbox.append_file("planted", b"pwned")
    assert (tree.outside / "secret.txt").read_bytes() == CANARY


def test_append_refuses_special_files_and_directories(tree: Tree, sandbox: Sandbox) -> None:
    os.mkfifo(tree.root / "fifo")
    (tree.root / "dir").mkdir()
    with pytest.raises(NotARegularFile):
        sandbox.append_file("fifo", b"x")
    with pytest.raises(IsADirectory):
        sandbox.append_file("dir", b"x")


# -- moving and copying -------------------------------------------------------------


def test_rename_never_replaces(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "a").write_bytes(b"A")
    (tree.root / "b").write_bytes(b"B")
    with pytest.raises(AlreadyExists, match="b"):
        sandbox.rename("a", "b")
    assert (tree.root / "a").read_bytes() == b"A"
    assert (tree.root / "b").read_bytes() == b"B"
    (tree.root / "dangling").symlink_to("nowhere")
    with pytest.raises(AlreadyExists):
        sandbox.rename("a", "dangling")
    sandbox.rename("a", "c")
    assert (tree.root / "c").read_bytes() == b"A"
    assert not (tree.root / "a").exists()


def test_rename_moves_links_as_links_and_directories_whole(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "link").symlink_to(tree.outside / "secret.txt")
    sandbox.rename("link", "moved-link")
    assert os.readlink(tree.root / "moved-link") == str(tree.outside / "secret.txt")
    (tree.root / "d" / "e").mkdir(parents=True)
    (tree.root / "d" / "e" / "f").write_bytes(b"f")
    sandbox.rename("d", "d2")
    assert (tree.root / "d2" / "e" / "f").read_bytes() == b"f"
    with pytest.raises(SandboxError):
        sandbox.rename("d2", "d2/e/inside")
    with pytest.raises(NotFound):
        sandbox.rename("missing", "x")
    with pytest.raises(AccessDenied):
        sandbox.rename(str(tree.root), "x")


def _other_filesystem(tmp_base: Path) -> Path | None:
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != tmp_base.stat().st_dev:
        return shm
    return None


@pytest.fixture
def other_fs(tree: Tree) -> Iterator[Path]:
    shm = _other_filesystem(tree.base)
    if shm is None:
        pytest.skip("needs /dev/shm on a different filesystem than the temp directory")
    with tempfile.TemporaryDirectory(dir=shm) as name:
        yield Path(name)


def test_move_across_filesystems_copies_files_and_refuses_directories(
    tree: Tree, other_fs: Path
) -> None:
    sandbox = tree.sandbox(other_fs)
    src = tree.root / "f.txt"
    src.write_bytes(b"travels")
    src.chmod(0o600)
    os.utime(src, ns=(1_000_000_000, 2_000_000_000))
    sandbox.rename("f.txt", str(other_fs / "f.txt"))
    moved = other_fs / "f.txt"
    assert moved.read_bytes() == b"travels"
    assert stat.S_IMODE(moved.stat().st_mode) == 0o600
    assert moved.stat().st_mtime_ns == 2_000_000_000
    assert not src.exists()
    (tree.root / "d").mkdir()
    with pytest.raises(Unsupported):
        sandbox.rename("d", str(other_fs / "d"))
    assert (tree.root / "d").is_dir()
    (tree.root / "l").symlink_to("d")
    sandbox.rename("l", str(other_fs / "l"))
    assert os.readlink(other_fs / "l") == "d"


def test_copy_keeps_mode_mtime_xattrs_but_not_setuid(tree: Tree, sandbox: Sandbox) -> None:
    src = tree.root / "src"
    src.write_bytes(b"payload" * 1000)
    src.chmod(0o4750)
    os.setxattr(str(src), "user.tag", b"v")
    os.utime(src, ns=(1_500_000_000_000_000_000, 1_600_000_000_123_456_789))
    sandbox.copy_file("src", "dst")
    dst = tree.root / "dst"
    assert dst.read_bytes() == b"payload" * 1000
    assert stat.S_IMODE(dst.stat().st_mode) == 0o750
    assert dst.stat().st_mtime_ns == 1_600_000_000_123_456_789
    assert os.getxattr(str(dst), "user.tag") == b"v"
    assert src.read_bytes() == b"payload" * 1000


def test_copy_refuses_existing_destinations_and_non_files(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "a").write_bytes(b"a")
    (tree.root / "b").write_bytes(b"b")
    (tree.root / "dir").mkdir()
    os.mkfifo(tree.root / "fifo")
    with pytest.raises(AlreadyExists):
        sandbox.copy_file("a", "b")
    assert (tree.root / "b").read_bytes() == b"b"
    with pytest.raises(IsADirectory):
        sandbox.copy_file("dir", "c")
    with pytest.raises(NotARegularFile):
        sandbox.copy_file("fifo", "c")
    assert not (tree.root / "c").exists()


def test_failed_copy_removes_the_partial_destination(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "big").write_bytes(b"x" * 100_000)
    outcome = _in_child_with_file_size_limit(lambda: sandbox.copy_file("big", "copy"))
    assert outcome == "LimitExceeded"
    assert sorted(os.listdir(tree.root)) == ["big"]


def test_cross_device_move_failure_keeps_the_source(tree: Tree, other_fs: Path) -> None:
    sandbox = tree.sandbox(other_fs)
    (tree.root / "big").write_bytes(b"y" * 100_000)
    outcome = _in_child_with_file_size_limit(lambda: sandbox.rename("big", str(other_fs / "big")))
    assert outcome == "LimitExceeded"
    assert (tree.root / "big").read_bytes() == b"y" * 100_000
    assert not (other_fs / "big").exists()


# -- removing -------------------------------------------------------------------------


def test_remove_files_links_and_empty_directories(tree: Tree, sandbox: Sandbox) -> None:
    (tree.root / "f").write_bytes(b"")
    (tree.root / "d").mkdir()
    (tree.root / "d" / "x").write_bytes(b"")
    (tree.root / "l").symlink_to(tree.outside / "secret.txt")
    assert sandbox.remove("l").count == 1
    assert (tree.outside / "secret.txt").exists()
    sandbox.remove("f")
    with pytest.raises(DirectoryNotEmpty):
        sandbox.remove("d")
    sandbox.remove("d/x")
    sandbox.remove("d")
    assert os.listdir(tree.root) == []


def test_remove_tree_never_follows_links(
    tree: Tree, sandbox: Sandbox, outside_unchanged: None
) -> None:
    top = tree.root / "top"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_bytes(b"")
    (top / "a" / "escape").symlink_to(tree.outside)
    (top / "a" / "escape-file").symlink_to(tree.outside / "secret.txt")
    os.mkfifo(top / "fifo")
    assert sandbox.remove("top", recursive=True).count == 7
    assert os.listdir(tree.root) == []
    with pytest.raises(NotFound):
        sandbox.remove("top", recursive=True)
    with pytest.raises(AccessDenied):
        sandbox.remove(str(tree.root), recursive=True)
    (tree.root / "link-to-outside").symlink_to(tree.outside)
    assert sandbox.remove("link-to-outside", recursive=True).count == 1


def test_remove_tree_depth_limit(tree: Tree) -> None:
    sandbox = Sandbox(tree.sandbox().resolver, Limits(tree_depth=3))
    (tree.root / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    with pytest.raises(LimitExceeded):
        sandbox.remove("a", recursive=True)


def test_outside_snapshot_helper_detects_changes(tree: Tree) -> None:
    """Guard on the guard: the snapshot used by the escape tests does see changes."""
    before = snapshot(tree.outside)
    (tree.outside / "secret.txt").write_bytes(b"changed")
    assert snapshot(tree.outside) != before


@pytest.mark.parametrize("text", ["a/.", "a/", "d/.", "d/"])
def test_a_link_that_names_only_a_directory_is_never_written_through_to_a_file(
    tree: Tree, text: str
) -> None:
    """The kernel refuses to open "b" -> "a/." for writing (ENOTDIR for a file, EISDIR
    for a directory); the component walk once dropped the "." and wrote the file a."""
    (tree.root / "a").write_bytes(b"kept")
    (tree.root / "d").mkdir()
    (tree.root / "b").symlink_to(text)
    sandbox = tree.sandbox()
    with pytest.raises(SandboxError, match="ENOTDIR" if text.startswith("a") else "EISDIR"):
        sandbox.replace_file(str(tree.root / "b"), b"new")
    assert (tree.root / "a").read_bytes() == b"kept"
    described = sandbox.describe(str(tree.root / "b"))
    assert described.is_symlink and described.target_described == text.startswith("d")

"""A mutation either happened and says so, or did not happen and leaves no trace.

Each test makes a mutation fail at a chosen point (a full disk, too few
descriptors, a flush that fails after the change, a source that cannot be
removed) and checks that the answer and the filesystem agree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Tree, in_child
from sandboxfs.binding import syscalls
from sandboxfs.core.chokepoint import Directory, ParentDir
from sandboxfs.core.errors import SandboxError
from sandboxfs.fs.facade import Sandbox
from sandboxfs.fs.limits import Limits
from sandboxfs.tools import CallContext
from sandboxfs.tools.writing import write_file

MiB = 1024 * 1024


def _debris(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if "sandboxfs" in name)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs CAP_SYS_ADMIN, which CI's root has)."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True)


def _fill(directory: Path, leave: int) -> None:
    """Fill the filesystem of ``directory`` until about ``leave`` bytes are free."""
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    (directory / "filler").write_bytes(b"\0" * max(0, free - leave))


@pytest.mark.parametrize("reservation", ["fallocate", "no fallocate"])
def test_an_append_that_does_not_fit_changes_nothing(
    small_disk: Path, reservation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.5 MiB onto a 1 MiB file with 1 MiB free: ENOSPC, and the file as it was,
    whether the space is reserved first or the partial write is cut back."""
    if reservation == "no fallocate":

        def unsupported(*_: object) -> None:
            raise OSError(errno.EOPNOTSUPP, "not supported")

        monkeypatch.setattr(syscalls, "fallocate", unsupported)
    target = small_disk / "log.txt"
    target.write_bytes(b"a" * MiB)
    _fill(small_disk, MiB)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    sandbox = Sandbox(_resolver_for(small_disk))
    with pytest.raises(SandboxError) as caught:
        sandbox.append_file("log.txt", b"b" * (MiB + MiB // 2))
    assert caught.value.code in ("ENOSPC", "EDQUOT"), caught.value
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest
    assert target.stat().st_size == MiB
    # With room again, the same append happens whole.
    (small_disk / "filler").unlink()
    change = sandbox.append_file("log.txt", b"b" * (MiB + MiB // 2))
    assert change.size == target.stat().st_size == MiB * 5 // 2


def _resolver_for(directory: Path) -> Any:
    from sandboxfs.core.allowlist import AllowList, Root  # noqa: PLC0415
    from sandboxfs.core.resolver import Resolver  # noqa: PLC0415

    return Resolver(AllowList.of([Root.open(str(directory))]))


def _limit_leaving(free: int) -> int:
    """The descriptor limit under which exactly ``free`` more descriptors can be opened."""
    used = {int(fd) for fd in os.listdir("/proc/self/fd")}
    limit = 0
    while free or limit in used:
        if limit not in used:
            free -= 1
        limit += 1
    return limit


MUTATIONS: dict[str, Callable[[Sandbox, int], object]] = {
    "replace": lambda s, i: s.replace_file("f.txt", f"new {i}".encode()),
    "create": lambda s, i: s.create_file(f"new-{i}.txt", b"new"),
    "append": lambda s, i: s.append_file("log.txt", b"+"),
    "copy": lambda s, i: s.copy_file("f.txt", f"copy-{i}.txt"),
    "move": lambda s, i: s.rename(f"m-{i}.txt", f"moved-{i}.txt"),
    "mkdir": lambda s, i: s.make_dirs(f"d-{i}/e/f"),
    "remove": lambda s, i: s.remove(f"r-{i}", recursive=True),
}


def _state(root: Path, name: str, i: int) -> object:
    """What the mutation ``name``, attempt ``i``, is about, as it stands now."""
    if name == "replace":
        return (root / "f.txt").read_bytes()
    if name == "create":
        return (root / f"new-{i}.txt").exists()
    if name == "append":
        return (root / "log.txt").stat().st_size
    if name == "copy":
        return (root / f"copy-{i}.txt").exists()
    if name == "move":
        return ((root / f"m-{i}.txt").exists(), (root / f"moved-{i}.txt").exists())
    if name == "mkdir":
        return (root / f"d-{i}" / "e" / "f").is_dir()
    return (root / f"r-{i}").exists()


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_with_too_few_descriptors_a_mutation_happens_whole_or_not_at_all(
    tree: Tree, name: str
) -> None:
    """Run each mutation with room for 0, 1, 2 ... more descriptors than the process
    has open.  Whatever the limit, a refusal leaves everything as it was (and no
    temporary file), and a success is a change that happened."""
    root = tree.root
    (root / "f.txt").write_bytes(b"old")
    (root / "log.txt").write_bytes(b"")
    for i in range(12):
        (root / f"m-{i}.txt").write_bytes(b"m")
        (root / f"r-{i}" / "x").mkdir(parents=True)
        (root / f"r-{i}" / "x" / "y.txt").write_bytes(b"y")

    def attempts() -> list[tuple[object, object, str | None]]:
        sandbox = tree.sandbox()
        outcomes = []
        for i in range(12):
            before = _state(root, name, i)
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (_limit_leaving(i), hard))
            try:
                MUTATIONS[name](sandbox, i)
                failure = None
            except SandboxError as exc:
                failure = exc.code
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            outcomes.append((before, _state(root, name, i), failure))
        return outcomes

    outcomes = in_child(attempts)
    refused = [o for o in outcomes if o[2] is not None]
    assert refused and refused[0][2] == "EMFILE", outcomes  # the limit did bite
    assert any(o[2] is None for o in outcomes), outcomes  # and was loose enough at last
    for before, after, failure in outcomes:
        if failure is not None:
            assert after == before, (name, outcomes)
        elif name != "append":
            assert after != before, (name, outcomes)
    assert _debris(root) == []


def test_a_flush_that_fails_after_the_change_is_reported_with_the_change(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree.root / "f.txt").write_text("old")
    real_fsync = os.fsync

    def failing_for_directories(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_for_directories)
    result = write_file(CallContext(tree.sandbox(), Limits()), "f.txt", "new")
    assert (tree.root / "f.txt").read_text() == "new"
    assert result.text is not None and result.text.startswith("Successfully wrote to f.txt")
    assert "the change was made" in result.text and "EIO" in result.text
    assert result.structured is not None and "EIO" in result.structured["warning"]


def test_descriptors_are_taken_before_the_change(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the descriptor that flushes the directory cannot be had, nothing changes."""
    (tree.root / "f.txt").write_text("old")

    def no_more(self: Directory) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(Directory, "for_sync", no_more)
    sandbox = tree.sandbox()
    for attempt in (
        lambda: sandbox.replace_file("f.txt", b"new"),
        lambda: sandbox.copy_file("f.txt", "copy.txt"),
        lambda: sandbox.create_file("g.txt", b"new"),
        lambda: sandbox.rename("f.txt", "moved.txt"),
    ):
        with pytest.raises(SandboxError, match="EMFILE"):
            attempt()
    assert os.listdir(tree.root) == ["f.txt"]
    assert (tree.root / "f.txt").read_text() == "old"


def test_a_move_across_filesystems_that_cannot_remove_its_source_takes_the_copy_back(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tree.base.stat().st_dev:
        pytest.skip("needs /dev/shm on a different filesystem than the temp directory")
    other = Path(os.path.realpath(shm)) / f"sandboxfs-test-{os.getpid()}"
    other.mkdir()
    try:
        (tree.root / "f.txt").write_text("travels")

        def refuse(self: ParentDir) -> None:
            if self.path == "f.txt":
                raise OSError(errno.EACCES, "Permission denied")
            os.unlink(self.leaf, dir_fd=self.dir.fd)

        monkeypatch.setattr(ParentDir, "unlink", refuse)
        sandbox = tree.sandbox(other)
        with pytest.raises(SandboxError, match="nothing was moved"):
            sandbox.rename("f.txt", str(other / "f.txt"))
        assert (tree.root / "f.txt").read_text() == "travels"
        assert os.listdir(other) == []
    finally:
        for name in os.listdir(other):
            (other / name).unlink()
        other.rmdir()


def test_a_recursive_delete_that_stops_says_how_much_it_removed(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tree.root / "top"
    top.mkdir()
    for i in range(5):
        (top / f"f{i}").write_text("x")
    real = Directory.unlink
    calls = [0]

    def fails_on_the_fourth(self: Directory, name: str) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise OSError(errno.EIO, "Input/output error")
        real(self, name)

    monkeypatch.setattr(Directory, "unlink", fails_on_the_fourth)
    with pytest.raises(SandboxError, match=r"3 entries below it were removed") as caught:
        tree.sandbox().remove("top", recursive=True)
    assert caught.value.code == "EIO"
    assert len(os.listdir(top)) == 2

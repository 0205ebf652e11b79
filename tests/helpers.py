"""Shared test helpers: fixture trees, outside snapshots, work in a forked child
(dropping privileges), the rename-swap attacker."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Confinement
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox

T = TypeVar("T")

CANARY = b"CANARY: outside content must never be read or changed\n"


@dataclass
class Tree:
    """A temporary allowed directory and an outside directory full of canaries."""

    base: Path
    root: Path
    outside: Path

    def sandbox(self, *extra_roots: Path, no_xdev: bool = False, **options: Any) -> Sandbox:
        roots = [Root.open(str(self.root)), *(Root.open(str(p)) for p in extra_roots)]
        confinement = Confinement(no_xdev=no_xdev)
        return Sandbox(Resolver(AllowList.of(roots), confinement=confinement, **options))


def make_tree(base: Path) -> Tree:
    root = base / "root"
    outside = base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(CANARY)
    (outside / "dir").mkdir()
    (outside / "dir" / "secret.txt").write_bytes(CANARY)
    return Tree(base, root, outside)


def snapshot(directory: Path) -> dict[str, tuple[int, int, int, str]]:
    """Everything a change outside would show: type, mode, size, mtime and content."""
    result: dict[str, tuple[int, int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(full)
            result[os.path.relpath(full, directory)] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                digest,
            )
    return result


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def in_child(fn: Callable[[], T]) -> T:
    """``fn()`` in a forked child (one thread there: Landlock, dropped privileges and
    resource limits stay in it).  Returns fn's result, or re-raises its exception, in
    the parent (an exception that cannot be pickled comes back as a RuntimeError
    holding its repr; a child that dies without answering, as one naming its status)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            os.close(read_end)
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:  # reported to the parent
                outcome = (False, exc)
            try:
                payload = pickle.dumps(outcome)
            except Exception as exc:
                payload = pickle.dumps((False, RuntimeError(f"{exc!r}: {outcome[1]!r}")))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the child answered nothing (wait status {status:#x})")
    ok, value = pickle.loads(data)
    if ok:
        return cast(T, value)
    raise value


def run_as_nobody(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a forked child with root's privileges dropped (uid/gid 65534).

    Returns fn's result, or re-raises its exception, in the parent.
    """

    def dropped() -> T:
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        return fn()

    return in_child(dropped)


class Exchanger:
    """The rename-swap attacker: a thread that keeps exchanging two names in one
    directory (``renameat2`` with ``RENAME_EXCHANGE``) until the ``exchanging`` block
    ends.  ``swaps`` counts the exchanges made, so a test can require that the race
    was real; an exchange that fails is raised when the block ends."""

    def __init__(self, directory: Path, first: str, second: str) -> None:
        self.directory = directory
        self.names = (first, second)
        self.swaps = 0
        self.failure: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        first, second = self.names
        fd = os.open(self.directory, os.O_PATH | os.O_DIRECTORY)
        try:
            while not self.stop.is_set():
                syscalls.renameat2(fd, first, fd, second, syscalls.RENAME_EXCHANGE)
                self.swaps += 1
        except BaseException as exc:
            self.failure = exc
        finally:
            os.close(fd)


@contextlib.contextmanager
def exchanging(directory: Path, first: str, second: str) -> Iterator[Exchanger]:
    """While the block runs, an :class:`Exchanger` swaps ``first`` and ``second``."""
    attacker = Exchanger(directory, first, second)
    thread = threading.Thread(target=attacker.run, daemon=True)
    thread.start()
    try:
        yield attacker
    finally:
        attacker.stop.set()
        thread.join()
    if attacker.failure is not None:
        raise attacker.failure

"""Shared test helpers: fixture trees, outside snapshots, dropping privileges."""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandboxfs.core.allowlist import AllowList, Root
from sandboxfs.core.chokepoint import Confinement
from sandboxfs.core.resolver import Resolver
from sandboxfs.fs.facade import Sandbox

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


def run_as_nobody(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a forked child with root's privileges dropped (uid/gid 65534).

    Returns fn's result, or re-raises its exception, in the parent.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # reported to the parent
            outcome = (False, exc)
        try:
            payload = pickle.dumps(outcome)
        except Exception as exc:
            payload = pickle.dumps((False, RuntimeError(repr(exc))))
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    ok, value = pickle.loads(data)
    if ok:
        return value
    raise value

"""Invariant tested: for any directory, ``syscalls.read_dir(fd)`` (the native
``sfs_read_dir``) returns exactly its entries but ``.`` and ``..``, each once, in
byte order of the names, each with the kind letter of what the entry is
(``f`` regular file, ``d`` directory, ``l`` symlink, ``o`` anything else), the
names decoded as ``os.fsdecode`` decodes them; it never raises for a readable
directory, and it leaves the descriptor's offset at the start (a second call and
``os.scandir`` on the same descriptor see the same entries).  The oracle is
``os.scandir`` with ``lstat``, sorted by ``os.fsencode``.

Input format (so a regression input can be written by hand): entries separated by
``/``; in each, the first byte modulo 4 is the kind to create (0 file, 1
directory, 2 symlink, 3 FIFO) and the rest is the name's bytes (NUL removed, cut
to 255 bytes; empty, ``.``, ``..`` and repeated names are skipped).  A directory
with no entries, and one with thousands (many getdents calls), come from the
seeds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from typing import Final

import atheris

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    from sandboxfs.binding.syscalls import read_dir

KNOWN_BUGS: Final[dict[str, str]] = {}
_BASE: Final = tempfile.mkdtemp(prefix="sandboxfs-fuzz-dirents-")
_KIND_OF_MODE: Final = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l"}


def cleanup() -> None:
    shutil.rmtree(_BASE, ignore_errors=True)


def _make(directory: str, data: bytes) -> None:
    seen: set[bytes] = set()
    for chunk in data.split(b"/"):
        if not chunk:
            continue
        kind, name = chunk[0] % 4, chunk[1:].replace(b"\0", b"")[:255]
        if name in (b"", b".", b"..") or name in seen:
            continue
        seen.add(name)
        path = os.path.join(os.fsencode(directory), name)
        if kind == 0:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        elif kind == 1:
            os.mkdir(path)
        elif kind == 2:
            os.symlink(b"target", path)
        else:
            os.mkfifo(path)


def _oracle(fd: int) -> list[str]:
    found = []
    with os.scandir(fd) as it:
        for item in it:
            mode = stat.S_IFMT(item.stat(follow_symlinks=False).st_mode)
            found.append(_KIND_OF_MODE.get(mode, "o") + item.name)
    return sorted(found, key=lambda record: os.fsencode(record[1:]))


def TestOneInput(data: bytes) -> None:
    directory = tempfile.mkdtemp(dir=_BASE)
    try:
        _make(directory, data)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names, kinds = read_dir(fd)
            assert len(names) == len(kinds)
            first = [kind + name for name, kind in zip(names, kinds, strict=True)]
            assert first == _oracle(fd), (first, _oracle(fd))
            assert read_dir(fd) == (names, kinds)  # the offset was left at the start
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

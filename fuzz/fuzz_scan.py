"""Invariant tested: the scan helpers of native/scan.c return an answer or raise
ValueError, never anything else: ``find`` and ``count_byte`` equal ``bytes.find`` and
``bytes.count`` on any bytes and window; ``Directory.read_files`` (``sfs_read_leaves``)
on any list of names either refuses the whole list (ValueError: a name that is not a
leaf name) or classifies each name exactly as a small Python model of the file says,
keeps bytes only of regular files in that one directory and then exactly their
bytes, never follows a symlink (inside or out), never reads (or waits on) a FIFO, a
device or a directory, and leaves no descriptor open.

Input format (so a regression input can be written by hand): byte 0 & 3 is the mode.
Mode 0 (buffers): the rest is ``needle 0xFE hay``; byte 1 also picks the byte counted.
Modes 1-3 (reading): byte 1 picks the block size, byte 2 the probe, byte 3 the arena
size and byte 4 the number of slots (indexes into ``BLOCKS``, ``PROBES``, ``ARENAS``,
``SLOTS``); then ``content 0xFE needle 0xFE names``: ``content`` is written to the file
``f0`` first, and each byte of ``names`` is an index into ``NAMES``.

Known bugs can be tolerated for long runs, never by default: set
``SANDBOXFS_FUZZ_TOLERATE`` to a comma-separated list of ids from ``KNOWN_BUGS``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import Final

import atheris

with (
    atheris.instrument_imports(include=["sandboxfs"])
    if __name__ == "__main__"
    else contextlib.nullcontext()
):
    from sandboxfs.binding import syscalls
    from sandboxfs.core.allowlist import Root
    from sandboxfs.core.chokepoint import LIST_FLAGS, Confinement, Directory, Location

KNOWN_BUGS: Final[dict[str, str]] = {}  # fixed ones stay as regression inputs
TOLERATE_ENV: Final = "SANDBOXFS_FUZZ_TOLERATE"

BLOCKS: Final = (1, 2, 7, 64, 4096)
PROBES: Final = (0, 1, 4, 8192)
ARENAS: Final = (1, 8, 100, 4096, 65536)
SLOTS: Final = (1, 2, 3, 16)
CANARY: Final = b"CANARY: outside content must never be read\n"
#: Regular files of the directory and their bytes (f0 is rewritten by each input).
FILES: Final = {
    "f1": b"plain text\nwith needle\n",
    "f2": b"\0binary needle",
    "f3": b"",
    "f4": b"x" * 5000 + b"\n",
}
NAMES: Final = (
    "f0",
    "f1",
    "f2",
    "f3",
    "f4",
    "sub",
    "fifo",
    "zero",
    "link_out",
    "link_in",
    "link_dir",
    "gone",
    "",
    ".",
    "..",
    "sub/g",
    "../outside/secret.txt",
    "/etc/passwd",
    "x\udcff",
)
_KINDS: Final = ("gone", "text", "binary", "search", "later")

BASE: Final = os.path.realpath(tempfile.mkdtemp(prefix="sandboxfs-fuzz-scan-"))
ROOT: Final = BASE + "/root"


def _watch_for_exit(directory: str) -> Callable[[], None]:
    """Remove ``directory`` once this process is gone, however it ends (libFuzzer
    leaves with exit(), so atexit handlers never run): a forked watcher waits for
    end-of-file on a pipe only this process holds (as in fuzz_resolver.py)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watcher
        try:
            os.close(write_end)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.read(read_end, 1)
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            os._exit(0)
    os.close(read_end)

    def stop() -> None:
        os.close(write_end)
        os.waitpid(pid, 0)

    return stop


def _build_tree() -> None:
    """The directory read (files, a FIFO, a device, symlinks), and one outside it."""
    os.makedirs(ROOT + "/sub")
    os.makedirs(BASE + "/outside")
    with open(BASE + "/outside/secret.txt", "wb") as out:
        out.write(CANARY)
    with open(ROOT + "/sub/g", "wb") as out:
        out.write(b"below\n")
    for name, data in FILES.items():
        with open(f"{ROOT}/{name}", "wb") as out:
            out.write(data)
    os.mkfifo(ROOT + "/fifo")
    os.symlink(BASE + "/outside/secret.txt", ROOT + "/link_out")
    os.symlink("f1", ROOT + "/link_in")
    os.symlink("sub", ROOT + "/link_dir")
    try:  # /dev/zero's numbers: read, it would never end
        os.mknod(ROOT + "/zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        os.mkfifo(ROOT + "/zero")


STOP_WATCHER: Final = _watch_for_exit(BASE) if __name__ == "__main__" else None
_build_tree()
_ROOT: Final = Root.open(ROOT)
_CONFINEMENT: Final = Confinement()
_FD: Final = Location(_ROOT, ()).open(_CONFINEMENT, LIST_FLAGS, exact=True)
DIRECTORY: Final = Directory(_FD, Location(_ROOT, ()), ".", _CONFINEMENT)


def cleanup() -> None:
    """Close what this module opened and remove its tree (for tests that import it)."""
    DIRECTORY.close()
    _ROOT._finalizer()
    if STOP_WATCHER is not None:
        STOP_WATCHER()
    shutil.rmtree(BASE, ignore_errors=True)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def buffers_mode(payload: bytes, byte: int) -> None:
    needle, _, hay = payload.partition(b"\xfe")
    n = len(hay)
    for start, end in ((0, n), (n // 3, n), (0, n // 2), (n // 4, n - n // 4)):
        assert syscalls.find(hay, needle, start, end) == hay.find(needle, start, end)
        assert syscalls.count_byte(hay, byte, start, end) == hay.count(bytes([byte]), start, end)


def _model(name: str, content: bytes, block: int, probe: int, arena: int, needle: bytes) -> str:
    """What read_leaves must say of ``name`` (arena space aside)."""
    data = content if name == "f0" else FILES.get(name)
    if data is None:
        return "gone"
    want = min(block, len(data) + 1)
    if want + 1 > arena or len(data) >= block:  # the file and the newline after it
        return "later"
    if b"\0" in data[:probe]:
        return "binary"
    if needle and needle not in data:
        return "text"
    return "search"


def read_mode(settings: bytes, payload: bytes) -> None:
    block = BLOCKS[settings[0] % len(BLOCKS)]
    probe = PROBES[settings[1] % len(PROBES)]
    arena = ARENAS[settings[2] % len(ARENAS)]
    slots = SLOTS[settings[3] % len(SLOTS)]
    content, _, rest = payload.partition(b"\xfe")
    needle, _, indexes = rest.partition(b"\xfe")
    names = [NAMES[i % len(NAMES)] for i in indexes[:12]]
    with open(ROOT + "/f0", "wb") as out:
        out.write(content)
    batch = syscalls.LeafBatch(arena, slots)
    leaves = [n for n in names if n and n not in (".", "..") and "/" not in n]
    before = _open_fds()
    done = 0
    encoded = [os.fsencode(name) + b"\0" for name in names]
    while True:
        try:
            count = DIRECTORY.read_files(
                batch, b"".join(encoded[done:]), block=block, probe=probe, needle=needle
            )
        except ValueError:
            assert len(leaves) != len(names), names  # refused: some name is not a leaf
            assert _open_fds() == before
            return
        assert len(leaves) == len(names), names
        assert _open_fds() == before
        assert (count >= 1) == (done < len(names)), (count, done, names)
        kinds = batch.kinds(count)
        for index, kind in enumerate(kinds):
            name = names[done + index]
            want = _model(name, content, block, probe, arena, needle)
            assert _KINDS[kind] == want, (name, _KINDS[kind], want)
            start, length = batch.spans[2 * index], batch.spans[2 * index + 1]
            kept = bytes(batch.view[start : start + length])
            if want == "search":
                assert kept == (content if name == "f0" else FILES[name]), name
                assert batch.view[start + length] == ord("\n")  # no line joins the next file
            else:
                assert (start, length) == (0, 0), name
            assert CANARY not in kept
        done += count
        if done >= len(names):
            break


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    mode = data[0] & 3
    if mode == 0:
        buffers_mode(data[2:], data[1])
    elif len(data) >= 5:
        read_mode(data[1:5], data[5:])


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()

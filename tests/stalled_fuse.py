"""A FUSE filesystem that never answers: the stalled mount the inline path must
never reach.

The kernel is handed a ``/dev/fuse`` descriptor at mount time and this process
never reads from it, so the kernel's first request (``FUSE_INIT``) is never
answered and every operation on the mount waits, as on a hung network mount or a
wedged FUSE daemon.  How many operations wait is read from the connection's
``waiting`` file (fusectl, mounted privately), so a test knows a call is stalled
without sleeping.  Closing the descriptor aborts the connection (waiting
operations fail with ENOTCONN), and the mount is then detached.  Needs root (or
CAP_SYS_ADMIN) and a usable ``/dev/fuse``; the tests skip otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_MNT_DETACH = 2


class StalledMount:
    """A mounted FUSE filesystem that never answers (see the module)."""

    def __init__(self, target: Path, fd: int, control: Path) -> None:
        self.target = target
        self.fd = fd
        self._control = control

    def connection(self) -> str:
        """The connection's number: the mount's device minor, from the mount table
        (a stat of the mount would wait)."""
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split(" ")
            if fields[4] == str(self.target):
                return fields[2].split(":")[1]
        raise AssertionError(f"{self.target} is not mounted")

    def waiting(self) -> int:
        """Operations on the mount waiting for an answer now."""
        return int((self._control / self.connection() / "waiting").read_text())

    def abort(self) -> None:
        """End the connection: every waiting operation fails (ENOTCONN) now."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _mount(libc: ctypes.CDLL, source: bytes, target: Path, kind: bytes, options: bytes) -> None:
    if libc.mount(source, os.fsencode(target), kind, 0, options) != 0:
        pytest.skip(f"cannot mount {kind.decode()} here: {os.strerror(ctypes.get_errno())}")


def _detach(libc: ctypes.CDLL, target: Path) -> None:
    if libc.umount2(os.fsencode(target), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code != errno.EINVAL:  # EINVAL: not mounted any more
            raise OSError(code, os.strerror(code), str(target))


@contextmanager
def stalled_mount(target: Path) -> Iterator[StalledMount]:
    """Mount a FUSE filesystem at ``target`` (an existing empty directory) that never
    answers; on exit, abort it and detach it."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        pytest.skip(f"/dev/fuse is not usable here: {exc.strerror}")
    with tempfile.TemporaryDirectory(prefix="sfs-fusectl-") as control:
        mount = StalledMount(target, fd, Path(control))
        try:
            _mount(libc, b"fusectl", Path(control), b"fusectl", b"")
            try:
                options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
                _mount(libc, b"stalled", target, b"fuse.stalled", options)
                try:
                    yield mount
                finally:
                    mount.abort()
                    _detach(libc, target)
            finally:
                _detach(libc, Path(control))
        finally:
            mount.abort()

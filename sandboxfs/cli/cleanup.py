"""Removing the unix socket a server made, however the server ends.

Landlock, applied after the socket is made, leaves the server no right to remove
anything outside its allowed directories, and the socket usually lies outside
them.  So its removal is handed to a helper process forked before Landlock (and
before any thread exists): it holds the read end of a pipe whose write end only
the server holds, and when the pipe ends (the server returned, or died of any
signal) it removes the socket if it is still the one the server made (same device
and inode), then exits.  The helper ignores SIGINT, SIGTERM and SIGHUP (a terminal
or a supervisor may signal the whole process group: the server then stops, and the
helper follows) and holds no other descriptor.  At a normal exit the server
closes the pipe and waits for the helper, so the socket is gone by the time the
server's exit status is known.  Without Landlock the server removes the socket
itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import final


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT back for the duration (a Ctrl-C then lands after it), so that
    what is made inside is made whole: a socket together with what removes it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@final
class SocketCleanup:
    """Removes the unix socket at ``path`` once the server is done with it."""

    def __init__(self, path: str, *, confined: bool) -> None:
        """Remember the socket just made (and, when the process is about to be
        confined, start the helper that will remove it)."""
        self.path = path
        st = os.lstat(path)
        self._identity = (st.st_dev, st.st_ino)
        self._helper: tuple[int, int] | None = None
        if confined:
            self._helper = self._fork()

    def _fork(self) -> tuple[int, int]:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the helper: only os calls, then _exit
            try:
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_IGN)
                os.closerange(0, read_end)
                os.closerange(read_end + 1, os.sysconf("SC_OPEN_MAX"))
                while os.read(read_end, 64):
                    pass
                self._remove()
            finally:
                os._exit(0)
        os.close(read_end)
        return pid, write_end

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._identity:
                os.unlink(self.path)

    def finish(self) -> None:
        """The server is done: remove the socket (through the helper, if any)."""
        if self._helper is None:
            self._remove()
            return
        pid, write_end = self._helper
        self._helper = None
        os.close(write_end)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

"""code_map's parse pool, as the server sees it: the supervisor process and the fresh
helpers it forks (one call's use of them: :mod:`sandboxfs.tools.parserun`).

The server never parses: it reads a file through the chokepoint and sends the
bytes to a helper (:mod:`sandboxfs.tools.parsehelper`: no descriptor, seccomp,
Landlock without filesystem access, ``RLIMIT_AS``, ``RLIMIT_CPU``), which answers
with spans and names the server checks (:mod:`sandboxfs.tools.parsewire`) and
cuts from its own copy of the bytes (:mod:`sandboxfs.tools.codefacts`).  While
a call waits for helpers its thread blocks in ``poll``, so no parse holds the
server's interpreter: every other call of every client goes on.

:class:`ParserPool` starts the supervisor (:meth:`ParserPool.start`, from a clean
``exec`` with ``close_fds``; the server calls it before opening any allowed
directory) and keeps :data:`SPARE` fresh helpers waiting.  A helper serves one
call and is killed when that call ends (:meth:`ParserPool.discard`), so
nothing one call's files did to a helper reaches another call.

Guarantees: the helpers :meth:`ParserPool.checkout` gives are fresh (never used
by another call) and confined (the supervisor hands one over only once it says
so); it raises :class:`ParserUnavailable` once the supervisor is gone and no
helper is left.  Safe to share between threads.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import math
import os
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Final, final

from sandboxfs.fs import SandboxError
from sandboxfs.tools.parsewire import COMMAND, KILL, SPAWN, SPAWNED, TEST_ABORT_ENV

#: Fresh helpers kept waiting for the next call.
SPARE: Final = 2
#: Helpers alive at once, waiting or serving a call, at most.
HELPERS_MAX: Final = 8
#: Address space of the supervisor and of each helper (RLIMIT_AS).
MEMORY_BYTES: Final = 1024 * 1024 * 1024
#: CPU seconds a helper may use beyond the call's time budget (RLIMIT_CPU).
CPU_GRACE: Final = 10
#: The supervisor's program.  The tools package's ``__init__`` (every tool, the
#: filesystem layer) is replaced by an empty package: the supervisor loads only the
#: modules it runs (``-m`` would also import the module twice).
_SUPERVISOR: Final = (
    "import os, sys, types, sandboxfs; "
    "tools = types.ModuleType('sandboxfs.tools'); "
    "tools.__path__ = [os.path.join(os.path.dirname(sandboxfs.__file__), 'tools')]; "
    "sys.modules['sandboxfs.tools'] = tools; "
    "from sandboxfs.tools.parsehelper import main; sys.exit(main())"
)


class ParserUnavailable(SandboxError):
    """The parse supervisor is gone: code_map cannot parse until the server restarts."""


@final
class Helper:
    """A helper the supervisor forked: its pid and the server's end of its socket."""

    __slots__ = ("pid", "sock")

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock


def _environment() -> dict[str, str]:
    """What the supervisor gets of the environment: where Python finds sandboxfs and
    its libraries, and the test switch that makes helpers abort; nothing else (no
    token, no tunables)."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "LC_ALL": "C.UTF-8"}
    marker = os.environ.get(TEST_ABORT_ENV)
    if marker:
        env[TEST_ABORT_ENV] = marker
    return env


@final
class ParserPool:
    """The supervisor and its fresh helpers (see the module).  Safe to share between
    threads."""

    def __init__(
        self,
        control: socket.socket,
        process: subprocess.Popen[bytes] | None,
        *,
        spare: int = SPARE,
        limit: int = HELPERS_MAX,
    ) -> None:
        control.setblocking(False)
        self._control = control
        self.process = process
        self.spare = spare
        self.limit = limit
        self._lock = threading.Lock()
        self._receiving = threading.Lock()
        self._idle: list[Helper] = []
        self._busy = 0
        self._asked = spare  # the supervisor forks ``spare`` helpers as it starts
        #: Why the pool cannot give helpers any more, once it cannot.
        self.broken: str | None = None

    @classmethod
    def start(
        cls,
        *,
        cpu_seconds: float,
        memory: int = MEMORY_BYTES,
        seccomp: bool = True,
        require_seccomp: bool = False,
        spare: int = SPARE,
        limit: int = HELPERS_MAX,
    ) -> ParserPool:
        """Start the supervisor: a clean exec of this Python that inherits only its end
        of the control socket (see :mod:`sandboxfs.tools.parsehelper`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [
            sys.executable, "-P", "-B", "-c", _SUPERVISOR,
            "--control", str(theirs.fileno()), "--spare", str(spare),
            "--cpu-seconds", str(math.ceil(cpu_seconds) + CPU_GRACE), "--memory", str(memory),
        ]  # fmt: skip
        if not seccomp:
            argv.append("--no-seccomp")
        if require_seccomp:
            argv.append("--require-seccomp")
        try:
            process = subprocess.Popen(  # noqa: S603 - this Python, our own module
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(theirs.fileno(),),
                env=_environment(),
                cwd="/",
                start_new_session=True,  # no terminal's signals: it ends with the server
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(ours, process, spare=spare, limit=limit)

    # -- the control socket (callers hold self._lock to send) -------------------------------

    def _send(self, op: bytes, pid: int = 0) -> None:
        if self.broken:
            return
        try:
            self._control.send(COMMAND.pack(op, pid))
        except OSError as exc:  # gone (EPIPE), or not reading (EAGAIN): either way
            self._break(f"its control socket failed ({os.strerror(exc.errno or errno.EIO)})")

    def _break(self, why: str) -> None:
        self.broken = self.broken or f"the code parser's supervisor is gone: {why}"

    def _top_up(self) -> None:
        """Ask for helpers until ``spare`` are waiting or on their way."""
        while (
            len(self._idle) + self._asked < self.spare
            and len(self._idle) + self._asked + self._busy < self.limit
            and not self.broken
        ):
            self._asked += 1
            self._send(SPAWN)

    def _receive(self, timeout: float) -> None:
        """Take the helpers the supervisor sent, waiting up to ``timeout`` seconds for
        one (one thread receives at a time)."""
        if not self._receiving.acquire(timeout=max(timeout, 0.0)):
            return
        try:
            poller = select.poll()
            poller.register(self._control.fileno(), select.POLLIN)
            wait = math.ceil(max(timeout, 0.0) * 1000)
            while poller.poll(wait):
                wait = 0
                try:
                    message, fds, _, _ = socket.recv_fds(self._control, 64, 4)
                except BlockingIOError:
                    return
                except OSError as exc:
                    with self._lock:
                        self._break(os.strerror(exc.errno or errno.EIO))
                    return
                if not message:
                    with self._lock:
                        self._break("it exited")
                    return
                if len(message) != SPAWNED.size or len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    with self._lock:
                        self._break("it sent something it should not")
                    return
                sock = socket.socket(fileno=fds[0])
                sock.setblocking(False)
                with self._lock:
                    self._asked = max(self._asked - 1, 0)
                    self._idle.append(Helper(SPAWNED.unpack(message)[0], sock))
        finally:
            self._receiving.release()

    # -- helpers for calls ------------------------------------------------------------------

    def checkout(self, want: int, deadline: float, *, wait: bool = True) -> list[Helper]:
        """Up to ``want`` fresh helpers, now; with ``wait``, at least one unless the
        deadline passes first.  Raises ParserUnavailable if the supervisor is gone
        and none is left."""
        while True:
            with self._lock:
                taken = self._idle[-want:]
                del self._idle[len(self._idle) - len(taken) :]
                self._busy += len(taken)
                broken = self.broken
                if not taken and not self._asked and self._busy < self.limit:
                    self._asked += 1
                    self._send(SPAWN)
            if taken:
                return taken
            if broken:
                raise ParserUnavailable(broken)
            remaining = deadline - time.monotonic()
            self._receive(remaining if wait else 0.0)
            if not wait or remaining <= 0:
                with self._lock:
                    taken = self._idle[-want:]
                    del self._idle[len(self._idle) - len(taken) :]
                    self._busy += len(taken)
                return taken

    def discard(self, helpers: list[Helper]) -> None:
        """Kill helpers a call is done with, and ask for fresh ones (only then: while
        a call parses, the supervisor forks only for a call that found none)."""
        with self._lock:
            for helper in helpers:
                helper.sock.close()
                self._send(KILL, helper.pid)
                self._busy -= 1
            self._top_up()

    @property
    def idle(self) -> int:
        """Fresh helpers waiting now."""
        return len(self._idle)

    def forget(self) -> None:
        """Close this process's end of the pool without waiting for anything: in a
        process forked from the server that uses another pool (``--workers``), or in
        the parent that serves nothing.  The supervisor stops once no process holds
        its control socket."""
        with self._lock:
            self._break("the pool was handed to another process")
            for helper in self._idle:
                helper.sock.close()
            self._idle.clear()
            self._control.close()

    def close(self) -> None:
        """Stop the supervisor and its helpers (it kills them when its socket closes)."""
        with self._lock:
            self._break("the pool was closed")
            for helper in self._idle:
                helper.sock.close()
            self._idle.clear()
            self._control.close()
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)


# -- the pool of this process ------------------------------------------------------------

_shared: ParserPool | None = None
_shared_lock = threading.Lock()


def install(pool: ParserPool) -> None:
    """Make ``pool`` the one code_map uses in this process (the server's, started
    before any directory was opened)."""
    global _shared  # noqa: PLW0603 - one pool per process, set once at start-up
    with _shared_lock:
        _shared = pool


def shared(cpu_seconds: float) -> ParserPool:
    """This process's pool; started now (from a clean exec) if none was installed,
    as in a program that uses the tools without the server."""
    global _shared  # noqa: PLW0603 - see install()
    with _shared_lock:
        if _shared is None:
            _shared = ParserPool.start(cpu_seconds=cpu_seconds)
            atexit.register(_shared.close)
        return _shared

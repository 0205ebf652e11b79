"""Keeps a server under audit from outliving the auditor.

    python -P -m sandboxfs.audit.leash [--tag=TAG] -- CMD ...

Runs ``CMD`` as its child, on the same stdin, stdout and stderr, in a process
group the leash leads, and ends when it ends, with its exit status.  If the
auditor (the leash's parent) ends first — SIGTERM, SIGKILL, a crash — the leash
kills its whole group: the server, whatever the server started (``npx`` starts
``node``), and itself.  The server is also given ``PR_SET_PDEATHSIG``: a killed
leash takes it along.  A server that hangs in a call, ignores SIGTERM or never
reads its end of input is therefore never left running.

The leash is single-threaded, so the parent death signal is tied to the process
that forked (the auditor itself starts servers from worker threads, whose exit
would fire it: that is why the signal is not set on the auditor's side).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Final

PR_SET_PDEATHSIG: Final = 1


def helper(module: str) -> list[str]:
    """How the auditor starts one of its own modules as a process: this interpreter
    with ``-P``, so that nothing in the working directory (a clone's ``sandboxfs/``
    source tree, say) can shadow the installed package."""
    return [sys.executable, "-P", "-m", module]


def command(argv: Sequence[str], tag: str = "") -> list[str]:
    """``argv`` started on a leash; ``tag`` (an argument of the leash's own command
    line, see :func:`sandboxfs.audit.procs.tagged`) finds its processes again."""
    return [*helper("sandboxfs.audit.leash"), *([f"--tag={tag}"] if tag else []), "--", *argv]


def _child(argv: list[str], leash: int) -> None:
    """In the forked child: die with the leash, then become the server."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != leash:
            os._exit(126)  # the leash is already gone (or the kernel refused)
        os.execvp(argv[0], argv)  # noqa: S606 - the server's own command line
    except OSError as exc:
        os.write(2, f"leash: cannot run {argv[0]}: {exc.strerror}\n".encode())
    os._exit(127)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] and args[0].startswith("--tag="):
        args = args[1:]  # only there to be found in /proc
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    auditor = os.getppid()
    watch = os.pidfd_open(auditor)
    if os.getppid() != auditor:  # it ended before the watch was set up
        return 137
    # Its own group, so that killing the group spares the auditor's; a session leader
    # (started with start_new_session) leads its group already and may not.
    with contextlib.suppress(PermissionError):
        os.setpgid(0, 0)
    leash = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(watch)
        _child(args, leash)
    child = os.pidfd_open(pid)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        ready, _, _ = select.select([watch, child], [], [])
        if child in ready:
            break
        if watch in ready:  # the auditor is gone: so is everything it started here
            if os.getpgrp() == leash:
                os.killpg(0, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

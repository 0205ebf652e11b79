"""Ties a tenant worker's life to the front that started it.

    python -m sandboxfs.tenancy.tether FRONT_PID -- CMD ...

Sets ``PR_SET_PDEATHSIG`` to SIGKILL (it survives ``execve``), checks that its
parent is still ``FRONT_PID`` (the front may have died before the signal was
set), then becomes ``CMD``.  The front forks it from its main thread, which
lives as long as the front, so the signal fires exactly when the front ends,
however it ends: no worker outlives its front.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final

PR_SET_PDEATHSIG: Final = 1


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != int(argv[0]):
        return 126  # the front is already gone (or the kernel refused)
    command = list(argv[2:])
    try:
        os.execv(command[0], command)  # noqa: S606 - the worker's own command line
    except OSError as exc:
        print(f"sandboxfs: cannot run the tenant worker: {exc.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

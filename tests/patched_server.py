"""The sandboxfs server with test-only patches applied in this process.

    python tests/patched_server.py PATCH[,PATCH...] ARGS...

What a test needs to weaken lives here, in the tests, never as a switch the
shipped server reads:

* ``bypass-openat2``: once Landlock is applied, the openat2 layer also admits
  "/", so only Landlock stands between a request and the rest of the system;
* ``landlock-abi=N``: the kernel's Landlock ABI reads as N (0: no Landlock);
* ``no-write-lock``: conditional mutations check the revision without the
  exclusive (OFD) lock, so two processes can both pass the check;
* ``crash-patch-at=STEP``: the process kills itself (SIGKILL) when apply_patch's
  commit reaches STEP (``intent``, ``change 1``, ...: see sandboxfs.fs.patches);
* ``ask-seconds=N``: a question to the user (``--ask``) is given up after N seconds
  (instead of minutes), so a test of "no answer" ends soon.
* ``roots-timeout=S``: a question to the client's Roots is given up (and calls
  wait for it) after S seconds instead of 30, so a test of a client that never
  answers does not wait 30 s.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sandboxfs.cli import main as cli
from sandboxfs.core import landlock
from sandboxfs.core.allowlist import Root
from sandboxfs.fs import guard
from sandboxfs.fs import patches as fs_patches
from sandboxfs.session import clientroots, driver


def _bypass_openat2() -> None:
    confine = landlock.confine

    def confine_then_admit_everything(roots: list[Root], **options: Any) -> Any:
        status = confine(roots, **options)
        roots.append(Root.open("/"))  # the list the server builds its allow-list from
        return status

    landlock.confine = confine_then_admit_everything  # type: ignore[assignment]


def _landlock_abi(value: str) -> None:
    landlock.abi_version = lambda: int(value)  # type: ignore[assignment]


def _no_write_lock() -> None:
    @contextmanager
    def unlocked(fd: int, path: str) -> Iterator[None]:
        yield

    guard.exclusive_lock = unlocked  # type: ignore[assignment]


def _crash_patch_at(step: str) -> None:
    def at(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    fs_patches.STEP = at


def _roots_timeout(value: str) -> None:
    clientroots.ROOTS_FETCH_TIMEOUT = float(value)


def apply(patches: Sequence[str]) -> None:
    for patch in patches:
        name, _, value = patch.partition("=")
        if name == "bypass-openat2":
            _bypass_openat2()
        elif name == "landlock-abi":
            _landlock_abi(value)
        elif name == "no-write-lock":
            _no_write_lock()
        elif name == "crash-patch-at":
            _crash_patch_at(value)
        elif name == "ask-seconds":
            driver.ASK_SECONDS = float(value)  # type: ignore[misc]
        elif name == "roots-timeout":
            _roots_timeout(value)
        else:
            raise SystemExit(f"unknown patch {patch!r}")


if __name__ == "__main__":
    apply(sys.argv[1].split(","))
    print("TEST PATCHES APPLIED: " + sys.argv[1], file=sys.stderr, flush=True)
    sys.exit(cli.main(sys.argv[2:]))

"""Race attackers: a separate process that keeps changing a tree under a server.

    python -m sandboxfs.audit.attacker KIND ROOT OUTSIDE [ITERATIONS]

Kinds (each loops until SIGTERM, or ITERATIONS times):

* ``exchange-dir``   ROOT/d ⇄ ROOT/s with ``renameat2(RENAME_EXCHANGE)``, where ``s``
  is a symlink to OUTSIDE: a path through ``d`` sometimes leads outside.
* ``swap-file``      ROOT/f ⇄ ROOT/f-link, a symlink to OUTSIDE/canary.txt.
* ``rename-away``    ROOT/d is renamed to OUTSIDE/moved-d and back.
* ``plant-hardlink`` ROOT/h is removed and re-created as a hard link to
  OUTSIDE/canary.txt.

The attacker proves it attacked: once its fixture is in place it prints
``ready`` on a line of its own, and when it stops it prints one JSON line with
how many changes it made (``swaps``), how often it had to plant its fixture
again because the server's own writes replaced it (``replants``), and how many
attempts failed.  A server that writes over the planted symlink cannot end the
attack: the attacker plants it again.

The fixture each kind expects is made by :func:`prepare`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from sandboxfs.audit import leash
from sandboxfs.binding import syscalls

KINDS: Final = ("exchange-dir", "swap-file", "rename-away", "plant-hardlink")
#: How long a caller waits for the attacker to say it is ready, in seconds.
READY_TIMEOUT: Final = 60.0


def prepare(kind: str, root: Path, outside: Path, canary: bytes) -> None:
    """Create what ``kind`` attacks (idempotent for the outside canaries)."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "canary.txt").write_bytes(canary)
    (outside / f"canary-{kind}.txt").write_bytes(canary)
    if kind == "exchange-dir":
        (root / "d").mkdir()
        (root / "d" / "f").write_bytes(b"inside\n")
        (root / "d" / "inner").mkdir()
        (root / "s").symlink_to(outside)
    elif kind == "swap-file":
        (root / "f").write_bytes(b"inside\n")
        (root / "f-link").symlink_to(outside / "canary.txt")
    elif kind == "rename-away":
        (root / "d" / "inner").mkdir(parents=True)
        (root / "d" / "inner" / "inside.txt").write_bytes(b"inside\n")
    elif kind == "plant-hardlink":
        (root / "h").write_bytes(b"inside\n")
    else:
        raise ValueError(f"unknown attack {kind!r}")


class AttackerNotReady(RuntimeError):
    """The attacker process could not start its attack (the audit cannot run the case)."""


@final
@dataclass
class Tally:
    """What an attack did."""

    swaps: int = 0
    replants: int = 0
    failures: int = 0


def _kind_at(dir_fd: int, name: str) -> str:
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "file"


def _replant(kind: str, root_fd: int, outside: Path) -> bool:
    """Put back the symlink the attack needs if the server's writes replaced it."""
    if kind == "swap-file":
        kinds = {_kind_at(root_fd, "f"), _kind_at(root_fd, "f-link")}
        if "link" in kinds:
            return False
        for name in ("f", "f-link"):
            if _kind_at(root_fd, name) == "absent":
                os.symlink(str(outside / "canary.txt"), name, dir_fd=root_fd)
                return True
        os.unlink("f-link", dir_fd=root_fd)
        os.symlink(str(outside / "canary.txt"), "f-link", dir_fd=root_fd)
        return True
    if kind == "exchange-dir":
        kinds = {_kind_at(root_fd, "d"), _kind_at(root_fd, "s")}
        if "link" in kinds:
            return False
        missing = "s" if _kind_at(root_fd, "s") == "absent" else "d"
        if _kind_at(root_fd, missing) == "absent":
            os.symlink(str(outside), missing, dir_fd=root_fd)
            return True
    return False


def attack(
    kind: str,
    root: Path,
    outside: Path,
    iterations: int = 0,
    stopped: Callable[[], bool] = lambda: False,
) -> Tally:
    """Run the attack until ``stopped()`` (or ``iterations`` changes)."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    out_fd = os.open(outside, os.O_PATH | os.O_DIRECTORY)
    tally = Tally()
    try:
        while not stopped() and (iterations == 0 or tally.swaps < iterations):
            try:
                if _replant(kind, root_fd, outside):
                    tally.replants += 1
                _step(kind, root_fd, out_fd, outside)
                tally.swaps += 1
            except OSError:
                tally.failures += 1
    finally:
        os.close(root_fd)
        os.close(out_fd)
    return tally


def _step(kind: str, root_fd: int, out_fd: int, outside: Path) -> None:
    if kind == "exchange-dir":
        syscalls.renameat2(root_fd, "d", root_fd, "s", syscalls.RENAME_EXCHANGE)
    elif kind == "swap-file":
        syscalls.renameat2(root_fd, "f", root_fd, "f-link", syscalls.RENAME_EXCHANGE)
    elif kind == "rename-away":
        os.rename("d", "moved-d", src_dir_fd=root_fd, dst_dir_fd=out_fd)
        os.rename("moved-d", "d", src_dir_fd=out_fd, dst_dir_fd=root_fd)
    elif kind == "plant-hardlink":
        with contextlib.suppress(FileNotFoundError):
            os.unlink("h", dir_fd=root_fd)
        os.link(str(outside / "canary.txt"), "h", dst_dir_fd=root_fd)
    else:
        raise ValueError(f"unknown attack {kind!r}")


@final
class AttackerProcess:
    """An attacker in a process of its own: started, waited for until it is ready,
    stopped, and asked what it did."""

    def __init__(self, kind: str, root: Path, outside: Path) -> None:
        self.process = subprocess.Popen(
            [*leash.helper("sandboxfs.audit.attacker"), kind, str(root), str(outside)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,  # a Ctrl-C at the terminal is the auditor's to handle
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], READY_TIMEOUT)
        line = self.process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.process.kill()
            _, err = self.process.communicate()
            words = err.decode(errors="replace").strip().splitlines()
            why = words[-1] if words else f"no word within {READY_TIMEOUT:g} s"
            raise AttackerNotReady(f"the {kind} attacker did not get ready: {why}")
        assert self.process.stderr is not None
        self.process.stderr.close()  # it writes nothing there once ready

    def stop(self) -> Tally:
        """Stop the attack and return its tally."""
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=READY_TIMEOUT)
        lines = out.decode().strip().splitlines()
        return Tally(**json.loads(lines[-1])) if lines else Tally()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[0] not in KINDS:
        print(__doc__, file=sys.stderr)
        return 2
    iterations = int(argv[3]) if len(argv) == 4 else 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))  # before "ready"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the auditor stops it, by SIGTERM
    auditor = os.getppid()
    print("ready", flush=True)
    # An auditor that ended without stopping it (killed) leaves it to its own devices:
    # it then stops by itself.
    tally = attack(
        argv[0],
        Path(argv[1]),
        Path(argv[2]),
        iterations,
        lambda: bool(stop) or os.getppid() != auditor,
    )
    print(json.dumps(tally.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Race attackers: a separate process that keeps changing a tree under a server.

    python -m sandboxfs.audit.attacker KIND ROOT OUTSIDE [ITERATIONS]

Kinds (each loops until killed, or ITERATIONS times):

* ``exchange-dir``   ROOT/d ⇄ ROOT/s with ``renameat2(RENAME_EXCHANGE)``, where ``s``
  is a symlink to OUTSIDE: a path through ``d`` sometimes leads outside.
* ``swap-file``      ROOT/f ⇄ ROOT/f-link, a symlink to OUTSIDE/canary.txt.
* ``rename-away``    ROOT/d is renamed to OUTSIDE/moved-d and back.
* ``plant-hardlink`` ROOT/h is removed and re-created as a hard link to
  OUTSIDE/canary.txt.

The fixture each kind expects is made by :func:`prepare`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Final

from sandboxfs.binding import syscalls

KINDS: Final = ("exchange-dir", "swap-file", "rename-away", "plant-hardlink")


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


def attack(kind: str, root: Path, outside: Path, iterations: int = 0) -> int:
    """Run the attack; returns how many changes it made."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    out_fd = os.open(outside, os.O_PATH | os.O_DIRECTORY)
    done = 0
    try:
        while iterations == 0 or done < iterations:
            with contextlib.suppress(OSError):
                _step(kind, root_fd, out_fd, outside)
                done += 1
    finally:
        os.close(root_fd)
        os.close(out_fd)
    return done


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


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[0] not in KINDS:
        print(__doc__, file=sys.stderr)
        return 2
    iterations = int(argv[3]) if len(argv) == 4 else 0
    attack(argv[0], Path(argv[1]), Path(argv[2]), iterations)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The processes of a server under audit, found through /proc.

Every server runs on a leash (:mod:`sandboxfs.audit.leash`) whose command line
carries a tag unique to that start; the server's processes are the leash's
descendants (``npx`` starts ``node``, a wrapper script starts the real server).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

_PROC = Path("/proc")


def _pids() -> list[int]:
    return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in _pids():
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int((_PROC / str(entry) / "stat").read_text().rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(entry)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tagged(tag: str) -> int | None:
    """The process whose command line holds the argument ``tag``, or None."""
    wanted = tag.encode()
    for pid in _pids():
        with contextlib.suppress(OSError):
            if wanted in (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0"):
                return pid
    return None


def peak_rss(pids: set[int]) -> int:
    """The largest peak resident set (``VmHWM``, bytes) among ``pids``: it only grows,
    so a burst between two looks is not missed."""
    peak = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in (_PROC / str(pid) / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
    return peak

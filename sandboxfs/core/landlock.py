"""Landlock: the second, kernel-enforced layer that confines the whole process.

openat2 confines each call; Landlock makes the process unable to reach outside
the allowed directories even if a bug slipped past the first layer.  It is
applied once, from the main thread before any other thread exists, so every
thread inherits it: filesystem rights only beneath the allowed directories
(read rights only with ``--read-only``, or beneath a directory whose policy
is read-only), read-only access to Python's own
files (so lazy imports keep working), no TCP bind or connect (ABI >= 4) except
the listening port, and (ABI >= 6) no abstract unix sockets or signals outside
the process.  Irreversible by design.
"""

from __future__ import annotations

import errno
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.binding import syscalls
from sandboxfs.core.allowlist import Root

# Filesystem rights (linux/landlock.h), with the ABI that introduced them.
EXECUTE: Final = 1 << 0
WRITE_FILE: Final = 1 << 1
READ_FILE: Final = 1 << 2
READ_DIR: Final = 1 << 3
REMOVE_DIR: Final = 1 << 4
REMOVE_FILE: Final = 1 << 5
MAKE_CHAR: Final = 1 << 6
MAKE_DIR: Final = 1 << 7
MAKE_REG: Final = 1 << 8
MAKE_SOCK: Final = 1 << 9
MAKE_FIFO: Final = 1 << 10
MAKE_BLOCK: Final = 1 << 11
MAKE_SYM: Final = 1 << 12
REFER: Final = 1 << 13  # ABI 2
TRUNCATE: Final = 1 << 14  # ABI 3
IOCTL_DEV: Final = 1 << 15  # ABI 5

NET_BIND_TCP: Final = 1 << 0  # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1  # ABI 6

_READ: Final = READ_FILE | READ_DIR
_WRITE: Final = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM


def handled_fs(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows: all of them are restricted."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def root_rights(abi: int, *, read_only: bool) -> int:
    """What may be done beneath an allowed directory."""
    if read_only:
        return _READ
    rights = _READ | _WRITE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when Landlock is missing or disabled."""
    try:
        return syscalls.landlock_abi_version()
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def python_paths() -> list[str]:
    """Directories Python loads code from, readable so lazy imports keep working.

    The current directory is deliberately left out, even when ``sys.path``
    names it (as ``python -m`` does).
    """
    here = os.getcwd()
    candidates = {
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        *site.getsitepackages(),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the sandboxfs package
        *(os.path.abspath(entry) for entry in sys.path if entry),
    }
    candidates.discard(here)
    return sorted(p for p in candidates if os.path.isdir(p))


@final
@dataclass(frozen=True, slots=True)
class LandlockStatus:
    """What was enforced, for the log and for list_allowed_directories."""

    abi: int
    enforced: bool
    detail: str


def _only_thread() -> bool:
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return True  # no /proc: threading's count is all we can know


def _add_roots(ruleset: int, abi: int, roots: Sequence[Root], *, read_only: bool) -> None:
    """One rule per allowed directory; one its policy makes read-only is read-only
    here too."""
    for root in roots:
        frozen = read_only or not root.policy.writable
        syscalls.landlock_add_path_rule(ruleset, root_rights(abi, read_only=frozen), root.fd)


def _add_journal(ruleset: int, abi: int, journal: Root | None) -> None:
    """The change journal (outside every allowed directory) may be read and written."""
    if journal is not None:
        syscalls.landlock_add_path_rule(ruleset, root_rights(abi, read_only=False), journal.fd)


def _describe_roots(roots: Sequence[Root], *, read_only: bool) -> str:
    frozen = sum(1 for root in roots if read_only or not root.policy.writable)
    if frozen in (0, len(roots)):
        return ("read-only" if frozen else "read-write") + " beneath the allowed directories"
    return f"read-write beneath the allowed directories, read-only beneath {frozen} of them"


def confine(
    roots: Sequence[Root],
    *,
    read_only: bool,
    tcp_ports: Sequence[int] = (),
    socket_dirs: Sequence[str] = (),
    journal: Root | None = None,
) -> LandlockStatus:
    """Restrict this process to ``roots`` (and Python's own files, read-only).

    ``tcp_ports`` may be bound (HTTP mode); ``socket_dirs`` may hold a new unix
    socket; ``journal`` (``--journal``, outside every root) may be read and written.
    Returns what was enforced; raises OSError if the kernel refused.
    """
    abi = abi_version()
    if abi <= 0:
        return LandlockStatus(0, False, "the kernel does not support Landlock")
    if not _only_thread():
        raise RuntimeError("Landlock must be applied before any thread starts")
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    ruleset = syscalls.landlock_create_ruleset(handled_fs(abi), net, scoped)
    try:
        _add_roots(ruleset, abi, roots, read_only=read_only)
        _add_journal(ruleset, abi, journal)
        for path in python_paths():
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                syscalls.landlock_add_path_rule(ruleset, _READ, fd)
            finally:
                os.close(fd)
        for directory in socket_dirs:
            fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                syscalls.landlock_add_path_rule(ruleset, MAKE_SOCK | REMOVE_FILE, fd)
            finally:
                os.close(fd)
        if net:
            for port in tcp_ports:
                syscalls.landlock_add_net_rule(ruleset, NET_BIND_TCP, port)
        syscalls.set_no_new_privs()
        syscalls.landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)
    parts = [_describe_roots(roots, read_only=read_only)]
    parts += ["read-write beneath the change journal"] if journal is not None else []
    if net:
        parts.append(
            f"TCP bind only on port {', '.join(map(str, tcp_ports))}" if tcp_ports else "no TCP"
        )
    if scoped:
        parts.append("abstract unix sockets and signals scoped")
    return LandlockStatus(abi, True, f"Landlock ABI {abi}: " + "; ".join(parts))


def confine_network() -> LandlockStatus:
    """Restrict this process, and every process it starts, to no TCP bind or connect
    (ABI >= 4) and, with ABI >= 6, to abstract unix sockets and signals within its own
    domain.  The filesystem is left alone: this is for the tenants' front, whose
    workers inherit its domain and need their own directories (each worker then
    confines itself to those).  Returns what was enforced; raises OSError if the
    kernel refused."""
    abi = abi_version()
    if abi < 4:
        return LandlockStatus(abi, False, "the kernel's Landlock cannot restrict TCP")
    if not _only_thread():
        raise RuntimeError("Landlock must be applied before any thread starts")
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    # A layer that does not handle REFER denies every rename or link into another
    # directory beneath it (the kernel's default since ABI 2): handled and granted on
    # "/", this layer leaves them to the workers' own layers.
    ruleset = syscalls.landlock_create_ruleset(REFER, NET_BIND_TCP | NET_CONNECT_TCP, scoped)
    try:
        everywhere = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            syscalls.landlock_add_path_rule(ruleset, REFER, everywhere)
        finally:
            os.close(everywhere)
        syscalls.set_no_new_privs()
        syscalls.landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)
    parts = ["no TCP bind or connect"]
    if scoped:
        parts.append("abstract unix sockets and signals scoped")
    parts.append("the filesystem is not restricted (each worker confines itself)")
    return LandlockStatus(abi, True, f"Landlock ABI {abi}: " + "; ".join(parts))


def confine_nothing() -> LandlockStatus:
    """Restrict this process, and every process it starts, to **no** filesystem access
    at all (nothing opened, read, written, executed or made, anywhere), no TCP bind
    or connect (ABI >= 4), and abstract unix sockets and signals scoped to its own
    domain (ABI >= 6).  For code_map's parse helpers, which hold no file and need
    none.  Returns what was enforced; raises OSError if the kernel refused."""
    abi = abi_version()
    if abi <= 0:
        return LandlockStatus(0, False, "the kernel does not support Landlock")
    if not _only_thread():
        raise RuntimeError("Landlock must be applied before any thread starts")
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    ruleset = syscalls.landlock_create_ruleset(handled_fs(abi), net, scoped)
    try:
        syscalls.set_no_new_privs()
        syscalls.landlock_restrict_self(ruleset)
    finally:
        os.close(ruleset)
    return LandlockStatus(abi, True, f"Landlock ABI {abi}: no filesystem access")

"""seccomp: the third layer, which syscalls a process may make at all.

openat2 confines each path and Landlock where the process may reach; a seccomp
filter takes away the syscalls a filesystem server never needs, so that code
which took the process over (a memory-safety bug in a native library) cannot
make them either.  Each process sandboxfs runs gets its own filter:

* the **server** (stdio, HTTP, a tenant's worker): every syscall allowed but
  :data:`DENIED` (EPERM): starting programs, reading or steering other processes,
  mounts and ``chroot``, namespaces, loading code into the kernel (modules,
  kexec, BPF), ``userfaultfd``, io_uring (whose requests no seccomp filter
  sees), keyrings, ``personality``, opening files by handle (which skips path
  resolution), and the calls that change the machine (clock, hostname, swap,
  reboot).  Besides: ``clone`` with a namespace flag (EPERM), ``clone3`` (ENOSYS,
  so that the C library falls back to ``clone``, whose flags a filter can see),
  device nodes from ``mknod``/``mknodat``, ``ioctl(TIOCSTI)`` (typing into the
  terminal), and ``socket`` for any family the transport does not use: none
  over stdio, the listening socket's over HTTP;
* the tenants' **front**: the server's, but it starts its workers, so
  ``execve`` stays allowed, and it may make unix sockets to reach them
  (:func:`front_filter`); each worker adds its own server filter;
* code_map's **parse supervisor** and **helpers** (:mod:`sandboxfs.tools.parsehelper`):
  allow-lists, anything else kills the process (:func:`supervisor_filter`,
  :func:`helper_filter`): a helper may read and write its one socket, manage
  memory, arm its timer and exit.

Every filter first checks the architecture: a syscall made through another ABI
(i386's ``int 0x80``, x32 on x86_64) has other numbers, so it kills the process.
Filters are applied to every thread (``TSYNC``), inherited by child processes,
kept across ``execve`` and never removed; several filters stack and the
strictest answer wins.  Only the low 32 bits of an argument are examined: every
argument checked here is one the kernel itself reads as 32 bits (a descriptor,
a flag word, a mode, an ioctl request).  The BPF program is assembled here; the
shim (native/seccomp.c) only installs it, with syscall numbers from the C
library's headers for the architecture it was built for.
"""

from __future__ import annotations

import errno
import socket
import stat
import sys
import termios
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, final

from sandboxfs.binding import syscalls

# -- actions ---------------------------------------------------------------------------

ALLOW: Final = 0x7FFF0000
KILL_PROCESS: Final = 0x80000000
_ERRNO: Final = 0x00050000


def fail_with(code: int) -> int:
    """The action that makes a syscall fail with ``code`` (an errno)."""
    return _ERRNO | (code & 0xFFFF)


DENY: Final = fail_with(errno.EPERM)

# -- classic BPF, as seccomp runs it ------------------------------------------------------

_LD_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_AND: Final = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JEQ: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET: Final = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET: Final = 0x06  # BPF_RET | BPF_K
#: struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments.
_NR: Final = 0
_ARCH: Final = 4
_ARGS: Final = 16
#: Where an argument's low 32 bits sit in its 64.
_LOW: Final = 0 if sys.byteorder == "little" else 4

Instruction = tuple[int, int, int, int]


def _ret(action: int) -> Instruction:
    return (_RET, 0, 0, action)


@final
@dataclass(frozen=True, slots=True)
class Arg:
    """A condition on the low 32 bits of argument ``index``: ``(arg & mask)`` is one
    of ``equals``, or (``any_bit``) is not zero."""

    index: int
    mask: int = 0xFFFFFFFF
    equals: tuple[int, ...] = ()
    any_bit: bool = False

    def load(self) -> list[Instruction]:
        loads = [(_LD_ABS, 0, 0, _ARGS + 8 * self.index + _LOW)]
        if self.mask != 0xFFFFFFFF and not self.any_bit:
            loads.append((_AND, 0, 0, self.mask))
        return loads


@final
@dataclass(frozen=True, slots=True)
class Rule:
    """What a filter does with one syscall: ``action`` when ``when`` holds (or
    always, without a condition), ``otherwise`` when it does not."""

    syscall: str
    action: int
    when: Arg | None = None
    otherwise: int = ALLOW

    def body(self) -> list[Instruction]:
        """Instructions that decide this syscall; every path ends in a return."""
        when = self.when
        if when is None:
            return [_ret(self.action)]
        if when.any_bit:
            return [*when.load(), (_JSET, 0, 1, when.mask), _ret(self.action), _ret(self.otherwise)]
        n = len(when.equals)
        tests = [(_JEQ, n - i, 0, value) for i, value in enumerate(when.equals)]
        return [*when.load(), *tests, _ret(self.otherwise), _ret(self.action)]


@final
@dataclass(frozen=True, slots=True)
class Filter:
    """A seccomp policy: the first rule naming a syscall decides it; ``default``
    decides every other.  A rule for a syscall this architecture lacks is left out."""

    name: str
    rules: tuple[Rule, ...]
    default: int

    def program(self) -> list[Instruction]:
        """The BPF program (see the module for the architecture check)."""
        arch = syscalls.seccomp_arch()
        if not arch:
            raise OSError(errno.ENOSYS, "sandboxfs has no seccomp filter for this architecture")
        program: list[Instruction] = [
            (_LD_ABS, 0, 0, _ARCH),
            (_JEQ, 1, 0, arch),
            _ret(KILL_PROCESS),
            (_LD_ABS, 0, 0, _NR),
        ]
        x32 = syscalls.seccomp_x32_bit()
        if x32:
            program += [(_JGE, 0, 1, x32), _ret(KILL_PROCESS)]
        for rule in self.rules:
            number = syscalls.syscall_number(rule.syscall)
            if number is None:
                continue
            body = rule.body()
            program += [(_JEQ, 0, len(body), number), *body]
        program.append(_ret(self.default))
        return program

    def action_for(self, name: str) -> Rule | None:
        """The rule deciding ``name``, or None (the default decides)."""
        return next((rule for rule in self.rules if rule.syscall == name), None)


# -- the server's filter -------------------------------------------------------------------

#: Syscalls no serving process makes, by what they would let code in it do.
DENIED_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "start programs": ("execve", "execveat"),
    "read, write or steer other processes": (
        "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
        "kcmp", "migrate_pages", "move_pages", "perf_event_open",
    ),
    "mount, unmount or change the root": (
        "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
        "fsconfig", "fsmount", "fspick", "mount_setattr",
    ),
    "enter or make namespaces": ("unshare", "setns"),
    "load code into the kernel": (
        "bpf", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
        "create_module", "uselib",
    ),
    "reach rarely used kernel code": (
        "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl",
        "add_key", "request_key", "personality", "get_kernel_syms", "query_module",
        "nfsservctl", "lookup_dcookie", "fanotify_init",
    ),
    "open files by handle, without resolving a path": ("open_by_handle_at", "name_to_handle_at"),
    "change the machine": (
        "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm", "quotactl",
        "quotactl_fd", "sethostname", "setdomainname", "settimeofday", "clock_settime",
        "clock_adjtime", "adjtimex", "vhangup",
    ),
}  # fmt: skip

#: Every syscall the server's filter denies outright (EPERM).
DENIED: Final = tuple(name for names in DENIED_GROUPS.values() for name in names)
#: The calls a process that starts other programs (the tenants' front) keeps.
EXEC: Final = DENIED_GROUPS["start programs"]

#: The file type bits of a mode (``stat.S_IFMT`` is a function).
_S_IFMT: Final = 0o170000
#: clone flags that make a new namespace.
CLONE_NAMESPACES: Final = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)


def _common_rules() -> list[Rule]:
    """The conditional rules every serving process has."""
    return [
        Rule("clone", DENY, Arg(0, CLONE_NAMESPACES, any_bit=True)),
        Rule("clone3", fail_with(errno.ENOSYS)),  # its flags are behind a pointer
        Rule("mknod", DENY, Arg(1, _S_IFMT, (stat.S_IFCHR, stat.S_IFBLK))),
        Rule("mknodat", DENY, Arg(2, _S_IFMT, (stat.S_IFCHR, stat.S_IFBLK))),
        Rule("ioctl", DENY, Arg(1, equals=(termios.TIOCSTI,))),
    ]


def _socket_rule(families: Iterable[int]) -> Rule:
    allowed = tuple(sorted(set(families)))
    if not allowed:
        return Rule("socket", DENY)
    return Rule("socket", ALLOW, Arg(0, equals=allowed), otherwise=DENY)


def family_names(families: Iterable[int]) -> str:
    """``AF_INET, AF_UNIX`` ... for a log line."""
    names = []
    for family in sorted(set(families)):
        try:
            names.append(socket.AddressFamily(family).name)
        except ValueError:
            names.append(str(family))
    return ", ".join(names) or "none"


def server_filter(families: Iterable[int]) -> Filter:
    """A serving process's filter; ``socket`` only for ``families`` (none over stdio)."""
    allowed = tuple(families)
    rules = [*(Rule(name, DENY) for name in DENIED), *_common_rules(), _socket_rule(allowed)]
    return Filter(f"server (sockets: {family_names(allowed)})", tuple(rules), ALLOW)


def front_filter(families: Iterable[int]) -> Filter:
    """The tenants' front: the server's, with ``execve`` (it starts its workers, which
    add their own filter) and unix sockets (it connects to them)."""
    allowed = (*families, socket.AF_UNIX)
    rules = [
        *(Rule(name, DENY) for name in DENIED if name not in EXEC),
        *_common_rules(),
        _socket_rule(allowed),
    ]
    return Filter(f"front (sockets: {family_names(allowed)})", tuple(rules), ALLOW)


# -- code_map's parser processes (allow-lists) ----------------------------------------------

#: What a parse helper does: memory, its timer, the clock, signals, exit.
_HELPER_CALLS: Final = (
    "brk", "mmap", "munmap", "mremap", "madvise", "futex", "setitimer", "clock_gettime",
    "gettimeofday", "rt_sigreturn", "rt_sigprocmask", "restart_syscall", "exit", "exit_group",
    "getpid", "gettid",
)  # fmt: skip
#: What the supervisor adds: forking helpers, handing their sockets over, reaping them;
#: and what a helper does between its fork and its own filter.
_SUPERVISOR_CALLS: Final = (
    "read", "write", "close", "close_range", "dup2", "dup3", "fcntl", "socketpair", "sendmsg",
    "recvmsg", "recvfrom", "getsockname", "getpeername", "poll", "ppoll", "wait4", "kill",
    "seccomp", "prctl", "prlimit64", "setrlimit", "set_robust_list", "rseq", "rt_sigaction",
    "sigaltstack", "getrandom", "mprotect",
)  # fmt: skip


def supervisor_filter() -> Filter:
    """code_map's parse supervisor: it forks helpers (``clone`` without namespaces;
    ``clone3`` answers ENOSYS so the C library uses ``clone``), hands their sockets
    to the server and reaps them; everything else kills it."""
    rules = [
        Rule("clone", KILL_PROCESS, Arg(0, CLONE_NAMESPACES, any_bit=True)),
        Rule("clone3", fail_with(errno.ENOSYS)),
        Rule("socketpair", ALLOW, Arg(0, equals=(socket.AF_UNIX,)), otherwise=KILL_PROCESS),
        *(Rule(name, ALLOW) for name in (*_HELPER_CALLS, *_SUPERVISOR_CALLS)),
    ]
    return Filter("parse supervisor", tuple(rules), KILL_PROCESS)


def helper_filter(channel: int) -> Filter:
    """A parse helper: ``read`` and ``write`` on ``channel`` alone (its socket to the
    server), memory, its timer, exit; everything else kills it."""
    only = Arg(0, equals=(channel,))
    rules = [
        Rule("read", ALLOW, only, otherwise=KILL_PROCESS),
        Rule("write", ALLOW, only, otherwise=KILL_PROCESS),
        *(Rule(name, ALLOW) for name in _HELPER_CALLS),
    ]
    return Filter("parse helper", tuple(rules), KILL_PROCESS)


# -- applying one ------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class SeccompStatus:
    """Whether a filter was applied, and a line for the log."""

    enforced: bool
    detail: str


def unavailable_reason() -> str | None:
    """Why this kernel or build cannot filter syscalls, or None when it can."""
    if not syscalls.seccomp_arch():
        return "sandboxfs has no seccomp filter for this architecture"
    try:
        if not syscalls.seccomp_action_available(KILL_PROCESS):
            return "the kernel does not filter syscalls with seccomp"
    except OSError as exc:
        return f"the kernel's seccomp cannot be queried: {exc.strerror}"
    return None


def apply(policy: Filter) -> SeccompStatus:
    """Install ``policy`` on every thread of this process (and its future children).

    Returns what was enforced; the filter is not applied (``enforced`` False) where
    the kernel or this build cannot filter syscalls; raises OSError if the kernel
    refused the filter."""
    reason = unavailable_reason()
    if reason is not None:
        return SeccompStatus(False, reason)
    syscalls.set_no_new_privs()
    syscalls.seccomp_install(policy.program(), tsync=True)
    return SeccompStatus(True, f"seccomp: {policy.name} filter applied")

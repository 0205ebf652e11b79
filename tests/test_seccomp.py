"""The seccomp layer (issue 28): a child confined with the server's filter tries every
denied call and is refused; the same calls in an unconfined child reach the kernel
(none answers EPERM there), so each refusal is the filter's.

Every attempt passes arguments the kernel rejects (a pointer it cannot read, an
invalid flag, descriptor -1): should a call get through, it fails harmlessly.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import stat
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import Tree
from mcp_client import INIT_2025, spawn_stdio
from sandboxfs.binding import syscalls
from sandboxfs.cli.arguments import EXIT_USAGE
from sandboxfs.cli.main import main
from sandboxfs.core import seccomp

#: The calls issue 28 names; the server's filter must deny each one.
ISSUE_DENIED = (
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "mount",
    "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "unshare", "setns", "init_module", "finit_module",
    "kexec_load", "kexec_file_load", "personality",
)  # fmt: skip

BAD = 1  # an address the kernel cannot read
CLONE_NEWUSER = 0x10000000
CLONE_FS = 0x00000200
AT_FDCWD = -100

#: Arguments per call that make it fail harmlessly if the kernel ever ran it.
ARGUMENTS: dict[str, tuple[int, ...]] = {
    "execve": (BAD, BAD, BAD),
    "execveat": (-1, BAD, BAD, BAD, 0),
    "ptrace": (-1, 0, 0, 0),
    "process_vm_readv": (1, BAD, 1, BAD, 1, 0),
    "process_vm_writev": (1, BAD, 1, BAD, 1, 0),
    "process_madvise": (-1, BAD, 1, 0, 0),
    "pidfd_getfd": (-1, 0, 0),
    "kcmp": (-1, -1, 0, 0, 0),
    "migrate_pages": (0, 1, BAD, BAD),
    "move_pages": (0, 1, BAD, BAD, BAD, 0),
    "perf_event_open": (BAD, 0, -1, -1, 0),
    "mount": (BAD, BAD, BAD, 0, 0),
    "umount2": (BAD, 0),
    "pivot_root": (BAD, BAD),
    "chroot": (BAD,),
    "move_mount": (-1, BAD, -1, BAD, 0),
    "open_tree": (-1, BAD, 0),
    "fsopen": (BAD, 0),
    "fsconfig": (-1, 0, 0, 0, 0),
    "fsmount": (-1, 0, 0),
    "fspick": (-1, BAD, 0),
    "mount_setattr": (-1, BAD, 0, BAD, 0),
    "unshare": (0xFFFFFFFF,),
    "setns": (-1, 0),
    "bpf": (-1, 0, 0),
    "init_module": (BAD, 0, BAD),
    "finit_module": (-1, BAD, 0),
    "delete_module": (BAD, 0),
    "kexec_load": (0, 0, 0, 0xFFFFFFFF),
    "kexec_file_load": (-1, -1, 0, 0, 0xFFFFFFFF),
    "create_module": (BAD, 0),
    "uselib": (BAD,),
    "userfaultfd": (0xFFFFFFFF,),
    "io_uring_setup": (0, BAD),
    "io_uring_enter": (-1, 0, 0, 0, 0, 0),
    "io_uring_register": (-1, 0, 0, 0),
    "keyctl": (-1, 0, 0, 0, 0),
    "add_key": (BAD, BAD, 0, 0, 0),
    "request_key": (BAD, BAD, BAD, 0),
    "personality": (0xFFFFFFFF,),  # only asks
    "get_kernel_syms": (BAD,),
    "query_module": (BAD, 0, 0, 0, 0),
    "nfsservctl": (0, 0, 0),
    "lookup_dcookie": (0, BAD, 0),
    "fanotify_init": (0xFFFFFFFF, 0),
    "open_by_handle_at": (-1, BAD, 0),
    "name_to_handle_at": (-1, BAD, BAD, BAD, 0),
    "reboot": (0, 0, 0, 0),
    "swapon": (BAD, 0),
    "swapoff": (BAD,),
    "acct": (BAD,),
    "syslog": (-1, 0, 0),
    "iopl": (99,),
    "ioperm": (0x10000, 1, 1),
    "quotactl": (0, BAD, 0, 0),
    "quotactl_fd": (-1, 0, 0, 0),
    "sethostname": (BAD, 1),
    "setdomainname": (BAD, 1),
    "settimeofday": (BAD, BAD),
    "clock_settime": (-1, BAD),
    "clock_adjtime": (-1, BAD),
    "adjtimex": (BAD,),
    "vhangup": (),  # the child has no terminal: a no-op if it ran
}

#: The conditional rules: (label, call, arguments, what the filter answers).
CONDITIONAL: tuple[tuple[str, str, tuple[int, ...], int], ...] = (
    ("clone-a-namespace", "clone", (CLONE_NEWUSER | CLONE_FS, 0, 0, 0, 0), errno.EPERM),
    ("clone3", "clone3", (BAD, 88), errno.ENOSYS),
    ("mknodat-char", "mknodat", (AT_FDCWD, BAD, stat.S_IFCHR | 0o600, 0), errno.EPERM),
    ("mknodat-block", "mknodat", (AT_FDCWD, BAD, stat.S_IFBLK | 0o600, 0), errno.EPERM),
    ("mknod-char", "mknod", (BAD, stat.S_IFCHR | 0o600, 0), errno.EPERM),
    ("ioctl-TIOCSTI", "ioctl", (-1, termios.TIOCSTI, 0), errno.EPERM),
)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _attempt(name: str, args: tuple[int, ...]) -> tuple[int, str]:
    """One raw syscall: its result and errno name ('' when it succeeded)."""
    number = syscalls.syscall_number(name)
    assert number is not None
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    code = ctypes.get_errno() if result == -1 else 0
    if result >= 0 and name in ("socket", "userfaultfd"):
        os.close(result)
    return int(result), errno.errorcode.get(code, "") if code else ""


def _in_child(
    policy: seccomp.Filter | None, body: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any] | None, int]:
    """Run ``body`` in a forked child (new session, so no terminal), confined by
    ``policy`` when given; its JSON report and how it ended (a signal number, or 0)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            if policy is not None:
                assert seccomp.apply(policy).enforced
            os.write(write_end, json.dumps(body()).encode())
        except BaseException as exc:  # the parent sees the report
            os.write(write_end, json.dumps({"crashed": repr(exc)}).encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    killed = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    report = json.loads(b"".join(chunks)) if chunks else None
    return report, killed


def _needs_seccomp() -> None:
    reason = seccomp.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def _present(name: str) -> bool:
    return syscalls.syscall_number(name) is not None


def _attempts() -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, args in ARGUMENTS.items():
        if _present(name):
            report[name] = _attempt(name, args)
    for label, name, args, _ in CONDITIONAL:
        if _present(name):
            report[label] = _attempt(name, args)
    return report


def test_the_issues_calls_are_all_denied() -> None:
    assert set(ISSUE_DENIED) <= set(seccomp.DENIED)
    assert set(seccomp.DENIED) == set(ARGUMENTS)  # every denied call is attempted below


def test_every_denied_call_is_refused_by_the_filter_alone() -> None:
    _needs_seccomp()
    control, killed = _in_child(None, _attempts)
    assert killed == 0 and control is not None and "crashed" not in control, control
    confined, killed = _in_child(seccomp.server_filter(()), _attempts)
    assert killed == 0 and confined is not None and "crashed" not in confined, confined
    checked = 0
    for name in ARGUMENTS:
        if name not in control:
            continue  # this architecture has no such call
        assert control[name][1] != "EPERM", f"{name} is refused without the filter: {control[name]}"
        assert confined[name] == [-1, "EPERM"], (name, confined[name])
        checked += 1
    for label, _, _, answer in CONDITIONAL:
        if label not in control:
            continue
        assert control[label][1] not in ("EPERM", "ENOSYS"), (label, control[label])
        assert confined[label] == [-1, errno.errorcode[answer]], (label, confined[label])
        checked += 1
    assert checked >= len(ISSUE_DENIED) + 4  # the attack really ran


def _sockets() -> dict[str, Any]:
    report: dict[str, Any] = {}
    for family in ("AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET"):
        kind = socket.SOCK_RAW if family in ("AF_NETLINK", "AF_PACKET") else socket.SOCK_STREAM
        report[family] = _attempt("socket", (getattr(socket, family), kind, 0))[1]
    pair = socket.socketpair()  # what trio's wake-up needs, in every mode
    pair[0].close()
    pair[1].close()
    return report


@pytest.mark.parametrize(
    ("mode", "policy", "allowed"),
    [
        ("stdio", seccomp.server_filter(()), set()),
        ("http", seccomp.server_filter((socket.AF_INET,)), {"AF_INET"}),
        ("http-v6", seccomp.server_filter((socket.AF_INET6,)), {"AF_INET6"}),
        ("unix", seccomp.server_filter((socket.AF_UNIX,)), {"AF_UNIX"}),
        ("front", seccomp.front_filter((socket.AF_INET,)), {"AF_INET", "AF_UNIX"}),
    ],
)
def test_sockets_only_of_the_transports_family(
    mode: str, policy: seccomp.Filter, allowed: set[str]
) -> None:
    _needs_seccomp()
    control, _ = _in_child(None, _sockets)
    assert control is not None and set(control.values()) == {""}, control
    confined, killed = _in_child(policy, _sockets)
    assert killed == 0 and confined is not None and "crashed" not in confined, confined
    for family, error in confined.items():
        assert error == ("" if family in allowed else "EPERM"), (mode, family, error)


def _exec_and_threads() -> dict[str, Any]:
    import threading  # noqa: PLC0415 - the child's own

    ran: list[bool] = []
    thread = threading.Thread(target=lambda: ran.append(True))
    thread.start()
    thread.join()
    # os.posix_spawn would start /bin/true if execve were allowed.
    try:
        os.posix_spawn("/bin/true", ["/bin/true"], {})
        spawned = ""
    except OSError as exc:
        spawned = errno.errorcode.get(exc.errno or 0, "")
    fd = os.open("/dev/null", os.O_RDONLY)  # the filter is not about files
    os.close(fd)
    return {"thread": ran == [True], "spawn": spawned}


def test_threads_start_files_open_and_programs_do_not_start() -> None:
    _needs_seccomp()
    confined, killed = _in_child(seccomp.server_filter(()), _exec_and_threads)
    assert killed == 0 and confined is not None, confined
    assert confined["thread"] is True
    assert confined["spawn"] == "EPERM"
    front, killed = _in_child(seccomp.front_filter((socket.AF_INET,)), _exec_and_threads)
    assert killed == 0 and front == {"thread": True, "spawn": ""}, front


def _other_abi() -> dict[str, Any]:
    # getpid through the x32 ABI: another table of numbers, so it is killed.
    getpid = syscalls.syscall_number("getpid")
    assert getpid is not None
    _libc.syscall(ctypes.c_long(syscalls.seccomp_x32_bit() | getpid))
    return {"survived": True}


def test_a_call_through_another_abi_kills_the_process() -> None:
    _needs_seccomp()
    if not syscalls.seccomp_x32_bit():
        pytest.skip("x32 exists only on x86_64")
    report, killed = _in_child(seccomp.server_filter(()), _other_abi)
    assert report is None and killed == signal.SIGSYS


def _helper_calls(channel: int) -> Callable[[], dict[str, Any]]:
    def body() -> dict[str, Any]:
        os.write(channel, b"ok")  # its socket: allowed
        os.write(2, b"")  # anything else: killed
        return {"survived": True}

    return body


def test_a_helper_may_write_only_its_socket() -> None:
    _needs_seccomp()
    ours, theirs = socket.socketpair()
    try:
        report, killed = _in_child(
            seccomp.helper_filter(theirs.fileno()), _helper_calls(theirs.fileno())
        )
        assert ours.recv(2) == b"ok"
    finally:
        ours.close()
        theirs.close()
    assert report is None and killed == signal.SIGSYS


def test_a_typo_in_a_rule_is_an_error_never_a_skipped_rule() -> None:
    bad = seccomp.Filter("bad", (seccomp.Rule("exceve", seccomp.DENY),), seccomp.ALLOW)
    with pytest.raises(ValueError, match=r"not in native/syscalls\.txt"):
        bad.program()


def test_no_and_require_contradict_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--no-seccomp", "--require-seccomp", "DIR"]) == EXIT_USAGE
    assert "--no-seccomp and --require-seccomp contradict each other" in capsys.readouterr().err


def _seccomp_mode(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Seccomp:"):
            return line.split()[1]
    return "?"


@pytest.mark.parametrize(
    ("option", "mode", "logged"),
    [
        ("--require-seccomp", "2", "seccomp: server (sockets: none) filter applied"),
        ("--no-seccomp", "0", "Warning: seccomp disabled (--no-seccomp)"),
    ],
)
def test_the_server_and_its_parser_are_filtered_unless_told_not_to(
    tree: Tree, option: str, mode: str, logged: str
) -> None:
    _needs_seccomp()
    server = spawn_stdio(option, str(tree.root))
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    try:
        server.stdin.write((INIT_2025 + "\n").encode())
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 0  # serving: filtered by now
        assert _seccomp_mode(server.pid) == mode
        [supervisor] = _children_of(server.pid)  # code_map's parse supervisor
        deadline = time.monotonic() + 60  # a generous bound: wait for its first helpers
        while len(_children_of(supervisor)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        helpers = _children_of(supervisor)
        assert len(helpers) >= 2  # forked once it is confined
        assert [_seccomp_mode(p) for p in (supervisor, *helpers)] == [mode] * (1 + len(helpers))
    finally:
        server.stdin.close()
        server.wait(timeout=60)
        log = server.stderr.read().decode()
        server.stdout.close()
        server.stderr.close()
    assert logged in log


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found

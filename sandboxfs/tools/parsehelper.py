"""code_map's parse supervisor and helpers: the only processes where tree-sitter
meets the bytes of files an agent controls.

The server starts the **supervisor** once, at start-up, before it opens any
allowed directory, from a clean ``exec`` (:mod:`sandboxfs.tools.parsepool`): it
inherits no descriptor but its end of a control socket, ``/dev/null`` as stdin
and stdout and the server's stderr, and an environment with nothing of the
server's (no token).  It loads tree-sitter and every grammar, then confines
itself, irreversibly, in this order:

* resource limits: ``RLIMIT_AS`` (``--memory``), no core dumps (``RLIMIT_CORE``
  0: a crash never writes file contents to disk), few descriptors;
* Landlock with **no** filesystem right at all (and no TCP, signals and abstract
  unix sockets scoped), so nothing can be opened, executed or made anywhere;
* a seccomp allow-list (:func:`sandboxfs.core.seccomp.supervisor_filter`):
  anything else kills it.

It forks the first helpers (which compile the queries they need), and on the
server's first request compiles every query (so that later helpers have them
all, and the first call's parses do not share the processors with it); it forks
**helpers** on the server's request and, once a helper says it is
confined, hands its socket to the server over the control socket.  A helper
closes every descriptor but that socket (stdin, stdout and stderr become
``/dev/null``), sets ``RLIMIT_CPU`` (``--cpu-seconds``), and adds its own filter
(:func:`sandboxfs.core.seccomp.helper_filter`): ``read`` and ``write`` on its
socket, memory, its timer and exit; anything else kills it.  It answers
batches of files (:mod:`sandboxfs.tools.parsewire`), each file as it is done,
and arms a timer at the call's deadline: a parse that does not come back in
time (tree-sitter's query cannot be interrupted) is ended by the kernel.  A
helper serves **one** code_map call and is then killed: what one call's files
did to a helper never reaches another call's.

Guarantee of :func:`serve_batches`: every batch read is answered with one frame
per file and a last frame, or the helper exits; it never reads or writes
anything but its socket.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import Final

from sandboxfs.fs import landlock, seccomp
from sandboxfs.tools.codefacts import LANGUAGES
from sandboxfs.tools.codeparse import ParseStopped, extract, load_grammars, prepare
from sandboxfs.tools.parsewire import (
    COMMAND,
    DONE,
    FAILED,
    ITEM_HEADER,
    KILL,
    LATE,
    PARSED,
    REQUEST_HEADER,
    SPAWN,
    SPAWNED,
    TEST_ABORT_ENV,
    decode_item_header,
    decode_request_header,
    encode_extracted,
    encode_frame,
)

#: What a helper says on its socket once it is confined (the supervisor waits for
#: it before handing the socket to the server), and how long it may take.
READY: Final = b"R"
_READY_SECONDS: Final = 30.0
#: Seconds a helper's timer gives a parse beyond the call's deadline.
TIMER_GRACE: Final = 0.5
#: Descriptors the supervisor may hold (its control socket, a socketpair at a time),
#: and the number its control socket gets (it inherits only 0, 1, 2 and that).
_FILES: Final = 16
_CONTROL_FD: Final = 3
#: Children the supervisor keeps at most (the server asks for fewer).
_CHILDREN_MAX: Final = 64


# -- a helper ------------------------------------------------------------------------------


def _read_exact(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``, or None at end of file."""
    parts: list[bytes] = []
    need = size
    while need:
        chunk = os.read(fd, min(need, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        need -= len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _parse_one(
    language: int, data: bytes, deadline: float, abort: bytes | None
) -> tuple[int, bytes]:
    """The status and payload of one file's answer."""
    if abort and abort in data:
        os.abort()
    if time.monotonic() > deadline:
        return LATE, b""
    try:
        found = extract(LANGUAGES[language], data, deadline)
    except ParseStopped:
        return LATE, b""
    except MemoryError:  # RLIMIT_AS: this file is too much for a helper
        return FAILED, b""
    return PARSED, encode_extracted(found.spans, found.references)


def serve_batches(fd: int, abort: bytes | None) -> None:
    """Answer batches on ``fd`` until the server closes it (see the module)."""
    while True:
        header = _read_exact(fd, REQUEST_HEADER)
        if header is None:
            return
        count, deadline = decode_request_header(header)
        items: list[tuple[int, bytes]] = []
        for _ in range(count):
            item = _read_exact(fd, ITEM_HEADER)
            if item is None:
                return
            language, length = decode_item_header(item)
            data = _read_exact(fd, length) if length else b""
            if data is None:
                return
            items.append((language, data))
        signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.0) + TIMER_GRACE)
        for index, (language, data) in enumerate(items):
            status, payload = _parse_one(language, data, deadline, abort)
            _write_all(fd, encode_frame(index, status, payload))
        signal.setitimer(signal.ITIMER_REAL, 0)
        _write_all(fd, encode_frame(len(items), DONE))


def _become_helper(channel: int, settings: argparse.Namespace) -> None:
    """In a child just forked: keep only ``channel``, confine, serve.  Never returns."""
    status = 0
    try:
        os.dup2(0, 2)  # stderr: /dev/null like stdin and stdout
        os.closerange(3, channel)
        os.closerange(channel + 1, _FILES)
        resource.setrlimit(resource.RLIMIT_CPU, (settings.cpu_seconds, settings.cpu_seconds))
        abort = os.environ.get(TEST_ABORT_ENV)
        if settings.seccomp:
            seccomp.apply(seccomp.helper_filter(channel))
        _write_all(channel, READY)  # confined: the supervisor may hand it over
        serve_batches(channel, abort.encode() if abort else None)
    except BaseException:  # a helper ends here, whatever happened
        status = 1
    os._exit(status)


# -- the supervisor ------------------------------------------------------------------------


def _spawn(control: socket.socket, children: set[int], settings: argparse.Namespace) -> None:
    """Fork a helper and hand its socket to the server."""
    if len(children) >= _CHILDREN_MAX:
        return
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the helper
        channel = theirs.detach()
        control.detach()
        ours.close()
        _become_helper(channel, settings)
    children.add(pid)
    theirs.close()
    try:
        waiting = select.poll()
        waiting.register(ours.fileno(), select.POLLIN)
        ready = ours.recv(len(READY)) if waiting.poll(int(_READY_SECONDS * 1000)) else b""
        if ready != READY:  # it could not confine itself: never handed over
            os.kill(pid, signal.SIGKILL)
            return
        socket.send_fds(control, [SPAWNED.pack(pid)], [ours.fileno()])
    finally:
        ours.close()


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)


def supervise(control: socket.socket, settings: argparse.Namespace) -> None:
    """Serve the server's commands until it closes the control socket; then kill
    every helper."""
    children: set[int] = set()
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    try:
        for _ in range(settings.spare):
            _spawn(control, children, settings)
        compiled = False  # the first helpers compile what they need, while it waits
        while True:
            events = poller.poll(5000)
            _reap(children)
            if not events:
                continue
            command = control.recv(COMMAND.size)  # a SOCK_SEQPACKET message: one command
            if not command:
                return
            if len(command) != COMMAND.size:
                continue
            op, pid = COMMAND.unpack(command)
            if op == SPAWN:
                if not compiled:  # once, after the first call: later helpers have it all
                    prepare()
                    compiled = True
                _spawn(control, children, settings)
            elif op == KILL and pid in children:
                _kill(children, [pid])
    except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError):
        return  # the server is gone
    finally:
        _kill(children, list(children))


def _kill(children: set[int], pids: list[int]) -> None:
    """Kill and reap helpers (children not reaped yet: their pids are still theirs)."""
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
        children.discard(pid)


def confine(settings: argparse.Namespace) -> None:
    """The supervisor's own confinement (see the module); raises if a layer that
    the kernel offers could not be applied."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (_FILES, _FILES))
    resource.setrlimit(resource.RLIMIT_AS, (settings.memory, settings.memory))
    landlock.confine_nothing()
    if settings.seccomp:
        status = seccomp.apply(seccomp.supervisor_filter())
        if not status.enforced and settings.require_seccomp:
            raise OSError(f"--require-seccomp: {status.detail}")


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sandboxfs-parse-supervisor")
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--spare", type=int, default=2)
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--memory", type=int, required=True)
    parser.add_argument("--no-seccomp", dest="seccomp", action="store_false")
    parser.add_argument("--require-seccomp", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    settings = _arguments(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when this ends
    if settings.control != _CONTROL_FD:  # every descriptor below _FILES, for the helpers
        os.dup2(settings.control, _CONTROL_FD)
        os.close(settings.control)
    control = socket.socket(fileno=_CONTROL_FD)
    load_grammars()
    try:
        confine(settings)
    except (OSError, RuntimeError) as exc:
        print(f"sandboxfs: error: the code parser cannot be confined: {exc}", file=sys.stderr)
        return 1
    try:
        supervise(control, settings)
    except Exception as exc:  # one line for the operator, never a traceback
        print(f"sandboxfs: error: the code parser's supervisor failed: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

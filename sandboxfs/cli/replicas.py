"""``--workers N``: N server processes behind the one listening socket (HTTP).

Every core serves: the process that set the server up (directories opened,
Landlock and seccomp applied, the listening socket made) forks N replicas and
serves nothing itself.  Each replica is a whole server, Landlocked and filtered
as its parent was, with its own code_map parse supervisor, its own mount table
descriptor and its own event loop; they share nothing but the filesystem (and
the listening socket, from which each accepts connections as it is free to
serve them: a busy process leaves the next connection to an idle one).  What
must hold across processes already does: conditional writes take OFD locks
(tests/test_scale_out.py), and with ``--workspaces`` the key that signs each
``Mcp-Session-Id`` is drawn before the fork, so every replica serves every
session (a session lives in its directory under BASE, not in a process).

The parent speaks for them: it says "serving" once every replica handles its
signals, forwards each SIGTERM or SIGINT it gets (a replica is in a process
group of its own, so a terminal's Ctrl-C reaches only the parent, once),
waits for all of them, and then says once that the server stopped (SIGTERM:
status 0) or prints the one Ctrl-C line (status 130).  A replica that ends
unexpectedly stops the others (status 1).  A replica whose parent is killed
stops as on SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import types
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

import trio

from sandboxfs.cli import logformat
from sandboxfs.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, INTERRUPTED
from sandboxfs.cli.metricsrelay import MetricsRelay
from sandboxfs.core.mounts import MountTable
from sandboxfs.session.dispatcher import SandboxfsServer
from sandboxfs.tools import parsepool
from sandboxfs.tools.parsepool import ParserPool
from sandboxfs.transports.http.server import Replica, SidecarOptions, serve_http

if TYPE_CHECKING:
    from sandboxfs.transports.http.metrics import ServerMetrics

log = logging.getLogger("sandboxfs")

_STOPPING: Final = (signal.SIGTERM, signal.SIGINT)


def serve_replicas(
    count: int,
    serve_one: Callable[[int, Replica], int],
    *,
    announce: Callable[[], None],
    forked: Callable[[], None] = lambda: None,
    grace: float = 10.0,
    relay_metrics: bool = False,
) -> int:
    """Fork ``count`` replicas, each running ``serve_one(index, replica)`` (its exit
    status); wait for them all and return the server's exit status.  ``announce``
    says that the server serves (once every replica is ready); ``forked`` lets the
    parent drop what only the replicas need (the listening socket) once they have it.
    ``relay_metrics``: each replica gets a socket to the parent, which relays the
    replicas' metrics between them (sandboxfs.cli.metricsrelay)."""
    parent_end, child_end = os.pipe2(os.O_CLOEXEC)  # ends when the parent is gone
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    pairs = [socket.socketpair() for _ in range(count)] if relay_metrics else []
    logformat.WRITER.share_with_forks()  # the replicas' lines and the parent's, one at a time
    held = signal.pthread_sigmask(signal.SIG_BLOCK, set(_STOPPING))
    children: dict[int, int] = {}
    try:
        for index in range(count):
            pid = os.fork()
            if pid == 0:  # a replica: never returns
                mine = pairs[index][1].fileno() if pairs else None
                ends = Replica(ready_write, child_end, mine)
                others = [end.fileno() for pair in pairs for end in pair]
                others = [fd for fd in others if fd != mine]
                _replica(index, serve_one, ends, (parent_end, ready_read, *others))
            children[pid] = index
    except OSError as exc:
        log.error("sandboxfs: error: cannot start server process %d: %s", len(children) + 1, exc)
        _stop(children, signal.SIGTERM)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        _reap(children)
        for pair in pairs:
            for end in pair:
                end.close()
        return EXIT_FAILED
    for fd in (child_end, ready_write):
        os.close(fd)
    for _, theirs in pairs:
        theirs.close()
    if pairs:  # started while SIGTERM and SIGINT are held: they interrupt the main thread
        MetricsRelay({index: pair[0] for index, pair in enumerate(pairs)}).start()
    forked()
    return _supervise(children, ready_read, parent_end, held, announce=announce, grace=grace)


def _replica(
    index: int,
    serve_one: Callable[[int, Replica], int],
    replica: Replica,
    parents: tuple[int, ...],
) -> None:
    """The child's side: its own process group, the parent's ends closed, then serve
    (signals stay held until the replica's event loop handles them)."""
    status = EXIT_FAILED
    try:
        os.setpgid(0, 0)
        for fd in parents:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        status = serve_one(index, replica)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else EXIT_FAILED
    except BaseException:
        log.exception("server process %d failed", index + 1)
    finally:
        with contextlib.suppress(Exception):
            logging.shutdown()
            sys.stderr.flush()
        os._exit(status)


def _supervise(
    children: dict[int, int],
    ready: int,
    parent_end: int,
    held: set[int | signal.Signals],
    *,
    announce: Callable[[], None],
    grace: float,
) -> int:
    """The parent's side: forward signals, say "serving" once all are ready, wait for
    every replica, and decide the exit status."""
    count = len(children)
    received: list[signal.Signals] = []
    live = dict(children)

    def forward(signum: int, _frame: types.FrameType | None) -> None:
        received.append(signal.Signals(signum))
        if len(received) == 1 and signum == signal.SIGTERM:
            log.info(
                "SIGTERM: refusing new requests; %d server processes finish the requests in "
                "flight (up to %g s)",
                len(live),
                grace,
            )
        _stop(live, signal.Signals(signum))

    for signum in _STOPPING:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, held - set(_STOPPING))
    said = 0
    while said < count:
        try:
            got = os.read(ready, count - said)
        except OSError:
            break
        if not got:  # every replica's end is closed: one ended before it was ready
            break
        said += len(got)
    os.close(ready)
    failed = said < count and not received
    if failed:
        log.error("sandboxfs: error: a server process ended before it served; stopping the others")
        _stop(live, signal.SIGTERM)
    elif not received:
        announce()
    while live:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid not in live:
            continue  # not a replica (the socket's cleanup helper is waited for elsewhere)
        index = live.pop(pid)
        if not received and not failed:
            code = os.waitstatus_to_exitcode(status)
            log.error(
                "sandboxfs: error: server process %d ended unexpectedly (%s); stopping the others",
                index + 1,
                f"exit status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}",
            )
            failed = True
            _stop(live, signal.SIGTERM)
    os.close(parent_end)
    if failed:
        return EXIT_FAILED
    if received and received[0] == signal.SIGINT:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    log.info("sandboxfs stopped")
    return EXIT_OK


def _stop(children: dict[int, int], signum: signal.Signals) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _reap(children: dict[int, int]) -> None:
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def serve_http_replicas(
    server: SandboxfsServer,
    listeners: tuple[socket.socket, socket.socket | None],
    options: SidecarOptions,
    *,
    pools: Sequence[ParserPool],
    tables: Sequence[MountTable | None],
    metrics: ServerMetrics | None = None,
) -> int:
    """``server`` served over HTTP by ``len(pools)`` replicas: replica i parses with
    ``pools[i]`` and reads the mount table from ``tables[i]`` (a descriptor of its own:
    the kernel's change notice and the read offset belong to an open file).  Every
    replica accepts from both listeners (the MCP port, and ``--metrics``'s if any);
    with ``metrics``, a scrape of any replica shows the sums of all of them."""
    listener, metrics_listener = listeners

    def serve_one(index: int, replica: Replica) -> int:
        for other, pool in enumerate(pools):
            if other != index:
                pool.forget()
        for other, table in enumerate(tables):
            if other != index and table is not None:
                table.close()
        parsepool.install(pools[index])
        server.options = dataclasses.replace(server.options, mounts=tables[index])
        serving = partial(serve_http, metrics=metrics, metrics_listener=metrics_listener)
        stopped_by = trio.run(serving, server, listener, options, replica)
        return EXIT_INTERRUPTED if stopped_by == signal.SIGINT else EXIT_OK

    def announce() -> None:
        log.info("sandboxfs serving MCP on %s", options.endpoint.describe())

    def forked() -> None:
        for held in listeners:
            if held is not None:
                held.close()

    try:
        return serve_replicas(
            len(pools),
            serve_one,
            announce=announce,
            forked=forked,
            grace=options.grace_seconds,
            relay_metrics=metrics is not None,
        )
    finally:
        for pool in pools:
            pool.forget()
        for table in tables:
            if table is not None:
                table.close()

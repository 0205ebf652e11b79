"""The tenants' worker processes: one ordinary sandboxfs server per tenant, supervised.

Each worker is ``python -m sandboxfs --unix <socket> [tenant options] -- <dirs>``,
started through :mod:`sandboxfs.transports.tether` (it dies with the front), with
a random bearer token of its own in ``SANDBOXFS_TOKEN`` that only the front
knows, on a socket in the front's private (0700) run directory.  Its normal
startup opens its tenant's directories and applies Landlock over only those:
the front never opens them and holds none of their descriptors.  The worker gets
no descriptor of the front's but stdin (``/dev/null``), stdout (``/dev/null``)
and stderr (a pipe: each line is relayed to the front's stderr as
``tenant NAME: ...``).

A worker that dies is restarted after a backoff that doubles from
:data:`FIRST_BACKOFF` to :data:`MAX_BACKOFF`; one that dies
:data:`MAX_FAILED_STARTS` times in a row without ever becoming ready is given up
(its requests get 502) until the next reload.  Workers are forked from the
front's main thread, which ``PR_SET_PDEATHSIG`` is tied to.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

import trio

from sandboxfs.transports.connections import SEND_TIMEOUT
from sandboxfs.transports.tenants import Tenant, changed

log = logging.getLogger("sandboxfs")

FIRST_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 5.0
MAX_FAILED_STARTS: Final = 5
#: How long a worker may take from its start to accepting connections.
START_SECONDS: Final = 30.0
#: A worker serving this long is healthy again: its next death restarts it at once.
HEALTHY_SECONDS: Final = 30.0
#: The longest worker log line relayed whole; a longer one is relayed in parts.
_MAX_LINE: Final = 64 * 1024


@final
@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What every worker is started with, besides its tenant's own options."""

    rundir: str
    log_level: str = "info"
    #: Options of the front passed on to every worker (e.g. ``--require-landlock``).
    options: tuple[str, ...] = ()
    #: On stop: how long a worker gets to finish after SIGTERM before SIGKILL.
    grace_seconds: float = 10.0
    #: The worker's --send-timeout: longer than the front's, so that a worker never
    #: cuts off the front while the front waits on a slow client within its own.
    send_timeout: float = 2 * SEND_TIMEOUT
    #: Writes one line of a worker's stderr (tenant name, line) on the front's, whole;
    #: None: as ``tenant NAME: LINE``.
    relay: Callable[[str, bytes], None] | None = None


@final
class Worker:
    """One tenant's worker: started, watched, restarted, stopped."""

    def __init__(self, tenant: Tenant, settings: WorkerSettings, number: int) -> None:
        self.tenant = tenant
        self.settings = settings
        #: Numbered, not named after the tenant: a unix socket's path is short (108 bytes).
        self.socket = os.path.join(settings.rundir, f"{number}.sock")
        #: The bearer token the front presents to this worker, and nobody else knows.
        self.secret = secrets.token_hex(32)
        self.pid: int | None = None
        self.up = False
        self.given_up = False
        self.starts = 0
        #: Drop the worker's log lines instead of relaying them (stopping on Ctrl-C).
        self.quiet = False
        self._ready = trio.Event()
        self._stopping = False
        self._process: subprocess.Popen[bytes] | None = None
        self._done = trio.Event()

    def command(self) -> list[str]:
        """The worker's command line (on the tether)."""
        server = [sys.executable, "-m", "sandboxfs", "--unix", self.socket]
        server += ["--log-level", self.settings.log_level, *self.settings.options]
        server += ["--send-timeout", f"{self.settings.send_timeout:g}"]
        server += self.tenant.options()
        tether = [sys.executable, "-m", "sandboxfs.transports.tether", str(os.getpid())]
        return [*tether, "--", *server]

    async def available(self, seconds: float) -> bool:
        """Wait (at most ``seconds``) for the worker to accept connections."""
        with trio.move_on_after(seconds):
            while not self.up:
                if self.given_up or self._stopping:
                    return False
                await self._ready.wait()
        return self.up

    async def run(self) -> None:
        """Start the worker and keep it running until :meth:`stop`."""
        failed = 0
        backoff = FIRST_BACKOFF
        try:
            while not self._stopping:
                started = trio.current_time()
                code, became_ready = await self._run_once()
                if self._stopping:
                    break
                healthy = trio.current_time() - started >= HEALTHY_SECONDS
                failed = 0 if became_ready else failed + 1
                if healthy:
                    backoff = FIRST_BACKOFF
                if failed >= MAX_FAILED_STARTS:
                    log.error(
                        "tenant %s: worker failed %d starts in a row (exit status %s); "
                        "its requests get 502 until the tenants file is reloaded (SIGHUP)",
                        self.tenant.name,
                        failed,
                        code,
                    )
                    self.given_up = True
                    self._wake()
                    return
                log.warning(
                    "tenant %s: worker exited (status %s); restarting in %g s",
                    self.tenant.name,
                    code,
                    backoff,
                )
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        finally:
            self._done.set()

    async def _run_once(self) -> tuple[int, bool]:
        """Run one worker process to its end: its exit status, and whether it got ready."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        env = {**os.environ, "SANDBOXFS_TOKEN": self.secret}
        # Forked here, in the front's main thread (never a worker thread: the parent
        # death signal belongs to the thread that forks).
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            close_fds=True,
            start_new_session=True,  # signals to the front's process group stay the front's
        )
        self._process = process
        self.pid = process.pid
        self.starts += 1
        log.info("tenant %s: worker started (pid %d)", self.tenant.name, process.pid)
        assert process.stderr is not None
        relay = trio.lowlevel.FdStream(os.dup(process.stderr.fileno()))
        process.stderr.close()
        ready = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._relay, relay)
                probe = trio.CancelScope()

                async def probing() -> None:
                    nonlocal ready
                    with probe:
                        ready = await self._probe()

                nursery.start_soon(probing)
                code = await _wait(process)
                probe.cancel()
        finally:
            self.up = False
            self.pid = None
            self._process = None
            self._wake()
            if process.poll() is None:  # cancelled: never leave it running
                process.kill()
                process.wait()
        return code, ready

    async def _probe(self) -> bool:
        """Wait until the worker accepts connections; then it is up."""
        delay = 0.005
        with trio.move_on_after(START_SECONDS):
            while True:
                try:
                    stream = await trio.open_unix_socket(self.socket)
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ECONNREFUSED):
                        raise
                else:
                    await stream.aclose()
                    self.up = True
                    self._wake()
                    log.info("tenant %s: worker ready (pid %s)", self.tenant.name, self.pid)
                    return True
                await trio.sleep(delay)  # polling for the socket: nothing to wait on
                delay = min(delay * 2, 0.2)
        log.error("tenant %s: worker not ready after %g s", self.tenant.name, START_SECONDS)
        return False

    async def _relay(self, stream: trio.lowlevel.FdStream) -> None:
        """The worker's stderr, line by line, on the front's stderr."""
        prefix = f"tenant {self.tenant.name}: ".encode()
        pending = b""
        async with stream:
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > _MAX_LINE:  # a line that never ends: shown in parts
                    lines.append(pending)
                    pending = b""
                if self.quiet:
                    continue
                for line in lines:
                    self._relay_line(prefix, line)
        if pending and not self.quiet:
            self._relay_line(prefix, pending)

    def _relay_line(self, prefix: bytes, line: bytes) -> None:
        if self.settings.relay is not None:
            self.settings.relay(self.tenant.name, line)
            return
        sys.stderr.buffer.write(prefix + line + b"\n")
        sys.stderr.buffer.flush()

    def _wake(self) -> None:
        """Wake those waiting for readiness (they look again at ``up``)."""
        old, self._ready = self._ready, trio.Event()
        old.set()

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period; returns once it has ended."""
        self._stopping = True
        self._wake()
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.settings.grace_seconds):
                await self._done.wait()
            if process.poll() is None:
                process.kill()
        await self._done.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)


async def _wait(process: subprocess.Popen[bytes]) -> int:
    """Wait for a child to exit (through a pidfd, without a thread); its exit status."""
    pidfd = os.pidfd_open(process.pid)
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    return process.wait()


@final
class Workers:
    """The workers of every tenant, by name; :meth:`apply` makes them match a tenants file."""

    def __init__(self, settings: WorkerSettings, nursery: trio.Nursery) -> None:
        self.settings = settings
        self._nursery = nursery
        self.by_name: dict[str, Worker] = {}
        self._numbers = itertools.count(1)

    async def apply(self, tenants: Mapping[str, Tenant]) -> None:
        """Start workers for added tenants, stop removed ones', restart those whose
        options changed; an unchanged tenant (or one whose token alone changed)
        keeps its worker."""
        stopping = [
            worker
            for name, worker in self.by_name.items()
            if name not in tenants or changed(worker.tenant, tenants[name])
        ]
        for stopped in stopping:
            del self.by_name[stopped.tenant.name]
            log.info("tenant %s: stopping its worker", stopped.tenant.name)
        await _stop_all(stopping)
        for name, tenant in tenants.items():
            worker = self.by_name.get(name)
            if worker is not None and worker.given_up:
                await worker.stop()  # a reload gives it another chance
                worker = None
            if worker is None:
                worker = Worker(tenant, self.settings, next(self._numbers))
                self.by_name[name] = worker
                self._nursery.start_soon(worker.run)
            else:
                worker.tenant = tenant  # the same worker; the new token
        log.info("tenants: %s", ", ".join(sorted(tenants)) or "none")

    def unserved(self) -> str | None:
        """Which tenants are not being served right now (a worker starting, restarting
        or given up), counted in one line; None when every one is."""
        down = [worker for worker in self.by_name.values() if not worker.up]
        if not down:
            return None
        given_up = sum(worker.given_up for worker in down)
        what = f"{len(down)} of {len(self.by_name)} tenants not served"
        return f"{what} ({given_up} given up after failed starts)" if given_up else what

    async def stop(self, *, quiet: bool = False) -> None:
        """Stop every worker (``quiet``: without relaying what they log meanwhile)."""
        workers = list(self.by_name.values())
        self.by_name.clear()
        for worker in workers:
            worker.quiet = quiet
        await _stop_all(workers)


async def _stop_all(workers: Sequence[Worker]) -> None:
    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(worker.stop)

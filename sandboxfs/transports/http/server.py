"""Streamable HTTP for the container sidecar: sandboxfs's MCP endpoint
(:mod:`sandboxfs.transports.http.endpoint`) under Hypercorn's trio worker.

In front of the MCP endpoint (``/mcp``) sit, in order: ``/healthz`` (liveness:
200 while the process serves HTTP at all) and ``/readyz`` (readiness: 200 only
while everything configured is being served, 503 saying what is not; no
authentication for either: they are for probes; ``/readyz`` and every other
request answer 503 once shutting down), bearer-token authentication
(compared in constant time; 401 otherwise); the endpoint then checks Host and
Origin exactly against DNS rebinding (421 / 403), refuses ambiguous framing
(400) and methods other than POST (405), and caps the body (413).
The listening socket is made before Landlock applies, so the process needs no
network rights afterwards.  On SIGTERM (or SIGINT: Ctrl-C) the server refuses
new requests, lets calls in flight finish within a grace period (a second signal
ends the wait), then stops listening and returns the signal.  A client that
takes none of its answer for ``--send-timeout`` seconds is cut off and its
answer dropped (:mod:`sandboxfs.transports.http.connections`).

HTTP serves the 2026-07-28 protocol and the 2025 era statelessly, so any number
of sidecar instances can answer any request (except that with ``--workspaces`` a
2025-era Mcp-Session-Id is signed with a per-process key: only the instance that
issued it accepts it; tests/test_scale_out.py); client Roots are not used: the
command-line directories are the whole allow-list.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import signal
import socket
import stat
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import trio

from sandboxfs.session import SandboxfsServer
from sandboxfs.transports.http.connections import SEND_TIMEOUT, serve_connections
from sandboxfs.transports.http.endpoint import HttpPolicy, McpEndpoint

if TYPE_CHECKING:
    from sandboxfs.transports.http.metrics import HttpMetrics

log = logging.getLogger("sandboxfs")

#: The environment variable holding the bearer token, when no --token-file is given.
TOKEN_ENV: Final = "SANDBOXFS_TOKEN"  # noqa: S105 - a variable name, not a secret
MCP_PATH: Final = "/mcp"
METRICS_PATH: Final = "/metrics"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@final
@dataclass(frozen=True)
class Endpoint:
    """Where to listen: a TCP host and port, or a unix socket path."""

    host: str | None = None
    port: int | None = None
    unix: str | None = None

    @classmethod
    def parse_tcp(cls, text: str, option: str = "--http") -> Endpoint:
        """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (loopback); port 0 picks a free
        one.  Raises ValueError saying what is wrong (naming ``option``)."""
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{option} needs HOST:PORT, got {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise ValueError(f"{option}: {host!r} is not an IPv6 address") from None
        elif ":" in host:
            raise ValueError(f"{option}: put an IPv6 address in brackets, as in [{host}]:{port}")
        number = int(port)
        if number > 65535:
            raise ValueError(f"{option}: port {number} is out of range (0 to 65535)")
        return cls(host=host or "127.0.0.1", port=number)

    @property
    def loopback(self) -> bool:
        if self.unix is not None:
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host or "").is_loopback
        except ValueError:
            return False

    def bound(self, sock: socket.socket) -> Endpoint:
        """This endpoint with the port the listening socket really got (for port 0)."""
        if self.unix is not None:
            return self
        return replace(self, port=sock.getsockname()[1])

    def describe(self) -> str:
        """The URL a client uses (an IPv6 address in brackets)."""
        if self.unix is not None:
            return f"unix:{self.unix}"
        host = f"[{self.host}]" if ":" in (self.host or "") else self.host
        return f"http://{host}:{self.port}{MCP_PATH}"


def listen(endpoint: Endpoint) -> socket.socket:
    """The listening socket, made now (before Landlock); a unix socket is 0600."""
    if endpoint.unix is not None:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(endpoint.unix).st_mode):
                os.unlink(endpoint.unix)  # a stale socket from an earlier run
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)
        try:
            sock.bind(endpoint.unix)
            os.chmod(endpoint.unix, 0o600)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old_mask)
    else:
        family = socket.AF_INET6 if ":" in (endpoint.host or "") else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((endpoint.host, endpoint.port))
        except BaseException:
            sock.close()
            raise
    sock.listen(128)
    sock.set_inheritable(True)  # Hypercorn adopts it through fd://
    return sock


async def _plain(
    send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to set up or tear down: acknowledge both."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class Measured(Protocol):
    """What a gate counts its traffic with and shows at ``/metrics``
    (:mod:`sandboxfs.transports.http.metrics`)."""

    http: HttpMetrics

    async def exposition(self) -> bytes: ...


@final
@dataclass
class Gate:
    """The ASGI front: probes, then authentication, then the MCP app.

    While draining (after SIGTERM) new requests get 503 and ``idle`` is set once
    the last request in flight has finished.  ``/readyz`` asks ``unready`` what
    configured is not being served (None: all of it).
    """

    app: ASGIApp
    token: str | None
    #: Instead of one token, a check of the one presented (the tenants' front).
    check: Callable[[str], bool] | None = None
    #: What is configured but not served right now, in one line; None when all is.
    unready: Callable[[], str | None] | None = None
    #: The metrics: traffic at /mcp counted, and shown at /metrics (behind the token).
    metrics: Measured | None = None
    draining: bool = False
    in_flight: int = 0
    idle: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ValueError("an empty bearer token is no credential")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})  # refused: 403
            return
        path = scope.get("path", "")
        if path in ("/healthz", "/readyz") or self.draining:
            await self._probe(path, send)
            return
        if (self.token is not None or self.check is not None) and not self._authorized(scope):
            if self.metrics is not None:
                self.metrics.http.answered(401)
            await _plain(
                send,
                401,
                b"Unauthorized: send 'Authorization: Bearer <token>'\n",
                [(b"www-authenticate", b'Bearer realm="sandboxfs"')],
            )
            return
        if path == METRICS_PATH and self.metrics is not None:
            from sandboxfs.transports.http.metrics import MetricsApp  # noqa: PLC0415

            await MetricsApp(self.metrics.exposition)(scope, receive, send)
            return
        if path != MCP_PATH:
            await _plain(send, 404, b"Not Found: MCP is served at /mcp\n")
            return
        self.in_flight += 1
        try:
            if self.metrics is None:
                await self.app(scope, receive, send)
            else:
                await self.metrics.http.measured(self.app, scope, receive, send)
        finally:
            self.in_flight -= 1
            if self.draining and self.in_flight == 0:
                self.idle.set()

    async def _probe(self, path: str, send: Send) -> None:
        """``/healthz``: alive (even while draining).  ``/readyz``, and anything while
        draining: 503 saying why, or 200."""
        if path == "/healthz":
            await _plain(send, 200, b"ok\n")
            return
        if self.draining:
            await _plain(send, 503, b"shutting down\n", [(b"connection", b"close")])
            return
        missing = None if self.unready is None else self.unready()
        if missing is not None:
            await _plain(send, 503, f"not ready: {missing}\n".encode())
        else:
            await _plain(send, 200, b"ready\n")

    async def drain(self, seconds: float) -> None:
        """Refuse new requests, then wait (at most ``seconds``) for those in flight."""
        self.draining = True
        if self.in_flight == 0:
            return
        with trio.move_on_after(seconds):
            await self.idle.wait()

    def _authorized(self, scope: Scope) -> bool:
        presented = bearer(scope)
        if presented is None:
            return False
        if self.check is not None:
            return self.check(presented)
        assert self.token is not None
        return hmac.compare_digest(presented.encode(), self.token.encode())


def bearer(scope: Scope) -> str | None:
    """The bearer token a request presents (its first Authorization header), or None."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, presented = value.decode("latin-1").partition(" ")
            return presented.strip() if scheme.lower() == "bearer" else None
    return None


@final
@dataclass(frozen=True)
class Replica:
    """This process is one of several serving one listener (``--workers``), started
    by a parent that speaks for them all (sandboxfs.cli.replicas).

    ``ready``: a pipe to the parent, written once this process handles SIGTERM and
    SIGINT (which the parent held back until then); the parent says "serving" once
    every process has.  ``parent``: a pipe from the parent, which ends when the
    parent is gone (killed): this process then stops as on SIGTERM.  The parent
    forwards each signal it gets, says that the server stopped, and prints the
    Ctrl-C line, so a replica logs the stop only when it has calls in flight."""

    ready: int
    parent: int
    #: A socket to the parent, through which this process's metrics and the other
    #: processes' are gathered for a scrape (sandboxfs.transports.http.replicametrics).
    metrics: int | None = None


@final
@dataclass(frozen=True)
class SidecarOptions:
    endpoint: Endpoint
    token: str | None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    json_response: bool = False
    max_body: int = 16 * 1024 * 1024
    grace_seconds: float = 10.0
    #: A client that takes none of its answer for this long is cut off.
    send_timeout: float = SEND_TIMEOUT


async def serve_http(
    server: SandboxfsServer,
    listener: socket.socket,
    options: SidecarOptions,
    replica: Replica | None = None,
    *,
    metrics: Measured | None = None,
    metrics_listener: socket.socket | None = None,
) -> signal.Signals | None:
    """Serve until SIGTERM or SIGINT, then drain calls in flight and return the
    signal that stopped it."""
    gate = Gate(
        McpEndpoint(server, http_policy(options)),
        options.token,
        unready=lambda: unserved(server),
        metrics=metrics,
    )
    tasks: list[Callable[[], Awaitable[None]]] = []
    if replica is not None and replica.metrics is not None and metrics is not None:
        from sandboxfs.transports.http.metrics import ServerMetrics  # noqa: PLC0415
        from sandboxfs.transports.http.replicametrics import ReplicaMetrics  # noqa: PLC0415

        assert isinstance(metrics, ServerMetrics)  # (what serves /metrics of a server)
        merged = ReplicaMetrics(metrics, replica.metrics)
        gate.metrics = merged
        tasks.append(merged.answer_parent)
    return await serve_gate(
        gate, listener, options, replica, metrics_listener=metrics_listener, tasks=tasks
    )


def unserved(server: SandboxfsServer) -> str | None:
    """Why a server serves nothing (no directory in its allow-list, and no
    workspaces to make sessions in), or None."""
    if server.options.workspaces is not None or not server.access.current.allow.empty:
        return None
    return "no directory is served (the allow-list is empty)"


def http_policy(options: SidecarOptions) -> HttpPolicy:
    """What the endpoint accepts (Host, Origin, body size), for these options."""
    endpoint = options.endpoint
    return HttpPolicy.for_endpoint(
        endpoint.host if endpoint.unix is None else None,
        endpoint.port,
        allowed_hosts=options.allowed_hosts,
        allowed_origins=options.allowed_origins,
        max_body=options.max_body,
        json_only=options.json_response,
    )


async def serve_gate(
    gate: Gate,
    listener: socket.socket,
    options: SidecarOptions,
    replica: Replica | None = None,
    *,
    metrics_listener: socket.socket | None = None,
    tasks: Sequence[Callable[[], Awaitable[None]]] = (),
) -> signal.Signals | None:
    """Serve ``gate`` under Hypercorn until SIGTERM or SIGINT, then drain calls in
    flight and return the signal that stopped it.  With ``metrics_listener`` (the
    ``--metrics`` port), the gate's metrics are served there too, without a token;
    ``tasks`` run beside the server until it stops.

    SIGTERM (a supervisor) is logged; SIGINT (Ctrl-C) is quiet unless calls are in
    flight, and a second signal ends the wait for them.
    """
    from hypercorn.config import Config  # noqa: PLC0415 - a stdio server never needs it

    endpoint = options.endpoint
    config = Config()
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 1.0  # requests have drained by the time Hypercorn stops
    stopping = trio.Event()
    stopped_by: list[signal.Signals] = []

    async def watch_signals(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            if replica is not None:  # the parent held them back until now
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
            task_status.started()
            async for signum in signals:
                stopped_by.append(signal.Signals(signum))
                break
            if replica is None or gate.in_flight:
                _announce(stopped_by[0], gate, options)
            async with trio.open_nursery() as draining:

                async def again() -> None:
                    async for _ in signals:
                        draining.cancel_scope.cancel()  # a second signal: stop now
                        return

                draining.start_soon(again)
                await gate.drain(options.grace_seconds)
                draining.cancel_scope.cancel()
            stopping.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(watch_signals)
        for task in tasks:
            nursery.start_soon(task)
        if metrics_listener is not None and gate.metrics is not None:
            from sandboxfs.transports.http.metrics import MetricsApp  # noqa: PLC0415

            nursery.start_soon(
                partial(
                    serve_connections,
                    MetricsApp(gate.metrics.exposition),
                    config,
                    metrics_listener,
                    send_timeout=options.send_timeout,
                    stopping=stopping,
                )
            )
        # Said once SIGTERM and SIGINT are caught: the line is a true ready signal.
        if replica is None:
            log.info("sandboxfs serving MCP on %s", endpoint.describe())
        else:
            nursery.start_soon(_outlive_parent, replica.parent)
            os.write(replica.ready, b"r")
        await serve_connections(
            gate, config, listener, send_timeout=options.send_timeout, stopping=stopping
        )
        nursery.cancel_scope.cancel()
    if stopped_by != [signal.SIGINT] and replica is None:
        log.info("sandboxfs stopped")
    return stopped_by[0] if stopped_by else None


async def _outlive_parent(parent: int) -> None:
    """A replica whose parent is gone (killed: it had no time to forward a signal)
    stops as on SIGTERM."""
    while True:
        await trio.lowlevel.wait_readable(parent)
        try:
            if os.read(parent, 64):
                continue  # the parent never writes; nothing to wait for but the end
        except BlockingIOError:
            continue
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        return


def _announce(signum: signal.Signals, gate: Gate, options: SidecarOptions) -> None:
    """Say that the server is stopping: always on SIGTERM; on Ctrl-C only when calls
    are in flight (the command line then says it was interrupted, in one line)."""
    if signum != signal.SIGINT:
        log.info(
            "%s: refusing new requests; finishing %d request(s) in flight (up to %g s)",
            signum.name,
            gate.in_flight,
            options.grace_seconds,
        )
    elif gate.in_flight:
        log.warning(
            "Ctrl-C: finishing %d request(s) in flight (up to %g s; Ctrl-C again to stop now)",
            gate.in_flight,
            options.grace_seconds,
        )
